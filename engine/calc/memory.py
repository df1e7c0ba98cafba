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

from engine.calc.specs import ModelSpec, ParamCount, check_precision, positive_float, positive_int
from engine.core.dtypes import BYTES_PER_ELEMENT
from engine.core.errors import InvalidParameterError

DEFAULT_OVERHEAD = 0.20  # the chapter's x1.2; accelerate: "add up to 20%"


def formula_of(fn: object) -> str:
    """The formula paragraph of a calculator function's docstring (its first paragraph)."""
    doc = (getattr(fn, "__doc__", "") or "").strip()
    return " ".join(doc.split("\n\n")[0].split())


def count_params(spec: ModelSpec) -> ParamCount:
    """P = embedding + L x (attn + E x mlp + router + norms) + final norm + head, per component:
    embedding = V*e [+ (ctx + offset)*h learned positions] [+ 2*e*h OPT's project_in/out when e != h];
    attn = h*(H*d) + 2*h*(KV*d) + (H*d)*h [+ q/k/v biases H*d + 2*KV*d] [+ output bias h];
    mlp = 2*h*I (plain) or 3*h*I (gated) [+ biases I + h, or 2I + h gated], times E experts; router = h*E;
    norms = (norms per layer x L + final + embedding norm) x h x (2 LayerNorm, 1 RMSNorm);
    head = V*e [+ V bias], 0 when tied. Active = total - L x (E - k) x mlp (k experts per token).

    The formula of the layouts in engine/calc/hf_config.py; the page and the CLI use the count of the real
    class on the meta device when it could be built (`spec.exact`), and this where it could not."""
    t = spec.traits
    h, q, kv, inter, L, V = spec.hidden, spec.q_dim, spec.kv_dim, spec.intermediate, spec.n_layer, spec.vocab
    e = spec.embed_dim or h
    attn_w = h * q + 2 * h * kv + q * h
    attn = attn_w + (q + 2 * kv if t.qkv_bias else 0) + (h if t.out_bias else 0)
    mlp_w = (3 if t.gated_mlp else 2) * h * inter
    mlp_one = mlp_w + (((2 * inter) if t.gated_mlp else inter) + h if t.mlp_bias else 0)
    router = h * spec.n_experts if spec.is_moe else 0
    embedding = V * e
    if t.learned_positions:
        embedding += (spec.context_length + t.position_offset) * h
    if e != h:
        embedding += 2 * e * h  # project_in (e -> h) and project_out (h -> e), no bias
    norms = t.norm_params_per_hidden * h * (t.norms_per_layer * L + int(t.final_norm) + int(t.embed_norm))
    head = 0 if spec.tied_embeddings else V * e + (V if t.lm_head_bias else 0)
    total = embedding + L * (attn + spec.n_experts * mlp_one + router) + norms + head
    active = total - L * (spec.n_experts - spec.experts_per_token) * mlp_one
    matmul = L * (attn_w + spec.experts_per_token * mlp_w + router) + V * e
    if spec.params_override is not None:
        total = active = spec.params_override
    return ParamCount(
        embedding=embedding,
        attention=L * attn,
        mlp=L * spec.n_experts * mlp_one,
        router=L * router,
        norms=norms,
        head=head,
        total=total,
        active=active,
        matmul=matmul,
        source="formula" if spec.params_override is None else "given by the user",
    )


def param_count(spec: ModelSpec) -> ParamCount:
    """The real class's count on the meta device when engine.arch.meta built it (`spec.exact`), else the formula."""
    if spec.exact is not None and spec.params_override is None:
        return spec.exact
    return count_params(spec)


def params_of(spec: ModelSpec) -> int:
    """P = total parameters (the meta-device count when known, else the formula); memory uses all of them."""
    return param_count(spec).total


def weight_matrices(spec: ModelSpec) -> list[tuple[str, int, int, int]]:
    """The matmul weights as (name, rows = out features, row length = in features, how many): what a
    weight-only format quantizes. Tied embeddings appear once, as the embedding."""
    h, q, kv, inter, L = spec.hidden, spec.q_dim, spec.kv_dim, spec.intermediate, spec.n_layer
    e = spec.embed_dim or h
    E = spec.n_experts
    mats = [("Q", q, h, L), ("K", kv, h, L), ("V", kv, h, L), ("O", h, q, L)]
    if spec.traits.gated_mlp:
        mats += [("MLP gate", inter, h, L * E), ("MLP up", inter, h, L * E)]
    else:
        mats.append(("MLP up", inter, h, L * E))
    mats.append(("MLP down", h, inter, L * E))
    if spec.is_moe:
        mats.append(("router", E, h, L))
    mats.append(("embedding", spec.vocab, e, 1))
    if not spec.tied_embeddings:
        mats.append(("head", spec.vocab, e, 1))
    return mats


# Weight-only formats the calculator offers: int8 per output channel and int4 in groups (torchao), and
# ggml's GGUF block formats. Each name is a key of engine.calc.quant.FORMATS or one of these two.
WEIGHT_FORMATS: tuple[str, ...] = (
    "int8",
    "int4",
    "Q8_0",
    "Q6_K",
    "Q5_K",
    "Q5_1",
    "Q5_0",
    "Q4_K",
    "Q4_1",
    "Q4_0",
    "Q3_K",
    "Q2_K",
)
GGUF_NORM_BYTES = 4  # GGUF keeps norms and biases in F32 (llama.cpp's convert script)


