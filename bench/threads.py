"""What an idle OpenMP team costs other threads' model work on this CPU (engine.core.threads explains why).

The same greedy `generate` (batch 1 and a padded batch of 4, forced lengths) runs on a fresh thread, alone and
beside another thread that has run one parallel op and then waits, idle, keeping its OpenMP team; interleaved
(alone, beside, alone, beside ...) so machine noise hits both alike. Reports the median time per new token of
each, and the ratio beside/alone measured in the same run.

    .venv/bin/python -m bench.threads [--model smollm2-135m-instruct] [--repeats 5] [--tokens 32]

Writes bench/results/threads-<machine>.json. A benchmark, not a test: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import threading
import time
from datetime import UTC, datetime

from bench.common import write_result
from engine.core import stats
from engine.core.load import cores, loadavg, loadavg_1m
from engine.core.threads import run_in_thread
from engine.runtime import generation, models


class IdleTeam:
    """A thread that runs one parallel torch op (which gives it an OpenMP team) and then waits until closed."""

    def __init__(self) -> None:
        import torch

        self._stop = threading.Event()
        ready = threading.Event()

        def hold() -> None:
            torch.ones(1 << 22).mul_(2.0).sum()  # large enough that ATen runs it in parallel
            ready.set()
            self._stop.wait()

        self._t = threading.Thread(target=hold, name="idle-team", daemon=True)
        self._t.start()
        ready.wait()

    def close(self) -> None:
        self._stop.set()
        self._t.join()


PROMPTS = [
    "The history of the printing press begins",
    "Memory bandwidth limits decoding because",
    "A batch of requests shares",
    "Static batching waits for",
]


def seconds_per_token(lm, batch: int, tokens: int) -> float:
    import torch

    enc = lm.tokenizer(PROMPTS[:batch], return_tensors="pt", padding=True)
    with torch.inference_mode():
        t0 = time.perf_counter()
        lm.model.generate(**enc, **generation.greedy_kwargs(lm, tokens, exact=True))
    return (time.perf_counter() - t0) / tokens


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=models.DEFAULT_MODEL)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args(argv)
    load_before = loadavg()
    lm = run_in_thread(lambda: models.load_model(args.model))  # no torch work on the main thread
    if lm.tokenizer.pad_token_id is None:
        lm.tokenizer.pad_token = lm.tokenizer.eos_token
    lm.tokenizer.padding_side = "left"
    rows = []
    for batch in (1, 4):
        run_in_thread(lambda b=batch: seconds_per_token(lm, b, 4))  # warm-up
        times: dict[str, list[float]] = {"alone": [], "beside an idle team": []}
        for _ in range(args.repeats):
            times["alone"].append(run_in_thread(lambda b=batch: seconds_per_token(lm, b, args.tokens)))
            team = IdleTeam()
            try:
                times["beside an idle team"].append(
                    run_in_thread(lambda b=batch: seconds_per_token(lm, b, args.tokens))
                )
            finally:
                team.close()
        med = {k: stats.median(v) for k, v in times.items()}
        rows.append(
            {
                "batch": batch,
                "seconds_per_token_median": med,
                "seconds_per_token_runs": times,
                "ratio_beside_over_alone": med["beside an idle team"] / med["alone"],
            }
        )
        print(
            f"batch {batch}: alone {1e3 * med['alone']:.1f} ms/token, beside an idle team "
            f"{1e3 * med['beside an idle team']:.1f} ms/token: {rows[-1]['ratio_beside_over_alone']:.2f}x"
        )
    print(f"{lm.name}, {args.tokens} tokens, {cores()} cores; load average {loadavg_1m():.1f}")
    write_result(
        "threads",
        {
            "benchmark": "threads",
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "model": lm.name,
            "dtype": lm.dtype,
            "cores": cores(),
            "tokens": args.tokens,
            "repeats": args.repeats,
            "load_average_before": load_before,
            "load_average_after": loadavg(),
            "rows": rows,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
