"""How long one forward of the scheduler takes: the simulator's step-time models.

A step is what one scheduler iteration runs in one forward: `decode_rows` rows each adding a token (their KV caches
hold `context_tokens` tokens together) and `prefill_tokens` prompt tokens (a chunk of a batched prefill, or
newcomers riding a decode step). Every model answers `duration(decode_rows, context_tokens, prefill_tokens)` with an
Interval (low / central / high), so a simulated sweep runs three times and its percentiles carry an interval:

- `published_steps(setup, engine)`: a GPU the machine lacks, through `step_time`: the estimates' own per-step model
  (engine.calc.step_model: the calculator's operators with the engine class's utilisation fitted on published
  runs), and its fitted per-request fixed cost.
- `CalibratedSteps(cal, spec, dtype)`: this machine, from its stored calibration (engine.calibration.fit: bytes /
  achieved bandwidth + per-layer cost + each extra row's FLOPs; prefill FLOPs / achieved FLOP/s + a fixed cost).
- `LinearSteps`: t = a + b x rows + c x context + d x prefill tokens (+ e for prompts alone, + g x rows for each row
  of a step that also carries prompts); constant step times for hand-checked tests, and a fit on the scheduler's
  own measured steps (bench/simulate.py).

Each also carries `fixed_s`, a per-request cost outside the steps (HTTP, tokenizing, detokenizing): zero unless a
model knows it (engine.calc.step_model.request_fixed_s for a GPU; measured on this machine's server), and
`handling_s`, the part of it spent before the scheduler sees the request, one request at a time (the server
tokenizes under one lock): measured on this machine's server, 0 for a GPU engine (no published split).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Protocol

from engine.calc import step_model
from engine.calc.anchor import Anchor, anchor_for
from engine.calc.efficiency import ENGINES, Setup, fits
from engine.calc.observations import parallel
from engine.core.errors import InvalidParameterError
from engine.core.interval import Interval

ZERO = Interval.exact(0.0)
CONTEXT_BUCKET = 16  # tokens: steps whose rows' mean context rounds to the same multiple share one prediction


class StepModel(Protocol):
    name: str  # what the JSON's "step_model" says
    fixed_s: Interval  # per-request seconds outside the steps
    handling_s: float  # of which before the scheduler, one request at a time

    def duration(
        self, decode_rows: int, context_tokens: int, prefill_tokens: int, prefill_seqs: int = 0
    ) -> Interval: ...

    def describe(self) -> dict: ...


def _check(decode_rows: int, context_tokens: int, prefill_tokens: int, prefill_seqs: int = 0) -> int:
    """Validate a step's composition; returns the prompts' count (at least one where there are prompt tokens)."""
    if decode_rows < 0 or context_tokens < 0 or prefill_tokens < 0 or not (decode_rows or prefill_tokens):
        raise InvalidParameterError(
            f"a step runs decode rows or prefill tokens (got {decode_rows} rows, {prefill_tokens} prompt tokens)"
        )
    return min(max(1, prefill_seqs), prefill_tokens) if prefill_tokens else 0


@dataclass(frozen=True)
class LinearSteps:
    """t = a + b x decode rows + c x context tokens + d x prompt tokens, + e for a forward of prompts alone (a
    standalone prefill: on this machine's server it costs more than the same prompt riding a decode step), + g x
    decode rows in a forward that also carries prompts (a mixed step: on this machine's server each running row
    costs it far more than it costs a decode step, 2026-12-04 probes), in seconds; the same at every end of the
    interval unless `spread` (low, high) multiplies it."""

    a: float
    b: float = 0.0
    c: float = 0.0
    d: float = 0.0
    e: float = 0.0
    g: float = 0.0
    name: str = "linear"
    fixed_s: Interval = ZERO
    handling_s: float = 0.0
    spread: tuple[float, float] = (1.0, 1.0)
    source: str = ""
    rows: int | None = None  # measured steps behind the fit (None: set by hand)

    def duration(
        self, decode_rows: int, context_tokens: int, prefill_tokens: int, prefill_seqs: int = 0
    ) -> Interval:
        _check(decode_rows, context_tokens, prefill_tokens, prefill_seqs)
        t = sum(
            k * x
            for k, x in zip(
                self.coefficients, _features(decode_rows, context_tokens, prefill_tokens), strict=True
            )
        )
        return Interval(t * self.spread[0], t, t * self.spread[1])

    @property
    def coefficients(self) -> tuple[float, ...]:
        return (self.a, self.b, self.c, self.d, self.e, self.g)

    def describe(self) -> dict:
        return {
            "kind": self.name,
            "formula": (
                "t = a + b x rows + c x context tokens + d x prompt tokens (+ e for prompts alone, + g x rows "
                "when the step also carries prompts)"
            ),
            "a_s": self.a,
            "b_s_per_row": self.b,
            "c_s_per_context_token": self.c,
            "d_s_per_prefill_token": self.d,
            "e_s_standalone_prefill": self.e,
            "g_s_per_mixed_row": self.g,
            "spread": list(self.spread),
            "source": self.source,
            "rows": self.rows,
        }


def _features(rows: int, context: int, prefill: int) -> tuple[float, ...]:
    mixed = float(rows) if prefill and rows else 0.0
    return (1.0, float(rows), float(context), float(prefill), 1.0 if prefill and not rows else 0.0, mixed)


def fit_linear(
    steps: Sequence[tuple[int, int, int, float]], *, name: str = "measured", source: str = ""
) -> LinearSteps:
    """Least squares on relative error of (rows, context, prefill tokens, seconds) observations, coefficients kept
    >= 0 (engine.calibration.fit.nonneg_fit; a feature no observation has stays at 0), interval from the residuals'
    2.5th and 97.5th percentiles."""
    from engine.calibration.fit import nonneg_fit
    from engine.core.stats import quantile

    if len(steps) < 4:
        raise InvalidParameterError("fitting step times needs at least 4 measured steps")
    rows = [list(_features(r, c, p)) for r, c, p, _ in steps]
    y = [t for *_, t in steps]
    active = [any(row[j] for row in rows) for j in range(len(rows[0]))]
    coef = nonneg_fit(rows, y, active)
    if coef is None:
        raise InvalidParameterError("the measured steps do not determine a step-time model")
    ratios = [t / sum(c * x for c, x in zip(coef, row, strict=True)) for row, t in zip(rows, y, strict=True)]
    return LinearSteps(
        *coef,
        name=name,
        spread=(min(1.0, quantile(ratios, 0.025)), max(1.0, quantile(ratios, 0.975))),
        source=source,
        rows=len(steps),
    )


# ---------------------------------------------------------------- a GPU from published runs


def step_time(
    setup: Setup,
    engine: str,
    decode_rows: int,
    context_tokens: int,
    prefill_tokens: int,
    prefill_seqs: int = 1,
    *,
    fixed_factor: float = 1.0,
) -> Interval:
    """Seconds of one forward of `engine` on the setup's GPUs: `decode_rows` rows reading `context_tokens` cached
    tokens in all, plus `prefill_tokens` prompt tokens (engine.calc.step_model.step_time: the calculator's
    operators, so quantized formats and tensor parallel count as they do there, at the engine class's fitted
    utilisation; its interval from the class's leave-one-source-out ratios, never below the physical bound). The
    prompts' count is checked but not used: the step model counts prompt tokens alone (attention linear in them).
    """
    _check(decode_rows, context_tokens, prefill_tokens, prefill_seqs)
    return step_model.step_time(
        setup, engine, decode_rows, context_tokens, prefill_tokens, fixed_factor=fixed_factor
    )


StepFn = Callable[[int, int, int, int], Interval]


def _bucketed(fn: StepFn) -> StepFn:
    """`fn` memoized on (rows, mean context rounded to CONTEXT_BUCKET tokens, prefill tokens, prompts): a sweep
    asks for thousands of steps that differ by a token of context."""

    @lru_cache(maxsize=65536)
    def at(rows: int, bucket: int, prefill: int, seqs: int) -> Interval:
        return fn(rows, bucket * CONTEXT_BUCKET * rows, prefill, seqs)

    def duration(
        decode_rows: int, context_tokens: int, prefill_tokens: int, prefill_seqs: int = 0
    ) -> Interval:
        seqs = _check(decode_rows, context_tokens, prefill_tokens, prefill_seqs)
        bucket = max(1, round(context_tokens / decode_rows / CONTEXT_BUCKET)) if decode_rows else 0
        return at(decode_rows, bucket, prefill_tokens, seqs)

    return duration


class _Bucketed:
    """A step model whose `duration` is its `_predict(rows, context, prefill tokens, prompts)`, memoized per
    instance (_bucketed)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_seconds", _bucketed(self._predict))  # type: ignore[attr-defined]

    def duration(
        self, decode_rows: int, context_tokens: int, prefill_tokens: int, prefill_seqs: int = 0
    ) -> Interval:
        return self._seconds(decode_rows, context_tokens, prefill_tokens, prefill_seqs)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class PublishedSteps(_Bucketed):
    setup: Setup
    engine: str
    name: str = "published"
    fixed_s: Interval = ZERO
    handling_s: float = 0.0

    def _predict(self, rows: int, context: int, prefill: int, seqs: int) -> Interval:
        return step_time(
            self.setup, self.engine, rows, context, prefill, seqs, fixed_factor=self.fixed_factor
        )

    @property
    def fixed_factor(self) -> float:
        """The factor on the steps' fixed costs: the anchor's, else 1 (the fit's own)."""
        a = self.anchor
        return a.factor if a is not None else 1.0

    @property
    def anchor(self) -> Anchor | None:
        """The published run the step's fixed costs are anchored to, as the estimate's are (engine.calc.anchor)."""
        if self.engine not in ENGINES:
            return None
        return anchor_for(parallel(self.setup, ENGINES[self.engine]), ENGINES[self.engine], self.engine)

    def describe(self) -> dict:
        fit = fits().for_engine(self.engine)
        read = {k: getattr(fit, k, None) for k in ("bandwidth", "flops", "overhead_s_per_layer", "borrowed")}
        a = self.anchor
        return {
            "kind": self.name,
            "what": (
                f"the calculator's operators on {self.setup.n_gpus} x {self.setup.gpu.name} with the "
                f"{fit.engine_class} class's utilisation fitted on published runs"
            ),
            "engine_class": fit.engine_class,
            "decode_bandwidth_utilisation": read["bandwidth"],
            "prefill_compute_utilisation": read["flops"],
            "overhead_s_per_layer": read["overhead_s_per_layer"],
            "borrowed": list(read["borrowed"] or ()),
            "interval": "the estimate's 80% interval of the engine class's published / predicted ratios, every step at the same end",
            "per_request_fixed_s": self.fixed_s.central,
            "handling_s": self.handling_s,
            "fixed_costs_anchored": a.to_json() if a is not None else None,
            "rows": getattr(fit, "decode_rows", 0) + getattr(fit, "prefill_rows", 0),
        }


def published_steps(setup: Setup, engine: str) -> PublishedSteps:
    """A GPU from published runs; a request's fixed cost from the estimates' fit (step_model.request_fixed_s); the
    steps' fixed costs anchored as the estimate's are, where a published run of the layout says so."""
    return PublishedSteps(setup, engine, fixed_s=Interval.exact(step_model.request_fixed_s(setup, engine)))


# ---------------------------------------------------------------- this machine from its calibration


@dataclass(frozen=True)
class CalibratedSteps(_Bucketed):
    """This machine's stored calibration as step times: a decode step of `rows` at the rows' mean context is the
    fit's TPOT at that batch and context; a prompt's tokens add what the fit's TTFT adds per prompt token beyond one
    (their FLOPs and activations: the weights are read once per forward anyway); a standalone prefill is the fit's
    TTFT, fixed cost included. Intervals are the fit's bootstrap intervals (engine.calibration.fit.predict)."""

    cal: object  # engine.calibration.Calibration
    spec: object  # ModelSpec
    dtype: str
    name: str = "calibrated"
    fixed_s: Interval = ZERO
    handling_s: float = 0.0

    def _predict(self, rows: int, context: int, prefill: int, seqs: int) -> Interval:
        from engine.calibration.fit import predict

        fit = self.cal.fit_for(self.dtype)  # type: ignore[attr-defined]
        spec = replace(self.spec, context_length=10**9)  # type: ignore[type-var]
        each = max(1, round(prefill / seqs)) if prefill else 0
        if not rows:
            return predict(fit, spec, prompt=each, output=1, batch=seqs)[0]
        _, tpot = predict(fit, spec, prompt=max(1, round(context / rows)), output=2, batch=rows)
        if not prefill:
            return tpot
        ttft_n, _ = predict(fit, spec, prompt=each, output=1, batch=seqs)
        ttft_1, _ = predict(fit, spec, prompt=1, output=1)
        return _add(tpot, _scaled(_sub(ttft_n, ttft_1), prefill / max(1, prefill - 1)))

    def describe(self) -> dict:
        cal = self.cal
        fit = cal.fit_for(self.dtype)  # type: ignore[attr-defined]
        return {
            "kind": self.name,
            "what": f"this machine's calibration ({cal.model}, {cal.created_at})",  # type: ignore[attr-defined]
            "dtype": fit.dtype,
            "achieved_bandwidth_bytes_per_s": fit.achieved_bandwidth,
            "overhead_s_per_layer": fit.overhead_s_per_layer,
            "prefill_fixed_s": fit.prefill_fixed_s,
            "interval": "the fit's residual bootstrap, 95%",
            "per_request_fixed_s": self.fixed_s.central,
            "handling_s": self.handling_s,
            "rows": fit.shapes,
        }


def _add(a: Interval, b: Interval) -> Interval:
    return Interval(a.low + b.low, a.central + b.central, a.high + b.high)


def _sub(a: Interval, b: Interval) -> Interval:
    """a - b where both come from the same fit (their ends move together): end by end, floored at zero."""
    return Interval(*(max(0.0, x - y) for x, y in ((a.low, b.low), (a.central, b.central), (a.high, b.high))))


def _scaled(a: Interval, k: float) -> Interval:
    return Interval(a.low * k, a.central * k, a.high * k)


# A point inside a step's 80% interval, by its quantile's normal score over the end's (the 90th percentile's, 1.2816):
# the class's published / predicted ratios read as log-normal, so "likely_slow" is the 75th percentile, the step
# 3 in 4 of the class's runs are quicker than (where "high" is 9 in 10).
INSIDE = {"likely_slow": 0.6745 / 1.2816}


def end(i: Interval, which: str) -> float:
    """One end of a step's interval: the run it belongs to ("low", "central" or "high"), or a point between the
    central and the high end (INSIDE)."""
    if which in INSIDE:
        c, h = i.central, i.high
        v = c * (h / c) ** INSIDE[which] if c > 0 and h > c else c
    else:
        v = getattr(i, which)
    if not math.isfinite(v) or v <= 0:
        raise InvalidParameterError(f"a step time must be a positive number of seconds, got {v!r}")
    return v
