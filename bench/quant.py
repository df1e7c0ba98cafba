"""Weight quantization on the bundled model: every scheme against fp32, measured in the same run.

    .venv/bin/python -m bench.quant [--model smollm2-135m-instruct] [--schemes fp32,bf16,int8,int4,bnb-int8,bnb-nf4]
                                    [--max-new-tokens 32] [--runs 3] [--eval-docs 4]

Prints the table of `python -m engine quant` with the load average before and after, and writes
bench/results/quant-<machine>.json.
"""

from __future__ import annotations

from bench.common import lever_bench
from engine.commands import quant as cmd
from engine.levers import quant as Q


def main(argv: list[str] | None = None) -> int:
    return lever_bench("quant", __doc__, Q.QuantSpec, Q.run_quant, cmd, argv)


if __name__ == "__main__":
    raise SystemExit(main())
