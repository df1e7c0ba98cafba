"""Estimate against measurement over recent comparable runs, not one: the median and spread (engine.core.stats) of the
last runs of the same shape, where they came from, and what an efficiency above 1 means.

Runs are comparable when they share model, precision, batch, KV cache on/off and the power-of-two bucket of their
per-sequence prompt and output lengths (a 100- and a 120-token prompt cost nearly the same prefill; a 100- and a
4000-token one do not). Cancelled runs never count (Measurement.comparable).

Efficiency = predicted time at the machine's measured roofs / measured time, the fraction of the roof a run
reached (Williams, Waterman & Patterson, "Roofline", CACM 2009). It can exceed 1 because the roofs are
themselves measurements of one access pattern: a streaming read of 256 MB from DRAM. A model whose weights fit in
the CPU's last-level cache reads them faster than DRAM; and with a few runs the median can sit in a quiet moment
of the machine while the roof was measured in a busy one.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from engine.arch.resolve import spec_for_run_model
from engine.calc import format as fmt
from engine.calibration.beside import Beside, beside, run_load
from engine.calibration.fit import RunSample
from engine.calibration.prediction import predict, predict_interval
from engine.core import stats
from engine.core.interval import Interval
from engine.core.load import cores, is_busy, loadavg_1m
from engine.runtime.measurement import sources_in_words

RECENT = 10  # the newest runs of a shape that count: older ones may predate a change of load or code
SPREAD_LEVEL = 0.95  # the one-run interval's nominal level
SPREAD_MIN_RUNS = 8  # fewer compared runs than this: no one-run interval (the fit's own is shown, and named)


def _bucket(n: float) -> int:
    """Power-of-two bucket: 1, 2, 4, 8, ... (the bucket of 100 and of 120 is 128)."""
    return 1 << max(0, math.ceil(math.log2(max(1.0, n))))


FIT_WORDS = "the fit's 95%, for the fastest of a shape's runs"


@dataclass(frozen=True)
class RunSpread:
    """How far one run measured here strays from the calibrated point: the ratios measured / predicted TPOT of the
    runs compared (quiet, with their load recorded), every shape pooled. The fit is made on each shape's fastest
    run (noise only adds time), so its own interval is one for the fastest run, which most runs on a shared machine
    sit above; the point times these ratios' 2.5th and 97.5th percentiles is a prediction interval for one more run.
    `held` says how many compared runs it held when each was left out of the ratios that judged it."""

    ratios: tuple[float, ...]
    level: float = SPREAD_LEVEL

    def _bounds(self, ratios: Sequence[float]) -> tuple[float, float]:
        tail = (1 - self.level) / 2
        return stats.quantile(ratios, tail), stats.quantile(ratios, 1 - tail)

    @property
    def factors(self) -> tuple[float, float]:
        """(low, high) multipliers of the calibrated point."""
        return self._bounds(self.ratios)

    @property
    def n(self) -> int:
        return len(self.ratios)

    @property
    def held(self) -> int:
        """Compared runs inside the interval built from the others' ratios (leave one out)."""
        inside = 0
        for i, r in enumerate(self.ratios):
            lo, hi = self._bounds(self.ratios[:i] + self.ratios[i + 1 :])
            inside += lo <= r <= hi
        return inside

    @property
    def words(self) -> str:
        return f"one run here, {self.level:.0%}"

    def sentence(self) -> str:
        """What the interval is and how many runs it actually held, from its numbers."""
        lo, hi = self.factors
        held = self.held
        return (
            f"The interval is for one more run here ({self.level:.0%} nominal): the calibrated estimate times "
            f"{lo:.2f}–{hi:.2f}, the spread of measured / estimated TPOT over the {self.n} quiet runs compared. Each "
            f"run judged by the interval built from the others, it held {held} of {self.n} ({held / self.n:.0%})."
        )


