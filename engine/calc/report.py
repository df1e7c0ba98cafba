"""The calculator in one call: memory, fit, timing, cost and paging for one set of inputs.

The CLI (`python -m engine estimate`) and the Memory & cost page both call `estimate`, so they show the
same numbers. Every field is in base units (bytes, seconds, dollars).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from engine.calc import quant
from engine.calc.cost import CostEstimate, estimate_cost
from engine.calc.efficiency import ENGINES, Setup, SpeedEstimate, estimate_speed
from engine.calc.efficiency import timing as timing_of
from engine.calc.launch import (
    GPUS_PER_NODE,
    LaunchPlan,
    multi_node_steps,
    sglang_command,
    vllm_command,
    vllm_cpu_command,
)
from engine.calc.memory import (
    DEFAULT_OVERHEAD,
    WEIGHT_FORMATS,
    GpuPlan,
    MaxSeqLen,
    MemoryEstimate,
    Placement,
    estimate_memory,
    format_scope,
    kv_budget_bytes,
    max_batch,
    max_seq_len,
    param_count,
    plan_gpus,
    quant_format_name,
    weight_storage_note,
)
from engine.calc.paged import PagedComparison, compare_paged
from engine.calc.serving_memory import SERVING_ENGINES, ServingMemory, serving_memory_of, sglang_fraction
from engine.calc.specs import (
    PRECISIONS,
    THIS_MACHINE,
    GPUSpec,
    ModelSpec,
    ParamCount,
    check_precision,
    positive_int,
)
from engine.calc.timing import DATASHEET, Efficiency, TimingEstimate
from engine.core.errors import InvalidParameterError
from engine.core.spec import Spec, option

ENGINE_CHOICES = tuple(ENGINES)  # every engine the efficiency fit names (engine.calc.efficiency)


@dataclass(frozen=True)
class Inputs(Spec):
    """Everything the calculator is asked: the one source of defaults and bounds for `python -m engine estimate`
    and the Memory-and-cost page (engine.core.spec)."""

    dtype: str = option("fp16", "weight precision", choices=PRECISIONS)
    kv_dtype: str | None = option(
        None,
        "KV cache precision (default: the weights'; fp16 under a quantized format)",
        kind=str,
        choices=PRECISIONS,
    )
    batch: int = option(8, "concurrent sequences", lo=1, hi=1_000_000)  # the chapter's T4 question: 8 users
    seq_len: int | None = option(
        None, "tokens per sequence the KV cache holds (default: prompt + output)", kind=int, lo=1
    )
    prompt_tokens: int = option(512, "prompt tokens per request", lo=1)
    output_tokens: int = option(512, "output tokens per request", lo=1)
    overhead: float = option(
        DEFAULT_OVERHEAD,
        "fraction added for activations etc. (the chapter's 20%; the hf memory mode)",
        lo=0,
        hi=10,
    )
    n_gpus: int = option(1, "GPUs in tensor parallel", lo=1, hi=1024, flag="--gpus", label="GPUs")
    usd_per_gpu_hour: float | None = option(
        None,
        "price per GPU-hour in USD (default: the GPU's list price in engine/data/prices.toml)",
        kind=float,
        lo=0,
        flag="--usd-per-hour",
        label="price per GPU-hour",
    )
    weight_format: str | None = option(
        None,
        "quantized weights with their scales (int8, int4, fp8, awq, gptq, bnb-nf4, GGUF ...)",
        kind=str,
        choices=WEIGHT_FORMATS,
    )
    group_size: int | None = option(
        None, "weights per scale for int8/int4 (default: per channel / 128)", kind=int, lo=1
    )
    scope: str | None = option(
        None,
        "modules the format covers (default: the format's own)",
        kind=str,
        choices=quant.SCOPES,
        label="module scope",
    )
    engine: str | None = option(
        None,
        "the engine that will serve it: times become estimates with an interval fitted on published runs of "
        "that class of engine, and vllm/sglang size the KV cache as they allocate it (default: the bound)",
        kind=str,
        choices=ENGINE_CHOICES,
    )
    gpu_memory_utilization: float | None = option(
        None,
        "vLLM's --gpu-memory-utilization / SGLang's --mem-fraction-static (default: theirs)",
        kind=float,
        lo=0.01,
        hi=1,
    )
    max_model_len: int | None = option(
        None, "the server's --max-model-len (default: prompt + output)", kind=int, lo=1
    )
    max_num_seqs: int | None = option(None, "the server's --max-num-seqs (default: vLLM's)", kind=int, lo=1)
    cpu_kvcache_space: int | None = option(
        None,
        "vLLM on this machine's CPU: its KV pool in GiB, VLLM_CPU_KVCACHE_SPACE (default: that variable, else "
        "vLLM's own default)",
        kind=int,
        lo=0,
        label="VLLM_CPU_KVCACHE_SPACE",
    )

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
            dtype = quant.weight_format(fmt).compute  # an unknown name is refused with the choices
            if self.group_size is not None:
                positive_int("group size", self.group_size)
            format_scope(fmt, self.scope)
            # weight-only: the cache stays 16-bit
            kv = check_precision("KV precision", self.kv_dtype or "fp16")
        self.validate()
        return replace(
            self,
            dtype=dtype,
            kv_dtype=kv,
            seq_len=s,
            prompt_tokens=p,
            output_tokens=o,
            weight_format=fmt,
            group_size=self.group_size if fmt in ("int8", "int4") else None,
            scope=format_scope(fmt, self.scope) if fmt else None,
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
    speed: SpeedEstimate | None = None  # with an engine: central, interval and bound of every rate and time
    serving: ServingMemory | None = None  # vllm / sglang: memory as the server allocates it
    launch: Launch | None = None  # the commands that serve this plan (serving engines)
    cost_interval: tuple[float, float] | None = None  # $/M output tokens at the throughput interval's ends
    # when the load does not fit: one replica's times at the plan (its tensor parallel and batch per replica),
    # the times `cost_at_plan` is priced from
    timing_at_plan: TimingEstimate | None = None

    @property
    def fits(self) -> bool:
        """Serving engines: the server starts with room for one request of its max model length; otherwise the
        weights, the batch's KV cache and the overhead fit on the GPUs asked for."""
        if self.serving is not None:
            return self.serving.fits
        return self.memory.fits


