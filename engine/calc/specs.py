"""What the calculators know about a model and a GPU: two frozen dataclasses and their loaders.

`ModelSpec` holds the architecture numbers (from a preset in engine/data/architectures.toml, a Hugging
Face config.json dict, or raw numbers); `GPUSpec` holds peak FLOP/s per precision, memory bandwidth and
capacity, each with its source (engine/data/gpus.toml, vendor datasheets). Standard library only.

Layer layouts follow the Hugging Face modelling code (modeling_gpt_neo.py, modeling_gpt2.py,
modeling_llama.py); `ArchTraits` says where they differ (biases, norm type, gated MLP, learned positions).
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from engine.core.dtypes import BYTES_PER_ELEMENT
from engine.core.errors import InvalidParameterError, UnknownModelError
from engine.core.spec import Spec, option

T = TypeVar("T")

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
PRECISIONS: tuple[str, ...] = tuple(BYTES_PER_ELEMENT)
GIB = 2**30  # memory as nvidia-smi and the serving engines print it (GiB)


@dataclass(frozen=True)
class ArchTraits:
    """How one family's decoder layer is built; each flag changes the parameter count or the operators."""

    qkv_bias: bool  # GPT-2's c_attn and Qwen2's q/k/v carry biases; GPT-Neo's and Llama's do not
    out_bias: bool  # GPT-Neo's out_proj has a bias; Llama's o_proj does not
    mlp_bias: bool
    norm_params_per_hidden: int  # LayerNorm: weight + bias = 2; RMSNorm: weight = 1; no affine: 0
    gated_mlp: bool  # SwiGLU/GeGLU (gate, up, down) versus a plain MLP (fc, proj)
    learned_positions: bool  # a wpe table of (context + offset) x hidden; RoPE and ALiBi have no parameters
    scores_fp32: bool  # GPT-Neo casts q and k to float32 before QK^T, so its scores are 4 bytes each
    norms_per_layer: int = 2  # GPT-J, Phi and Falcon-7B's parallel block have one norm per layer
    parallel_attn: bool = False  # attention and MLP read the same normed input (GPT-J, NeoX, Phi, Falcon)
    lm_head_bias: bool = False  # GPT-J and Phi
    position_offset: int = 0  # OPT's learned positions table has 2 extra rows
    embed_norm: bool = False  # BLOOM's word_embeddings_layernorm
    final_norm: bool = True
    qk_norm: bool = False  # Qwen3/OLMo-2 normalise each head's q and k (RMSNorm of head_dim, twice per layer)
    attn_sinks: bool = False  # gpt-oss: one learned sink logit per head per layer
    router_bias: bool = False  # gpt-oss's router Linear has a bias


_LN_BIASED = ArchTraits(True, True, True, 2, False, False, False)
ARCH_TRAITS: dict[str, ArchTraits] = {
    "gpt_neo": ArchTraits(False, True, True, 2, False, True, True),
    "gpt2": ArchTraits(True, True, True, 2, False, True, False),
    "llama": ArchTraits(False, False, False, 1, True, False, False),
    "qwen2": ArchTraits(True, False, False, 1, True, False, False),
    "gpt_neox": replace(_LN_BIASED, parallel_attn=True),
    "gptj": ArchTraits(False, False, True, 2, False, False, False, 1, True, lm_head_bias=True),
    "opt": replace(_LN_BIASED, learned_positions=True, position_offset=2),
    "bloom": replace(_LN_BIASED, embed_norm=True),
    "falcon": ArchTraits(False, False, False, 2, False, False, False, 1, True),
    "phi": replace(_LN_BIASED, norms_per_layer=1, parallel_attn=True, lm_head_bias=True),
    "qwen3": ArchTraits(False, False, False, 1, True, False, False, qk_norm=True),
    "gpt_oss": ArchTraits(
        True, True, True, 1, True, False, False, attn_sinks=True, router_bias=True
    ),  # biases on q/k/v/o and on every expert; the MLP's bias flag is the experts'
}


