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
            "interval_width": r.width,
            "cell": r.cell or None,
            "interval_from": {"level": r.band_level, "rows": r.band_rows} if r.band_level else None,
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
        "interval_calibration_on_fitted_rows": tr.calibration,
        "this_machine": list(tr.this_machine),
        "rows": rows,
    }


def _pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1%}"


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def format_text(r: dict) -> str:
    lines = [
        f"{'metric':<13}{'rows':>5}{'median |err|':>14}{'worst':>9}{'inside':>9}{'med width':>11}  target -> met?"
    ]
    for title, key in (
        ("held-back rows (neither the fit nor the intervals saw them)", "targets_on_held_back_rows"),
        ("all rows", "all_rows"),
    ):
        lines.append(f"-- {title}")
        for s in r[key]:
            met = {True: "met", False: "NOT met", None: "no rows"}[s.met]
            lines.append(
                f"{s.group:<13}{s.rows:>5}{_pct(s.median_abs_error):>14}{_pct(s.worst_abs_error):>9}"
                f"{_pct(s.coverage):>9}{_x(s.median_width):>11}  {s.target} -> {met}"
            )
    lines.append(
        "-- the interval rule on the fitted rows' own residuals (each band read without the row / its source)"
    )
    for kind, c in r["interval_calibration_on_fitted_rows"].items():
        lines.append(
            f"{kind:<13}{c['residuals']:>5}  nominal {c['nominal']:.0%}: inside {_pct(c['inside_leaving_out_the_row'])}, "
            f"width {_x(c['median_width_leaving_out_the_row'])} / inside {_pct(c['inside_leaving_out_its_source'])}, "
            f"width {_x(c['median_width_leaving_out_its_source'])}"
        )
    lines.append(
        "setups a source ran that the calculator says do not fit: "
        + (", ".join(r["setups_said_not_to_fit"]) or "none")
    )
    for name, c in r["engine_classes"].items():
        families = ", ".join(f"{kind} on {fam} x{f:.2f}" for (kind, fam), f in c.family_factors.items())
        lines.append(
            f"  {name:<13} decode bandwidth {c.bandwidth:.0%}, {c.overhead_s_per_layer * 1e6:.0f} us/layer/step, "
            f"prefill compute {c.flops:.0%} (half of it at {c.prefill_half_tokens:.0f} tokens), "
            f"request fixed {c.request_fixed_s * 1e3:.1f} ms "
            f"({c.decode_rows} decode, {c.prefill_rows} first-token, {c.throughput_rows} throughput rows, "
            f"{c.sources} sources)" + (f"; time factor by GPU family: {families}" if families else "")
        )
    return "\n".join(lines)
