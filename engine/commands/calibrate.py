"""`python -m engine calibrate`: run the bundled model on this machine and store the fitted timing model."""

from __future__ import annotations

from engine.calibration import CalibrateSpec, Calibration, calibrate, calibration_path

HELP = (
    "fit this machine's achieved bandwidth, per-layer cost and FLOP/s per precision on real runs (several "
    "shapes, two depths, repeated); the calculator's calibrated mode uses it"
)


def add_arguments(parser) -> None:
    CalibrateSpec.add_arguments(parser)


def run(args) -> dict:
    spec = CalibrateSpec.from_args(args)
    cal = calibrate(spec.model, spec.dtypes, repeats=spec.repeats)
    return {"calibration": cal, "path": str(calibration_path(cal.machine_id))}


def format_text(r: dict) -> str:
    c: Calibration = r["calibration"]
    lines = [
        f"calibrated on {c.model} at {c.created_at} ({c.machine_id}); stored in {r['path']}",
        f"  roofs: read bandwidth {c.peak_bandwidth_bytes_per_s / 1e9:.1f} GB/s, matmul "
        + ", ".join(f"{k} {v / 1e9:.0f} GFLOP/s" for k, v in c.peak_flops.items()),
    ]
    for dt, f in c.fits.items():
        lines.append(
            f"  {dt}: {f.achieved_bandwidth / 1e9:.1f} GB/s achieved, {f.overhead_s_per_layer * 1e3:.3f} ms per layer "
            f"per step, prefill {f.achieved_flops / 1e9:.0f} GFLOP/s + {f.prefill_fixed_s * 1e3:.1f} ms; "
            f"{f.shapes} shapes, decode residuals within "
            f"{max((abs(x) for x in f.decode_residuals), default=0):.0%}"
        )
    if c.load is not None:
        lines.append(f"  load: {c.load.describe()}")
    lines += [f"  note: {n}" for n in c.notes]
    return "\n".join(lines)
