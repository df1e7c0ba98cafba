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

from engine.calc.specs import ARCH_TRAITS, ModelSpec, not_absurd, positive_int, validate_spec
from engine.core.errors import InvalidParameterError

NOT_A_CONFIG = (
    "This does not look like a Hugging Face config.json: {why}. Give the config.json from the model's "
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
    "phi3": "llama",  # fused qkv and gate_up: the same parameters as Llama's layer
    "gemma2": "llama",
    "gemma3_text": "qwen3",  # q/k norms
    "qwen3": "qwen3",
    "qwen2_moe": "qwen2",
    "qwen3_moe": "qwen3",
    "deepseek_v2": "llama",
    "deepseek_v3": "llama",
    "gpt_oss": "gpt_oss",
    "granitemoe": "llama",
}
# Families whose layer carries four norms (before and after attention and the MLP).
FOUR_NORMS = ("gemma2", "gemma3_text")
TIED_BY_DEFAULT = {
    "gpt_neo",
    "gpt2",
    "opt",
    "bloom",
    "falcon",
    "gemma",
    "gemma2",
    "gemma3_text",
}  # each configuration_*.py's default
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
    text = text_config(cfg)
    if text is not cfg:
        spec = spec_from_hf_config(text, name=name or model_name(cfg))
        return replace(
            spec,
            assumptions=(
                *spec.assumptions,
                f"a multimodal config ({cfg.get('model_type')}): the figures are its text decoder's "
                "(text_config); the vision or audio encoder's weights and the image tokens' cache are not counted",
            ),
        )
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        why = 'it has no model_type (the family name Hugging Face reads the layout by, such as "llama")'
        if cfg.get("architectures"):
            why += (
                f"; its architectures field ({', '.join(map(str, cfg['architectures']))}) does not replace it"
            )
        raise InvalidParameterError(NOT_A_CONFIG.format(why=why))
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
        given = {"hidden size": hidden, "layers": n_layer, "heads": n_head, "vocab_size": vocab}
        bad = [
            f"{k} is {v!r}"
            for k, v in given.items()
            if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and v > 0)
        ]
        also = f", and {', '.join(bad)}, not a positive whole number" if bad else ""
        raise InvalidParameterError(NOT_A_CONFIG.format(why=f"it lacks {', '.join(missing)}{also}"))
    if arch is None:
        arch = "llama"
        assumptions.append(
            f"model_type {model_type!r} has no layout of its own in the formula; it is read as Llama-like "
            "(no biases, RMSNorm, gated MLP). Trust the count only if it was checked on the meta device."
        )
    hidden = positive_int("hidden_size", hidden)
    n_head = positive_int("num_attention_heads", n_head)
    n_layer = positive_int("num_hidden_layers", n_layer)
    not_absurd("n_layer", n_layer)  # before any per-layer list is built from it
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
    moe = _experts(cfg, model_type, n_layer, inter, assumptions)
    mla = _latent_attention(cfg, model_type)
    if mla:
        head_dim = mla.pop("head_dim")
        notes.append(
            f"multi-head latent attention: the cache holds a {mla['kv_lora_rank'] + mla['qk_rope_head_dim']}-wide "
            "latent per token per layer (as vLLM stores it; transformers' eager cache keeps full K and V)"
        )
    window, window_layers, evicts, attn_layers = _windows(cfg, model_type, n_layer, notes, assumptions)
    own = cfg.get("_name_or_path")
    spec = ModelSpec(
        name=name or model_name(cfg),
        hub_id=own if isinstance(own, str) and own.count("/") == 1 and not own.startswith((".", "/")) else "",
        arch=arch,
        n_layer=n_layer,
        hidden=hidden,
        n_head=n_head,
        n_kv_head=n_kv,
        head_dim=head_dim,
        vocab=vocab,
        context_length=ctx,
        tied_embeddings=tied,
        sliding_window=window,
        window_layers=window_layers,
        window_evicts=evicts,
        source="config.json",
        notes=tuple(notes),
        embed_dim=embed_dim,
        attn_layers=attn_layers,
        layout=None if traits == ARCH_TRAITS[arch] else traits,
        assumptions=tuple(assumptions),
        **{"intermediate": inter, **moe},
        **mla,
    )
    return validate_spec(spec, sizes=False)


def text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """A multimodal config's language model (`text_config`, or LLaVA-style `text_config` without sizes at the
    top); the config itself otherwise."""
    text = cfg.get("text_config")
    if isinstance(text, Mapping) and text.get("model_type") and cfg.get("hidden_size") is None:
        return text
    return cfg


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
    if model_type in FOUR_NORMS:
        traits = replace(traits, norms_per_layer=4)
    if model_type in (
        "llama",
        "mistral",
        "mixtral",
        "gemma",
        "gemma2",
        "gemma3_text",
        "qwen3",
        "qwen3_moe",
        "deepseek_v2",
        "deepseek_v3",
        "phi3",
        "granitemoe",
    ):
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


