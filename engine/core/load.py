"""The one rule for "this machine was busy": every page, command and benchmark that measures asks it.

A measurement is slowed by other work when runnable tasks exceed the cores (the 1-minute load average above the
core count: something waited for a core), or when the measuring process got under BUSY_CPU_SHARE of the CPU time
its threads could have used (its threads were descheduled). Either reading alone is enough; an unknown reading
(NaN) says nothing. Standard library only."""

from __future__ import annotations

import math
import os

BUSY_CPU_SHARE = 0.8  # below this share of its threads' time, a run is flagged as slowed by other work
# Other work's load average from which a run shares the cores with it even below the busy rule: a core's worth
# (below it, the lab's own last run lingering in the 1-minute average read as other work: 0.9 on a quiet machine).
SHARED_FROM = 1.0


def shares_cores(others_load: float) -> bool:
    """Other work (the load average without the run's own threads) enough to take cores from a run; NaN: no."""
    return math.isfinite(others_load) and others_load >= SHARED_FROM


def cores() -> int:
    return os.cpu_count() or 1


def loadavg() -> tuple[float, float, float]:
    """The 1-, 5- and 15-minute load averages, NaN where the platform has none. The only reader of
    os.getloadavg in the engine, so every reading means the same thing."""
    try:
        return os.getloadavg()
    except OSError:
        return (math.nan, math.nan, math.nan)


def loadavg_1m() -> float:
    """The 1-minute load average, NaN where the platform has none."""
    return loadavg()[0]


def is_busy(loadavg: float, cpu_count: int | None = None, cpu_share: float = math.nan) -> bool:
    """The rule above; `cpu_count` defaults to this machine's cores."""
    cpu_count = cpu_count or cores()
    return (math.isfinite(cpu_share) and cpu_share < BUSY_CPU_SHARE) or (
        math.isfinite(loadavg) and loadavg > cpu_count
    )
