"""Memory and cost: will it fit, how fast, how much, and how close the estimate comes to a real run."""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
import streamlit as st

from engine.calc import format as fmt
from engine.calc import memory, timing
from engine.calc.cost import estimate_cost
from engine.calc.efficiency import INTERVAL_LEVEL
from engine.calc.report import batch_sweep, estimate, reasoning
from engine.calc.specs import THIS_MACHINE
from engine.calibration import check as estimate_check
from engine.calibration import efficiency_at
from engine.core.errors import EngineError
from ui import export
from ui.calc_widgets import (
    DEFAULTS,
    breakdown_frame,
    cached_calibration,
    cached_machine,
    engine_inputs,
    formula_expander,
    gpu_choice,
    gpu_figures,
    load_runs,
    machine_known,
    machine_panel,
    machine_provenance,
    measured_here_line,
    model_input,
    paged_section,
    precision_inputs,
    price_input,
)
from ui.common import page_setup, show_error
from ui.plots_calc import batch_curve, comparison_chart, memory_bar, serving_bar
from ui.simulate_widgets import solvers_section
from ui.trackrecord_view import launch_commands, speed_caption, track_record_section
from ui.widgets import note_metric

page_setup("Memory and cost")
NS = "calc"

st.title("Memory and cost")
st.caption(
    "Will the model fit, how fast will it generate, what will it cost, and how close is the estimate to a run "
    "measured on this machine. Every figure has its formula one click away; GB here are 10^9 bytes."
)

left, right = st.columns([1, 2], gap="large")
with left:
    st.subheader("Inputs")
    spec = model_input(NS)
    base_gpu = gpu_choice(NS)
    weights = precision_inputs(NS, base_gpu)
    gpu = gpu_figures(NS, base_gpu, dtype=weights.dtype)
    serving_inputs = engine_inputs(NS, gpu)
    c1, c2 = st.columns(2)
    batch = c1.number_input("Batch (concurrent users)", 1, 4096, DEFAULTS.batch, key=f"{NS}.batch")
    n_gpus = c2.number_input("GPUs (tensor parallel)", 1, 64, DEFAULTS.n_gpus, key=f"{NS}.gpus")
    prompt = c1.number_input("Prompt tokens", 1, 1_000_000, DEFAULTS.prompt_tokens, key=f"{NS}.prompt")
    output = c2.number_input("Output tokens", 1, 1_000_000, DEFAULTS.output_tokens, key=f"{NS}.output")
    serving_mode = serving_inputs.get("engine") in ("vllm", "sglang")
    overhead_pct = (
        round(DEFAULTS.overhead * 100)
        if serving_mode  # the server's own allocation replaces the chapter's x1.2 (shown under the verdict)
        else c1.slider(
            "Overhead (%)",
            0,
            100,
            round(DEFAULTS.overhead * 100),
            key=f"{NS}.overhead",
            help="Activations, allocator fragmentation, CUDA context: the chapter's x1.2.",
        )
    )
    price = price_input(c2, NS, gpu)
    mode = "datasheet"
    cal = cached_calibration()
    if gpu.key == THIS_MACHINE:
        machine_panel(f"{NS}.machine", compact=True)
        mode = st.radio(
            "Mode",
            ["datasheet", "calibrated"],
            horizontal=True,
            key=f"{NS}.mode",
            help="Calibrated: the bandwidth and FLOP/s efficiency a real run reached on this machine.",
        )
        if mode == "calibrated" and cal is None:
            st.warning(
                "No calibration on this machine yet: run `python -m engine calibrate` (about a minute). "
                "Showing datasheet mode."
            )
            mode = "datasheet"

if spec is None:
    st.stop()

inputs = replace(
    weights,
    batch=batch,
    seq_len=prompt + output,
    prompt_tokens=prompt,
    output_tokens=output,
    overhead=overhead_pct / 100,
    n_gpus=n_gpus,
    usd_per_gpu_hour=price,
    **serving_inputs,
)
dtype = weights.dtype
eff, calibrated = timing.DATASHEET, None
try:
    if mode == "calibrated" and cal is not None:
        eff, calibrated = efficiency_at(
            cal,
            spec,
            gpu,
            dtype=dtype,
            prompt_tokens=prompt,
            output_tokens=output,
            batch=batch,
            n_gpus=n_gpus,
        )
    est = estimate(spec, gpu, inputs, eff)
except EngineError as exc:
    with right:
        show_error(exc)
    st.stop()

