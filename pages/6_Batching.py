"""Batching lab (chapter 4.2.3, NVIDIA's in-flight batching): static batching measured for growing batch
sizes against the calculator, static versus in-flight on the same workload with a timeline of every request,
and the live queue of the scheduler every session shares."""

from __future__ import annotations

import math

import streamlit as st

from engine.batching.spec import BatchSpec, SweepSpec, UsersSpec, WorkloadSpec
from engine.batching.sweep import Sweep, run_sweep
from engine.batching.workload import (
    COMPARE_REPEATS,
    PolicyBound,
    PolicyResult,
    compare,
    generate_workload,
    policy_bound,
    throughput_headline,
)
from engine.core.errors import EngineError
from engine.core.jsonsafe import from_jsonable
from engine.core.load import cores, is_busy, loadavg_1m
from ui import export, pace
from ui.batching_widgets import (
    cached_scheduler,
    gantt_figure,
    record_completion,
    show_snapshot,
    show_users_result,
    simulate_users,
    sweep_figure,
)
from ui.calc_widgets import machine_known, machine_matmul, machine_provenance
from ui.common import browser_session, fmt_bytes, fmt_seconds, init_state, page_setup, show_error
from ui.machine_view import machine_read_bandwidth
from ui.narrative import (
    bandwidth_words,
    bound_sentence,
    matmul_words,
    replays_sentence,
    sweep_sentence,
    tradeoff_sentences,
    users_headline,
    users_sentence,
)
from ui.widgets import button_why, load_with_progress, model_picker, refused, sent_in_range, spec_input

NS = "batching"
page_setup("Batching", measures=True)
init_state(NS, sweep=None, compare=None, bound=None, users=None, load=None)
report: list = []
# The page's own starting workload, sized for a live demo on a 2-core CPU (bench/tour.py measures it): 8 requests
# of 8 to 48 tokens. The command line keeps the spec's larger defaults.
PAGE_REQUESTS, PAGE_OUT_MAX, PAGE_MAX_BATCH = 8, 48, 4

st.title("Batching")
st.caption("Static versus in-flight batching, measured on this machine.")
st.markdown(
    "Decode is memory-bound: every step reads all the weights to make **one** token per sequence, so running "
    "many sequences together shares that read and raises throughput. **Static batching** pads a batch, runs it "
    "until its longest sequence finishes (finished rows keep their slot, computed and thrown away) and only then "
    "starts the next. **In-flight batching** (Orca's iteration-level scheduling) admits waiting requests and "
    "retires finished ones at every decode step. Both run for real here, with the same forward code; greedy "
    "outputs are token-for-token those of a solo run."
)
st.markdown(
    "On the tour? Its stop is **[Simulate N users](#simulate-n-users)** in section 3, further down: six requests "
    "sent at once, sharing the scheduler's decode steps live."
)

with st.sidebar:
    name, dtype = model_picker(NS, allow_custom=False)
lm = load_with_progress(name, dtype, keep=f"{NS}.loaded")
if lm is None:
    st.stop()

# ---------------------------------------------------------------- 1. static batching, batch sizes
st.header("1 · Static batching: what a bigger batch buys")
c1, c2, c3 = st.columns([3, 1, 1])
sizes = spec_input(c1, SweepSpec, "sizes", key=f"{NS}.sizes")
sweep_tokens = spec_input(c2, SweepSpec, "max_new_tokens", key=f"{NS}.sweep_tokens")
why_not = "choose at least one batch size" if not sizes else ""
why_not = why_not or ("New tokens each is out of range" if refused(sweep_tokens) else "")
sweep_settings = {"model": lm.name, "sizes": sizes, "max_new_tokens": sweep_tokens}
if button_why(c3, "Measure", key=f"{NS}.sweep_go", why=why_not, type="primary"):
    matmul = machine_matmul(lm)
    st.session_state[f"{NS}.sweep"] = pace.run_experiment(
        "batching-sweep",
        "One padded batch per size",
        lambda report: run_sweep(lm, sizes, max_new_tokens=int(sweep_tokens), matmul_flops_per_s=matmul),
        size=sum(sizes) * sweep_tokens,
        settings=sweep_settings,
    )