@dataclass(frozen=True)
class Launch:
    vllm: str
    sglang: str
    multi_node: tuple[str, ...]


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


def estimate(spec: ModelSpec, gpu: GPUSpec, inputs: Inputs, eff: Efficiency = DATASHEET) -> Estimate:
    """Memory (weights + KV + overhead), fit, max batch at s, max s at batch, the GPU plan, timing and cost
    (priced at the planned GPUs when the load does not fit), and the assumptions behind them. With an engine
    on a GPU, every time is that engine class's fitted estimate (engine.calc.efficiency) with its interval and
    the bound; with vllm/sglang the KV cache is sized as the server allocates it (engine.calc.serving_memory)."""
    i = inputs.resolved()
    assert i.seq_len is not None and i.kv_dtype is not None
    setup = Setup(
        spec,
        gpu,
        i.dtype,
        i.weight_format,
        i.group_size,
        i.scope,
        i.kv_dtype,
        i.n_gpus,
        i.batch,
        i.prompt_tokens,
        i.output_tokens,
    )
    speed = serving = launch = None
    if i.engine is not None and gpu.key != THIS_MACHINE and eff == DATASHEET:
        speed = estimate_speed(setup, i.engine)
        eff = speed.fit.efficiency(gpu)
    if i.engine in SERVING_ENGINES:
        serving = serving_memory_of(
            setup,
            i.engine,
            gpu_memory_utilization=i.gpu_memory_utilization,
            max_model_len=i.max_model_len or i.seq_len,
            max_num_seqs=i.max_num_seqs,
            cpu_kv_space_bytes=None if i.cpu_kvcache_space is None else i.cpu_kvcache_space * 2**30,
        )
    place = Placement(
        spec,
        i.dtype,
        gpu.memory_bytes,
        i.kv_dtype,
        i.overhead,
        i.n_gpus,
        i.weight_format,
        i.group_size,
        i.scope,
    )
    mem = estimate_memory(place, batch=i.batch, seq_len=i.seq_len)
    mb = max_batch(place, seq_len=i.seq_len)
    ms = max_seq_len(place, batch=i.batch)
    timing = timing_of(setup, eff)
    cost = (
        estimate_cost(timing.tokens_per_s, i.usd_per_gpu_hour, i.n_gpus)
        if i.usd_per_gpu_hour is not None
        else CostEstimate(math.nan, math.nan, timing.tokens_per_s * 3600.0)
    )
    budget = kv_budget_bytes(place)
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
    plan = plan_gpus(place, batch=i.batch, seq_len=i.seq_len)
    cost_at_plan = t_rep = None
    timeable = plan.tensor_parallel == 1 or gpu.interconnect_bytes_per_s > 0  # TP needs a known interconnect
    if not mem.fits and not plan.pipeline_needed and i.usd_per_gpu_hour is not None and timeable:
        t_rep = timing_of(replace(setup, n_gpus=plan.tensor_parallel, batch=plan.batch_per_replica), eff)
        cost_at_plan = estimate_cost(t_rep.tokens_per_s * plan.replicas, i.usd_per_gpu_hour, plan.gpus)
    cost_interval = None
    if speed is not None and i.usd_per_gpu_hour is not None:
        rate = speed.output_tokens_per_s
        cost_interval = (
            estimate_cost(rate.high, i.usd_per_gpu_hour, i.n_gpus).usd_per_million_tokens,
            estimate_cost(rate.low, i.usd_per_gpu_hour, i.n_gpus).usd_per_million_tokens,
        )
    if serving is not None:  # the server's own cache decides how many sequences and how long
        mb = min(int(serving.kv_cache_tokens // i.seq_len), serving.max_num_seqs or mb)
        longest = min(spec.context_length, serving.kv_cache_tokens // i.batch)
        ms = MaxSeqLen(longest, "context" if longest == spec.context_length else "memory")
        plan_launch = LaunchPlan(
            model=spec.hub_id or spec.name,
            tensor_parallel=min(i.n_gpus, GPUS_PER_NODE),
            pipeline_parallel=max(1, math.ceil(i.n_gpus / GPUS_PER_NODE)),
            max_model_len=serving.max_model_len,
            gpu_memory_utilization=serving.utilization,
            max_num_seqs=max(1, min(serving.max_num_seqs or i.batch, max(i.batch, 1))),
            dtype=inputs.dtype if inputs.dtype in ("fp16", "bf16", "fp32") else "fp16",
            weight_format=i.weight_format,
            kv_dtype=i.kv_dtype,
        )
        launch = Launch(
            vllm_command(plan_launch)
            if serving.device != "cpu"
            else vllm_cpu_command(plan_launch, i.cpu_kvcache_space),
            sglang_command(plan_launch, sglang_fraction(gpu.memory_bytes, i.n_gpus)),
            tuple(multi_node_steps(plan_launch)),
        )
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
        timing_at_plan=t_rep,
        warnings=tuple(warnings_for(spec, gpu, i, timing))
        + (speed.notes if speed else ())
        + (serving.notes if serving else ()),
        speed=speed,
        serving=serving,
        launch=launch,
        cost_interval=cost_interval,
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
        out.append(weight_storage_note(i.weight_format, i.group_size, i.scope))
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
    if est.speed is not None:  # the times below are the engine's central estimate: its fitted efficiency
        eff = est.speed.fit.efficiency(gpu)

    def _share(e: float) -> str:
        return "" if e >= 1 else f" ({e:.0%} of the datasheet's, as fitted for {i.engine})"

    def _parts(phase) -> str:
        """The phase's time as the sum it is: memory-bound and compute-bound operators, fixed cost, all-reduces."""
        named = (
            (phase.memory_s, "memory-bound operators"),
            (phase.compute_s, "compute-bound operators"),
            (phase.overhead_s, "fixed per-step cost"),
            (phase.comm_s, "all-reduces"),
        )
        shown = [f"{fmt.seconds(v)} {what}" for v, what in named if v > 0]
        return " + ".join(shown) + " = " if len(shown) > 1 else ""

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
        f"of KV cache at {fmt.gb(gpu.bandwidth_bytes_per_s * n * eff.bandwidth)}/s{_share(eff.bandwidth)}: "
        f"{_parts(t.decode_step)}{fmt.seconds(t.decode_s_per_token)} per step, for all {i.batch} users at once: "
        f"{t.decode_step.bound}-bound.",
        f"**Prefill**: {fmt.flops(t.prefill.flops)} at {fmt.flops(gpu.flops_for(i.dtype) * n * eff.flops, 'FLOP/s')}"
        f"{_share(eff.flops)}: {_parts(t.prefill)}{fmt.seconds(t.prefill_s)}: {t.prefill.bound}-bound.",
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
