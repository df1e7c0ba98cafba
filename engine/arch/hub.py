"""Fetch a hub model's config.json (only that file; the local HF cache first, a 2 s reachability check
before any network call), for the calculators."""

from __future__ import annotations

from typing import Any

from engine.calc.specs import ModelSpec
from engine.core.errors import DependencyMissingError, InvalidParameterError


def config_from_hub(repo_id: str) -> dict[str, Any]:
    """config.json of a hub model (only that file; from the local HF cache when offline)."""
    import json

    from engine.core.errors import HubUnreachableError

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
            from engine.runtime.models import hub_reachable

            if not hub_reachable():  # a 2 s check instead of huggingface_hub's ~25 s of retries
                raise
            path = hf_hub_download(repo_id, "config.json")
    except (
        LocalEntryNotFoundError
    ) as exc:  # offline (or unreachable) and not cached; subclass of EntryNotFoundError
        raise HubUnreachableError(
            f"{repo_id}/config.json is not in the local cache and the hub cannot be reached: give the config.json "
            "itself instead (the page's config.json box, or --config on the command line), or pick a preset."
        ) from exc
    except (RepositoryNotFoundError, EntryNotFoundError) as exc:
        raise InvalidParameterError(
            f"{repo_id} has no config.json on the hub (or is gated); check the id"
        ) from exc
    except Exception as exc:  # network errors come in many types (requests, httpx, OSError, offline mode)
        raise HubUnreachableError(
            f"could not fetch {repo_id}/config.json ({type(exc).__name__}): the hub is unreachable and the file is "
            "not in the local cache: give the config.json itself instead (the page's config.json box, or --config on "
            "the command line), or pick a preset."
        ) from exc
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def spec_from_hub(repo_id: str) -> ModelSpec:
    """The spec of a hub model from its config.json, counted with its real class on the meta device."""
    from engine.arch.meta import exact_spec

    return exact_spec(config_from_hub(repo_id), name=repo_id)
