"""The same load-generator sweep against several OpenAI-compatible endpoints, interleaved: for each round and each
level, one run on every endpoint in turn (the order flips every round), so a machine whose speed drifts (a busy
neighbour, a warmer cache) touches all of them alike; the figures compared are medians over the rounds.

Used by the Serving page (the engine's server beside vLLM's) and bench/serving.py --vllm. It drives URLs only, through
engine.loadgen, so it knows nothing of which engine is behind each one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from engine.core import stats
from engine.core.interval import Interval
from engine.core.load import loadavg_1m
from engine.core.spec import Spec, option
from engine.loadgen.metrics import RunMetrics
from engine.loadgen.sweep import SweepResult, run_once
from engine.loadgen.workload import SLO, LoadSpec, LoadSpecError

Progress = Callable[[float, str], None]

# (key, words, how to read it from one run): what the side-by-side table shows, vLLM bench serve's definitions
METRICS: tuple[tuple[str, str, Callable[[RunMetrics], float]], ...] = (
    ("output_tokens_per_s", "output tok/s", lambda m: m.output_tokens_per_s),
    ("ttft_s_p50", "TTFT p50", lambda m: m.ttft_s.p50),
    ("itl_s_p50", "ITL p50", lambda m: m.itl_s.p50),  # gaps between streamed chunks, pooled over requests
    ("tpot_s_p50", "TPOT p50", lambda m: m.tpot_s.p50),  # per request: (E2E - TTFT) / (tokens - 1)
)


@dataclass(frozen=True)
class SideBySideSpec(Spec):
    """How a side-by-side repeats itself: the Serving page's rounds box and run_side_by_side's default read it."""

    rounds: int = option(
        1, "interleaved rounds: each level once on every endpoint per round (medians over them)", lo=1, hi=5
    )


@dataclass(frozen=True)
class SideBySide:
    names: tuple[str, ...]  # the endpoints, in the order given (the first is the one the ratios put on top)
    specs: dict[str, LoadSpec]
    slo: SLO
    levels: tuple[float, ...]
    rounds: int
    runs: dict[str, dict[float, tuple[RunMetrics, ...]]]  # name -> level -> one run per round
    loads: tuple[
        tuple[str, float, int, float], ...
    ]  # (name, level, round, 1-minute load average after the run)
    started_at: str

    def median_of(self, name: str, level: float, key: str) -> float | None:
        read = next(f for k, _, f in METRICS if k == key)
        vals = [read(m) for m in self.runs[name][level] if m.completed]
        vals = [v for v in vals if v == v]  # a run without a TPOT (one-token answers) gives NaN
        return stats.median(vals) if vals else None

    def ratio(self, top: str, bottom: str, level: float, key: str) -> float | None:
        a, b = self.median_of(top, level, key), self.median_of(bottom, level, key)
        return a / b if a is not None and b else None

    def sweep(self, name: str) -> SweepResult:
        """One endpoint's runs as a sweep (its first round), for the page's usual tables and charts."""
        points = tuple(self.runs[name][level][0] for level in self.levels)
        knee = max((p.level for p in points if p.meets_slo), default=None)
        return SweepResult(self.specs[name], self.slo, self.levels, points, knee, False, self.started_at)

    def rows(self) -> list[dict]:
        """Per level: every endpoint's medians and, for two endpoints, first / second of each."""
        out = []
        for level in self.levels:
            row: dict = {"users": level}
            for name in self.names:
                for key, words, _ in METRICS:
                    row[f"{name} {words}"] = self.median_of(name, level, key)
            if len(self.names) == 2:
                a, b = self.names
                for key, words, _ in METRICS:
                    row[f"{a} / {b} {words}"] = self.ratio(a, b, level, key)
            out.append(row)
        return out


