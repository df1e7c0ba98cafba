"""Streamlit helpers for the Serving page: the engine's own server as a child process shared by every session
(one per dashboard, with a clear stop), the sweep's table and plots, and the knee-versus-calculator sentence
(built from the numbers it sits beside)."""

from __future__ import annotations

import csv
import io

import plotly.graph_objects as go
import streamlit as st

from engine.calc.capacity import CapacityPrediction
from engine.loadgen.sweep import SweepResult
from engine.serving.process import ServerProcess
from ui.charts import Series, two_panels
from ui.common import show_error
from ui.widgets import refused, spec_input


class ServerSlot:
    """The one server of a backend this dashboard may run (started from the page, stopped from it): the engine's
    own (`python -m engine serve`) or vLLM's (`--backend vllm`, engine/backends/vllm.py), both as that command in a
    child process, so the command stops whatever it started."""

    def __init__(self, backend: str = "engine") -> None:
        self.backend = backend
        self.proc: ServerProcess | None = None
        self.settings: dict = {}

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.alive

    def start(
        self,
        model: str,
        max_batch: int,
        *,
        dtype: str = "auto",
        threads: int | None = None,
        kv_gb: float | None = None,
    ) -> ServerProcess:
        """Start and wait until it serves; a failure raises RuntimeError with the command's own one-line reason."""
        from engine.backends.vllm import command_reason, wait_command_ready

        self.stop()
        extra = ["--dtype", dtype]
        if threads:
            extra += ["--threads", str(threads)]
        if kv_gb:
            extra += ["--kv-budget-bytes", str(int(kv_gb * 1e9))]
        if self.backend == "vllm":
            extra += ["--backend", "vllm"]
        self.proc = ServerProcess(model, max_batch=max_batch, extra=tuple(extra))
        self.settings = {
            "model": model,
            "max_batch": max_batch,
            "dtype": dtype,
            "threads": threads,
            "kv_gb": kv_gb,
        }
        try:
            if self.backend == "vllm":
                return wait_command_ready(self.proc)
            return self.proc.wait_ready(300.0)
        except RuntimeError:
            reason = command_reason(self.proc.log_tail(200_000))
            self.stop()
            raise RuntimeError(reason) from None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(60.0 if self.backend == "vllm" else 10.0)  # vLLM's teardown takes seconds
            self.proc = None


@st.cache_resource(show_spinner=False)
def server_slot(backend: str = "engine") -> ServerSlot:
    return ServerSlot(backend)


def level_unit(mode: str) -> str:
    return "requests/s" if mode == "poisson" else "users"


def at_level(x: float, unit: str) -> str:
    """'1 user', '4 users', '0.5 requests/s'."""
    return f"{x:g} {'user' if unit == 'users' and x == 1 else unit}"


def table_rows(sweep: SweepResult) -> list[dict]:
    unit = level_unit(sweep.spec.mode)
    rows = []
    for p in sweep.points:
        rows.append(
            {
                unit: p.level,
                "completed": p.completed,
                "errors": sum(p.errors.values()),
                "req/s": round(p.request_throughput, 3),
                "output tok/s": round(p.output_tokens_per_s, 1),
                "tok/s per user": round(p.per_user_tokens_per_s, 1),
                **{f"TTFT p{q} (s)": round(getattr(p.ttft_s, f"p{q}"), 3) for q in (50, 90, 99)},
                **{f"TPOT p{q} (ms)": round(getattr(p.tpot_s, f"p{q}") * 1e3, 1) for q in (50, 90, 99)},
                "ITL p50 (ms)": round(p.itl_s.p50 * 1e3, 1),
                **{f"E2E p{q} (s)": round(getattr(p.e2e_s, f"p{q}"), 3) for q in (50, 90, 99)},
                "goodput (req/s)": round(p.goodput_rps, 3),
                "SLO attainment": round(p.slo_attainment, 3),
                "meets SLO": p.meets_slo,
            }
        )
    return rows


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return buf.getvalue()


