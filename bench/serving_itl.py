"""Inter-token latency of running streams while others are admitted: ITL p50/p90/p99 at 1, 4 and 8 users
against `python -m engine serve` (a child process), measured on the client by the load generator.

    .venv/bin/python -m bench.serving_itl [--model tiny-gpt-neo] [--levels 1,4,8] [--requests 8]
                                          [--output-tokens 16] [--repeats 3] [--label NAME] [--extra "--flag v"]

Each level runs `--repeats` times (after one warm-up run that is dropped); the chunk gaps of every repeat are
pooled and their p50/p90/p99 reported (engine.core.stats), with the ratio p99/p50 that the stall target reads
(p99 <= 3 x p50 at 4 users). The same command line as `python -m engine loadgen --mode concurrency
--concurrency N --requests 8 --output-tokens 16`. Writes bench/results/serving-itl-<label>-<machine>.json with the
load average beside the figures (a shared 2-core machine is noisy: compare runs made back to back).
"""

from __future__ import annotations

import argparse
import itertools
import shlex
import sys
from datetime import UTC, datetime

from bench.common import write_result
from engine.core import paths, stats
from engine.core.load import cores, loadavg, loadavg_1m
from engine.loadgen.client import RequestRecord
from engine.loadgen.sweep import _run_blocking
from engine.loadgen.workload import LoadSpec
from engine.serving.process import ServerProcess
from engine.serving.runner import ServeSpec

TARGET_RATIO = 3.0  # ITL p99 <= 3 x p50 at 4 users


def admission_split(recs: list[RequestRecord]) -> tuple[list[float], list[float]]:
    """A run's chunk gaps in two: those during which another request's first token arrived (an admission rode in
    them, or ran between them) and the rest. Client clock only: any server."""
    firsts = [(r.index, r.chunk_times[0]) for r in recs if r.ok and r.chunk_times]
    during, other = [], []
    for r in recs:
        if not r.ok:
            continue
        for a, b in itertools.pairwise(r.chunk_times):
            hit = any(i != r.index and a < t <= b for i, t in firsts)
            (during if hit else other).append(b - a)
    return during, other


def itl_row(level: int, runs: list[list[RequestRecord]]) -> dict:
    gaps = [g for recs in runs for r in recs if r.ok for g in r.itls]
    p50, p90, p99 = (stats.percentile(gaps, q) for q in (50, 90, 99))
    errors = sum(not r.ok for recs in runs for r in recs)
    split = [admission_split(recs) for recs in runs]
    during = [g for d, _ in split for g in d]
    other = [g for _, o in split for g in o]
    return {
        # tokens whose text was empty (special tokens after an ignored EOS, a partial character): their step is
        # folded into the next chunk's gap, so such a gap spans two decode steps without any stall
        "tokens_without_chunk": sum(
            max(0, r.output_tokens - len(r.chunk_times)) for recs in runs for r in recs if r.ok
        ),
        "admission_gaps": len(during),
        "admission_gap_p50_s": stats.percentile(during, 50) if during else None,
        "admission_gap_max_s": max(during) if during else None,
        "other_gap_p50_s": stats.percentile(other, 50) if other else None,
        "users": level,
        "repeats": len(runs),
        "gaps": len(gaps),
        "errors": errors,
        "itl_p50_s": p50,
        "itl_p90_s": p90,
        "itl_p99_s": p99,
        "itl_max_s": max(gaps) if gaps else None,
        "p99_over_p50": p99 / p50 if p50 and p50 > 0 else None,
        "ttft_p50_s": stats.percentile([r.ttft_s for recs in runs for r in recs if r.ok], 50),
    }


def admission_words(row: dict) -> str:
    merged = f"{row['tokens_without_chunk']} tokens without text; "
    if not row["admission_gaps"]:
        return merged + "no gap held another request's first token"
    return merged + (
        f"{row['admission_gaps']} gaps held another request's first token: p50 "
        f"{row['admission_gap_p50_s'] * 1e3:.1f} ms, max {row['admission_gap_max_s'] * 1e3:.1f} ms "
        f"(other gaps p50 {row['other_gap_p50_s'] * 1e3:.1f} ms)"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ServeSpec.add_arguments(p, only=("model", "max_batch"), defaults={"model": "tiny-gpt-neo"})
    p.add_argument("--levels", default="1,4,8")
    LoadSpec.add_arguments(
        p, only=("n_requests", "output_tokens", "endpoint"), defaults={"n_requests": 8, "output_tokens": 16}
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--label", default="", help="a name for this run in the result file (e.g. before, after)")
    p.add_argument("--extra", default="", help="more flags for `python -m engine serve`")
    args = p.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",") if x]
    load_before = loadavg()
    rows = []
    with ServerProcess(args.model, max_batch=args.max_batch, extra=tuple(shlex.split(args.extra))) as srv:
        for level in levels:
            spec = LoadSpec(
                base_url=srv.base_url,
                model=args.model,
                mode="concurrency",
                concurrency=level,
                n_requests=args.n_requests,
                output_tokens=args.output_tokens,
                endpoint=args.endpoint,
            ).validate()
            _run_blocking(spec)  # warm-up, dropped
            runs = [_run_blocking(spec) for _ in range(args.repeats)]
            row = itl_row(level, runs)
            rows.append(row)
            print(
                f"{level:>2} users: ITL p50 {row['itl_p50_s'] * 1e3:6.1f} ms  p90 {row['itl_p90_s'] * 1e3:6.1f} ms  "
                f"p99 {row['itl_p99_s'] * 1e3:6.1f} ms  p99/p50 {row['p99_over_p50']:.2f}  "
                f"({row['gaps']} gaps, {row['errors']} errors, load {loadavg_1m():.1f}); "
                + admission_words(row),
                flush=True,
            )
    at4 = next((r for r in rows if r["users"] == 4), None)
    met = None if at4 is None or at4["p99_over_p50"] is None else at4["p99_over_p50"] <= TARGET_RATIO
    if met is not None:
        print(f"target ITL p99 <= {TARGET_RATIO:g} x p50 at 4 users: {'met' if met else 'NOT met'}")
    result = {
        "benchmark": "serving-itl",
        "label": args.label,
        "machine": paths.machine_id(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m bench.serving_itl " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
        "cpu_count": cores(),
        "load_average_before": load_before,
        "load_average_after": loadavg(),
        "args": vars(args),
        "target": f"ITL p99 <= {TARGET_RATIO:g} x p50 at 4 users",
        "target_met": met,
        "rows": rows,
    }
    write_result(f"serving-itl-{args.label}" if args.label else "serving-itl", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
