"""Serving lab: load-test an OpenAI-compatible endpoint (this engine's own server or vLLM's, started here, both side
by side, or any vLLM, TGI, SGLang or cloud URL), sweep the load, find the knee under SLOs, and put the calculator's
max users (and vLLM's KV pool) beside it."""

from __future__ import annotations

import json
from dataclasses import replace

import streamlit as st

from engine.backends.compare import SideBySideSpec, run_side_by_side
from engine.backends.vllm_records import latest_kv_row
from engine.calc.capacity import predict_from_run
from engine.calc.report import Inputs
from engine.calc.specs import load_model_presets
from engine.core.errors import EngineError
from engine.core.jsonsafe import from_jsonable
from engine.loadgen.sweep import SweepResult, at_level, check_server, run_sweep, to_json
from engine.loadgen.workload import ENDPOINTS, SLO, LoadSpec, LoadSpecError, PromptsSpec, parse_levels
from engine.runtime.models import PRESETS
from ui import pace
from ui.common import init_state, page_setup, show_error
from ui.pace import run_with_clock
from ui.serving_server import BACKENDS_OF, COMPARE_KEYS, TARGETS, local_servers, vllm_status
from ui.serving_vllm_view import (
    calculator_beside,
    kv_rows,
    sbs_dtype,
    side_by_side_figure,
    side_by_side_rows,
    side_by_side_sentence,
    vllm_parallel_section,
)
from ui.serving_widgets import (
    BREAKDOWN_CAPTION,
    answer_sentence,
    breakdown_figure,
    breakdown_rows,
    breakdown_sentence,
    failed_requests,
    knee_sentence,
    latency_figure,
    level_unit,
    per_user_figure,
    table_parts,
    table_rows,
    throughput_figure,
    to_csv,
)
from ui.simulate_widgets import simulated_section
from ui.widgets import button_why, refused, spec_input

NS = "serving"
CAPACITY_DTYPES = ("fp32", "bf16", "fp16", "int8")  # the precisions the capacity rule is offered in here
page_setup("Serving", measures=True)
init_state(NS, sweep=None, sbs=None, models=None)
SWEEP_EXPERIMENT = "serving-sweep"

st.title("Serving")
st.subheader("How many users does a deployment hold within the SLOs?")
top_answer = st.empty()  # the last sweep's answer, in view without scrolling (filled once the sweep is read)
st.markdown(
    "A deployment serves many users at once; the question is how much load it holds while every user still gets "
    "a fast first token (**TTFT**) and a steady stream (**TPOT**, the time per output token after the first). "
    "The load generator below speaks the OpenAI protocol to any base URL (`…/v1`), streams every request, and "
    "measures on the client: TTFT, TPOT = (E2E − TTFT) / (tokens − 1), inter-token latency (gaps between chunks) "
    "and E2E latency at p50/p90/p99, throughput, and **goodput**: requests per second that met every SLO "
    "(vLLM's `bench serve` definitions). It knows nothing of this engine, so it measures vLLM, TGI or SGLang alike."
)

# ---------------------------------------------------------------- 1. target
st.header("1 · Target")
target = st.radio("Endpoint", TARGETS, horizontal=True, key=f"{NS}.target")
api_key: str | None = None
both = target == "Both, side by side"
if target in BACKENDS_OF:
    urls, model = local_servers(target, NS)
    url = None if both else next(iter(urls.values()), None)
    if both and len(urls) < 2:
        urls = {}
    if both:
        st.caption(
            "Side by side: the same sweep on each server, level by level in turn (the order flips every round), so a "
            "machine whose speed drifts touches both alike; the table compares medians over the rounds."
        )
else:
    urls = {}
    c1, c2 = st.columns([3, 2])
    url = c1.text_input(
        "Base URL",
        LoadSpec.default("base_url"),
        key=f"{NS}.url",
        help=LoadSpec.help("base_url"),
    )
    api_key = c2.text_input("API key (kept in this session only)", type="password", key=f"{NS}.key") or None
    if st.button("List models", key=f"{NS}.list"):
        try:
            st.session_state[f"{NS}.models"] = check_server(url, api_key)
        except LoadSpecError as exc:
            show_error(exc)
    listed = st.session_state[f"{NS}.models"] or []
    model = (
        st.selectbox("Model", listed, key=f"{NS}.model_pick")
        if listed
        else st.text_input("Model id", key=f"{NS}.model_text", help="as the server's GET /v1/models lists it")
    )

