"""The one home of the project's statistics (standard library only): median, percentiles with one stated
definition, spread, and speedups with a bootstrap confidence interval, so "1.8x faster" comes with how sure
we are of it. Every page, benchmark and CLI command takes its p50/p95/p99 from here, so a p95 on one page is
the p95 on another.

Percentile definition: linear interpolation between closest ranks, numpy's default ("linear", Hyndman & Fan
type 7): for sorted x[0..n-1], p maps to position (n-1)*p/100. NaN and None are dropped; no data gives NaN.

Speedup = median(baseline latency) / median(contender latency). Its spread is a percentile bootstrap
(Efron & Tibshirani, An Introduction to the Bootstrap, ch. 13): resample each contender's runs with
replacement, recompute the ratio of medians, and take the 2.5th and 97.5th percentiles. With few runs
the interval is wide, which is the honest answer.

A proportion (an accuracy over n queries) takes the Wilson score interval (Wilson 1927; Agresti & Coull, "Approximate
is better than exact", The American Statistician 52(2), 1998): unlike p +/- z*sqrt(p(1-p)/n) it stays inside [0, 1]
and does not shrink to a point at 0/n or n/n, which is where a few-shot sweep on 16 queries often lands.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from engine.core.interval import Interval


def _finite(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def median(values: Sequence[float | None]) -> float:
    clean = _finite(values)
    return statistics.median(clean) if clean else math.nan


def quantile(values: Sequence[float | None], q: float) -> float:
    """Quantile at q in [0, 1], by the module's definition (numpy's 'linear'), NaN for no data."""
    clean = sorted(_finite(values))
    if not clean:
        return math.nan
    pos = (len(clean) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return clean[lo] + (clean[hi] - clean[lo]) * (pos - lo)


def percentile(values: Sequence[float | None], p: float) -> float:
    """Percentile at p in [0, 100] (p50, p95, p99), by the module's definition."""
    return quantile(values, p / 100)


@dataclass(frozen=True)
class Spread:
    median: float
    q1: float
    q3: float
    n: int

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1


def spread(values: Sequence[float | None]) -> Spread:
    clean = _finite(values)
    return Spread(median(clean), quantile(clean, 0.25), quantile(clean, 0.75), len(clean))


def speedup(
    baseline: Sequence[float], contender: Sequence[float], resamples: int = 2000, seed: int = 0
) -> Interval:
    base, cont = _finite(baseline), _finite(contender)
    if not base or not cont or median(cont) <= 0:
        return Interval(math.nan, math.nan, math.nan, rows=0)
    point = median(base) / median(cont)
    rng = random.Random(seed)  # seeded: the same runs always give the same interval
    ratios = []
    for _ in range(resamples):
        b = statistics.median(rng.choices(base, k=len(base)))
        c = statistics.median(rng.choices(cont, k=len(cont)))
        if c > 0:
            ratios.append(b / c)
    if not ratios:
        return Interval(math.nan, point, math.nan, rows=0)
    # central: baseline median / contender median (> 1 = faster than the baseline); ends: the 2.5th and 97.5th
    # percentiles of the bootstrap distribution; rows: runs on the side with fewer
    return Interval(quantile(ratios, 0.025), point, quantile(ratios, 0.975), rows=min(len(base), len(cont)))


def proportion(successes: int, n: int, z: float = 1.96) -> Interval:
    """`successes` of `n` as a share, with its 95% Wilson score interval (z = 1.96); rows: n."""
    if n <= 0:
        return Interval(math.nan, math.nan, math.nan, rows=0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return Interval(max(0.0, centre - half), p, min(1.0, centre + half), rows=n)
