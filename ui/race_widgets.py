"""Streamlit pieces of the latency race page: the results view (shared by live and recorded races) and
its plotly figures. The numbers and the words all come from the engine (engine.race.runner fills the
record, engine.race.verdict writes the sentences); nothing is recomputed here."""

from __future__ import annotations

import sys
from pathlib import Path

import plotly.graph_objects as go
import streamlit as st

from engine.calc import format as fmt
from engine.core import verdict as core_verdict
from engine.core.jsonsafe import is_number
from engine.core.paths import scrub
from engine.lab.evaluation import scored_text
from engine.race import compat, quality, runner, serialise, verdict
from engine.race.contenders import BASELINE
from engine.race.record import ContenderResult, RaceResult
from engine.runtime import runlog
from ui.widgets import word_table

GROUPS = ("engines", "levers")
GREY = "#b0b0b0"


def _ordered(result: RaceResult) -> list[ContenderResult]:
    """Engines first, then levers (vanilla leads the engines)."""
    return sorted(result.contenders, key=lambda c: GROUPS.index(c.group) if c.group in GROUPS else 2)


def latency_figure(result: RaceResult) -> go.Figure:
    fig = go.Figure()
    for c in _ordered(result):
        if c.ran and c.latencies_s:
            fig.add_trace(
                go.Box(
                    y=[v * 1e3 for v in c.latencies_s],
                    name=c.label,
                    boxpoints="all",
                    jitter=0.3,
                    pointpos=0,
                    hovertemplate="%{y:.1f} ms<extra>" + c.name + "</extra>",
                )
            )
    fig.update_layout(
        title=f"End-to-end latency per run ({result.max_new_tokens} new tokens, greedy)",
        yaxis_title="latency (ms)",
        showlegend=False,
        height=380,
        margin={"t": 50, "b": 40},
    )
    return fig


# One colour per verdict (engine.core.verdict.direction decides, the same rule the verdict's words use): a bar
# never looks like a win the verdict does not call one.
VERDICT_COLOURS = {
    "faster": "#2ca02c",  # green: the 95% interval lies above 1x
    "slower": "#d62728",  # red: below 1x
    "same": GREY,  # the interval includes 1x: no measurable difference, whatever the point
    "unknown": "#dddddd",  # no interval (too few runs): a point, neither faster nor slower
    "unreliable": GREY,  # vanilla drifted during the race: the verdict calls the ratio unreliable
}
VERDICT_WORDS = {
    "faster": "faster",
    "slower": "slower",
    "same": core_verdict.NO_DIFFERENCE.split(" (")[0],  # "no measurable difference"
    "unknown": "no interval",
    "unreliable": "not a reliable ratio",
}


def bar_verdict(c: ContenderResult) -> str:
    """The bar's verdict: the lane's own (faster, slower, same or unknown); a pass-through engine is 'same'
    whatever was measured (it runs vanilla's modules: the verdict calls the difference noise), and a lane raced
    while vanilla's own speed drifted is 'unreliable' (its verdict says "not a reliable ratio", so its bar is
    never drawn as a win or a loss)."""
    if verdict.is_pass_through(c):
        return "same"
    if verdict.drifted(c):
        return "unreliable"
    return core_verdict.direction(
        c.speedup_vs_vanilla, (c.speedup_low, c.speedup_high) if c.interval_shown else None
    )


def speedup_figure(result: RaceResult, *, busy: bool = False) -> go.Figure:
    """Bars with their bootstrap 95% interval, coloured and labelled by the lane's verdict; a lane without an
    interval (too few runs) is a pale bar labelled so; a race measured on a busy machine is 'unreliable' (grey)
    throughout, as its words say."""
    ran = [
        c
        for c in _ordered(result)
        if c.ran and is_number(c.speedup_vs_vanilla) and c.name != verdict.BASELINE
    ]
    ways = ["unreliable" if busy else bar_verdict(c) for c in ran]
    fig = go.Figure(
        go.Bar(
            x=[c.label for c in ran],
            y=[c.speedup_vs_vanilla for c in ran],
            marker_color=[VERDICT_COLOURS[w] for w in ways],
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [
                    max(0.0, c.speedup_high - c.speedup_vs_vanilla) if c.interval_shown else 0 for c in ran
                ],
                "arrayminus": [
                    max(0.0, c.speedup_vs_vanilla - c.speedup_low) if c.interval_shown else 0 for c in ran
                ],
            },
            customdata=ways,
            hovertemplate="%{y:.2f}× vs vanilla: %{customdata}<extra></extra>",
        )
    )
    for c, w in zip(ran, ways, strict=True):  # each bar's words above its whisker, never on it
        top = max(c.speedup_vs_vanilla, c.speedup_high if c.interval_shown else 0.0)
        fig.add_annotation(
            x=c.label, y=top, text=_bar_text(c, w), showarrow=False, yanchor="bottom", yshift=6
        )
    fig.add_hline(y=1.0, line_dash="dot", annotation_text="vanilla", annotation_position="top left")
    fig.update_layout(
        title="Speedup vs vanilla (ratio of median latencies, whiskers: bootstrap 95% interval)<br>"
        f"<sup>green: faster, red: slower, grey: {VERDICT_WORDS['same']} or {VERDICT_WORDS['unreliable']}, "
        "pale: too few runs for an interval "
        "(the verdict's own rule)</sup>",
        yaxis_title="× faster than vanilla",
        height=380,
        margin={"t": 70, "b": 40},
    )
    return fig


