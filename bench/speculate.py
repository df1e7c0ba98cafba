"""Speculative decoding on the bundled model: prompt lookup and a draft model against plain greedy, on the
input-grounded and open-ended workloads, measured in the same run.

    .venv/bin/python bench/speculate.py [--model smollm2-135m-instruct] [--draft bf16] [--draft-length 4]
                                        [--max-new-tokens 48] [--runs 3]

Prints the table of `python -m engine speculate` with the load average, and writes
bench/results/speculate-<machine>.json.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import lever_result, write_result  # noqa: E402
from engine.commands import speculate as cmd  # noqa: E402
from engine.levers import speculative as S  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    S.SpeculateSpec.add_arguments(p)
    args = p.parse_args(argv)
    spec = S.SpeculateSpec.from_args(args)
    load_before = os.getloadavg()
    report = S.run_speculate(spec.load(), spec, progress=lambda f, m: print(f"[{f:4.0%}] {m}", flush=True))
    entries = cmd.rows(report)
    print(cmd.format_text(entries))
    write_result("speculate", lever_result("speculate", args, entries, load_before))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
