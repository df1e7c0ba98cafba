"""Memory: parameters, weights, KV cache, overhead, fit, the largest batch and sequence, GPUs needed.

Sources: the parameter count follows the Hugging Face modelling code layer by layer (checked against the
real model on the meta device in tests/test_calc_params.py); the KV cache is 2 x layers x kv_heads x
head_dim x bytes per token (NVIDIA, "Mastering LLM Techniques: Inference Optimization"); the overhead is
the chapter's x1.2 rule of thumb (accelerate's docs: "add up to 20%" for inference).

Each public function's docstring begins with its formula; pages show it with `formula_of`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from engine.calc import quant
from engine.calc.quant import format_scope, quant_format_name
from engine.calc.quant import weight_format as quant_weight_format
from engine.calc.specs import ModelSpec, ParamCount, check_precision, positive_float, positive_int
from engine.core.dtypes import BYTES_PER_ELEMENT
from engine.core.errors import InvalidParameterError

DEFAULT_OVERHEAD = 0.20  # the chapter's x1.2; accelerate: "add up to 20%"


def formula_of(fn: object) -> str:
    """The formula paragraph of a calculator function's docstring (its first paragraph)."""
    doc = (getattr(fn, "__doc__", "") or "").strip()
    return " ".join(doc.split("\n\n")[0].split())


def attention_weights(spec: ModelSpec) -> list[tuple[str, int, int]]:
    """One layer's attention matrices as (name, out features, in features): Q, K, V, O; with latent attention
    (DeepSeek-V2/V3) q_a/q_b (or q), kv_a (latent + rope key), kv_b (latent -> keys and values), o."""
    h, H, d = spec.hidden, spec.n_head, spec.head_dim
    if not spec.is_mla:
        return [("Q", spec.q_dim, h), ("K", spec.kv_dim, h), ("V", spec.kv_dim, h), ("O", h, spec.q_dim)]
    nope, v = d - spec.qk_rope_head_dim, spec.v_head_dim
    q = (
        [("Q a", spec.q_lora_rank, h), ("Q b", H * d, spec.q_lora_rank)]
        if spec.q_lora_rank
        else [("Q", H * d, h)]
    )
    return [
        *q,
        ("KV a", spec.kv_lora_rank + spec.qk_rope_head_dim, h),
        ("KV b", H * (nope + v), spec.kv_lora_rank),
        ("O", h, H * v),
    ]


def _mlp_one(spec: ModelSpec, inter: int) -> tuple[int, int]:
    """(weights, weights + biases) of one MLP (or one expert) of width `inter`."""
    t, h = spec.traits, spec.hidden
    w = (3 if t.gated_mlp else 2) * h * inter
    return w, w + ((2 * inter if t.gated_mlp else inter) + h if t.mlp_bias else 0)


