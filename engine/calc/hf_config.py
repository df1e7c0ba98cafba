"""A ModelSpec from a Hugging Face config.json: read each family's layout the way its modelling code builds it.

One reader per family, each value checked once where it is read. The layouts follow transformers' modelling
files (modeling_gpt2, gpt_neo, gpt_neox, gptj, opt, bloom, falcon, phi, llama, mistral, mixtral, qwen2, gemma):
which projections carry biases, LayerNorm or RMSNorm, a gated MLP or not, a parallel block with one norm,
learned positions, a tied head, experts. A default a config omits is transformers' own default for that
family (its configuration_*.py). Anything the reader had to assume goes into `ModelSpec.assumptions`, which
the page and the CLI show as warnings. The exact count comes from the real class on the meta device
(engine.arch.meta); this reader is the formula behind it and its fallback. Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.calc.specs import ARCH_TRAITS, ModelSpec, positive_int, validate_spec
from engine.core.errors import InvalidParameterError

NOT_A_CONFIG = (
    "this does not look like a Hugging Face config.json: {why}. Upload the config.json from the model's "
    "folder on the hub (it has model_type, hidden_size or n_embd, the layer and head counts, vocab_size)."
)
MAX_CONFIG_BYTES = 5 * 2**20  # a config.json is a few KB; anything this large is not one
ENCODERS = (
    "bert",
    "roberta",
    "t5",
    "bart",
    "distilbert",
    "electra",
    "deberta",
    "deberta-v2",
    "mt5",
    "whisper",
)

# model_type -> layout key of ARCH_TRAITS. Mistral, Mixtral and Gemma build Llama's layer.
MODEL_TYPE_TO_ARCH = {
    "gpt_neo": "gpt_neo",
    "gpt2": "gpt2",
    "llama": "llama",
    "mistral": "llama",
    "mixtral": "llama",
    "gemma": "llama",
    "qwen2": "qwen2",
    "gpt_neox": "gpt_neox",
    "gptj": "gptj",
    "opt": "opt",
    "bloom": "bloom",
    "falcon": "falcon",
    "phi": "phi",
}
TIED_BY_DEFAULT = {"gpt_neo", "gpt2", "opt", "bloom", "falcon", "gemma"}  # each configuration_*.py's default
# Layer kinds in a config's `layer_types` that keep a per-token KV cache; any other kind (mamba, linear
# attention, convolution) keeps none.
FULL_ATTENTION = ("full_attention", "attention", "global")
WINDOWED_ATTENTION = ("sliding_attention", "local", "chunked_attention")


def _get(cfg: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return default


def model_name(cfg: Mapping[str, Any]) -> str:
    """The model's own name: `_name_or_path`, else its class (`architectures`), else `model_type`."""
    path = cfg.get("_name_or_path")
    if isinstance(path, str) and path.strip():
        return path.strip()
    archs = cfg.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    return str(cfg.get("model_type", "model"))


def spec_from_hf_config(cfg: Any, name: str | None = None) -> ModelSpec:
    """A ModelSpec from a parsed config.json. `name` overrides the config's own name (a hub id, a preset)."""
    if not isinstance(cfg, Mapping):
        raise InvalidParameterError(NOT_A_CONFIG.format(why="its top level is not a JSON object"))
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise InvalidParameterError(NOT_A_CONFIG.format(why="it has no model_type (no architecture)"))
    if cfg.get("is_encoder_decoder") or model_type in ENCODERS:
        raise InvalidParameterError(
            f"{model_type} is not a decoder-only language model; the calculator covers decoders "
            "(GPT-2, GPT-Neo, GPT-NeoX, GPT-J, OPT, BLOOM, Falcon, Phi, Llama, Mistral, Mixtral, Qwen2, Gemma "
            "and alike)."
        )
    assumptions: list[str] = []
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
        assumptions.append(
            f"model_type {model_type!r} has no layout of its own in the formula; it is read as Llama-like "
            "(no biases, RMSNorm, gated MLP). Trust the count only if it was checked on the meta device."
        )
    hidden = positive_int("hidden_size", hidden)
    n_head = positive_int("num_attention_heads", n_head)
    n_layer = positive_int("num_hidden_layers", n_layer)
    vocab = positive_int("vocab_size", vocab)
    traits = ARCH_TRAITS[arch]
    n_kv = _kv_heads(cfg, model_type, n_head)
    head_dim = positive_int(
        "head_dim", _get(cfg, "head_dim", default=None) or _default_head_dim(model_type, hidden, n_head)
    )
    inter = positive_int("intermediate_size", _intermediate(cfg, model_type, hidden))
    ctx_raw = _get(cfg, "max_position_embeddings", "n_positions", "n_ctx", "seq_length", "max_seq_len")
    if ctx_raw is None:
        ctx_raw = 2048
        assumptions.append("the config gives no context length; 2048 tokens is assumed")
    ctx = positive_int("max_position_embeddings", ctx_raw)
    tied = bool(cfg.get("tie_word_embeddings", model_type in TIED_BY_DEFAULT))
    traits, embed_dim = _layout(cfg, model_type, traits, hidden, assumptions)
    n_experts, per_token = _experts(cfg, model_type, assumptions)
    window, window_layers, evicts, attn_layers = _windows(cfg, model_type, n_layer, notes, assumptions)
    spec = ModelSpec(
        name=name or model_name(cfg),
        arch=arch,
        n_layer=n_layer,
        hidden=hidden,
        n_head=n_head,
        n_kv_head=n_kv,
        head_dim=head_dim,
        intermediate=inter,
        vocab=vocab,
        context_length=ctx,
        tied_embeddings=tied,
        sliding_window=window,
        window_layers=window_layers,
        window_evicts=evicts,
        source="config.json",
        notes=tuple(notes),
        n_experts=n_experts,
        experts_per_token=per_token,
        embed_dim=embed_dim,
        attn_layers=attn_layers,
        layout=None if traits == ARCH_TRAITS[arch] else traits,
        assumptions=tuple(assumptions),
    )
    return validate_spec(spec, sizes=False)