def _experts(
    cfg: Mapping[str, Any], model_type: str, n_layer: int, inter: int, assumptions: list[str]
) -> dict[str, Any]:
    """The mixture-of-experts fields, as each family's modelling code builds its layers:
    Mixtral / gpt-oss: every layer num_local_experts experts of intermediate_size;
    Qwen2-MoE / Qwen3-MoE: num_experts of moe_intermediate_size on the layers (l + 1) % decoder_sparse_step == 0
    not in mlp_only_layers, dense intermediate_size elsewhere; Qwen2-MoE adds a shared expert
    (shared_expert_intermediate_size) gated by a Linear(h, 1);
    DeepSeek-V2/V3: n_routed_experts of moe_intermediate_size after the first first_k_dense_replace dense layers,
    plus n_shared_experts always-on experts of the same width. Any other config naming experts is read the
    generic way (num_experts / num_local_experts / n_routed_experts, moe_intermediate_size) and says so."""
    n_keys = ("num_local_experts", "num_experts", "n_routed_experts")
    n_raw = _get(cfg, *n_keys)
    if model_type == "mixtral" and n_raw is None:
        n_raw = 8
    if n_raw in (None, 0, 1):
        moe_keys = [k for k in cfg if "expert" in k.lower() and cfg.get(k) not in (None, 0, 1, False, [])]
        if moe_keys:
            assumptions.append(
                f"the config has mixture-of-experts fields ({', '.join(sorted(moe_keys)[:3])}) but no expert "
                "count: one dense MLP per layer is counted"
            )
        return {}
    n = positive_int("experts", n_raw)
    k = positive_int(
        "num_experts_per_tok",
        _get(cfg, "num_experts_per_tok", "experts_per_token", default=2 if model_type == "mixtral" else 1),
    )
    out: dict[str, Any] = {"n_experts": n, "experts_per_token": k}
    moe_inter = cfg.get("moe_intermediate_size")
    if model_type in ("qwen2_moe", "qwen3_moe"):
        step = positive_int("decoder_sparse_step", cfg.get("decoder_sparse_step") or 1)
        only = set(cfg.get("mlp_only_layers") or [])
        moe_layers = sum(1 for layer in range(n_layer) if layer not in only and (layer + 1) % step == 0)
        out |= {"intermediate": positive_int("moe_intermediate_size", moe_inter or inter)}
        if moe_layers != n_layer:
            out |= {"moe_layers": moe_layers, "dense_intermediate": inter}
        shared = cfg.get("shared_expert_intermediate_size") if model_type == "qwen2_moe" else None
        if shared:
            out |= {"shared_intermediate": positive_int("shared_expert_intermediate_size", shared)}
            out |= {"shared_expert_gate": True}
    elif model_type in ("deepseek_v2", "deepseek_v3"):
        first_dense = int(cfg.get("first_k_dense_replace") or 0)
        freq = positive_int("moe_layer_freq", cfg.get("moe_layer_freq") or 1)
        moe_layers = sum(1 for layer in range(first_dense, n_layer) if layer % freq == 0)
        width = positive_int("moe_intermediate_size", moe_inter or inter)
        out |= {"intermediate": width, "moe_layers": moe_layers, "dense_intermediate": inter}
        shared = int(cfg.get("n_shared_experts") or 0)
        if shared:
            out |= {"shared_intermediate": shared * width}
    elif model_type not in ("mixtral", "gpt_oss"):
        if moe_inter:
            out |= {"intermediate": positive_int("moe_intermediate_size", moe_inter)}
        assumptions.append(
            f"experts of {model_type} read the generic way ({n} experts, {k} per token, every layer): shared "
            "experts or dense layers, if the family has them, are not modelled"
        )
    return out


def _latent_attention(cfg: Mapping[str, Any], model_type: str) -> dict[str, Any]:
    """DeepSeek-V2/V3's multi-head latent attention: q/k heads of qk_nope_head_dim + qk_rope_head_dim, values of
    v_head_dim, a kv_lora_rank latent (and a q_lora_rank one when set)."""
    if model_type not in ("deepseek_v2", "deepseek_v3") or not cfg.get("kv_lora_rank"):
        return {}
    nope = positive_int("qk_nope_head_dim", cfg.get("qk_nope_head_dim"))
    rope = positive_int("qk_rope_head_dim", cfg.get("qk_rope_head_dim"))
    return {
        "head_dim": nope + rope,
        "kv_lora_rank": positive_int("kv_lora_rank", cfg["kv_lora_rank"]),
        "q_lora_rank": int(cfg.get("q_lora_rank") or 0),
        "qk_rope_head_dim": rope,
        "v_head_dim": positive_int("v_head_dim", cfg.get("v_head_dim") or nope),
    }


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
            f"the file is {len(text) / 2**20:.1f} MB; a config.json is a few KB. Give config.json, not the weights"
        )
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:  # where, as a person counts: line and column, not "(char 43)"
        msg = exc.msg.lower().removesuffix(" at")  # "unterminated string starting at" + " at line": one "at"
        why = f"it is not valid JSON: {msg} at line {exc.lineno}, column {exc.colno}"
        raise InvalidParameterError(NOT_A_CONFIG.format(why=why)) from None
    except (ValueError, UnicodeDecodeError):
        raise InvalidParameterError(NOT_A_CONFIG.format(why="it is not valid JSON: not UTF-8 text")) from None
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
    too_big = InvalidParameterError(
        f"{p.name} is larger than 5 MB; pass the model's config.json, not its weights"
    )
    try:
        if p.stat().st_size > MAX_CONFIG_BYTES:
            raise too_big
        with p.open(
            "rb"
        ) as f:  # at most the cap and one byte: a device or a pipe reports no size (/dev/zero)
            data = f.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise too_big
    except OSError as exc:
        raise InvalidParameterError(
            f"cannot read {p.name}: {exc.strerror}. Pass the path of a config.json"
        ) from None
    return parse_config_json(data)


def load_config_file(path: str | Path) -> ModelSpec:
    """A ModelSpec from a config.json on disk, named by the config itself (never by its folder)."""
    return spec_from_hf_config(read_config_file(path))