@dataclass(frozen=True)
class ParamCount:
    """Parameters per component; tied weights are counted once (in `embedding`, `head` is then 0)."""

    embedding: int  # token embeddings (+ learned positions, + OPT's project_in/out)
    attention: int  # Q, K, V, output projections with their biases, all layers
    mlp: int  # every expert's MLP, all layers
    router: int  # MoE gate, all layers (0 for a dense model)
    norms: int  # every norm: per layer, final, embedding norm
    head: int  # lm_head (+ bias) when not tied to the embeddings
    total: int
    active: int  # per token: total minus the experts a token does not visit
    matmul: int  # parameters in a matmul each token (attention + MLP of the active experts + router + head)
    source: str  # "meta device" (the real class) or "formula"

    def rows(self) -> list[tuple[str, int]]:
        return [
            ("embedding", self.embedding),
            ("attention", self.attention),
            ("MLP" + (" (all experts)" if self.router else ""), self.mlp),
            ("router", self.router),
            ("norms", self.norms),
            ("head", self.head),
        ]


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's shape. Counts are per model; sizes are elements, not bytes."""

    name: str
    arch: str  # key of ARCH_TRAITS
    n_layer: int
    hidden: int
    n_head: int
    n_kv_head: int  # < n_head for grouped-query attention, 1 for multi-query
    head_dim: int
    intermediate: int  # MLP inner width (one expert's, for a mixture of experts)
    vocab: int
    context_length: int
    tied_embeddings: bool
    sliding_window: int | None = None  # tokens a windowed layer attends to
    window_layers: int = 0  # how many layers use the window
    window_evicts: bool = False  # True: a rolling cache keeps only `sliding_window` tokens (Mistral)
    params_override: int | None = None  # raw input: a parameter count given by the user
    source: str = ""
    notes: tuple[str, ...] = ()
    n_experts: int = 1  # MLP experts per layer (Mixtral: 8)
    experts_per_token: int = 1  # experts each token is routed to (Mixtral: 2)
    embed_dim: int | None = None  # OPT's word_embed_proj_dim when it differs from hidden
    attn_layers: int | None = None  # layers with attention (and a KV cache); None = all
    layout: ArchTraits | None = None  # this config's flags, when they differ from the family's defaults
    assumptions: tuple[str, ...] = ()  # what the figures rest on that the config does not say
    exact: ParamCount | None = None  # the count of the real class on the meta device (engine.arch.meta)
    # Mixture-of-experts layouts beyond Mixtral's (every layer E experts of `intermediate`):
    moe_layers: int | None = None  # layers whose MLP is experts; None = all (when n_experts > 1)
    dense_intermediate: int | None = None  # the MLP width of the other layers (DeepSeek's first_k_dense)
    shared_intermediate: int = 0  # always-on shared expert(s), summed width (Qwen2-MoE, DeepSeek)
    shared_expert_gate: bool = False  # Qwen2-MoE gates its shared expert with a Linear(h, 1)
    # Multi-head latent attention (DeepSeek-V2/V3): the cache holds one latent of kv_lora_rank + qk_rope_head_dim
    # per token per layer; head_dim is the q/k head width (nope + rope), v_head_dim the value head's.
    kv_lora_rank: int = 0  # 0: ordinary attention
    q_lora_rank: int = 0  # 0: a plain q_proj
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    hub_id: str = ""  # the Hugging Face repository (what `vllm serve` loads), when known
    checkpoint_dtype: str = (
        ""  # the checkpoint's precision as its config states it (torch_dtype): "bf16", ...
    )

    @property
    def traits(self) -> ArchTraits:
        return self.layout or ARCH_TRAITS[self.arch]

    @property
    def q_dim(self) -> int:
        return self.n_head * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_head * self.head_dim

    def _layers(self, subset: int | None) -> int:
        """All layers unless the config counts a subset (attn_layers, moe_layers: None = all)."""
        return self.n_layer if subset is None else subset

    @property
    def kv_layers(self) -> int:
        return self._layers(self.attn_layers)

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 1

    @property
    def expert_layers(self) -> int:
        """Layers whose MLP is a set of experts (all of them for Mixtral, L - first_k_dense for DeepSeek)."""
        return self._layers(self.moe_layers) if self.is_moe else 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def attention_kind(self) -> str:
        if self.n_kv_head == self.n_head:
            kind = "multi-head (MHA)"
        elif self.n_kv_head == 1:
            kind = "multi-query (MQA)"
        else:
            kind = f"grouped-query (GQA, {self.n_head // self.n_kv_head} query heads per KV head)"
        if self.is_moe:
            kind += f"; mixture of {self.n_experts} experts, {self.experts_per_token} per token"
        return kind


