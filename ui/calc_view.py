"""The Memory & cost page's answer: one call computes it (`calc_answer`), the functions below only draw it.

Every figure comes from the one Estimate (engine.calc.report): one memory model per plan, and the times, the
price and the launch command at the layout that model settled on; the words are built from those numbers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import pandas as pd
import streamlit as st

from engine.calc import format as fmt
from engine.calc import memory, paged, report, timing
from engine.calc.batch_cost import BatchPoint, batch_sweep
from engine.calc.cost import estimate_cost
from engine.calc.efficiency import INTERVAL_LEVEL, SpeedEstimate
from engine.calc.explain import efficiency_of, reasoning
from engine.calc.report import Estimate, SplitAgainstOne, estimate, split_against_one
from engine.calc.seen import context_words
from engine.calc.serving_memory import is_cpu
from engine.calc.timing import Efficiency
from engine.core.interval import Interval
from ui.calc_widgets import CalcRequest
from ui.plots_calc import batch_curve, batch_sentence, memory_bar, paged_chart, serving_bar
from ui.widgets import note_metric, split_dataframes


@dataclass(frozen=True)
class CalcAnswer:
    request: CalcRequest
    est: Estimate
    eff: Efficiency  # what the times were computed with (calibrated, fitted or the bound)
    sweep: list[BatchPoint]  # cost and latency against batch on swept_gpus(est)
    split: SplitAgainstOne | None = None  # a tensor-parallel plan's decode step beside one GPU's
    sweep_max_batch: int = 0  # the largest batch those GPUs hold (the curve's fit limit)

    @property
    def label(self) -> str:
        """The model as people name it: its hub id, else the name its config gives, said to be a config's."""
        est, spec = self.est, self.request.spec
        if est.model_id:
            return est.model_id
        if spec.source.startswith("config.json") and spec.name[:1].isupper() and "/" not in spec.name:
            return f"your config.json ({spec.name}, {est.params.total / 1e9:.1f} B parameters)"
        return spec.name


def calc_answer(req: CalcRequest) -> CalcAnswer:
    """The estimate (with this machine's calibration in calibrated mode) and the batch sweep from the same
    efficiency."""
    est = estimate(req.spec, req.gpu, req.inputs, req.calibration)
    eff = efficiency_of(est, req.gpu)
    split = split_against_one(est, req.spec, req.gpu, req.calibration)
    n = swept_gpus(est)
    on = replace(req.inputs, n_gpus=n)
    if n == req.inputs.n_gpus:
        limit = est.max_batch
    else:  # the plan's GPUs: their memory answer alone (no times, prices or published runs to compute)
        i, setup = report.resolve(req.spec, req.gpu, on)
        limit = report.memory(setup, i).max_batch
    return CalcAnswer(req, est, eff, batch_sweep(req.spec, req.gpu, on, eff), split, limit)


def swept_gpus(est: Estimate) -> int:
    """The GPUs the cost curve runs on: the ones asked when the load fits there, else one replica of the plan the
    tiles are timed and priced at (a 70B asked on 1 GPU is drawn on the 4 it needs, not on 1 that cannot hold it)."""
    layout = est.fit.layout
    if est.fits or layout is None or layout.pipeline_parallel > 1:
        return est.inputs.n_gpus
    return layout.tensor_parallel


def on_device(gpu, n: int) -> str:
    """'2 × H100 SXM', or this machine's CPU by its name alone (one CPU, never counted as GPUs)."""
    return gpu.name if is_cpu(gpu) else f"{n} × {gpu.name}"


def header(a: CalcAnswer) -> str:
    i = a.est.inputs
    return (
        f"{a.label} · {i.weights_label} · {on_device(a.request.gpu, i.n_gpus)} · {i.batch} user{'s' if i.batch != 1 else ''} × "
        f"{i.seq_len:,} tokens" + (" · calibrated" if a.est.calibrated else "")
    )


