"""Time: prefill, decode per token, generation, TTFT, throughput, and the bound of each phase.

The chapter's rules: a decode step streams every weight plus the KV cache from memory, so
t_decode ~ (weights + KV read per step) / bandwidth; prefill does ~2 x params x prompt tokens FLOPs (plus
attention's score terms), so t_prefill ~ FLOPs / peak. Here each operator of engine.calc.roofline meets its
own roof, t = sum over operators of max(FLOPs / peak, bytes / bandwidth), which reduces to the two rules
when every operator of a phase has the same bound, and is never more optimistic than them.

Datasheet mode uses peak figures. Calibrated mode (engine.calibration) scales bandwidth and FLOP/s by the
efficiencies one real run achieved on this machine and adds the per-layer fixed cost of a step (kernel
dispatch, which dominates small models on a CPU).
Metric definitions are vLLM's: TTFT = request to first token; TPOT excludes the first token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache, partial

from engine.calc import quant
from engine.calc.memory import params_of, weights_bytes
from engine.calc.roofline import Operator, Roof, activation_bytes, operators, roof_for
from engine.calc.specs import THIS_MACHINE, GPUSpec, ModelSpec, positive_float, positive_int
from engine.core.errors import InvalidParameterError


@dataclass(frozen=True)
class Efficiency:
    """What a real run achieves as a fraction of the roofs; 1.0 and 0 s are the datasheet assumption."""

    bandwidth: float = 1.0  # achieved bytes/s / peak bandwidth
    flops: float = 1.0  # achieved FLOP/s / peak FLOP/s
    step_overhead_s_per_layer: float = 0.0  # fixed seconds per layer per forward step
    label: str = "datasheet"
    allreduce_latency_s: float = 0.0  # fixed cost of one tensor-parallel all-reduce (launch, synchronisation)
    decode_flops: float | None = None  # a decode step's compute-bound matmuls (large batches); None: `flops`
    request_fixed_s: float = 0.0  # a request's fixed cost before its first token (tokenize, schedule, HTTP)
    stage_hop_s: float = 0.0  # fixed cost of handing activations to the next pipeline stage (layer split)
    # tokens in a prefill forward at which its compute-bound operators reach half of `flops` (0: no ramp): a short
    # prompt's matrix products are too small to fill the GPU (few output tiles per streaming multiprocessor)
    prefill_half_tokens: float = 0.0


DATASHEET = Efficiency()


def context_refusal(spec: ModelSpec, prompt: int, output: int) -> str:
    """Why a request longer than the model's context is refused, with the numbers to change."""
    return (
        f"prompt + output = {prompt + output:,} tokens exceed {spec.name}'s context of {spec.context_length:,}; "
        "shorten them"
    )


def ramped(eff: Efficiency, tokens: int) -> Efficiency:
    """The utilisation a prefill of `tokens` tokens in one forward reaches: flops x T / (T + T_half)."""
    if eff.prefill_half_tokens <= 0:
        return eff
    return replace(eff, flops=ramped_flops(eff, tokens))


def ramped_flops(eff: Efficiency, tokens: int) -> float:
    """`ramped(eff, tokens).flops`, without building an Efficiency (the fit asks it 10^5 times)."""
    if eff.prefill_half_tokens <= 0:
        return eff.flops
    return eff.flops * tokens / (tokens + eff.prefill_half_tokens)


@dataclass(frozen=True)
class PhaseTime:
    seconds: float
    memory_s: float  # time of the operators that are memory-bound
    compute_s: float  # time of the operators that are compute-bound
    overhead_s: float  # fixed per-step cost (calibrated mode only)
    flops: float
    bytes: float
    weights_bytes: float  # weight bytes read in the phase
    kv_bytes: float  # KV bytes read (attention) and written (K/V projections)
    comm_s: float = 0.0  # tensor-parallel all-reduces over the interconnect (included in `seconds`)

    @property
    def comm_share(self) -> float:
        """Share of the phase spent in tensor-parallel all-reduces."""
        return self.comm_s / self.seconds if self.seconds else 0.0

    @property
    def bound(self) -> str:
        """The bound of the phase: memory when its memory-bound operators take longer than its compute-bound ones."""
        return "memory" if self.memory_s >= self.compute_s else "compute"


