"""What the lever commands (quant, speculate) print: one JSON entry per measured row, with the report's model and
device and the row's verdict beside its numbers; as text, the table and then those verdicts as bullets."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from engine.calc.format import cell, span

# one column of the text table: its title, its alignment and width ("<12", ">10"), and its cell for an entry, so a
# header and its lines cannot drift apart
Cell = Callable[[dict], Any]
Column = tuple[str, str, Cell]


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


def table_and_verdicts(columns: Sequence[Column], rows: Iterable[dict]) -> list[str]:
    """The table (the columns' titles, then a line of their cells per entry), a blank line, and a bullet per
    entry's verdict."""
    rows = list(rows)
    header = "".join(f"{title:{width}}" for title, width, _ in columns)
    lines = ["".join(f"{cell(e)!s:{width}}" for _, width, cell in columns) for e in rows]
    return [header, *lines, "", *[f"- {e['verdict']}" for e in rows]]


def speedup_columns(key: str, ci_width: str) -> tuple[Column, Column]:
    """The speedup at `key` and its bootstrap 95% interval (`speedup_ci`), as each lever's table shows them."""
    return (
        ("speedup", ">9", lambda e: cell(e[key], ".2f")),
        ("95% CI", ci_width, lambda e: span(e["speedup_ci"])),
    )