def answer_card(est: Estimate, *, cpu: bool = False) -> str:
    """The answer in one line above everything else (an engineer's walk found the time per token, the first token
    and the price 1.5 screens down at 1280 x 800, under the assumptions and the plan's paragraph): the same figures
    the tiles below show, each there with its interval."""
    t, sp, i, layout = est.timing, est.speed, est.inputs, est.fit.layout
    users = layout.batch_per_replica if layout else i.batch
    if cpu:  # this machine's CPU: no GPUs to count (it read 'Fits on the 1 GPU asked': a presenter's walk)
        fit = "**Fits** in this machine's memory" if est.fits else "**Does not fit** in this machine's memory"
    elif est.fits:
        fit = f"**Fits** on the {i.n_gpus} GPU{'s' if i.n_gpus != 1 else ''} asked"
    elif layout is not None:
        fit = f"**Does not fit** on the {i.n_gpus} asked; **{est.gpus_needed:,} GPUs needed**, timed and priced there"
    else:
        fit = "**Does not fit**: no layout holds one request"
    if layout is None:
        return fit + "."
    per_token = est.tpot_at_load_s if sp is not None else t.decode_s_per_token
    first = (
        f"TTFT {fmt.seconds(sp.ttft_s.central)} for one request"
        if sp is not None
        else f"TTFT {fmt.seconds(t.prefill_s)} with all {users} arriving together"
    )
    price = (
        f" · **{fmt.usd(est.cost.usd_per_million_tokens)} per million output tokens**"
        if math.isfinite(est.cost.usd_per_million_tokens)
        else ""
    )
    return (
        f"{fit} · **{fmt.seconds(per_token)} per output token** at {users:,} user{'s' if users != 1 else ''} · "
        f"{first} · {est.tokens_per_s:,.0f} tok/s{price}. Each figure is below with its interval and its reasoning."
    )


def verdict(a: CalcAnswer, key: str) -> None:
    """Fits or not, in one sentence with the numbers (the memory model the engine decides), and its bar."""
    est, fit = a.est, a.est.fit
    model = f"as {fit.model} allocates memory" if fit.serving is not None else "weights + KV cache + overhead"
    (st.success if est.fits else st.error)(
        f"**{'Fits' if est.fits else 'Does not fit'}** ({model}). {fit.sentence}"
    )
    if fit.serving is not None:
        st.plotly_chart(serving_bar(fit.serving), width="stretch", key=f"{key}.servbar")
    else:
        st.plotly_chart(
            memory_bar(est.memory, cpu=is_cpu(a.request.gpu)), width="stretch", key=f"{key}.membar"
        )


def breakdown_frame(est: Estimate) -> pd.DataFrame:
    """Per component: parameters and bytes (at the weight precision; the average bytes per weight for a
    quantized format), skipping empty components, with the total."""
    per = est.memory.weights_bytes / est.params.total

    def millions(n: int) -> str:  # the column fits its narrow place ("267.80 MB" was cut); the exact count is
        return f"{n / 1e6:,.1f} M"  # in the caption beside it

    rows = [
        {"component": name, "parameters": millions(n), "bytes": fmt.gb(n * per)}
        for name, n in est.params.rows()
        if n
    ]
    rows.append(
        {
            "component": "total",
            "parameters": millions(est.params.total),
            "bytes": fmt.gb(est.memory.weights_bytes),
        }
    )
    if est.params.active != est.params.total:
        rows.append(
            {
                "component": "active per token",
                "parameters": millions(est.params.active),
                "bytes": fmt.gb(est.params.active * per),
            }
        )
    return pd.DataFrame(rows)


def memory_tiles(est: Estimate) -> None:
    m, fit = est.memory, est.fit
    k = st.columns(3)
    k[0].metric("Weights", fmt.gb(m.weights_bytes), help=memory.formula_of(memory.weights_bytes))
    note_metric(
        k[1],
        "KV cache of this load",
        fmt.gb(m.kv_cache_bytes),
        f"{m.kv_bytes_per_token:,.0f} B per token",
        help=memory.formula_of(memory.kv_cache_bytes),
    )
    sm = fit.serving
    # the third tile: what the serving engine allocates to its KV cache, else the overhead model's total
    label, value, note, why = (
        (
            f"KV cache {fit.model} allocates{_asked(est)}",
            f"{sm.kv_cache_tokens:,} tokens",
            f"{fmt.gb(max(sm.kv_bytes, 0))} per GPU",
            "(total x utilisation - weights - profile-run activations - runtime) / KV bytes per token per GPU",
        )
        if sm is not None
        else (
            "Total with overhead",
            fmt.gb(m.total_bytes),
            f"{fmt.gb(m.overhead_bytes)} overhead",
            memory.formula_of(memory.estimate_memory),
        )
    )
    note_metric(k[2], label, value, note, help=why)


def _asked(est: Estimate) -> str:
    """The memory tiles are for the GPUs asked; said so where the plan needs more (the speed and price tiles are for
    the GPUs it needs)."""
    return "" if est.fits else f" on the {est.inputs.n_gpus} GPU{'s' if est.inputs.n_gpus > 1 else ''} asked"


def _where(est: Estimate) -> str:
    """Which GPUs the times are for: the ones asked, or (not fitting) the ones it needs."""
    if est.fits:
        return ""
    if est.fit.layout is None:
        return f" if it fitted on {est.inputs.n_gpus}"
    return f" at the {est.priced_gpus:,} GPUs it needs"


def per_token_label(batch: int) -> str:
    """The headline speed figure's name: the time per output token a user sees at the load asked."""
    return f"Time per output token at {batch:,} {'user' if batch == 1 else 'users'}"