def count_words(source: str) -> str:
    """How a parameter count was made, as a page says it: "meta device" is the model's real transformers class built
    on PyTorch's meta device (no weights loaded), "formula" the architecture's formula."""
    if source == "meta device":
        return "counted exactly from the model's own code, built without loading any weights"
    return "counted by the architecture's formula"


@dataclass(frozen=True)
class GPUSpec:
    """Peak figures of one accelerator. FLOP/s are dense (not sparse); bytes are decimal (1 GB = 1e9 B)."""

    key: str
    name: str
    memory_bytes: float
    bandwidth_bytes_per_s: float
    # the two mappings are compared but not hashed, so a GPU (and a timing Setup holding it) can key a cache
    peak_flops: Mapping[str, float] = field(hash=False)  # precision -> FLOP/s (int8 entries are OP/s)
    sources: Mapping[str, str] = field(default_factory=dict, hash=False)  # figure -> where it comes from
    notes: str = ""
    interconnect: str = ""  # "PCIe Gen3 x16", "NVLink 4"; empty when unknown (this machine)
    interconnect_bytes_per_s: float = 0.0  # one direction: the datasheet's bidirectional figure / 2

    def flops_for(self, dtype: str) -> float:
        """Peak FLOP/s for math in `dtype`. Weight-only int8/int4 formats dequantize to fp16 before the
        matmul, so they use the fp16 peak; fp8 runs on fp8 tensor cores where the GPU has them (Ada, Hopper,
        Blackwell, MI300X) and dequantizes to fp16 elsewhere; a precision without native support falls back
        to fp32."""
        key = (
            "fp16"
            if dtype in ("int8", "int4") or (dtype == "fp8" and "fp8" not in self.peak_flops)
            else dtype
        )
        if key in self.peak_flops:
            return self.peak_flops[key]
        if "fp32" in self.peak_flops:
            return self.peak_flops["fp32"]
        return max(self.peak_flops.values())

    def flops_source(self, dtype: str) -> str:
        key = (
            "fp16"
            if dtype in ("int8", "int4") or (dtype == "fp8" and "fp8" not in self.peak_flops)
            else dtype
        )
        if key in self.peak_flops:
            return self.sources.get(f"{key}_tflops", self.sources.get("compute", ""))
        return f"{self.name} has no native {key} peak listed; the fp32 peak is used"

    def ridge(self, dtype: str = "fp16") -> float:
        """Ridge point (ops/byte) = peak FLOP/s / bandwidth: kernels below it are memory-bound."""
        return self.flops_for(dtype) / self.bandwidth_bytes_per_s


# ---------------------------------------------------------------- validation helpers


def positive_int(name: str, value: Any, *, hint: str = "") -> int:
    """Reject zero, negative, fractional, NaN and absurd sizes with a message saying what to do."""
    if isinstance(value, bool) or value is None:
        raise InvalidParameterError(f"{name} must be a positive whole number, got {value!r}. {hint}".strip())
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"{name} must be a positive whole number, got {value!r}. {hint}".strip()
        ) from None
    if not math.isfinite(f) or f <= 0 or f != int(f):
        raise InvalidParameterError(f"{name} must be a positive whole number, got {value!r}. {hint}".strip())
    if f > 1e15:
        raise InvalidParameterError(f"{name}={value!r} is absurdly large; check the units. {hint}".strip())
    return int(f)


def positive_float(name: str, value: Any, *, allow_zero: bool = False, hint: str = "") -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise InvalidParameterError(f"{name} must be a number, got {value!r}. {hint}".strip()) from None
    if not math.isfinite(f) or f < 0 or (f == 0 and not allow_zero):
        need = "zero or more" if allow_zero else "greater than zero"
        raise InvalidParameterError(f"{name} must be a finite number {need}, got {value!r}. {hint}".strip())
    return f


