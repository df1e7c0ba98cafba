"""A value computed once per version of its inputs, kept on disk between processes.

The GPU estimates' fit over the published runs takes seconds of pure Python; every `python -m engine estimate`,
every fresh page process and every test worker would pay it again. `on_disk` keys the value, written as JSON by
the caller's `encode` and read back by its `decode`, by a hash of the files it is computed from (the data and the
code that reads them, so an edit to either recomputes) and of the Python version, under
`<INFERENCE_LAB_HOME>/memo/` (one file a name: an older version's is removed). JSON, not pickle: reading the file
runs no code, whoever wrote it. A missing, unreadable or stale file is recomputed; a folder that cannot be written
costs only the saving. Written to a temporary file and renamed, so two processes that compute at once never leave
half a file. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from engine.core.paths import home

T = TypeVar("T")

SUFFIXES = (".py", ".toml", ".json", ".csv")


def inputs_key(roots: Iterable[Path]) -> str:
    """sha256 over every source or data file below `roots` (relative name and bytes) and the Python version."""
    h = hashlib.sha256(sys.version.encode())
    for root in roots:
        for path in sorted(p for p in Path(root).rglob("*") if p.suffix in SUFFIXES and p.is_file()):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:20]


def on_disk(
    name: str,
    roots: Iterable[Path],
    compute: Callable[[], T],
    encode: Callable[[T], Any] = lambda v: v,
    decode: Callable[[Any], T] = lambda d: d,
) -> T:
    """`compute()`, or `decode` of what an earlier process with the same inputs stored (`encode(value)`, as JSON)."""
    folder = home() / "memo"
    path = folder / f"{name}-{inputs_key(roots)}.json"
    try:
        return decode(json.loads(path.read_text(encoding="utf-8")))
    except Exception:  # absent, unreadable or from another version: compute it
        pass
    value = compute()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(encode(value), f)
        os.replace(tmp, path)
        for old in folder.glob(f"{name}-*.json"):
            if old != path:
                old.unlink(missing_ok=True)
    except (OSError, TypeError, ValueError):
        pass
    return value
