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

from dataclasses import dataclass, replace

from engine.calc import quant
from engine.calc.memory import params_of, weights_bytes
from engine.calc.roofline import Operator, Roof, activation_bytes, operators, roof_for
from engine.calc.specs import GPUSpec, ModelSpec, positive_float, positive_int
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


DATASHEET = Efficiency()


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
    ops: list[Operator], roof: Roof, n_layer: int, eff: Efficiency = DATASHEET, comm_s: float = 0.0
) -> PhaseTime:
    """t = sum over operators of count x max(FLOPs / (peak x e_flops), bytes / (BW x e_bw)) + L x overhead per
    layer + tensor-parallel all-reduces (not overlapped with compute: a conservative bound)."""
    derated = Roof(roof.peak_flops_per_s * eff.flops, roof.bandwidth_bytes_per_s * eff.bandwidth, roof.label)
    mem = comp = 0.0
    for op in ops:
        t = derated.time_s(op.flops, op.bytes) * op.count
        if derated.bound(op.intensity) == "memory":
            mem += t
        else:
            comp += t
    overhead = n_layer * eff.step_overhead_s_per_layer
    return PhaseTime(
        seconds=mem + comp + overhead + comm_s,
        memory_s=mem,
        compute_s=comp,
        overhead_s=overhead,
        flops=sum(op.total_flops for op in ops),
        bytes=sum(op.total_bytes for op in ops),
        weights_bytes=sum(op.weight_bytes * op.count for op in ops),
        kv_bytes=sum(op.kv_bytes * op.count for op in ops),
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
    if p + o > spec.context_length:
        raise InvalidParameterError(
            f"prompt + output = {p + o} tokens exceed {spec.name}'s context of {spec.context_length}; shorten them"
        )
    base = roof_for(gpu, dtype)
    roof = Roof(base.peak_flops_per_s * n, base.bandwidth_bytes_per_s * n, base.label)
    if n > 1 and gpu.interconnect_bytes_per_s <= 0:
        raise InvalidParameterError(
            f"{gpu.name} has no interconnect bandwidth in the catalog; tensor parallel over {n} GPUs cannot be "
            "timed. Pick a catalog GPU, or 1 GPU"
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

    pre_ops = operators(
        spec, phase="prefill", seq_len=p, batch=b, dtype=dtype, kv_dtype=kv_dtype, weight_bytes_per_param=wpp
    )
    # decode(s) models one new token against s cached + 1: s = P + O/2 - 1 gives the mean context P + O/2
    mean_ctx = max(1, round(p + o / 2 - 1))
    dec_ops = operators(
        spec,
        phase="decode",
        seq_len=mean_ctx,
        batch=b,
        dtype=dtype,
        kv_dtype=kv_dtype,
        weight_bytes_per_param=wpp,
    )
    return TimingInputs(
        tuple(pre_ops),
        tuple(dec_ops),
        roof,
        spec.n_layer,
        b,
        o,
        comm(p),
        comm(1),
        2 * spec.n_layer if n > 1 else 0,
    )


def timing_from(inputs: TimingInputs, eff: Efficiency = DATASHEET) -> TimingEstimate:
    """TTFT = prefill(P); TPOT = decode step at the mean context; generation = TTFT + (O - 1) x TPOT;
    throughput = b x O / generation. All-reduces add their latency (eff) to their byte time."""
    i = inputs
    latency = i.allreduces * eff.allreduce_latency_s
    prefill = phase_time(list(i.prefill_ops), i.roof, i.n_layer, eff, i.prefill_comm_s + latency)
    dec_eff = eff if eff.decode_flops is None else replace(eff, flops=eff.decode_flops)
    decode = phase_time(list(i.decode_ops), i.roof, i.n_layer, dec_eff, i.decode_comm_s + latency)
    generation = prefill.seconds + (i.output_tokens - 1) * decode.seconds
    return TimingEstimate(
        prefill=prefill,
        decode_step=decode,
        prefill_s=prefill.seconds,
        ttft_s=prefill.seconds,
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