def count_params(spec: ModelSpec) -> ParamCount:
    """P = embedding + attention + MLP (+ experts) + router + norms + head, per component:
    embedding = V*e [+ (ctx + offset)*h learned positions] [+ 2*e*h OPT's project_in/out when e != h];
    attn = h*(H*d) + 2*h*(KV*d) + (H*d)*h [+ q/k/v biases H*d + 2*KV*d] [+ output bias h] [+ sinks H] (latent attention: its q_a/q_b, kv_a, kv_b and o matrices);
    mlp = 2*h*I (plain) or 3*h*I (gated) [+ biases I + h, or 2I + h gated]; an MoE layer has E experts of I
    [+ shared experts of I_s and Qwen2-MoE's gate h], a dense layer of an MoE model one MLP of I_dense;
    router = h*E [+ E bias] per MoE layer; norms = (norms per layer x L + final + embedding norm) x h x (2
    LayerNorm, 1 RMSNorm) [+ q/k norms 2*d, or latent attention's kv_a and q_a norms, per attention layer]; head = V*e [+ V bias], 0 when tied. Active = total - L_moe x (E - k) x expert.

    The formula of the layouts in engine/calc/hf_config.py; the page and the CLI use the count of the real
    class on the meta device when it could be built (`spec.exact`), and this where it could not."""
    t = spec.traits
    h, inter, L, V = spec.hidden, spec.intermediate, spec.n_layer, spec.vocab
    q, kv = spec.q_dim, spec.kv_dim
    e = spec.embed_dim or h
    attn_w = sum(o * i for _, o, i in attention_weights(spec))
    biases = 0 if spec.is_mla else (q + 2 * kv if t.qkv_bias else 0) + (h if t.out_bias else 0)
    attn = attn_w + biases
    attn += spec.n_head if t.attn_sinks else 0
    mlp_w, mlp_one = _mlp_one(spec, inter)
    Lm = spec.expert_layers
    E = spec.n_experts if spec.is_moe else 1
    router_one = (h * E + (E if t.router_bias else 0)) if spec.is_moe else 0
    shared_w, shared_one = _mlp_one(spec, spec.shared_intermediate) if spec.shared_intermediate else (0, 0)
    shared_one += h if spec.shared_expert_gate else 0
    dense_w, dense_one = _mlp_one(spec, spec.dense_intermediate or inter)
    if spec.is_moe:
        mlp = Lm * (E * mlp_one + shared_one) + (L - Lm) * dense_one
    else:
        mlp, Lm = L * mlp_one, 0
    LA = spec.kv_layers
    embedding = V * e
    if t.learned_positions:
        embedding += (spec.context_length + t.position_offset) * h
    if e != h:
        embedding += 2 * e * h  # project_in (e -> h) and project_out (h -> e), no bias
    norms = t.norm_params_per_hidden * h * (t.norms_per_layer * L + int(t.final_norm) + int(t.embed_norm))
    norms += 2 * spec.head_dim * LA if t.qk_norm else 0
    norms += (spec.kv_lora_rank + spec.q_lora_rank) * LA  # latent attention's kv_a (and q_a) norms
    head = 0 if spec.tied_embeddings else V * e + (V if t.lm_head_bias else 0)
    total = embedding + LA * attn + mlp + Lm * router_one + norms + head
    active = total - Lm * (E - spec.experts_per_token) * mlp_one
    matmul = LA * attn_w + V * e
    if spec.is_moe:
        matmul += Lm * (spec.experts_per_token * mlp_w + h * E + shared_w) + (L - Lm) * dense_w
    else:
        matmul += L * mlp_w
    if spec.params_override is not None:
        total = active = spec.params_override
    return ParamCount(
        embedding=embedding,
        attention=LA * attn,
        mlp=mlp,
        router=Lm * router_one,
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


def weight_matrices(spec: ModelSpec) -> list[tuple[str, int, int, int, str]]:
    """The matmul weights as (name, rows = out features, row length = in features, how many, module): what a
    weight format quantizes, `module` one of attention, mlp, expert, router, embedding, head. Tied embeddings
    appear once, as the embedding."""
    h, inter, L = spec.hidden, spec.intermediate, spec.n_layer
    e = spec.embed_dim or h
    LA = spec.kv_layers
    mats = [(name, o, i, LA, "attention") for name, o, i in attention_weights(spec)]

    def mlp(prefix: str, width: int, count: int, module: str) -> list[tuple[str, int, int, int, str]]:
        parts = [(f"{prefix}gate", width, h), (f"{prefix}up", width, h)] if spec.traits.gated_mlp else []
        parts = parts or [(f"{prefix}up", width, h)]
        return (
            [(n, o, i, count, module) for n, o, i in (*parts, (f"{prefix}down", h, width))] if count else []
        )

    if spec.is_moe:
        Lm = spec.expert_layers
        mats += mlp("expert ", inter, Lm * spec.n_experts, "expert")
        mats.append(("router", spec.n_experts, h, Lm, "router"))
        if spec.shared_intermediate:
            mats += mlp("shared expert ", spec.shared_intermediate, Lm, "mlp")
        mats += mlp("MLP ", spec.dense_intermediate or inter, L - Lm, "mlp")
    else:
        mats += mlp("MLP ", inter, L, "mlp")
    mats.append(("embedding", spec.vocab, e, 1, "embedding"))
    if not spec.tied_embeddings:
        mats.append(("head", spec.vocab, e, 1, "head"))
    return mats


GGUF_NORM_BYTES = 4  # GGUF keeps norms and biases in F32 (llama.cpp's convert script)


def _quantized(module: str, scope: str, tied: bool) -> bool:
    """Whether a matrix of `module` is stored in the format under `scope` (a tied head is the embedding)."""
    if scope == "all":
        return True
    if module in ("embedding", "head"):
        return scope == "linear+head" and module == "head"
    if module == "router":
        return False  # routers stay 16-bit in every format that serving engines load
    if scope == "experts":
        return module == "expert"
    if scope == "mlp":
        return module in ("mlp", "expert")
    return True  # linear, linear+head


def weights_bytes(
    spec: ModelSpec,
    dtype: str,
    weight_format: str | None = None,
    group_size: int | None = None,
    scope: str | None = None,
) -> float:
    """weights = P x bytes per parameter (fp32 4, fp16/bf16 2, fp8 1); with a quantized format, the sum over the
    weight matrices it covers of ceil(n / g) x (g x bits / 8 + scale + zero) (each format's own layout) + every other
    parameter at 16 bits (F32 for GGUF).

    Without a format, int8/int4 are bare storage sizes (1 and 0.5 B, no scales)."""
    if not weight_format:
        return params_of(spec) * BYTES_PER_ELEMENT[check_precision("weight precision", dtype)]
    quant_weight_format(weight_format)  # an unknown name is refused with the choices
    fmt, g = quant_format_name(weight_format, group_size)
    if g is not None:
        positive_int("group size", g)
    chosen = format_scope(weight_format, scope)
    total = params_of(spec)
    quantized = 0
    stored = 0.0
    for _name, rows, row_len, count, module in weight_matrices(spec):
        if count and _quantized(module, chosen, spec.tied_embeddings):
            quantized += rows * row_len * count
            stored += quant.tensor_bytes((rows, row_len), fmt, g) * count
    rest = GGUF_NORM_BYTES if chosen == "all" else BYTES_PER_ELEMENT["fp16"]
    return stored + (total - quantized) * rest


def kv_bytes_per_token(spec: ModelSpec, kv_dtype: str) -> float:
    """KV per token = 2 (K and V) x attention layers x kv_heads x head_dim x bytes per element (latent
    attention: layers x (kv_lora_rank + qk_rope_head_dim) x bytes, as vLLM caches it).

    Grouped-query and multi-query attention store only their KV heads (kv_heads < heads); head_dim is the
    config's own when it gives one (Gemma: 256); layers without attention keep no per-token cache."""
    b = BYTES_PER_ELEMENT[check_precision("KV precision", kv_dtype)]
    if spec.is_mla:  # one latent (kv_lora_rank + the rope key) per token per layer, K and V folded in
        return spec.kv_layers * (spec.kv_lora_rank + spec.qk_rope_head_dim) * b
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


@dataclass(frozen=True)
class Placement:
    """A model's weights on `n_gpus` GPUs of `gpu_memory_bytes` each, with `overhead` on top: what every memory
    question below (the fit, the KV budget, the largest batch or sequence, the GPU plan) is asked about."""

    spec: ModelSpec
    dtype: str
    gpu_memory_bytes: float
    kv_dtype: str | None = None  # default: the weights' precision
    overhead: float = DEFAULT_OVERHEAD
    n_gpus: int = 1
    weight_format: str | None = None
    group_size: int | None = None
    scope: str | None = None

    @property
    def cache_dtype(self) -> str:
        return self.kv_dtype or self.dtype

    def weights_bytes(self) -> float:
        return weights_bytes(self.spec, self.dtype, self.weight_format, self.group_size, self.scope)


def estimate_memory(p: Placement, *, batch: int, seq_len: int) -> MemoryEstimate:
    """total = (weights + KV) x (1 + overhead); per GPU = total / GPUs (tensor parallel splits weights and
    heads evenly); fits when per GPU <= the GPU's memory."""
    n_gpus = positive_int("GPUs", p.n_gpus)
    gpu_memory_bytes = positive_float("GPU memory", p.gpu_memory_bytes)
    if p.overhead > 10:
        raise InvalidParameterError(f"overhead {p.overhead!r} is a fraction (0.2 = 20%), not a percentage")
    w = p.weights_bytes()
    kv = kv_cache_bytes(p.spec, p.cache_dtype, batch, seq_len)
    ov = overhead_bytes(w, kv, p.overhead)
    total = w + kv + ov
    per_gpu = total / n_gpus
    return MemoryEstimate(
        params=params_of(p.spec),
        weights_bytes=w,
        kv_bytes_per_token=kv_bytes_per_token(p.spec, p.cache_dtype),
        kv_cache_bytes=kv,
        overhead_bytes=ov,
        total_bytes=total,
        per_gpu_bytes=per_gpu,
        gpu_memory_bytes=gpu_memory_bytes,
        n_gpus=n_gpus,
        fits=per_gpu <= gpu_memory_bytes,
        headroom_bytes=gpu_memory_bytes - per_gpu,
    )


def kv_budget_bytes(p: Placement) -> float:
    """KV budget = GPUs x memory / (1 + overhead) - weights (what is left for the cache)."""
    return p.n_gpus * p.gpu_memory_bytes / (1 + p.overhead) - p.weights_bytes()


def max_batch(p: Placement, *, seq_len: int) -> int:
    """max batch = floor(KV budget / (cached tokens(s) x KV per token)); 0 when the weights alone do not fit."""
    budget = kv_budget_bytes(p)
    per_seq = kv_cache_bytes(p.spec, p.cache_dtype, 1, seq_len)
    if budget <= 0:
        return 0
    return int(budget // per_seq)


@dataclass(frozen=True)
class MaxSeqLen:
    tokens: int  # 0 when not even one token fits
    limited_by: str  # "memory" or "context" (the model's context length)


def max_seq_len(p: Placement, *, batch: int) -> MaxSeqLen:
    """max s = largest s <= context length with batch x cached tokens(s) x KV per token <= KV budget
    (solved by bisection, since a sliding window makes the cache piecewise linear in s)."""
    budget = kv_budget_bytes(p)
    spec, kv_dtype = p.spec, p.cache_dtype

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
    """How many GPUs a load needs and how they would be used: tensor parallel within a replica, pipeline stages
    (layers on different GPUs) where a serving engine needs more than tensor parallel gives, replicas for the
    rest of the batch."""

    memory_gpus: int  # ceil(total / memory per GPU): memory alone, ignoring how the model splits
    tensor_parallel: int  # GPUs per pipeline stage; 0 when not even one sequence fits on any layout tried
    replicas: int  # copies of the model, each serving batch_per_replica sequences
    batch_per_replica: int
    gpus: (
        int  # tensor_parallel x pipeline_parallel x replicas (or memory_gpus when only more stages can help)
    )
    pipeline_needed: bool  # no layout tried holds the weights and one sequence
    pipeline_parallel: int = 1  # stages per replica

    @property
    def replica_gpus(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel

    def layout(self) -> str:
        """'2 GPUs in tensor parallel', '8 GPUs in tensor parallel x 2 pipeline stages', 'one GPU'."""
        if self.replica_gpus <= 1:
            return "one GPU"
        if self.pipeline_parallel == 1:
            return f"{self.tensor_parallel} GPUs in tensor parallel"
        if self.tensor_parallel <= 1:
            return f"{self.pipeline_parallel} pipeline stages of one GPU each"
        return (
            f"{self.tensor_parallel} GPUs in tensor parallel x {self.pipeline_parallel} pipeline stages "
            f"({self.replica_gpus} GPUs)"
        )

    def brief(self) -> str:
        """The layout in a few words, for a tile: 'one GPU', '2 in tensor parallel', '391 replicas x 3 GPUs'."""
        if self.pipeline_needed or self.tensor_parallel < 1:
            return "with pipeline stages"
        if self.replicas > 1:
            each = "1 GPU" if self.replica_gpus == 1 else f"{self.replica_gpus} GPUs"
            return f"{self.replicas:,} replicas x {each}"
        if self.replica_gpus == 1:
            return "one GPU"
        if self.pipeline_parallel == 1:
            return f"{self.tensor_parallel} in tensor parallel"
        return f"{self.tensor_parallel} tensor x {self.pipeline_parallel} pipeline"

    def describe(self) -> str:
        """The layout and its replicas: '3 replicas of one GPU, 5 sequences each'."""
        if self.replicas == 1:
            return self.layout()
        return f"{self.replicas:,} replicas of {self.layout()}, up to {self.batch_per_replica:,} sequences per replica"

    def sentence(self, n_heads: int) -> str:
        if self.pipeline_needed:
            return (
                f"Even split over all {n_heads} heads (tensor parallel's limit) one sequence does not fit: "
                f"it takes pipeline stages (layers on different GPUs) on top, about {self.gpus} GPUs in all."
            )
        if self.replicas == 1:
            return (
                "One GPU holds it all."
                if self.gpus == 1
                else f"{self.layout()[0].upper()}{self.layout()[1:]}."
            )
        capped = self.memory_gpus > n_heads
        return (
            f"Tensor parallel cannot split {n_heads} heads over more than {n_heads} GPUs. " if capped else ""
        ) + f"{self.describe()}: {self.gpus} GPUs."


def best_layout(
    holds: Callable[[int, int], int], layouts: Iterable[tuple[int, int]], *, batch: int, memory_gpus: int
) -> GpuPlan | None:
    """replicas = ceil(batch / sequences one replica holds), GPUs = tensor x pipeline x replicas; the plan is the
    layout with the fewest GPUs (on a tie fewer pipeline stages, then the smaller tensor parallel: less
    communication). `holds(tp, pp)`: sequences one replica of that layout holds at once (0: not even one)."""
    best: GpuPlan | None = None
    for tp, pp in layouts:
        fit = holds(tp, pp)
        if fit < 1:
            continue
        replicas = math.ceil(batch / min(batch, fit))
        per_replica = math.ceil(batch / replicas)
        plan = GpuPlan(memory_gpus, tp, replicas, per_replica, tp * pp * replicas, False, pp)
        if best is None or (plan.gpus, pp, tp) < (best.gpus, best.pipeline_parallel, best.tensor_parallel):
            best = plan
    return best


def head_divisors(spec: ModelSpec) -> list[int]:
    """Tensor-parallel sizes that split the attention heads evenly (t divides the heads, so t <= heads)."""
    return [d for d in range(1, spec.n_head + 1) if spec.n_head % d == 0]


def sequences_held(p: Placement, gpus: int, *, seq_len: int) -> int:
    """sequences = floor((GPUs x memory / (1 + overhead) - weights) / KV per sequence): what one replica on
    `gpus` GPUs holds at once (0 when the weights alone do not fit)."""
    room = gpus * p.gpu_memory_bytes / (1 + p.overhead) - p.weights_bytes()
    per_seq = kv_cache_bytes(p.spec, p.cache_dtype, 1, seq_len)
    return int(room // per_seq) if room > 0 else 0


def plan_gpus(p: Placement, *, batch: int, seq_len: int) -> GpuPlan:
    """For each t dividing the heads (tensor parallel splits heads evenly, so t <= heads): sequences per replica =
    floor((t x memory / (1 + overhead) - weights) / KV per sequence), replicas = ceil(batch / that), GPUs =
    t x replicas; the plan is the t with the fewest GPUs (the smaller t on a tie: less communication). With no t
    that holds one sequence, pipeline stages are needed. The placement's own GPU count is what the plan
    replaces, so it is not read."""
    spec = p.spec
    per_seq = kv_cache_bytes(spec, p.cache_dtype, 1, seq_len)
    memory_gpus = gpus_needed((p.weights_bytes() + batch * per_seq) * (1 + p.overhead), p.gpu_memory_bytes)
    best = best_layout(
        lambda t, _pp: sequences_held(p, t, seq_len=seq_len),
        ((t, 1) for t in head_divisors(spec)),
        batch=batch,
        memory_gpus=memory_gpus,
    )
    if best is not None:
        return best
    return GpuPlan(memory_gpus, 0, 1, batch, max(memory_gpus, spec.n_head + 1), True)
