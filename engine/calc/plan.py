"""One memory answer per plan: the engine chosen decides how memory is counted, and that one model answers
every memory question of the plan.

- A serving engine (vLLM, SGLang): memory is what the server allocates (engine.calc.serving_memory): the
  budget it keeps of each GPU, the weights, its profile run and runtime, and a KV cache of so many tokens.
  A layout starts when that cache holds one request of --max-model-len (vLLM V1 refuses to start otherwise:
  vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory) and holds the sequences its blocks and
  --max-num-seqs allow at once.
- Transformers (or no engine): the chapter's overhead model (engine.calc.memory): (weights + KV) x (1 +
  overhead) split over the GPUs of a tensor-parallel group.

Either way the same model gives the fit on the GPUs asked, the largest batch and sequence, the KV budget, and
the GPUs needed: the fewest that hold the load, laid out as the engine would (tensor parallel within a node of
8, whose size divides the heads; pipeline stages past it, as vLLM's distributed-serving guide lays a plan out;
replicas for the rest of the batch). The layout the answer settles on (the GPUs asked when the load fits, else
the GPUs needed) is the one the estimate times, prices and launches. Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from engine.calc import format as fmt
from engine.calc.launch import GPUS_PER_NODE
from engine.calc.memory import (
    GpuPlan,
    MaxSeqLen,
    MemoryEstimate,
    Placement,
    best_layout,
    estimate_memory,
    gpus_needed,
    head_divisors,
    kv_budget_bytes,
    kv_bytes_per_token,
    max_seq_len,
    sequences_held,
)
from engine.calc.serving_memory import SERVING_ENGINES, ServingMemory, is_cpu, serving_memory_of
from engine.calc.specs import THIS_MACHINE, ModelSpec
from engine.calc.timing import Setup
from engine.core.errors import InvalidParameterError

MAX_STAGES = 32  # pipeline stages tried (nodes of 8 past one node): 256 GPUs


@dataclass(frozen=True)
class Server:
    """The serving engine's own memory options (None: the engine's default rule)."""

    engine: str  # "vllm" | "sglang"
    gpu_memory_utilization: float | None
    max_model_len: int
    max_num_seqs: int | None
    cpu_kv_space_bytes: int | None = (
        None  # vLLM on this machine's CPU: VLLM_CPU_KVCACHE_SPACE (None: its default)
    )


@dataclass(frozen=True)
class MemoryAnswer:
    """Every memory figure of one plan, from one memory model."""

    model: str  # "vllm" | "sglang" | "overhead"
    asked: GpuPlan  # the GPUs asked, laid out as the engine would run them
    fits: bool  # the asked layout starts and holds the whole batch at once
    refusal: str  # why the asked layout cannot hold it ("" when it fits)
    max_batch: int  # sequences of seq_len the asked layout holds at once
    max_seq_len: MaxSeqLen  # tokens per sequence at the batch asked, on the asked layout
    kv_budget_bytes: float  # bytes the cache gets on the asked layout (all its GPUs)
    kv_cache_tokens: int | None  # serving engines: the cache in tokens, as the server prints it
    plan: GpuPlan  # the fewest GPUs that hold the load
    overhead: MemoryEstimate  # the overhead model's figures: the answer for transformers, else a comparison
    serving: ServingMemory | None  # serving engines: the asked layout's allocation
    sentence: str  # "GPUs needed" in one sentence, with the numbers

    @property
    def gpus_needed(self) -> int:
        return self.plan.gpus

    @property
    def layout(self) -> GpuPlan | None:
        """What is timed, priced and launched: the GPUs asked when the load fits there, else the GPUs needed;
        None when no layout holds even one sequence."""
        if self.fits:
            return self.asked
        return None if self.plan.pipeline_needed else self.plan


def setup_for(setup: Setup, layout: GpuPlan) -> Setup:
    """The setup one replica of `layout` runs: its tensor-parallel group and its share of the batch. Pipeline
    stages run one after another, so a step costs what the whole model costs on one stage's GPUs plus the
    hand-overs between stages (engine.calc.timing)."""
    from dataclasses import replace

    return replace(
        setup,
        n_gpus=max(1, layout.tensor_parallel),
        pipeline=max(1, layout.pipeline_parallel),
        batch=layout.batch_per_replica,
    )


def memory_answer(setup: Setup, *, overhead: float, seq_len: int, server: Server | None) -> MemoryAnswer:
    """The memory answer for `setup` (its n_gpus are the GPUs asked): the serving engine's allocation when
    `server` is given, else the overhead model."""
    place = Placement(
        setup.spec,
        setup.dtype,
        setup.gpu.memory_bytes,
        setup.kv_dtype,
        overhead,
        setup.n_gpus,
        setup.weight_format,
        setup.group_size,
        setup.scope,
    )
    mem = estimate_memory(place, batch=setup.batch, seq_len=seq_len)
    if server is not None and server.engine in SERVING_ENGINES:
        return _serving_answer(setup, place, mem, seq_len, server)
    return _overhead_answer(setup, place, mem, seq_len)


# ---------------------------------------------------------------- the overhead model (transformers)


def _overhead_answer(setup: Setup, place: Placement, mem: MemoryEstimate, seq_len: int) -> MemoryAnswer:
    spec, n, batch = setup.spec, setup.n_gpus, setup.batch
    plan = _overhead_plan(place, batch=batch, seq_len=seq_len)
    splits = spec.n_head % n == 0
    held = sequences_held(place, n, seq_len=seq_len) if splits else 0
    fits = splits and mem.fits
    refusal = ""
    if not splits:
        refusal = f"tensor parallel over {n} GPUs cannot split the {spec.n_head} attention heads evenly"
    elif not fits:
        refusal = f"needs {fmt.gb(mem.per_gpu_bytes)} per GPU, has {fmt.gb(mem.gpu_memory_bytes)}"
    asked = GpuPlan(mem_gpus(mem), n, 1, batch, n, False)
    sentence = _overhead_sentence(spec, mem, plan, fits, refusal, cpu=setup.gpu.key == THIS_MACHINE)
    return MemoryAnswer(
        model="overhead",
        asked=asked,
        fits=fits,
        refusal=refusal,
        max_batch=held,
        max_seq_len=max_seq_len(place, batch=batch) if splits else MaxSeqLen(0, "memory"),
        kv_budget_bytes=max(0.0, kv_budget_bytes(place)),
        kv_cache_tokens=None,
        plan=plan,
        overhead=mem,
        serving=None,
        sentence=sentence,
    )


def mem_gpus(mem: MemoryEstimate) -> int:
    return gpus_needed(mem.total_bytes, mem.gpu_memory_bytes)


def _overhead_plan(place: Placement, *, batch: int, seq_len: int) -> GpuPlan:
    from engine.calc.memory import plan_gpus

    return plan_gpus(place, batch=batch, seq_len=seq_len)


def _overhead_sentence(
    spec: ModelSpec, m: MemoryEstimate, plan: GpuPlan, fits: bool, refusal: str, *, cpu: bool = False
) -> str:
    load = (
        f"Weights {fmt.gb(m.weights_bytes)} + this load's KV cache {fmt.gb(m.kv_cache_bytes)}, plus "
        f"{m.overhead_bytes / max(m.weights_bytes + m.kv_cache_bytes, 1):.0%} overhead, make "
        f"{fmt.gb(m.total_bytes)}"
    )
    where = (
        f"this machine's {fmt.gb(m.gpu_memory_bytes)} of memory"
        if cpu
        else f"{m.n_gpus} GPUs of {fmt.gb(m.gpu_memory_bytes)} each"
        if m.n_gpus > 1
        else f"one GPU of {fmt.gb(m.gpu_memory_bytes)}"
    )
    here = f"{'fits' if fits else 'does not fit'} in {where}" + (f" ({refusal})" if refusal else "")
    if cpu:  # one machine: no GPUs to add, no layout to plan
        return f"{load}: it {here}."
    other = (
        ""
        if fits
        else " This is the chapter's overhead rule, taken for an engine whose own allocation is not modelled here; "
        "vLLM and SGLang are counted as they allocate (weights, a profile run, then a KV pool of what is left), so "
        "on the same GPUs they can fit where this does not."
    )  # the engineer's walk: a 72B model on 2 x H100 'fits' with vLLM, 'does not fit' with TensorRT-LLM, unsaid
    return f"{load}: it {here}; GPUs needed: {plan.gpus}. {plan.sentence(spec.n_head)}{other}"


# ---------------------------------------------------------------- a serving engine's allocation


def tensor_sizes(spec: ModelSpec) -> list[int]:
    """Tensor-parallel sizes a serving engine accepts within a node: they divide the attention heads
    ("Total number of attention heads (9) must be divisible by tensor parallel size (2)") and either divide the
    KV heads or are a multiple of them (vLLM replicates a KV head past the KV-head count)."""
    kv = max(1, spec.n_kv_head)
    return [t for t in head_divisors(spec) if t <= GPUS_PER_NODE and (kv % t == 0 or t % kv == 0)]


def serving_layouts(
    spec: ModelSpec, *, asked: tuple[int, int] | None = None
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The (tensor, pipeline) layouts a plan may take, in vLLM's distributed-serving guide's order: "If your model
    is too large to fit in a single GPU, but it can fit in a single node with multiple GPUs, you can use tensor
    parallelism"; only "if your model is too large to fit in a single node", tensor parallel over the node
    together with pipeline stages across nodes. Pipeline stages within a node would hold a model on fewer GPUs
    (3 stages of a 70B where tensor parallel needs 4) but run each token through every stage in turn, so they
    are tried only as the layout asked (`asked`, tensor x pipeline), which a plan that fits keeps."""
    sizes = tensor_sizes(spec)
    widest = max(sizes)
    within = [(t, 1) for t in sizes] + ([asked] if asked and asked[1] > 1 else [])
    return within, [(widest, s) for s in range(2, min(spec.n_layer, MAX_STAGES) + 1)]


