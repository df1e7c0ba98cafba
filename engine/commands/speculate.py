"""`python -m engine speculate`: prompt lookup decoding and assisted generation against plain greedy, on
input-grounded and open-ended workloads (acceptance, tokens per target forward, speedup, Leviathan et al.)."""

from __future__ import annotations

from engine.calc.format import cell
from engine.commands import lever_report
from engine.levers import speculative as S

HELP = "speculative decoding (prompt lookup, draft model) measured against plain greedy on two workloads"


def add_arguments(parser) -> None:
    S.SpeculateSpec.add_arguments(parser)


def rows(report: S.SpecReport) -> list[dict]:
    return lever_report.entries(report, S.verdict)


def run(args) -> list[dict]:
    spec = S.SpeculateSpec.from_args(args)  # fail before loading anything
    return rows(S.run_speculate(spec.load(), spec))


COLUMNS: tuple[lever_report.Column, ...] = (
    ("method", "<15", lambda e: e["method"]),
    ("workload", "<16", lambda e: e["workload"]),
    ("alpha", ">7", lambda e: cell(e["acceptance_rate"], ".2f")),
    ("tok/fwd", ">9", lambda e: cell(e["tokens_per_target_forward"], ".2f")),
    *lever_report.speedup_columns("speedup_vs_plain", ">13"),
    ("expected", ">10", lambda e: cell(e["expected_speedup"], ".2f")),
    ("c", ">6", lambda e: cell(e["cost_ratio"], ".2f")),
    ("same", ">6", lambda e: e["identical_to_greedy"]),
)


def format_text(entries: list[dict]) -> str:
    return "\n".join(lever_report.table_and_verdicts(COLUMNS, entries))