m, t, plan = est.memory, est.timing, est.plan
with right:
    st.subheader(
        f"{spec.name} · {est.inputs.weights_label} · {n_gpus} × {gpu.name} · {batch} users × {prompt + output:,} tokens"
        + (" · calibrated" if mode == "calibrated" else "")
    )
    for warning in est.warnings:
        st.warning(warning, icon=":material/warning:")
    verdict, table = st.columns([1, 1])
    with verdict:
        if est.serving is not None:
            sm = est.serving
            (st.success if est.fits else st.error)(
                f"**{'Fits' if est.fits else 'Does not fit'}** as {est.inputs.engine} allocates memory: of "
                f"{fmt.gb(sm.total_bytes)} per GPU it keeps {sm.utilization:.0%} ({fmt.gb(sm.budget_bytes)}); weights "
                f"{fmt.gb(sm.weights_bytes)}, profile-run activations {fmt.gb(sm.activation_bytes)}, runtime "
                f"{fmt.gb(sm.non_torch_bytes)}; the KV cache gets **{fmt.gb(max(sm.kv_bytes, 0))}** = "
                f"**{sm.kv_cache_tokens:,} tokens**. Maximum concurrency for {sm.max_model_len:,} tokens per request: "
                f"**{sm.max_concurrency:.2f}x**."
                + (
                    f" Below 1x: {est.inputs.engine} will ask for a --max-model-len of at most {sm.kv_cache_tokens:,}."
                    if est.fits and sm.max_concurrency < 1
                    else ""
                )
            )
            st.plotly_chart(serving_bar(sm), width="stretch", key=f"{NS}.servbar")
        elif m.fits:
            st.success(
                f"**Fits**: {fmt.gb(m.per_gpu_bytes)} of {fmt.gb(m.gpu_memory_bytes)} per GPU "
                f"({fmt.gb(m.headroom_bytes)} free). Up to **{est.max_batch}** users at {prompt + output:,} tokens."
            )
        else:
            st.error(
                f"**Does not fit**: needs {fmt.gb(m.per_gpu_bytes)} per GPU, has {fmt.gb(m.gpu_memory_bytes)}. "
                f"GPUs needed: **{plan.gpus}**. {plan.sentence(spec.n_head)}"
            )
        if est.serving is None:
            st.plotly_chart(memory_bar(m), width="stretch", key=f"{NS}.membar")
    with table:
        st.dataframe(breakdown_frame(est), hide_index=True, width="stretch")
        st.caption(
            f"Parameters per component, counted by the {est.params.source}; bytes at {est.inputs.weights_label}"
            + (" (average bytes per weight, scales included)" if est.inputs.weight_format else "")
            + "."
        )
    k = st.columns(3)
    k[0].metric("Weights", fmt.gb(m.weights_bytes), help=memory.formula_of(memory.weights_bytes))
    note_metric(
        k[1],
        "KV cache",
        fmt.gb(m.kv_cache_bytes),
        f"{m.kv_bytes_per_token:,.0f} B per token",
        help=memory.formula_of(memory.kv_cache_bytes),
    )
    if est.serving is not None:
        note_metric(
            k[2],
            f"KV cache {est.inputs.engine} allocates",
            f"{est.serving.kv_cache_tokens:,} tokens",
            f"{est.serving.max_concurrency:.2f}x for {est.serving.max_model_len:,} tokens",
            help="(total x utilisation - weights - profile-run activations - runtime) / KV bytes per token per GPU",
        )
    else:
        note_metric(
            k[2],
            "Total with overhead",
            fmt.gb(m.total_bytes),
            f"{fmt.gb(m.overhead_bytes)} overhead",
            help=memory.formula_of(memory.estimate_memory),
        )
    k = st.columns(3)
    sp = est.speed
    # a load that does not fit: these times are the GPUs asked for as if it fitted; the plan's follow the tiles
    fitted = "" if m.fits else f" if it fitted on {n_gpus}"
    # what each tile is: the roofs' physical bound, or a serving engine's fitted estimate with its interval (the
    # interval's own central: TTFT is one request's at the load asked, not the batch's prefill)
    kind = (f", {est.inputs.engine} estimate" if sp else ", physical bound") + fitted
    for col, what, seconds, interval, phase, hint in (
        (k[0], "TPOT", t.decode_s_per_token, sp and sp.tpot_s, t.decode_step, timing.estimate_timing),
        (k[1], "TTFT", t.ttft_s, sp and sp.ttft_s, t.prefill, timing.phase_time),
    ):
        note_metric(
            col,
            what + kind,
            fmt.seconds(interval.central if interval else seconds),
            f"{INTERVAL_LEVEL}: {fmt.seconds(interval.low)}–{fmt.seconds(interval.high)}"
            if interval
            else f"{phase.bound}-bound",
            help=memory.formula_of(hint),
        )
    note_metric(
        k[2],
        "Throughput" + kind,
        f"{t.tokens_per_s:,.0f} tok/s",
        f"{INTERVAL_LEVEL}: {sp.output_tokens_per_s.low:,.0f}–{sp.output_tokens_per_s.high:,.0f}"
        if sp
        else f"{t.tokens_per_s / batch:,.1f} per user",
        help="batch x output tokens / generation time",
    )
    if sp:  # the tiles' notes hold the intervals; the bounds, cut off there, get a line of their own
        st.caption(
            f"Physical bounds (every roof reached): TPOT ≥ {fmt.seconds(sp.tpot_s.bound)}, TTFT ≥ "
            f"{fmt.seconds(sp.ttft_s.bound)}, throughput ≤ {sp.output_tokens_per_s.bound:,.0f} tok/s."
        )
    if gpu.key == THIS_MACHINE and (here := measured_here_line(spec, dtype, batch)):
        # the same quantity measured: one line, so the bound and the measurement read together
        st.markdown(here)
    if not m.fits and est.timing_at_plan is not None:
        tp = est.timing_at_plan
        st.caption(
            f"At the {plan.gpus} GPUs the load needs ({plan.sentence(spec.n_head)}): TPOT "
            f"{fmt.seconds(tp.decode_s_per_token)}, TTFT {fmt.seconds(tp.ttft_s)}, "
            f"{tp.tokens_per_s * plan.replicas:,.0f} tok/s in all: the figures the price below is computed from."
        )
    if est.speed is not None:
        st.markdown(speed_caption(est))
    if calibrated is not None:
        pi = calibrated
        st.caption(
            f"Calibrated on this machine ({pi.calibrated_on}): TTFT and TPOT above are the fit's predictions for "
            f"this shape, 95% interval TTFT {fmt.seconds(pi.ttft.low)}–{fmt.seconds(pi.ttft.high)}, TPOT "
            f"{fmt.seconds(pi.tpot.low)}–{fmt.seconds(pi.tpot.high)}; throughput and cost follow from them. "
            "The batch sweep below reuses this shape's efficiency at other batches (an approximation)."
            + "".join(f" {n}." for n in pi.notes)
        )
    k = st.columns(3)
    if m.fits:
        note_metric(
            k[0],
            "$ per million output tokens",
            fmt.usd(est.cost.usd_per_million_tokens),
            f"{fmt.usd(est.cost_interval[0])}–{fmt.usd(est.cost_interval[1])}" if est.cost_interval else None,
            help=memory.formula_of(estimate_cost),
        )
        k[1].metric("$ per hour", fmt.usd(est.cost.usd_per_hour))
    elif est.cost_at_plan is not None:
        note_metric(
            k[0],
            f"$/M output tokens at {plan.gpus} GPUs",
            fmt.usd(est.cost_at_plan.usd_per_million_tokens),
            f"{fmt.usd(est.cost.usd_per_million_tokens)} on {n_gpus} if it fitted",
            help=memory.formula_of(estimate_cost)
            + " Priced at the GPUs the load needs: "
            + plan.sentence(spec.n_head),
        )
        k[1].metric(f"$ per hour at {plan.gpus} GPUs", fmt.usd(est.cost_at_plan.usd_per_hour))
    else:
        note_metric(
            k[0],
            "$ per million output tokens",
            "—",
            "does not fit: no price",
        )
        note_metric(
            k[1],
            "$ per hour",
            "—",
            "does not fit",
        )
    k[2].metric("Generation time", fmt.seconds(t.generation_s), help="TTFT + (output - 1) x TPOT")
    k = st.columns(3)
    k[0].metric(
        f"Max batch at {prompt + output:,} tokens",
        f"{est.max_batch:,}",
        help=memory.formula_of(memory.max_batch),
    )
    note_metric(
        k[1],
        f"Max tokens at batch {batch}",
        f"{est.max_seq_len.tokens:,}",
        f"limited by {est.max_seq_len.limited_by}",
        help=memory.formula_of(memory.max_seq_len),
    )
    k[2].metric("GPUs needed", plan.gpus, help=memory.formula_of(memory.plan_gpus))
    if n_gpus > 1:
        tiles = (
            ("Tensor-parallel share of prefill", t.prefill, timing.tp_comm_s),
            ("Tensor-parallel share of a decode step", t.decode_step, timing.allreduce_s),
        )
        k = st.columns(3)
        for col, (label, phase, formula) in zip(k, tiles, strict=False):
            note_metric(
                col,
                label,
                f"{phase.comm_share:.0%}",
                fmt.seconds(phase.comm_s),
                help=memory.formula_of(formula),
            )
        note_metric(
            k[2],
            "Interconnect",
            gpu.interconnect or "unknown",
            f"{fmt.gb(gpu.interconnect_bytes_per_s)}/s each way",
        )

    paged_section(est, prompt + output)
    if est.launch is not None:
        launch_commands(est)
    with st.expander("Why: the reasoning with these numbers", expanded=True):
        st.markdown("\n".join(f"- {line}" for line in reasoning(est, spec, gpu, eff)))
        for note in spec.notes:
            st.caption(note)

    formula_expander(
        "Formulas: memory",
        memory.count_params,
        memory.weights_bytes,
        memory.kv_bytes_per_token,
        memory.cached_tokens,
        memory.kv_cache_bytes,
        memory.overhead_bytes,
        memory.estimate_memory,
        memory.max_batch,
        memory.max_seq_len,
        memory.gpus_needed,
        memory.plan_gpus,
    )
    formula_expander(
        "Formulas: time and cost",
        timing.phase_time,
        timing.estimate_timing,
        timing.simple_decode_s,
        timing.simple_prefill_s,
        timing.allreduce_s,
        timing.tp_comm_s,
        estimate_cost,
        extra="TTFT: request to first token. TPOT: (latency − TTFT) / (output tokens − 1), vLLM's definition.",
    )