def check_precision(name: str, dtype: str) -> str:
    from engine.core.dtypes import normalize

    try:
        return normalize(dtype)
    except ValueError:
        raise InvalidParameterError(
            f"unknown {name} {dtype!r}; choose one of {', '.join(PRECISIONS)}"
        ) from None


SIZE_FIELDS = (
    "n_layer",
    "hidden",
    "n_head",
    "n_kv_head",
    "head_dim",
    "intermediate",
    "vocab",
    "context_length",
)
MAX_WIDTH = (
    10**7
)  # no real layer is 10 million wide; a hidden size of 10^9 is a typo, and its count overflows sense
MAX_LAYERS = 1000  # as the page's raw-number field allows
MAX_VOCAB = 10_000_000


_MOST = {
    "n_layer": (MAX_LAYERS, "the deepest real models have under 200 layers"),
    "vocab": (MAX_VOCAB, "the largest real vocabularies are under 10^6 tokens"),
}


def not_absurd(attr: str, value: int) -> None:
    """Refuse a layer count or vocabulary no model has (a config's typo), before anything is built per layer."""
    most, real = _MOST[attr]
    if value > most:
        raise InvalidParameterError(
            f"{attr}={value:,} is absurdly large ({real}; the calculator takes up to {most:,}); check the config's "
            "numbers"
        )


def validate_spec(spec: ModelSpec, *, sizes: bool = True) -> ModelSpec:
    """Check a shape once, where it enters: each size a positive whole number (`sizes=False` when the
    reader already checked them one by one), then the relations between them."""
    hint = f"Check the numbers of model {spec.name!r}."
    if sizes:
        for attr in SIZE_FIELDS:
            positive_int(attr, getattr(spec, attr), hint=hint)
    for attr in ("hidden", "intermediate", "head_dim"):
        if getattr(spec, attr) > MAX_WIDTH:
            raise InvalidParameterError(
                f"{attr}={getattr(spec, attr):,} is absurdly large (the widest real models are under 10^5); "
                "check the config's numbers"
            )
    not_absurd("n_layer", spec.n_layer)
    not_absurd("vocab", spec.vocab)
    if spec.arch not in ARCH_TRAITS:
        raise InvalidParameterError(
            f"unknown layer layout {spec.arch!r}; choose one of {', '.join(ARCH_TRAITS)}"
        )
    if spec.n_head % spec.n_kv_head:
        raise InvalidParameterError(
            f"{spec.n_head} query heads cannot be grouped over {spec.n_kv_head} KV heads; "
            "KV heads must divide the query heads (equal for MHA, 1 for MQA)."
        )
    if not 1 <= spec.experts_per_token <= spec.n_experts:
        raise InvalidParameterError(
            f"experts per token ({spec.experts_per_token}) must be between 1 and the experts ({spec.n_experts})"
        )
    if spec.sliding_window is not None:
        positive_int("sliding_window", spec.sliding_window, hint=hint)
    if not 0 <= spec.window_layers <= spec.n_layer:
        raise InvalidParameterError(f"window_layers must be between 0 and n_layer ({spec.n_layer})")
    if spec.attn_layers is not None and not 0 <= spec.attn_layers <= spec.n_layer:
        raise InvalidParameterError(f"attention layers must be between 0 and n_layer ({spec.n_layer})")
    if spec.moe_layers is not None and not 0 <= spec.moe_layers <= spec.n_layer:
        raise InvalidParameterError(f"MoE layers must be between 0 and n_layer ({spec.n_layer})")
    if spec.is_mla and not 0 < spec.qk_rope_head_dim < spec.head_dim:
        raise InvalidParameterError("latent attention needs 0 < qk_rope_head_dim < the q/k head dim")
    if spec.params_override is not None:
        positive_int("params", spec.params_override, hint=hint)
    return spec


# ---------------------------------------------------------------- models


def _spec_from_table(key: str, row: Mapping[str, Any]) -> ModelSpec:
    fields_ = dict(row)
    fields_.setdefault("name", key)
    fields_.pop("params_published", None)
    fields_.pop("hf_config", None)
    fields_["notes"] = tuple(fields_.get("notes", ()))
    return validate_spec(ModelSpec(**fields_))


def load_architecture_table(path: Path | None = None) -> dict[str, dict[str, Any]]:
    with (path or DATA_DIR / "architectures.toml").open("rb") as f:
        return tomllib.load(f)


