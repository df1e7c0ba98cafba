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


# Other processes' CPU time during a run, in cores' worth, from which the run was measured on a busy machine. The
# 1-minute load average lags: after one of the lab's own runs it stays high for a minute, and a tour that moves on
# read the next stop as busy (the race and quantization called no verdict at the tour's own pace, with nothing else
# running); what other processes actually took while the run ran says it directly.
OTHERS_BUSY = 0.5


def busy_during(
    others: float, load_before: float = math.nan, other_load: float = math.nan, cpu_count: int | None = None
) -> bool:
    """The one verdict on a finished run, which every sentence about it reads: by the cores' worth of CPU other
    processes took while it ran (`others`, from others_during) where that was measured, at OTHERS_BUSY; else by the
    load-average rule (is_busy) on the load when it started and at its end less its own threads (`other_load`)."""
    if math.isfinite(others):
        return others >= OTHERS_BUSY
    return is_busy(load_before, cpu_count) or is_busy(other_load, cpu_count)


def cpu_seconds() -> tuple[float, float] | None:
    """(every process's CPU seconds on this machine, this process's, its waited-for children's and its live
    descendants'), for `others_during`; None where /proc/stat cannot be read (not Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    busy = (sum(fields[:8]) - idle) / hz  # user nice system (idle iowait) irq softirq steal
    t = os.times()
    return busy, t.user + t.system + t.children_user + t.children_system + descendants_cpu_s(hz)


def descendants_cpu_s(hz: float = 100.0) -> float:
    """CPU seconds of this process's live descendants (with their own waited-for children): the servers and
    workers the lab started are its own work. A server's CPU while a sweep loads it, or while it loads its model,
    was counted as other programs' (a quiet machine read 'other programs took 1.1 cores' worth' on every sweep and
    every server start). 0 where /proc cannot be read."""
    parent: dict[int, int] = {}
    ticks: dict[int, float] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return 0.0
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:  # gone between the listing and the read
            continue
        # pid (comm) state ppid ... utime stime cutime cstime: comm may hold spaces and parentheses
        rest = stat[stat.rfind(")") + 2 :].split()
        try:
            parent[int(name)] = int(rest[1])
            ticks[int(name)] = sum(float(x) for x in rest[11:15])
        except (IndexError, ValueError):
            continue
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0.0)
        todo += children.get(pid, [])
    return total / hz


def others_during(before: tuple[float, float] | None, wall_s: float) -> float:
    """Cores' worth of other processes' CPU time between `before` (cpu_seconds()) and now, over `wall_s`; NaN
    where it cannot be read. Work this process runs for other browser sessions counts as its own, as does its
    descendants' (a server it started, a race lane)."""
    after = cpu_seconds()
    if before is None or after is None or wall_s <= 0:
        return math.nan
    return max(0.0, (after[0] - before[0]) - (after[1] - before[1])) / wall_s