# ---------------------------------------------------------------- cost and latency against batch size
st.divider()
st.header("Cost and latency against batch size")
points = batch_sweep(spec, gpu, inputs, eff, max_batch_=4096)
priced = math.isfinite(points[0].usd_per_million_tokens)
st.plotly_chart(batch_curve(points, est.max_batch, priced=priced), width="stretch", key=f"{NS}.curve")
fitting = [p for p in points if p.fits]
if fitting:
    cheapest = min(
        fitting, key=lambda p: p.usd_per_million_tokens if priced else p.decode_s_per_token / p.batch
    )
    first = fitting[0]
    st.markdown(
        f"On {n_gpus} × {gpu.name}, batch {first.batch} → {cheapest.batch}: time per output token goes from "
        f"{fmt.seconds(first.decode_s_per_token)} to {fmt.seconds(cheapest.decode_s_per_token)}"
        + (
            f", and the price of a million output tokens from {fmt.usd(first.usd_per_million_tokens)} to "
            f"{fmt.usd(cheapest.usd_per_million_tokens)}"
            if priced
            else ""
        )
        + f". Past batch {est.max_batch:,} the KV cache no longer fits (hollow points: priced as if it did)."
    )
else:
    st.markdown(
        f"Not even batch 1 fits on {n_gpus} × {gpu.name}: every point is priced as if it did (hollow)."
    )