@dataclass(frozen=True)
class ShapeComparison:
    model: str
    dtype: str
    batch_size: int
    use_cache: bool
    prompt_tokens: int  # median per sequence
    output_tokens: int  # median per sequence
    sources: dict[str, int]  # source -> runs ("" for log lines that predate sources)
    newest: str
    tpot: stats.Spread  # measured, seconds
    ttft: stats.Spread
    datasheet_tpot_s: float
    datasheet_ttft_s: float
    calibrated_tpot_s: float | None
    calibrated_ttft_s: float | None
    # TPOT: one run's interval (RunSpread) where enough runs were compared, else the fit's 95% (of the fastest run)
    calibrated_tpot_interval: tuple[float, float] | None = None
    calibrated_ttft_interval: tuple[float, float] | None = None  # the fit's 95%
    loadavg_1m: float = math.nan  # median 1-minute load average of the runs that recorded one
    # of the runs compared, those measured busy: all of them or none (busy runs are compared only where the shape
    # has no quiet one)
    busy_runs: int = 0
    busy_left_out: int = 0  # busy runs of the shape left out because it has quiet ones
    run_spread: RunSpread | None = None  # what calibrated_tpot_interval is, when it is one run's interval

    @property
    def interval_words(self) -> str:
        """What the TPOT interval is, in the words beside it."""
        return self.run_spread.words if self.run_spread is not None else FIT_WORDS

    @property
    def label(self) -> str:
        """The shape in words, its lengths included: shapes that differ only in length are separate rows (a chart
        keyed on model, precision and batch alone stacked nine of them into one bar)."""
        return (
            f"{self.model} {self.dtype} b{self.batch_size} {self.prompt_tokens}+{self.output_tokens} tok"
            + ("" if self.use_cache else " no-cache")
        )

    @property
    def n(self) -> int:
        return self.tpot.n

    @property
    def tpot_efficiency(self) -> float:
        """Datasheet-mode prediction / median measured TPOT: the fraction of the measured roof reached."""
        return self.datasheet_tpot_s / self.tpot.median if self.tpot.median > 0 else math.nan

    @property
    def source_text(self) -> str:
        return sources_in_words(self.sources)

    def beside(self) -> Beside:
        """The median measured TPOT beside the calibrated estimate (engine.calibration.beside): not comparable when
        most of the shape's runs were measured busy."""
        predicted = None
        if self.calibrated_tpot_s is not None and self.calibrated_tpot_interval is not None:
            lo, hi = self.calibrated_tpot_interval
            predicted = Interval(lo, self.calibrated_tpot_s, hi, self.datasheet_tpot_s)
        return beside(
            "TPOT",
            measured_s=self.tpot.median,
            predicted=predicted,
            bound_s=self.datasheet_tpot_s,
            loadavg_1m=self.loadavg_1m,
            # busy when any compared run was; else the load decides, and runs that recorded none are not compared
            busy=True if self.busy_runs > 0 else None,
            level=self.interval_words,
        )

    def explanation(self) -> str:
        """One sentence built from this comparison's numbers (flip them and it flips): the estimate beside the
        measurement, then what an efficiency above 1 means when the run beat the roof."""
        return self.beside().sentence() + " " + self._roof_note()

    def _roof_note(self) -> str:
        e = self.tpot_efficiency
        spread = (
            f"median of {self.n} run(s) ({self.source_text}), middle half "
            f"{fmt.seconds(self.tpot.q1)}–{fmt.seconds(self.tpot.q3)}"
        )
        if self.busy_left_out:
            spread += f"; {self.busy_left_out} run(s) measured while the machine was busy left out"
        if self.n < 3:
            spread += "; fewer than 3 runs, so the spread says little"
        if not math.isfinite(e):
            return f"No usable TPOT: {spread}."
        if e > 1:
            return (
                f"It is faster than the roof allows (efficiency {e:.2f} > 1; {spread}). The roof is a measured "
                "DRAM streaming read; weights that stay in the CPU's caches between steps, or a quieter machine than "
                "when the roof was measured, beat it. Recalibrate (python -m engine calibrate) to fold this in."
            )
        return f"({spread}.)"


