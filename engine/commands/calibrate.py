"""`python -m engine calibrate`: run one model on this machine and store what fraction of the roofs it reaches."""

from __future__ import annotations

from engine.calibration import DEFAULT_DTYPES, DEFAULT_MODEL, Calibration, calibrate, calibration_path

HELP = "measure this machine's achieved bandwidth and FLOP/s on a real run; the calculator's calibrated mode uses it"


def add_arguments(parser) -> None:
    parser.add_argument("--model", default=DEFAULT_MODEL, help="an engine preset to run")
    parser.add_argument(
        "--dtypes", default=",".join(DEFAULT_DTYPES), help="comma-separated precisions to run"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="measured runs per precision after one warm-up"
    )


def run(args) -> dict:
    cal = calibrate(
        args.model, tuple(d.strip() for d in args.dtypes.split(",") if d.strip()), repeats=args.repeats
    )
    return {"calibration": cal, "path": str(calibration_path(cal.machine_id))}


def format_text(r: dict) -> str:
    c: Calibration = r["calibration"]
    lines = [
        f"calibrated on {c.model} at {c.created_at} ({c.machine_id}); stored in {r['path']}",
        f"  roofs: read bandwidth {c.peak_bandwidth_bytes_per_s / 1e9:.1f} GB/s, matmul "
        + ", ".join(f"{k} {v / 1e9:.0f} GFLOP/s" for k, v in c.peak_flops.items()),
        f"  bandwidth efficiency {c.bandwidth_efficiency:.2f}, fixed cost {c.step_overhead_s_per_layer * 1e3:.3f} ms per layer per step",
        "  FLOP/s efficiency " + ", ".join(f"{k} {v:.2f}" for k, v in c.flops_efficiency.items()),
    ]
    lines += [f"  note: {n}" for n in c.notes]
    return "\n".join(lines)