def asked_layout(spec: ModelSpec, n_gpus: int) -> tuple[int, int]:
    """The GPUs asked as (tensor, pipeline): the widest tensor-parallel size that divides the count, the rest
    as pipeline stages (vLLM's guide: tensor parallel within a node, pipeline parallel across nodes)."""
    tp = max(t for t in tensor_sizes(spec) if n_gpus % t == 0)
    return tp, n_gpus // tp


def served_layout(spec: ModelSpec, n_gpus: int) -> tuple[int, int]:
    """`asked_layout`, refused in one sentence when it would need more stages than the model has layers (a stage
    holds at least one): the estimate and the simulator take the same counts."""
    tp, pp = asked_layout(spec, n_gpus)
    if pp > spec.n_layer:
        most = max(tensor_sizes(spec)) * spec.n_layer
        raise InvalidParameterError(
            f"{n_gpus:,} GPUs would run as {tp}-way tensor parallel x {pp} pipeline stages, more stages than "
            f"the model's {spec.n_layer} layers: one copy of it spreads over at most {most:,} GPUs; serve more "
            "users with replicas (fewer GPUs each)"
        )
    return tp, pp


def allocation(setup: Setup, server: Server, tp: int, pp: int) -> ServingMemory:
    """The serving engine's memory on one replica of `tp` x `pp` GPUs (engine.calc.serving_memory)."""
    from dataclasses import replace

    return serving_memory_of(
        replace(setup, n_gpus=tp, pipeline=pp),
        server.engine,
        gpu_memory_utilization=server.gpu_memory_utilization,
        max_model_len=server.max_model_len,
        max_num_seqs=server.max_num_seqs,
        cpu_kv_space_bytes=server.cpu_kv_space_bytes,
    )


