"""One run's figures from its request records, in one function (as vLLM's benchmark_serving `calculate_metrics`).

Throughput: completed requests / wall time and output tokens / wall time, wall time = first send -> last byte.
Per request: TTFT, TPOT (first token excluded), E2E; ITL pooled over every gap between content chunks.
Percentiles p50/p90/p99 by engine.core.stats (linear interpolation between closest ranks). Goodput (vLLM): requests
meeting every SLO per second; SLO attainment: good requests / all requests (failed requests are not good).
Where the server tells its side (engine.loadgen.server_side), the run also carries the server's metrics over the
run and the client TTFT split into the server's queue and prefill and the transport between.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from engine.core import stats
from engine.loadgen.client import RequestRecord
from engine.loadgen.server_side import ServerMetricsDelta, TTFTBreakdown, breakdown, join
from engine.loadgen.workload import SLO

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Dist:
    mean: float
    p50: float
    p90: float
    p99: float
    n: int


def dist(values: Sequence[float]) -> Dist:
    clean = [v for v in values if v is not None and math.isfinite(v)]
    mean = sum(clean) / len(clean) if clean else math.nan
    return Dist(mean, *(stats.percentile(clean, p) for p in PERCENTILES), len(clean))


@dataclass(frozen=True)
class RunMetrics:
    level: float  # the rate (requests/s) or the number of users this run was driven at
    mode: str
    requests: int
    completed: int
    errors: dict[str, int]  # kind -> count
    wall_s: float
    request_throughput: float  # completed requests / s
    output_tokens_per_s: float
    per_user_tokens_per_s: float  # median over requests of 1 / TPOT: the decode speed one user sees
    ttft_s: Dist
    tpot_s: Dist
    itl_s: Dist
    e2e_s: Dist
    goodput_rps: float
    slo_attainment: float
    meets_slo: bool
    tokens_counted_by: str  # "server usage" | "content chunks" | "mixed"
    prompt_tokens_median: float  # median prompt length the server reported (NaN when it does not)
    first_error: str = ""
    server: ServerMetricsDelta | None = None  # the server's /metrics over the run; None where it has none
    ttft_breakdown: TTFTBreakdown | None = None  # None where the server keeps no per-request timings
    ttft_by_turn: tuple[Dist, ...] = ()  # multi-turn workloads: TTFT of turn 1, 2, ... (empty for one turn)


def good(r: RequestRecord, slo: SLO) -> bool:
    """Completed and within every SLO set; a one-token answer has no TPOT, so it cannot break that objective."""
    if not r.ok:
        return False
    if slo.ttft_s is not None and not r.ttft_s <= slo.ttft_s:
        return False
    if slo.tpot_s is not None and math.isfinite(r.tpot_s) and r.tpot_s > slo.tpot_s:
        return False
    return slo.e2e_s is None or r.e2e_s <= slo.e2e_s


def attainment(records: Sequence[RequestRecord], slo: SLO) -> float:
    """The share of requests within every SLO set (`good`); 0 for none."""
    return sum(good(r, slo) for r in records) / len(records) if records else 0.0


def meets(records: Sequence[RequestRecord], slo: SLO) -> bool:
    """Whether a run meets the SLOs: at least `min_attainment` of its requests good (RunMetrics.meets_slo, without
    the percentiles: the simulator's solvers ask it of thousands of runs)."""
    return bool(records) and attainment(records, slo) >= slo.min_attainment


def summarize(
    records: Sequence[RequestRecord],
    *,
    level: float,
    mode: str,
    slo: SLO,
    server: ServerMetricsDelta | None = None,
    timings: dict[str, dict] | None = None,
) -> RunMetrics:
    done = [r for r in records if r.ok]
    starts = [r.start for r in records]
    ends = [r.start + r.e2e_s for r in done]
    wall = (max(ends) - min(starts)) if ends else math.nan
    out_tokens = sum(r.output_tokens for r in done)
    n_good = sum(good(r, slo) for r in records)
    share = attainment(records, slo)
    sources = {r.tokens_from_usage for r in done}
    counted = "mixed" if len(sources) > 1 else ("server usage" if sources == {True} else "content chunks")
    per_user = [1 / r.tpot_s for r in done if math.isfinite(r.tpot_s) and r.tpot_s > 0]
    errors = Counter(r.error for r in records if not r.ok)
    return RunMetrics(
        level=level,
        mode=mode,
        requests=len(records),
        completed=len(done),
        errors=dict(errors),
        wall_s=wall,
        request_throughput=len(done) / wall if wall and wall > 0 else math.nan,
        output_tokens_per_s=out_tokens / wall if wall and wall > 0 else math.nan,
        per_user_tokens_per_s=stats.median(per_user),
        ttft_s=dist([r.ttft_s for r in done]),
        tpot_s=dist([r.tpot_s for r in done]),
        itl_s=dist([g for r in done for g in r.itls]),
        e2e_s=dist([r.e2e_s for r in done]),
        goodput_rps=n_good / wall if wall and wall > 0 else 0.0,
        slo_attainment=share,
        meets_slo=meets(records, slo),
        tokens_counted_by=counted,
        prompt_tokens_median=stats.median([r.prompt_tokens for r in done]) if done else math.nan,
        first_error=next((f"{r.error}: {r.detail}" for r in records if not r.ok), ""),
        server=server,
        ttft_breakdown=breakdown(join(records, timings or {}), len(done)),
        ttft_by_turn=by_turn(done),
    )


def by_turn(done: Sequence[RequestRecord]) -> tuple[Dist, ...]:
    """TTFT per turn of a multi-turn workload (a later turn sends a longer conversation: more to prefill)."""
    last = max((r.turn for r in done), default=1)
    if last < 2:
        return ()
    return tuple(dist([r.ttft_s for r in done if r.turn == t]) for t in range(1, last + 1))