def latency_figure(sweep: SweepResult) -> go.Figure:
    pts = sweep.points
    series = []
    for q, dash in ((50, "solid"), (90, "dash"), (99, "dot")):
        series.append(Series([getattr(p.ttft_s, f"p{q}") for p in pts], f"TTFT p{q}", "#3a7ca5", dash=dash))
        series.append(
            Series([getattr(p.tpot_s, f"p{q}") * 1e3 for p in pts], f"TPOT p{q}", "#e4572e", col=2, dash=dash)
        )
    fig = two_panels([p.level for p in pts], ("TTFT (s)", "TPOT (ms)"), series, height=360)
    if sweep.slo.ttft_s:
        fig.add_hline(
            y=sweep.slo.ttft_s, line_color="grey", line_dash="dot", annotation_text="SLO", row=1, col=1
        )
    if sweep.slo.tpot_s:
        fig.add_hline(
            y=sweep.slo.tpot_s * 1e3, line_color="grey", line_dash="dot", annotation_text="SLO", row=1, col=2
        )
    fig.update_xaxes(title=level_unit(sweep.spec.mode))
    return fig


def throughput_figure(sweep: SweepResult) -> go.Figure:
    pts = sweep.points
    fig = two_panels(
        [p.level for p in pts],
        ("Output tokens/s (all users)", "Requests/s: completed and good"),
        [
            Series([p.output_tokens_per_s for p in pts], "output tok/s", "#3a7ca5"),
            Series([p.request_throughput for p in pts], "completed req/s", "#888", col=2),
            Series([p.goodput_rps for p in pts], "goodput (within SLOs)", "#2a9d8f", col=2),
        ],
    )
    fig.update_xaxes(title=level_unit(sweep.spec.mode))
    return fig


def per_user_figure(sweep: SweepResult) -> go.Figure:
    """The serving trade-off curve: what one user sees against what the deployment makes."""
    unit = level_unit(sweep.spec.mode)
    fig = go.Figure()
    fig.add_scatter(
        x=[p.output_tokens_per_s for p in sweep.points],
        y=[p.per_user_tokens_per_s for p in sweep.points],
        text=[at_level(p.level, unit) for p in sweep.points],
        mode="lines+markers+text",
        textposition="top center",
        line={"color": "#3a7ca5"},
        name=f"measured: one point per sweep level ({'concurrent users' if unit == 'users' else unit})",
    )
    if sweep.slo.tpot_s:
        fig.add_hline(
            y=1 / sweep.slo.tpot_s, line_color="grey", line_dash="dot", annotation_text="1 / TPOT SLO"
        )
    fig.update_layout(
        height=340,
        margin={"t": 30, "b": 10},
        xaxis_title="total output tokens/s",
        yaxis_title="tokens/s per user (median 1 / TPOT)",
        showlegend=True,
        legend={"orientation": "h", "y": -0.3},
    )
    return fig


def knee_sentence(
    knee: float | None, unit: str, predicted: CapacityPrediction | None, stopped_early: bool
) -> str:
    """Words from the numbers beside them: the measured knee, and the calculator's prediction against it."""
    if knee is None:
        measured = "No level of this sweep met the SLOs: lower the load (or relax the SLOs) to find the knee."
    else:
        more = " (the sweep stopped at the first level that missed them)" if stopped_early else ""
        measured = f"Measured knee: **{at_level(knee, unit)}** is the highest level that met the SLOs{more}."
    if predicted is None:
        return measured
    p = predicted.max_users
    if knee is None:
        verdict = f"The calculator predicts {p} users within the TPOT objective."
    elif p > knee:
        verdict = (
            f"The calculator predicts **{p} users** (limited by {predicted.limited_by}): more than measured, "
            "so the memory-bound rule is optimistic here (compute, prefill interference or the TTFT objective "
            "bind first)."
        )
    elif p < knee:
        verdict = (
            f"The calculator predicts **{p} users** (limited by {predicted.limited_by}): fewer than measured, "
            "so the rule is pessimistic here."
        )
    else:
        verdict = f"The calculator predicts **{p} users** (limited by {predicted.limited_by}), the same as measured."
    return f"{measured} {verdict}"


PARTS = (
    ("queue_s", "queue", "#e4a72e"),
    ("prefill_s", "prefill", "#7b4ea3"),
    ("transport_s", "transport", "#3a7ca5"),
)