def _held(sm: ServingMemory, seq_len: int) -> int:
    """Sequences of seq_len the cache holds at once: whole blocks per sequence, capped by --max-num-seqs; 0 when
    the server would not start (its cache is smaller than one request of max_model_len)."""
    held = held_at(sm, seq_len)
    return min(held, sm.max_num_seqs) if sm.max_num_seqs else held


def held_at(sm: ServingMemory, seq_len: int) -> int:
    """Sequences of seq_len the cache's blocks hold at once, before --max-num-seqs caps them (0: it would not
    start)."""
    if sm.kv_cache_tokens < sm.max_model_len or sm.kv_cache_tokens <= 0:
        return 0
    return sm.blocks // math.ceil(seq_len / sm.block_size)


def _serving_answer(
    setup: Setup, place: Placement, mem: MemoryEstimate, seq_len: int, server: Server
) -> MemoryAnswer:
    spec, batch = setup.spec, setup.batch

    def alloc(tp: int, pp: int) -> ServingMemory:
        return allocation(setup, server, tp, pp)

    tp, pp = asked_layout(spec, setup.n_gpus)
    sm = alloc(tp, pp)
    held = _held(sm, seq_len) if pp <= spec.n_layer else 0
    fits = held >= batch
    memory_gpus = max(1, math.ceil((sm.weights_bytes * tp * pp) / max(sm.budget_bytes, 1.0)))
    plan = None
    for layouts in serving_layouts(spec, asked=(tp, pp) if pp <= spec.n_layer else None):
        plan = best_layout(
            lambda t, s: _held(alloc(t, s), seq_len), layouts, batch=batch, memory_gpus=memory_gpus
        )
        if plan is not None:
            break
    if plan is None:  # not even 32 stages of the widest tensor parallel hold one request
        widest = max(tensor_sizes(spec))
        plan = GpuPlan(memory_gpus, 0, 1, batch, widest * MAX_STAGES + 1, True)
    per_token = kv_bytes_per_token(spec, setup.kv_dtype)
    longest = min(spec.context_length, sm.kv_cache_tokens // batch) if sm.kv_cache_tokens > 0 else 0
    refusal = "" if fits else _serving_refusal(server.engine, sm, held, batch, seq_len)
    asked = GpuPlan(memory_gpus, tp, 1, batch, tp * pp, False, pp)
    return MemoryAnswer(
        model=server.engine,
        asked=asked,
        fits=fits,
        refusal=refusal,
        max_batch=held,
        max_seq_len=MaxSeqLen(longest, "context" if longest == spec.context_length else "memory"),
        kv_budget_bytes=max(0, sm.kv_cache_tokens) * per_token,
        kv_cache_tokens=sm.kv_cache_tokens,
        plan=plan,
        overhead=mem,
        serving=sm,
        sentence=_serving_sentence(
            server.engine, sm, asked, plan, held, batch, seq_len, fits, refusal, cpu=is_cpu(setup.gpu)
        )
        + _uneven(spec, asked, server.engine)
        + _other_layout(
            spec, asked, plan, fits, lambda t, s: _held(alloc(t, s), seq_len), batch, memory_gpus
        ),
    )


def _other_layout(
    spec: ModelSpec,
    asked: GpuPlan,
    plan: GpuPlan,
    fits: bool,
    holds: Callable[[int, int], int],
    batch: int,
    memory_gpus: int,
) -> str:
    """The other way to lay the model out within a node, when it takes a different number of GPUs: pipeline
    stages hold a model on fewer GPUs than tensor parallel (a 70B on 3 where tensor parallel needs 4), so the
    GPUs needed depend on which layout is asked; say both."""
    if plan.pipeline_needed or plan.gpus > GPUS_PER_NODE:
        return ""
    if not fits and plan.pipeline_parallel == 1:
        within = [(t, st) for t in tensor_sizes(spec) for st in range(2, GPUS_PER_NODE // t + 1)]
        staged = best_layout(holds, within, batch=batch, memory_gpus=memory_gpus)
        if staged is None or staged.gpus >= plan.gpus:
            return ""
        return (
            f" As pipeline stages, {staged.gpus} GPUs would hold it ({staged.layout()}: ask for {staged.gpus} to "
            "see that plan), each token passing the stages in turn where tensor parallel splits every layer "
            "over the GPUs."
        )
    if fits and asked.pipeline_parallel > 1 and asked.gpus <= GPUS_PER_NODE:
        pure = best_layout(holds, [(t, 1) for t in tensor_sizes(spec)], batch=batch, memory_gpus=memory_gpus)
        if pure is None or pure.gpus <= asked.gpus:
            return ""
        return (
            f" In tensor parallel, the layout vLLM's distributed-serving guide gives a model that fits one node, "
            f"it takes {pure.gpus} GPUs ({pure.describe()})."
        )
    return ""


def _uneven(spec: ModelSpec, asked: GpuPlan, engine: str) -> str:
    """Why the GPUs asked run as pipeline stages within one node: their count does not split the attention heads
    evenly for tensor parallel (engine.calc.plan.tensor_sizes); empty otherwise."""
    if asked.pipeline_parallel <= 1 or asked.gpus > GPUS_PER_NODE:
        return ""
    heads = f"{spec.n_head} attention heads" + (
        f" ({spec.n_kv_head} for keys and values)" if 0 < spec.n_kv_head < spec.n_head else ""
    )
    how = (
        f"{asked.pipeline_parallel} pipeline stages"
        if asked.tensor_parallel == 1
        else f"{asked.tensor_parallel}-way tensor parallel x {asked.pipeline_parallel} pipeline stages"
    )
    return (
        f" {asked.gpus} GPUs cannot split the model's {heads} evenly for tensor parallel, so {engine} runs them "
        f"as {how}: one sequence's step passes through them in turn."
    )


def _serving_refusal(engine: str, sm: ServingMemory, held: int, batch: int, seq_len: int) -> str:
    if sm.kv_bytes <= 0:
        return (
            f"the weights ({fmt.gb(sm.weights_bytes)} per GPU), the profile run and the runtime take all of the "
            f"{fmt.gb(sm.budget_bytes)} {engine} keeps of each GPU"
        )
    if sm.kv_cache_tokens < sm.max_model_len:
        return (
            f"{engine} would not start: its cache holds {sm.kv_cache_tokens:,} tokens, less than one request of "
            f"--max-model-len {sm.max_model_len:,}"
        )
    capped = sm.max_num_seqs and held == sm.max_num_seqs
    return f"it holds {held:,} sequences of {seq_len:,} tokens at once, fewer than the {batch:,} asked" + (
        f"; --max-num-seqs {sm.max_num_seqs} caps it" if capped else ""
    )


def _serving_sentence(
    engine: str,
    sm: ServingMemory,
    asked: GpuPlan,
    plan: GpuPlan,
    held: int,
    batch: int,
    seq_len: int,
    fits: bool,
    refusal: str,
    cpu: bool = False,
) -> str:
    on = f"on {asked.layout()}" if asked.gpus > 1 else "on one GPU" if not cpu else "on this machine's CPU"
    kept = (
        f"The engine ({engine}) keeps {sm.utilization:.0%} of this machine's {fmt.gb(sm.total_bytes)} of RAM "
        f"({fmt.gb(sm.total_bytes * sm.utilization)})"
        if cpu
        # CUDA's total, not the driver's or the datasheet's: the figure the engine budgets from (serving_startup)
        else f"The engine ({engine}) keeps {sm.utilization:.0%} of the {fmt.gb(sm.total_bytes)} CUDA reports on "
        f"each GPU ({fmt.gb(sm.total_bytes * sm.utilization)})"
    )
    capped = bool(sm.max_num_seqs) and held == sm.max_num_seqs
    if sm.kv_bytes > 0:
        each = "" if cpu else " per GPU"
        cache = (
            f"; {on} the weights ({fmt.gb(sm.weights_bytes)}{each}), its "
            + ("runtime" if cpu else _profile_words(sm))  # a CPU worker profiles no forward pass
            + f" leave {fmt.gb(sm.kv_bytes)}{each} for the cache: {sm.kv_cache_tokens:,} tokens, {held:,} sequences of "
            f"{seq_len:,} tokens at once" + (f" (--max-num-seqs {sm.max_num_seqs} caps it)" if capped else "")
        )
        if fits:
            verdict = f", enough for the {batch:,} asked"
        elif held > 0:
            verdict = f", fewer than the {batch:,} asked"
        else:
            verdict = f": {refusal}"
    else:
        cache, verdict = f"; {on} {refusal}", ""
    if cpu:
        need = "" if fits else "It does not fit in this machine's RAM."
    elif plan.pipeline_needed:
        need = f"No layout up to {plan.gpus - 1} GPUs holds one request."
    elif fits and plan.gpus == asked.gpus:
        need = f"GPUs needed: {plan.gpus}."
    elif fits:
        how = " in tensor parallel" if plan.pipeline_parallel == 1 and plan.gpus <= GPUS_PER_NODE else ""
        fewest = f"GPUs needed: {plan.gpus:,} ({plan.describe()}), the fewest{how} that hold the load"
        need = f"{fewest}; the {asked.gpus} asked hold it too."
    else:
        need = f"GPUs needed: {plan.gpus:,} ({plan.describe()})."
        if not fits and plan.replica_gpus != asked.replica_gpus:
            need += (
                f" Each replica is {plan.layout()}, not the {asked.gpus} asked: tensor parallel that splits the "
                "heads evenly within a node of 8, pipeline stages only across nodes (vLLM's distributed-serving "
                "guide), on the fewest GPUs that layout allows."
            )
    return f"{kept}{cache}{verdict}. {need}".rstrip()


def _profile_words(sm: ServingMemory) -> str:
    """The profile run and the runtime with their sizes, and what sets the profile run's: the tokens the engine
    profiles at once, its default for the GPU (vLLM: 8,192 on an H100 or H200, 2,048 on smaller cards and A100s),
    so the same model on GPUs of the same memory can hold different numbers of sequences."""
    if not sm.max_num_batched_tokens:
        return f"profile run ({fmt.gb(sm.activation_bytes)}) and runtime ({fmt.gb(sm.non_torch_bytes)})"
    flag = ", vLLM's default --max-num-batched-tokens on this GPU" if sm.engine == "vllm" else ""
    return (
        f"profile run ({fmt.gb(sm.activation_bytes)}: {sm.max_num_batched_tokens:,} tokens at once{flag}) and "
        f"runtime ({fmt.gb(sm.non_torch_bytes)})"
    )
