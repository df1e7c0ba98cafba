"""What the lever commands (quant, speculate) print: one JSON entry per measured row, with the report's model and
device and the row's verdict beside its numbers; as text, the table and then those verdicts as bullets."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any


def entries(report: Any, verdict: Callable[[Any], str], **extra: Any) -> list[dict]:
    """One dict per row of `report.rows`: the model, the device, the row's fields, its verdict, then `extra`."""
    return [
        {
            "model": report.model,
            "device": report.device,
            **dataclasses.asdict(r),
            "verdict": verdict(r),
            **extra,
        }
        for r in report.rows
    ]


def table_and_verdicts(header: str, line: Callable[[dict], str], rows: Iterable[dict]) -> list[str]:
    """The table (its header, a `line` per entry), a blank line, and a bullet per entry's verdict."""
    rows = list(rows)
    return [header, *map(line, rows), "", *[f"- {e['verdict']}" for e in rows]]