# ---------------------------------------------------------------- estimate vs measurement
st.divider()
st.header("Estimate vs measurement on this machine")
st.caption(
    "Runs the engine measured here (Playground, benchmarks, calibration), each predicted from its own shape on "
    "this machine's measured roofs: datasheet mode assumes the roofs are reached; calibrated mode applies the "
    "efficiency one real run reached. Ratio = predicted / measured."
)
runs = [r for r in load_runs() if r.use_cache]
if runs or machine_known():
    st.caption(machine_provenance())  # the roofs every prediction here uses, with their date and load
shapes = estimate_check.summarize(runs, cached_machine(), cal) if runs else []
if not runs:
    st.info(
        "No measured runs on this machine yet. Generate in the Playground, or run `python -m engine calibrate`; "
        "the comparison appears here."
    )
elif not shapes:
    st.info("The runs logged here are of models the calculator has no shape for.")
else:
    st.caption(
        f"Each row is one shape (model, precision, batch, prompt and output length bucket): the median and middle "
        f"half of its last {estimate_check.RECENT} comparable runs, never one run. Cancelled runs are left out."
    )
    best = shapes[-3:]
    for col, c in zip(st.columns(len(best)), best, strict=True):
        predicted = c.calibrated_tpot_s if c.calibrated_tpot_s is not None else c.datasheet_tpot_s
        note_metric(
            col,
            c.label,
            f"measured {fmt.seconds(c.tpot.median)}",
            f"predicted {fmt.seconds(predicted)} ({predicted / c.tpot.median:.2f}×)",
            help="median measured TPOT of the shape's recent runs; predicted = calibrated if a calibration exists, "
            "else datasheet (this machine's measured roofs)",
        )
    for c in best:
        st.caption(f"**{c.label}**: {c.explanation()}")
    chart = [
        {
            "label": c.label,
            "measured": c.tpot.median,
            "datasheet": c.datasheet_tpot_s,
            "calibrated": c.calibrated_tpot_s,
        }
        for c in shapes[-6:]
    ]
    st.plotly_chart(comparison_chart(chart), width="stretch", key=f"{NS}.cmp")

    def _ms(x: float | None) -> float | None:
        return None if x is None else x * 1e3

    rows = [
        {
            "model": c.model,
            "dtype": c.dtype,
            "batch": c.batch_size,
            "prompt": c.prompt_tokens,
            "output": c.output_tokens,
            "runs": c.n,
            "from": c.source_text,
            "newest": c.newest[:16],
            "TPOT measured median (ms)": _ms(c.tpot.median),
            "TPOT q1 (ms)": _ms(c.tpot.q1),
            "TPOT q3 (ms)": _ms(c.tpot.q3),
            "TPOT datasheet (ms)": _ms(c.datasheet_tpot_s),
            "efficiency (datasheet / measured)": c.tpot_efficiency,
            "TPOT calibrated (ms)": _ms(c.calibrated_tpot_s),
            "TPOT calibrated 95% low (ms)": _ms(c.calibrated_tpot_interval[0])
            if c.calibrated_tpot_interval
            else None,
            "TPOT calibrated 95% high (ms)": _ms(c.calibrated_tpot_interval[1])
            if c.calibrated_tpot_interval
            else None,
            "TTFT measured median (ms)": _ms(c.ttft.median),
            "TTFT datasheet (ms)": _ms(c.datasheet_ttft_s),
            "TTFT calibrated (ms)": _ms(c.calibrated_ttft_s),
        }
        for c in reversed(shapes)
    ]
    text_cols = ("model", "dtype", "batch", "prompt", "output", "runs", "from", "newest")
    st.dataframe(
        pd.DataFrame(rows),
        hide_index=True,
        width="stretch",
        column_config={
            k: st.column_config.NumberColumn(format="%.2f") for k in rows[0] if k not in text_cols
        },
    )
    if cal is not None:
        st.caption(
            f"Calibration of {cal.created_at} on {cal.model}: bandwidth efficiency {cal.bandwidth_efficiency:.2f} of "
            f"{cal.peak_bandwidth_bytes_per_s / 1e9:.1f} GB/s, fixed cost {cal.step_overhead_s_per_layer * 1e3:.3f} ms per "
            "layer per step, FLOP/s efficiency "
            + ", ".join(f"{k} {v:.2f}" for k, v in cal.flops_efficiency.items())
            + "."
        )
        for note in cal.notes:
            st.caption(note)
    else:
        st.caption("Calibrated columns appear after `python -m engine calibrate`.")

