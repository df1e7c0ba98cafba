"""Weight quantization on the bundled model: every scheme against fp32, measured in the same run.

    .venv/bin/python bench/quant.py [--model smollm2-135m-instruct] [--schemes fp32,bf16,int8,int4,bnb-int8,bnb-nf4]
                                    [--max-new-tokens 32] [--runs 3] [--eval-docs 4]

Prints the table of `python -m engine quant` with the load average before and after, and writes
bench/results/quant-<machine>.json.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import lever_result, write_result  # noqa: E402
from engine.commands import quant as cmd  # noqa: E402
from engine.levers import quant as Q  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    Q.QuantSpec.add_arguments(p)
    args = p.parse_args(argv)
    spec = Q.QuantSpec.from_args(args)
    load_before = os.getloadavg()
    report = Q.run_quant(spec.load(), spec, progress=lambda f, m: print(f"[{f:4.0%}] {m}", flush=True))
    entries = cmd.rows(report)
    print(cmd.format_text(entries))
    write_result("quant", lever_result("quant", args, entries, load_before))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
