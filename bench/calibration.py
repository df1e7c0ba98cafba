"""Estimates that come true: calibrate the calculator on the bundled SmolLM2 (fp32 and bf16) on this machine,
then predict GPT-Neo 125M (true shape, random weights) and compare with its measured decode (TPOT) and
prefill (TTFT) times. Datasheet mode (this machine's measured roofs, no efficiency) is shown beside it.

    .venv/bin/python bench/calibration.py [--repeats 4]

Target (issue 3): calibrated predictions within 20% of measured, fp32 and bf16. This is a benchmark, not a
test: it depends on how quiet the machine is. Prints a table, writes bench/results/calibration-<machine>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine import paths  # noqa: E402
from engine.calibration import calibrate, compare_run, measure_runs  # noqa: E402
from engine.stats import median  # noqa: E402


def run(repeats: int) -> dict:
    cal = calibrate(repeats=repeats)  # stores the calibration for this machine, as `python -m engine calibrate`
    machine = cal.machine_gpu()
    runs = measure_runs("gpt-neo-125m-random", ("fp32", "bf16"), repeats=repeats, record=False)
    rows = []
    for dt in ("fp32", "bf16"):
        cmp = [c for c in (compare_run(m, machine, cal) for m in runs if m.dtype == dt) if c is not None]
        rows.append({
            "dtype": dt,
            "measured_tpot_s": median([m.tpot_s for m in runs if m.dtype == dt]),
            "measured_ttft_s": median([m.ttft_s for m in runs if m.dtype == dt]),
            "calibrated_over_measured_tpot": median([c.calibrated_tpot_ratio for c in cmp]),
            "calibrated_over_measured_ttft": median([c.calibrated_ttft_ratio for c in cmp]),
            "datasheet_over_measured_tpot": median([c.datasheet_tpot_ratio for c in cmp]),
            "runs": len(cmp),
        })
    return {"calibration": asdict(cal) if hasattr(cal, "__dataclass_fields__") else str(cal), "rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=4)  # 2 proved too few: one noisy run skews the fit
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / f"calibration-{paths.machine_id()}.json")
    args = ap.parse_args()
    with ThreadPoolExecutor(max_workers=1) as pool:  # a worker thread, like the dashboard (see bench/decode.py)
        result = pool.submit(run, args.repeats).result()
    print(f"{'dtype':<6}{'measured TPOT':>15}{'calibrated/measured':>21}{'datasheet/measured':>20}"
          f"{'measured TTFT':>15}{'calibrated/measured':>21}  within 20%")
    ok = True
    for r in result["rows"]:
        hit = all(0.8 <= r[k] <= 1.2 for k in ("calibrated_over_measured_tpot", "calibrated_over_measured_ttft"))
        ok &= hit
        print(f"{r['dtype']:<6}{r['measured_tpot_s'] * 1e3:>12.1f} ms{r['calibrated_over_measured_tpot']:>21.2f}"
              f"{r['datasheet_over_measured_tpot']:>20.2f}{r['measured_ttft_s'] * 1e3:>12.1f} ms"
              f"{r['calibrated_over_measured_ttft']:>21.2f}  {'yes' if hit else 'NO'}")
    payload = {"benchmark": "calibration", "date": datetime.now(UTC).isoformat(timespec="seconds"),
               "machine": paths.machine_id(), "target_met": ok, **result}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