def summarize(
    runs: Sequence[Any],
    machine: Any,
    cal: Any = None,
    *,
    recent: int = RECENT,
    spec_for: Callable[[str], Any] = spec_for_run_model,
) -> list[ShapeComparison]:
    """One ShapeComparison per comparable shape among `runs` (Measurements, oldest first), newest shapes last."""
    groups: dict[tuple, list[Any]] = {}
    for m in runs:
        if not getattr(m, "comparable", True) or not math.isfinite(m.tpot_s) or m.tpot_s <= 0:
            continue
        if m.dtype not in ("fp32", "fp16", "bf16"):
            continue
        b = max(1, int(m.batch_size))
        key = (
            m.model,
            m.dtype,
            b,
            bool(m.use_cache),
            _bucket(m.prompt_tokens / b),
            _bucket(m.output_tokens / b),
        )
        groups.setdefault(key, []).append(m)
    out = []
    ratios: list[float] = []  # measured / calibrated TPOT of each run compared (RunSpread)
    for (model, dtype, b, use_cache, _p, _o), ms in groups.items():
        spec = spec_for(model)
        if spec is None:
            continue
        # the shape's quiet runs only (a run measured busy is not compared), the busy ones where it has no other
        busy = [_measured_busy(m) for m in ms]
        quiet = [m for m, flag in zip(ms, busy, strict=True) if not flag]
        left_out = len(ms) - len(quiet) if quiet else 0
        ms = (quiet or ms)[-recent:]
        busy_runs = 0 if quiet else len(ms)
        p = max(1, round(stats.median([m.prompt_tokens / b for m in ms])))
        o = max(1, round(stats.median([m.output_tokens / b for m in ms])))
        sample = RunSample(dtype, b, p, o, math.nan, math.nan)
        recorded = [load for load, _, _ in map(run_load, ms) if math.isfinite(load)]
        d_ttft, d_tpot = predict(spec, sample, machine)
        c_ttft = c_tpot = None
        c_tpot_iv = c_ttft_iv = None
        if cal is not None:  # the point and its interval from the same fit (a missing precision borrows one)
            pi = predict_interval(cal, spec, dtype=dtype, prompt_tokens=p, output_tokens=o, batch=b)
            c_ttft, c_tpot = pi.ttft.central, pi.tpot.central
            c_tpot_iv, c_ttft_iv = (pi.tpot.low, pi.tpot.high), (pi.ttft.low, pi.ttft.high)
        out.append(
            ShapeComparison(
                model,
                dtype,
                b,
                use_cache,
                p,
                o,
                dict(Counter(getattr(m, "source", "") for m in ms)),
                max(m.started_at for m in ms),
                stats.spread([m.tpot_s for m in ms]),
                stats.spread([m.ttft_s for m in ms]),
                d_tpot,
                d_ttft,
                c_tpot,
                c_ttft,
                c_tpot_iv,
                c_ttft_iv,
                stats.median(recorded) if recorded else math.nan,
                busy_runs,
                left_out,
            )
        )
        if c_tpot and not busy_runs:  # the runs a ratio is drawn for: quiet, with their load recorded
            ratios += [m.tpot_s / c_tpot for m in ms if _load_recorded(m)]
    if len(ratios) >= SPREAD_MIN_RUNS:
        spread = RunSpread(tuple(ratios))
        lo, hi = spread.factors
        out = [
            replace(
                c,
                calibrated_tpot_interval=(c.calibrated_tpot_s * lo, c.calibrated_tpot_s * hi),
                run_spread=spread,
            )
            if c.calibrated_tpot_s is not None
            else c
            for c in out
        ]
    return sorted(out, key=lambda c: c.newest)


def run_spread(shapes: Sequence[ShapeComparison]) -> RunSpread | None:
    """The one-run spread the shapes' intervals share (None: too few runs compared, or no calibration)."""
    return next((c.run_spread for c in shapes if c.run_spread is not None), None)


def _load_recorded(m: Any) -> bool:
    load, share, flag = run_load(m)
    return flag is not None or math.isfinite(load) or math.isfinite(share)


def _measured_busy(m: Any) -> bool:
    """Whether a run was measured busy: its own flag, else the one rule on the load it recorded."""
    load, share, flag = run_load(m)
    return flag if flag is not None else is_busy(load, cores(), share)