def breakdown_rows(sweep: SweepResult) -> list[dict]:
    """Per level: mean client TTFT split into the server's queue and prefill and the transport (ms), how many
    requests were joined by id, and the server's own run means from its /metrics where it exports them."""
    unit = level_unit(sweep.spec.mode)
    rows = []
    for p in sweep.points:
        b, s = p.ttft_breakdown, p.server
        row: dict = {unit: p.level}
        if b is not None:
            row["joined"] = f"{b.joined}/{b.completed}"
            row["TTFT mean (ms)"] = round(b.ttft_s * 1e3, 1)
            for key, name, _ in PARTS:
                row[f"{name} (ms)"] = round(getattr(b, key) * 1e3, 1)
        if s is not None:
            for key, name in (
                ("ttft_s", "server TTFT"),
                ("queue_s", "server queue"),
                ("decode_s", "server decode"),
            ):
                if key in s.means:
                    row[f"{name} mean (ms)"] = round(s.means[key] * 1e3, 1)
        rows.append(row)
    return rows


def breakdown_figure(sweep: SweepResult) -> go.Figure | None:
    """Stacked bars per level: queue + prefill + transport = mean client TTFT (None when nothing was joined)."""
    pts = [p for p in sweep.points if p.ttft_breakdown is not None]
    if not pts:
        return None
    fig = go.Figure()
    x = [f"{p.level:g}" for p in pts]
    for key, name, color in PARTS:
        fig.add_bar(x=x, y=[getattr(p.ttft_breakdown, key) * 1e3 for p in pts], name=name, marker_color=color)
    fig.update_layout(
        barmode="stack",
        height=320,
        margin={"t": 30, "b": 10},
        xaxis_title=level_unit(sweep.spec.mode),
        yaxis_title="mean TTFT (ms)",
        legend={"orientation": "h", "y": -0.3},
    )
    return fig


def breakdown_sentence(sweep: SweepResult) -> str:
    """Which part of the TTFT grew most from the lowest level to the highest, from the numbers above."""
    pts = [p for p in sweep.points if p.ttft_breakdown is not None]
    if not pts:
        return ""
    hi = pts[-1].ttft_breakdown
    assert hi is not None
    share = {name: getattr(hi, key) / hi.ttft_s for key, name, _ in PARTS if hi.ttft_s > 0}
    if not share:
        return ""
    top = max(share, key=lambda k: share[k])
    unit = level_unit(sweep.spec.mode)
    return (
        f"At {at_level(pts[-1].level, unit)} the largest part of the mean TTFT ({hi.ttft_s * 1e3:.1f} ms) is "
        f"**{top}**: {share[top]:.0%} of it."
    )


FAILURE_WORDS = {
    "connect": "could not connect",
    "timeout": "timed out",
    "http_429": "refused as too busy (HTTP 429)",
    "http_4xx": "rejected (HTTP 4xx)",
    "http_5xx": "failed on the server (HTTP 5xx)",
    "stream_error": "broke off mid-stream",
    "empty": "ended without any content",
}


def failed_requests(errors: dict[str, int]) -> str:
    """Failed requests by kind, in words ("8 could not connect, 1 timed out")."""
    return ", ".join(
        f"{n} {FAILURE_WORDS.get(kind, kind.replace('_', ' '))}" for kind, n in sorted(errors.items())
    )


# ---------------------------------------------------------------- this engine's server and vLLM's, side by side

TARGETS = (
    "This engine's server",
    "vLLM's server",
    "Both, side by side",
    "Any OpenAI-compatible URL",
)
BACKENDS_OF = {TARGETS[0]: ("engine",), TARGETS[1]: ("vllm",), TARGETS[2]: ("engine", "vllm")}
NAMES = {"engine": "this engine", "vllm": "vLLM"}
TITLES = {"engine": "This engine", "vllm": "vLLM"}  # at the start of a sentence
COMPARE_KEYS = {"engine": "lab", "vllm": "vllm"}  # the side-by-side's names (engine.backends.compare)


def vllm_status() -> tuple[str | None, str]:
    """(vLLM's build in words, "") or (None, the one sentence saying how to make its environment)."""
    from engine.backends.vllm import availability

    build, why = availability()
    return (build.label, "") if build else (None, why)