# ---------------------------------------------------------------- GPUs needed
st.divider()
st.subheader("GPUs needed")
st.metric(f"{gpu.name} GPUs for this load", plan.gpus)
st.caption(plan.sentence(spec.n_head) + " " + memory.formula_of(memory.plan_gpus))
if not math.isfinite(est.cost.usd_per_million_tokens):
    st.caption("Enter a price per GPU-hour for the cost figures.")

solvers_section(NS, spec, gpu, est.inputs)  # max context, max users, cheapest GPU (ui.simulate_widgets)

# ---------------------------------------------------------------- track record
st.divider()
track_record_section(NS)

# ---------------------------------------------------------------- share
st.divider()
export.download_button(
    "Memory and cost",
    [
        export.Heading(f"{spec.name} · {est.inputs.weights_label} · {n_gpus} × {gpu.name} · {batch} users"),
        export.Text("\n".join(f"- {line}" for line in reasoning(est, spec, gpu, eff))),
        *(export.Text(f"Warning: {w}") for w in est.warnings),
        export.Table(breakdown_frame(est), "parameters and bytes per component"),
        export.Figure(memory_bar(m)),
        export.Figure(
            batch_curve(points, est.max_batch, priced=priced), "cost and latency against batch size"
        ),
    ],
    key=f"{NS}.html",
)
