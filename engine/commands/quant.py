"""`python -m engine quant`: weight quantization schemes applied to one model and measured against fp32
(bytes, memory, speed with a bootstrap interval, bits per byte, greedy agreement, the calculator's bytes)."""

from __future__ import annotations

from engine.calc.format import cell, gb, span
from engine.commands import lever_report
from engine.levers import quant as Q

HELP = "quantize a model's weights (fp32, bf16, torchao int8/int4, bitsandbytes, ...) and measure each scheme"


def add_arguments(parser) -> None:
    Q.QuantSpec.add_arguments(parser)


def rows(report: Q.QuantReport) -> list[dict]:
    """The JSON entries: one per scheme, with the model, the device and the verdict beside the numbers."""
    base = report.rows[0] if report.rows and report.rows[0].scheme == "fp32" else None
    return lever_report.entries(report, lambda r: Q.verdict(r, base), quality_method=report.quality_method)


def run(args) -> list[dict]:
    spec = Q.QuantSpec.from_args(args)  # fail before loading anything
    return rows(Q.run_quant(spec.load(), spec))


HEADER = (
    f"{'scheme':<12}{'status':<8}{'weights':>10}{'predicted':>11}{'ratio':>7}{'tok/s':>8}{'speedup':>9}"
    f"{'95% CI':>14}{'bpb':>8}{'Δbpb':>9}{'match':>7}{'div':>5}"
)


def _line(e: dict) -> str:
    return (
        f"{e['scheme']:<12}{e['status']:<8}{gb(e['weights_bytes']) if e['weights_bytes'] else '-':>10}"
        f"{gb(e['predicted_weights_bytes']) if e['predicted_weights_bytes'] else '-':>11}"
        f"{cell(e['predicted_ratio'], '.3f'):>7}{cell(e['tokens_per_s'], '.1f'):>8}{cell(e['speedup_vs_fp32'], '.2f'):>9}"
        f"{span(e['speedup_ci']):>14}{cell(e['bits_per_byte'], '.4f'):>8}"
        f"{cell(e['bits_per_byte_delta'], '+.4f'):>9}{cell(e['exact_match_rate'], '.0%'):>7}"
        f"{cell(e['first_divergence_token'], 'd'):>5}"
    )


def format_text(entries: list[dict]) -> str:
    lines = lever_report.table_and_verdicts(HEADER, _line, entries)
    if entries:
        lines.append(f"quality: {entries[0]['quality_method']}")
    return "\n".join(lines)
