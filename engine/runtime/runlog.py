"""Every measured run on this machine, appended as JSON lines under paths.runs_dir()/<machine>.jsonl,
so the calculator and roofline can put estimates beside measurements across sessions and restarts."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

from engine.core import paths
from engine.runtime.measurement import Measurement

_lock = threading.Lock()
MAX_LINES_READ = 5000  # newest runs win; the log is for comparison, not an archive


def log_path() -> Path:
    return paths.runs_dir() / f"{paths.machine_id()}.jsonl"


def record(measurement: Measurement, *, source: str | None = None, stop_reason: str | None = None) -> bool:
    """Append one run, with where it came from (`source`: playground, batching, calibration, benchmark) and how
    it ended (`stop_reason`; a "cancelled" run is logged but kept out of comparisons, see `comparable`).
    Returns False (and keeps going) if the cache folder is not writable: a read-only home must never break
    generation."""
    changes = {k: v for k, v in (("source", source), ("stop_reason", stop_reason)) if v is not None}
    if changes:
        measurement = dataclasses.replace(measurement, **changes)
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


def load(model: str | None = None, *, comparable_only: bool = False) -> list[Measurement]:
    """The logged runs, oldest first; `comparable_only` drops runs a person cancelled."""
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
        if (model is None or m.model == model) and (m.comparable or not comparable_only):
            runs.append(m)
    return runs
