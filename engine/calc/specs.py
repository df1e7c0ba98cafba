"""What the calculators know about a model and a GPU: two frozen dataclasses and their loaders.

`ModelSpec` holds the architecture numbers (from a preset in engine/data/architectures.toml, a Hugging
Face config.json dict, or raw numbers); `GPUSpec` holds peak FLOP/s per precision, memory bandwidth and
capacity, each with its source (engine/data/gpus.toml, from GPU_SPECS.md). Standard library only.

Layer layouts follow the Hugging Face modelling code (modeling_gpt_neo.py, modeling_gpt2.py,
modeling_llama.py); `ArchTraits` says where they differ (biases, norm type, gated MLP, learned positions).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.dtypes import BYTES_PER_ELEMENT
from engine.errors import InvalidParameterError, UnknownModelError

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
PRECISIONS: tuple[str, ...] = tuple(BYTES_PER_ELEMENT)


@dataclass(frozen=True)
class ArchTraits:
    """How one family's decoder layer is built; each flag changes the parameter count or the operators."""

    qkv_bias: bool  # GPT-2's c_attn and Qwen2's q/k/v carry biases; GPT-Neo's and Llama's do not
    out_bias: bool  # GPT-Neo's out_proj has a bias; Llama's o_proj does not
    mlp_bias: bool
    norm_params_per_hidden: int  # LayerNorm: weight + bias = 2; RMSNorm: weight = 1
    gated_mlp: bool  # SwiGLU (gate, up, down) versus GELU MLP (fc, proj)
    learned_positions: bool  # wpe table of context_length x hidden (GPT-2/GPT-Neo); RoPE has no parameters
    scores_fp32: bool  # GPT-Neo casts q and k to float32 before QK^T, so its scores are 4 bytes each


ARCH_TRAITS: dict[str, ArchTraits] = {
    "gpt_neo": ArchTraits(False, True, True, 2, False, True, True),
    "gpt2": ArchTraits(True, True, True, 2, False, True, False),
    "llama": ArchTraits(False, False, False, 1, True, False, False),
    "qwen2": ArchTraits(True, False, False, 1, True, False, False),
}
# model_type in config.json -> layout. Mistral's layer is Llama's (plus a sliding window).
MODEL_TYPE_TO_ARCH = {
    "gpt_neo": "gpt_neo",
    "gpt2": "gpt2",
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "qwen2",
}


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
    intermediate: int  # MLP inner width
    vocab: int
    context_length: int
    tied_embeddings: bool
    sliding_window: int | None = None  # tokens a windowed layer attends to
    window_layers: int = 0  # how many layers use the window
    window_evicts: bool = False  # True: a rolling cache keeps only `sliding_window` tokens (Mistral)
    params_override: int | None = None  # raw input: a parameter count given by the user
    source: str = ""
    notes: tuple[str, ...] = ()

    @property
    def traits(self) -> ArchTraits:
        return ARCH_TRAITS[self.arch]

    @property
    def q_dim(self) -> int:
        return self.n_head * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_head * self.head_dim

    @property
    def attention_kind(self) -> str:
        if self.n_kv_head == self.n_head:
            return "multi-head (MHA)"
        if self.n_kv_head == 1:
            return "multi-query (MQA)"
        return f"grouped-query (GQA, {self.n_head // self.n_kv_head} query heads per KV head)"


