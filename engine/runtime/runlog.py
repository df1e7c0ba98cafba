"""Every measured run on this machine, appended as JSON lines under paths.runs_dir()/<machine>.jsonl, so the
calculator and roofline can put estimates beside measurements across sessions and restarts; and each
experiment's last results (a race, a batching replay, a quantization run...) under
paths.runs_dir()/results/<machine>/<experiment>.jsonl, each with its date, wall time and browser session.

The session key is the browser's (the dashboard keeps it in the page's URL), so a page reload finds that
session's own runs again, and a presenter can open a page on the last run recorded on this machine before
anything runs (ui.pace)."""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.core import paths
from engine.core.jsonsafe import from_jsonable, to_jsonable
from engine.core.load import is_busy, loadavg_1m
from engine.runtime.measurement import Measurement

_lock = threading.Lock()
MAX_LINES_READ = 5000  # newest runs win; the log is for comparison, not an archive
RESULTS_KEPT = 40  # per experiment: a file past twice this is cut back to the newest RESULTS_KEPT results
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


def log_path() -> Path:
    return paths.runs_dir() / f"{paths.machine_id()}.jsonl"


def _append(path: Path, line: str) -> bool:
    try:
        with _lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")
    except OSError:
        return False
    return True


def _lines(path: Path, keep: int) -> list[dict]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()[-keep:]
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a torn or foreign line is skipped, not fatal
    return [d for d in out if isinstance(d, dict)]


def record(
    measurement: Measurement,
    *,
    source: str | None = None,
    stop_reason: str | None = None,
    session: str | None = None,
) -> bool:
    """Append one run, with where it came from (`source`: playground, batching, calibration, benchmark), the load
    it ended under (stamped now where the run did not carry it, so the Memory page can leave a busy run out), how
    it ended (`stop_reason`; a "cancelled" run is logged but kept out of comparisons, see `comparable`) and the
    browser session that made it (`session`, so a reload finds the session's runs again).
    Returns False (and keeps going) if the cache folder is not writable: a read-only home must never break
    generation."""
    changes = {k: v for k, v in (("source", source), ("stop_reason", stop_reason)) if v is not None}
    # every run carries the load it ended under (a scheduler's, a batch's too)
    if measurement.loadavg_1m is None:
        load = loadavg_1m()
        changes["loadavg_1m"] = load
        if measurement.busy is None:
            changes["busy"] = is_busy(load)
    if changes:
        measurement = dataclasses.replace(measurement, **changes)
    entry = measurement.to_dict() | ({"session": session} if session else {})
    return _append(log_path(), json.dumps(entry, allow_nan=True))


def load(
    model: str | None = None, *, comparable_only: bool = False, session: str | None = None
) -> list[Measurement]:
    """The logged runs, oldest first; `comparable_only` drops runs a person cancelled; `session` keeps one
    browser session's runs."""
    runs = []
    for d in _lines(log_path(), MAX_LINES_READ):
        if session is not None and d.get("session") != session:
            continue
        try:
            m = Measurement.from_dict(d)
        except (ValueError, TypeError):
            continue
        if (model is None or m.model == model) and (m.comparable or not comparable_only):
            runs.append(m)
    return runs


@dataclasses.dataclass(frozen=True)
class StoredResult:
    """One experiment's result as it was stored: the payload (JSON), when, how long it took, how much work it
    was (the experiment's own unit: lanes x runs x tokens, requests...), and which browser session ran it."""

    experiment: str
    payload: Any
    date: str  # ISO 8601, UTC
    wall_s: float
    work: float
    session: str | None
    settings: dict

    def decoded(self, kind: Any) -> Any:
        """The payload as `kind` (a dataclass or a typed container), through engine.core.jsonsafe."""
        return from_jsonable(kind, self.payload)

    @property
    def when(self) -> str:
        """The date as a person reads it: '2026-12-02 10:31 UTC'."""
        return readable_date(self.date)


def readable_date(iso: str) -> str:
    """An ISO 8601 time as a person reads it, in UTC: '2026-12-02T09:24:32+00:00' -> '2026-12-02 09:24 UTC'
    (a time without a zone is taken as UTC, as this log writes them; text that is not a date comes back as is)."""
    try:
        t = datetime.fromisoformat(str(iso))
    except ValueError:
        return str(iso)
    t = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    return t.strftime("%Y-%m-%d %H:%M UTC")


def curated_path() -> Path:
    return paths.runs_dir() / "results" / paths.machine_id() / "presenter-session.txt"


def set_curated_session(session: str) -> bool:
    """Name the browser session whose runs presenter mode shows first: the tour benchmark's own walk, each stop run
    with the page's defaults in one session (bench/tour.py); False when the folder is not writable."""
    try:
        curated_path().parent.mkdir(parents=True, exist_ok=True)
        curated_path().write_text(session.strip() + "\n", encoding="utf-8")
        return True
    except OSError:
        return False


def curated_session() -> str | None:
    """The session set_curated_session named, or None."""
    try:
        return curated_path().read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def results_path(experiment: str) -> Path:
    if not _NAME.match(experiment):
        raise ValueError(f"experiment names are short lowercase words, got {experiment!r}")
    return paths.runs_dir() / "results" / paths.machine_id() / f"{experiment}.jsonl"


def save_result(
    experiment: str,
    result: Any,
    *,
    wall_s: float,
    work: float = 1.0,
    session: str | None = None,
    settings: dict | None = None,
) -> bool:
    """Store one experiment's result (a dataclass, or anything JSON-able) with its date, wall time and work;
    False when the folder is not writable (a run is never lost for want of a log)."""
    entry = {
        "experiment": experiment,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "wall_s": float(wall_s),
        "work": float(work),
        "session": session,
        "settings": to_jsonable(settings or {}),
        "payload": to_jsonable(result),
    }
    path = results_path(experiment)
    ok = _append(path, json.dumps(entry, allow_nan=False))
    if ok:
        _trim(path)
    return ok


def _trim(path: Path) -> None:
    try:
        with _lock:
            lines = path.read_text(encoding="utf-8").splitlines()
            if len(lines) > 2 * RESULTS_KEPT:
                path.write_text("\n".join(lines[-RESULTS_KEPT:]) + "\n", encoding="utf-8")
    except OSError:
        pass


def results(experiment: str, *, session: str | None = None) -> list[StoredResult]:
    """The stored results of the experiment on this machine, newest first (of one browser session when given);
    a line that does not read as a result is passed over."""
    found = []
    for d in reversed(_lines(results_path(experiment), 2 * RESULTS_KEPT)):
        if session is not None and d.get("session") != session:
            continue
        try:
            found.append(
                StoredResult(
                    experiment=experiment,
                    payload=d["payload"],
                    date=str(d["date"]),
                    wall_s=float(d["wall_s"]),
                    work=float(d.get("work", 1.0)),
                    session=d.get("session"),
                    settings=dict(d.get("settings") or {}),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    return found


def last_result(
    experiment: str,
    *,
    session: str | None = None,
    where: Callable[[StoredResult], bool] | None = None,
) -> StoredResult | None:
    """The newest stored result of the experiment on this machine (of one browser session when given; the newest
    for which `where` holds when given)."""
    return next((r for r in results(experiment, session=session) if where is None or where(r)), None)
