"""Drive a run (Poisson arrivals or a fixed number of users) and sweep load levels to find the knee: the highest
rate or concurrency whose run still meets the SLOs. The sweep stops at the first level that misses them (more
load only queues more), unless `keep_going`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx2 as httpx

from engine.loadgen.client import RequestRecord, headers, send
from engine.loadgen.metrics import RunMetrics, summarize
from engine.loadgen.server_side import delta, fetch_timings, scrape
from engine.loadgen.workload import SLO, LoadSpec, LoadSpecError, PlannedRequest, plan, sessions

Progress = Callable[[float, str], None]


async def _conversation(client, spec: LoadSpec, turns: list[PlannedRequest]) -> list[RequestRecord]:
    """A session's turns one after another, each sending the conversation so far (a single request where the
    workload has one turn); a failed turn ends its session (later turns are not sent)."""
    history: list[dict] = []
    out = []
    for r in turns:
        rec = await send(client, spec, r, history)
        out.append(rec)
        if not rec.ok:
            break
        history += [{"role": "user", "content": r.prompt}, {"role": "assistant", "content": rec.text}]
    return out


async def _run_async(spec: LoadSpec) -> list[RequestRecord]:
    convs = sessions(plan(spec))
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=spec.timeout_s) as client:
        if spec.mode == "poisson":
            t0 = time.perf_counter()

            async def timed(turns):
                delay = turns[0].send_at_s - (time.perf_counter() - t0)
                if delay > 0:
                    await asyncio.sleep(delay)
                return await _conversation(client, spec, turns)

            done = await asyncio.gather(*(timed(c) for c in convs))
            return sorted((r for recs in done for r in recs), key=lambda r: r.index)
        queue = list(reversed(convs))
        records: list[RequestRecord] = []

        async def user():
            while queue:
                records.extend(await _conversation(client, spec, queue.pop()))

        await asyncio.gather(*(user() for _ in range(min(spec.concurrency, len(convs)))))
        return sorted(records, key=lambda r: r.index)


def _run_blocking(spec: LoadSpec) -> list[RequestRecord]:
    """asyncio.run refuses to start where this thread already runs an event loop (a notebook, or sync playwright
    in the same process): then the run gets a thread, and an event loop, of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_run_async(spec))
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, _run_async(spec)).result()


def run_once(spec: LoadSpec, slo: SLO) -> RunMetrics:
    """One run at the spec's level; blocking (an event loop of its own, so it works from any thread)."""
    spec.validate()
    slo.validate()
    before = scrape(spec.base_url, spec.api_key)
    records = _run_blocking(spec)
    after = scrape(spec.base_url, spec.api_key) if before is not None else None
    timings = fetch_timings(spec.base_url, spec.api_key) if any(r.request_id for r in records) else {}
    return summarize(
        records, level=spec.level, mode=spec.mode, slo=slo, server=delta(before, after), timings=timings
    )


def check_server(base_url: str, api_key: str | None = None, timeout: float = 10.0) -> list[str]:
    """The model ids a server lists at GET /v1/models; raises LoadSpecError with what went wrong."""
    try:
        r = httpx.get(base_url.rstrip("/") + "/models", headers=headers(api_key), timeout=timeout)
    except httpx.HTTPError as exc:
        raise LoadSpecError(
            f"cannot reach {base_url} ({type(exc).__name__}: {exc}); is the server running?"
        ) from None
    if r.status_code == 401:
        raise LoadSpecError(f"{base_url} refused the key (401): give the server's API key")
    if r.status_code != 200:
        raise LoadSpecError(
            f"{base_url}/models answered {r.status_code}: is this an OpenAI-compatible base URL (…/v1)?"
        )
    try:
        return [m["id"] for m in r.json().get("data", [])]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise LoadSpecError(f"{base_url}/models did not return an OpenAI model list") from None