shown = pace.shown_result(  # a stored sweep of this model (presenter mode: the last one on a quiet machine)
    "batching-sweep",
    st.session_state[f"{NS}.sweep"],
    lambda p: from_jsonable(Sweep, p),
    {"model": lm.name},
    now=sweep_settings,
)
sweep = shown.result if shown else None
if sweep is not None and sweep.model == lm.name:
    pace.note(shown)
    fig = sweep_figure(sweep)
    st.plotly_chart(fig, width="stretch")
    report += [
        export.Heading("Static batching: what a bigger batch buys"),
        export.Text(sweep_sentence(sweep.points)),
        export.Figure(fig),
    ]
    fits = sweep.max_batch_fits
    st.markdown(
        sweep_sentence(sweep.points)
        + " Dashed: the calculator's rule, step = (weights + batch × KV) / bandwidth but never quicker than "
        "2 × params × batch / FLOP/s, with "
        + bandwidth_words(
            sweep.calibrated_bandwidth_bytes_per_s,
            sweep.points[0].batch,
            machine_read_bandwidth(lm) if machine_known() else None,
        )
        + matmul_words(sweep.matmul_flops_per_s, machine_matmul(lm) if machine_known() else None)
        + (machine_provenance() if machine_known() else "")
    )
    where = (
        "the red dotted line" if fits <= 4 * max(p.batch for p in sweep.points) else "far right of this chart"
    )
    st.info(
        f"**Largest batch that fits** ({sweep.prompt_tokens} prompt + {sweep.max_new_tokens} new tokens each): "
        f"**{fits:,}** sequences in {fmt_bytes(sweep.memory_bytes)} (free memory + the weights), from the "
        f"calculator's rule (memory / 1.2 − weights) / (tokens × KV bytes per token): {where}."
        + (" The sweep stopped when the device ran out of memory." if sweep.stopped_by_memory else "")
    )
    st.dataframe(
        [
            {
                "batch": p.batch,
                "tokens/s": round(p.tokens_per_s, 1),
                "predicted tokens/s": round(p.predicted_tokens_per_s, 1),
                "latency (s)": round(p.latency_s, 2),
                "TTFT (s)": round(p.ttft_s, 3),
                "TPOT (ms)": round(p.tpot_s * 1e3, 1),
                "peak memory": fmt_bytes(p.peak_memory_bytes),
            }
            for p in sweep.points
        ],
        hide_index=True,
        width="stretch",
    )

# ---------------------------------------------------------------- 2. static vs in-flight
st.header("2 · Static versus in-flight on the same workload")
with st.form(f"{NS}.wl"):
    c = st.columns(4)
    n_req = spec_input(
        c[0], WorkloadSpec, "n_requests", key=f"{NS}.n", label="Requests", hi=200, value=PAGE_REQUESTS
    )
    rate = spec_input(
        c[1],
        WorkloadSpec,
        "arrival_rate_per_s",
        key=f"{NS}.rate",
        label="Arrivals per second (0 = all at once)",
        hi=100.0,
    )
    max_batch = spec_input(
        c[2],
        BatchSpec,
        "max_batch",
        key=f"{NS}.max_batch",
        label="Max batch (both policies)",
        hi=64,
        value=PAGE_MAX_BATCH,
    )
    seed = spec_input(c[3], WorkloadSpec, "seed", key=f"{NS}.seed", label="Seed", lo=0, hi=10**6)
    c = st.columns(4)
    out_min = spec_input(
        c[0], WorkloadSpec, "output_tokens_min", key=f"{NS}.out_min", label="Output tokens min", hi=1024
    )
    out_max = spec_input(
        c[1],
        WorkloadSpec,
        "output_tokens_max",
        key=f"{NS}.out_max",
        label="Output tokens max",
        hi=1024,
        value=PAGE_OUT_MAX,
    )
    dist = spec_input(c[2], WorkloadSpec, "output_distribution", key=f"{NS}.dist", label="Output lengths")
    p_max = spec_input(
        c[3], WorkloadSpec, "prompt_tokens_max", key=f"{NS}.p_max", label="Prompt tokens max", hi=512
    )
    go = st.form_submit_button("Run both policies", type="primary")
# what a stored replay says it was run with, and whether the form above holds the same
compare_settings = {
    "model": lm.name, "requests": n_req, "max_batch": max_batch, "arrivals per second": rate, "seed": seed,
    "output tokens (min, max)": [out_min, out_max], "output lengths": dist, "prompt tokens at most": p_max,
    "replays per policy": COMPARE_REPEATS,
}  # fmt: skip
if sent_in_range(go, n_req, rate, max_batch, seed, out_min, out_max, p_max):
    try:
        spec = WorkloadSpec(
            n_requests=int(n_req),
            arrival_rate_per_s=float(rate),
            prompt_tokens_min=min(8, int(p_max)),
            prompt_tokens_max=int(p_max),
            output_tokens_min=int(out_min),
            output_tokens_max=int(out_max),
            output_distribution=dist,
            seed=int(seed),
        ).validate()
        workload = generate_workload(spec, lm.tokenizer)
    except EngineError as exc:
        show_error(exc)
    else:
        # the step-count bound holds when every request waits at the start (arrival rate 0)
        bound = policy_bound(workload, int(max_batch)) if spec.arrival_rate_per_s == 0 else None
        load_start = loadavg_1m()
        results = pace.run_experiment(
            "batching-compare",
            "Replaying the workload under static, then in-flight batching",
            lambda report: compare(lm, workload, int(max_batch)),
            size=sum(r.max_new_tokens for r in workload),
            settings=compare_settings,
            store=lambda res: {**res, "bound": bound, "load": (load_start, loadavg_1m(), cores())},
        )
        if results is not None:
            st.session_state[f"{NS}.load"] = (load_start, loadavg_1m(), cores())
            st.session_state[f"{NS}.compare"] = results
            st.session_state[f"{NS}.bound"] = bound