@dataclass(frozen=True)
class GPUSpec:
    """Peak figures of one accelerator. FLOP/s are dense (not sparse); bytes are decimal (1 GB = 1e9 B)."""

    key: str
    name: str
    memory_bytes: float
    bandwidth_bytes_per_s: float
    peak_flops: Mapping[str, float]  # precision -> FLOP/s (int8 entries are OP/s)
    sources: Mapping[str, str] = field(default_factory=dict)  # figure -> where it comes from
    notes: str = ""

    def flops_for(self, dtype: str) -> float:
        """Peak FLOP/s for math in `dtype`. Weight-only int8/int4 formats dequantize to fp16 before the
        matmul, so they use the fp16 peak; a precision without native support falls back to fp32."""
        key = "fp16" if dtype in ("int8", "int4") else dtype
        if key in self.peak_flops:
            return self.peak_flops[key]
        if "fp32" in self.peak_flops:
            return self.peak_flops["fp32"]
        return max(self.peak_flops.values())

    def flops_source(self, dtype: str) -> str:
        key = "fp16" if dtype in ("int8", "int4") else dtype
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
    from engine.dtypes import normalize

    try:
        return normalize(dtype)
    except ValueError:
        raise InvalidParameterError(
            f"unknown {name} {dtype!r}; choose one of {', '.join(PRECISIONS)}"
        ) from None


def validate_spec(spec: ModelSpec) -> ModelSpec:
    hint = f"Check the numbers of model {spec.name!r}."
    for attr in (
        "n_layer",
        "hidden",
        "n_head",
        "n_kv_head",
        "head_dim",
        "intermediate",
        "vocab",
        "context_length",
    ):
        positive_int(attr, getattr(spec, attr), hint=hint)
    if spec.arch not in ARCH_TRAITS:
        raise InvalidParameterError(
            f"unknown layer layout {spec.arch!r}; choose one of {', '.join(ARCH_TRAITS)}"
        )
    if spec.n_head % spec.n_kv_head:
        raise InvalidParameterError(
            f"{spec.n_head} query heads cannot be grouped over {spec.n_kv_head} KV heads; "
            "KV heads must divide the query heads (equal for MHA, 1 for MQA)."
        )
    if spec.sliding_window is not None:
        positive_int("sliding_window", spec.sliding_window, hint=hint)
    if not 0 <= spec.window_layers <= spec.n_layer:
        raise InvalidParameterError(f"window_layers must be between 0 and n_layer ({spec.n_layer})")
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


def model_preset(name: str) -> ModelSpec:
    presets = load_model_presets()
    if name not in presets:
        raise UnknownModelError(
            f"unknown model {name!r} for the calculator; choose one of {', '.join(presets)}, "
            "or pass a config.json (--config PATH) or raw numbers"
        )
    return presets[name]