def quant_format_name(weight_format: str, group_size: int | None) -> tuple[str, int | None]:
    """(engine.calc.quant format, group size) for a weight format: int8 is per output channel unless a group
    size is given; int4 groups 128 weights unless told otherwise; GGUF blocks have their own fixed size."""
    if weight_format == "int8":
        return "int8-per-channel", group_size or None
    if weight_format == "int4":
        return "int4-g128", group_size or 128
    return weight_format, None


def weight_storage_note(weight_format: str | None, group_size: int | None = None) -> str:
    """What a quantized weight figure assumes (shown as a warning beside it)."""
    if not weight_format:
        return ""
    if weight_format in ("int8", "int4"):
        g = quant_format_name(weight_format, group_size)[1]
        per = f"groups of {g}" if g else "one scale per output channel"
        return (
            f"{weight_format} weight-only ({per}, torchao's layout): the layers' matmul weights and the head are "
            "quantized; embeddings, norms and biases stay 16-bit; math runs in fp16"
        )
    return (
        f"{weight_format}: every matrix (embedding and head included) in {weight_format} blocks, norms and "
        "biases F32. llama.cpp often keeps a few tensors (the output head) in a wider type, so a real file "
        "can be a few percent larger"
    )


def weights_bytes(
    spec: ModelSpec, dtype: str, weight_format: str | None = None, group_size: int | None = None
) -> float:
    """weights = P x bytes per parameter (fp32 4, fp16/bf16 2); with a quantized format, the sum over weight
    matrices of ceil(n / g) x (g x bits / 8 + scale + zero) (engine.calc.quant) + the rest at 16 bits
    (F32 for GGUF).

    Without a format, int8/int4 are bare storage sizes (1 and 0.5 B, no scales)."""
    from engine.calc import quant

    if not weight_format:
        return params_of(spec) * BYTES_PER_ELEMENT[check_precision("weight precision", dtype)]
    if weight_format not in WEIGHT_FORMATS:
        raise InvalidParameterError(
            f"unknown weight format {weight_format!r}; choose one of {', '.join(WEIGHT_FORMATS)}"
        )
    fmt, g = quant_format_name(weight_format, group_size)
    if g is not None:
        positive_int("group size", g)
    gguf = weight_format not in ("int8", "int4")
    total = params_of(spec)
    quantized = 0
    stored = 0.0
    for name, rows, row_len, count in weight_matrices(spec):
        if name == "embedding" and not gguf:
            continue  # torchao quantizes nn.Linear only
        quantized += rows * row_len * count
        stored += quant.tensor_bytes((rows, row_len), fmt, g) * count
    rest = BYTES_PER_ELEMENT["fp16"] if not gguf else GGUF_NORM_BYTES
    return stored + (total - quantized) * rest


def bytes_per_weight(
    spec: ModelSpec, dtype: str, weight_format: str | None = None, group_size: int | None = None
) -> float:
    """Effective bytes per parameter = weights / P (what a decode step streams per weight)."""
    return weights_bytes(spec, dtype, weight_format, group_size) / params_of(spec)


def kv_bytes_per_token(spec: ModelSpec, kv_dtype: str) -> float:
    """KV per token = 2 (K and V) x attention layers x kv_heads x head_dim x bytes per element.

    Grouped-query and multi-query attention store only their KV heads (kv_heads < heads); head_dim is the
    config's own when it gives one (Gemma: 256); layers without attention keep no per-token cache."""
    b = BYTES_PER_ELEMENT[check_precision("KV precision", kv_dtype)]
    return 2 * spec.kv_layers * spec.n_kv_head * spec.head_dim * b


def cached_tokens(spec: ModelSpec, seq_len: int) -> float:
    """cached token-layers / layers = (L - Lw) x s + Lw x min(s, w) where Lw layers evict beyond window w;
    a window that only masks (GPT-Neo's local layers) keeps all s tokens."""
    if spec.sliding_window and spec.window_evicts and spec.window_layers and spec.kv_layers:
        lw, la = spec.window_layers, spec.kv_layers
        return ((la - lw) * seq_len + lw * min(seq_len, spec.sliding_window)) / la
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
    weight_format: str | None = None,
    group_size: int | None = None,
) -> MemoryEstimate:
    """total = (weights + KV) x (1 + overhead); per GPU = total / GPUs (tensor parallel splits weights and
    heads evenly); fits when per GPU <= the GPU's memory."""
    kv_dtype = kv_dtype or dtype
    n_gpus = positive_int("GPUs", n_gpus)
    gpu_memory_bytes = positive_float("GPU memory", gpu_memory_bytes)
    if overhead > 10:
        raise InvalidParameterError(f"overhead {overhead!r} is a fraction (0.2 = 20%), not a percentage")
    w = weights_bytes(spec, dtype, weight_format, group_size)
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
    spec: ModelSpec,
    dtype: str,
    gpu_memory_bytes: float,
    overhead: float,
    n_gpus: int,
    weight_format: str | None = None,
    group_size: int | None = None,
) -> float:
    """KV budget = GPUs x memory / (1 + overhead) - weights (what is left for the cache)."""
    return n_gpus * gpu_memory_bytes / (1 + overhead) - weights_bytes(spec, dtype, weight_format, group_size)