def _stored_compare(p: dict) -> dict:
    return {
        "static": from_jsonable(PolicyResult, p["static"]),
        "inflight": from_jsonable(PolicyResult, p["inflight"]),
        "bound": from_jsonable(PolicyBound | None, p.get("bound")),
        "load": tuple(p["load"]) if p.get("load") else None,
    }


live = st.session_state[f"{NS}.compare"]
if live is not None:
    live = {**live, "bound": st.session_state[f"{NS}.bound"], "load": st.session_state[f"{NS}.load"]}
shown = pace.shown_result("batching-compare", live, _stored_compare, {"model": lm.name}, now=compare_settings)
pair = shown.result if shown else None
if pair is not None and pair["static"].model == lm.name:
    pace.note(shown)
    s, i = pair["static"], pair["inflight"]
    st.dataframe(
        [
            {
                "policy": r.policy,
                "throughput (tok/s)": round(r.throughput_tokens_per_s, 1),
                "TTFT p50 (s)": round(r.ttft_s_p50, 2),
                "TTFT p95 (s)": round(r.ttft_s_p95, 2),
                "latency p50 (s)": round(r.latency_s_p50, 2),
                "latency p95 (s)": round(r.latency_s_p95, 2),
                "wall (s)": round(r.wall_s, 2),
                # a short header, said in full in the caption: the long one pushed the table past 1280 px
                "slot time used": f"{r.slot_utilization:.0%}",
            }
            for r in (s, i)
        ],
        hide_index=True,
        width="stretch",
    )
    st.caption(
        "Slot time used: of the time requests held a batch slot, the share spent making their "
        "tokens. Static batching keeps a finished row's slot to the end of its batch; in-flight frees it at once "
        "(100%). Slots no request holds, the gaps in the charts below, are not counted: when fewer requests are "
        "left than slots, in-flight batching runs part-empty too."
    )
    bound = pair["bound"]
    headline = throughput_headline(s, i, bound)
    ratio = headline.ratio
    dp95 = i.latency_s_p95 - s.latency_s_p95
    c = st.columns(3)
    c[0].metric(
        "In-flight / static throughput",
        f"{ratio:.2f}×"
        if headline.valid
        else f"{ratio:.2f}× (over the {headline.bound:.2f}× possible)"
        if math.isfinite(headline.bound)
        else "no ratio",
        help=None if headline.valid else headline.why,
    )
    c[1].metric(
        "p95 latency, in-flight",
        fmt_seconds(i.latency_s_p95),
        # an ASCII sign: Streamlit reads the arrow's direction from a leading "-" (not fmt_seconds' "−")
        delta=("-" if dp95 < 0 else "+") + fmt_seconds(abs(dp95)),
        delta_color="inverse",
    )
    c[2].metric(
        "Static slots idle",
        f"{1 - s.slot_utilization:.0%}",
        help="row-steps computed for rows already finished",
    )
    load, said_load = pair["load"], ""
    if load is not None:
        start, end, cores = load
        said_load = (
            f" Load average {start:.2f} at the start and {end:.2f} at the end, on {cores} cores (the replays' own "
            "threads count in the second)."
            + (
                " **Other work was running when this started**: the two policies may have met different "
                "competition for the cores, so run again on a quieter machine before trusting the ratio."
                if is_busy(start, cores)
                else " Run it again to see how much the ratio moves between runs."
            )
        )
    st.caption(replays_sentence(s, i) + said_load)
    if not headline.valid:
        st.warning(
            f"**More than batching can give this workload.** {headline.why}", icon=":material/warning:"
        )
    if bound is not None:
        st.markdown(bound_sentence(bound, ratio))
    x_max = max(s.wall_s, i.wall_s) * 1.02
    g_s = gantt_figure(s, "Static batching: finished rows hold their slot (red) until the batch ends", x_max)
    g_i = gantt_figure(i, "In-flight batching: a finished row's slot goes to the next request at once", x_max)
    st.plotly_chart(g_s, width="stretch")
    st.plotly_chart(g_i, width="stretch")

    st.subheader("The trade-off, from these measurements")
    tradeoff = "\n".join(f"- {line}" for line in tradeoff_sentences(s, i, headline, bound))
    st.markdown(tradeoff)
    report += [
        export.Heading("Static versus in-flight on the same workload"),
        export.Table([r.summary() for r in (s, i)]),
        export.Text(tradeoff),
        export.Figure(g_s),
        export.Figure(g_i),
    ]

