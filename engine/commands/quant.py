"""`python -m engine quant`: weight quantization schemes applied to one model and measured against fp32
(bytes, memory, speed with a bootstrap interval, bits per byte, greedy agreement, the calculator's bytes)."""

from __future__ import annotations

from engine.calc.format import cell, gb
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


def _bytes(key: str) -> lever_report.Cell:
    return lambda e: gb(e[key]) if e[key] else "-"


COLUMNS: tuple[lever_report.Column, ...] = (
    ("scheme", "<12", lambda e: e["scheme"]),
    ("status", "<8", lambda e: e["status"]),
    ("weights", ">10", _bytes("weights_bytes")),
    ("predicted", ">11", _bytes("predicted_weights_bytes")),
    ("ratio", ">7", lambda e: cell(e["predicted_ratio"], ".3f")),
    ("tok/s", ">8", lambda e: cell(e["tokens_per_s"], ".1f")),
    *lever_report.speedup_columns("speedup_vs_fp32", ">14"),
    ("bpb", ">8", lambda e: cell(e["bits_per_byte"], ".4f")),
    ("Δbpb", ">9", lambda e: cell(e["bits_per_byte_delta"], "+.4f")),
    ("match", ">7", lambda e: cell(e["exact_match_rate"], ".0%")),
    ("div", ">5", lambda e: cell(e["first_divergence_token"], "d")),
)


def format_text(entries: list[dict]) -> str:
    lines = lever_report.table_and_verdicts(COLUMNS, entries)
    if entries:
        lines.append(f"quality: {entries[0]['quality_method']}")
    return "\n".join(lines)