def _kv_heads(cfg: Mapping[str, Any], model_type: str, n_head: int) -> int:
    """KV heads: Falcon's multi_query (default True) keeps 1 unless new_decoder_architecture gives
    num_kv_heads; every other family reads num_key_value_heads (absent: = heads, MHA)."""
    if model_type == "falcon":
        if cfg.get("new_decoder_architecture"):
            return positive_int("num_kv_heads", _get(cfg, "num_kv_heads", default=n_head))
        return 1 if cfg.get("multi_query", True) else n_head
    return positive_int(
        "num_key_value_heads", _get(cfg, "num_key_value_heads", "multi_query_group_num", default=n_head)
    )


def _default_head_dim(model_type: str, hidden: int, n_head: int) -> int:
    return 256 if model_type == "gemma" else hidden // n_head  # GemmaConfig(head_dim=256)


def _intermediate(cfg: Mapping[str, Any], model_type: str, hidden: int) -> Any:
    """MLP width: BLOOM always 4h; Falcon ffn_hidden_size; OPT ffn_dim; GPT-2/J n_inner; else intermediate_size
    (absent: 4h, except Gemma's default 24576 and Llama-family 11008)."""
    if model_type == "bloom":
        return 4 * hidden
    defaults = {"gemma": 24576, "llama": 11008, "mistral": 14336, "mixtral": 14336, "qwen2": 22016}
    value = _get(cfg, "intermediate_size", "ffn_hidden_size", "ffn_dim", "n_inner")
    return value if value is not None else defaults.get(model_type, 4 * hidden)


def _layout(cfg: Mapping[str, Any], model_type: str, traits, hidden: int, assumptions: list[str]):
    """The family's flags adjusted by the config's own switches (biases, norms, OPT's projection)."""
    embed_dim = None
    if model_type in ("llama", "mistral", "mixtral", "gemma"):
        bias = bool(cfg.get("attention_bias", False))
        traits = replace(traits, qkv_bias=bias, out_bias=bias, mlp_bias=bool(cfg.get("mlp_bias", False)))
    elif model_type == "gpt_neox":
        bias = bool(cfg.get("attention_bias", True))
        traits = replace(
            traits, qkv_bias=bias, out_bias=bias, parallel_attn=bool(cfg.get("use_parallel_residual", True))
        )
    elif model_type == "falcon":
        bias = bool(cfg.get("bias", False))
        parallel = bool(cfg.get("parallel_attn", True))
        new_arch = bool(cfg.get("new_decoder_architecture", False))
        n_ln = cfg.get("num_ln_in_parallel_attn") or (2 if new_arch else None)
        norms = 2 if (not parallel or n_ln == 2) else 1
        traits = replace(
            traits, qkv_bias=bias, out_bias=bias, mlp_bias=bias, parallel_attn=parallel, norms_per_layer=norms
        )
    elif model_type == "opt":
        bias = bool(cfg.get("enable_bias", True))
        affine = bool(cfg.get("layer_norm_elementwise_affine", True))
        traits = replace(
            traits,
            qkv_bias=bias,
            out_bias=bias,
            mlp_bias=bias,
            norm_params_per_hidden=2 if affine else 0,
            final_norm=bool(cfg.get("do_layer_norm_before", True))
            and not cfg.get("_remove_final_layer_norm", False),
        )
        e = cfg.get("word_embed_proj_dim")
        if e is not None and positive_int("word_embed_proj_dim", e) != hidden:
            embed_dim = int(e)
    elif model_type == "phi" and cfg.get("qk_layernorm"):
        assumptions.append("qk_layernorm adds two small norms per layer that the formula does not count")
    elif model_type == "gpt2" and cfg.get("add_cross_attention"):
        assumptions.append("add_cross_attention adds an encoder-attention block the formula does not count")
    return traits, embed_dim