def local_servers(target: str, ns: str) -> tuple[dict[str, str], str]:
    """The controls that start and stop the local servers a target needs, with the same model, precision, batch,
    threads and KV space for each; returns ({backend: base URL} of those running, the model)."""
    from engine.core.load import cores
    from engine.runtime.models import PRESETS
    from engine.serving.runner import ServeSpec

    backends = BACKENDS_OF[target]
    label, missing = vllm_status() if "vllm" in backends else (None, "")
    c = st.columns([2, 1, 1, 1, 1])
    model = spec_input(
        c[0], ServeSpec, "model", choices=list(PRESETS), label="Model", key=f"{ns}.engine_model"
    )
    batch = spec_input(c[1], ServeSpec, "max_batch", label="Max batch", key=f"{ns}.max_batch")
    dtype = spec_input(
        c[2],
        ServeSpec,
        "dtype",
        choices=[d for d in ServeSpec.choices("dtype") if d != "fp16"],  # fp16: CUDA only
        label="Precision",
        key=f"{ns}.dtype",
        help="auto: fp32 on a CPU",
    )
    threads = spec_input(
        c[3],
        ServeSpec,
        "threads",
        hi=max(1, cores()),
        value=max(1, cores() - 1),
        label="Compute threads",
        key=f"{ns}.threads",
        help="torch threads of each server (one core is left to HTTP, the default of both)",
    )
    kv_gb = spec_input(
        c[4],
        ServeSpec,
        "kv_budget_bytes",
        unit=1e9,
        value=2.0,
        lo=0.1,
        hi=64.0,
        label="KV space (GB)",
        key=f"{ns}.kv_gb",
        help="each server's KV cache budget",
    )
    start_refused = refused(batch, threads, kv_gb)  # the refused field says why
    if missing:
        st.warning(missing, icon=":material/block:")
    elif label:
        st.caption(
            f"vLLM here: {label}, started eager (`--enforce-eager`) on a CPU, from its own environment."
        )
    slots = {b: server_slot(b) for b in backends}
    b1, b2 = st.columns(2)
    can_start = not missing and not start_refused and not all(s.running for s in slots.values())
    if b1.button(
        f"Start {'both' if len(slots) > 1 else 'server'}",
        key=f"{ns}.start",
        type="primary",
        disabled=not can_start,
    ):
        for b, slot in slots.items():
            if slot.running:
                continue
            try:
                with st.spinner(f"Starting {NAMES[b]}'s server for {model} and waiting until it serves…"):
                    slot.start(model, batch, dtype=dtype, threads=threads, kv_gb=kv_gb)
            except RuntimeError as exc:
                show_error(exc, prefix=f"{TITLES[b]}'s server did not start")
                break
    if b2.button(
        f"Stop {'both' if len(slots) > 1 else 'server'}",
        key=f"{ns}.stop",
        disabled=not any(s.running for s in slots.values()),
    ):
        for slot in slots.values():
            slot.stop()
        st.rerun()
    urls = {}
    for b, slot in slots.items():
        if slot.running and slot.proc is not None:
            urls[b] = slot.proc.base_url
            st.success(
                f"{TITLES[b]}'s server: `{slot.proc.base_url}` serving **{slot.proc.model}** "
                f"({slot.settings.get('dtype')}, {slot.settings.get('threads')} thread(s), "
                f"{slot.settings.get('kv_gb'):g} GB KV; process {slot.proc.proc.pid}, 127.0.0.1 only).",
                icon=":material/dns:",
            )
    if len(urls) < len(slots):
        st.info(
            "Start the server(s) here (child processes of the dashboard, stopped from here or when it stops), or run "
            "`python -m engine serve [--backend vllm]` yourself and choose *Any OpenAI-compatible URL*."
        )
    return urls, model


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1e3, 1)


def side_by_side_rows(sbs) -> list[dict]:
    """The side-by-side table in the page's units: tok/s, TTFT/ITL/TPOT p50 in ms, ratios this engine / vLLM."""
    rows = []
    for r in sbs.rows():
        rows.append(
            {
                "users": r["users"],
                "this engine tok/s": round(r["lab output tok/s"] or 0, 1),
                "vLLM tok/s": round(r["vllm output tok/s"] or 0, 1),
                "tok/s engine / vLLM": round(r["lab / vllm output tok/s"] or 0, 2),
                "TTFT p50 engine (ms)": _ms(r["lab TTFT p50"]),
                "TTFT p50 vLLM (ms)": _ms(r["vllm TTFT p50"]),
                "ITL p50 engine (ms)": _ms(r["lab ITL p50"]),
                "ITL p50 vLLM (ms)": _ms(r["vllm ITL p50"]),
                "ITL engine / vLLM": None
                if r["lab / vllm ITL p50"] is None
                else round(r["lab / vllm ITL p50"], 2),
                "TPOT p50 engine (ms)": _ms(r["lab TPOT p50"]),
                "TPOT p50 vLLM (ms)": _ms(r["vllm TPOT p50"]),
            }
        )
    return rows


