"""The calculator in one call: memory, fit, timing, cost and paging for one set of inputs.

The CLI (`python -m engine estimate`) and the Memory & cost page both call `estimate`, so they show the
same numbers. Every field is in base units (bytes, seconds, dollars).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.calc import quant
from engine.calc.cost import CostEstimate, estimate_cost
from engine.calc.memory import (
    DEFAULT_OVERHEAD,
    WEIGHT_FORMATS,
    GpuPlan,
    MaxSeqLen,
    MemoryEstimate,
    bytes_per_weight,
    estimate_memory,
    kv_budget_bytes,
    max_batch,
    max_seq_len,
    param_count,
    plan_gpus,
    quant_format_name,
    weight_storage_note,
)
from engine.calc.paged import PagedComparison, compare_paged
from engine.calc.specs import GPUSpec, ModelSpec, ParamCount, check_precision, positive_int
from engine.calc.timing import DATASHEET, Efficiency, TimingEstimate, estimate_timing
from engine.core.errors import InvalidParameterError


@dataclass(frozen=True)
class Inputs:
    """Everything the calculator is asked; one source of defaults for the CLI and the page."""

    dtype: str = "fp16"
    kv_dtype: str | None = None  # None: same as dtype, but fp16 for weight-only int8/int4
    batch: int = 8  # the chapter's T4 question: 8 users at 512 + 512 tokens
    seq_len: int | None = None  # tokens the cache is sized for; None: prompt + output
    prompt_tokens: int = 512
    output_tokens: int = 512
    overhead: float = DEFAULT_OVERHEAD
    n_gpus: int = 1
    usd_per_gpu_hour: float | None = None  # None: no cost figures (prices are the user's)
    weight_format: str | None = (
        None  # int8 / int4 (torchao layouts) or a GGUF block format; None: plain dtype
    )
    group_size: int | None = None  # weights per scale for int8/int4; None: per channel (int8), 128 (int4)

    def resolved(self) -> Inputs:
        """Validate and fill seq_len; prompt + output must fit in seq_len."""
        dtype = check_precision("weight precision", self.dtype)
        # int8/int4 are weight-only: the cache stays 16-bit unless a KV precision is asked for
        kv = check_precision(
            "KV precision", self.kv_dtype or ("fp16" if dtype in ("int8", "int4") else dtype)
        )
        p = positive_int("prompt tokens", self.prompt_tokens)
        o = positive_int("output tokens", self.output_tokens)
        s = positive_int("sequence length", self.seq_len) if self.seq_len is not None else p + o
        if p + o > s:
            raise InvalidParameterError(
                f"prompt ({p}) + output ({o}) tokens exceed the sequence length {s}; raise the sequence length "
                "or shorten the prompt or output"
            )
        positive_int("batch", self.batch)
        positive_int("GPUs", self.n_gpus)
        fmt = self.weight_format or None
        if fmt is not None:
            if fmt not in WEIGHT_FORMATS:
                raise InvalidParameterError(
                    f"unknown weight format {fmt!r}; choose one of {', '.join(WEIGHT_FORMATS)}"
                )
            if self.group_size is not None:
                positive_int("group size", self.group_size)
            dtype = "int8" if quant.get(quant_format_name(fmt, self.group_size)[0]).bits > 4 else "int4"
            kv = check_precision(
                "KV precision", self.kv_dtype or "fp16"
            )  # weight-only: the cache stays 16-bit
        return Inputs(
            dtype,
            kv,
            self.batch,
            s,
            p,
            o,
            self.overhead,
            self.n_gpus,
            self.usd_per_gpu_hour,
            fmt,
            self.group_size if fmt in ("int8", "int4") else None,
        )

    @property
    def weights_label(self) -> str:
        """The weight precision as the user chose it: a format name (with its group size) or the dtype."""
        if self.weight_format in ("int8", "int4"):
            g = quant_format_name(self.weight_format, self.group_size)[1]
            return f"{self.weight_format} ({'g' + str(g) if g else 'per channel'})"
        return self.weight_format or self.dtype


def default_precision(gpu: GPUSpec) -> str:
    """The weight precision to start from on `gpu`: fp16 where it has an fp16 peak (a GPU), else fp32 (a CPU,
    where fp16 runs through slow reference kernels and the engine loads fp32 by default)."""
    return "fp16" if "fp16" in gpu.peak_flops else "fp32"


@dataclass(frozen=True)
class Estimate:
    model: str
    gpu: str
    inputs: Inputs
    memory: MemoryEstimate
    max_batch: int
    max_seq_len: MaxSeqLen
    gpus_needed: int
    timing: TimingEstimate
    cost: CostEstimate  # at the GPUs asked for, as if the load fitted
    paged: PagedComparison | None  # None when the weights alone leave no room for a cache
    params: ParamCount  # per component; source "meta device" or "formula"
    plan: GpuPlan  # the GPUs the load needs, and how they would be used
    cost_at_plan: CostEstimate | None  # priced at plan.gpus when the load does not fit on the GPUs asked for
    warnings: tuple[str, ...]  # every assumption a figure rests on

    @property
    def fits(self) -> bool:
        return self.memory.fits


def split_prompt_output(
    seq_len: int, prompt_tokens: int | None, output_tokens: int | None
) -> tuple[int, int]:
    """Defaults when only a sequence length is given: half prompt, half output; one given, the other fills s."""
    s = positive_int("sequence length", seq_len)
    if prompt_tokens is None and output_tokens is None:
        return max(1, s // 2), max(1, s - s // 2)
    if prompt_tokens is None:
        return max(1, s - int(output_tokens or 0)), int(output_tokens or 0)
    if output_tokens is None:
        return int(prompt_tokens), max(1, s - int(prompt_tokens))
    return int(prompt_tokens), int(output_tokens)


def _weights(spec: ModelSpec, i: Inputs) -> dict:
    return {"weight_format": i.weight_format, "group_size": i.group_size}


def estimate(spec: ModelSpec, gpu: GPUSpec, inputs: Inputs, eff: Efficiency = DATASHEET) -> Estimate:
    """Memory (weights + KV + overhead), fit, max batch at s, max s at batch, the GPU plan, timing and cost
    (priced at the planned GPUs when the load does not fit), and the assumptions behind them."""
    i = inputs.resolved()
    assert i.seq_len is not None and i.kv_dtype is not None
    wf = _weights(spec, i)
    mem = estimate_memory(
        spec,
        dtype=i.dtype,
        kv_dtype=i.kv_dtype,
        batch=i.batch,
        seq_len=i.seq_len,
        gpu_memory_bytes=gpu.memory_bytes,
        overhead=i.overhead,
        n_gpus=i.n_gpus,
        **wf,
    )
    common = dict(
        dtype=i.dtype,
        kv_dtype=i.kv_dtype,
        gpu_memory_bytes=gpu.memory_bytes,
        overhead=i.overhead,
        n_gpus=i.n_gpus,
        **wf,
    )
    mb = max_batch(spec, seq_len=i.seq_len, **common)
    ms = max_seq_len(spec, batch=i.batch, **common)
    wpp = bytes_per_weight(spec, i.dtype, **wf) if i.weight_format else None
    timing = _timing(spec, gpu, i, eff, i.n_gpus, i.batch, wpp)
    cost = (
        estimate_cost(timing.tokens_per_s, i.usd_per_gpu_hour, i.n_gpus)
        if i.usd_per_gpu_hour is not None
        else CostEstimate(math.nan, math.nan, timing.tokens_per_s * 3600.0)
    )
    budget = kv_budget_bytes(spec, i.dtype, gpu.memory_bytes, i.overhead, i.n_gpus, **wf)
    paged = (
        compare_paged(
            spec,
            kv_dtype=i.kv_dtype,
            prompt_tokens=i.prompt_tokens,
            max_output_tokens=i.output_tokens,
            kv_budget_bytes=budget,
        )
        if budget > 0
        else None
    )
    plan = plan_gpus(
        spec,
        dtype=i.dtype,
        kv_dtype=i.kv_dtype,
        batch=i.batch,
        seq_len=i.seq_len,
        gpu_memory_bytes=gpu.memory_bytes,
        overhead=i.overhead,
        **wf,
    )
    cost_at_plan = None
    timeable = plan.tensor_parallel == 1 or gpu.interconnect_bytes_per_s > 0  # TP needs a known interconnect
    if not mem.fits and not plan.pipeline_needed and i.usd_per_gpu_hour is not None and timeable:
        t_rep = _timing(spec, gpu, i, eff, plan.tensor_parallel, plan.batch_per_replica, wpp)
        cost_at_plan = estimate_cost(t_rep.tokens_per_s * plan.replicas, i.usd_per_gpu_hour, plan.gpus)
    return Estimate(
        model=spec.name,
        gpu=gpu.name,
        inputs=i,
        memory=mem,
        max_batch=mb,
        max_seq_len=ms,
        gpus_needed=plan.gpus,
        timing=timing,
        cost=cost,
        paged=paged,
        params=param_count(spec),
        plan=plan,
        cost_at_plan=cost_at_plan,
        warnings=tuple(warnings_for(spec, gpu, i, timing)),
    )


def _timing(
    spec: ModelSpec, gpu: GPUSpec, i: Inputs, eff: Efficiency, n_gpus: int, batch: int, wpp
) -> TimingEstimate:
    assert i.kv_dtype is not None
    return estimate_timing(
        spec,
        gpu,
        dtype=i.dtype,
        kv_dtype=i.kv_dtype,
        batch=batch,
        prompt_tokens=i.prompt_tokens,
        output_tokens=i.output_tokens,
        n_gpus=n_gpus,
        eff=eff,
        weight_bytes_per_param=wpp,
    )


TP_DOMINATES = 0.5  # all-reduces above half of a step: tensor parallel costs more than it saves


def warnings_for(spec: ModelSpec, gpu: GPUSpec, i: Inputs, timing: TimingEstimate) -> list[str]:
    """Every assumption behind the figures, in words: the spec's own, the count's source, the weight format,
    and tensor-parallel communication that dominates a step."""
    out = list(spec.assumptions)
    pc = param_count(spec)
    if pc.source == "formula" and spec.source == "config.json":
        t = spec.traits
        out.append(
            "parameters from the formula (the model class could not be built here): "
            f"{'gated' if t.gated_mlp else 'plain'} MLP, {'parallel' if t.parallel_attn else 'sequential'} "
            f"attention and MLP, biases q/k/v {'yes' if t.qkv_bias else 'no'}, output {'yes' if t.out_bias else 'no'}, "
            f"MLP {'yes' if t.mlp_bias else 'no'}, head {'tied' if spec.tied_embeddings else 'untied'}"
        )
    if i.weight_format:
        out.append(weight_storage_note(i.weight_format, i.group_size))
    if spec.is_moe:
        out.append(
            f"mixture of experts: memory holds all {pc.total:,} parameters; a decode step reads the experts its "
            f"{i.batch} sequence(s) visit, assuming uniform routing ({spec.experts_per_token} of {spec.n_experts} "
            "per token)"
        )
    if i.n_gpus > 1:
        out.append(
            f"tensor parallel over {i.n_gpus} GPUs: all-reduce time counts bandwidth only (ring, "
            f"{gpu.interconnect or 'interconnect'}); each of the {2 * spec.n_layer} all-reduces per step also pays a "
            "fixed launch and sync latency, which decode's small messages feel most"
        )
    for phase, pt in (("prefill", timing.prefill), ("decode", timing.decode_step)):
        if pt.comm_share > TP_DOMINATES:
            out.append(
                f"tensor-parallel all-reduces take {pt.comm_share:.0%} of each {phase} step over {gpu.interconnect}: "
                f"communication dominates; fewer GPUs per replica (or replicas) would be faster"
            )
    return out


@dataclass(frozen=True)
class BatchPoint:
    batch: int
    fits: bool
    tokens_per_s: float
    decode_s_per_token: float
    generation_s: float
    usd_per_million_tokens: float  # at the GPUs asked for


def batch_sweep(
    spec: ModelSpec, gpu: GPUSpec, inputs: Inputs, eff: Efficiency = DATASHEET, max_batch_: int = 4096
) -> list[BatchPoint]:
    """Latency and $/M tokens at batch 1, 2, 4, ... up to `max_batch_` and a little past the fit limit, with
    every other input as given: the curve behind "batching lowers the cost until memory runs out"."""
    from dataclasses import replace

    i = inputs.resolved()
    points = []
    b = 1
    while b <= max_batch_:
        est = estimate(spec, gpu, replace(i, batch=b), eff)
        points.append(
            BatchPoint(
                b,
                est.fits,
                est.timing.tokens_per_s,
                est.timing.decode_s_per_token,
                est.timing.generation_s,
                est.cost.usd_per_million_tokens,
            )
        )
        if not est.fits and len([p for p in points if not p.fits]) >= 2:
            break
        b *= 2
    return points


def reasoning(est: Estimate, spec: ModelSpec, gpu: GPUSpec, eff: Efficiency = DATASHEET) -> list[str]:
    """The estimate's reasoning as Markdown bullets, each sentence built from the numbers beside it."""
    from engine.calc import format as fmt

    m, t, i = est.memory, est.timing, est.inputs
    kv_elem = (
        m.kv_bytes_per_token / (2 * spec.kv_layers * spec.n_kv_head * spec.head_dim) if spec.kv_layers else 0
    )
    layers = (
        f"{spec.kv_layers} attention layers" if spec.kv_layers != spec.n_layer else f"{spec.n_layer} layers"
    )
    n = i.n_gpus
    lines = [
        f"**Weights** = {m.params:,} parameters ({est.params.source}) × {m.weights_bytes / m.params:.4g} B "
        f"({i.weights_label}) = **{fmt.gb(m.weights_bytes)}**.",
        f"**KV cache** = 2 × {layers} × {spec.n_kv_head} KV heads × {spec.head_dim} head dim × {kv_elem:g} B = "
        f"{m.kv_bytes_per_token:,.0f} B per token ({i.kv_dtype}); × {i.batch} users × {i.seq_len:,} tokens = "
        f"**{fmt.gb(m.kv_cache_bytes)}**"
        + (
            f" (capped at the {spec.sliding_window}-token window the model evicts beyond)"
            if spec.window_evicts
            else ""
        )
        + ".",
        f"**Overhead** {i.overhead:.0%} of both = {fmt.gb(m.overhead_bytes)}; total {fmt.gb(m.total_bytes)} / {n} GPU(s)"
        f" = {fmt.gb(m.per_gpu_bytes)} against {fmt.gb(m.gpu_memory_bytes)}.",
        f"**Decode**: each step reads {fmt.gb(t.decode_step.weights_bytes)} of weights + {fmt.gb(t.decode_step.kv_bytes)} "
        f"of KV cache at {fmt.gb(gpu.bandwidth_bytes_per_s * n * eff.bandwidth)}/s → {fmt.seconds(t.decode_s_per_token)} "
        f"per step, for all {i.batch} users at once: {t.decode_step.bound}-bound.",
        f"**Prefill**: {fmt.flops(t.prefill.flops)} at {fmt.flops(gpu.flops_for(i.dtype) * n * eff.flops, 'FLOP/s')} → "
        f"{fmt.seconds(t.prefill_s)}: {t.prefill.bound}-bound.",
    ]
    if spec.is_moe:
        lines.append(
            f"**Experts**: memory holds all {est.params.total:,} parameters; a token uses {est.params.active:,} "
            f"({spec.experts_per_token} of {spec.n_experts} experts + the router), which is what decode streams at batch 1."
        )
    if n > 1:
        lines.append(
            f"**Tensor parallel** over {gpu.interconnect or 'the interconnect'} "
            f"({fmt.gb(gpu.interconnect_bytes_per_s)}/s each way): 2 all-reduces per layer cost "
            f"{fmt.seconds(t.prefill.comm_s)} of prefill ({t.prefill.comm_share:.0%}) and "
            f"{fmt.seconds(t.decode_step.comm_s)} per decode step ({t.decode_step.comm_share:.0%})."
        )
    if i.usd_per_gpu_hour is not None and math.isfinite(est.cost.usd_per_million_tokens):
        lines.append(
            f"**Cost**: ${i.usd_per_gpu_hour:g}/GPU-hour × {n} = {fmt.usd(est.cost.usd_per_hour)}/hour ÷ "
            f"({t.tokens_per_s:,.0f} tok/s × 3600) × 10⁶ = **{fmt.usd(est.cost.usd_per_million_tokens)} per million "
            "output tokens**" + ("" if est.fits else " if it fitted") + "."
        )
    return lines