# ---------------------------------------------------------------- 2. workload and SLOs
st.header("2 · Workload and SLOs")
c = st.columns(4)
mode = spec_input(
    c[0],
    LoadSpec,
    "mode",
    value="concurrency",
    label="Load",
    key=f"{NS}.mode",
    format_func=lambda m: "fixed users" if m == "concurrency" else "Poisson arrivals",
    help="fixed users: each of N users sends its next request when the last one ends (concurrency); Poisson "
    "arrivals: requests at a mean rate per second, independent of the replies",
)
levels_text = c[1].text_input(
    f"Levels to sweep ({level_unit(mode)})",
    "1,4,8" if mode == "concurrency" else "0.5,1,2,4",
    key=f"{NS}.levels.{mode}",
)
try:  # said under the field as it is typed, not only when a sweep is sent (its button may be waiting for a server)
    levels, levels_error = parse_levels(levels_text), None
except LoadSpecError as exc:
    levels, levels_error = (), exc
    with c[1]:
        show_error(exc)
# Defaults sized for a demo: the bundled model's sweep ends in about 45 s on a 2-core CPU (a tour stop under a
# minute with the server's start); more requests per level make the p90/p99 tails mean more.
n_requests = spec_input(
    c[2], LoadSpec, "n_requests", value=8, label="Requests per level", key=f"{NS}.requests",
    help="8 (the demo's size): p90 and p99 are then the slowest requests of 8; use 32 or more for tails to budget on",
)  # fmt: skip
out_tokens = spec_input(
    c[3], LoadSpec, "output_tokens", value=24, label="Output tokens", key=f"{NS}.out_tokens"
)
c = st.columns(4)
slo_ttft = spec_input(c[0], SLO, "ttft_s", lo=0.01, hi=600.0, label="TTFT SLO (s)", key=f"{NS}.slo_ttft")
slo_tpot = spec_input(
    c[1], SLO, "tpot_s", unit=1e-3, value=SLO.default("tpot_s") * 1e3, lo=1.0, hi=60000.0,
    label="TPOT SLO (ms)", key=f"{NS}.slo_tpot",
)  # fmt: skip
attain = spec_input(
    c[2], SLO, "min_attainment", unit=0.01, value=SLO.default("min_attainment") * 100, lo=1.0, hi=100.0,
    label="Requests meeting them (%)", key=f"{NS}.attain",
)  # fmt: skip
endpoint = c[3].selectbox("Endpoint", ENDPOINTS, key=f"{NS}.endpoint")
burstiness = (
    spec_input(
        st,
        LoadSpec,
        "burstiness",
        lo=0.05,
        hi=20.0,
        label="Burstiness (Gamma arrivals)",
        key=f"{NS}.burstiness",
    )
    if mode == "poisson"
    else LoadSpec.default("burstiness")
)
c = st.columns(3)
workload = spec_input(
    c[0],
    PromptsSpec,
    "workload",
    key=f"{NS}.workload",
    format_func=lambda w: {
        "single": "one prompt per request",
        "shared-prefix": "shared prefix",
        "multi-turn": "multi-turn chat",
    }[w],
)
prefix_tokens, num_prefixes, turns = 0, 1, 1
if workload == "shared-prefix":
    prefix_tokens = spec_input(
        c[1],
        LoadSpec,
        "prefix_tokens",
        value=256,
        lo=1,
        label="Prefix length (tokens)",
        key=f"{NS}.prefix_tokens",
    )
    num_prefixes = spec_input(
        c[2], LoadSpec, "num_prefixes", label="Distinct prefixes", key=f"{NS}.num_prefixes"
    )
elif workload == "multi-turn":
    turns = spec_input(c[1], LoadSpec, "turns", value=3, lo=2, label="Turns per session", key=f"{NS}.turns")