def _bar_text(c: ContenderResult, way: str) -> str:
    span = f" ({c.speedup_low:.2f}–{c.speedup_high:.2f})" if c.interval_shown else ""
    return f"{c.speedup_vs_vanilla:.2f}×{span}<br>{VERDICT_WORDS[way]}"


def metric_figure(result: RaceResult, attr: str, title: str, scale: float, unit: str) -> go.Figure:
    ran = [c for c in _ordered(result) if c.ran and is_number(getattr(c, attr))]
    fig = go.Figure(
        go.Bar(
            x=[c.label for c in ran],
            y=[getattr(c, attr) * scale for c in ran],
            hovertemplate="%{y:.3g} " + unit + "<extra></extra>",
        )
    )
    fig.update_layout(title=title, yaxis_title=unit, height=300, margin={"t": 45, "b": 40})
    return fig


def _conversion(c: ContenderResult) -> str:
    if c.conversion_s is None:
        return "-"
    return (
        f"converted now in {fmt.seconds(c.conversion_s)}"
        if c.converted_now
        else f"cached (took {fmt.seconds(c.conversion_s)})"
    )


def _interpreter(c: ContenderResult) -> str:
    """Which Python ran the lane, in words (a server path or an environment's folder name is not for the page)."""
    # the lanes that always run in their own environment say so whatever interpreter path ran them: a recorded
    # GPU race ran the pinned lane through a wrapper over the image's Python, whose path looks like the app's
    if c.name in SIDE_ENV_LANES:
        return SIDE_ENV_LANES[c.name]
    # a recorded race names the Python of the machine it ran on: the app's own environment is the folder ".venv"
    if not c.python or ".venv" in Path(c.python).parts or Path(c.python) == Path(sys.executable):
        return "this app's Python"
    return "a side environment"


SIDE_ENV_LANES = {
    "deepspeed-pinned": "the pinned side environment (older transformers for DeepSpeed's kernels)",
    "vllm": "vLLM's own environment",
}


BUSY_LANE = "not comparable: measured on a busy machine (other work shifts each lane's timing differently)"


def verdict_rows(result: RaceResult, *, busy: bool = False) -> list[dict]:
    """One row per lane: its verdict worded from its numbers, or, for a race measured on a busy machine, said not
    comparable (the winner line calls none either); the measured interval stays."""
    return [
        {
            "group": c.group,
            "lane": c.label,
            # worded again from the numbers: a recorded file's stored sentence may predate the one rule
            "verdict": BUSY_LANE
            if busy and c.ran and c.name != verdict.BASELINE
            else verdict.lane_verdict(c),
            "speedup interval": (
                (
                    f"[{c.speedup_low:.2f}×–{c.speedup_high:.2f}×] run to run, on a busy machine"
                    if busy and c.interval_shown
                    else verdict.interval_line(c)
                )
                if c.ran and c.name != verdict.BASELINE
                else "-"
            ),
        }
        for c in _ordered(result)
    ]


FIRST_PEERS = ("ctranslate2", "onnxruntime-genai", "openvino")  # the quickest peer first (bench/tour.py)


def race_defaults() -> tuple[str, ...]:
    """The page's starting race, sized for a live demo: vanilla against the quickest peer engine installed here
    (read from the installed packages' metadata, nothing imported); vanilla alone where none is, so a default
    race never starts a lane that can only say it is missing."""
    from engine.race.peers.base import backend, version

    for peer in FIRST_PEERS:
        if version(backend(peer).dist) is not None:
            return ("vanilla", peer)
    return ("vanilla",)


def _status_rows(result: RaceResult) -> list[dict]:
    return [
        {
            "contender": c.label,
            "status": c.status,
            # a lane that did not run has no engine version of its own to show (it carried the baseline's)
            "engine": f"{c.engine} {c.engine_version or ''}".strip() if c.ran else c.engine,
            "precision": c.precision or c.dtype or "-",
            "conversion": _conversion(c),
            "kernel injection": "yes" if c.kernel_inject else ("pass-through" if c.deepspeed_mode else "-"),
            "KV cache": "on" if c.use_cache else "off",
            "interpreter": _interpreter(c),
            "wall time": fmt.seconds(c.wall_s),
        }
        for c in _ordered(result)
    ]