def side_by_side_sentence(sbs) -> str:
    """Who made more output tokens per second at each level, by how much: words from the numbers in the table."""
    parts = []
    for r in sbs.rows():
        ratio = r["lab / vllm output tok/s"]
        if ratio is None:
            continue
        who = "this engine" if ratio > 1 else "vLLM"
        times = ratio if ratio > 1 else 1 / ratio
        parts.append(
            f"at {at_level(r['users'], 'users')} {who} made {times:.2f}× the output tokens per second"
        )
    if not parts:
        return "No level completed on both servers, so there is nothing to compare."
    return "Measured, same workload, interleaved: " + "; ".join(parts) + "."


def side_by_side_figure(sbs) -> go.Figure:
    levels = list(sbs.levels)
    series = []
    for name, words, color in (("lab", "this engine", "#3a7ca5"), ("vllm", "vLLM", "#e4572e")):
        series.append(
            Series([sbs.median_of(name, lv, "output_tokens_per_s") for lv in levels], f"{words} tok/s", color)
        )
        itl = [sbs.median_of(name, lv, "itl_s_p50") for lv in levels]
        series.append(Series([None if v is None else v * 1e3 for v in itl], f"{words} ITL p50", color, col=2))
    fig = two_panels(levels, ("Output tokens/s (all users)", "ITL p50 (ms)"), series, height=340)
    fig.update_xaxes(title="users")
    return fig


def sbs_dtype() -> str:
    """The precision both local servers run (the engine's rule for auto, on the device vLLM's build runs on)."""
    from engine.backends.vllm import availability
    from engine.runtime.models import resolve_dtype

    build, _ = availability()
    return resolve_dtype(
        server_slot("engine").settings.get("dtype", "auto"), build.device if build else "cpu"
    )


def calculator_beside(sbs, dtype: str) -> tuple[list[dict], str]:
    """The calibrated calculator's prediction for this machine at each level, beside both servers' medians, and a
    sentence from those numbers; ([], why) where there is no calibration or the model is not one it knows."""
    from engine.backends.compare import predicted
    from engine.calibration import load_calibration, resolve_model_spec
    from engine.core.errors import EngineError

    cal = load_calibration()
    if cal is None:
        return [], (
            "No calibration on this machine yet, so the calculator has no prediction to put beside them: run "
            "`python -m engine calibrate` (a few minutes)."
        )
    try:
        preds = predicted(sbs, cal, resolve_model_spec(sbs.specs["lab"].model), dtype, first="lab")
    except EngineError as exc:
        return [], f"The calculator has no prediction for this model: {exc}"
    rows, inside = [], {"lab": 0, "vllm": 0}
    for p in preds:
        row: dict = {"users": p.users, "calculator tok/s": round(p.output_tokens_per_s.central, 1)}
        row["95% interval tok/s"] = f"{p.output_tokens_per_s.low:.1f} to {p.output_tokens_per_s.high:.1f}"
        for name, words in (("lab", "this engine"), ("vllm", "vLLM")):
            got = sbs.median_of(name, p.users, "output_tokens_per_s")
            row[f"{words} tok/s"] = None if got is None else round(got, 1)
            inside[name] += bool(p.holds("output_tokens_per_s", got))
        row["calculator TPOT (ms)"] = _ms(p.tpot_s.central)
        row["95% interval TPOT (ms)"] = f"{p.tpot_s.low * 1e3:.0f} to {p.tpot_s.high * 1e3:.0f}"
        for name, words in (("lab", "this engine"), ("vllm", "vLLM")):
            row[f"{words} TPOT (ms)"] = _ms(sbs.median_of(name, p.users, "tpot_s_p50"))
        rows.append(row)
    n = len(preds)
    sentence = (
        f"Predicted by the calculator calibrated on this machine ({cal.model}, {cal.created_at[:10]}; the "
        f"engine's own runs, {dtype}) for {preds[0].prompt_tokens}-token prompts and {preds[0].output_tokens} "
        "output tokens; throughput = users × output tokens / (TTFT + (output tokens − 1) × TPOT). "
        f"This engine's measured throughput is inside the 95% interval at {inside['lab']} of {n} levels, vLLM's at "
        f"{inside['vllm']} of {n}: the fit describes this engine's scheduler, not vLLM's."
    )
    return rows, sentence