# ---------------------------------------------------------------- 3. the live shared scheduler
st.header("3 · The shared scheduler, live")
st.caption(
    "One in-flight scheduler per loaded model serves every browser session (the playground sends its generations "
    "here): concurrent users share decode steps instead of queueing behind each other."
)
sched = cached_scheduler(lm)
with st.form(f"{NS}.try"):
    prompt = st.text_input(
        "Send a request to the shared batch",
        "Explain in-flight batching in one sentence.",
        key=f"{NS}.prompt",
    )
    send = st.form_submit_button("Send")
if send:
    from engine.runtime.settings import GenerationConfig

    try:
        handle = sched.submit(prompt, GenerationConfig(max_new_tokens=48, chat_template=lm.has_chat_template))
        st.write_stream(handle)
        record_completion(handle.completion, "batching")
        m = handle.completion.measurement
        st.caption(
            f"queued {fmt_seconds(m.queue_s)}, TTFT {fmt_seconds(m.ttft_s)}, latency {fmt_seconds(m.latency_s)}; "
            + (
                f"shared the batch with up to {m.batch_size - 1} other request(s)"
                if m.batch_size > 1
                else "ran alone (no other request was in the batch)"
            )
        )
    except EngineError as exc:
        show_error(exc)


st.subheader("Simulate N users", anchor="simulate-n-users")  # the tour's stop: linked from the top
st.caption(
    "Sends N requests to the shared scheduler at once, as N people pressing Generate together, and shows "
    "its queue and batch while they run, then what each request got. Other sessions' requests share the "
    "same batch."
)
with st.form(f"{NS}.users_form"):
    c = st.columns(3)
    n_users = spec_input(c[0], UsersSpec, "users", key=f"{NS}.users_n")
    user_tokens = spec_input(c[1], UsersSpec, "max_new_tokens", key=f"{NS}.users_tokens")
    stagger = spec_input(c[2], UsersSpec, "stagger_s", key=f"{NS}.users_stagger", step=0.1)
    simulate = st.form_submit_button("Simulate", type="primary")
users_line = st.empty()  # the result in one line under the button: the table lands below the fold at 900 px
auto = st.toggle("Refresh every 2 s", key=f"{NS}.live")
# One panel for the shared batch: the simulation draws its queue here while it runs, then the live view takes the
# same place (drawn below it, the last run's idle view stayed on screen, faded, beside the running simulation).
panel = st.empty()
if sent_in_range(simulate, n_users, user_tokens, stagger):
    try:
        st.session_state[f"{NS}.users"] = simulate_users(
            sched,
            UsersSpec(int(n_users), int(user_tokens), float(stagger)),
            session=browser_session(),
            panel=panel,
        )
    except EngineError as exc:
        show_error(exc)
    else:
        # a fresh run draws the page: Streamlit merges the panel's last live frame with the live view drawn over it
        # in the same run, and a mid-run "Running 5/8" stayed on screen under the idle batch (the presenter's walk)
        st.rerun()


@st.fragment(run_every=2.0 if auto else None)
def live() -> None:
    show_snapshot(sched.snapshot())


with panel.container():
    live()

users_now = {
    "model": lm.name,
    "users": n_users,
    "max_new_tokens": user_tokens,
    "seconds between users": stagger,
}
shown = pace.shown_result("batching-users", st.session_state.get(f"{NS}.users"), lambda p: p, now=users_now)
if shown is not None:
    pace.note(shown)
    users = shown.result
    users_line.markdown(users_headline(users["n"], users["rows"]))
    show_users_result(users, lm)
    report += [
        export.Heading(f"Simulated {users['n']} users"),
        export.Text(users_sentence(users["n"], users["rows"], users.get("max_batch"))),
        export.Table(users["rows"]),
    ]
export.download_button(
    f"Batching: {lm.name}",
    report,
    key=f"{NS}.html",
    subtitle="Static and in-flight batching, measured on this machine.",
)