def speed_tiles(est: Estimate) -> None:
    """TPOT, the first token and throughput: the calibrated fit, an engine's fitted estimate with its interval,
    or the physical bound. With a serving engine's estimate TTFT is one request's at the load asked (in parts)
    and the batch's prefill its own figure; without one it is the whole batch prefilled together."""
    t, sp, cal, i = est.timing, est.speed, est.calibrated, est.inputs
    kind = (", calibrated" if cal else f", {i.engine} estimate" if sp else ", physical bound") + _where(est)
    users = est.fit.layout.batch_per_replica if est.fit.layout else i.batch
    level = INTERVAL_LEVEL if sp else "95%"  # the engine fit's nominal band; a calibration's own 95%

    def band(iv: Interval | None, bound: str) -> str:
        return f"{level}: {fmt.seconds(iv.low)}–{fmt.seconds(iv.high)}" if iv else f"{bound}-bound"

    k = st.columns(3)
    if (
        sp is not None
    ):  # a user's time per token at this load is the headline; the decode step is its lower part
        at_load = est.tpot_at_load_interval
        note_metric(
            k[0],
            per_token_label(i.batch) + kind,
            fmt.seconds(est.tpot_at_load_s),
            f"{level}: {fmt.seconds(at_load[0])}–{fmt.seconds(at_load[1])}" if at_load else None,
            help=f"What each user sees per token after their first at this load (vLLM's TPOT: (request time - first "
            f"token) / (output - 1)): every round of a steady load carries the other users' prompts as well as the "
            f"decode step of the {users} users ({fmt.seconds(sp.tpot_s.central)} alone, said under the tiles). The "
            "interval is the throughput's, read as a time.",
        )
    else:
        tpot = cal.tpot if cal else None
        note_metric(
            k[0],
            "TPOT" + kind,
            fmt.seconds(t.decode_s_per_token),
            band(tpot, t.decode_step.bound),
            help=memory.formula_of(timing.estimate_timing),
        )
    if sp is not None:
        note_metric(
            k[1],
            "TTFT, one request" + kind,
            fmt.seconds(sp.ttft_s.central),
            band(sp.ttft_s, t.prefill.bound),
            help=f"One request's first token with {users} users in flight: its fixed cost, its own prompt's "
            "prefill, and the wait for the step it joins, as a serving engine schedules them.",
        )
    else:
        note_metric(
            k[1],
            f"TTFT, all {users} arrive together" + kind,
            fmt.seconds(t.prefill_s),
            band(cal.ttft if cal else None, t.prefill.bound),
            help="The first token of every request when the whole batch arrives at once: one prefill of all "
            f"{users} prompts. " + memory.formula_of(timing.phase_time),
        )
    rate = sp.output_tokens_per_s if sp else None
    note_metric(
        k[2],
        "Throughput" + kind,
        f"{est.tokens_per_s:,.0f} tok/s",
        f"{level}: {rate.low * est.replicas:,.0f}–{rate.high * est.replicas:,.0f}"
        if rate
        else f"{est.tokens_per_s / i.batch:,.1f} per user",
        help="batch x output tokens / generation time, over every replica",
    )
    if sp is not None:
        st.caption(decode_step_sentence(est, users, level))
        st.caption(ttft_sentence(sp, users))
        st.caption(
            f"Physical bounds (every roof reached): decode step ≥ {fmt.seconds(sp.tpot_s.bound)}, first token ≥ "
            f"{fmt.seconds(sp.ttft_s.bound)}, throughput ≤ {sp.output_tokens_per_s.bound * est.replicas:,.0f} tok/s."
        )
        published_runs(est)
    if cal is not None:
        st.caption(
            f"Calibrated on this machine ({cal.basis}): the times above are the fit's predictions for this shape; "
            "throughput and cost follow from them; the batch sweep below reuses this shape's efficiency at other "
            "batches (an approximation)." + "".join(f" {n[0].upper()}{n[1:]}." for n in cal.notes)
        )


def published_runs(est: Estimate) -> None:
    """Published TPOTs of this very setup beside the estimate, and a warning when one lies below its interval
    for a single user (a TPOT under load is at least one user's)."""
    if est.seen_note:
        st.warning(est.seen_note, icon=":material/fact_check:")
    if not est.seen:
        return
    sources = list(dict.fromkeys(r.source for r in est.seen))  # each once, in the rows' order
    i = est.inputs
    users = est.fit.layout.batch_per_replica if est.fit.layout else i.batch
    with st.expander(f"Published runs of this setup ({len(est.seen)}): measured, not estimated"):
        st.markdown(context_words(est.seen, i.prompt_tokens, i.output_tokens, users))
        st.dataframe(published_rows(est), hide_index=True, width="stretch")
        st.caption(
            "The same model shape, GPU, GPU count and engine class, in 16-bit weights. A time per output token "
            "measured under load is at least one user's: a step carries every running request. Sources: "
            + "; ".join(f"[{k + 1}] {source_link(src)}" for k, src in enumerate(sources))
        )


