"""Where the engine keeps files, and which local folders it may read models from.

Configured by the server's environment only (never from the browser):
  INFERENCE_LAB_HOME         cache root (default ~/.cache/inference-lab)
  INFERENCE_LAB_RUNS_DIR     where measured runs are logged (default <home>/runs)
  INFERENCE_LAB_MODEL_ROOTS  os.pathsep-separated folders local models may be loaded from
                             (default: <home>/models and ./models)
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

from engine.core.errors import PathNotAllowedError


def home() -> Path:
    root = Path(os.environ.get("INFERENCE_LAB_HOME", Path.home() / ".cache" / "inference-lab"))
    return root.expanduser()


def models_dir() -> Path:
    return home() / "models"


def runs_dir() -> Path:
    """Where measured runs are logged (INFERENCE_LAB_RUNS_DIR overrides; tests point it at a temp folder)."""
    override = os.environ.get("INFERENCE_LAB_RUNS_DIR")
    return Path(override).expanduser() if override else home() / "runs"


def machine_id() -> str:
    """A stable, filesystem-safe name for this machine (host + CPU model), used to key calibrations and run logs."""
    cpu = platform.processor() or platform.machine()
    raw = f"{platform.node()}-{cpu}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", raw)[:80]


def model_roots() -> list[Path]:
    configured = os.environ.get("INFERENCE_LAB_MODEL_ROOTS")
    if configured:
        return [Path(p).expanduser().resolve() for p in configured.split(os.pathsep) if p]
    return [models_dir().resolve(), (Path.cwd() / "models").resolve()]


def public(path: str | os.PathLike[str]) -> str:
    """A server path as it may be shown to a browser: under this lab's home it reads '<lab home>/...', under the
    working directory './...', under the user's home '~/...'; anything else shows its last part only. A page or a
    message never reveals the server's directory layout."""
    p = Path(path).expanduser()
    for root, label in ((home(), "<lab home>"), (Path.cwd(), "."), (Path.home(), "~")):
        try:
            return str(Path(label) / p.resolve().relative_to(root.resolve()))
        except ValueError:
            continue
    return p.name or str(p)


# An absolute path inside free text: a slash-led run of path characters, not part of a URL or a word.
_ABSOLUTE_PATH = re.compile(r"(?<![\w:/.~-])/(?:[\w.+@~-]+/)*[\w.+@~-]*")


def scrub(text: str) -> str:
    """Free text (an error message, a note) with every absolute server path replaced by `public(path)`: what a
    page shows of an exception or a worker's message never reveals the server's directory layout."""
    if not text:
        return text or ""
    return _ABSOLUTE_PATH.sub(lambda m: public(m.group(0)) if len(m.group(0)) > 1 else m.group(0), text)


def resolve_local_model_path(path: str | os.PathLike[str]) -> Path:
    """Resolve `path` and insist it lies under one of model_roots(); symlinks and `..` cannot escape."""
    candidate = Path(path).expanduser()
    roots = model_roots()
    if not candidate.is_absolute():
        # Relative paths are read against each root, never against the server's working directory.
        for root in roots:
            resolved = (root / candidate).resolve()
            if resolved.is_relative_to(root) and resolved.exists():
                return resolved
        resolved = (roots[0] / candidate).resolve()
    else:
        resolved = candidate.resolve()
    if not any(resolved.is_relative_to(root) for root in roots):
        allowed = ", ".join(public(r) for r in roots)
        raise PathNotAllowedError(
            f"{path!s} is outside the folders this server may load models from ({allowed}). "
            "Copy the model folder under one of them, or ask the server's operator to add its folder to "
            "INFERENCE_LAB_MODEL_ROOTS."
        )
    return resolved


def trust_remote_code_allowed() -> bool:
    """Only the server's own configuration can allow remote code; the browser never can."""
    return os.environ.get("INFERENCE_LAB_TRUST_REMOTE_CODE", "") == "1"
