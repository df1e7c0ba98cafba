"""Count a model's parameters with the real transformers class, built on the meta device (no weights, offline).

accelerate's `estimate-memory` method: `AutoConfig.for_model(model_type, **config)` then
`AutoModelForCausalLM.from_config` under `init_empty_weights`, so every tensor has a shape and no storage.
Parameters are counted per component (embedding, attention, MLP and experts, router, norms, head), tied
weights once; the pure calculator (engine.calc) receives the count as data (`ModelSpec.exact`), and falls
back to its formula, with a warning, where the class cannot be built. nanoGPT's habit: the hand count and
the model's own count side by side (`check_params`). torch and transformers are imported lazily here.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from engine.calc.hf_config import model_name, spec_from_hf_config, text_config
from engine.calc.memory import count_params
from engine.calc.specs import ModelSpec, ParamCount
from engine.core.errors import DependencyMissingError, EngineError, InvalidParameterError

ATTENTION_PARTS = ("attn", "attention", "self_attn", "self_attention")
ROUTER_PARTS = ("gate", "router")  # a MoE block's router; Llama's gate_proj is an MLP weight
EMBEDDING_PARTS = ("project_in", "project_out")  # OPT's projections around a narrower embedding


@dataclass(frozen=True)
class MetaCount:
    architecture: str
    params: int  # unique parameters (tied weights counted once)
    param_bytes: int  # in the config's dtype as built (fp32 unless the config says otherwise)
    buffer_bytes: int  # persistent and non-persistent buffers (position ids, masks)
    largest_layer_bytes: int  # largest top-level submodule of the base model, params + buffers
    components: ParamCount | None = None  # per component (causal-LM models)


@dataclass(frozen=True)
class ParamCheck:
    model: str
    calculated: int
    real: int
    match: bool
    architecture: str


def hf_config(cfg: Mapping[str, Any]):
    """transformers' config object for a config.json dict (its defaults filled in); nothing is downloaded."""
    try:
        from transformers import AutoConfig
    except ImportError as exc:  # pragma: no cover - transformers is a core dependency
        raise DependencyMissingError(
            "transformers is not installed; pip install -r requirements.txt"
        ) from exc
    cfg = dict(cfg)
    model_type = cfg.pop("model_type", None)
    if not model_type:
        raise InvalidParameterError("the config has no model_type; pass a Hugging Face config.json")
    cfg.pop("auto_map", None)  # remote code is never run
    try:
        return AutoConfig.for_model(model_type, **cfg)
    except (ValueError, KeyError) as exc:
        raise InvalidParameterError(f"transformers does not know model_type {model_type!r}: {exc}") from exc