def allreduce_s(message_bytes: float, n_gpus: int, link_bytes_per_s: float, latency_s: float = 0.0) -> float:
    """t = latency + 2 (n - 1) / n x message / link bandwidth (one direction): a ring all-reduce sends and
    receives 2 (n - 1) / n of the message per GPU (Patarasuk and Yuan 2009; NCCL's "bus bandwidth"), after a
    fixed cost per call (nccl-tests' time at its smallest messages). 0 on one GPU."""
    if n_gpus <= 1:
        return 0.0
    return latency_s + (
        2 * (n_gpus - 1) / n_gpus * message_bytes / positive_float("interconnect bandwidth", link_bytes_per_s)
    )


def tp_comm_s(
    spec: ModelSpec,
    *,
    batch: int,
    tokens: int,
    act_bytes: float,
    n_gpus: int,
    link_bytes_per_s: float,
    latency_s: float = 0.0,
) -> float:
    """Tensor-parallel communication of one forward = 2 all-reduces per layer (after attention's output
    projection and after the MLP, Megatron-LM) x L x allreduce_s(b x tokens x h x bytes, latency)."""
    if n_gpus <= 1:
        return 0.0
    message = batch * tokens * spec.hidden * act_bytes
    return 2 * spec.n_layer * allreduce_s(message, n_gpus, link_bytes_per_s, latency_s)


def phase_time(
    ops: Sequence[Operator],
    roof: Roof,
    n_layer: int,
    eff: Efficiency = DATASHEET,
    comm_s: float = 0.0,
    *,
    flops_share: float | None = None,
) -> PhaseTime:
    """t = sum over operators of count x max(FLOPs / (peak x e_flops), bytes / (BW x e_bw)) + L x overhead per
    layer + tensor-parallel all-reduces (not overlapped with compute: a conservative bound). An operator is
    memory-bound when its bytes take longer than its FLOPs (intensity below the derated ridge). `flops_share`,
    where given, replaces eff.flops (a ramped prefill's or a decode step's compute utilisation)."""
    peak = roof.peak_flops_per_s * (eff.flops if flops_share is None else flops_share)
    bw = roof.bandwidth_bytes_per_s * eff.bandwidth
    mem = comp = flops = nbytes = weights = kv = 0.0
    # the fit evaluates this 10^5 times: plain arithmetic, no objects and no hashing per operator
    for op in ops:
        n = op.count
        tf, tb = op.flops / peak, op.bytes / bw
        if tb > tf:
            mem += tb * n
        else:
            comp += tf * n
        flops += op.flops * n
        nbytes += op.bytes * n
        weights += op.weight_bytes * n
        kv += op.kv_bytes * n
    overhead = n_layer * eff.step_overhead_s_per_layer
    return PhaseTime(
        seconds=mem + comp + overhead + comm_s,
        memory_s=mem,
        compute_s=comp,
        overhead_s=overhead,
        flops=flops,
        bytes=nbytes,
        weights_bytes=weights,
        kv_bytes=kv,
        comm_s=comm_s,
    )


@dataclass(frozen=True)
class TimingEstimate:
    prefill: PhaseTime  # the prompt, batch b; produces the first token
    decode_step: PhaseTime  # one step at the mean context of the output
    prefill_s: float
    ttft_s: float
    decode_s_per_token: float  # TPOT: time per decode step (each step yields one token per sequence)
    generation_s: float  # prefill + (output - 1) decode steps
    tokens_per_s: float  # batch x output / generation time
    decode_tokens_per_s: float  # batch / decode step
    mode: str


@dataclass(frozen=True)
class TimingInputs:
    """The shape of one timing question, before any efficiency: the operators of a prefill and of a mean decode
    step, the GPUs' combined roof, and the all-reduces of each phase (their byte time and how many)."""

    prefill_ops: tuple[Operator, ...]
    decode_ops: tuple[Operator, ...]
    roof: Roof
    n_layer: int
    batch: int
    output_tokens: int
    prefill_comm_s: float  # all-reduce bytes / link bandwidth, latency excluded
    decode_comm_s: float
    allreduces: int  # per forward (2 x layers with tensor parallel, else 0)
    hops: int = 0  # pipeline-stage boundaries a forward crosses (layer split over GPUs: stages - 1)
    prefill_hop_s: float = 0.0  # activation bytes / link bandwidth, summed over the boundaries
    decode_hop_s: float = 0.0
    prompt_tokens: int = 1  # per sequence: the prefill forward carries batch x prompt tokens


