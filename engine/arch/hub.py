"""Fetch a hub model's config.json (only that file; the local HF cache first, a 2 s reachability check
before any network call), for the calculators."""

from __future__ import annotations

import re
from typing import Any

from engine.calc.specs import ModelSpec
from engine.core.errors import DependencyMissingError, InvalidParameterError

# a model's page on the hub, as a browser's address bar gives it: https://huggingface.co/owner/name, with or without
# the scheme, www. or a tail (/tree/main, /blob/main/config.json, ?query, #anchor); hf.co is the hub's short host
_HUB_URL = re.compile(r"^(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)(?:/|$)", re.IGNORECASE)
# the hub's pages whose first path part is not an owner (a dataset's or a Space's repository is not a model's)
_NOT_MODEL_PAGES = {
    "datasets": "a dataset",
    "spaces": "a Space",
    "collections": "a collection",
    "models": "the list of models",
    "docs": "the documentation",
    "papers": "a paper",
    "blog": "the blog",
}


def hub_repo_id(text: str) -> str:
    """The hub id `text` means: itself (stripped), or owner/name when it is a model's page address
    (https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/tree/main -> meta-llama/Llama-3.1-8B-Instruct), so an
    address pasted from the browser reads as the id the page and `--model` take. An address that names no model (a
    dataset, a Space, the hub's front page) is refused with what to give instead."""
    text = text.strip()
    head = _HUB_URL.match(text)
    if head is None:
        return text
    path = re.split(r"[?#]", text[head.end() :], maxsplit=1)[0]
    parts = [p for p in path.split("/") if p]
    what = (
        "the hub's front page"
        if not parts
        else _NOT_MODEL_PAGES.get(parts[0].lower()) or ("an owner's page" if len(parts) < 2 else None)
    )
    if what is not None:
        raise InvalidParameterError(
            f"{text} is {what}, not a model's page: give a model's address or its id "
            "as owner/name, e.g. https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct or "
            "meta-llama/Llama-3.1-8B-Instruct"
        )
    return f"{parts[0]}/{parts[1]}"


def config_from_hub(repo_id: str) -> dict[str, Any]:
    """config.json of a hub model (only that file; from the local HF cache when offline); `repo_id` may be the
    model's page address (`hub_repo_id`)."""
    import json

    from engine.core.errors import HubUnreachableError

    repo_id = hub_repo_id(repo_id)
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

    repo_id = hub_repo_id(repo_id)
    return exact_spec(config_from_hub(repo_id), name=repo_id)
