"""Playground helpers: the live progress line, the per-token latency chart, and the pre-run forecast."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import streamlit as st

from engine.calc import format as fmt
from engine.core.errors import EngineError
from ui.charts import log_ticks

# A run predicted to take longer than this gets a warning before it starts.
LONG_RUN_S = 60.0
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


def progress_text(tokens: int, max_new: int, elapsed: float) -> str:
    rate = tokens / elapsed if elapsed > 0 else math.nan
    return f"{tokens} / {max_new} tokens · {fmt.seconds(elapsed)} elapsed · " + (
        f"{rate:.1f} tok/s" if math.isfinite(rate) else "— tok/s"
    )


def show_forecast(fc) -> None:
    if fc is None:
        return
    text = (
        f"Predicted for this run: **{fmt.seconds(fc.seconds)}** (TTFT {fmt.seconds(fc.ttft_s)}, "
        f"{fmt.seconds(fc.tpot_s)} per token) — {fc.basis}."
    )
    if fc.seconds >= LONG_RUN_S:
        st.warning(
            text + " That is minutes: you can press **Stop** at any time and keep the text made so far.",
            icon=":material/hourglass_top:",
        )
    else:
        st.caption(text)


def compile_advice(lm):
    """Compiled decode's default for this model's device, decided by the recorded measurement
    (engine.runtime.recorded.compile_advice), and the sentence that says why."""
    from engine.runtime import recorded
    from engine.runtime.generation import GenerationConfig
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
    """Say once how the decode ran: the compile this run paid, or why it decoded eagerly."""
    if c.decode_note:
        st.warning(c.decode_note, icon=":material/build:")
    elif c.decode == "compiled" and c.compile_s:
        st.info(
            f"This run compiled the decode step: **{fmt.seconds(c.compile_s)}** of its latency, spent in its first "
            "decode step (so its TPOT, an average over the steps, includes it). Later compiled runs of this model "
            "on this server reuse it.",
            icon=":material/build:",
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
    with st.expander(
        f"Recorded GPU decode, not live: {first.machine} · {first.date[:10]} · {first.source}", expanded=False
    ):
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
            "Recorded by `scripts/gpu_check.sh` on a lent GPU; the dashboard's own runs are on this machine."
        )
