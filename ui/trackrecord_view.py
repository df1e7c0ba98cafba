"""The Memory-and-cost page's GPU-estimate parts: what an engine estimate rests on, the launch command, and the
calculator's track record against published measurements (engine.trackrecord)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from engine import trackrecord as T
from engine.calc import format as fmt
from engine.calc.efficiency import ENGINE_CLASSES, INTERVAL_METHOD
from ui.widgets import shell_lines, split_table, word_table


def speed_caption(est, gpu) -> str:
    """One paragraph under the time metrics: which class, what it reaches on this GPU (its family's factor applied,
    as the reasoning below says it), what each share was fitted on, and how the interval was made."""
    f = est.speed.fit
    here = f.efficiency(gpu).bandwidth
    on_gpu = (
        f" ({here:.0%} on the {gpu.name}, its GPU family's factor applied)"
        if round(here, 2) != round(f.bandwidth, 2)
        else ""
    )
    fixed = (
        f" plus {f.overhead_s_per_layer * 1e6:.0f} µs per layer per step"
        if f.overhead_s_per_layer >= 1e-6
        else ""
    )
    compute = f"{f.flops:.0%} of the peak FLOP/s in prefill and {f.decode_flops:.0%} in a batched decode step's matmuls"
    if f.borrowed:
        compute += (
            f", borrowed from every engine's runs together (this class has too few published runs of its own for "
            f"its {', '.join(f.borrowed)})"
        )
    else:
        compute += f", fitted on {f.prefill_rows} published first-token and {f.throughput_rows} throughput measurements"
    return (
        f"**Estimates, not bounds.** {ENGINE_CLASSES[f.engine_class][0].upper()}{ENGINE_CLASSES[f.engine_class][1:]} reach {f.bandwidth:.0%} of the memory bandwidth "
        f"in decode{on_gpu}{fixed}, fitted on {f.decode_rows} published decode measurements; {compute}. The interval is "
        f"{INTERVAL_METHOD}; 'physics' is the bound with every roof reached. How well this held on published runs: "
        "the track record below."
    )


def launch_commands(est) -> None:
    """The commands for the layout the memory answer settled on, with the sentence that says which GPUs they are
    for (the ones asked, or the ones it needs) and what to do about the model id; or why there is none."""
    if est.inputs.engine not in ("vllm", "sglang"):
        if est.inputs.engine is None:  # this machine, or the physical bound: no engine chosen
            return
        st.caption(
            "No launch command for this engine: it runs inside your own Python program, not as a server. Choose "
            "vLLM or SGLang as the engine for a server's command (the model id above goes into it)."
        )
        return
    with st.expander("Launch it: the command for this plan", expanded=True):
        if est.launch is None:
            st.info(f"No command: {est.fit.sentence}")
            return
        (st.caption if est.fits and est.model_id else st.warning)(est.launch.note)
        st.caption("vLLM")
        st.code(shell_lines(est.launch.vllm), language="bash")
        st.caption("SGLang")
        st.code(shell_lines(est.launch.sglang), language="bash")
        for step in est.launch.multi_node:
            st.markdown(f"- {step}")
        st.caption(
            "Then load-test the endpoint from the Serving page (*Any OpenAI-compatible URL*) and compare its "
            "measured throughput and latency with the estimates above."
        )


UNIT_SUFFIXES = ("ms", "s", "gib", "gb", "mib", "bytes")  # the row's unit column says it


def metric_words(metric: str) -> str:
    """A row's metric as words, its unit left to the unit column: 'total_gpu_memory_gib' -> 'total GPU memory',
    'decode_tokens_per_s' -> 'decode tokens/s', 'tpot_ms' -> 'TPOT'."""
    words = metric.replace("_per_s", "/s").replace("_per_min", "/min").split("_")
    if len(words) > 1 and words[-1] in UNIT_SUFFIXES:
        words = words[:-1]
    return " ".join(
        {"gpu": "GPU", "kv": "KV", "ttft": "TTFT", "tpot": "TPOT", "itl": "ITL"}.get(w, w) for w in words
    )


@st.cache_data(show_spinner="Putting every published measurement beside its prediction…", max_entries=1)
def _cached_record() -> dict:
    tr = T.track_record(include_machine=False)
    return {
        "held_back": [s.__dict__ for s in tr.held_back],
        "all": [s.__dict__ for s in tr.all_rows],
        "rows": [
            {
                "group": r.group or "shown only",
                "metric": metric_words(r.metric),
                "model": r.model,
                "GPU": r.gpu,
                "engine": r.engine,
                "setup": r.setup,
                "published": r.published,
                "unit": r.unit,
                "predicted": r.predicted,
                "interval": f"{r.low:.4g}–{r.high:.4g}" if r.low is not None else "",
                "width": r.width,
                "interval from": f"{r.band_rows} rows, {r.band_level}" if r.band_level else "",
                "error": r.error,
                "held back": r.held_back,
                "why not scored": r.why or "",  # an empty cell, not 'None' (an engineer's walk)
                "note": r.note or "",
                "source": r.source if r.source.startswith("http") else "https://" + r.source.split("@")[0],
                "quote": r.quote,
            }
            for r in tr.rows
        ],
        "not_fitting": list(tr.not_fitting),
    }


# the rows table's columns at 1280 px without scrolling sideways: what was published, what was predicted, how far
NARROW_COLUMNS = (
    "metric",
    "model",
    "GPU",
    "engine",
    "published",
    "predicted",
    "unit",
    "error",
    "held back",
    "source",
)

SUMMARY_PARTS = (
    ("The verdict on each target", ("target met", "target")),
    ("What was measured: the errors of the central estimate", ("rows", "median |error|", "worst |error|")),
    (
        "What was measured: the share of rows inside their interval, and its width",
        ("inside the interval", "median width"),
    ),
)


def summary_tables(summaries: list[dict]) -> None:
    """The targets as three tables led by the metric (one was wider than the page at 1280 px: its target column and
    the errors were cut): the verdicts with their targets, then what was measured. The verdicts' table holds words
    (a target reads 'median |error| <= 12%, inside the interval >= 80%, median width <= 1.6x'), so it is drawn with
    cells that wrap: in a dataframe's fixed-width column the target was cut at 'median wid'."""
    for caption, rows in split_table(_summary_frame(summaries).to_dict("records"), "what", SUMMARY_PARTS):
        st.caption(caption)
        if any("target" in r for r in rows):
            word_table(st, rows)
        else:
            st.dataframe(rows, hide_index=True, width="stretch")