def published_rows(est: Estimate) -> list[dict]:
    """The published runs beside the estimate as table rows: each with its lengths and load, so a run at other
    lengths or loads is not read as a check of this estimate."""
    sources = list(dict.fromkeys(r.source for r in est.seen))
    return [
        {
            "TPOT (ms)": round(r.tpot_s * 1e3, 1),
            "prompt + output": r.lengths,
            "load": r.load,
            "engine": r.engine,
            "source": f"[{sources.index(r.source) + 1}]",
        }
        for r in est.seen
    ]


def source_link(source: str) -> str:
    """A published row's source as a link a person can follow: 'github.com/OWNER/REPO@COMMIT:PATH' becomes
    [OWNER/REPO on GitHub, at commit C](https://github.com/OWNER/REPO/blob/COMMIT/PATH); anything else is shown
    as given."""
    m = re.fullmatch(r"github\.com/([^/@]+/[^/@]+)@([0-9a-f]{7,40}):(\S+)", source)
    if m is None:
        return source
    repo, commit, path = m.groups()
    return f"[{repo} on GitHub, at commit {commit[:7]}](https://github.com/{repo}/blob/{commit}/{path})"


def decode_step_sentence(est: Estimate, users: int, level: str) -> str:
    """The decode step alone, labelled, under the tiles: the part of the time per output token that is one step of
    every user's token, the other users' prompts left out (the figure the fit predicts and published batch-1 TPOTs
    are measured against)."""
    sp, i = est.speed, est.inputs
    assert sp is not None
    step = sp.tpot_s
    replicas = f" of a replica (the {i.batch:,} over {est.replicas} replicas)" if est.replicas > 1 else ""
    return (
        f"Decode step alone: {fmt.seconds(step.central)} ({level}: {fmt.seconds(step.low)}–"
        f"{fmt.seconds(step.high)}), one step that gives "
        + (f"each of the {users:,} users{replicas}" if users != 1 else f"the one user{replicas}")
        + " a token, with the "
        f"other users' prompts left out. The time per output token above ({fmt.seconds(est.tpot_at_load_s)}) adds "
        "the share of the steps that carry those prompts: it is what a user sees at this load."
    )


def ttft_sentence(sp: SpeedEstimate, users: int) -> str:
    """The first token in its parts, and the batch's prefill said apart from it: the two figures people mix up."""
    p, b = sp.ttft_parts, sp.prefill_batch_s
    wait = (
        f" + {fmt.seconds(p['queue'])} waiting for the step it joins and sharing it with the other {users - 1}"
        if users > 1
        else ""
    )
    return (
        f"First token of one request = {fmt.seconds(p['fixed'])} fixed cost (tokenize, schedule, respond) + "
        f"{fmt.seconds(p['prefill'])} prefilling its own prompt{wait}. If all {users} send at the same moment, "
        f"prefilling their prompts together takes {fmt.seconds(b.central)} ({INTERVAL_LEVEL}: "
        f"{fmt.seconds(b.low)}–{fmt.seconds(b.high)}) before anyone's first token."
    )


def cost_and_plan_tiles(est: Estimate, *, cpu: bool = False) -> None:
    """$/M tokens and $/hour at the GPUs the answer settled on, generation time, max batch and sequence, and GPUs
    needed: every tile from the same memory answer. On this machine's CPU (`cpu`) there are no GPUs to count: the
    GPUs tile gives way to the memory the answer fits in."""
    i, fit = est.inputs, est.fit
    at = "" if est.priced_gpus == i.n_gpus else f" at {est.priced_gpus} GPUs"
    k = st.columns(3)
    if math.isfinite(est.cost.usd_per_million_tokens):
        note_metric(
            k[0],
            "$ per million output tokens" + at,
            fmt.usd(est.cost.usd_per_million_tokens),
            f"{fmt.usd(est.cost_interval[0])}–{fmt.usd(est.cost_interval[1])}" if est.cost_interval else None,
            help=memory.formula_of(estimate_cost),
        )
        k[1].metric("$ per hour" + at, fmt.usd(est.cost.usd_per_hour))
        i = est.inputs
        k[0].caption(
            f"{fmt.usd(est.usd_per_million_tokens_in_and_out)} per million tokens in and out: the same hour over "
            f"each request's {i.prompt_tokens:,} prompt + {i.output_tokens:,} output tokens, to set against a "
            "provider's blended price."
        )
    else:
        why = (
            "no layout holds it"
            if fit.layout is None
            else f"no price per {'hour' if cpu else 'GPU-hour'}: enter yours"
        )
        note_metric(k[0], "$ per million output tokens", "—", why)
        note_metric(k[1], "$ per hour", "—", why)
    request_time_tile(k[2], est)
    k = st.columns(3)
    k[0].metric(
        f"Max batch at {i.seq_len:,} tokens{_asked(est)}",
        f"{est.max_batch:,}",
        help="In this machine's memory." if cpu else f"On the {i.n_gpus} GPU(s) asked.",
    )
    note_metric(
        k[1],
        f"Max tokens at batch {i.batch}{_asked(est)}",
        f"{est.max_seq_len.tokens:,}",
        f"limited by {est.max_seq_len.limited_by}",
    )
    asked = est.inputs.n_gpus
    fewer = f"; priced at the {asked} asked" if est.fits and est.gpus_needed < asked else ""
    if cpu:
        note_metric(
            k[2],
            "This machine's memory",
            fmt.gb(est.memory.gpu_memory_bytes),
            "installed RAM, all of it counted",
        )
    else:
        note_metric(k[2], "GPUs needed", f"{est.gpus_needed:,}", est.plan.brief() + fewer)
    st.caption(fit.sentence)


