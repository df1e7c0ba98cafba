"""Prompt playground: load a model, generate for one prompt or a batch, streamed, measured every run.

The run is the engine's one call (engine.runtime.run: it picks the route, streams, cancels, measures and logs);
this page draws its events and its report."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from engine.core.errors import EngineError
from engine.runtime import run
from ui import export
from ui.batching_widgets import cached_scheduler
from ui.common import fmt_bytes, fmt_count, fmt_seconds, init_state, page_setup, show_error
from ui.forecast_view import forecast_outcome, show_run_forecast
from ui.narrative import greedy_text_note, latency_sentence, others_of, run_headline, was_busy
from ui.playground_widgets import (
    HISTORY_PARTS,
    MEANING,
    PROMPTS,
    RUNS_KEPT,
    cache_curve,
    generate_asked,
    generation_settings,
    history_row,
    keep,
    latency_figure,
    live_line,
    metrics_row,
    missing_cache_off,
    offer_cache_off,
    prompt_example,
    ran_with,
    ran_with_line,
    restore,
    show_decode_path,
    show_recorded_gpu_decode,
    went_live,
)
from ui.widgets import button_why, sidebar_model, split_dataframes

NS = "playground"
CHAT_SWITCH = "**Use the chat template** (sidebar)"

page_setup("Playground", measures=True)
init_state(NS, history=[], last=None, running=None, curve={}, runs=[])
restored_note = restore(NS)  # a reload, or presenter mode: the stored runs, said so
st.title("Playground")
st.markdown(
    "Press **Generate**, then switch **Use KV cache** off in the sidebar and press it again. Each run is measured "
    "here: time to the first token, time per output token, throughput and peak memory. The chart then sets the two "
    "runs side by side, token by token."
)

lm = sidebar_model(NS)

if lm is not None:
    with st.expander(
        f"Loaded: **{lm.name}** · {lm.dtype} · {lm.device} · {fmt_bytes(lm.footprint_bytes)}", expanded=False
    ):
        c = st.columns(4)
        c[0].metric("Parameters", fmt_count(lm.params), help="sum of parameter elements (tied weights once)")
        c[1].metric("Memory footprint", fmt_bytes(lm.footprint_bytes), help="model.get_memory_footprint()")
        c[2].metric("Load time", fmt_seconds(lm.load_s), help="measured when this server loaded it")
        c[3].metric("Context window", f"{lm.context_length:,} tokens")
        st.markdown(
            "**Placement** (accelerate's `hf_device_map`, or the single device): "
            + ", ".join(f"`{k or 'whole model'}` → `{v}`" for k, v in lm.device_map.items())
        )
        st.caption(f"Source: {lm.source}. " + " ".join(lm.notes))

with st.sidebar:
    cfg, use_cache = generation_settings(NS, lm)

batch_mode = st.toggle(
    "Batch mode: one prompt per line, generated together as one padded batch", key=f"{NS}.batch"
)
prompt = st.text_area(
    "Prompts (one per line)" if batch_mode else "Prompt",
    PROMPTS[prompt_example(NS)]
    if not batch_mode
    else "The capital of France is\nOnce upon a time\ndef fibonacci(n):",
    height=120,
    key=f"{NS}.prompt.{batch_mode}",
)
# the forecast's seconds at the load now: the clock counts down from it before a first token
expected_s = None
forecast_box = st.empty()  # the forecast before a run; the outcome beside it once the run is over
if lm is not None and cfg is not None and not batch_mode:
    with forecast_box.container():
        expected_s = show_run_forecast(lm, prompt, cfg.max_new_tokens, use_cache)
why = (
    "load a model first" if lm is None else "a setting in the sidebar is out of range" if cfg is None else ""
)
go_col, clock_col = st.columns([1, 3], vertical_alignment="center")  # the clock beside the button, in view
# presenter mode's "Generate with the KV cache off" (below) asks for one run with the cache switched off
go = button_why(go_col, "Generate", type="primary", why=why, key=f"{NS}.go") or generate_asked(NS)
if not go and missing_cache_off(NS):
    offer_cache_off(NS)  # no cache on/off pair recorded here: said in one sentence, beside its button
if lm is not None:
    snap = cached_scheduler(lm).snapshot()
    st.caption(
        f"Shared scheduler for {lm.name}: {len(snap.running)} request(s) generating, "
        f"{len(snap.waiting)} waiting (all browser sessions). Single prompts with the KV cache on go "
        "through it; see the Batching page for its live batch."
    )

# A run that was still going when this script started again was stopped: by the Stop button, by a widget change,
# or by a closed tab. Keep what it made, marked cancelled; it never reaches a comparison or the run log.
running = st.session_state[f"{NS}.running"]
if running is not None:
    running["status"] = "cancelled"
    running["elapsed"] = time.perf_counter() - running["request_t"]
    st.session_state[f"{NS}.last"] = running
    went_live(NS, restored_note)
    st.session_state[f"{NS}.running"] = None
    st.session_state[f"{NS}.history"].append(
        {
            **running["row"],
            "output tokens": running["tokens"],
            "latency (s)": round(running["elapsed"], 3),
            "stop": "cancelled",
        }
    )


def run_single(lm, prompt: str, cfg, beside, expected_s: float | None = None) -> None:
    """Stream one prompt with a Stop button, tokens so far / max, elapsed and live tok/s (those two in `beside`,
    next to the Generate button, so they are in view when it is pressed). The partial run lives in session state
    while it streams, so a Stop (which reruns the page) keeps its text."""
    r = run.start(lm, prompt, cfg, scheduler=cached_scheduler(lm), source="playground")
    cur = {
        "ran_with": ran_with(lm.name, prompt, cfg),
        "model": lm.name,
        "use_cache": cfg.use_cache,
        "max_new": cfg.max_new_tokens,
        "tokens": 0,
        "elapsed": 0.0,
        "text": prompt if cfg.include_prompt else "",
        "request_t": r.request_t,
        "status": "running",
        "row": {
            "time (UTC)": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()),
            "model": lm.name,
            "dtype": lm.dtype,
            "device": lm.device,
            "mode": "single",
            "batch": 1,
            "kv cache": cfg.use_cache,
            "decode": "compiled" if cfg.compile else "eager",
        },
    }
    st.session_state[f"{NS}.running"] = cur
    stop_slot = beside.empty()  # emptied when the run ends: a Stop button must not outlive its run
    stop_slot.button(
        "Stop",
        icon=":material/stop_circle:",
        key=f"{NS}.stop_btn",
        help="Stops generating at the next token; the text so far is kept, marked cancelled.",
    )
    status, box = beside.empty(), st.empty()
    status.caption(live_line(0, cfg.max_new_tokens, 0.0, None, expected_s))
    # without the cache each token recomputes the prompt and what came before it: the clock weighs the tokens left
    # by that (ui.playground_widgets.work_split); the chat template's few tokens are not counted
    n_prompt = None if cfg.use_cache else max(1, len(lm.tokenizer(prompt)["input_ids"]))
    shown_at = 0.0
    try:
        for (
            ev
        ) in r.events():  # a chunk, or at least every 0.25 s: elapsed and tok/s move while nothing arrives
            cur.update(tokens=ev.tokens, text=cur["text"] + ev.text, elapsed=ev.elapsed_s)
            if (
                ev.elapsed_s - shown_at > 0.15
            ):  # at most ~7 redraws a second: the browser, not the model, is the limit
                status.caption(
                    live_line(
                        ev.tokens,
                        cfg.max_new_tokens,
                        ev.elapsed_s,
                        ev.compiling,
                        expected_s,
                        prompt_tokens=n_prompt,
                        use_cache=cfg.use_cache,
                    )
                )
                if cur["text"]:
                    box.code(cur["text"], language=None, wrap_lines=True)
                shown_at = ev.elapsed_s
        report = r.report()
    except EngineError:
        st.session_state[f"{NS}.running"] = None  # failed, not stopped: the error says why; nothing to keep
        raise
    finally:
        r.cancel()  # a rerun (Stop, a widget change) or a closed tab stops this script mid-loop: stop for nobody
    stop_slot.empty()
    status.empty()
    box.empty()
    st.session_state[f"{NS}.running"] = None
    c = report.completion
    cur.update(
        status=c.stop_reason,
        text=c.shown(cfg.include_prompt),
        tokens=c.measurement.output_tokens,
        elapsed=c.measurement.latency_s,
        measurement=c.measurement,
        latency=report.latencies,
        load=report.load,
        completion=c,
        report=report,
        empty_note=run.ended_at_once_note(report, lm, cfg, CHAT_SWITCH),
    )
    st.session_state[f"{NS}.last"] = cur
    went_live(
        NS, restored_note
    )  # a live run: the stored runs' line and presenter mode's rows no longer apply
    if c.stop_reason != "cancelled":
        # the chart's pair: the newest cache-on and cache-off runs of the same prompt and settings (a restored
        # pair counts as the session's first runs)
        runs = st.session_state[f"{NS}.runs"] or list(st.session_state[f"{NS}.curve"].values())
        runs = [*runs, cur][-RUNS_KEPT:]
        st.session_state[f"{NS}.runs"] = runs
        st.session_state[f"{NS}.curve"] = cache_curve(runs)
    st.session_state[f"{NS}.history"].append(history_row(c.measurement, "single", c.stop_reason, c.decode))
    keep(NS, time.perf_counter() - r.request_t)  # the whole wait, as every stored run's "took" counts


def run_batch(lm, prompts: list[str], cfg, beside) -> None:
    """One padded batch, with a line (in `beside`, next to the button) that says what it waits for."""
    r = run.start(lm, prompts, cfg, source="playground")
    line = beside.empty()
    for ev in r.events():
        line.caption(
            f"Generating for {len(prompts)} prompts as one batch… {fmt_seconds(ev.elapsed_s)}"
            + (
                f" · {live_line(ev.tokens, cfg.max_new_tokens, ev.elapsed_s, ev.compiling)}"
                if ev.compiling
                else ""
            )
        )
    report = r.report()
    line.empty()
    show_decode_path(report)
    for c in report.completions:
        st.markdown(f"**{c.prompt}**")
        st.code(c.shown(cfg.include_prompt), language=None, wrap_lines=True)
        st.caption(
            f"{c.measurement.output_tokens} tokens · stopped by {c.stop_reason} · "
            f"finished at {fmt_seconds(c.measurement.latency_s)}"
        )
    st.markdown("**The batch as a whole**")
    metrics_row(report.measurement, report.load, report.busy, report.cores, report.others)
    went_live(NS, restored_note)
    st.session_state[f"{NS}.history"].append(history_row(report.measurement, "batch", "mixed", report.decode))
    keep(NS, time.perf_counter() - r.request_t)


if go and lm is not None:
    try:
        cfg = cfg.validate()
        if batch_mode:
            run_batch(lm, [p for p in prompt.splitlines() if p.strip()], cfg, clock_col)
        else:
            run_single(lm, prompt, cfg, clock_col, expected_s)
            done = st.session_state[f"{NS}.last"]
            if expected_s is not None and done is not None and done.get("report") is not None:
                report = done["report"]
                forecast_box.caption(
                    forecast_outcome(expected_s, report.measurement.latency_s, was_busy(done))
                )
    except EngineError as exc:
        show_error(exc)

last = st.session_state[f"{NS}.last"]
report: list = []
if (
    last is not None
    and not batch_mode
    and last.get("measurement") is not None
    and last["status"] != "cancelled"
):
    # beside the button, in view when it is pressed: the tiles land below the fold at 900 px
    clock_col.markdown(
        run_headline(last["measurement"], last["use_cache"], st.session_state[f"{NS}.curve"], last["model"])
    )
if last is not None and not batch_mode:
    if (
        st.session_state.get(f"{NS}.restored") is not None
    ):  # a reload reset the inputs: say what this ran with
        now = ran_with(lm.name, prompt, cfg) if lm is not None and cfg is not None else None
        st.info(ran_with_line(last, now), icon=":material/tune:")
    st.code(last["text"], language=None, wrap_lines=True)
    looped = greedy_text_note(
        [last["text"]],
        last["model"],
        lm.params if lm is not None and lm.name == last["model"] else None,
        greedy=(last.get("ran_with") or {}).get("decoding", "greedy") == "greedy",
        measures="how fast it generates",
    )
    if looped:
        st.caption(
            f"{looped} For varied text, switch on **Sample** or raise **Repetition penalty** in the sidebar."
        )
    report += [
        export.Heading(f"Last run: {last['model']}, KV cache {'on' if last['use_cache'] else 'off'}"),
        export.Text(f"Stopped by **{last['status']}** after {last['tokens']} of {last['max_new']} tokens."),
        export.Table([{"output": last["text"]}]),
    ]
    if last["status"] == "cancelled":
        st.warning(
            f"**Cancelled** after {last['tokens']} of {last['max_new']} tokens "
            f"({fmt_seconds(last['elapsed'])}). The text above is what was made; this run is kept out of the "
            "run log and the comparisons.",
            icon=":material/cancel:",
        )
    else:
        st.caption(
            f"Stopped by **{last['status']}**"
            + (" (max new tokens reached: the output is truncated)" if last["status"] == "length" else "")
        )
        if last.get("empty_note"):
            st.info(last["empty_note"], icon=":material/chat:")
        if last.get("report") is not None:
            r = last["report"]
            show_decode_path(r.completion)
            metrics_row(r.measurement, r.load, was_busy(last), r.cores, others_of(last))
        elif last.get("measurement") is not None:  # a stored run (a reload, presenter mode)
            metrics_row(
                last["measurement"], last.get("load"), was_busy(last), last.get("cores"), others_of(last)
            )
    curves = {}
    for cache_on, done in sorted(st.session_state[f"{NS}.curve"].items(), reverse=True):
        if done["model"] == last["model"] and done.get("latency"):
            m = done.get("measurement")
            read = f"{m.prompt_tokens}-token prompt, " if m is not None else ""
            curves[f"KV cache {'on' if cache_on else 'off'} ({read}{done['tokens']} tokens)"] = done[
                "latency"
            ]
    if curves:
        fig = latency_figure(curves)
        st.plotly_chart(fig, width="stretch", key=f"{NS}.latency_chart")
        said = latency_sentence(st.session_state[f"{NS}.curve"], last["model"], last)
        st.caption(said)
        report += [export.Figure(fig, said)]

history = st.session_state[f"{NS}.history"]
restored = st.session_state.get(f"{NS}.restored")
runs_heading = (
    "Runs of the recorded session (presenter mode, not live)"
    if restored is not None and restored.presenter
    else "Runs in this session"
)
st.subheader(runs_heading)
if history:
    df = pd.DataFrame(history)
    split_dataframes([{"run": n, **row} for n, row in enumerate(history, 1)], "run", HISTORY_PARTS)
    c1, c2 = st.columns(2)
    c1.download_button(
        "Download runs (CSV)",
        df.to_csv(index=False).encode(),
        "playground_runs.csv",
        "text/csv",
        key=f"{NS}.csv",
        icon=":material/download:",
    )
    report += [export.Heading(runs_heading), export.Table(df)]
    with c2:
        export.download_button(
            "Playground",
            report,
            key=f"{NS}.html",
            subtitle="TTFT, TPOT, latency and throughput measured on every run.",
        )
else:
    st.caption("No runs yet. Generate once with the KV cache on and once off to see what the cache buys.")

show_recorded_gpu_decode()

with st.expander("What the measurements mean"):
    st.markdown(MEANING)