THIN_ROWS = 10  # fewer held-back rows than this: a verdict said as resting on few


def met_words(met: bool | None, rows: int) -> str:
    """A target's verdict with the rows it rests on: 'yes, 51 rows', 'NO, 30 rows', 'yes, only 3 rows'."""
    if met is None:
        return "no rows"
    verdict = "yes" if met else "NO"
    return f"{verdict}, only {rows} rows" if rows < THIN_ROWS else f"{verdict}, {rows} rows"


def _summary_frame(summaries: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {  # the verdict and its target beside the name, so both show without scrolling the table sideways
                "what": s["description"],
                # with its rows beside it: 'yes' on 3 rows read as a pass as sure as one on 51 (an engineer's walk)
                "target met": met_words(s["met"], s["rows"]),
                "target": s["target"],
                "median |error|": fmt.number(s["median_abs_error"] * 100, ".1f", missing="–") + " %",
                "inside the interval": "–" if s["coverage"] is None else f"{s['coverage']:.0%}",
                "median width": "–" if s["median_width"] is None else f"{s['median_width']:.2f}×",
                "rows": s["rows"],
                "worst |error|": fmt.number(s["worst_abs_error"] * 100, ".1f", missing="–") + " %",
            }
            for s in summaries
        ]
    )


def track_record_section(key: str) -> None:
    st.header("Track record: the calculator against published measurements")
    st.caption(
        "Every published GPU measurement the calculator keeps (vLLM/SGLang startup logs, gpt-fast, TensorRT-LLM, "
        "llama.cpp, MLC, ExLlamaV2, vLLM, SGLang, TGI, DeepSpeed), each with its source and the quoted text, beside the "
        "calculator's prediction for the same setup. About 30% of the rows were held back before any fit (chosen by "
        "a hash of their id): neither the fits nor the intervals saw them, and the targets are judged on them. An "
        "interval's width is high / low; its rows are the published rows it was read from."
    )
    if not st.toggle("Show the track record (a few seconds the first time on this server)", key=f"{key}.tr"):
        return
    rec = _cached_record()
    st.subheader("On the held-back rows")
    summary_tables(rec["held_back"])
    st.caption(
        "On every row. The fits were made on about 70% of them, so a target is judged on the held-back rows above; "
        "here the same target is read against every row, the fitted ones included."
    )
    summary_tables(rec["all"])
    st.markdown(
        "Setups a source ran that the calculator says do not fit: "
        + (", ".join(rec["not_fitting"]) if rec["not_fitting"] else "**none**.")
    )
    frame = pd.DataFrame(rec["rows"])
    groups = ["every row", *sorted(frame["group"].unique())]
    chosen = st.selectbox("Rows", groups, key=f"{key}.trgroup")
    shown = frame if chosen == "every row" else frame[frame["group"] == chosen]
    every = st.toggle(
        "Every column (setup, interval, why not scored, the quoted text)",
        key=f"{key}.trwide",
        help="The table shows what answers 'how close' first; every column scrolls sideways at 1280 px, and the CSV "
        "below always has them all.",
    )
    st.dataframe(
        shown,
        hide_index=True,
        width="stretch",
        column_order=None if every else NARROW_COLUMNS,
        column_config={
            "source": st.column_config.LinkColumn("source"),
            "error": st.column_config.NumberColumn(
                "error", help="predicted / published - 1 (its header was cut at 1280 px)", format="percent"
            ),
            "published": st.column_config.NumberColumn(format="%.4g"),
            "predicted": st.column_config.NumberColumn(format="%.4g"),
            "width": st.column_config.NumberColumn("width (high / low)", format="%.2f×"),
        },
    )
    st.download_button(
        "Download the track record (CSV)",
        shown.to_csv(index=False),
        "track-record.csv",
        key=f"{key}.trcsv",
        icon=":material/download:",
    )