def request_time_tile(container, est: Estimate) -> None:
    """One request's time from its first prompt token to its last output token at the load asked. Without a serving
    engine's estimate: the batch's prefill (every prompt at once, the TTFT tile) + (output - 1) x TPOT. With one, the
    TTFT tile is one request's, while each round of a steady load carries every user's prompt: the request time is
    the batch's prefill + (output - 1) x the decode step, and the time per output token tile is what a user sees
    once the others' prompts are counted (the decode step alone is said under the speed tiles)."""
    t, sp, o = est.timing, est.speed, est.inputs.output_tokens
    if sp is None or o < 2:
        container.metric("Time per request", fmt.seconds(t.generation_s), help="TTFT + (output - 1) x TPOT")
        return
    seen = est.tpot_at_load_s
    note_metric(
        container,
        "Time per request at this load",
        fmt.seconds(t.generation_s),
        f"{fmt.seconds(seen)} per token with the others' prompts",
        help=f"Every user's prompt is prefilled once per round: a request's fixed cost + the batch's prefill "
        f"({fmt.seconds(t.prefill_s)}) + (output - 1) x the decode step ({fmt.seconds(t.decode_s_per_token)}). Spread over a request's "
        f"{o - 1} later tokens, after its own first token ({fmt.seconds(sp.ttft_s.central)}), that is "
        f"{fmt.seconds(seen)} per token, the time per output token tile (the decode step alone is "
        f"{fmt.seconds(sp.tpot_s.central)}). The throughput tile counts the same time.",
    )


def split_sentence(s: SplitAgainstOne, est: Estimate) -> str:
    """What splitting one GPU's load over n does to a decode step, from the plan's own numbers: each GPU reads
    1 / n of the weights, and the step pays two all-reduces per layer, each with a fixed latency."""
    reads = f"each GPU reads 1/{s.gpus} of the weights ({fmt.seconds(s.one_gpu_memory_s)} of reading → " + (
        f"{fmt.seconds(s.memory_s)})"
    )
    latency = (
        f"at {fmt.seconds(s.latency_s)} of fixed latency each (nccl-tests' small-message time on this link, times "
        f"a factor fitted on {est.inputs.engine}'s published multi-GPU runs)"
        if est.speed is not None and s.latency_s > 0
        else "(the physical bound counts their bytes only, no fixed latency)"
    )
    adds = (
        f"the step adds {s.allreduces} all-reduces (two per layer) {latency}, {fmt.seconds(s.comm_s)} in all"
    )
    if s.step_s > s.one_gpu_step_s:
        return (
            f"**On {s.gpus} GPUs a decode step is slower than on one**: {fmt.seconds(s.step_s)} against "
            f"{fmt.seconds(s.one_gpu_step_s)}. {reads[0].upper()}{reads[1:]}, but {adds}. This load fits on one "
            f"GPU: split it for memory room or more users, not for one user's speed."
        )
    return (
        f"On {s.gpus} GPUs a decode step takes {fmt.seconds(s.step_s)} against {fmt.seconds(s.one_gpu_step_s)} "
        f"on one ({s.step_s / s.one_gpu_step_s:.0%} of its time): {reads}; {adds}."
    )


