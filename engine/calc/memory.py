"""Memory: parameters, weights, KV cache, overhead, fit, the largest batch and sequence, GPUs needed.

Sources: the parameter count follows the Hugging Face modelling code layer by layer (checked against the
real model on the meta device in tests/test_calc_params.py); the KV cache is 2 x layers x kv_heads x
head_dim x bytes per token (NVIDIA, "Mastering LLM Techniques: Inference Optimization"); the overhead is
the chapter's x1.2 rule of thumb (accelerate's docs: "add up to 20%" for inference).

Each public function's docstring begins with its formula; pages show it with `formula_of`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.calc.specs import ModelSpec, check_precision, positive_float, positive_int
from engine.dtypes import BYTES_PER_ELEMENT
from engine.errors import InvalidParameterError

DEFAULT_OVERHEAD = 0.20  # the chapter's x1.2; accelerate: "add up to 20%"


def formula_of(fn: object) -> str:
    """The formula paragraph of a calculator function's docstring (its first paragraph)."""
    doc = (getattr(fn, "__doc__", "") or "").strip()
    return " ".join(doc.split("\n\n")[0].split())


@dataclass(frozen=True)
class ParamCount:
    embeddings: int  # token embeddings (+ learned positions)
    per_layer: int
    layers: int  # per_layer x n_layer
    final_norm: int
    lm_head: int  # 0 when tied to the token embeddings
    total: int
    matmul: int  # parameters that take part in a matmul each token (layers' projections + lm_head)


def count_params(spec: ModelSpec) -> ParamCount:
    """P = V*h [+ ctx*h learned positions] + L*(attn + mlp + norms) + final norm [+ V*h untied lm_head];
    attn = h*(H*d) + 2*h*(KV*d) + (H*d)*h [+ biases], mlp = 2*h*I (GELU) or 3*h*I (SwiGLU) [+ biases].

    A user-given `params_override` replaces the total (the breakdown stays the shape's)."""
    t = spec.traits
    h, q, kv, inter = spec.hidden, spec.q_dim, spec.kv_dim, spec.intermediate
    attn = h * q + 2 * h * kv + q * h
    if t.qkv_bias:
        attn += q + 2 * kv
    if t.out_bias:
        attn += h
    mlp = (3 if t.gated_mlp else 2) * h * inter
    if t.mlp_bias:
        mlp += (2 * inter if t.gated_mlp else inter) + h
    norms = 2 * t.norm_params_per_hidden * h
    per_layer = attn + mlp + norms
    embeddings = spec.vocab * h + (spec.context_length * h if t.learned_positions else 0)
    lm_head = 0 if spec.tied_embeddings else spec.vocab * h
    final_norm = t.norm_params_per_hidden * h
    layers = per_layer * spec.n_layer
    total = embeddings + layers + final_norm + lm_head
    matmul_per_layer = h * q + 2 * h * kv + q * h + (3 if t.gated_mlp else 2) * h * inter
    matmul = matmul_per_layer * spec.n_layer + spec.vocab * h
    if spec.params_override is not None:
        total = spec.params_override
    return ParamCount(embeddings, per_layer, layers, final_norm, lm_head, total, matmul)


def params_of(spec: ModelSpec) -> int:
    """P = count_params(spec).total."""
    return count_params(spec).total


def weights_bytes(spec: ModelSpec, dtype: str) -> float:
    """weights = P x bytes per parameter (fp32 4, fp16/bf16 2, int8 1, int4 0.5).

    int8/int4 are weight-only storage sizes; real formats add a few percent of scales (Q4_0: 4.5 bits)."""
    return params_of(spec) * BYTES_PER_ELEMENT[check_precision("weight precision", dtype)]


def kv_bytes_per_token(spec: ModelSpec, kv_dtype: str) -> float:
    """KV per token = 2 (K and V) x layers x kv_heads x head_dim x bytes per element.

    Grouped-query and multi-query attention store only their KV heads (kv_heads < heads)."""
    b = BYTES_PER_ELEMENT[check_precision("KV precision", kv_dtype)]
    return 2 * spec.n_layer * spec.n_kv_head * spec.head_dim * b


def cached_tokens(spec: ModelSpec, seq_len: int) -> float:
    """cached token-layers / layers = (L - Lw) x s + Lw x min(s, w) where Lw layers evict beyond window w;
    a window that only masks (GPT-Neo's local layers) keeps all s tokens."""
    if spec.sliding_window and spec.window_evicts and spec.window_layers:
        lw = spec.window_layers
        return ((spec.n_layer - lw) * seq_len + lw * min(seq_len, spec.sliding_window)) / spec.n_layer
    return float(seq_len)


def kv_cache_bytes(spec: ModelSpec, kv_dtype: str, batch: int, seq_len: int) -> float:
    """KV cache = batch x cached tokens(s) x KV per token; cached tokens = s unless the model evicts
    beyond a sliding window (then min(s, w) on the windowed layers)."""
    batch = positive_int("batch", batch)
    seq_len = positive_int("sequence length", seq_len)
    return batch * cached_tokens(spec, seq_len) * kv_bytes_per_token(spec, kv_dtype)


