"""Check the calculator's parameter count against the real transformers model built on the meta device.

nanoGPT's habit (a hand count beside the model's own count, `match: True`) and accelerate's
`estimate-memory` method (build with `init_empty_weights`, count without allocating). The model is built
from its config only: no weights are read, nothing is allocated, it works offline. transformers is
imported lazily here, never in engine/calc/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.calc.memory import params_of
from engine.calc.specs import ModelSpec, spec_from_hf_config
from engine.errors import DependencyMissingError, InvalidParameterError


@dataclass(frozen=True)
class MetaCount:
    architecture: str
    params: int  # unique parameters (tied weights counted once)
    param_bytes: int  # in the config's dtype as built (fp32 unless the config says otherwise)
    buffer_bytes: int  # persistent and non-persistent buffers (position ids, masks)
    largest_layer_bytes: int  # largest top-level submodule of the base model, params + buffers


@dataclass(frozen=True)
class ParamCheck:
    model: str
    calculated: int
    real: int
    match: bool
    architecture: str


def _config_from_dict(cfg: dict[str, Any]):
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
    try:
        return AutoConfig.for_model(model_type, **cfg)
    except ValueError as exc:
        raise InvalidParameterError(f"transformers does not know model_type {model_type!r}: {exc}") from exc


def meta_model(cfg: dict[str, Any], *, head: bool = True):
    """The transformers model for `cfg` built on the meta device (causal-LM head when `head`, else the
    base AutoModel, as accelerate's estimate-memory builds it)."""
    import torch
    from transformers import AutoModel, AutoModelForCausalLM

    config = _config_from_dict(cfg)
    auto = AutoModelForCausalLM if head else AutoModel
    with torch.device("meta"):
        return auto.from_config(config)


def meta_count(cfg: dict[str, Any], *, head: bool = True) -> MetaCount:
    """Count parameters and bytes of the real model (meta device: shapes only)."""
    model = meta_model(cfg, head=head)
    params = sum(p.numel() for p in model.parameters())  # parameters() yields a tied tensor once
    pbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    bbytes = sum(b.numel() * b.element_size() for b in model.buffers())
    return MetaCount(type(model).__name__, params, pbytes, bbytes, _largest_layer_bytes(model))


def _module_bytes(module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters()) + sum(
        b.numel() * b.element_size() for b in module.buffers()
    )


def _largest_layer_bytes(model) -> int:
    """accelerate's get_max_layer_size: descend through modules until a leaf or a class the model says
    must not be split (`_no_split_modules`, e.g. BertEmbeddings, BertLayer), and take the largest."""
    no_split = set(getattr(model, "_no_split_modules", None) or ())
    largest = 0
    todo = list(model.children())
    own = sum(p.numel() * p.element_size() for p in model.parameters(recurse=False))
    largest = max(largest, own)
    while todo:
        module = todo.pop(0)
        children = list(module.children())
        if not children or type(module).__name__ in no_split:
            largest = max(largest, _module_bytes(module))
        else:
            todo = children + todo
    return largest


def hf_config_of(spec: ModelSpec) -> dict[str, Any]:
    """A config.json dict with the shape of `spec` (the inverse of spec_from_hf_config)."""
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
    model_type = "qwen2" if spec.arch == "qwen2" else ("mistral" if spec.window_evicts else "llama")
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
    }
    if spec.window_evicts and spec.sliding_window:
        cfg["sliding_window"] = spec.sliding_window
    return cfg


def check_params(spec_or_config: ModelSpec | dict[str, Any]) -> ParamCheck:
    """Calculated parameter count versus the real transformers model built on the meta device."""
    if isinstance(spec_or_config, ModelSpec):
        spec, cfg = spec_or_config, hf_config_of(spec_or_config)
    else:
        cfg, spec = spec_or_config, spec_from_hf_config(spec_or_config)
    real = meta_count(cfg)
    calc = params_of(spec)
    return ParamCheck(spec.name, calc, real.params, calc == real.params, real.architecture)


def config_from_hub(repo_id: str) -> dict[str, Any]:
    """config.json of a hub model (only that file; from the local HF cache when offline)."""
    import json

    from engine.errors import HubUnreachableError

    if repo_id.count("/") != 1 or any(c.isspace() for c in repo_id):
        raise InvalidParameterError(
            f"{repo_id!r} is not a hub id; write it as owner/name, e.g. EleutherAI/gpt-neo-125m"
        )
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
        )
    except ImportError as exc:
        raise DependencyMissingError(
            "huggingface_hub is not installed; pip install -r requirements.txt"
        ) from exc
    try:
        try:
            path = hf_hub_download(repo_id, "config.json", local_files_only=True)
        except LocalEntryNotFoundError:
            from engine.models import hub_reachable

            if not hub_reachable():  # a 2 s check instead of huggingface_hub's ~25 s of retries
                raise
            path = hf_hub_download(repo_id, "config.json")
    except (
        LocalEntryNotFoundError
    ) as exc:  # offline (or unreachable) and not cached; subclass of EntryNotFoundError
        raise HubUnreachableError(
            f"{repo_id}/config.json is not in the local cache and the hub cannot be reached. Upload the config.json "
            "instead, or pick a preset."
        ) from exc
    except (RepositoryNotFoundError, EntryNotFoundError) as exc:
        raise InvalidParameterError(
            f"{repo_id} has no config.json on the hub (or is gated); check the id"
        ) from exc
    except Exception as exc:  # network errors come in many types (requests, httpx, OSError, offline mode)
        raise HubUnreachableError(
            f"could not fetch {repo_id}/config.json ({type(exc).__name__}): the hub is unreachable and the file is "
            "not in the local cache. Upload the config.json instead, or pick a preset."
        ) from exc
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def spec_from_hub(repo_id: str) -> ModelSpec:
    return spec_from_hf_config(config_from_hub(repo_id), name=repo_id)