def _reasons(result: RaceResult) -> list[str]:
    """One line per contender that has something to say: why it did not run, or how it ran. A note every lane
    carries (how the machine was set up, e.g. where the tokenizer came from) is said once, first."""
    lanes = _ordered(result)
    shared = set.intersection(*(set(c.notes) for c in lanes)) if len(lanes) > 1 else set()
    said_once = [n for n in lanes[0].notes if n in shared and not n.startswith("random weights")]
    lines = [f"- **Every lane**: {scrub(compat.note_words(n))}" for n in said_once]
    for c in lanes:
        notes = [
            scrub(compat.note_words(n))
            for n in c.notes
            if not n.startswith("random weights") and n not in shared
        ]
        said = [x for x in [verdict.one_line_reason(c.reason) if not c.ran else "", *notes] if x]
        if not c.ran and not said:
            said = [verdict.status_line(c)]
        if said:
            lines.append(f"- **{c.label}** ({c.status}): " + " · ".join(said))
    return lines


def _speed_row(c: ContenderResult) -> dict:
    if not is_number(c.speedup_vs_vanilla):
        sp = "n/a"
    elif c.name == BASELINE and c.interval_shown:  # its own run-to-run spread, not a ratio against anything
        sp = f"1× (the baseline; its runs spread {c.speedup_low:.2f}–{c.speedup_high:.2f})"
    elif c.interval_shown:
        sp = f"{c.speedup_vs_vanilla:.2f}× [{c.speedup_low:.2f}–{c.speedup_high:.2f}]"
    else:
        sp = f"{c.speedup_vs_vanilla:.2f}× (no interval)"
    return {
        "contender": c.label,
        "latency (median)": fmt.seconds(c.latency_s_median),
        "latency IQR": fmt.seconds(c.latency_s_q3 - c.latency_s_q1) if is_number(c.latency_s_q1) else "n/a",
        "TTFT": fmt.seconds(c.ttft_s_median),
        "TPOT": fmt.seconds(c.tpot_s_median),
        "tokens/s": f"{c.tokens_per_s_median:.1f}" if is_number(c.tokens_per_s_median) else "n/a",
        "tokens": f"{c.output_tokens_median:g}" if is_number(c.output_tokens_median) else "n/a",
        "peak RSS (worker)": fmt.gb(c.peak_rss_bytes),
        "speedup vs vanilla [95% CI]": sp,
    }


def _quality_row(c: ContenderResult) -> dict:
    if c.first_divergence_token is not None:
        divergence = f"token {c.first_divergence_token}"
    else:
        divergence = "none: identical" if c.quality_note.startswith("identical") else "n/a"
    return {
        "contender": c.label,
        "first divergence": divergence,
        "exact match (prompts)": f"{c.exact_match_rate:.0%}" if is_number(c.exact_match_rate) else "n/a",
        # four decimals, as the Quantization page's bits/byte; the header says how much text it scored
        f"bits per byte (first {quality.BPB_DOCUMENTS} Python docs)": (
            f"{c.bits_per_byte:.4f}" if is_number(c.bits_per_byte) else (c.bits_per_byte_note or "n/a")
        ),
        "perplexity (reference text)": f"{c.perplexity:.2f}" if is_number(c.perplexity) else "n/a",
    }


BUSY_WINNER = (
    "**Winner: not called.** The race ran on a busy machine: other work shifts each lane's timing differently, so a "
    "ratio measured now can turn either way. Run it again when the machine is quiet (presenter mode shows the last "
    "quiet race)."
)