keep_going = st.checkbox(
    "Keep going after a level misses the SLOs",
    key=f"{NS}.keep_going",
    help="by default the sweep stops at the first level that misses them (more load only queues more)",
)

rounds = (
    spec_input(st, SideBySideSpec, "rounds", label="Rounds (side by side)", key=f"{NS}.rounds")
    if both
    else SideBySideSpec.default("rounds")
)
if refused(
    n_requests, out_tokens, slo_ttft, slo_tpot, attain, burstiness, prefix_tokens, num_prefixes, turns, rounds
):
    sweep_why = "a setting above is out of range (it says which)"
elif levels_error is not None:
    sweep_why = "the levels to sweep are not positive numbers (it says which)"
elif not ((url or urls) and model):
    sweep_why = "start a server or give a server URL and a model first"
else:
    sweep_why = ""
run_pressed = button_why(st, "Run sweep", key=f"{NS}.go", type="primary", why=sweep_why)
under_button = (
    st.empty()
)  # the answer again, in view where the button was pressed (section 3 is below the fold)
if run_pressed:
    try:
        if both and mode != "concurrency":
            raise LoadSpecError(
                "The side-by-side sweep compares fixed users: choose fixed users as the load."
            )
        spec = LoadSpec(
            base_url=url or next(iter(urls.values())),
            model=model,
            api_key=api_key,
            endpoint=endpoint,
            mode=mode,
            n_requests=n_requests,
            output_tokens=out_tokens,
            burstiness=float(burstiness),
            prefix_tokens=prefix_tokens,
            num_prefixes=num_prefixes,
            turns=turns,
        ).validate()
        slo = SLO(ttft_s=slo_ttft, tpot_s=slo_tpot / 1e3, min_attainment=attain / 100).validate()
        st.session_state[f"{NS}.sweep"] = st.session_state[f"{NS}.sbs"] = None
        for u in urls.values() if both else [url]:
            check_server(u, api_key)  # a dead or wrong URL fails here, with what went wrong, before any run
        # the sweep runs beside a bar whose clock ticks between the load generator's own reports (ui.pace)
        if both:
            specs = {COMPARE_KEYS[b]: replace(spec, base_url=u) for b, u in urls.items()}
            st.session_state[f"{NS}.sbs"] = run_with_clock(
                "Side-by-side sweep",
                lambda report: run_side_by_side(specs, levels, rounds=rounds, slo=slo, progress=report),
            )
            st.session_state[f"{NS}.sbs_dtype"] = sbs_dtype()  # what both ran, for the calculator beside them
        else:  # stored for a reload and for presenter mode; the next sweep's clock estimates from it (ui.pace)
            st.session_state[f"{NS}.sweep"] = pace.run_experiment(
                SWEEP_EXPERIMENT,
                "Sweep",
                lambda report: run_sweep(spec, slo, levels, keep_going=keep_going, progress=report),
                size=float(len(levels)),
            )
    except (LoadSpecError, ValueError, EngineError) as exc:
        show_error(exc)

shown = pace.shown_result(
    SWEEP_EXPERIMENT, st.session_state[f"{NS}.sweep"], lambda p: from_jsonable(SweepResult, p)
)
if shown is not None and shown.result.points and not shown.result.all_failed:
    where = "Its table and charts: **3 · Results** below" + (
        " (a stored run, dated there)." if shown.note else "."
    )
    top_answer.info(answer_sentence(shown.result, where, shown.busy), icon=":material/flag:")
    under_button.markdown(answer_sentence(shown.result, where, shown.busy))
simulated_section(shown.result if shown else None)  # a GPU this machine lacks (ui.simulate_widgets)

