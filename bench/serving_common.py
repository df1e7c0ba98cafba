"""What the serving benchmarks (bench/serving.py's sweep, bench/serving_peers.py's cross-check and
bench/serving_vllm.py's side by side) do the same way: the load average as their result files write it, and
the warm-up run before any counted one."""

from __future__ import annotations

from dataclasses import replace

from engine.core import load
from engine.loadgen.sweep import run_once
from engine.loadgen.workload import SLO, LoadSpec

NO_SLO = SLO(ttft_s=None, tpot_s=None)  # measure only: no request is judged


def loadavg() -> str:
    """The 1-, 5- and 15-minute load averages as the result files have always written them ("0.52 0.61 0.70")."""
    return " ".join(f"{x:.2f}" for x in load.loadavg())


def warm_up(spec: LoadSpec) -> None:
    """A short run at 2 users that is not counted: the server's first requests pay one-time costs."""
    run_once(replace(spec, concurrency=2, n_requests=4), NO_SLO)