@dataclass(frozen=True)
class SweepResult:
    spec: LoadSpec
    slo: SLO
    levels: tuple[float, ...]
    points: tuple[RunMetrics, ...]
    knee: float | None  # highest level meeting the SLOs; None when even the lowest missed them
    stopped_early: bool
    started_at: str

    @property
    def knee_point(self) -> RunMetrics | None:
        return next((p for p in self.points if p.level == self.knee), None)

    @property
    def skipped(self) -> tuple[float, ...]:
        """The levels asked for but not run (the sweep stopped at the first level that missed the SLOs)."""
        return self.levels[len(self.points) :]

    @property
    def all_failed(self) -> bool:
        """No request of any level completed: the target is down or refuses every request (no figures to show)."""
        return bool(self.points) and all(p.completed == 0 for p in self.points)

    def stop_reason(self) -> str:
        """Why the sweep stopped where it did, from the numbers of the level that missed the SLOs ('' if none)."""
        if not self.skipped or not self.points:
            return ""
        last = self.points[-1]
        unit = "requests/s" if self.spec.mode == "poisson" else "users"
        missed = []
        if last.completed < last.requests:
            missed.append(f"{last.requests - last.completed} of {last.requests} requests failed")
        if self.slo.ttft_s is not None and last.ttft_s.n and last.ttft_s.p90 > self.slo.ttft_s:
            missed.append(f"TTFT p90 {last.ttft_s.p90:.3g} s > SLO {self.slo.ttft_s:g} s")
        if self.slo.tpot_s is not None and last.tpot_s.n and last.tpot_s.p90 > self.slo.tpot_s:
            missed.append(f"TPOT p90 {last.tpot_s.p90 * 1e3:.3g} ms > SLO {self.slo.tpot_s * 1e3:g} ms")
        if self.slo.e2e_s is not None and last.e2e_s.n and last.e2e_s.p90 > self.slo.e2e_s:
            missed.append(f"E2E p90 {last.e2e_s.p90:.3g} s > SLO {self.slo.e2e_s:g} s")
        skipped = ", ".join(f"{x:g}" for x in self.skipped)
        why = "; ".join(missed) or "too few requests met every objective"
        return (
            f"Skipped {skipped} {unit}: at {at_level(last.level, unit)} only {last.slo_attainment:.0%} of requests "
            "met the "
            f"SLOs (target {self.slo.min_attainment:.0%}; {why}), and more load only queues more. "
            "Sweep them anyway with keep going."
        )


def at_level(x: float, unit: str) -> str:
    """'1 user', '4 users', '0.5 requests/s'."""
    return f"{x:g} {'user' if unit == 'users' and x == 1 else unit}"


def run_sweep(
    spec: LoadSpec,
    slo: SLO,
    levels: Sequence[float],
    *,
    keep_going: bool = False,
    progress: Progress | None = None,
) -> SweepResult:
    if not levels or any(v <= 0 for v in levels):
        raise LoadSpecError("give at least one positive load level (rates per second, or numbers of users)")
    levels = tuple(sorted(set(levels)))
    started = datetime.now(UTC).isoformat(timespec="seconds")
    points: list[RunMetrics] = []
    knee: float | None = None
    stopped = False
    for i, level in enumerate(levels):
        if progress:
            progress(i / len(levels), f"{spec.mode} {level:g}: running {spec.n_requests} requests")
        m = run_once(spec.at(level), slo)
        points.append(m)
        if m.meets_slo:
            knee = level
        elif not keep_going:
            stopped = i < len(levels) - 1
            break
    if progress:
        progress(1.0, "done")
    return SweepResult(spec, slo, levels, tuple(points), knee, stopped, started)


def to_json(result: SweepResult) -> dict:
    """The sweep as plain data, with the API key removed (results files get shared)."""
    from engine.core.jsonsafe import to_jsonable

    out = to_jsonable(result)
    out["spec"]["api_key"] = "***" if result.spec.api_key else None
    return out