def tensor_parallel_tiles(est: Estimate, gpu, split: SplitAgainstOne | None = None) -> None:
    t = est.timing
    k = st.columns(3)
    for col, (label, phase, formula) in zip(
        k,
        (
            ("Tensor-parallel share of prefill", t.prefill, timing.tp_comm_s),
            ("Tensor-parallel share of a decode step", t.decode_step, timing.allreduce_s),
        ),
        strict=False,
    ):
        note_metric(
            col, label, f"{phase.comm_share:.0%}", fmt.seconds(phase.comm_s), help=memory.formula_of(formula)
        )
    note_metric(
        k[2],
        "Interconnect",
        gpu.interconnect or "unknown",
        f"{fmt.gb(gpu.interconnect_bytes_per_s)}/s each way",
    )
    if split is not None:
        st.markdown(split_sentence(split, est))


def assumptions(est: Estimate) -> None:
    """Every assumption behind the figures, in one expander of sentences a user can act on."""
    if not est.warnings:
        return
    with st.expander(f"Assumptions ({len(est.warnings)})", expanded=False, icon=":material/info:"):
        st.markdown("\n".join(f"- {w}" for w in est.warnings))


def paged_section(est: Estimate, key: str) -> None:
    """Static against paged KV cache in the memory the answer gives the cache: a labelled comparison of how
    many sequences each allocation fits when requests stop at different lengths."""
    st.subheader("Static vs paged KV cache: how many sequences fit")
    p, i = est.paged, est.inputs
    if p is None:
        st.info(f"No room for a KV cache on the {i.n_gpus} GPU(s) asked: {est.fit.refusal}.")
        return
    gpus = est.fit.layout.replica_gpus if est.fit.layout is not None else i.n_gpus
    each = f" ({fmt.gb(p.kv_budget_bytes / gpus)} per GPU x {gpus} GPUs)" if gpus > 1 else ""
    where = (
        f"the {fmt.gb(p.kv_budget_bytes)} {est.fit.model} gives the cache{each}"
        if est.serving
        else (f"the {fmt.gb(p.kv_budget_bytes)} left for the cache{each}")
    )
    st.markdown(
        f"Requests stop at different lengths. A static cache reserves {i.seq_len:,} tokens for every sequence: "
        f"**{p.static_waste_fraction:.0%}** of it is never used across this spread of outputs. In {where}, "
        f"static allocation fits **{p.static_max_seqs}** sequences; paging (16-token blocks) fits "
        f"**{p.paged_max_seqs}**: **{p.extra_seqs:+d}**. (The max batch above is at the full "
        f"{i.seq_len:,} tokens each.)"
    )
    st.plotly_chart(paged_chart(p), width="stretch", key=f"{key}.paged")
    formula_expander("Formula: paged KV", paged.compare_paged, paged.output_spread)


# each formula under the name a reader knows it by (the function's own name read as code on the page: a student's walk)
FORMULA_NAMES = {
    "count_params": "Parameters",
    "weights_bytes": "Weights",
    "kv_bytes_per_token": "KV cache per token",
    "cached_tokens": "Tokens cached",
    "kv_cache_bytes": "KV cache",
    "overhead_bytes": "Overhead",
    "estimate_memory": "Memory in all",
    "max_batch": "Max batch",
    "max_seq_len": "Max tokens per sequence",
    "plan_gpus": "GPUs needed",
    "phase_time": "A phase's time",
    "estimate_timing": "Prefill and decode",
    "simple_decode_s": "Decode, by the chapter's rule",
    "simple_prefill_s": "Prefill, by the chapter's rule",
    "allreduce_s": "One all-reduce",
    "tp_comm_s": "Tensor-parallel all-reduces",
    "estimate_cost": "Cost",
    "compare_paged": "Paged against static KV",
    "output_spread": "Output lengths",
}


def formula_name(fn: object) -> str:
    name = getattr(fn, "__name__", "")
    return FORMULA_NAMES.get(name, name.replace("_", " ").capitalize())


def formula_expander(title: str, *fns: object, extra: str = "") -> None:
    with st.expander(title):
        for fn in fns:
            st.markdown(f"**{formula_name(fn)}**: {memory.formula_of(fn)}")
        if extra:
            st.markdown(extra)


def why(a: CalcAnswer) -> list[str]:
    return reasoning(a.est, a.request.spec, a.request.gpu)


def formulas() -> None:
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


def cost_curve(a: CalcAnswer, key: str) -> None:
    """Cost and latency against batch on the GPUs asked; the sentence and the hollow points from the same points."""
    priced = bool(a.sweep) and math.isfinite(a.sweep[0].usd_per_million_tokens)
    st.plotly_chart(
        batch_curve(a.sweep, a.sweep_max_batch, priced=priced), width="stretch", key=f"{key}.curve"
    )
    st.markdown(
        batch_sentence(a.sweep, a.sweep_max_batch, on_device(a.request.gpu, swept_gpus(a.est)), priced)
    )


SHOWN_SHAPES = 6  # the newest shapes measured here, each a tile, a line and a bar (the table holds them all)
TILES_A_ROW = 3  # at 1280 px a tile's label ('smollm2-135m-instruct fp32 b1 ...') needs a third of the column