@dataclass(frozen=True)
class MemoryEstimate:
    params: int
    weights_bytes: float
    kv_bytes_per_token: float
    kv_cache_bytes: float
    overhead_bytes: float
    total_bytes: float
    per_gpu_bytes: float
    gpu_memory_bytes: float
    n_gpus: int
    fits: bool
    headroom_bytes: float  # per GPU; negative when it does not fit


def overhead_bytes(weights: float, kv: float, overhead: float) -> float:
    """overhead = fraction x (weights + KV): activations, allocator fragmentation, the CUDA context.

    With no KV this is the chapter's P x bytes x 1.2 rule of thumb."""
    return positive_float("overhead", overhead, allow_zero=True) * (weights + kv)


def estimate_memory(
    spec: ModelSpec,
    *,
    dtype: str,
    kv_dtype: str | None = None,
    batch: int,
    seq_len: int,
    gpu_memory_bytes: float,
    overhead: float = DEFAULT_OVERHEAD,
    n_gpus: int = 1,
) -> MemoryEstimate:
    """total = (weights + KV) x (1 + overhead); per GPU = total / GPUs (tensor parallel splits weights and
    heads evenly); fits when per GPU <= the GPU's memory."""
    kv_dtype = kv_dtype or dtype
    n_gpus = positive_int("GPUs", n_gpus)
    gpu_memory_bytes = positive_float("GPU memory", gpu_memory_bytes)
    if overhead > 10:
        raise InvalidParameterError(f"overhead {overhead!r} is a fraction (0.2 = 20%), not a percentage")
    w = weights_bytes(spec, dtype)
    kv = kv_cache_bytes(spec, kv_dtype, batch, seq_len)
    ov = overhead_bytes(w, kv, overhead)
    total = w + kv + ov
    per_gpu = total / n_gpus
    return MemoryEstimate(
        params=params_of(spec),
        weights_bytes=w,
        kv_bytes_per_token=kv_bytes_per_token(spec, kv_dtype),
        kv_cache_bytes=kv,
        overhead_bytes=ov,
        total_bytes=total,
        per_gpu_bytes=per_gpu,
        gpu_memory_bytes=gpu_memory_bytes,
        n_gpus=n_gpus,
        fits=per_gpu <= gpu_memory_bytes,
        headroom_bytes=gpu_memory_bytes - per_gpu,
    )


def kv_budget_bytes(
    spec: ModelSpec, dtype: str, gpu_memory_bytes: float, overhead: float, n_gpus: int
) -> float:
    """KV budget = GPUs x memory / (1 + overhead) - weights (what is left for the cache)."""
    return n_gpus * gpu_memory_bytes / (1 + overhead) - weights_bytes(spec, dtype)


def max_batch(
    spec: ModelSpec,
    *,
    dtype: str,
    kv_dtype: str | None = None,
    seq_len: int,
    gpu_memory_bytes: float,
    overhead: float = DEFAULT_OVERHEAD,
    n_gpus: int = 1,
) -> int:
    """max batch = floor(KV budget / (cached tokens(s) x KV per token)); 0 when the weights alone do not fit."""
    budget = kv_budget_bytes(spec, dtype, gpu_memory_bytes, overhead, n_gpus)
    per_seq = kv_cache_bytes(spec, kv_dtype or dtype, 1, seq_len)
    if budget <= 0:
        return 0
    return int(budget // per_seq)


@dataclass(frozen=True)
class MaxSeqLen:
    tokens: int  # 0 when not even one token fits
    limited_by: str  # "memory" or "context" (the model's context length)


def max_seq_len(
    spec: ModelSpec,
    *,
    dtype: str,
    kv_dtype: str | None = None,
    batch: int,
    gpu_memory_bytes: float,
    overhead: float = DEFAULT_OVERHEAD,
    n_gpus: int = 1,
) -> MaxSeqLen:
    """max s = largest s <= context length with batch x cached tokens(s) x KV per token <= KV budget
    (solved by bisection, since a sliding window makes the cache piecewise linear in s)."""
    budget = kv_budget_bytes(spec, dtype, gpu_memory_bytes, overhead, n_gpus)
    kv_dtype = kv_dtype or dtype

    def fits(s: int) -> bool:
        return kv_cache_bytes(spec, kv_dtype, batch, s) <= budget

    if budget <= 0 or not fits(1):
        return MaxSeqLen(0, "memory")
    if fits(spec.context_length):
        return MaxSeqLen(spec.context_length, "context")
    lo, hi = 1, spec.context_length  # fits(lo), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return MaxSeqLen(lo, "memory")


def gpus_needed(total_bytes: float, gpu_memory_bytes: float, n_heads: int | None = None) -> int:
    """GPUs = ceil(total / memory per GPU); with `n_heads`, rounded up to a count that divides the heads
    (tensor parallelism splits attention heads evenly)."""
    n = max(1, math.ceil(total_bytes / positive_float("GPU memory", gpu_memory_bytes)))
    if n_heads:
        while n_heads % n and n < n_heads:
            n += 1
    return n
