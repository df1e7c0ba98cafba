"""The latency race with the peer engines, recorded: vanilla transformers against OpenVINO GenAI, ONNX Runtime
GenAI and CTranslate2 (fp32 lanes by default; --quantized adds OpenVINO int8, ONNX Runtime GenAI int4 and
CTranslate2 int8), each lane in its own worker process, vanilla re-run at the end to catch drift.

    .venv/bin/python -m bench.race [--model smollm2-135m-instruct] [--runs 3] [--quantized] [--extra no-kv-cache]

Prints the race table (speedups are ratios against vanilla measured in the same race, with bootstrap 95%
intervals), the load average before and after, and writes bench/results/race-<model>-<hw>-peers-<time>.json,
which the race page lists. Run `bash scripts/install_peers.sh` first.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from engine.commands.race import format_text
from engine.core.load import cores, loadavg, loadavg_1m
from engine.race import contenders, runner, serialise

ENGINES = ("vanilla", "openvino", "onnxruntime-genai", "ctranslate2")
QUANTIZED = ("openvino-int8", "onnxruntime-genai-int4", "ctranslate2-int8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--runs", type=int, default=runner.RaceSpec.runs)
    p.add_argument("--warmup", type=int, default=runner.RaceSpec.warmup)
    p.add_argument("--max-new-tokens", type=int, default=runner.RaceSpec.max_new_tokens)
    p.add_argument("--quantized", action="store_true", help="add the int8/int4 lanes")
    p.add_argument("--extra", default="", help="more contenders, comma-separated (e.g. no-kv-cache,half)")
    p.add_argument("--out", default=str(serialise.RESULTS_DIR))
    args = p.parse_args(argv)
    names = [*ENGINES, *(QUANTIZED if args.quantized else ()), *[n for n in args.extra.split(",") if n]]
    spec = runner.RaceSpec(
        model=args.model,
        contenders=tuple(contenders.resolve(names)),
        runs=args.runs,
        warmup=args.warmup,
        max_new_tokens=args.max_new_tokens,
    )
    load_before = loadavg()
    t0 = time.perf_counter()
    result = runner.run_race(
        spec, progress=lambda d, t, m: print(f"[{d}/{t}] {m}", file=sys.stderr, flush=True)
    )
    wall = time.perf_counter() - t0
    path = serialise.save(result, Path(args.out), tag="peers")
    out = serialise.to_dict(result)
    out["saved_to"] = str(path)
    print(format_text(out))
    print(
        f"wall time {wall:.0f} s; load average before {load_before[0]:.2f}, after {loadavg_1m():.2f} "
        f"({cores()} cores)"
    )
    print(json.dumps({"saved_to": str(path), "wall_s": round(wall, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
