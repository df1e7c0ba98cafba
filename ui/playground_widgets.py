"""Playground helpers: the sidebar's generation settings, the live progress line, the measured figures of a run,
the per-token latency chart, and the pre-run forecast. The run itself is the engine's (engine.runtime.run)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import plotly.graph_objects as go
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from engine.calc import format as fmt
from engine.core.errors import EngineError
from engine.core.jsonsafe import from_jsonable, to_jsonable
from engine.runtime import runlog
from engine.runtime.measurement import Measurement
from engine.runtime.settings import GenerationConfig, parse_stops
from ui import pace
from ui.charts import log_ticks
from ui.common import browser_session, presenter_mode
from ui.narrative import pair_setup
from ui.widgets import SLIDER, refused, spec_input

# A run predicted to take longer than this gets a warning before it starts.
LONG_RUN_S = 60.0
# The prompt box's first text, by the deep link's ?prompt= (the tour's KV-cache stop links "passage": a prompt of a
# few hundred tokens, so that a step without the cache, which runs over all of it again, costs visibly more than a
# step with it; after a five-word prompt the two cost about the same on a small model).
PROMPTS = {
    "question": "The capital of France is",
    "passage": (
        "A language model writes one token at a time. To choose the next token it runs the whole network over the "
        "text it has so far, and inside every attention layer each position computes a key and a value that later "
        "positions read. Without a cache, the model throws these away after each step, so the next step computes them"
        " again for every earlier position: the work of a step grows with the length of the text, and a long answer "
        "costs far more than its length suggests. With a key-value cache, the keys and values of earlier positions "
        "are kept in memory, and each new step computes them only for the one new token, then reads the stored ones. "
        "The step then costs about the same at the start of the answer as at its end, and the price is memory: two "
        "vectors per layer for every position of every sequence being served. On a GPU, that memory decides how many "
        "requests fit at once, which is why serving engines manage it in pages, share it between requests with a "
        "common prefix, and sometimes store it in eight bits instead of sixteen. The same trade appears everywhere in"
        " inference: memory spent to save repeated work, and repeated work accepted to save memory. In short, the "
        "cache makes each step cheap once the prompt has been read, and the rest of this page shows by how much."
    ),
}
EXAMPLES = {
    "question": "a short question",
    "passage": "a passage of a few hundred tokens (shows what the KV cache saves)",
}


def prompt_example(ns: str) -> str:
    """Which example the prompt box starts from (the deep link's ?prompt= first); choosing one puts its text in the
    box, replacing what was typed there."""
    key, box = f"{ns}.example", f"{ns}.prompt.False"
    linked = str(st.query_params.get("prompt"))

    def use() -> None:
        st.session_state[box] = PROMPTS[st.session_state[key]]
        st.query_params["prompt"] = st.session_state[key]  # a reload keeps the choice, not the link's

    return st.radio(
        "Start from",
        list(EXAMPLES),
        index=list(EXAMPLES).index(linked) if linked in EXAMPLES else 0,
        format_func=EXAMPLES.get,
        horizontal=True,
        key=key,
        on_change=use,
        help="Without the KV cache every step runs the model over the whole text so far: after a five-word prompt "
        "that costs a small model little, after a passage it costs every step the passage.",
    )


# Shorter cached runs take seconds on any machine this lab runs on: no forecast (it needs the machine's roofs,
# measured once per server in a few seconds) until a run could plausibly take minutes.
FORECAST_FROM_TOKENS = 256


def latency_figure(runs: dict[str, list[float]]) -> go.Figure:
    """One line per run (label -> seconds per token), milliseconds on a log axis so the TTFT spike and the TPOT
    floor are both readable."""
    fig = go.Figure()
    colours = {"KV cache on": "#3a7ca5", "KV cache off": "#e4572e"}
    ticks, labels = log_ticks([max(v, 1e-6) * 1e3 for lat in runs.values() for v in lat])
    for label, lat in runs.items():
        fig.add_scatter(
            x=list(range(1, len(lat) + 1)),
            y=[max(v, 1e-6) * 1e3 for v in lat],
            mode="lines",
            name=label,
            line={"color": colours.get(label.split(" (")[0], "#888")},
        )
    fig.update_layout(
        height=320,
        margin={"t": 30, "b": 10},
        legend={"orientation": "h", "y": -0.25},
        xaxis_title="generated token",
        yaxis_title="latency (ms, log)",
        yaxis_type="log",
        yaxis_tickvals=ticks or None,
        yaxis_ticktext=labels or None,
        title="Per-token latency: the first token carries the prefill (TTFT), then one decode step each",
    )
    return fig


def forecast(lm, prompt: str, max_new: int, use_cache: bool):
    """The calculator's forecast for this run on this machine, or None when the model has no calculator shape
    or this machine has not been measured. Uses the stored calibration when there is one."""
    from engine import calibration
    from engine.calibration import check as estimate_check

    if use_cache and max_new < FORECAST_FROM_TOKENS:
        return None
    spec = calibration.spec_for_run_model(lm.name)
    if spec is None or lm.dtype not in ("fp32", "fp16", "bf16"):
        return None
    try:
        from ui.calc_widgets import cached_machine

        machine = cached_machine()
        cal = calibration.load_calibration()
        n_prompt = len(lm.tokenizer(prompt)["input_ids"]) if prompt else 1
        return estimate_check.forecast_run(spec, lm.dtype, n_prompt, max_new, use_cache, machine, cal)
    except (EngineError, ValueError, OSError):
        return None


def work_split(
    tokens: int, max_new: int, prompt_tokens: int | None = None, use_cache: bool = True
) -> tuple[float, float]:
    """The work done and left of a run at `tokens` of `max_new`, in token-positions computed. With the KV cache a
    token costs about the same as the last (one position each); without it, token j recomputes the prompt and the
    j tokens before it (prompt + j positions), so the tokens left cost more than those done and a clock that reads
    the rate so far swings between that rate and the forecast (a student's walk)."""
    if use_cache or not prompt_tokens:
        return float(tokens), float(max(max_new - tokens, 0))

    def positions(a: int, b: int) -> float:  # sum of (prompt + j) for j in [a, b)
        return (b - a) * prompt_tokens + (b * (b - 1) - a * (a - 1)) / 2 if b > a else 0.0

    return positions(0, tokens), positions(tokens, max_new)


def progress_text(
    tokens: int,
    max_new: int,
    elapsed: float,
    expected_s: float | None = None,
    *,
    prompt_tokens: int | None = None,
    use_cache: bool = True,
) -> str:
    """Tokens so far, elapsed, the rate so far, and what is left if the run goes to `max_new` (an end-of-sequence
    token may stop it sooner): the time so far scaled by the work left (work_split: without the cache each token
    costs more than the last), or the forecast `expected_s`'s share of the work left where that is more. Past the
    forecast it says so."""
    rate = tokens / elapsed if elapsed > 0 else math.nan
    done_w, left_w = work_split(tokens, max_new, prompt_tokens, use_cache)
    # the first token carries the prompt: a rate over one token says nothing of the steps ("1 / 64 tokens · 0.3
    # tok/s · about 4.1 min left" for a run that ended 6 s later)
    left = elapsed * left_w / done_w if tokens > 1 and done_w > 0 and elapsed > 0 else math.nan
    late = ""
    if expected_s is not None and math.isfinite(expected_s) and tokens:
        if elapsed < expected_s:
            # the forecast's share for the work still to come (not its whole remainder: '60 / 64 tokens · 1.0
            # tok/s · about 24.3 s left' ended 3 s later)
            share = expected_s * left_w / (done_w + left_w) if done_w + left_w > 0 else 0.0
            left = max(left, share) if math.isfinite(left) else share
        else:
            # the forecast can be low for this run as well as the CPU shared: the run's own note says which after
            late = f" · longer than the forecast ({fmt.seconds(expected_s)})"
    return (
        f"{tokens} / {max_new} tokens · {fmt.seconds(elapsed)} elapsed · "
        + (f"{rate:.1f} tok/s" if math.isfinite(rate) else "— tok/s")
        + (
            f" · about {fmt.seconds(left)} left (sooner if the model stops early)"
            if math.isfinite(left) and left > 0 and tokens < max_new
            else ""
        )
        + late
    )


def compile_advice(lm):
    """Compiled decode's default for this model's device, decided by the recorded measurement
    (engine.runtime.recorded.compile_advice), and the sentence that says why."""
    from engine.runtime import recorded
    from engine.runtime.settings import GenerationConfig
    from ui.narrative import compile_advice_sentence

    advice = recorded.compile_advice(lm.device, lm.name)
    return advice, compile_advice_sentence(
        advice, GenerationConfig.default("max_new_tokens"), recorded.PAYBACK_TOKENS
    )


def compile_status_text(status: dict | None) -> str:
    """The status line while the decode step compiles (the first compiled run per model and shape)."""
    if not status or status.get("state") != "compiling" or status.get("compiling_s") is None:
        return ""
    return (
        f"compiling the decode step ({status['compiling_shape']}): {fmt.seconds(status['compiling_s'])} so far; "
        "once per model and shape on this server, 25-65 s on a 2-core CPU"
    )


def show_decode_path(c) -> None:
    """Say once how the decode ran: the compile this run paid (left out of its figures), or why it decoded eagerly."""
    if c.decode_note:
        st.warning(c.decode_note, icon=":material/build:")
    elif c.decode == "compiled" and c.compile_s:
        wall = f" (the run took {fmt.seconds(c.wall_s)} of wall time with it)" if c.wall_s else ""
        st.info(
            f"This run compiled the decode step first: **{fmt.seconds(c.compile_s)}**{wall}, spent in its first "
            "decode step and left out of its latency, TPOT and tokens/s, which are the decode's own. Later compiled "
            "runs of this model on this server reuse it.",
            icon=":material/build:",
        )


def generation_settings(ns: str, lm) -> tuple[GenerationConfig | None, bool]:
    """The sidebar's decoding settings as the engine's spec (every number through spec_input: its default, bounds
    and help are GenerationConfig's, one source with the CLI; the sliders narrow the range to what a person tries)
    and whether the KV cache is on. The config is None while a number is refused (the field says why)."""
    d = GenerationConfig()
    st.header("Generation")
    max_new = spec_input(st, GenerationConfig, "max_new_tokens", label="Max new tokens", key=f"{ns}.max_new")
    sample = st.toggle("Sample (off = greedy)", d.do_sample, key=f"{ns}.sample")
    off = not sample
    temperature = spec_input(
        st, GenerationConfig, "temperature", widget=SLIDER, lo=0.05, hi=2.0, step=0.05, disabled=off,
        label="Temperature", key=f"{ns}.temp",
    )  # fmt: skip
    top_p = spec_input(
        st, GenerationConfig, "top_p", widget=SLIDER, lo=0.05, step=0.05, disabled=off, label="Top-p",
        key=f"{ns}.top_p",
    )  # fmt: skip
    top_k = spec_input(
        st, GenerationConfig, "top_k", label="Top-k (0 = off)", key=f"{ns}.top_k", disabled=off
    )
    rep = spec_input(
        st, GenerationConfig, "repetition_penalty", widget=SLIDER, lo=1.0, hi=2.0, step=0.05,
        label="Repetition penalty", key=f"{ns}.rep",
    )  # fmt: skip
    seed = spec_input(
        st, GenerationConfig, "seed", hi=2**31 - 1, label="Seed", key=f"{ns}.seed", disabled=off
    )
    stops = st.text_input("Stop sequences (comma-separated; \\n for newline)", "", key=f"{ns}.stop")
    use_cache = st.toggle(
        "Use KV cache",
        d.use_cache,
        key=f"{ns}.cache",
        help="Off recomputes every past token's keys and values at every step: watch TPOT grow.",
    )
    advice, advice_text = compile_advice(lm) if lm is not None else (None, "")
    compiled = st.toggle(
        "Compiled decode",
        advice.on if advice is not None else d.compile,
        key=f"{ns}.compile.{lm.device if lm is not None else 'none'}",  # its default is per device
        disabled=lm is None or not use_cache,
        help="A static (preallocated) KV cache and a torch.compile'd decode step, CUDA graphs on a GPU: the same "
        "greedy tokens, faster steps. The first run per model compiles the step; later runs reuse it. It runs on "
        "the KV cache.",
    )
    if advice_text:
        st.caption(advice_text)
    chat = st.toggle(
        "Use the chat template",
        False,
        key=f"{ns}.chat",
        disabled=lm is None or not lm.has_chat_template,
        help="Wraps the prompt as a user message (only for models that ship a template).",
    )
    include_prompt = st.toggle(
        "Show the prompt in the output",
        False,
        key=f"{ns}.incl",
        help="`generate` returns prompt + completion: the chapter's point. Off shows the completion only.",
    )
    if refused(max_new, top_k, seed):
        return None, use_cache
    cfg = GenerationConfig(
        max_new_tokens=int(max_new),
        do_sample=sample,
        temperature=float(temperature),
        top_p=float(top_p),
        top_k=int(top_k),
        repetition_penalty=float(rep),
        seed=int(seed),
        stop=parse_stops(stops),
        use_cache=use_cache,
        chat_template=chat,
        include_prompt=include_prompt,
        compile=compiled and use_cache,
    )
    return cfg, use_cache


def live_line(
    tokens: int,
    max_new: int,
    elapsed: float,
    compiling: dict | None,
    expected_s: float | None = None,
    *,
    prompt_tokens: int | None = None,
    use_cache: bool = True,
) -> str:
    """The progress line under a running single prompt: tokens / max, elapsed, tok/s, and what it waits for;
    before the first token (no rate yet) what is left of the forecast `expected_s`, where there is one."""
    waiting = compile_status_text(compiling) or ("" if tokens else "waiting for the first token (prefill)")
    line = progress_text(
        tokens, max_new, elapsed, expected_s, prompt_tokens=prompt_tokens, use_cache=use_cache
    ) + (f" · {waiting}" if waiting else "")
    if tokens or expected_s is None or not math.isfinite(expected_s):
        return line
    if elapsed < expected_s:
        return f"{line} · about {fmt.seconds(expected_s - elapsed)} left by the forecast"
    return f"{line} · longer than the forecast ({fmt.seconds(expected_s)})"


def metrics_row(
    m,
    load: float | None = None,
    busy: bool | None = None,
    cores: int | None = None,
    others: float | None = None,
) -> None:
    """The run's measured figures, in two rows of three (six in a row cut their numbers), with the load the
    machine was under when it finished (a busy machine's TPOT is not this machine's TPOT: the calculator's bound
    and the race's figure are for a quiet one). `busy`: the run's one verdict (ui.narrative.was_busy); `others`:
    the cores' worth of CPU other processes took while it ran, where measured."""
    c = [*st.columns(3), *st.columns(3)]
    c[0].metric("TTFT", fmt.seconds(m.ttft_s), help="request → first generated token")
    c[1].metric(
        "TPOT",
        fmt.seconds(m.tpot_s),
        help="(latency − TTFT) / (output tokens − 1): first token excluded (vLLM)",
    )
    c[2].metric("Latency", fmt.seconds(m.latency_s), help="request → last token")
    c[3].metric("Throughput", f"{m.tokens_per_s:.1f} tok/s", help="output tokens / latency (all sequences)")
    c[4].metric("Tokens in → out", f"{m.prompt_tokens} → {m.output_tokens}")
    c[5].metric("Peak memory", fmt.gb(m.peak_memory_bytes), help=m.peak_memory_kind)
    if load is not None and load == load:
        st.caption(
            f"All measured on this run, on this machine: load average {load:.1f} on {cores} cores when it finished, "
            "this run's own threads included" + _shared_words(busy, others)
        )


def _shared_words(busy: bool | None, others: float | None = None) -> str:
    """How the run shared the CPU, by its one verdict (`busy`, the same the forecast line and the sentence under
    the chart read), with what other processes took while it ran where that was measured."""
    took = (
        f"other programs took {others:.1f} cores' worth of CPU while it ran"
        if others is not None and math.isfinite(others)
        else ""
    )
    if busy:
        return f": {took or 'other work shared the CPU'}, so slower than it runs when quiet."
    return f"; {took} (quiet otherwise)." if took else " (quiet otherwise)."


def history_row(m, mode: str, stop_reason: str, decode: str = "eager") -> dict:
    """One row of the session's run table."""
    return {
        "time (UTC)": m.started_at,
        "model": m.model,
        "dtype": m.dtype,
        "device": m.device,
        "mode": mode,
        "batch": m.batch_size,
        "kv cache": m.use_cache,
        "decode": decode,
        "prompt tokens": m.prompt_tokens,
        "output tokens": m.output_tokens,
        "TTFT (ms)": round(m.ttft_s * 1e3, 1),
        "TPOT (ms)": None if math.isnan(m.tpot_s) else round(m.tpot_s * 1e3, 2),
        "latency (s)": round(m.latency_s, 3),
        "tokens/s": round(m.tokens_per_s, 2),
        "peak memory (MB)": round(m.peak_memory_bytes / 1e6, 1),
        "stop": stop_reason,
    }


# The run table as two, each led by the run's number: its sixteen columns in one table scrolled sideways at 1280 px.
# The CSV keeps them in one table.
HISTORY_PARTS = (
    ("What ran", ("time (UTC)", "model", "dtype", "device", "mode", "batch", "decode")),
    (
        "What it measured, with the KV cache on or off",
        (
            "kv cache",
            "prompt tokens",
            "output tokens",
            "TTFT (ms)",
            "TPOT (ms)",
            "latency (s)",
            "tokens/s",
            "peak memory (MB)",
            "stop",
        ),
    ),
)


MEANING = (
    "- **TTFT** (time to first token): from the request to the first generated token. It is dominated by "
    "*prefill*, one forward pass over the whole prompt, and by any wait for the shared model.\n"
    "- **TPOT** (time per output token): (latency − TTFT) / (output tokens − 1), as vLLM defines it; it "
    "excludes the first token and measures *decode*, one forward pass per token, which reads every weight "
    "once per step: that is why decode is memory-bandwidth bound.\n"
    "- **Latency**: request to last token. **Throughput**: output tokens / latency, summed over a batch.\n"
    "- **Peak memory**: on a GPU, `torch.cuda.max_memory_allocated`; on the CPU, the server process's "
    "resident memory (it includes every loaded model).\n"
    "- **KV cache**: with it, each step attends over stored keys/values of past tokens; without it, each "
    "step re-runs the whole sequence, so TPOT grows with length.\n"
    "- **Compiled decode**: the KV cache preallocated (static shapes) and the decode step compiled by "
    "`torch.compile`, which fuses the many small operations of a layer and, on a GPU, replays the whole step "
    "as one CUDA graph instead of launching each kernel from Python. The greedy tokens are the same. The first "
    "compiled run per model (and batch shape) compiles the step in its first decode step: that compile is "
    "reported once, beside the run's wall time, and left out of its latency, TPOT and throughput."
)


def show_recorded_gpu_decode() -> None:
    """The newest recorded GPU decode run (bench/decode.py --device cuda, or the first GPU check's scheduler file):
    recorded evidence with its machine and date, never live."""
    from engine.runtime import recorded
    from ui.narrative import gpu_decode_sentences

    rows = recorded.newest_run(recorded.load_decode_rows(device="cuda"))
    if not rows:
        return
    first = rows[0]
    with st.expander(f"Recorded GPU decode, not live: {first.machine} · {first.date[:10]}", expanded=False):
        for sentence in gpu_decode_sentences(rows):
            st.markdown(f"- {sentence}")
        st.dataframe(
            [
                {
                    "model": r.model,
                    "dtype": r.dtype,
                    "batch": r.batch,
                    "lane": r.lane,
                    "decode": r.decode,
                    "tokens/s": round(r.tokens_per_s, 1),
                    "% of read bandwidth": None
                    if r.fraction_of_read_bandwidth is None
                    else round(100 * r.fraction_of_read_bandwidth, 1),
                    "× eager": "n/a" if r.x_eager is None else f"{r.x_eager:.2f}",
                    "greedy = plain": "not checked" if r.greedy_equal is None else str(r.greedy_equal),
                }
                for r in rows
            ],
            hide_index=True,
            width="stretch",
        )
        st.caption(
            "Bandwidth: weights bytes / time per decode step (each step reads every weight once; the KV cache read "
            "on top is left out, so the share is a lower bound), over the read bandwidth the same run measured. "
            "Recorded by the GPU check on a lent GPU; the dashboard's own runs are on this machine."
        )


# ---------------------------------------------------------------- a reload and presenter mode
EXPERIMENT = "playground"
_KEPT = (
    "model",
    "use_cache",
    "max_new",
    "tokens",
    "elapsed",
    "text",
    "status",
    "latency",
    "load",
    "empty_note",
    "ran_with",
)


def _slim(run: dict) -> dict:
    """What the page draws of a finished run, as JSON (the run report itself holds the model's tensors' results)."""
    report = run.get("report")
    return {
        **{k: run.get(k) for k in _KEPT},
        "measurement": to_jsonable(run["measurement"]) if run.get("measurement") is not None else None,
        "busy": report.busy if report is not None else run.get("busy"),
        "cores": report.cores if report is not None else run.get("cores"),
        "others": report.others if report is not None else run.get("others"),
    }


def _pair_row(half: dict) -> dict | None:
    """A recorded half of presenter mode's pair as a row of the run table (history_row), from its own figures."""
    m = _unslim(half).get("measurement")
    if m is None:
        return None
    return history_row(m, "single", str(half.get("status") or ""), str(half.get("decode") or "eager"))


def _unslim(run: dict) -> dict:
    m = run.get("measurement")
    return {**run, "measurement": from_jsonable(Measurement, m) if m is not None else None, "report": None}


def keep(ns: str, wall_s: float) -> None:
    """Store the page's runs (the last one, the cache on/off pair the chart draws, the session's table) with the
    browser session's key: a reload finds them again, and presenter mode opens on the machine's last."""
    state = st.session_state
    last = state[f"{ns}.last"]
    payload = {
        "last": _slim(last) if last is not None else None,
        "curve": {str(on): _slim(r) for on, r in state[f"{ns}.curve"].items()},
        "history": state[f"{ns}.history"],
    }
    report = last.get("report") if last is not None else None
    load = (
        {"before": report.load_before, "after": report.load, "cores": report.cores}
        | ({"others": report.others} if math.isfinite(report.others) else {})
        if report is not None
        else None
    )  # what presenter mode reads to prefer a run taken on a quiet machine
    runlog.save_result(
        EXPERIMENT,
        payload,
        wall_s=wall_s,
        session=browser_session(),
        settings={"load": load} if load else None,
    )


def ran_with(model: str, prompt: str, cfg: GenerationConfig) -> dict:
    """The inputs a run was made with, stored beside it: a reload resets the page's inputs to their defaults, so
    a restored result must say what it was run with (ran_with_line)."""
    return {
        "model": model,
        "prompt": prompt,
        "max new tokens": cfg.max_new_tokens,
        "KV cache": cfg.use_cache,
        "decoding": f"sampling, temperature {cfg.temperature:g}, top-p {cfg.top_p:g}, top-k {cfg.top_k}, seed "
        f"{cfg.seed}"
        if cfg.do_sample
        else "greedy",
        "compiled decode": cfg.compile,
        "chat template": cfg.chat_template,
    }


def ran_with_line(run: dict, now: dict | None) -> str:
    """What a stored run (a reload's, presenter mode's) was run with, and whether the inputs on the page now are
    those (ui.pace.ran_with): the reload reset them, so the result must not pass for theirs. `now`: ran_with of
    the page's inputs (None while a setting is refused or no model is loaded)."""
    kept = run.get("ran_with") or {  # a run stored before its inputs were: what it carries of them
        "model": run.get("model"),
        "max new tokens": run.get("max_new"),
        "KV cache": run.get("use_cache"),
    }
    return pace.ran_with(kept, now, "**This result**")


# ------------------------------------------------------- presenter mode's cache on/off comparison
# The session's finished runs the chart's pair is chosen from (cache_curve).
RUNS_KEPT = 12


def cache_curve(runs: list[dict]) -> dict[bool, dict]:
    """The two runs the chart overlays: walking back from the newest, the first cache-on and cache-off runs of the
    same prompt and settings (pair_setup); with no such pair, the newest run alone. A pair of two prompts compared a
    265-token passage's prefill with a 5-token question's."""
    found: dict[str, dict[bool, dict]] = {}
    for run in reversed(runs):
        setup = pair_setup(run)
        if setup is None:
            continue
        halves = found.setdefault(setup, {})
        halves.setdefault(bool(run["use_cache"]), run)
        if len(halves) == 2:
            return dict(halves)
    return {bool(runs[-1]["use_cache"]): runs[-1]} if runs else {}


@dataclass(frozen=True)
class CachePair:
    """The newest cache on/off pair recorded on this machine: its two halves, the stored results they came from
    (the newer one's session table is shown), and whether both were measured on a quiet machine."""

    on: dict
    off: dict
    newer: runlog.StoredResult
    quiet: bool


def cache_pair() -> CachePair | None:
    """Presenter mode's cache comparison, from every stored Playground result (a session stores its last run and
    the cache on/off pair its chart draws; a presenter's two runs may also lie in two sessions): walking back from
    the newest, the first cache-on and cache-off runs of the same settings both measured clean (ui.narrative.clean:
    no other work by the load rule, and no step that stalled: a pair called quiet beside 'a step took 7.85 s' read
    as a contradiction to a presenter); where no such pair is recorded, the first pair of the same settings whatever
    its load (the notes under its chart say what disturbed each run).
    None: no run with the cache off of a cache-on run's settings is recorded here."""
    from ui.narrative import clean

    found: dict[tuple[str, bool], dict[bool, tuple[dict, runlog.StoredResult]]] = {}
    first_any: CachePair | None = None
    curated = runlog.curated_session()
    # the tour's recording first (ui.pace.presented), then everyone's, each newest first
    for stored in sorted(runlog.results(EXPERIMENT), key=lambda r: curated is None or r.session != curated):
        payload = stored.payload if isinstance(stored.payload, dict) else {}
        for key, half in (payload.get("curve") or {}).items():
            setup = pair_setup(half)
            if setup is None or key not in ("True", "False"):
                continue
            on = key == "True"
            # every half counts towards a pair of any load; a quiet one towards a quiet pair as well
            for quiet in {False, clean(half, on)}:
                halves = found.setdefault((setup, quiet), {})
                halves.setdefault(on, (half, stored))
                if len(halves) == 2:
                    (a, at_a), (b, at_b) = halves[True], halves[False]
                    pair = CachePair(a, b, max(at_a, at_b, key=lambda r: r.date), quiet)
                    if quiet:
                        return pair
                    first_any = first_any or pair
    return first_any


def _pair_note(pair: CachePair) -> str:
    """The line above presenter mode's pair: whose runs, when, and on what load."""
    when = pair.newer.when
    load = (
        "both measured on a quiet machine, no step stalled"
        if pair.quiet
        else "no pair measured clean is recorded, so the newest pair: the notes under its chart say what disturbed "
        "each run"
    )
    return (
        f"Presenter mode: the newest KV cache on/off pair recorded on this machine with the same settings ({load}), "
        f"stored {when}; not live. Press Generate to run it now."
    )


def _run_cache_off(ns: str) -> None:
    """The offer's button: the sidebar's cache switch off, and a Generate on the page's next run."""
    st.session_state[f"{ns}.cache"] = False
    st.session_state[f"{ns}.generate"] = True
    st.session_state[f"{ns}.completing"] = True  # the recorded cache-on run is its other half (went_live)


def generate_asked(ns: str) -> bool:
    """The presenter's cache-off button was pressed (once: the request is spent when read)."""
    return bool(st.session_state.pop(f"{ns}.generate", False))


def missing_cache_off(ns: str) -> bool:
    """Presenter mode before anything ran live here, with no cache on/off pair of the same settings to show."""
    state = st.session_state
    restored = state.get(f"{ns}.restored")
    before_live = (
        restored.presenter
        if restored is not None
        else state[f"{ns}.last"] is None and not state[f"{ns}.history"]
    )
    return presenter_mode() and before_live and not _has_pair(state[f"{ns}.curve"])


def offer_cache_off(ns: str) -> None:
    """Presenter mode with no cache on/off pair recorded (missing_cache_off): one sentence that says so, and the
    button that runs the missing half now."""
    st.info(
        "No run with the KV cache off is recorded on this machine beside a cache-on run of the same settings, so "
        "there is no cache comparison to show yet: this button runs it now, with the prompt and settings on this page.",
        icon=":material/compare_arrows:",
    )
    st.button(
        "Generate with the KV cache off",
        key=f"{ns}.cache_off_go",
        on_click=_run_cache_off,
        args=(ns,),
        help="Turns Use KV cache off in the sidebar and generates once.",
    )


def restore(ns: str) -> DeltaGenerator:
    """A fresh session (a reload, or presenter mode) opens on the stored runs, with the line that says whose; the
    line stays on every rerun until a live run replaces them (they must never pass for this session's runs).
    Presenter mode opens on the newest cache on/off pair recorded here (cache_pair); with none, the page says so
    beside its button (missing_cache_off, offer_cache_off). Returns the line's place: a live run empties it (it
    was drawn before the run, and said 'not live' above the run's own result)."""
    state = st.session_state
    slot = st.empty()
    if state[f"{ns}.last"] is not None or state[f"{ns}.history"]:
        restored = state.get(f"{ns}.restored")
        if restored is not None:
            with slot.container():
                pace.note(restored)
        return slot
    shown = pace.shown_result(EXPERIMENT, None, lambda p: p)
    pair = cache_pair() if (shown is None or shown.presenter) and presenter_mode() else None
    if pair is not None:
        p = pair.newer.payload
        halves = {True: pair.on, False: pair.off}
        last = pair.on  # the page's own default: the line under it then finds the inputs the same
        # the table holds the pair's own two runs: the newer session's table listed other runs, so the tiles (the
        # cache-on half) and the table's cache-on row disagreed (467 ms against 616.9 ms: a presenter's walk)
        rows = [_pair_row(half) for half in (pair.on, pair.off)]
        shown = pace.Shown({**p, "last": last, "curve": {str(k): v for k, v in halves.items()},
                            "history": [r for r in rows if r is not None]}, _pair_note(pair),
                           presenter=True)  # fmt: skip
    if shown is None:
        return slot
    state[f"{ns}.restored"] = shown
    p = shown.result
    state[f"{ns}.last"] = _unslim(p["last"]) if p.get("last") else None
    state[f"{ns}.curve"] = {on == "True": _unslim(r) for on, r in p.get("curve", {}).items()}
    state[f"{ns}.history"] = list(p.get("history", []))
    with slot.container():
        pace.note(shown)
    return slot


def went_live(ns: str, note: DeltaGenerator) -> None:
    """A live run (finished, stopped or a batch) replaces what `restore` drew: the 'not live' line above goes, and
    presenter mode's table rows, another session's runs, leave this session's table, which holds its own runs
    only (they passed for the user's own after a live run, numbered 1 and 2). A reload's rows are the session's
    own, and stay."""
    restored = st.session_state.pop(f"{ns}.restored", None)
    note.empty()
    completing = st.session_state.pop(f"{ns}.completing", False)
    if restored is not None and restored.presenter:
        st.session_state[f"{ns}.history"] = []
        # nor may its runs pair with a live one (after one live cache-on run the headline read 'the cache off was
        # 10.7x slower' against the recorded cache-off run, unlabelled: a presenter's walk), unless the run is the
        # missing half presenter mode's own button offered to run beside the recorded one (offer_cache_off)
        if not completing:
            st.session_state[f"{ns}.curve"] = {}
            st.session_state[f"{ns}.runs"] = None


def _has_pair(curve: dict) -> bool:
    """The page's chart has both halves of the same settings to compare."""
    on, off = pair_setup(curve.get(True)), pair_setup(curve.get(False))
    return on is not None and on == off