def run_side_by_side(
    specs: Mapping[str, LoadSpec],
    levels: Sequence[float],
    *,
    rounds: int = SideBySideSpec.default("rounds"),
    slo: SLO | None = None,
    progress: Progress | None = None,
) -> SideBySide:
    """Each level on every endpoint, `rounds` times, interleaved (endpoint order reversed on odd rounds)."""
    if not specs:
        raise LoadSpecError("give at least one endpoint to sweep")
    levels = tuple(sorted(set(levels)))
    if not levels or any(v <= 0 for v in levels):
        raise LoadSpecError("give at least one positive load level (numbers of users)")
    why = SideBySideSpec.problem("rounds", rounds)
    if why:
        raise LoadSpecError(why)
    slo = slo or SLO(ttft_s=None, tpot_s=None)
    names = tuple(specs)
    runs: dict[str, dict[float, list[RunMetrics]]] = {n: {lv: [] for lv in levels} for n in names}
    loads: list[tuple[str, float, int, float]] = []
    started = datetime.now(UTC).isoformat(timespec="seconds")
    total, done = rounds * len(levels) * len(names), 0
    for r in range(rounds):
        for level in levels:
            for name in names if r % 2 == 0 else names[::-1]:
                if progress:
                    progress(done / total, f"round {r + 1}/{rounds}: {name} at {level:g} users")
                runs[name][level].append(run_once(specs[name].at(level), slo))
                loads.append((name, level, r, loadavg_1m()))
                done += 1
    if progress:
        progress(1.0, "done")
    return SideBySide(
        names,
        dict(specs),
        slo,
        levels,
        rounds,
        {n: {lv: tuple(v) for lv, v in by.items()} for n, by in runs.items()},
        tuple(loads),
        started,
    )


@dataclass(frozen=True)
class Predicted:
    """The calculator's figures for one level of a side-by-side, on this machine (engine.calibration's fit)."""

    users: float
    prompt_tokens: int
    output_tokens: int
    tpot_s: Interval  # seconds per decode step at this many users
    ttft_s: Interval
    output_tokens_per_s: Interval  # users x O / (TTFT + (O - 1) x TPOT): a closed loop of fixed users

    def holds(self, key: str, measured: float | None) -> bool | None:
        """Whether a measured figure lies inside this prediction's interval (None without one)."""
        band = self.tpot_s if key == "tpot_s_p50" else self.output_tokens_per_s
        return None if measured is None else band.covers(measured)


def closed_loop_tokens_per_s(users: float, output_tokens: int, ttft_s: float, tpot_s: float) -> float:
    """Output tokens per second of `users` who each send the next request when the last one ends: every request
    makes O tokens in TTFT + (O - 1) x TPOT."""
    return users * output_tokens / (ttft_s + (output_tokens - 1) * tpot_s)


def predicted(sbs: SideBySide, cal, spec, dtype: str, first: str | None = None) -> tuple[Predicted, ...]:
    """The calibrated calculator's TTFT, TPOT and throughput at each level of `sbs` (engine.calibration
    predict_interval, 95% intervals), for the prompt length the `first` endpoint's server counted (its median)
    and the sweep's output length. The throughput's interval pairs the slow ends of both times, then the fast."""
    from engine.calibration import predict_interval

    name = first or sbs.names[0]
    out_tokens = sbs.specs[name].output_tokens
    rows = []
    for level in sbs.levels:
        prompts = [
            m.prompt_tokens_median
            for m in sbs.runs[name][level]
            if m.prompt_tokens_median == m.prompt_tokens_median
        ]
        prompt = max(1, round(stats.median(prompts))) if prompts else 1
        users = max(1, round(level))
        pi = predict_interval(
            cal, spec, dtype=dtype, prompt_tokens=prompt, output_tokens=out_tokens, batch=users
        )
        tput = Interval(
            closed_loop_tokens_per_s(level, out_tokens, pi.ttft.high, pi.tpot.high),
            closed_loop_tokens_per_s(level, out_tokens, pi.ttft.central, pi.tpot.central),
            closed_loop_tokens_per_s(level, out_tokens, pi.ttft.low, pi.tpot.low),
            rows=pi.tpot.rows,
        )
        rows.append(Predicted(level, prompt, out_tokens, pi.tpot, pi.ttft, tput))
    return tuple(rows)