def measured_section(a: CalcAnswer, key: str) -> None:
    """Runs measured here beside the calculator's estimate for their shape, by the one rule
    (engine.calibration.beside): the calibrated model with its interval, and no ratio for a run measured busy."""
    from engine.calibration import check as estimate_check
    from ui.machine_view import cached_machine, calibrate_button, load_runs, machine_known, machine_provenance
    from ui.plots_calc import comparison_chart

    cal = a.request.cal
    st.caption(
        "Runs the engine measured here (Playground, benchmarks, calibration), each beside the calibrated model's "
        "estimate for its own shape, with an interval for one more run here (what it is and how many runs it held "
        "is said below; the GPU estimates above state 80%, the level their published rows hold out of sample). A "
        "run measured while the machine was busy is not compared; without a calibration only the measured roofs' "
        "bound is shown, which no real run reaches."
    )
    runs = [r for r in load_runs() if r.use_cache]
    if runs or machine_known(cal):
        st.caption(machine_provenance(cal))  # the roofs every prediction here uses, with their date and load
    shapes = estimate_check.summarize(runs, cached_machine(cal), cal) if runs else []
    if not runs:
        st.info(
            "No measured runs on this machine yet. Generate in the Playground; the comparison appears here."
        )
        return
    if not shapes:
        st.info("The runs logged here are of models the calculator has no shape for.")
        return
    st.caption(
        f"Each row is one shape (model, precision, batch, prompt and output length bucket): the median and middle "
        f"half of its last {estimate_check.RECENT} comparable runs, never one run. Cancelled runs are left out."
    )
    if cal is not None:
        spread = estimate_check.run_spread(shapes)
        st.caption(
            spread.sentence()
            if spread is not None
            else f"Fewer than {estimate_check.SPREAD_MIN_RUNS} quiet runs with their load recorded: no interval "
            "for one run yet. The interval shown is the fit's 95% for the fastest of a shape's runs (the fit is "
            "made on the fastest, as noise only adds time), which most runs on a shared machine sit above."
        )
    # the newest shapes: one tile, one line of reasoning and one bar each, the same shapes in all three (the chart
    # drew four while the lines under the tiles named three); the table below holds every shape
    shown = shapes[-SHOWN_SHAPES:]
    cols = [col for _ in range(0, len(shown), TILES_A_ROW) for col in st.columns(TILES_A_ROW)]
    for col, c in zip(cols, shown, strict=False):
        b = c.beside()
        note_metric(
            col,
            c.label,
            f"measured {fmt.seconds(c.tpot.median)}",
            "not compared: load not recorded (older run)"
            if b.load_unknown
            else "not comparable (busy)"
            if b.busy
            else (
                f"estimate {fmt.seconds(b.predicted.central)} ({b.ratio:.2f}×)"
                if b.predicted
                else "no calibration"
            ),
            help="median measured TPOT of the shape's recent runs, beside the calibrated estimate",
        )
    for c in shown:
        st.caption(f"**{c.label}**: {c.explanation()}")
    chart = [
        {
            "label": c.label,
            "measured": c.tpot.median,
            "datasheet": c.datasheet_tpot_s,
            "calibrated": c.calibrated_tpot_s,
            "interval": c.calibrated_tpot_interval,
            "comparable": c.beside().comparable or c.calibrated_tpot_s is None,
        }
        for c in shown
    ]
    st.plotly_chart(comparison_chart(chart), width="stretch", key=f"{key}.cmp")
    st.caption(chart_note(chart))
    split_dataframes(_shape_rows(shapes), "shape", SHAPE_PARTS)
    if cal is None:
        st.caption("Calibrated estimates appear once this machine is calibrated.")
        calibrate_button(f"{key}.beside")


def chart_note(rows: Sequence[dict]) -> str:
    """The comparison chart's note: its log scale, the span it covers, and which shapes are drawn but not
    compared (built from the rows it describes)."""
    times = [v for r in rows for v in (r["measured"], r["datasheet"]) if v and math.isfinite(v) and v > 0]
    span = max(times) / min(times) if times else 1.0
    grey = [r["label"] for r in rows if not r.get("comparable", True)]
    return (
        f"Log scale: the bars span {span:,.0f}× from the shortest to the tallest, so one slow shape leaves the "
        "others readable."
        + (
            f" Drawn grey and not compared (measured busy, or with no record of the load): {', '.join(grey)}."
            if grey
            else ""
        )
    )


def comparable_word(b) -> str:
    return (
        "no: load not recorded (older run)" if b.load_unknown else "no: machine was busy" if b.busy else "yes"
    )


