"""Roofline: FLOPs and bytes of every operator of a decoder layer and the head, for prefill and decode.

Williams, Waterman and Patterson, "Roofline: an insightful visual performance model" (CACM 2009): an
operator with arithmetic intensity I = FLOPs / bytes moved attains at most min(peak FLOP/s, I x bandwidth);
below the ridge (peak / bandwidth) it is memory-bound. The chapter's example: a T4 at 65 TFLOPS over
300 GB/s has a ridge of 216.6 ops/byte, and GPT-Neo attention sits far below it.

The operators are those of Hugging Face's eager (unfused) attention, which is what GPT-Neo runs:
scores are written to memory by QK^T, read and written by softmax, read by attn x V. GPT-Neo computes its
scores in float32. A fused (flash) kernel would never write the scores; the chart shows why that helps.
Norms, residual adds and activation functions are elementwise and left out (under 0.1% of decode bytes).

This module is the one source of FLOPs and bytes: the calculator's timing (engine.calc.timing) sums these
operators, and the KV bytes they read come from engine.calc.memory.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine.calc.memory import attention_weights, cached_tokens, kv_bytes_per_token
from engine.calc.specs import GPUSpec, ModelSpec, check_precision, positive_int
from engine.core.dtypes import BYTES_PER_ELEMENT
from engine.core.errors import InvalidParameterError
from engine.core.spec import Spec, option

SOFTMAX_FLOPS_PER_ELEMENT = 5  # max, subtract, exp, sum, divide
PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class RooflineSpec(Spec):
    """What a roofline analyses besides the model and the GPU: the shape and the precision (the page's inputs)."""

    dtype: str = option(
        "fp16", "precision of weights and activations", choices=tuple(BYTES_PER_ELEMENT), label="precision"
    )
    seq_len: int = option(
        512,
        "prompt length (prefill) or cached tokens (decode)",
        lo=1,
        hi=1 << 20,
        label="s: prompt length (prefill) / cached tokens (decode)",
    )
    batch: int = option(1, "sequences processed together", lo=1, hi=65_536, label="b: batch")


@dataclass(frozen=True)
class Operator:
    name: str
    group: str  # "attention" (touches the KV cache or scores) | "projection" | "mlp" | "head"
    flops: float  # one instance (one layer)
    bytes: float  # one instance: weights + activations read and written + KV read/written
    count: int  # instances per forward pass (n_layer, or 1 for the head)
    weight_bytes: float = 0.0
    kv_bytes: float = 0.0  # KV cache bytes read (attention) or written (K/V projections), one instance
    d_in: int = 0  # a matmul's inner (reduction) dimension; 0 for operators without weights

    @property
    def intensity(self) -> float:
        """I = FLOPs / bytes (ops/byte)."""
        return self.flops / self.bytes

    @property
    def total_flops(self) -> float:
        return self.flops * self.count

    @property
    def total_bytes(self) -> float:
        return self.bytes * self.count


@dataclass(frozen=True)
class Roof:
    """The roofline of one device at one precision (possibly derated by a calibration)."""

    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    label: str = ""

    @property
    def ridge(self) -> float:
        """ridge = peak FLOP/s / bandwidth (ops/byte)."""
        return self.peak_flops_per_s / self.bandwidth_bytes_per_s

    def attainable_flops_per_s(self, intensity: float) -> float:
        """attainable FLOP/s = min(peak, I x bandwidth)."""
        return min(self.peak_flops_per_s, intensity * self.bandwidth_bytes_per_s)

    def time_s(self, flops: float, nbytes: float) -> float:
        """t = max(FLOPs / peak, bytes / bandwidth): the slower of the two roofs."""
        return max(flops / self.peak_flops_per_s, nbytes / self.bandwidth_bytes_per_s)

    def bound(self, intensity: float) -> str:
        """memory-bound when I < ridge, else compute-bound."""
        return "memory" if intensity < self.ridge else "compute"


def roof_for(
    gpu: GPUSpec, dtype: str, *, bandwidth_efficiency: float = 1.0, flops_efficiency: float = 1.0
) -> Roof:
    """Roof of `gpu` for math in `dtype`, scaled by measured efficiencies (1.0 = datasheet)."""
    return Roof(
        gpu.flops_for(dtype) * flops_efficiency,
        gpu.bandwidth_bytes_per_s * bandwidth_efficiency,
        gpu.name,
    )


def ridge_point(peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """ridge = peak FLOP/s / bandwidth; T4 (book): 65e12 / 300e9 = 216.7 ops/byte."""
    return peak_flops_per_s / bandwidth_bytes_per_s


def activation_bytes(dtype: str) -> float:
    """Activations are in the weight precision, except for quantized weights (int8/int4 weight-only, fp8),
    whose activations between layers stay 16-bit."""
    dtype = check_precision("precision", dtype)
    return 2.0 if dtype in ("int8", "int4", "fp8") else BYTES_PER_ELEMENT[dtype]


def operators(
    spec: ModelSpec,
    *,
    phase: str,
    seq_len: int,
    batch: int = 1,
    dtype: str = "fp16",
    kv_dtype: str | None = None,
    logits_all_positions: bool = False,
    weight_bytes_per_param: float | None = None,
) -> list[Operator]:
    """Linear y = xW: FLOPs = 2 x tokens x in x out; bytes = in x out x w + tokens x (in + out) x a.
    QK^T and attn x V: FLOPs = 2 x b x H x n x c x d each; softmax 5 x b x H x n x c; lm_head 2 x b x h x V.

    prefill: n = s new tokens per sequence, c = s keys. decode: n = 1 new token against c = s cached + 1.
    K/V projections write the cache; QK^T and attn x V read it (c cached tokens, or min(c, window) where
    the model evicts). lm_head runs on the last position only (what `generate` does) unless
    `logits_all_positions` (a training-style forward over every position). `weight_bytes_per_param` replaces
    the precision's bytes per weight (a quantized format with its scales).

    Mixture of experts: each token runs k of E experts (FLOPs x k) and a router (2 x h x E per token); the
    weights read are those of the distinct experts the T tokens visit, E x (1 - (1 - k/E)^T) in expectation
    under uniform routing (k at batch 1: decode reads the active parameters plus the router).
    Layers without attention (a `layer_types` hybrid) run no attention operators."""
    if phase not in PHASES:
        raise InvalidParameterError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")
    s = positive_int("sequence length", seq_len)
    b = positive_int("batch", batch)
    dtype = check_precision("precision", dtype)
    kv_dtype = check_precision("KV precision", kv_dtype or dtype)
    w = weight_bytes_per_param or BYTES_PER_ELEMENT[dtype]
    a = activation_bytes(dtype)
    sb = 4.0 if spec.traits.scores_fp32 else a  # bytes per attention score
    n, c = (s, s) if phase == "prefill" else (1, s + 1)
    c_kv = cached_tokens(spec, c) if phase == "decode" else float(c)  # keys actually held and read
    T = b * n  # tokens through the linear layers
    h, q, kv, d, H, inter, V, L = (
        spec.hidden,
        spec.q_dim,
        spec.kv_dim,
        spec.head_dim,
        spec.n_head,
        spec.intermediate,
        spec.vocab,
        spec.n_layer,
    )
    t = spec.traits
    LA = spec.kv_layers  # layers with attention
    kv_one = (
        kv_bytes_per_token(spec, kv_dtype) / (2 * LA) if LA else 0.0
    )  # K (or V) bytes per token per layer
    E, k = spec.n_experts, spec.experts_per_token
    visited = E * (1 - (1 - k / E) ** T) if spec.is_moe else 1.0  # distinct experts the T tokens visit

    def linear(
        name: str,
        group: str,
        d_in: int,
        d_out: int,
        bias: bool,
        out_bytes: float | None = None,
        *,
        count: int = L,
        per_token: float = 1.0,
        copies: float = 1.0,
    ) -> Operator:
        """per_token: instances each token runs (k experts); copies: distinct weight sets read (experts visited)."""
        wb = (d_in * d_out + (d_out if bias else 0)) * w * copies
        ob = T * per_token * d_out * a if out_bytes is None else out_bytes
        return Operator(
            name,
            group,
            2.0 * T * per_token * d_in * d_out,
            wb + T * per_token * d_in * a + ob,
            count,
            weight_bytes=wb,
            d_in=d_in,
        )

    scores = b * H * n * c_kv
    # Latent attention (DeepSeek-V2/V3) attends in its absorbed form, as vLLM runs it: scores against the
    # cached latent (kv_lora_rank + rope wide), values from the latent (kv_lora_rank wide).
    d_qk, d_v = (spec.kv_lora_rank + spec.qk_rope_head_dim, spec.kv_lora_rank) if spec.is_mla else (d, d)
    if spec.is_mla:
        projections = []
        for pname, d_out, d_in in attention_weights(spec):
            if pname == "KV a":  # writes the latent cache
                projections.append(
                    replace(
                        linear("KV a projection", "projection", d_in, d_out, False, T * 2 * kv_one, count=LA),
                        kv_bytes=T * 2 * kv_one,
                    )
                )
            else:
                projections.append(linear(f"{pname} projection", "projection", d_in, d_out, False, count=LA))
        q_heads = H * d_v  # the absorbed query and output width per token
    else:
        projections = [
            linear("Q projection", "projection", h, q, t.qkv_bias, count=LA),
            replace(
                linear("K projection", "projection", h, kv, t.qkv_bias, T * kv_one, count=LA),
                kv_bytes=T * kv_one,
            ),
            replace(
                linear("V projection", "projection", h, kv, t.qkv_bias, T * kv_one, count=LA),
                kv_bytes=T * kv_one,
            ),
        ]
        q_heads = q
    cache_read = b * c_kv * (2 * kv_one if spec.is_mla else kv_one)
    ops = [
        *projections,
        Operator(
            "QK^T",
            "attention",
            2.0 * scores * d_qk,
            T * q_heads * a + cache_read + scores * sb,
            LA,
            kv_bytes=cache_read,
        ),
        Operator("softmax", "attention", SOFTMAX_FLOPS_PER_ELEMENT * scores, scores * (sb + a), LA),
        Operator(
            "attn x V",
            "attention",
            2.0 * scores * d_v,
            scores * a + (0.0 if spec.is_mla else cache_read) + T * q_heads * a,
            LA,
            kv_bytes=0.0 if spec.is_mla else cache_read,
        ),
    ]
    if not spec.is_mla:
        ops.append(linear("output projection", "projection", q, h, t.out_bias, count=LA))
    ops = [op for op in ops if op.count]

    def mlp(
        prefix: str, width: int, count: int, per_token: float = 1.0, copies: float = 1.0
    ) -> list[Operator]:
        if not count:
            return []
        ups = [f"{prefix}gate", f"{prefix}up"] if t.gated_mlp else [f"{prefix}up"]
        return [
            *(
                linear(name, "mlp", h, width, t.mlp_bias, count=count, per_token=per_token, copies=copies)
                for name in ups
            ),
            linear(
                f"{prefix}down", "mlp", width, h, t.mlp_bias, count=count, per_token=per_token, copies=copies
            ),
        ]

    if spec.is_moe:
        Lm = spec.expert_layers
        ops.append(linear("router", "mlp", h, E, t.router_bias, count=Lm))
        ops += mlp("expert ", inter, Lm, float(k), float(visited))
        if spec.shared_intermediate:
            ops += mlp("shared expert ", spec.shared_intermediate, Lm)
        ops += mlp("MLP ", spec.dense_intermediate or inter, L - Lm)
    else:
        ops += mlp("MLP ", inter, L)
    rows = T if logits_all_positions else b
    head_w = (spec.embed_dim or h) * V * w
    ops.append(
        Operator(
            "lm_head",
            "head",
            2.0 * rows * h * V,
            head_w + rows * h * a + rows * V * a,
            1,
            weight_bytes=head_w,
            d_in=spec.embed_dim or h,
        )
    )
    return ops


def forward_flops(ops: list[Operator]) -> float:
    """FLOPs of one forward pass = sum over operators of FLOPs x count."""
    return sum(op.total_flops for op in ops)


def forward_bytes(ops: list[Operator]) -> float:
    """Bytes of one forward pass = sum over operators of bytes x count."""
    return sum(op.total_bytes for op in ops)


@dataclass(frozen=True)
class OperatorPoint:
    name: str
    group: str
    flops: float  # over the whole forward pass (all layers)
    bytes: float
    intensity: float
    bound: str
    attainable_flops_per_s: float
    attainable_s: float  # over the whole forward pass
    count: int
    share_of_time: float  # fraction of the phase's attainable time


@dataclass(frozen=True)
class RooflineResult:
    model: str
    gpu: str
    phase: str
    seq_len: int
    batch: int
    dtype: str
    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    ridge_ops_per_byte: float
    operators: list[OperatorPoint]
    total_flops: float
    total_bytes: float
    attainable_s: float  # sum over operators, each at its own roof


def analyse(
    spec: ModelSpec,
    roof: Roof,
    *,
    phase: str,
    seq_len: int,
    batch: int = 1,
    dtype: str = "fp16",
    kv_dtype: str | None = None,
    gpu_name: str = "",
) -> RooflineResult:
    """Each operator: I = FLOPs / bytes, bound = memory if I < ridge, time = max(FLOPs / peak, bytes / BW);
    phase time = sum of operator times (each operator meets its own roof)."""
    ops = operators(spec, phase=phase, seq_len=seq_len, batch=batch, dtype=dtype, kv_dtype=kv_dtype)
    times = [roof.time_s(op.flops, op.bytes) * op.count for op in ops]
    total_t = sum(times)
    points = [
        OperatorPoint(
            name=op.name,
            group=op.group,
            flops=op.total_flops,
            bytes=op.total_bytes,
            intensity=op.intensity,
            bound=roof.bound(op.intensity),
            attainable_flops_per_s=roof.attainable_flops_per_s(op.intensity),
            attainable_s=t,
            count=op.count,
            share_of_time=t / total_t,
        )
        for op, t in zip(ops, times, strict=True)
    ]
    return RooflineResult(
        model=spec.name,
        gpu=gpu_name or roof.label,
        phase=phase,
        seq_len=seq_len,
        batch=batch,
        dtype=dtype,
        peak_flops_per_s=roof.peak_flops_per_s,
        bandwidth_bytes_per_s=roof.bandwidth_bytes_per_s,
        ridge_ops_per_byte=roof.ridge,
        operators=points,
        total_flops=forward_flops(ops),
        total_bytes=forward_bytes(ops),
        attainable_s=total_t,
    )


@dataclass(frozen=True)
class MeasuredPoint:
    phase: str
    intensity: float
    flops_per_s: float
    bytes_per_s: float


def measured_point(
    phase: str, *, params: float, weights_bytes: float, tokens: float, seconds: float
) -> MeasuredPoint:
    """A measured run on the roofline: achieved FLOP/s = 2 x params x tokens / time; bytes/s = weights bytes x
    forward passes / time (decode: one pass per step, `tokens` = batch; prefill: one pass for all prompt tokens);
    intensity = FLOP/s / bytes/s. Weights only: a lower bound on traffic (the KV cache and activations add)."""
    if seconds <= 0 or tokens <= 0 or weights_bytes <= 0:
        raise InvalidParameterError("a measured point needs positive time, tokens and weights bytes")
    flops_per_s = 2.0 * params * tokens / seconds
    bytes_per_s = weights_bytes / seconds
    return MeasuredPoint(phase, flops_per_s / bytes_per_s, flops_per_s, bytes_per_s)