def load_model_presets(path: Path | None = None) -> dict[str, ModelSpec]:
    """Every preset of engine/data/architectures.toml as a ModelSpec, keyed by its name."""
    return {key: _spec_from_table(key, row) for key, row in load_architecture_table(path).items()}


def published_params(key: str) -> int | None:
    """The parameter count the preset's source publishes (for the tests and the page's check)."""
    return load_architecture_table().get(key, {}).get("params_published")


def _one_of(table: Mapping[str, T], key: str, error: type[Exception], message: str) -> T:
    """table[key], else `error` with `message`, whose {key} and {known} name what was asked and what there is."""
    if key not in table:
        raise error(message.format(key=key, known=", ".join(table)))
    return table[key]


UNKNOWN_MODEL = (
    "unknown model {key!r} for the calculator; choose one of {known}, "
    "or pass a config.json (--config PATH) or raw numbers"
)


def model_preset(name: str) -> ModelSpec:
    return _one_of(load_model_presets(), name, UnknownModelError, UNKNOWN_MODEL)


def spec_from_numbers(
    *,
    name: str = "custom",
    arch: str = "llama",
    n_layer: int,
    hidden: int,
    n_head: int,
    n_kv_head: int | None = None,
    head_dim: int | None = None,
    intermediate: int | None = None,
    vocab: int,
    context_length: int = 4096,
    tied_embeddings: bool = False,
    sliding_window: int | None = None,
    window_evicts: bool = True,
    params: int | None = None,
    n_experts: int = 1,
    experts_per_token: int = 1,
) -> ModelSpec:
    """Raw numbers typed by the user, in the layer layout `arch` (a key of ARCH_TRAITS: biases, norms, gated MLP
    or not). A given `params` overrides the count derived from the shape."""
    hidden = positive_int("hidden", hidden)
    n_head = positive_int("heads", n_head)
    assumed = (
        ()
        if params
        else (
            f"raw numbers: parameters from the formula with the {arch} layer layout; a real model may differ in "
            "biases, norms or extra tensors",
        )
    )
    return validate_spec(  # each size was checked as it was read above
        ModelSpec(
            name=name,
            arch=arch,
            n_layer=positive_int("layers", n_layer),
            hidden=hidden,
            n_head=n_head,
            n_kv_head=positive_int("KV heads", n_kv_head or n_head),
            head_dim=positive_int("head_dim", head_dim or hidden // n_head),
            intermediate=positive_int("intermediate", intermediate or 4 * hidden),
            vocab=positive_int("vocab", vocab),
            context_length=positive_int("context length", context_length),
            tied_embeddings=tied_embeddings,
            sliding_window=sliding_window or None,
            window_layers=positive_int("layers", n_layer) if sliding_window else 0,
            window_evicts=bool(sliding_window) and window_evicts,
            params_override=params,
            source="raw numbers",
            n_experts=positive_int("experts", n_experts),
            experts_per_token=positive_int("experts per token", experts_per_token),
            assumptions=assumed,
        ),
        sizes=False,
    )


# ---------------------------------------------------------------- GPUs

THIS_MACHINE = "this-machine"

# The short names engine/data/gpus.toml gives the public pages its quotes come from (its header pins each to a
# commit). A reader is shown the name, never the tag: (first mention, later mentions in the same text).
SOURCE_NAMES: dict[str, tuple[str, str]] = {
    "MODAL": (
        "Modal's list of nvidia-smi totals (github.com/modal-labs/modal-client, pull request 2797)",
        "Modal's list",
    ),
    "GSPEC": (
        "the gpu-specs table of NVIDIA datasheets (github.com/winston-zhang-orz/gpu-specs)",
        "the gpu-specs table",
    ),
    "GDS": (
        "the gpu-datasheet summary of NVIDIA datasheets (github.com/astroC86/gpu-datasheet)",
        "the gpu-datasheet summary",
    ),
    "GPUP": ("gpu_poor's GPU table (github.com/RahulSChand/gpu_poor)", "gpu_poor's table"),
    "MLI": (
        "Mu Li's transformers-benchmarks table (github.com/mli/transformers-benchmarks)",
        "Mu Li's table",
    ),
    "LLMA": ("llm-analysis's GPU configs (github.com/cli99/llm-analysis)", "llm-analysis"),
    "LLMV": ("LLM-Viewer's hardware table (github.com/hahnyuan/LLM-Viewer)", "LLM-Viewer"),
}
_SOURCE_TAG = re.compile(r"\b(" + "|".join(SOURCE_NAMES) + r")\b( [\w.-]+\.json)?")


def plain_source(text: str) -> str:
    """`text` with the catalogue's short source names spelled out: the first mention with its address, unless
    it sits in an aside (inside brackets) or a possessive, where the address would break the sentence."""
    said: set[str] = set()

    def name(m: re.Match[str]) -> str:
        first, again = SOURCE_NAMES[m[1]]
        before = text[: m.start()]
        aside = before.count("(") > before.count(")") or text.startswith("'s", m.end())
        out = again if m[1] in said or aside else first
        said.add(m[1])
        return out + (f", {m[2].strip()}" if m[2] else "")

    return _SOURCE_TAG.sub(name, text)


def _gpu_from_row(key: str, row: Mapping[str, Any]) -> GPUSpec:
    peaks = {}
    sources = {
        "memory": row.get("memory_source", row["source"]),
        "bandwidth": row.get("bandwidth_source", row["source"]),
        "interconnect": row.get("interconnect_source", ""),
    }
    for dtype in ("fp32", "fp16", "bf16", "fp8", "int8"):
        unit = "tops" if dtype == "int8" else "tflops"
        value = row.get(f"{dtype}_{unit}")
        if value is not None:
            peaks[dtype] = float(value) * 1e12
            sources[f"{dtype}_tflops"] = row.get(f"{dtype}_source", row["source"])
    memory = float(row["memory_gb"]) * 1e9
    if row.get(
        "memory_mib_driver"
    ):  # what the driver reports (and vLLM budgets from), not the datasheet's GB
        memory = float(row["memory_mib_driver"]) * 2**20
        sources["memory"] = (
            f"{row['memory_mib_driver']} MiB as the driver reports it: {row.get('memory_mib_driver_source', '')}"
        )
    else:
        sources["memory"] += f" ({row['memory_gb']} GB as the datasheet prints it: no driver figure found)"
    sources = {figure: plain_source(text) for figure, text in sources.items()}
    return GPUSpec(
        key=key,
        name=row["name"],
        memory_bytes=memory,
        bandwidth_bytes_per_s=float(row["bandwidth_gb_s"]) * 1e9,
        peak_flops=peaks,
        sources=sources,
        notes=plain_source(row.get("notes", "")),
        interconnect=row.get("interconnect", ""),
        interconnect_bytes_per_s=float(row.get("interconnect_gb_s", 0.0)) * 1e9 / 2,
    )


def load_gpu_catalog(path: Path | None = None) -> dict[str, GPUSpec]:
    """engine/data/gpus.toml as GPUSpecs, keyed by their short name (t4, t4-datasheet, a100-80gb...)."""
    with (path or DATA_DIR / "gpus.toml").open("rb") as f:
        raw = tomllib.load(f)
    return {key: _gpu_from_row(key, row) for key, row in raw.items()}


UNKNOWN_GPU = (
    "unknown GPU {key!r}; choose one of {known} or "
    + THIS_MACHINE
    + " (list them with `python -m engine gpus`)"
)


def gpu_spec(key: str) -> GPUSpec:
    return _one_of(load_gpu_catalog(), key, InvalidParameterError, UNKNOWN_GPU)


def custom_gpu(
    base: GPUSpec,
    *,
    memory_bytes: float | None = None,
    bandwidth_bytes_per_s: float | None = None,
    flops: Mapping[str, float] | None = None,
) -> GPUSpec:
    """The same GPU with user-edited figures; every edited figure's source says it was edited."""
    sources = dict(base.sources)
    peaks = dict(base.peak_flops)
    changes: dict[str, Any] = {}
    if memory_bytes is not None and memory_bytes != base.memory_bytes:
        changes["memory_bytes"] = positive_float("GPU memory", memory_bytes)
        sources["memory"] = "edited by the user"
    if bandwidth_bytes_per_s is not None and bandwidth_bytes_per_s != base.bandwidth_bytes_per_s:
        changes["bandwidth_bytes_per_s"] = positive_float("memory bandwidth", bandwidth_bytes_per_s)
        sources["bandwidth"] = "edited by the user"
    for dtype, value in (flops or {}).items():
        if peaks.get(dtype) != value:
            peaks[dtype] = positive_float(f"{dtype} peak FLOP/s", value)
            sources[f"{dtype}_tflops"] = "edited by the user"
    return replace(base, peak_flops=peaks, sources=sources, **changes)


def _figure(help: str, lo: float, hi: float, label: str) -> Any:
    """One GPUFigures field (engine.core.spec.option): a float within what a real GPU can be; None, the GPU's own."""
    return option(None, help, kind=float, lo=lo, hi=hi, label=label)


@dataclass(frozen=True)
class GPUFigures(Spec):
    """The figures of one GPU a user may edit (`custom_gpu`: any GPU from its datasheet), in GPUSpec's base units,
    with what a real GPU can be: the one source of the Memory & cost page's bounds. Each default is None, the
    GPU's own figure (its catalog row, or this machine's measurement)."""

    memory_bytes: float | None = _figure("memory per GPU, as the driver reports it", 1e8, 1e13, "GPU memory")
    bandwidth_bytes_per_s: float | None = _figure(
        "memory bandwidth (datasheet)", 1e8, 1e14, "memory bandwidth"
    )
    peak_flops: float | None = _figure(
        "dense peak FLOP/s in the precision the math runs in (datasheet, not sparse)",
        1e8,
        1e17,
        "peak FLOP/s",
    )
    interconnect_bytes_per_s: float | None = _figure(
        "GPU-to-GPU link, one direction (the datasheet's both-ways figure / 2); 0: none",
        0,
        5e13,
        "GPU-to-GPU link",
    )


INTERCONNECTS = {  # kind -> (name, GB/s both ways) when a custom GPU gives no figure
    "nvlink": ("NVLink", 900.0),  # NVLink 4 (H100 SXM datasheet: 900 GB/s)
    "pcie": ("PCIe Gen4 x16", 64.0),  # PCIe Gen4 x16: 64 GB/s both ways
    "none": ("none", 0.0),
}


def custom_gpu_from_figures(
    *,
    memory_gib: float,
    bandwidth_gb_s: float,
    tflops: float,
    interconnect: str = "pcie",
    name: str = "custom GPU",
) -> GPUSpec:
    """A GPU outside the catalogue from its figures: memory in GiB (as nvidia-smi reports it), bandwidth in GB/s,
    dense fp16/bf16 TFLOPS, and the link between GPUs as `nvlink`, `pcie` or `none`, optionally `kind:GB/s`."""
    memory = positive_float("GPU memory (GiB)", memory_gib, hint="Give the memory one GPU has, e.g. 80.")
    bandwidth = positive_float(
        "GPU memory bandwidth (GB/s)", bandwidth_gb_s, hint="e.g. 3350 for an H100 SXM."
    )
    peak = positive_float("GPU TFLOPS", tflops, hint="the dense fp16/bf16 figure, e.g. 989 for an H100 SXM.")
    kind, _, figure = interconnect.strip().lower().partition(":")
    if kind not in INTERCONNECTS:
        raise InvalidParameterError(
            f"unknown interconnect {interconnect!r}: give nvlink, pcie or none, optionally with GB/s (nvlink:900)"
        )
    link_name, link = INTERCONNECTS[kind]
    if figure:
        link = positive_float("interconnect bandwidth (GB/s)", figure)
    src = "given by the user"
    return GPUSpec(
        key="custom",
        name=name,
        memory_bytes=memory * GIB,
        bandwidth_bytes_per_s=bandwidth * 1e9,
        peak_flops={"fp16": peak * 1e12, "bf16": peak * 1e12, "fp32": peak * 1e12 / 8},
        sources={
            "memory": src,
            "bandwidth": src,
            "fp16_tflops": src,
            "bf16_tflops": src,
            "interconnect": src,
            "fp32_tflops": "assumed: an eighth of the fp16 tensor peak",
        },
        interconnect=link_name,
        interconnect_bytes_per_s=link * 1e9 / 2,
    )