def meta_model(cfg: Mapping[str, Any], *, head: bool = True):
    """The transformers model for `cfg` on the meta device: causal-LM head when `head`, else the base
    AutoModel (as accelerate's estimate-memory builds it). Buffers go to meta too, so a huge context
    allocates no mask."""
    from accelerate import init_empty_weights
    from transformers import AutoModel, AutoModelForCausalLM

    config = hf_config(cfg)
    auto = AutoModelForCausalLM if head else AutoModel
    with init_empty_weights(include_buffers=True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return auto.from_config(config)


def _classify(module_name: str, module) -> str:
    parts = module_name.split(".")
    cls = type(module).__name__.lower()
    if "norm" in cls:
        return "norms"
    if parts[-1] in ("lm_head", "embed_out") and len(parts) == 1:
        return "head"
    if "embedding" in cls or parts[-1] in EMBEDDING_PARTS:
        return "embedding"
    if parts[-1] in ROUTER_PARTS:
        return "router"
    if any(p in ATTENTION_PARTS for p in parts):
        return "attention"
    return "mlp"


def components(
    model, *, experts_per_token: int = 1, n_experts: int = 1, formula: ParamCount | None = None
) -> ParamCount:
    """Per-component counts of a built model: each parameter once (a tied head is the embedding), by the
    module that owns it. Active = total - (E - k) / E x the experts' parameters."""
    seen: set[int] = set()
    sums = {"embedding": 0, "attention": 0, "mlp": 0, "router": 0, "norms": 0, "head": 0}
    experts = 0
    for mname, module in model.named_modules():
        for p in module.parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            sums[_classify(mname, module)] += p.numel()
            if "experts" in mname.split("."):
                experts += p.numel()
    total = sum(sums.values())
    active = total - (experts * (n_experts - experts_per_token)) // n_experts if n_experts > 1 else total
    return ParamCount(
        total=total,
        active=active,
        matmul=formula.matmul if formula else 0,
        source="meta device",
        **sums,
    )


def meta_count(cfg: Mapping[str, Any], *, head: bool = True) -> MetaCount:
    """Count parameters and bytes of the real model (meta device: shapes only)."""
    model = meta_model(cfg, head=head)
    params = sum(p.numel() for p in model.parameters())  # parameters() yields a tied tensor once
    pbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    bbytes = sum(b.numel() * b.element_size() for b in model.buffers())
    comps = None
    if head:
        try:
            spec = spec_from_hf_config(cfg)
            comps = components(
                model,
                experts_per_token=spec.experts_per_token,
                n_experts=spec.n_experts,
                formula=count_params(spec),
            )
        except EngineError:
            comps = components(model)
    return MetaCount(type(model).__name__, params, pbytes, bbytes, _largest_layer_bytes(model), comps)


def _module_bytes(module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters()) + sum(
        b.numel() * b.element_size() for b in module.buffers()
    )


def _largest_layer_bytes(model) -> int:
    """accelerate's get_max_layer_size: descend through modules until a leaf or a class the model says
    must not be split (`_no_split_modules`, e.g. BertEmbeddings, BertLayer), and take the largest."""
    no_split = set(getattr(model, "_no_split_modules", None) or ())
    largest = sum(p.numel() * p.element_size() for p in model.parameters(recurse=False))
    todo = list(model.children())
    while todo:
        module = todo.pop(0)
        children = list(module.children())
        if not children or type(module).__name__ in no_split:
            largest = max(largest, _module_bytes(module))
        else:
            todo = children + todo
    return largest


def exact_spec(cfg: Mapping[str, Any], name: str | None = None) -> ModelSpec:
    """A ModelSpec for a config.json dict whose parameter count is the real class's on the meta device.

    The config is first completed with transformers' own defaults (what `from_pretrained` would build);
    when the class cannot be built here (a model_type transformers does not know, remote code, a config it
    rejects) the formula's count stands, and the spec says why among its assumptions."""
    name = name or model_name(cfg)
    spec = spec_from_hf_config(cfg, name=name)  # validates sizes before anything is built
    if text_config(cfg) is not cfg:  # a multimodal config: count its text decoder, as the formula does
        counted = exact_spec(text_config(cfg), name=name)
        return replace(counted, assumptions=spec.assumptions, **identity(cfg))
    try:
        full = hf_config(cfg).to_dict()
        spec = spec_from_hf_config({**full, "model_type": cfg["model_type"]}, name=name)
        model = meta_model(cfg)
    except EngineError as exc:
        return _fallback(spec, str(exc), cfg)
    except Exception as exc:  # transformers raises many types for configs it cannot build
        return _fallback(spec, f"{type(exc).__name__}: {str(exc)[:200]}", cfg)
    exact = components(
        model, experts_per_token=spec.experts_per_token, n_experts=spec.n_experts, formula=count_params(spec)
    )
    formula = count_params(spec)
    notes = spec.notes
    if formula.total != exact.total:
        notes = (
            *notes,
            f"the formula gives {formula.total:,} parameters, the real class {exact.total:,}: the real count is used",
        )
    return replace(
        spec,
        exact=exact,
        notes=notes,
        source=f"config.json; counted on the meta device ({type(model).__name__})",
        **identity(cfg),
    )


DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def identity(cfg: Mapping[str, Any]) -> dict[str, str]:
    """What a config says about the checkpoint itself: its hub id (`_name_or_path`, what `vllm serve` loads) and
    its precision (`torch_dtype`, or `dtype` in newer transformers). Empty where it says nothing."""
    out = {}
    path = cfg.get("_name_or_path")
    if isinstance(path, str) and path.strip():
        out["hub_id"] = path.strip()
    dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    if isinstance(dtype, str) and dtype in DTYPES:
        out["checkpoint_dtype"] = DTYPES[dtype]
    return out


def _fallback(spec: ModelSpec, why: str, cfg: Mapping[str, Any] | None = None) -> ModelSpec:
    return replace(
        spec,
        **identity(cfg or {}),
        assumptions=(
            *spec.assumptions,
            f"the model class could not be built offline ({why}); parameters come from the formula",
        ),
    )


def config_of_spec(spec: ModelSpec) -> dict[str, Any]:
    """A config.json dict with the shape of `spec` (the inverse of spec_from_hf_config), to count a preset
    or raw numbers on the meta device."""
    if spec.arch == "gpt_neo":
        pairs = spec.window_layers
        kinds = [[["global", "local"], pairs]] if pairs * 2 == spec.n_layer else [[["global"], spec.n_layer]]
        return {
            "model_type": "gpt_neo",
            "hidden_size": spec.hidden,
            "num_layers": spec.n_layer,
            "num_heads": spec.n_head,
            "intermediate_size": spec.intermediate,
            "vocab_size": spec.vocab,
            "max_position_embeddings": spec.context_length,
            "window_size": spec.sliding_window or 256,
            "attention_types": kinds,
        }
    if spec.arch == "gpt2":
        return {
            "model_type": "gpt2",
            "n_embd": spec.hidden,
            "n_layer": spec.n_layer,
            "n_head": spec.n_head,
            "n_inner": spec.intermediate,
            "vocab_size": spec.vocab,
            "n_positions": spec.context_length,
        }
    if spec.arch not in ("llama", "qwen2"):
        raise InvalidParameterError(f"no config inverse for layout {spec.arch!r}; count from its config.json")
    model_type = (
        "qwen2"
        if spec.arch == "qwen2"
        else ("mixtral" if spec.is_moe else ("mistral" if spec.window_evicts else "llama"))
    )
    cfg: dict[str, Any] = {
        "model_type": model_type,
        "hidden_size": spec.hidden,
        "num_hidden_layers": spec.n_layer,
        "num_attention_heads": spec.n_head,
        "num_key_value_heads": spec.n_kv_head,
        "head_dim": spec.head_dim,
        "intermediate_size": spec.intermediate,
        "vocab_size": spec.vocab,
        "max_position_embeddings": spec.context_length,
        "tie_word_embeddings": spec.tied_embeddings,
        "sliding_window": spec.sliding_window if spec.window_evicts else None,
    }
    if spec.is_moe:
        cfg |= {"num_local_experts": spec.n_experts, "num_experts_per_tok": spec.experts_per_token}
    return cfg


def check_params(spec_or_config: ModelSpec | Mapping[str, Any]) -> ParamCheck:
    """The formula's parameter count versus the real transformers model built on the meta device."""
    if isinstance(spec_or_config, ModelSpec):
        spec, cfg = spec_or_config, config_of_spec(spec_or_config)
    else:
        cfg, spec = spec_or_config, spec_from_hf_config(spec_or_config)
    real = meta_count(cfg)
    calc = count_params(spec).total
    return ParamCheck(spec.name, calc, real.params, calc == real.params, real.architecture)