# The shapes' table as two, each led by the shape (its lengths are in its name): its eleven columns in one table
# scrolled sideways at 1280 px.
SHAPE_PARTS = (
    (
        "Time per output token in ms: the shape's median measured beside the calibrated estimate, its interval "
        "(for one more run here where enough runs were compared, as said above) and the measured roofs' bound",
        ("measured", "estimate", "interval", "roofs' bound", "comparable"),
    ),
    (
        "The runs behind each shape: how many, from which page or tool, the newest (UTC)",
        ("runs", "from", "newest"),
    ),
)


def _shape_rows(shapes) -> list[dict]:
    def ms(x: float | None) -> str:
        return "" if x is None or not math.isfinite(x) else f"{x * 1e3:,.2f}"

    return [
        {
            "shape": c.label,
            "runs": c.n,
            "from": c.source_text,
            "newest": c.newest[:16].replace("T", " "),
            "measured": ms(c.tpot.median),
            "estimate": ms(c.calibrated_tpot_s),
            "interval": f"{ms(c.calibrated_tpot_interval[0])}–{ms(c.calibrated_tpot_interval[1])}"
            if c.calibrated_tpot_interval
            else "",
            "roofs' bound": ms(c.datasheet_tpot_s),
            "comparable": comparable_word(c.beside()),
        }
        for c in reversed(shapes)
    ]


def headline_rows(est: Estimate) -> list[dict]:
    """The answer's tiles as table rows for the report: the same figures, each with its interval or note."""
    t, sp, at_load = est.timing, est.speed, est.tpot_at_load_interval

    def iv(x: Interval | None, show: Callable[[float], str]) -> str:
        return f"{INTERVAL_LEVEL}: {show(x.low)} to {show(x.high)}" if x is not None else ""

    rows = [
        ("GPUs needed", f"{est.gpus_needed:,}", est.plan.brief()),
        ("Weights", fmt.gb(est.memory.weights_bytes), ""),
        (
            "KV cache of this load",
            fmt.gb(est.memory.kv_cache_bytes),
            f"{est.memory.kv_bytes_per_token:,.0f} B per token",
        ),
        *(
            [
                (
                    per_token_label(est.inputs.batch),
                    fmt.seconds(est.tpot_at_load_s),
                    f"{INTERVAL_LEVEL}: {fmt.seconds(at_load[0])} to {fmt.seconds(at_load[1])}"
                    if at_load
                    else "",
                ),
                ("Decode step alone", fmt.seconds(sp.tpot_s.central), iv(sp.tpot_s, fmt.seconds)),
            ]
            if sp
            else [("TPOT", fmt.seconds(t.decode_s_per_token), "")]
        ),
        (
            "TTFT, one request" if sp else "TTFT, the batch together",
            fmt.seconds(sp.ttft_s.central if sp else t.prefill_s),
            iv(sp and sp.ttft_s, fmt.seconds),
        ),
        ("Time per request", fmt.seconds(t.generation_s), ""),
        ("Throughput", f"{est.tokens_per_s:,.0f} tok/s", ""),
    ]
    if math.isfinite(est.cost.usd_per_million_tokens):
        low_high = (
            f"{fmt.usd(est.cost_interval[0])} to {fmt.usd(est.cost_interval[1])}" if est.cost_interval else ""
        )
        rows += [
            ("$ per million output tokens", fmt.usd(est.cost.usd_per_million_tokens), low_high),
            ("$ per hour", fmt.usd(est.cost.usd_per_hour), f"{est.priced_gpus} GPUs"),
        ]
    return [{"figure": a, "value": b, "interval or note": c} for a, b, c in rows]


def launch_text(est: Estimate) -> str:
    """The launch commands as the report's text (the page's expander), or why there is none."""
    if est.launch is None:
        return "" if est.inputs.engine not in ("vllm", "sglang") else f"No launch command: {est.fit.sentence}"
    return f"Launch it. {est.launch.note}\n\n`{est.launch.vllm}`\n\n`{est.launch.sglang}`"


def export_parts(a: CalcAnswer) -> list:
    from ui import export

    est = a.est
    return [
        export.Heading(header(a)),
        export.Text(est.fit.sentence),
        export.Table(headline_rows(est), "the answer"),
        *([export.Text(launch_text(est))] if launch_text(est) else []),
        export.Text("\n".join(f"- {line}" for line in why(a))),
        *(export.Text(f"Assumption: {w}") for w in est.warnings),
        export.Table(breakdown_frame(est), "parameters and bytes per component"),
        export.Figure(
            serving_bar(est.serving) if est.serving else memory_bar(est.memory, cpu=is_cpu(a.request.gpu))
        ),
        export.Figure(
            batch_curve(a.sweep, a.sweep_max_batch, priced=math.isfinite(est.cost.usd_per_million_tokens)),
            "cost and latency against batch size",
        ),
    ]