# ---------------------------------------------------------------- 3. results
sbs = st.session_state[f"{NS}.sbs"]
if both and sbs is not None:
    st.header("3 · This engine beside vLLM (measured)")
    st.caption(
        f"Model `{sbs.specs['lab'].model}`, {sbs.specs['lab'].n_requests} requests per level × "
        f"{sbs.specs['lab'].output_tokens} output tokens, {sbs.rounds} round(s), started {sbs.started_at}; "
        f"vLLM: {vllm_status()[0] or 'not installed'}."
    )
    st.markdown(side_by_side_sentence(sbs))
    st.dataframe(side_by_side_rows(sbs), hide_index=True, width="stretch")
    st.plotly_chart(side_by_side_figure(sbs), width="stretch")
    st.subheader("The calculator's prediction for this machine beside them")
    predicted_rows, predicted_words = calculator_beside(
        sbs, st.session_state.get(f"{NS}.sbs_dtype") or sbs_dtype()
    )
    st.markdown(predicted_words)
    if predicted_rows:
        st.dataframe(predicted_rows, hide_index=True, width="stretch")
    st.subheader("vLLM's KV pool beside the calculator's prediction for this machine")
    kv = kv_rows(latest_kv_row(sbs.specs["vllm"].model))
    if kv:
        st.markdown(
            "vLLM prints its KV pool when it starts; the calculator sizes it the way vLLM does on a CPU (the pool "
            "asked for, blocks of 128 tokens, concurrency = blocks / blocks per request of max-model-len)."
        )
        st.dataframe(kv, hide_index=True, width="stretch")
    else:
        st.caption("vLLM's start-up log held no KV line to compare (see the server's log).")
    vllm_parallel_section()
    # room for the "simulated for <GPU>" section (its own ui module)
    st.stop()
sweep = shown.result if shown else None
if sweep is None:
    if target in BACKENDS_OF and "vllm" in BACKENDS_OF[target]:
        vllm_parallel_section()
    st.caption(
        "No measured sweep yet: run one (section 2) for its latency percentiles, throughput and knee here."
    )
    st.stop()
st.header("3 · Results (measured)")
pace.note(shown)  # a reload's or presenter mode's stored sweep says so, with its date
unit = level_unit(sweep.spec.mode)
if sweep.all_failed:
    first = next((p.first_error for p in sweep.points if p.first_error), "")
    st.error(
        f"No request completed at any level against {sweep.spec.base_url}: there is nothing to measure. "
        f"First failure: {first}. Check that the server is running and serves `{sweep.spec.model}`."
    )
    st.stop()
st.info(answer_sentence(sweep, busy=shown.busy), icon=":material/flag:")
if sweep.skipped:
    st.warning(sweep.stop_reason(), icon=":material/skip_next:")
st.caption(
    f"{sweep.spec.base_url}, model `{sweep.spec.model}`, {sweep.spec.n_requests} requests per level × "
    f"{sweep.spec.output_tokens} output tokens, started {sweep.started_at}; tokens counted by "
    f"{sweep.points[0].tokens_counted_by if sweep.points else 'n/a'}."
)
rows = table_rows(sweep)
for caption, part in table_parts(rows):  # three narrow tables: one of twenty columns scrolled sideways
    st.caption(caption)
    st.dataframe(part, hide_index=True, width="stretch")
d1, d2 = st.columns(2)
d1.download_button(
    "Download CSV", to_csv(rows), "serving-sweep.csv", "text/csv", key=f"{NS}.csv", icon=":material/download:"
)
d2.download_button(
    "Download JSON",
    json.dumps(to_json(sweep), indent=2),
    "serving-sweep.json",
    "application/json",
    key=f"{NS}.json",
    icon=":material/download:",
)
errors = {k: v for p in sweep.points for k, v in p.errors.items()}
if errors:
    first = next(p.first_error for p in sweep.points if p.first_error)
    st.warning(f"Failed requests: {failed_requests(errors)}. The first said: {first}")
turn_rows = [
    {unit: p.level, **{f"turn {i} TTFT p50 (s)": round(d.p50, 3) for i, d in enumerate(p.ttft_by_turn, 1)}}
    for p in sweep.points
    if p.ttft_by_turn
]
if turn_rows:
    st.caption(
        "TTFT by turn of the multi-turn sessions (measured): each later turn sends the conversation so far, "
        "so the server prefills more (unless it caches the prefix)."
    )
    st.dataframe(turn_rows, hide_index=True, width="stretch")