def _get(cfg: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return default


NOT_A_CONFIG = (
    "this does not look like a Hugging Face config.json: {why}. Upload the config.json from the model's "
    "folder on the hub (it has model_type, hidden_size or n_embd, the layer and head counts, vocab_size)."
)


def spec_from_hf_config(cfg: Any, name: str | None = None) -> ModelSpec:
    """A ModelSpec from a parsed config.json. Known layouts: gpt_neo, gpt2, llama, mistral, qwen2; another
    decoder with the usual keys is read as Llama-like and says so in `notes`."""
    if not isinstance(cfg, Mapping):
        raise InvalidParameterError(NOT_A_CONFIG.format(why="its top level is not a JSON object"))
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str):
        raise InvalidParameterError(NOT_A_CONFIG.format(why="it has no model_type"))
    if cfg.get("is_encoder_decoder") or model_type in ("bert", "roberta", "t5", "bart", "distilbert"):
        raise InvalidParameterError(
            f"{model_type} is not a decoder-only language model; the calculator covers decoders "
            "(GPT-Neo, GPT-2, Llama, Mistral, Qwen2 and alike)."
        )
    name = name or str(_get(cfg, "_name_or_path", default="") or model_type)
    notes: list[str] = []
    arch = MODEL_TYPE_TO_ARCH.get(model_type)
    hidden = _get(cfg, "hidden_size", "n_embd", "d_model")
    n_layer = _get(cfg, "num_hidden_layers", "num_layers", "n_layer")
    n_head = _get(cfg, "num_attention_heads", "num_heads", "n_head")
    vocab = _get(cfg, "vocab_size")
    missing = [
        k
        for k, v in {"hidden size": hidden, "layers": n_layer, "heads": n_head, "vocab_size": vocab}.items()
        if v is None
    ]
    if missing:
        raise InvalidParameterError(NOT_A_CONFIG.format(why=f"it lacks {', '.join(missing)}"))
    if arch is None:
        arch = "llama"
        notes.append(
            f"model_type {model_type!r} has no layout of its own here; read as Llama-like (no biases, RMSNorm, "
            "gated MLP). Check the parameter count against the real model (engine.calc_check)."
        )
    hidden = positive_int("hidden_size", hidden)
    n_head = positive_int("num_attention_heads", n_head)
    n_layer = positive_int("num_hidden_layers", n_layer)  # before int(n_layer) below: "abc" must not raise ValueError
    n_kv = positive_int(
        "num_key_value_heads", _get(cfg, "num_key_value_heads", "multi_query_group_num", default=n_head)
    )
    head_dim = _get(cfg, "head_dim", default=None) or hidden // n_head
    inter = _get(cfg, "intermediate_size", "n_inner", "ffn_dim", default=None) or 4 * hidden
    ctx = _get(cfg, "max_position_embeddings", "n_positions", "n_ctx", "seq_length", default=2048)
    tied_default = arch in ("gpt_neo", "gpt2")
    tied = bool(cfg.get("tie_word_embeddings", tied_default))
    window = None
    window_layers = 0
    evicts = False
    if arch == "gpt_neo":
        layer_kinds = _gpt_neo_layers(cfg, int(n_layer))
        window_layers = layer_kinds.count("local")
        window = cfg.get("window_size", 256) if window_layers else None
        if window_layers:
            notes.append(
                "GPT-Neo's local layers mask scores outside the window over a full-length cache: "
                "the window saves attention compute in principle, not KV memory."
            )
    elif cfg.get("sliding_window") and cfg.get("use_sliding_window", True):
        window = cfg["sliding_window"]
        window_layers = int(n_layer)
        if model_type == "qwen2":
            max_window = cfg.get("max_window_layers", n_layer)
            window_layers = max(0, n_layer - (0 if max_window == 0 else positive_int("max_window_layers", max_window)))
        evicts = True
        notes.append(
            f"sliding window {window}: a rolling cache keeps at most {window} tokens per windowed layer"
        )
    return validate_spec(
        ModelSpec(
            name=name,
            arch=arch,
            n_layer=positive_int("num_hidden_layers", n_layer),
            hidden=hidden,
            n_head=n_head,
            n_kv_head=n_kv,
            head_dim=positive_int("head_dim", head_dim),
            intermediate=positive_int("intermediate_size", inter),
            vocab=positive_int("vocab_size", vocab),
            context_length=positive_int("max_position_embeddings", ctx),
            tied_embeddings=tied,
            sliding_window=window,
            window_layers=window_layers,
            window_evicts=evicts,
            source="config.json",
            notes=tuple(notes),
        )
    )


