"""The race record as JSON and CSV, and the recorded races under bench/results/ (race-*.json)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
from pathlib import Path
from typing import Any

from engine.core.jsonsafe import to_jsonable
from engine.race.record import SUMMARY_FIELDS, ContenderResult, RaceResult

ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = ROOT / "bench" / "results"
# the measurements that default to NaN ("not measured"): JSON writes them as null, and reading back restores NaN
FLOAT_FIELDS = frozenset(
    f.name
    for f in dataclasses.fields(ContenderResult)
    if isinstance(f.default, float) and math.isnan(f.default)
)


def to_dict(result: RaceResult) -> dict[str, Any]:
    return to_jsonable(result)


def to_json(result: RaceResult) -> str:
    return json.dumps(to_dict(result), indent=2, allow_nan=False)


def _contender(data: dict[str, Any]) -> ContenderResult:
    names = {f.name for f in dataclasses.fields(ContenderResult)}
    return ContenderResult(
        **{k: (math.nan if v is None and k in FLOAT_FIELDS else v) for k, v in data.items() if k in names}
    )


def from_dict(data: dict[str, Any]) -> RaceResult:
    """Read a race back (schema 1 files, from before the peer engines, included)."""
    rows = [_contender(c) for c in data["contenders"]]
    recheck = data.get("baseline_recheck")
    top = {f.name for f in dataclasses.fields(RaceResult)} - {"contenders", "baseline_recheck"}
    return RaceResult(
        **{k: v for k, v in data.items() if k in top},
        contenders=rows,
        baseline_recheck=_contender(recheck) if recheck else None,
    )


def _csv_value(v):
    if isinstance(v, float) and not math.isfinite(v):
        return ""
    return "" if v is None else v


def to_csv(result: RaceResult) -> str:
    """One row per contender (the summary)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(SUMMARY_FIELDS), extrasaction="ignore")
    w.writeheader()
    for row in result.summary_rows():
        w.writerow({k: _csv_value(v) for k, v in row.items()})
    return buf.getvalue()


def runs_csv(result: RaceResult) -> str:
    """One row per timed run: the raw numbers behind the medians."""

    def at(values: list, i: int):
        return _csv_value(values[i]) if i < len(values) else ""

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["contender", "run", "latency_s", "ttft_s", "tpot_s", "tokens_per_s", "output_tokens"])
    for c in result.contenders:
        for i, lat in enumerate(c.latencies_s):
            w.writerow(
                [
                    c.name,
                    i + 1,
                    lat,
                    at(c.ttfts_s, i),
                    at(c.tpots_s, i),
                    at(c.tokens_per_s, i),
                    at(c.output_tokens, i),
                ]
            )
    return buf.getvalue()


def save(result: RaceResult, directory: Path | None = None, tag: str = "") -> Path:
    """Write the result as JSON under `directory`; the name says model, hardware and time."""
    hw = result.hardware.get("gpu") or result.hardware.get("accelerator", "cpu")
    stamp = result.started_at.replace(":", "").replace("-", "")[:15]
    name = "-".join(p for p in ("race", result.model, hw, tag, stamp) if p)
    path = Path(directory or RESULTS_DIR) / (re.sub(r"[^A-Za-z0-9_.-]+", "_", name) + ".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_json(result) + "\n", encoding="utf-8")
    return path


def load_recorded(directory: Path | None = None) -> list[tuple[Path, RaceResult]]:
    """Recorded race results (e.g. from scripts/gpu_check.sh), newest first; unreadable files are skipped."""
    found = []
    for path in sorted(Path(directory or RESULTS_DIR).glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and data.get("kind") == "race":
                found.append((path, from_dict(data)))
        except (OSError, ValueError, TypeError, KeyError):
            continue
    return sorted(found, key=lambda pr: pr[1].started_at, reverse=True)