def _experts(cfg: Mapping[str, Any], model_type: str, assumptions: list[str]) -> tuple[int, int]:
    """Mixtral: num_local_experts (default 8), num_experts_per_tok (default 2). Another family's expert
    fields are not read, and the figures say so."""
    if model_type == "mixtral":
        n = positive_int("num_local_experts", _get(cfg, "num_local_experts", default=8))
        k = positive_int("num_experts_per_tok", _get(cfg, "num_experts_per_tok", default=2))
        return n, k
    moe_keys = [k for k in cfg if "expert" in k.lower() and cfg.get(k) not in (None, 0, 1, False)]
    if moe_keys:
        assumptions.append(
            f"the config has mixture-of-experts fields ({', '.join(sorted(moe_keys)[:3])}) that the formula "
            "does not read: it counts one dense MLP per layer"
        )
    return 1, 1


def _windows(
    cfg: Mapping[str, Any], model_type: str, n_layer: int, notes: list[str], assumptions: list[str]
) -> tuple[int | None, int, bool, int | None]:
    """(window, windowed layers, evicts, attention layers) from GPT-Neo's attention_types, a `layer_types`
    list, or Mistral/Qwen2's sliding_window."""
    if model_type == "gpt_neo":
        kinds = _gpt_neo_layers(cfg, n_layer)
        local = kinds.count("local")
        if local:
            notes.append(
                "GPT-Neo's local layers mask scores outside the window over a full-length cache: "
                "the window saves attention compute in principle, not KV memory."
            )
        window = positive_int("window_size", cfg.get("window_size", 256)) if local else None
        return window, local, False, None
    layer_types = cfg.get("layer_types")
    window_raw = cfg.get("sliding_window")
    if isinstance(layer_types, list) and layer_types:
        if len(layer_types) != n_layer or not all(isinstance(k, str) for k in layer_types):
            raise InvalidParameterError(
                f"layer_types lists {len(layer_types)} layers but the config has {n_layer}; fix layer_types"
            )
        windowed = sum(k in WINDOWED_ATTENTION for k in layer_types)
        attn = sum(k in FULL_ATTENTION or k in WINDOWED_ATTENTION for k in layer_types)
        if attn < n_layer:
            other = sorted({k for k in layer_types if k not in FULL_ATTENTION + WINDOWED_ATTENTION})
            assumptions.append(
                f"{n_layer - attn} of {n_layer} layers are {', '.join(other)} (no KV cache per token); their own "
                "state and mixer are not modelled"
            )
        window = positive_int("sliding_window", window_raw) if windowed and window_raw else None
        if windowed and window is None:
            assumptions.append(
                "layer_types has sliding layers but no sliding_window: counted as full attention"
            )
        return window, windowed if window else 0, bool(window), attn if attn < n_layer else None
    if window_raw and cfg.get("use_sliding_window", True):
        window = positive_int("sliding_window", window_raw)
        window_layers = n_layer
        if model_type == "qwen2":
            max_window = cfg.get("max_window_layers", n_layer)
            window_layers = max(
                0, n_layer - (0 if max_window == 0 else positive_int("max_window_layers", max_window))
            )
        notes.append(
            f"sliding window {window}: a rolling cache keeps at most {window} tokens per windowed layer"
        )
        return window, window_layers, True, None
    return None, 0, False, None


def _gpt_neo_layers(cfg: Mapping[str, Any], n_layer: int) -> list[str]:
    """GPTNeoConfig.expand_attention_types_params: [[["global","local"], 6]] -> 12 layer kinds."""
    kinds = cfg.get("attention_layers")
    if kinds:
        if not isinstance(kinds, list) or not all(k in ("global", "local") for k in kinds):
            raise InvalidParameterError(
                'attention_layers must be a list of "global"/"local", one per layer; fix the config'
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


def parse_config_json(text: str | bytes) -> dict[str, Any]:
    """The dict of a config.json's text (json only: nothing is executed), or a message saying what is wrong."""
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
    if not isinstance(cfg, dict):
        raise InvalidParameterError(NOT_A_CONFIG.format(why="its top level is not a JSON object"))
    return cfg


def parse_config_text(text: str | bytes, name: str | None = None) -> ModelSpec:
    """A ModelSpec from the text of a config.json (parsed with json only: nothing is executed)."""
    return spec_from_hf_config(parse_config_json(text), name=name)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The dict of a config.json on disk (a folder is read as folder/config.json)."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "config.json"
    try:
        if p.stat().st_size > MAX_CONFIG_BYTES:
            raise InvalidParameterError(
                f"{p.name} is larger than 5 MB; pass the model's config.json, not its weights"
            )
        data = p.read_bytes()
    except OSError as exc:
        raise InvalidParameterError(
            f"cannot read {p.name}: {exc.strerror}. Pass the path of a config.json"
        ) from None
    return parse_config_json(data)


def load_config_file(path: str | Path) -> ModelSpec:
    """A ModelSpec from a config.json on disk, named by the config itself (never by its folder)."""
    return spec_from_hf_config(read_config_file(path))
