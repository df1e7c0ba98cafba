"""Names to shapes: a calculator preset, a model the engine loads, a published config by its hub id, or a hub id
(config.json only); a GPU by its catalogue key, or this machine (whose roofs the caller supplies: they come from
the calibration, a layer above)."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from engine.arch.hub import hub_repo_id
from engine.calc import published
from engine.calc.hf_config import spec_from_hf_config
from engine.calc.specs import DATA_DIR, THIS_MACHINE, GPUSpec, ModelSpec, model_preset
from engine.core.errors import InvalidParameterError, UnknownModelError

PRESETS_FILE = DATA_DIR / "model_presets.toml"


@dataclass(frozen=True)
class HubPreset:
    """A model as people name it (its Hugging Face id), with its config.json and where that text was found."""

    hub_id: str
    config: dict[str, Any]
    source: str
    base: str | None = None  # a fine-tune using its base model's config (model_presets.toml [[same_shapes]])
    base_source: str = ""  # where its publisher names that base


@cache
def hub_presets() -> dict[str, HubPreset]:
    """Every published config (engine/data/published/configs.toml, each id it stands for included) and the common
    families' configs (engine/data/model_presets.toml), by hub id, sorted."""
    out = {m: HubPreset(m, cfg, published.config_source(m)) for m, cfg in published.configs().items()}
    with PRESETS_FILE.open("rb") as f:
        data = tomllib.load(f)
    for entry in data["config"]:
        out[entry["model"]] = HubPreset(entry["model"], json.loads(entry["config"]), entry["source"])
    for entry in data.get("same_shapes", ()):  # a fine-tune of a preset: its base's config under its own id
        base = out[entry["base"]]
        out[entry["model"]] = HubPreset(
            entry["model"], base.config, base.source, base.hub_id, entry["source"]
        )
    return dict(sorted(out.items(), key=lambda kv: kv[0].lower()))


def hub_preset_spec(hub_id: str) -> ModelSpec:
    """A hub preset's spec, counted with its real class on the meta device; named and served by its own id (a
    config that stands for several checkpoints keeps the first one's `_name_or_path`)."""
    from engine.arch.meta import exact_spec

    preset = hub_presets()[hub_id]
    spec = exact_spec(preset.config, name=hub_id)
    where = f"config.json as published in {_repository(preset.source)}"
    if preset.base:
        where = f"{preset.base}'s {where}: {hub_id} is fine-tuned from it, as {_repository(preset.base_source)} says"
    return replace(spec, hub_id=hub_id, source=f"{spec.source}; {where}")


def _repository(source: str) -> str:
    """github.com/owner/name of a `repository@commit:path` citation (the page names the repository, the data
    file keeps the commit and path)."""
    return "/".join(source.split("@")[0].split(":")[0].split("/")[:3])


def spec_for_run_model(name: str) -> ModelSpec | None:
    """The calculator's ModelSpec for a model the engine ran: its preset's `calculator` shape (the one table,
    engine/data/presets.toml), else one built from a random preset's config, else the hub repo's name."""
    try:
        from engine.runtime.models import PRESETS
    except ImportError:
        return None
    preset = PRESETS.get(name)
    if preset is None:
        return None
    if preset.calculator:
        return model_preset(preset.calculator)
    if preset.config:
        model_type = {
            "GPTNeoForCausalLM": "gpt_neo",
            "LlamaForCausalLM": "llama",
            "GPT2LMHeadModel": "gpt2",
        }.get(preset.architecture)
        if model_type:
            return spec_from_hf_config({"model_type": model_type, **preset.config}, name=name)
    if preset.repo_id:
        key = preset.repo_id.split("/")[-1].lower()
        try:
            return model_preset(key)
        except UnknownModelError:
            return None
    return None


def resolve_model_spec(name: str) -> ModelSpec:
    """A calculator preset (gpt-neo-2.7b, llama-2-7b...), a model the engine loads (smollm2-135m-instruct,
    gpt-neo-125m-random...), a published config by its hub id (meta-llama/Llama-3.1-8B-Instruct...) or any other
    hub id (owner/name: its config.json only, from the hub or the local cache), or a model's page address on the hub
    (read as its owner/name)."""
    name = hub_repo_id(name)
    try:
        return model_preset(name)
    except UnknownModelError as exc:
        spec = spec_for_run_model(name)
        if spec is not None:
            return spec
        hub_id = hub_preset_id(name)
        if hub_id is not None:
            return hub_preset_spec(hub_id)
        if "/" in name:  # a hub id: config.json only, from the hub or the local cache
            return hub_spec(name)
        raise UnknownModelError(
            f"{exc}; a model with a published config also goes by its Hugging Face id or its name alone "
            f"(meta-llama/Llama-3.1-8B-Instruct, llama-3.1-8b-instruct): `python -m engine gpus --models` lists all "
            f"{len(hub_presets())}"
        ) from None


def hub_spec(repo_id: str) -> ModelSpec:
    """A hub id's spec: a model whose config.json the lab ships (its id in any case, or its name alone, as the
    command line takes it) from there; else its config.json from the hub or the local cache, and offline, the
    shipped config of a variant with the same layers (`near_preset`) named in the refusal. A model's page address
    (https://huggingface.co/owner/name/tree/main) reads as its owner/name (`hub_repo_id`)."""
    from engine.arch.hub import spec_from_hub
    from engine.core.errors import HubUnreachableError

    repo_id = hub_repo_id(repo_id)
    known = hub_preset_id(repo_id)
    if known is not None:
        return hub_preset_spec(known)
    if "/" not in repo_id:  # a name the command line takes (llama-3-8b): a preset, not a hub id
        try:
            return model_preset(repo_id)
        except UnknownModelError:
            pass
    try:
        return spec_from_hub(repo_id)
    except HubUnreachableError as exc:
        near = near_preset(repo_id)
        if near is None:
            raise
        raise HubUnreachableError(
            f"{str(exc).rstrip('.')} (the lab ships the config of {near}, a variant with the same layers and widths)."
        ) from None


VARIANT_SUFFIXES = ("-instruct", "-chat", "-hf", "-it", "-base")


def near_preset(repo_id: str) -> str | None:
    """A model whose config.json the lab ships and that differs from `repo_id` only by a fine-tune suffix
    (Qwen/Qwen2.5-72B for Qwen/Qwen2.5-72B-Instruct): the same layers, heads and widths, as aliases.toml says of
    instruct and chat variants."""

    def base(name: str) -> str:
        low = name.lower()
        return next((low[: -len(x)] for x in VARIANT_SUFFIXES if low.endswith(x)), low)

    want = base(repo_id)
    return next((k for k in hub_presets() if base(k) == want), None)


def hub_preset_id(name: str) -> str | None:
    """The hub preset a name means: its id (any case), or its name after the owner when only one preset has that
    name (`qwen2.5-7b-instruct` for Qwen/Qwen2.5-7B-Instruct); None if none or several do."""
    presets = hub_presets()
    if name in presets:
        return name
    low = name.lower()
    hits = [k for k in presets if low in (k.lower(), k.split("/")[-1].lower())]
    return hits[0] if len(hits) == 1 else None


def resolve_gpu(key: str, *, this_machine: Callable[[], GPUSpec] | None = None) -> GPUSpec:
    """A catalog GPU by key, or `this-machine` (its roofs from `this_machine()`: the calibration's, else the stored
    measurement, else measured now)."""
    from engine.calc.specs import gpu_spec

    if key == THIS_MACHINE:
        if this_machine is None:
            raise InvalidParameterError("this machine's roofs are not known here; measure it first")
        return this_machine()
    return gpu_spec(key)