@dataclass(frozen=True)
class RunForecast:
    """How long one generation should take on this machine, before it starts."""

    seconds: float
    ttft_s: float
    tpot_s: float  # with the KV cache; without it, the mean step
    calibrated: bool
    basis: str  # one line: what the figure was computed from
    interval: Interval | None = None  # the run's wall time, 95% (calibrated); None otherwise
    bound_s: float | None = None  # the measured roofs' bound on the wall time (no per-step cost)

    def beside(self, loadavg: float | None = None) -> Beside:
        """This forecast beside the machine's load now (a busy machine makes the run not comparable with it)."""
        # uncalibrated, the forecast is the measured roofs' bound itself
        bound = self.bound_s if self.bound_s is not None else (None if self.calibrated else self.seconds)
        return beside(
            "run time",
            measured_s=None,
            predicted=self.interval,
            bound_s=bound,
            loadavg_1m=loadavg_1m() if loadavg is None else loadavg,
        )


def forecast_run(
    spec: Any,
    dtype: str,
    prompt_tokens: int,
    max_new_tokens: int,
    use_cache: bool,
    machine: Any,
    cal: Any = None,
) -> RunForecast:
    """Predicted wall time of a run of `max_new_tokens` after a `prompt_tokens` prompt (batch 1), from the
    calculator's per-operator timing on `machine`'s roofs, with the calibrated fit (engine.calibration.predict_interval) when `cal` is given.

    With the KV cache: TTFT + (n - 1) × TPOT at the middle of the output. Without it, every step is a prefill
    over the whole sequence so far, so the total is the sum of prefills at lengths p+1 ... p+n (trapezoid over
    33 points; error well under the model's own)."""
    n, p = max(1, max_new_tokens), max(1, prompt_tokens)

    def at(prompt: int, out: int) -> tuple[Interval, Interval]:
        """(TTFT, TPOT) at this shape: the calibrated fit's 95% intervals (the same fit and point as the estimate
        check and the calculator), or, uncalibrated, the measured roofs' bound as a point."""
        if cal is not None:
            pi = predict_interval(cal, spec, dtype=dtype, prompt_tokens=prompt, output_tokens=max(2, out))
            return pi.ttft, pi.tpot
        ttft, tpot = predict(spec, RunSample(dtype, 1, prompt, out, math.nan, math.nan), machine)
        return Interval.exact(ttft), Interval.exact(tpot)

    first, step = at(p, n)
    b_ttft, b_tpot = predict(spec, RunSample(dtype, 1, p, n, math.nan, math.nan), machine)
    if use_cache:  # TTFT + (n - 1) x TPOT, each end from its own end (the two errors taken together)
        total = Interval(*(f + (n - 1) * t for f, t in zip(_ends(first), _ends(step), strict=True)))
        bound = b_ttft + (n - 1) * b_tpot
    else:  # every step a prefill over the sequence so far: the trapezoid over k lengths, each end summed alike
        k = min(33, n)
        xs = [p + 1 + round(i * (n - 1) / max(1, k - 1)) for i in range(k)]
        steps = [at(x, 1)[0] for x in xs]

        def summed(end: int) -> float:
            ys = [_ends(s)[end] for s in steps]
            rest = sum((xs[i + 1] - xs[i]) * (ys[i] + ys[i + 1]) / 2 for i in range(k - 1))
            return _ends(first)[end] + rest + (ys[0] if n > 1 else 0)

        total = Interval(summed(0), summed(1), summed(2))
        bound = None
    interval = Interval(total.low, total.central, total.high, bound) if cal is not None else None
    mode = "calibrated fit" if cal is not None else "measured roofs, no calibration (an optimistic bound)"
    return RunForecast(
        total.central,
        first.central,
        step.central if use_cache else (total.central - first.central) / max(1, n - 1),
        cal is not None,
        f"{spec.name}, {dtype}, {p} prompt + all {n} new tokens (a run that stops early takes less), KV cache "
        f"{'on' if use_cache else 'off'}, on {machine.name}; {mode}",
        interval,
        bound,
    )


def _ends(i: Interval) -> tuple[float, float, float]:
    return i.low, i.central, i.high