@dataclass(frozen=True)
class Setup:
    """One setup to predict: a model and its stored weights on `n_gpus` GPUs, a batch of prompt + output tokens
    (a published row's, or the calculator's inputs)."""

    spec: ModelSpec
    gpu: GPUSpec
    dtype: str
    weight_format: str | None
    group_size: int | None
    scope: str | None
    kv_dtype: str
    n_gpus: int
    batch: int
    prompt_tokens: int
    output_tokens: int
    pipeline: int = (
        1  # layer split: the model's layers in `pipeline` consecutive stages, one GPU (or TP group) each
    )


def timing_inputs(s: Setup) -> TimingInputs:
    """Validate a timing question and build its operators (engine.calc.roofline) once. A quantized format
    computes in its own precision and streams its effective bytes per parameter (weights / P, with the
    scales: engine.calc.memory)."""
    spec, gpu, kv_dtype = s.spec, s.gpu, s.kv_dtype
    wpp = (
        weights_bytes(spec, s.dtype, s.weight_format, s.group_size, s.scope) / params_of(spec)
        if s.weight_format
        else None
    )
    dtype = quant.weight_format(s.weight_format).compute if s.weight_format else s.dtype
    b = positive_int("batch", s.batch)
    p = positive_int("prompt tokens", s.prompt_tokens)
    o = positive_int("output tokens", s.output_tokens)
    n = positive_int("GPUs", s.n_gpus)
    stages = positive_int("pipeline stages", s.pipeline)
    if p + o > spec.context_length:
        raise InvalidParameterError(context_refusal(spec, p, o))
    base = roof_for(gpu, dtype)
    roof = Roof(base.peak_flops_per_s * n, base.bandwidth_bytes_per_s * n, base.label)
    if (n > 1 or stages > 1) and gpu.interconnect_bytes_per_s <= 0:
        if gpu.key == THIS_MACHINE:
            raise InvalidParameterError(
                f"{spec.name} in {dtype} with this load does not fit in this machine's memory, and this machine is "
                "one device: pick a smaller model, a smaller precision or fewer users, or a GPU from the catalogue"
            )
        raise InvalidParameterError(
            f"{gpu.name} has no interconnect bandwidth in the catalog, so a plan split over more than one of it "
            "cannot be timed (a model too big for one is split over as many as it needs, whatever the count "
            "asked). Pick a catalog GPU, or a model or precision that fits on one"
        )
    act = activation_bytes(dtype)

    def comm(tokens: int) -> float:
        return tp_comm_s(
            spec,
            batch=b,
            tokens=tokens,
            act_bytes=act,
            n_gpus=n,
            link_bytes_per_s=gpu.interconnect_bytes_per_s,
        )

    # prefill and decode differ in their phase and length only
    ops = partial(operators, spec, batch=b, dtype=dtype, kv_dtype=kv_dtype, weight_bytes_per_param=wpp)
    # decode(s) models one new token against s cached + 1: s = P + O/2 - 1 gives the mean context P + O/2
    mean_ctx = max(1, round(p + o / 2 - 1))

    def hop(tokens: int) -> float:
        """A stage boundary sends the activations b x tokens x h once (point to point)."""
        return b * tokens * spec.hidden * act / gpu.interconnect_bytes_per_s if stages > 1 else 0.0

    return TimingInputs(
        tuple(ops(phase="prefill", seq_len=p)),
        tuple(ops(phase="decode", seq_len=mean_ctx)),
        roof,
        spec.n_layer,
        b,
        o,
        comm(p),
        comm(1),
        2 * spec.n_layer if n > 1 else 0,
        stages - 1,
        (stages - 1) * hop(p),
        (stages - 1) * hop(1),
        p,
    )


