"""Every measured run on this machine, appended as JSON lines under paths.runs_dir()/<machine>.jsonl,
so the calculator and roofline can put estimates beside measurements across sessions and restarts."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from engine import paths
from engine.measurement import Measurement

_lock = threading.Lock()
MAX_LINES_READ = 5000  # newest runs win; the log is for comparison, not an archive


def log_path() -> Path:
    return paths.runs_dir() / f"{paths.machine_id()}.jsonl"


def record(measurement: Measurement) -> bool:
    """Append one run. Returns False (and keeps going) if the cache folder is not writable:
    a read-only home must never break generation."""
    path = log_path()
    line = json.dumps(measurement.to_dict(), allow_nan=True)
    try:
        with _lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")
    except OSError:
        return False
    return True


def load(model: str | None = None) -> list[Measurement]:
    path = log_path()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()[-MAX_LINES_READ:]
    except OSError:
        return []
    runs = []
    for line in lines:
        try:
            m = Measurement.from_dict(json.loads(line))
        except (ValueError, TypeError):
            continue  # a torn or foreign line is skipped, not fatal
        if model is None or m.model == model:
            runs.append(m)
    return runs
