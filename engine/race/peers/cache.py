"""Offline conversion into the model cache, once per (engine version, model, precision).

Source: the engine's own cached safetensors copy (the bundled SmolLM2 is dequantized once by
engine.runtime.models.ensure_bundled_copy), a local HF folder, a hub model already in the local HF cache, or a
random-weight preset saved once with its seeded weights. Target:
`<INFERENCE_LAB_HOME>/models/peers/<engine>-<version>/<model key>-<precision>/`, written to a temporary
folder and renamed when complete, with `conversion.json` beside it (seconds, command, date). A file lock
keeps two workers from converting the same thing at once; the second one finds it done.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from engine.core import paths

MARKER = "conversion.json"


class Unsupported(Exception):
    """The model cannot be converted by this engine; the message says why (shown as the lane's reason)."""


@dataclass(frozen=True)
class Source:
    folder: Path  # an HF folder: config.json + safetensors + tokenizer
    key: str  # names the conversion in the cache
    architecture: str  # e.g. LlamaForCausalLM
    model_type: str  # e.g. llama


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:80] or "model"


def _read_config(folder: Path) -> tuple[str, str]:
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    arch = (cfg.get("architectures") or [""])[0] or ""
    return arch, str(cfg.get("model_type", ""))


def source_for(model: str) -> Source:
    """The HF folder to convert `model` from. Raises Unsupported when there is none offline."""
    from engine.runtime import models

    kind, preset, where = models._resolve(model)
    if kind == "gguf":
        folder = models.ensure_bundled_copy(preset)
        if folder is None:
            raise Unsupported("the model cache is not writable, so there is no safetensors copy to convert")
        key = preset.name
    elif kind == "random":
        folder, key = _materialise_random(model)
    elif kind == "local":
        folder = Path(where)
        weights = sorted(folder.glob("*.safetensors"))
        if not weights:
            raise Unsupported(f"{folder.name} has no safetensors weights to convert")
        stamp = f"{folder.resolve()}:{sum(w.stat().st_size for w in weights)}:{max(w.stat().st_mtime for w in weights)}"
        key = f"{_slug(folder.name)}-{hashlib.sha256(stamp.encode()).hexdigest()[:10]}"
    else:  # a hub id, usable only if the local HF cache has it (conversion never downloads)
        repo = str(where)
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(repo, local_files_only=True))
        except Exception as exc:  # LocalEntryNotFoundError and friends
            raise Unsupported(
                f"{repo} is not in the local Hugging Face cache, and conversion never downloads "
                f"({type(exc).__name__}); load it once on the playground with the hub reachable"
            ) from exc
        key = _slug(repo.replace("/", "--")) + "-" + folder.name[:10]
    arch, model_type = _read_config(folder)
    return Source(folder, key, arch, model_type)


def family(model: str) -> tuple[str, str] | None:
    """(architecture, model_type) of a random-weight preset without building it (None for other models),
    so an engine that cannot convert the family says so before gigabytes of random weights are saved."""
    from engine.runtime import models

    preset = models.PRESETS.get(model)
    if preset is None or preset.kind != "random":
        return None
    import transformers

    config_cls = getattr(transformers, preset.architecture.replace("ForCausalLM", "Config"))
    return preset.architecture, str(config_cls.model_type)


def _materialise_random(name: str) -> tuple[Path, str]:
    """Random-weight presets: save the seeded model once (the same weights vanilla gets in this transformers)."""
    import transformers

    from engine.runtime import models

    key = f"{name}-tf{transformers.__version__}"
    folder = paths.models_dir() / "peers-src" / key
    if (folder / "config.json").is_file():
        return folder, key
    with _locked(folder):
        if not (folder / "config.json").is_file():
            lm = models.load_model(name, dtype="fp32", device="cpu")
            if not getattr(lm.model.config, "architectures", None):
                lm.model.config.architectures = [type(lm.model).__name__]
            tmp = folder.with_name(f".{folder.name}.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            lm.model.save_pretrained(tmp)
            lm.tokenizer.save_pretrained(tmp)
            tmp.rename(folder)
    return folder, key


def target_dir(engine: str, version: str, source: Source, precision: str) -> Path:
    return paths.models_dir() / "peers" / f"{engine}-{_slug(version)}" / f"{source.key}-{precision}"


def cached(target: Path) -> dict | None:
    """The conversion record when `target` holds a finished conversion."""
    marker = target / MARKER
    if not marker.is_file():
        return None
    try:
        return json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_converted(target: Path, convert: Callable[[Path], list[str]]) -> tuple[dict, bool]:
    """Convert into `target` unless it is already there; return (record, converted_now)."""
    record = cached(target)
    if record is not None:
        return record, False
    with _locked(target):
        record = cached(target)
        if record is not None:  # another worker finished it while we waited
            return record, False
        tmp = target.with_name(f".{target.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.perf_counter()
        try:
            command = convert(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        record = {
            "seconds": time.perf_counter() - t0,
            "command": command,
            "converted_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        (tmp / MARKER).write_text(json.dumps(record, indent=1), encoding="utf-8")
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)  # atomic: a half-written conversion is never seen as complete
    return record, True