def timing_from(inputs: TimingInputs, eff: Efficiency = DATASHEET) -> TimingEstimate:
    """TTFT = the request's fixed cost + prefill(P); TPOT = decode step at the mean context; generation = TTFT +
    (O - 1) x TPOT; throughput = b x O / generation. All-reduces add their latency (eff) to their byte time. The
    prefill's compute utilisation ramps with its b x P tokens (`ramped`).

    Pipeline stages (a layer split, as llama.cpp's default `--split-mode layer` and accelerate's device map do)
    run one after another for a sequence: the phase costs the operators' time at one stage's roof (the layers
    of every stage, in turn) plus, per boundary, the activations' transfer and a fixed hand-over cost. A split
    adds memory, not speed, for one sequence."""
    i = inputs
    latency = i.allreduces * eff.allreduce_latency_s
    hops = i.hops * eff.stage_hop_s

    def phase(ops: Sequence[Operator], comm_s: float, share: float | None) -> PhaseTime:
        return phase_time(ops, i.roof, i.n_layer, eff, comm_s + latency + hops, flops_share=share)

    prefill = phase(
        i.prefill_ops, i.prefill_comm_s + i.prefill_hop_s, ramped_flops(eff, i.batch * i.prompt_tokens)
    )
    decode = phase(i.decode_ops, i.decode_comm_s + i.decode_hop_s, eff.decode_flops)
    ttft = eff.request_fixed_s + prefill.seconds
    generation = ttft + (i.output_tokens - 1) * decode.seconds
    return TimingEstimate(
        prefill=prefill,
        decode_step=decode,
        prefill_s=prefill.seconds,
        ttft_s=ttft,
        decode_s_per_token=decode.seconds,
        generation_s=generation,
        tokens_per_s=i.batch * i.output_tokens / generation,
        decode_tokens_per_s=i.batch / decode.seconds,
        mode=eff.label,
    )


def estimate_timing(
    spec: ModelSpec,
    gpu: GPUSpec,
    *,
    dtype: str,
    kv_dtype: str | None = None,
    batch: int,
    prompt_tokens: int,
    output_tokens: int,
    n_gpus: int = 1,
    eff: Efficiency = DATASHEET,
) -> TimingEstimate:
    """TTFT = prefill(P); TPOT = decode step at the mean context P + O/2 (steps 2..O see P+1..P+O-1 tokens);
    generation = TTFT + (O - 1) x TPOT; throughput = b x O / generation.

    With N GPUs in tensor parallel, each holds 1/N of the weights and heads: bandwidth and FLOP/s add up, and
    every layer pays two all-reduces of the activations over the GPU interconnect (`tp_comm_s`)."""
    kv = kv_dtype or dtype
    return timing_from(
        timing_inputs(
            Setup(spec, gpu, dtype, None, None, None, kv, n_gpus, batch, prompt_tokens, output_tokens)
        ),
        eff,
    )


def simple_decode_s(weights_bytes: float, kv_bytes: float, bandwidth_bytes_per_s: float) -> float:
    """t_decode = (weights + KV read per step) / bandwidth (the chapter's rule; MBU's denominator)."""
    return (weights_bytes + kv_bytes) / positive_float("bandwidth", bandwidth_bytes_per_s)


def simple_prefill_s(
    params: float, prompt_tokens: int, flops_per_s: float, attention_flops: float = 0.0
) -> float:
    """t_prefill = (2 x params x prompt tokens + attention score FLOPs) / peak FLOP/s."""
    return (2 * params * prompt_tokens + attention_flops) / positive_float("FLOP/s", flops_per_s)


def merge_forward(a: Sequence[Operator], b: Sequence[Operator]) -> list[Operator]:
    """One forward over two sets of tokens (a decode batch and a prefill chunk, as vLLM's chunked prefill and
    SGLang's mixed batches run them): each weight is read once for both, so an operator with weights keeps the
    FLOPs and activation bytes of both sides and the weight bytes of one (the larger: MoE sides may visit
    different experts); attention stays per side (each reads its own cache)."""
    by_name = {op.name: op for op in b}
    out: list[Operator] = []
    for op in a:
        other = by_name.pop(op.name, None)
        if other is None:
            out.append(op)
        elif op.weight_bytes or other.weight_bytes:
            w = max(op.weight_bytes, other.weight_bytes)
            out.append(
                replace(
                    op,
                    flops=op.flops + other.flops,
                    bytes=op.bytes + other.bytes - min(op.weight_bytes, other.weight_bytes),
                    weight_bytes=w,
                    kv_bytes=op.kv_bytes + other.kv_bytes,
                )
            )
        else:
            out += [op, other]
    return out + list(by_name.values())