def kv_rows(row: dict | None) -> list[dict]:
    """vLLM's KV pool as it logged it beside the calculator's prediction for this machine."""
    if not row:
        return []
    logged, pred = row["logged"], row.get("predicted") or {}
    return [
        {
            "": "vLLM logged (measured)",
            "KV tokens": logged["kv_cache_tokens"],
            "max concurrency": logged["max_concurrency"],
            "block size": logged.get("block_size"),
            "blocks": logged.get("blocks"),
        },
        {
            "": "calculator (engine.calc.serving_memory, vLLM's CPU pool)",
            "KV tokens": pred.get("kv_cache_tokens"),
            "max concurrency": None
            if pred.get("max_concurrency") is None
            else round(pred["max_concurrency"], 2),
            "block size": pred.get("block_size"),
            "blocks": pred.get("blocks"),
        },
    ]


def parallel_rows(recorded: dict | None) -> list[dict]:
    """Each way past one rank that was tried here, its outcome and vLLM's own error (bench/vllm_parallel.py)."""
    if not recorded:
        return []
    return [
        {
            "attempt": a["what"],
            "flags": " ".join(a["flags"]),
            "outcome": a["outcome"],
            "vLLM said": a.get("error") or a.get("text", ""),
        }
        for a in recorded.get("attempts", [])
    ]


def parallel_sentence(recorded: dict) -> str:
    """What the recorded attempts past one rank came to, from their outcomes."""
    attempts = recorded.get("attempts", [])
    served = [a["what"] for a in attempts if a["outcome"] == "served"]
    when = f"Tried here on {recorded.get('date', '?')[:10]} with {recorded.get('build', 'vLLM')} ({recorded.get('cores', '?')} cores)"
    if not attempts:
        return f"{when}: nothing was recorded."
    if not served:
        return f"{when}: none of the {len(attempts)} ways past one rank served a request; each row quotes vLLM's own error."
    return (
        f"{when}: {len(served)} of {len(attempts)} served a request ({'; '.join(served)}); the other rows quote vLLM's "
        "own error."
    )


def vllm_parallel_section() -> None:
    """Past one node: what vLLM's multi-rank paths did on this machine (recorded by bench/vllm_parallel.py), and
    the multi-node steps as vLLM documents them for a GPU cluster."""
    from engine.backends.vllm import recorded_parallel
    from engine.calc.launch import LaunchPlan, multi_node_steps

    st.subheader("Past one node: vLLM's Ray and parallel paths on this machine")
    rec = recorded_parallel()
    if rec is None:
        st.caption(
            "Not tried on this machine yet: `.venv/bin/python bench/vllm_parallel.py` starts vLLM with Ray, pipeline "
            "parallel 2 and tensor parallel 2 (a few minutes) and records what happened and what vLLM said."
        )
    else:
        st.markdown(
            parallel_sentence(rec)
            + " Recorded, not live; rerun with `.venv/bin/python bench/vllm_parallel.py`."
        )
        st.dataframe(parallel_rows(rec), hide_index=True, width="stretch")
    with st.expander("The multi-node steps vLLM documents (for a GPU cluster)"):
        plan = LaunchPlan(
            model="meta-llama/Llama-3.1-405B-Instruct",
            tensor_parallel=8,
            pipeline_parallel=2,
            max_model_len=8192,
            gpu_memory_utilization=0.9,
            max_num_seqs=256,
            dtype="bf16",
            weight_format=None,
            kv_dtype=None,
        )
        st.caption("An example plan of 16 GPUs on two nodes of 8, as the Memory and cost page prints it:")
        for step in multi_node_steps(plan):
            st.markdown(f"- {step}")
