"""Speculative decoding on the bundled model: prompt lookup and a draft model against plain greedy, on the
input-grounded and open-ended workloads, measured in the same run.

    .venv/bin/python -m bench.speculate [--model smollm2-135m-instruct] [--draft bf16] [--draft-length 4]
                                        [--max-new-tokens 48] [--runs 3]

Prints the table of `python -m engine speculate` with the load average, and writes
bench/results/speculate-<machine>.json.
"""

from __future__ import annotations

from bench.common import lever_bench
from engine.commands import speculate as cmd
from engine.levers import speculative as S


def main(argv: list[str] | None = None) -> int:
    return lever_bench("speculate", __doc__, S.SpeculateSpec, S.run_speculate, cmd, argv)


if __name__ == "__main__":
    raise SystemExit(main())