def step_inputs(
    s: Setup, *, decode_rows: int, context_tokens: int, prefill_tokens: int
) -> tuple[tuple[Operator, ...], Roof, float, int, float]:
    """`_step_inputs`, remembered: the fit times the same steps under thousands of candidate efficiencies, and the
    operators do not depend on the efficiency."""
    return _step_inputs(s, max(0, int(decode_rows)), max(0, int(context_tokens)), max(0, int(prefill_tokens)))


@lru_cache(maxsize=16384)
def _step_inputs(
    s: Setup, decode_rows: int, context_tokens: int, prefill_tokens: int
) -> tuple[tuple[Operator, ...], Roof, float, int, float]:
    """(operators, roof, communication byte time, all-reduces per forward, hand-over byte time) of one scheduler
    step: `decode_rows` sequences each decoding one token against `context_tokens` cached tokens in all, plus
    `prefill_tokens` prompt tokens in the same forward. KV bytes and attention FLOPs are linear in the context,
    so the rows are timed at their mean context. The counts arrive as non-negative ints (step_inputs)."""
    rows, chunk = decode_rows, prefill_tokens
    if rows == 0 and chunk == 0:
        raise InvalidParameterError("a step needs decode rows or prefill tokens")
    probe = replace(
        s,
        batch=max(rows, 1),
        prompt_tokens=max(chunk, 1),
        output_tokens=1,
        spec=replace(s.spec, context_length=max(s.spec.context_length, chunk + 2)),
    )
    base = timing_inputs(probe)  # validates the setup and gives the roof and precision
    dtype = quant.weight_format(s.weight_format).compute if s.weight_format else s.dtype
    wpp = (
        weights_bytes(s.spec, s.dtype, s.weight_format, s.group_size, s.scope) / params_of(s.spec)
        if s.weight_format
        else None
    )
    ops: list[Operator] = []
    if rows:
        ctx = max(1, round(context_tokens / rows))
        ops = operators(
            s.spec,
            phase="decode",
            seq_len=ctx,
            batch=rows,
            dtype=dtype,
            kv_dtype=s.kv_dtype,
            weight_bytes_per_param=wpp,
        )
    if chunk:
        pre = operators(
            s.spec,
            phase="prefill",
            seq_len=chunk,
            batch=1,
            dtype=dtype,
            kv_dtype=s.kv_dtype,
            weight_bytes_per_param=wpp,
        )
        ops = merge_forward(ops, pre) if ops else pre
    tokens = rows + chunk
    act = activation_bytes(dtype)
    n = max(1, s.n_gpus)
    comm = (
        tp_comm_s(
            s.spec,
            batch=1,
            tokens=tokens,
            act_bytes=act,
            n_gpus=n,
            link_bytes_per_s=s.gpu.interconnect_bytes_per_s,
        )
        if n > 1
        else 0.0
    )
    hop = (
        (s.pipeline - 1) * tokens * s.spec.hidden * act / s.gpu.interconnect_bytes_per_s
        if s.pipeline > 1
        else 0.0
    )
    return tuple(ops), base.roof, comm, base.allreduces, hop


def step_seconds(
    s: Setup, eff: Efficiency, *, decode_rows: int, context_tokens: int, prefill_tokens: int
) -> PhaseTime:
    """One scheduler step's time: the merged forward's operators at the derated roofs (decode's compute
    utilisation when the step is all decode rows, prefill's otherwise), the per-layer fixed cost, all-reduces
    and pipeline hand-overs."""
    ops, roof, comm, allreduces, hop = step_inputs(
        s, decode_rows=decode_rows, context_tokens=context_tokens, prefill_tokens=prefill_tokens
    )
    share: float | None
    if prefill_tokens:
        share = ramped_flops(eff, max(0, int(decode_rows)) + int(prefill_tokens))
    else:
        share = eff.decode_flops  # None: eff.flops
    fixed = allreduces * eff.allreduce_latency_s + (s.pipeline - 1) * eff.stage_hop_s
    return phase_time(ops, roof, s.spec.n_layer, eff, comm + hop + fixed, flops_share=share)
