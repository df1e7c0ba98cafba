"""Estimates that come true: calibrate on the bundled SmolLM2 (fp32 and bf16, several shapes, two depths) on
this machine, then predict shapes the fit never saw and compare with their measured TTFT and TPOT:
GPT-Neo 125M (true shape, random weights) in fp32 and bf16 at batch 1 and 4, and GPT-Neo 1.3B (random
weights) in fp32 (bf16 with --neo13-bf16). Datasheet mode (this machine's measured roofs) is shown beside it.

    .venv/bin/python -m bench.calibration [--repeats 3] [--no-neo13] [--neo13-bf16]

Robust to a busy machine by construction, and the load is reported: calibration runs and target runs take
turns in one loop (a load that comes and goes touches both alike), each shape is repeated and its fastest
repeat kept (TTFT and TPOT separately; TPOT of a run is its median step interval), and every run records the
load average and this process's CPU share (engine.calibration.runs). Target: calibrated /
measured within 0.8..1.2 for TPOT and TTFT of every target. This is a benchmark, not a test. Prints a table,
writes bench/results/calibration-<machine>-<UTC time>.json and stores the calibration for this machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from bench.common import ROOT
from engine.calibration import (
    CALIBRATION_SHAPES,
    DEFAULT_MODEL,
    SHORT_DEPTH,
    RunSample,
    build_calibration,
    load_models,
    machine,
    predict,
    predict_interval,
    run_samples,
    save_calibration,
    spec_for_run_model,
)
from engine.calibration.runs import Shape, TimedRun, gemm_curve, gemv_curve, timed_run
from engine.core import paths
from engine.core.jsonsafe import to_jsonable
from engine.core.load import cores, loadavg_1m
from engine.core.stats import median
from engine.core.threads import run_in_thread

DTYPES = ("fp32", "bf16")
NEO125 = "gpt-neo-125m-random"
NEO13 = "gpt-neo-1.3b-random"
NEO125_SHAPES = (Shape(48, 8, 1), Shape(48, 8, 4))
NEO13_SHAPES = (Shape(32, 5, 1),)
NEO13_REPEATS = 2  # 5 GB of fp32 weights per step: few tokens, few repeats


def run(repeats: int, neo13: bool, neo13_bf16: bool, raw_out: Path | None = None) -> dict:
    from engine.runtime.models import load_model

    t0 = time.perf_counter()
    roofs = machine.measure(DTYPES, store=False)
    curve = {"gemv": gemv_curve(DTYPES), "gemm": gemm_curve(DTYPES)}
    calib_lms = load_models(DEFAULT_MODEL, DTYPES, short_depth=SHORT_DEPTH)
    targets = [(load_model(NEO125, dtype=dt, device="cpu"), NEO125_SHAPES, repeats) for dt in DTYPES]
    if neo13:
        for dt in ("fp32", "bf16") if neo13_bf16 else ("fp32",):
            targets.append((load_model(NEO13, dtype=dt, device="cpu"), NEO13_SHAPES, NEO13_REPEATS))
    for lm in [*calib_lms, *(t[0] for t in targets)]:
        timed_run(lm, Shape(16, 3, 1))  # warm-up: allocator, thread pool, caches
    print(f"loaded and warmed up at {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    calib_runs, target_runs = [], []
    for rep in range(repeats):  # calibration and targets take turns
        for shape in CALIBRATION_SHAPES:
            for lm in calib_lms:
                calib_runs.append(timed_run(lm, shape))
        for lm, shapes, n in targets:
            if rep < n:
                target_runs += [timed_run(lm, s) for s in shapes]
        print(
            f"repeat {rep + 1}/{repeats} done at {time.perf_counter() - t0:.0f} s, load average "
            f"{loadavg_1m():.1f}",
            file=sys.stderr,
            flush=True,
        )
        _save_raw(raw_out, calib_runs, target_runs, roofs, curve)  # a run cut short still leaves its data
    roofs = machine.best_of(roofs, machine.measure(DTYPES, store=False))
    machine.save(roofs)
    _save_raw(raw_out, calib_runs, target_runs, roofs, curve)  # the analysis can be redone (--from-runs)
    return analyse(calib_runs, target_runs, roofs, t0, curve)


def _save_raw(raw_out: Path | None, calib_runs, target_runs, roofs, curve) -> None:
    if raw_out is not None:
        raw_out.parent.mkdir(parents=True, exist_ok=True)
        raw_out.write_text(
            json.dumps(
                to_jsonable(
                    {
                        "calibration_runs": [asdict(r) for r in calib_runs],
                        "target_runs": [asdict(r) for r in target_runs],
                        "roofs": asdict(roofs),
                        "curves": curve,
                    }
                ),
                indent=1,
            )
        )


def analyse(calib_runs, target_runs, roofs, t0: float, curve: dict | None) -> dict:
    """`curve`: {"gemv": ..., "gemm": ...} (engine.calibration.runs), either may be missing."""
    smol = spec_for_run_model(DEFAULT_MODEL)
    curve = curve or {}
    cal = build_calibration(
        smol,
        run_samples(calib_runs, smol.n_layer),
        roofs.gpu_spec(),
        model=DEFAULT_MODEL,
        gemv=curve.get("gemv"),
        gemm=curve.get("gemm"),
    )
    save_calibration(cal)  # as `python -m engine calibrate` would
    rows = []
    groups: dict[tuple, list] = {}
    for r in target_runs:
        groups.setdefault((r.model, r.dtype, r.batch_size, r.prompt_tokens, r.output_tokens), []).append(r)
    for (model, dt, b, p, o), runs in groups.items():
        spec = spec_for_run_model(model)
        pred = predict_interval(cal, spec, dtype=dt, prompt_tokens=p, output_tokens=o, batch=b)
        ds_ttft, ds_tpot = predict(spec, RunSample(dt, b, p, o, 0, 0), roofs.gpu_spec())
        tpot, ttft = min(r.step_s_median for r in runs), min(r.ttft_s for r in runs)
        rows.append(
            {
                "model": model,
                "dtype": dt,
                "batch": b,
                "prompt": p,
                "output": o,
                "runs": len(runs),
                "measured_tpot_s": tpot,
                "measured_ttft_s": ttft,
                "measured_tpot_median_s": median([r.step_s_median for r in runs]),
                "measured_ttft_median_s": median([r.ttft_s for r in runs]),
                "calibrated_tpot_s": pred.tpot.central,
                "calibrated_tpot_interval_s": [pred.tpot.low, pred.tpot.high],
                "calibrated_ttft_s": pred.ttft.central,
                "calibrated_ttft_interval_s": [pred.ttft.low, pred.ttft.high],
                "calibrated_over_measured_tpot": pred.tpot.central / tpot,
                "calibrated_over_measured_ttft": pred.ttft.central / ttft,
                "datasheet_over_measured_tpot": ds_tpot / tpot,
                "datasheet_over_measured_ttft": ds_ttft / ttft,
                "loadavg_1m_median": median([r.loadavg_1m for r in runs]),
                "cpu_share_median": median([r.cpu_share for r in runs]),
            }
        )
    return {
        "calibration": asdict(cal),
        "rows": rows,
        "load": asdict(cal.load) if cal.load else None,
        "target_runs_cpu_share_median": median([r.cpu_share for r in target_runs]),
        "target_runs_loadavg_median": median([r.loadavg_1m for r in target_runs]),
        "roofs": asdict(roofs),
        "curves": curve,
        "seconds": time.perf_counter() - t0,
    }


def _timed_run(r: dict) -> dict:
    """A saved run from before TimedRun's names said which statistic: `tpot_s` was the median step interval and
    `tpot_mean_s` vLLM's mean TPOT."""
    if "tpot_mean_s" in r:
        r = {**r, "step_s_median": r["tpot_s"], "tpot_s": r["tpot_mean_s"]}
        del r["tpot_mean_s"]
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-neo13", action="store_true", help="skip GPT-Neo 1.3B (5 GB in fp32)")
    ap.add_argument("--neo13-bf16", action="store_true", help="also GPT-Neo 1.3B in bf16")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--from-runs", type=Path, default=None, help="redo the analysis from a saved .runs.json")
    ap.add_argument(
        "--without",
        nargs="*",
        default=[],
        choices=["gemv", "gemm"],
        help="with --from-runs: fit without a curve",
    )
    args = ap.parse_args()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or ROOT / "bench" / "results" / f"calibration-{paths.machine_id()}-{stamp}.json"
    load_before = loadavg_1m()
    if args.from_runs:
        raw = json.loads(args.from_runs.read_text())
        result = analyse(
            [TimedRun(**_timed_run(r)) for r in raw["calibration_runs"]],
            [TimedRun(**_timed_run(r)) for r in raw["target_runs"]],
            machine.MachineMeasurement(**raw["roofs"]),
            time.perf_counter(),
            {k: v for k, v in raw.get("curves", {"gemv": raw.get("gemv")}).items() if k not in args.without},
        )
    else:
        # model work on a thread that ends with it, as the dashboard's (engine.core.threads)
        result = run_in_thread(
            lambda: run(args.repeats, not args.no_neo13, args.neo13_bf16, out.with_suffix(".runs.json"))
        )
    print(
        f"load average {load_before:.2f} at start, {loadavg_1m():.2f} at end, {cores()} cores; "
        f"{result['seconds']:.0f} s"
    )
    if result["load"]:
        ld = result["load"]
        print(
            f"calibration runs: load average median {ld['loadavg_1m_median']:.1f}, CPU share median "
            f"{ld['cpu_share_median']:.0%}, {ld['busy_runs']} of {ld['runs']} runs busy; target runs: load average "
            f"median {result['target_runs_loadavg_median']:.1f}, CPU share {result['target_runs_cpu_share_median']:.0%}"
        )
    print(
        f"{'model':<22}{'dtype':<6}{'b':>3}{'TPOT meas':>11}{'cal/meas':>9}{'95% interval':>17}{'sheet/meas':>11}"
        f"{'TTFT meas':>11}{'cal/meas':>9}{'95% interval':>17}  load  within 20%"
    )
    ok = True
    for r in result["rows"]:
        hit = all(
            0.8 <= r[k] <= 1.2 for k in ("calibrated_over_measured_tpot", "calibrated_over_measured_ttft")
        )
        ok &= hit
        ti = [v / r["measured_tpot_s"] for v in r["calibrated_tpot_interval_s"]]
        fi = [v / r["measured_ttft_s"] for v in r["calibrated_ttft_interval_s"]]
        print(
            f"{r['model']:<22}{r['dtype']:<6}{r['batch']:>3}{r['measured_tpot_s'] * 1e3:>8.1f} ms"
            f"{r['calibrated_over_measured_tpot']:>9.2f}{f'{ti[0]:.2f}..{ti[1]:.2f}':>17}"
            f"{r['datasheet_over_measured_tpot']:>11.2f}{r['measured_ttft_s'] * 1e3:>8.0f} ms"
            f"{r['calibrated_over_measured_ttft']:>9.2f}{f'{fi[0]:.2f}..{fi[1]:.2f}':>17}"
            f"{r['loadavg_1m_median']:>6.1f}  {'yes' if hit else 'NO'}"
        )
    for n in result["calibration"]["notes"]:
        print(f"note: {n}")
    payload = {
        "benchmark": "calibration",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": paths.machine_id(),
        "target_met": ok,
        "loadavg_at_start": load_before,
        **result,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(to_jsonable(payload), indent=2, default=str))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
