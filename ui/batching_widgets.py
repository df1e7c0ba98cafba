"""Streamlit helpers for batching: the one shared in-flight scheduler per loaded model, and the plots.

`cached_scheduler(lm)` is how every page (the playground included) sends requests through one scheduler per
model, so concurrent browser sessions share decode steps instead of queueing behind each other.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from engine.batching.handle import SchedulerSnapshot
from engine.batching.scheduler import Scheduler
from engine.batching.spec import UsersSpec
from engine.batching.sweep import Sweep
from engine.batching.workload import PolicyResult
from engine.core.paths import scrub
from engine.runtime.models import LoadedModel
from ui.charts import Series, two_panels
from ui.common import fmt_bytes
from ui.narrative import sweep_gain, sweep_mark

PHASE_COLOURS = {"queued": "#c9c9c9", "prefill": "#f2a541", "decode": "#3a7ca5", "idle slot": "#e4572e"}
SHARED_MAX_BATCH = 8


@st.cache_resource(show_spinner=False, max_entries=4)
def _scheduler(name: str, dtype: str, lm_id: int, _lm: LoadedModel) -> Scheduler:
    # keyed by the model object's id too: when ui.common.cached_model evicts and reloads a model, the old
    # scheduler (and the model it holds) is not reused
    # record=False: the page that submitted a request logs it with its source and how it ended (a cancelled
    # request never reaches a comparison); see record_completion
    return Scheduler(_lm, max_batch=SHARED_MAX_BATCH, record=False)


def record_completion(completion, source: str, session: str | None = None) -> None:
    """Log a finished request to the machine's run log with where it came from, how it ended and the browser
    session that asked for it."""
    from engine.runtime import runlog

    if completion is not None:
        runlog.record(
            completion.measurement, source=source, stop_reason=completion.stop_reason, session=session
        )


def cached_scheduler(lm: LoadedModel) -> Scheduler:
    """The in-flight scheduler shared by every session for this loaded model (created on first use)."""
    return _scheduler(lm.name, lm.dtype, id(lm), lm)


def sweep_figure(sweep: Sweep) -> go.Figure:
    b = [p.batch for p in sweep.points]
    pts = sweep.points
    fig = two_panels(
        b,
        ("Throughput (all rows, tokens/s)", "Per-request latency (s)"),
        [
            Series([p.tokens_per_s for p in pts], "measured", "#3a7ca5"),
            Series(
                [p.predicted_tokens_per_s for p in pts],
                "calculator (calibrated at batch 1)",
                "#888",
                dash="dash",
                markers=False,
            ),
            Series([p.latency_s for p in pts], "measured latency", "#e4572e", col=2),
            Series(
                [p.predicted_latency_s for p in pts],
                "calculator latency",
                "#bbb",
                col=2,
                dash="dash",
                markers=False,
            ),
        ],
        height=380,
    )
    fig.update_xaxes(type="log", title="batch size", tickvals=b)
    # the sentence's reading (ui.narrative.sweep_gain), marked on the chart: the best batch, or none
    best = sweep_gain(pts)
    fig.add_annotation(
        x=math.log10(best.batch if best else pts[0].batch),
        y=best.tokens_per_s if best else pts[0].tokens_per_s,
        text=sweep_mark(pts),
        showarrow=True,
        arrowhead=2,
        row=1,
        col=1,
    )
    if sweep.max_batch_fits <= 4 * max(b):
        for col in (1, 2):
            fig.add_vline(x=max(1, sweep.max_batch_fits), line_dash="dot", line_color="red", row=1, col=col)
    return fig


def gantt_figure(result: PolicyResult, title: str, x_max: float | None = None) -> go.Figure:
    fig = go.Figure()
    rows = result.timeline()
    for phase, colour in PHASE_COLOURS.items():
        part = [r for r in rows if r.phase == phase and r.end_s > r.start_s]
        if not part:
            continue
        fig.add_bar(
            y=[f"req {r.request + 1}" for r in part],  # numbered from 1, as the simulated users are
            x=[r.end_s - r.start_s for r in part],
            base=[r.start_s for r in part],
            orientation="h",
            name=phase,
            marker_color=colour,
            hovertemplate="%{y}: " + phase + " %{base:.2f}s → +%{x:.2f}s<extra></extra>",
        )
    n = result.n_requests
    height, top, bottom = max(260, 18 * n + 100), 40, 75
    fig.update_layout(
        title=title,
        barmode="overlay",
        height=height,
        margin={"t": top, "b": bottom},
        xaxis={"title": "seconds since the first request", "range": [0, x_max] if x_max else None},
        yaxis={
            "autorange": "reversed",
            "categoryorder": "array",
            "categoryarray": [f"req {i + 1}" for i in range(n)],
        },
        # below the axis title, in pixels turned into the plot's own units (it sat on the title)
        legend={"orientation": "h", "yanchor": "top", "y": -52 / (height - top - bottom)},
    )
    return fig


def show_snapshot(
    snap: SchedulerSnapshot, since: SchedulerSnapshot | None = None, users: dict[int, int] | None = None
) -> None:
    """The shared scheduler's queue, batch and counters. While simulated users run, `since` is the snapshot at their
    start (the counter tile then counts their steps, the scheduler's totals in its help) and `users` maps their
    request numbers to users 1..n (a column of its own: the shared numbers need not start at 1)."""
    c = st.columns(5)
    c[0].metric("Running", f"{len(snap.running)} / {snap.max_batch}")
    c[1].metric("Queued", len(snap.waiting))
    c[2].metric(
        "KV cache in use",
        fmt_bytes(snap.kv_bytes_in_use),
        help=f"the running rows' window of the preallocated slot cache, padding included, measured ({fmt_bytes(snap.kv_bytes_allocated)} allocated for all slots)",
    )
    c[3].metric(
        "KV budget",
        fmt_bytes(snap.kv_budget_bytes),
        help=f"{fmt_bytes(snap.kv_bytes_per_token)} per token (2 × layers × KV heads × head dim × bytes)",
    )
    if since is not None:
        c[4].metric(
            "Decode steps / tokens, this run",
            f"{snap.steps - since.steps} / {snap.tokens_generated - since.tokens_generated}",
            help=f"since these users started; the shared scheduler's totals since it started are {snap.steps} / "
            f"{snap.tokens_generated} (the Playground's cache-on prompts run through it too)",
        )
    else:
        c[4].metric(
            "Decode steps / tokens",
            f"{snap.steps} / {snap.tokens_generated}",
            help="since the shared scheduler started: the Playground's cache-on prompts run through it too, so these "
            "counts and the request numbers include theirs",
        )
    rows = [
        ({"user": users.get(r.id, "other")} if users else {})
        | {
            "request": r.id,
            "state": r.state,
            "prompt tokens": r.prompt_tokens,
            "generated": r.generated,
            "max new": r.max_new_tokens,
            "queued (s)": round(r.waited_s, 2),
            "age (s)": round(r.age_s, 2),
            "latest text": r.preview,
        }
        for r in snap.running + snap.waiting
    ]
    if rows:
        from ui.widgets import word_table

        # a table whose text wraps: in a dataframe the latest text was cut at the right edge at 1280 px; numbers
        # as rounded (a static table draws 0.01 as "0.0100")
        word_table(st, [{k: f"{v:g}" if isinstance(v, float) else v for k, v in r.items()} for r in rows])
        st.caption(
            (
                "User: the simulated user, numbered from 1 as in the results below ('other': another session's "
                "request sharing the batch). "
                if users
                else ""
            )
            + "Request: the shared scheduler's number. Those taken by earlier runs (the Playground's cache-on prompts "
            "go through it too) are not reused, so a run's numbers need not start at 1."
        )
    else:
        st.caption("The shared batch is idle: nothing running, nothing queued.")


LIVE_REDRAW_S = 0.5  # how often the live queue/batch view is redrawn while simulated users run

USER_PROMPTS = (
    "Explain in-flight batching in one sentence.",
    "Write a haiku about memory bandwidth.",
    "What is a KV cache?",
    "List three uses of a GPU.",
    "Why is decoding slower than prefill per token?",
    "Say hello in French.",
    "Describe a roofline plot.",
    "What does TTFT measure?",
)


def simulate_users(
    sched: Scheduler, users: UsersSpec, *, session: str | None = None, panel: DeltaGenerator | None = None
) -> dict:
    """Replay `users.users` concurrent requests through the shared scheduler (and its model), drawing its queue
    and batch live (every LIVE_REDRAW_S, in `panel` where given) with the clock (ui.pace) until all finish; returns {"n": n, "rows": per-request results} for
    show_users_result, stored for a reload and presenter mode. A rerun or a closed tab stops the script
    mid-loop: the finally cancels what is still running."""
    import time

    from engine.runtime import runlog
    from engine.runtime.settings import GenerationConfig
    from ui import pace

    lm, n, max_new_tokens, stagger_s = sched.lm, users.users, users.max_new_tokens, users.stagger_s
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, chat_template=lm.has_chat_template)
    handles = []
    settings = {
        "model": lm.name, "users": n, "max_new_tokens": max_new_tokens, "seconds between users": stagger_s,
    }  # fmt: skip
    # the clock's forecast: the median of the newest quiet replays of these settings (the last replay, whatever its
    # load and its users, read '75 s' for a 5 s replay)
    guess = pace.expected(USERS_EXPERIMENT, n * max_new_tokens, settings)
    live = panel if panel is not None else st.empty()
    from engine.core.load import cpu_seconds, loadavg_1m, others_during

    t0, load_before, cpu_before = time.perf_counter(), loadavg_1m(), cpu_seconds()
    start = sched.snapshot()
    done, done_at = 0, None  # requests finished, and when the last of them was first seen finished
    smooth = pace.SmoothedLeft()  # one run's 'left', steadied between its coarse steps (a request done)
    try:
        for k in range(n):
            if stagger_s and k:
                time.sleep(stagger_s)
            handles.append(sched.submit(USER_PROMPTS[k % len(USER_PROMPTS)], cfg))
        while not all(h.done for h in handles):
            elapsed = time.perf_counter() - t0
            with live.container():
                finished = sum(h.done for h in handles)
                if finished != done:
                    done, done_at = finished, elapsed
                st.progress(
                    done / n,
                    text=pace.clock_line(
                        f"{done} of {n} finished", "", elapsed, done / n, guess, done_at, smooth
                    ),
                )
                show_snapshot(sched.snapshot(), start, {h.id: k + 1 for k, h in enumerate(handles)})
            time.sleep(LIVE_REDRAW_S)
    finally:
        for h in handles:
            if not h.done:
                h.cancel()
    live.empty()
    # the load it ran under, stored with it and kept for this session's view: pace.note says "measured on a busy
    # machine" beside the result, as every other page's result does (a student read batching as slow without it)
    wall_s = time.perf_counter() - t0
    # what other processes took while it ran, not the load average at its two ends alone: work between them
    # escaped that rule (ui.pace.load_record)
    load = pace.load_record(load_before, others_during(cpu_before, wall_s))
    st.session_state[f"pace.{USERS_EXPERIMENT}.load"] = load
    result = {
        "n": n,
        "model": lm.name,
        "max_batch": sched.max_batch,
        "rows": [_user_row(h, session, k + 1) for k, h in enumerate(handles)],
    }
    runlog.save_result(
        USERS_EXPERIMENT,
        result,
        wall_s=wall_s,
        work=n * max_new_tokens,
        session=session,
        settings={**settings, "load": load},  # the load: presenter mode's and the forecast's quiet test
    )
    return result


USERS_EXPERIMENT = "batching-users"


def _user_row(h, session: str | None, user: int) -> dict:
    """One simulated user's result: the user, numbered from 1, and the scheduler's request number, both as the live
    table shows them (it showed requests 2-7 while this one said users 1-6; then both said 2-7, where a student
    expected the run's users from 1)."""
    c = h.completion
    if c is None:
        return {"user": user, "request": h.id, "stop": "error", "text": scrub(str(h.error))}
    record_completion(c, "batching", session)
    m = c.measurement
    return {
        "user": user,
        "request": h.id,
        "queued (s)": round(m.queue_s, 3),
        "TTFT (s)": round(m.ttft_s, 3),
        "latency (s)": round(m.latency_s, 3),
        "tokens": m.output_tokens,
        "tokens/s": round(m.tokens_per_s, 1),
        "batch seen": m.batch_size,
        "stop": c.stop_reason,
        "text": c.text.strip(),  # whole: word_table wraps it (it was cut at 80 characters, unmarked)
    }


def show_users_result(result: dict, lm=None) -> None:
    """The simulated users' sentence and table; under it, where replies loop, that the text is greedy decoding's
    of a small model (simulate_users decodes greedily) and the page measures the sharing, not the text. `lm`: the
    model loaded now, whose size is said when it made these replies (a stored run may be another's)."""
    from ui.narrative import greedy_text_note, users_sentence
    from ui.widgets import word_table

    st.markdown(users_sentence(result["n"], result["rows"], result.get("max_batch")))
    # each request's text wraps instead of being cut; numbers as rounded (a table cell showed 2.872 as "2.8720")
    word_table(
        st, [{k: f"{v:g}" if isinstance(v, float) else v for k, v in r.items()} for r in result["rows"]]
    )
    texts = [r["text"] for r in result["rows"] if r.get("stop") != "error" and r.get("text")]
    model = result.get("model") or "the model"  # runs stored before the model was kept with them
    params = lm.params if lm is not None and lm.name == model else None
    note = greedy_text_note(texts, model, params, greedy=True, measures="how the requests share decode steps")
    if note:
        st.caption(note)