def show_result(result: RaceResult, *, key: str, busy: bool = False) -> None:
    """The whole results view: verdicts, statuses, speed, quality, downloads. `key` keeps widget ids unique;
    `busy`: measured on a busy machine, so no winner is called (BUSY_WINNER)."""
    hw = result.hardware
    where = hw.get("gpu") or f"CPU: {hw.get('cpu', '?')} ({hw.get('cpu_cores_logical', '?')} cores)"
    load = f" · load average at start {result.load_avg_start[0]:.2f}" if result.load_avg_start else ""
    base_dtype = next((c.dtype for c in result.contenders if c.name == verdict.BASELINE and c.dtype), "")
    precision = f"race precision {result.dtype}" + (f" (vanilla ran in {base_dtype})" if base_dtype else "")
    st.caption(
        f"{result.model} · {where} · {precision} · "
        f"{result.runs} timed runs after {result.warmup} warm-up · {result.max_new_tokens} new tokens, greedy · "
        f"started {runlog.readable_date(result.started_at)}{load}"
    )
    cores = hw.get("cpu_cores_logical") or 1
    for note in result.notes:
        if note.startswith(
            runner.OLD_BUSY_NOTE_START
        ):  # a recorded race's line, worded again from its readings
            note = runner.busy_note(*runner.other_load(result, cores), cores)
        (st.caption if note.startswith("baseline steady") else st.warning)(scrub(note))
    # worded again from the lanes' numbers (a recorded file's stored line may predate the one verdict rule)
    st.markdown(BUSY_WINNER if busy else f"**Winner.** {verdict.winner_line(result.contenders)}")
    st.markdown("**Verdict per lane** (engines: whole inference engines; levers: one change to vanilla)")
    word_table(st, verdict_rows(result, busy=busy))
    st.markdown("**What ran** (a contender that could not run says why; the race went on without it)")
    word_table(st, _status_rows(result))
    lines = _reasons(result)
    if lines:
        st.markdown("\n".join(lines))
    if any("random weights" in n for c in result.contenders for n in c.notes):
        st.caption("Random weights: timings and memory are real, the generated text is gibberish.")
    ran = [c for c in _ordered(result) if c.ran]
    if not ran:
        st.error("No contender ran. The reasons are in the table above.")
        return
    st.markdown("**Speed** (measured in each lane's own worker process)")
    word_table(st, [_speed_row(c) for c in ran])
    st.markdown(
        "**Quality beside speed.** Greedy decoding is deterministic, so a contender computing the same function "
        "as vanilla gives the same tokens. *First divergence*: the first generated token that differs from "
        "vanilla's on the timed prompt. *Exact match*: the share of the race's prompts whose whole continuation "
        f"equals vanilla's. *Bits per byte* on {scored_text(quality.BPB_DOCUMENTS)}, the evaluation tab's "
        "pydoc_topics task (lm-eval's definition; independent of the tokenizer), where the engine exposes "
        "log-probabilities. The Quantization page scores as many of those documents as its box asks, so its "
        "figure for the same model differs wherever the counts differ: other text, not another model. "
        "*Perplexity* of a fixed reference text (teacher-forced; torch lanes only)."
    )
    word_table(st, [_quality_row(c) for c in ran])
    with st.expander("Each lane's output on the first prompt"):
        for c in ran:
            if c.texts:
                st.markdown(f"**{c.label}**")
                st.text(c.texts[0])
    st.plotly_chart(latency_figure(result), key=f"{key}.latency")
    st.plotly_chart(speedup_figure(result, busy=busy), key=f"{key}.speedup")
    cols = st.columns(2)
    cols[0].plotly_chart(
        metric_figure(result, "ttft_s_median", "TTFT (median): request to first token", 1e3, "ms"),
        key=f"{key}.ttft",
    )
    cols[1].plotly_chart(
        metric_figure(result, "tpot_s_median", "TPOT (median): per token after the first", 1e3, "ms"),
        key=f"{key}.tpot",
    )
    cols = st.columns(2)
    cols[0].plotly_chart(
        metric_figure(result, "tokens_per_s_median", "Tokens/s (median)", 1.0, "tok/s"), key=f"{key}.tps"
    )
    cols[1].plotly_chart(
        metric_figure(result, "peak_rss_bytes", "Peak RSS of the worker process", 1e-6, "MB"),
        key=f"{key}.mem",
    )
    files = (
        ("Download JSON", serialise.to_json, "", "json", "application/json", "json"),
        ("Download CSV (summary)", serialise.to_csv, "", "csv", "text/csv", "csv"),
        ("Download CSV (every run)", serialise.runs_csv, "-runs", "csv", "text/csv", "runs"),
    )
    for col, (label, write, suffix, ext, mime, k) in zip(st.columns(len(files)), files, strict=True):
        col.download_button(
            label,
            write(result),
            file_name=f"race-{result.model}{suffix}.{ext}",
            mime=mime,
            key=f"{key}.{k}",
            icon=":material/download:",
        )


def contender_picker(col, group: str, label: str, preselected=None) -> list[str]:
    """The contenders of one group (engines or levers); `preselected` (default: the race's own defaults) are
    ticked."""
    from engine.race import contenders

    names = [n for n, c in contenders.CONTENDERS.items() if c.group == group]
    chosen = contenders.DEFAULT_CONTENDERS if preselected is None else preselected
    return col.multiselect(
        label,
        names,
        default=[n for n in chosen if n in names],
        key=f"race.{group}",
        format_func=lambda n: contenders.CONTENDERS[n].label,
    )
