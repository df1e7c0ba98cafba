"""`python -m engine speculate`: prompt lookup decoding and assisted generation against plain greedy, on
input-grounded and open-ended workloads (acceptance, tokens per target forward, speedup, Leviathan et al.)."""

from __future__ import annotations

from engine.calc.format import cell, span
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


HEADER = (
    f"{'method':<15}{'workload':<16}{'alpha':>7}{'tok/fwd':>9}{'speedup':>9}{'95% CI':>13}{'expected':>10}"
    f"{'c':>6}{'same':>6}"
)


def _line(e: dict) -> str:
    return (
        f"{e['method']:<15}{e['workload']:<16}{cell(e['acceptance_rate'], '.2f'):>7}"
        f"{cell(e['tokens_per_target_forward'], '.2f'):>9}{cell(e['speedup_vs_plain'], '.2f'):>9}"
        f"{span(e['speedup_ci']):>13}{cell(e['expected_speedup'], '.2f'):>10}"
        f"{cell(e['cost_ratio'], '.2f'):>6}{e['identical_to_greedy']!s:>6}"
    )


def format_text(entries: list[dict]) -> str:
    return "\n".join(lever_report.table_and_verdicts(HEADER, _line, entries))