def _gpt_neo_layers(cfg: Mapping[str, Any], n_layer: int) -> list[str]:
    """GPTNeoConfig.expand_attention_types_params: [[["global","local"], 6]] -> 12 layer kinds."""
    kinds = cfg.get("attention_layers")
    if kinds:
        if not isinstance(kinds, list) or not all(k in ("global", "local") for k in kinds):
            raise InvalidParameterError(
                "attention_layers must be a list of \"global\"/\"local\", one per layer; fix the config"
            )
        return list(kinds)
    out: list[str] = []
    try:  # user data: any shape may arrive here, and only a clear message may leave
        for pattern, repeat in cfg.get("attention_types", [[["global", "local"], n_layer // 2]]):
            out.extend(list(pattern) * positive_int("attention_types repeat", repeat))
    except (TypeError, ValueError) as exc:
        if isinstance(exc, InvalidParameterError):
            raise
        raise InvalidParameterError(
            'attention_types must look like [[["global", "local"], 6]] (pattern, repeat); fix the config'
        ) from None
    if len(out) != n_layer:
        raise InvalidParameterError(
            f"attention_types expands to {len(out)} layers but the config has {n_layer}; fix attention_types"
        )
    return out


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
) -> ModelSpec:
    """Raw numbers typed by the user. A given `params` overrides the count derived from the shape."""
    hidden = positive_int("hidden", hidden)
    n_head = positive_int("heads", n_head)
    return validate_spec(
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
        )
    )


# ---------------------------------------------------------------- GPUs

THIS_MACHINE = "this-machine"


def _gpu_from_row(key: str, row: Mapping[str, Any]) -> GPUSpec:
    peaks = {}
    sources = {
        "memory": row.get("memory_source", row["source"]),
        "bandwidth": row.get("bandwidth_source", row["source"]),
    }
    for dtype in ("fp32", "fp16", "bf16", "int8"):
        unit = "tops" if dtype == "int8" else "tflops"
        value = row.get(f"{dtype}_{unit}")
        if value is not None:
            peaks[dtype] = float(value) * 1e12
            sources[f"{dtype}_tflops"] = row.get(f"{dtype}_source", row["source"])
    return GPUSpec(
        key=key,
        name=row["name"],
        memory_bytes=float(row["memory_gb"]) * 1e9,
        bandwidth_bytes_per_s=float(row["bandwidth_gb_s"]) * 1e9,
        peak_flops=peaks,
        sources=sources,
        notes=row.get("notes", ""),
    )


def load_gpu_catalog(path: Path | None = None) -> dict[str, GPUSpec]:
    """engine/data/gpus.toml as GPUSpecs, keyed by their short name (t4, t4-datasheet, a100-80gb...)."""
    with (path or DATA_DIR / "gpus.toml").open("rb") as f:
        raw = tomllib.load(f)
    return {key: _gpu_from_row(key, row) for key, row in raw.items()}


def gpu_spec(key: str) -> GPUSpec:
    catalog = load_gpu_catalog()
    if key not in catalog:
        raise InvalidParameterError(
            f"unknown GPU {key!r}; choose one of {', '.join(catalog)} or {THIS_MACHINE} "
            "(list them with `python -m engine gpus`)"
        )
    return catalog[key]


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


MAX_CONFIG_BYTES = 5 * 2**20  # a config.json is a few KB; anything this large is not one


def parse_config_text(text: str | bytes, name: str | None = None) -> ModelSpec:
    """A ModelSpec from the text of a config.json (parsed with json only: nothing is executed)."""
    import json

    if len(text) > MAX_CONFIG_BYTES:
        raise InvalidParameterError(
            f"the file is {len(text) / 2**20:.1f} MB; a config.json is a few KB. Upload config.json, not the weights"
        )
    try:
        cfg = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidParameterError(NOT_A_CONFIG.format(why=f"it is not valid JSON ({exc})")) from None
    except RecursionError:  # "[[[[..." nested past the parser's stack: not a config, and not a crash
        raise InvalidParameterError(NOT_A_CONFIG.format(why="it is nested far too deeply")) from None
    return spec_from_hf_config(cfg, name=name)


def load_config_file(path: str | Path) -> ModelSpec:
    """A ModelSpec from a config.json on disk (a folder is read as folder/config.json)."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "config.json"
    try:
        if p.stat().st_size > MAX_CONFIG_BYTES:
            raise InvalidParameterError(
                f"{p} is larger than 5 MB; pass the model's config.json, not its weights"
            )
        data = p.read_bytes()
    except OSError as exc:
        raise InvalidParameterError(
            f"cannot read {p}: {exc.strerror}. Pass the path of a config.json"
        ) from None
    return parse_config_text(data, name=p.parent.name or p.stem)