st.plotly_chart(latency_figure(sweep), width="stretch")
st.plotly_chart(throughput_figure(sweep), width="stretch")
st.plotly_chart(per_user_figure(sweep), width="stretch")

st.subheader("Where the TTFT went: the server's queue and prefill, and the transport")
fig = breakdown_figure(sweep)
if fig is None:
    st.caption(
        "This server keeps no per-request timings (vLLM does not; this engine's server does, at "
        "`GET /v1/requests/timings`), so the client's TTFT cannot be split. Server-side means from its "
        "/metrics, where it exports vLLM's names, are in the table below."
    )
else:
    st.markdown(
        "Each request's id (the `X-Request-Id` header) joins the client's TTFT to the server's own timestamps: "
        "**queue** (waiting for a batch slot), **prefill** (admitted → first token, chunks interleaved with the "
        "running rows' decode steps) and **transport**, the rest (network both ways, HTTP handling and "
        "tokenizing, writing the first chunk): TTFT = queue + prefill + transport, as means over the joined "
        "requests. " + breakdown_sentence(sweep)
    )
    st.plotly_chart(fig, width="stretch")
rows_b = breakdown_rows(sweep)
if any(len(r) > 1 for r in rows_b):
    st.caption(BREAKDOWN_CAPTION)
    st.dataframe(rows_b, hide_index=True, width="stretch")

# ---------------------------------------------------------------- 4. knee vs calculator
st.header("4 · Measured knee beside the calculator")
prediction = None
first = sweep.points[0] if sweep.points else None
if sweep.spec.mode != "concurrency":
    st.caption(
        "The calculator predicts a number of concurrent users; sweep *fixed users* to compare it with a knee."
    )
elif first is None or not first.tpot_s.n or sweep.slo.tpot_s is None:
    st.caption("No TPOT was measured at the lowest level, so the calculator cannot be calibrated.")
else:
    calc_names = list(load_model_presets())
    c = st.columns(3)
    served = PRESETS.get(sweep.spec.model)  # the one model -> calculator table (engine/data/presets.toml)
    guess = served.calculator if served is not None and served.calculator in calc_names else calc_names[0]
    calc_name = c[0].selectbox(
        "Architecture for the calculator", calc_names, index=calc_names.index(guess), key=f"{NS}.calc_arch"
    )
    dtype = spec_input(
        c[1], Inputs, "dtype", choices=CAPACITY_DTYPES, value="fp32", label="Weights and KV precision",
        key=f"{NS}.calc_dtype",
    )  # fmt: skip
    slots = spec_input(
        c[2], Inputs, "batch", hi=4096, value=int(st.session_state.get(f"{NS}.max_batch", 8)),
        label="Batch slots of the deployment", key=f"{NS}.slots",
    )  # fmt: skip
    if not refused(slots):  # a refused slot count said why above; nothing is predicted with it
        run = predict_from_run(
            load_model_presets()[calc_name],
            dtype,
            first.prompt_tokens_median,
            sweep.spec.output_tokens,
            first.tpot_s.p50,
            sweep.slo.tpot_s,
            slots,
        )
        prediction, w, kv, ctx = run.prediction, run.weights_bytes, run.kv_bytes_per_token, run.context_tokens
        bw = prediction.bandwidth_bytes_per_s
        st.markdown(
            f"Formula (the chapter's memory-bound decode rule): TPOT(b) = (weights + b × context × KV per token) / "
            f"bandwidth, with weights = {w / 1e9:.3f} GB and KV = {kv / 1e3:.1f} kB per token ({calc_name}, {dtype}), "
            f"context ≈ {ctx} tokens (median prompt + half the output), and bandwidth **calibrated** so the rule "
            f"reproduces the measured TPOT p50 at {at_level(first.level, unit)} ({first.tpot_s.p50 * 1e3:.1f} ms → "
            f"{bw / 1e9:.2f} GB/s effective). Max users = largest b ≤ {slots} slots with TPOT(b) ≤ "
            f"{sweep.slo.tpot_s * 1e3:.0f} ms. It ignores the TTFT objective and prefill interference."
        )
st.markdown(knee_sentence(sweep.knee, unit, prediction, sweep.stopped_early))