def max_batch(
    spec: ModelSpec,
    *,
    dtype: str,
    kv_dtype: str | None = None,
    seq_len: int,
    gpu_memory_bytes: float,
    overhead: float = DEFAULT_OVERHEAD,
    n_gpus: int = 1,
    weight_format: str | None = None,
    group_size: int | None = None,
) -> int:
    """max batch = floor(KV budget / (cached tokens(s) x KV per token)); 0 when the weights alone do not fit."""
    budget = kv_budget_bytes(spec, dtype, gpu_memory_bytes, overhead, n_gpus, weight_format, group_size)
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
    weight_format: str | None = None,
    group_size: int | None = None,
) -> MaxSeqLen:
    """max s = largest s <= context length with batch x cached tokens(s) x KV per token <= KV budget
    (solved by bisection, since a sliding window makes the cache piecewise linear in s)."""
    budget = kv_budget_bytes(spec, dtype, gpu_memory_bytes, overhead, n_gpus, weight_format, group_size)
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
    when one exists (n <= heads); past the head count tensor parallel stops and `plan_gpus` adds replicas."""
    n = max(1, math.ceil(total_bytes / positive_float("GPU memory", gpu_memory_bytes)))
    if n_heads and n <= n_heads:
        while n_heads % n:
            n += 1
    return n


@dataclass(frozen=True)
class GpuPlan:
    """How many GPUs a load needs and how they would be used: tensor parallel within a replica (a count
    that divides the attention heads, at most the head count), replicas for the rest of the batch."""

    memory_gpus: int  # ceil(total / memory per GPU): memory alone, ignoring how the model splits
    tensor_parallel: (
        int  # GPUs per replica (divides the heads); 0 when not even one sequence fits on n_heads GPUs
    )
    replicas: int  # copies of the model, each serving batch_per_replica sequences
    batch_per_replica: int
    gpus: int  # tensor_parallel x replicas (or memory_gpus when only pipeline stages can help)
    pipeline_needed: bool  # the weights + one sequence do not fit even split over every head

    def sentence(self, n_heads: int) -> str:
        if self.pipeline_needed:
            return (
                f"Even split over all {n_heads} heads (tensor parallel's limit) one sequence does not fit: "
                f"it takes pipeline stages (layers on different GPUs) on top, about {self.gpus} GPUs in all."
            )
        if self.replicas == 1:
            if self.gpus == 1:
                return "One GPU holds it all."
            return f"{self.gpus} GPUs in tensor parallel ({self.gpus} divides the {n_heads} heads)."
        capped = self.memory_gpus > n_heads
        each = "one GPU" if self.tensor_parallel == 1 else f"{self.tensor_parallel} GPUs in tensor parallel"
        return (
            (
                f"Tensor parallel cannot split {n_heads} heads over more than {n_heads} GPUs. "
                if capped
                else ""
            )
            + f"{self.replicas} replicas of {each}, each serving up to {self.batch_per_replica} sequences: "
            f"{self.gpus} GPUs."
        )


def plan_gpus(
    spec: ModelSpec,
    *,
    dtype: str,
    kv_dtype: str,
    batch: int,
    seq_len: int,
    gpu_memory_bytes: float,
    overhead: float = DEFAULT_OVERHEAD,
    weight_format: str | None = None,
    group_size: int | None = None,
) -> GpuPlan:
    """For each t dividing the heads (tensor parallel splits heads evenly, so t <= heads): sequences per
    replica = floor((t x memory / (1 + overhead) - weights) / KV per sequence), replicas = ceil(batch /
    that), GPUs = t x replicas; the plan is the t with the fewest GPUs (the smaller t on a tie: less
    communication). With no t that holds one sequence, pipeline stages are needed."""
    w = weights_bytes(spec, dtype, weight_format, group_size)
    per_seq = kv_cache_bytes(spec, kv_dtype, 1, seq_len)
    total = (w + batch * per_seq) * (1 + overhead)
    memory_gpus = gpus_needed(total, gpu_memory_bytes)
    best: GpuPlan | None = None
    for t in (d for d in range(1, spec.n_head + 1) if spec.n_head % d == 0):
        room = t * gpu_memory_bytes / (1 + overhead) - w
        fit = int(room // per_seq) if room > 0 else 0
        if fit >= 1:
            per_replica = min(batch, fit)
            replicas = math.ceil(batch / per_replica)
            plan = GpuPlan(memory_gpus, t, replicas, per_replica, t * replicas, False)
            if best is None or plan.gpus < best.gpus:
                best = plan
    if best is not None:
        return best
    return GpuPlan(memory_gpus, 0, 1, batch, max(memory_gpus, spec.n_head + 1), True)
