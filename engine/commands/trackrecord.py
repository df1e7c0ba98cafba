"""`python -m engine trackrecord`: every published measurement beside the calculator's prediction for the same
setup, the error per metric on the held-back rows and on all of them, and this machine's own runs."""

from __future__ import annotations

import math

from engine import trackrecord as T

HELP = "the calculator's accuracy against published GPU measurements (and this machine's runs)"


def add_arguments(parser) -> None:
    parser.add_argument("--rows", action="store_true", help="print every row, not only the summary")
    parser.add_argument("--no-machine", action="store_true", help="leave out this machine's logged runs")


def run(args) -> dict:
    tr = T.track_record(include_machine=not args.no_machine)
    rows = [
        {
            "id": r.id,
            "group": r.group,
            "metric": r.metric,
            "model": r.model,
            "gpu": r.gpu,
            "engine": r.engine,
            "setup": r.setup,
            "published": r.published,
            "unit": r.unit,
            "predicted": r.predicted,
            "interval": [r.low, r.high] if r.low is not None else None,
            "bound": r.bound,
            "error": r.error,
            "inside_interval": r.inside,
            "held_back": r.held_back,
            "not_scored_because": r.why or None,
            "note": r.note or None,
            "source": r.source,
            "quote": r.quote,
        }
        for r in tr.rows
    ]
    return {
        "targets_on_held_back_rows": tr.held_back,
        "all_rows": tr.all_rows,
        "setups_said_not_to_fit": list(tr.not_fitting),
        "engine_classes": tr.classes,
        "vllm_activation_model": tr.activation,
        "this_machine": list(tr.this_machine),
        "rows": rows,
    }


def _pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1%}"


def format_text(r: dict) -> str:
    lines = [f"{'metric':<14}{'rows':>5}{'median |err|':>14}{'worst':>9}{'in interval':>13}  target -> met?"]
    for title, key in (
        ("held-back rows (the fit never saw them)", "targets_on_held_back_rows"),
        ("all rows", "all_rows"),
    ):
        lines.append(f"-- {title}")
        for s in r[key]:
            met = {True: "met", False: "NOT met", None: "no rows"}[s.met]
            lines.append(
                f"{s.group:<14}{s.rows:>5}{_pct(s.median_abs_error):>14}{_pct(s.worst_abs_error):>9}"
                f"{_pct(s.coverage):>13}  {s.target} -> {met}"
            )
    lines.append(
        "setups a source ran that the calculator says do not fit: "
        + (", ".join(r["setups_said_not_to_fit"]) or "none")
    )
    for name, c in r["engine_classes"].items():
        lines.append(
            f"  {name:<13} decode bandwidth {c.bandwidth:.0%}, {c.overhead_s_per_layer * 1e6:.0f} us/layer/step, "
            f"prefill compute {c.flops:.0%}; interval x{c.decode_ratio[0]:.2f}-{c.decode_ratio[1]:.2f} on time "
            f"({c.decode_rows} decode, {c.prefill_rows} prefill/throughput rows, {c.sources} sources)"
        )
    return "\n".join(lines)
