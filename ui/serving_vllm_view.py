"""The Serving page's vLLM views: this engine's server beside vLLM's (table, sentence, chart and the calibrated
calculator beside both), vLLM's KV pool beside the calculator's, and vLLM's multi-rank attempts past one node."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from engine.loadgen.sweep import at_level
from ui.charts import Series, two_panels
from ui.serving_server import server_slot


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
            "No calibration on this machine yet, so the calculator has no prediction to put beside them: press "
            "the *Calibrate this machine* button on the Memory and cost page (a few minutes)."
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
    from engine.backends.vllm_records import recorded_parallel
    from engine.calc.launch import LaunchPlan, multi_node_steps

    st.subheader("Past one node: vLLM's Ray and parallel paths on this machine")
    rec = recorded_parallel()
    if rec is None:
        st.caption(
            "Not tried on this machine yet: `.venv/bin/python -m bench.vllm_parallel` starts vLLM with Ray, pipeline "
            "parallel 2 and tensor parallel 2 (a few minutes) and records what happened and what vLLM said."
        )
    else:
        st.markdown(
            parallel_sentence(rec)
            + " Recorded, not live; rerun with `.venv/bin/python -m bench.vllm_parallel`."
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
