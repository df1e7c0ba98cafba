"""How long one forward of the scheduler takes: the simulator's step-time models.

A step is what one scheduler iteration runs in one forward: `decode_rows` rows each adding a token (their KV caches
hold `context_tokens` tokens together) and `prefill_tokens` prompt tokens (a chunk of a batched prefill, or
newcomers riding a decode step). Every model answers `duration(decode_rows, context_tokens, prefill_tokens)` with an
Interval (low / central / high), so a simulated sweep runs three times and its percentiles carry an interval:

- `published_steps(setup, engine)`: a GPU the machine lacks, through `step_time`, the one adapter over the
  calculator (engine.calc.timing's operators and engine.calc.efficiency's engine-class fit on published runs);
  engine.calc.step_model's per-step model (a request's fixed cost with it) is used instead where the tree has it:
  the switch is in this module only.
- `CalibratedSteps(cal, spec, dtype)`: this machine, from its stored calibration (engine.calibration.fit: bytes /
  achieved bandwidth + per-layer cost + each extra row's FLOPs; prefill FLOPs / achieved FLOP/s + a fixed cost).
- `LinearSteps`: t = a + b x rows + c x context + d x prefill tokens (+ e for prompts alone); constant step times for hand-checked tests,
  and a fit on the scheduler's own measured steps (bench/simulate.py).

Each also carries `fixed_s`, a per-request cost outside the steps (HTTP, tokenizing, detokenizing): zero unless a
model knows it (engine.calc.step_model.request_fixed_s where the tree has it; measured on this machine's server).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Protocol

from engine.calc.efficiency import Setup, fits
from engine.calc.roofline import Operator
from engine.calc.timing import Efficiency, phase_time, timing_inputs
from engine.core.errors import InvalidParameterError
from engine.core.interval import Interval

# The estimates' per-step model (engine/calc/step_model.py: step_time, request_fixed_s), where it is in the tree:
# the one place the simulator switches from its own adapter below to it (the adapter stays for a tree without it).
try:
    from engine.calc.step_model import request_fixed_s as fitted_fixed_s  # type: ignore[import-not-found]
    from engine.calc.step_model import step_time as fitted_step_time  # type: ignore[import-not-found]
except ImportError:  # not merged yet
    fitted_step_time = fitted_fixed_s = None

ZERO = Interval.exact(0.0)
CONTEXT_BUCKET = 16  # tokens: steps whose rows' mean context rounds to the same multiple share one prediction


class StepModel(Protocol):
    name: str  # what the JSON's "step_model" says
    fixed_s: Interval  # per-request seconds outside the steps

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
    standalone prefill: on this machine's server it costs more than the same prompt riding a decode step), in
    seconds; the same at every end of the interval unless `spread` (low, high) multiplies it."""

    a: float
    b: float = 0.0
    c: float = 0.0
    d: float = 0.0
    e: float = 0.0
    name: str = "linear"
    fixed_s: Interval = ZERO
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
        return (self.a, self.b, self.c, self.d, self.e)

    def describe(self) -> dict:
        return {
            "kind": self.name,
            "formula": "t = a + b x rows + c x context tokens + d x prompt tokens (+ e for prompts alone)",
            "a_s": self.a,
            "b_s_per_row": self.b,
            "c_s_per_context_token": self.c,
            "d_s_per_prefill_token": self.d,
            "e_s_standalone_prefill": self.e,
            "spread": list(self.spread),
            "source": self.source,
            "rows": self.rows,
        }


def _features(rows: int, context: int, prefill: int) -> tuple[float, ...]:
    return (1.0, float(rows), float(context), float(prefill), 1.0 if prefill and not rows else 0.0)


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


def _merge(decode: Sequence[Operator], prefill: Sequence[Operator]) -> list[Operator]:
    """One forward over the decode rows' tokens and the prompt tokens together: each weight matrix is read once
    (its FLOPs and activations add up), attention runs per part (a decode row against its cache, a prompt against
    itself)."""
    out = list(decode)
    index = {op.name: i for i, op in enumerate(out) if op.weight_bytes}
    for op in prefill:
        i = index.get(op.name)
        if i is None:
            out.append(op)
            continue
        d = out[i]
        out[i] = replace(d, flops=d.flops + op.flops, bytes=d.bytes + op.bytes - op.weight_bytes)
    return out


def step_time(
    setup: Setup,
    engine: str,
    decode_rows: int,
    context_tokens: int,
    prefill_tokens: int,
    prefill_seqs: int = 1,
) -> Interval:
    """Seconds of one forward of `engine` on the setup's GPUs: `decode_rows` rows reading `context_tokens` cached
    tokens in all, plus `prefill_tokens` prompt tokens of `prefill_seqs` prompts (equal shares; each attends to
    its own tokens: a later chunk's attention to the earlier chunks of its prompt is left out). The operators are the calculator's (engine.calc.roofline,
    through engine.calc.timing.timing_inputs, so quantized formats and tensor parallel count as they do there);
    each takes max(FLOPs / (peak x e_f), bytes / (bandwidth x e_bw)) with the engine class's fitted utilisation, plus
    its per-layer step cost and all-reduces (engine.calc.efficiency). The interval applies the class's
    leave-one-source-out ratios of published / predicted: single-sequence decode rows for one row, batched
    throughput rows for a batch, first-token rows for a step that is mostly prompt; never below the physical
    bound (every roof reached)."""
    seqs = _check(decode_rows, context_tokens, prefill_tokens, prefill_seqs)
    if (
        fitted_step_time is not None
    ):  # the estimates' model: prompts' attention is linear there (no prefill_seqs)
        return fitted_step_time(setup, engine, decode_rows, context_tokens, prefill_tokens)
    fit = fits().for_engine(engine)
    eff = fit.efficiency(setup.gpu)
    long = replace(setup.spec, context_length=10**9)  # the context limit is checked where requests are made
    ops: list[Operator] = []
    comm = 0.0
    roof = n_layer = allreduces = None
    if decode_rows:
        mean = max(1, round(context_tokens / decode_rows))
        # timing_inputs' decode step at P + O/2 - 1 cached tokens: P = mean, O = 2 gives `mean`
        d = timing_inputs(replace(setup, spec=long, batch=decode_rows, prompt_tokens=mean, output_tokens=2))
        ops, comm, roof, n_layer, allreduces = (
            list(d.decode_ops),
            d.decode_comm_s,
            d.roof,
            d.n_layer,
            d.allreduces,
        )
    if prefill_tokens:
        each = max(1, round(prefill_tokens / seqs))
        p = timing_inputs(replace(setup, spec=long, batch=seqs, prompt_tokens=each, output_tokens=1))
        ops = _merge(ops, p.prefill_ops)
        comm += p.prefill_comm_s
        roof, n_layer, allreduces = p.roof, p.n_layer, p.allreduces
    assert roof is not None and n_layer is not None and allreduces is not None
    mostly_prompt = prefill_tokens > decode_rows
    e = eff if mostly_prompt or eff.decode_flops is None else replace(eff, flops=eff.decode_flops)
    central = phase_time(ops, roof, n_layer, e, comm + allreduces * eff.allreduce_latency_s).seconds
    bound = phase_time(ops, roof, n_layer, Efficiency(label="physics"), comm).seconds
    ratio = (
        fit.prefill_ratio if mostly_prompt else fit.decode_ratio if decode_rows == 1 else fit.throughput_ratio
    )
    rows = fit.prefill_rows if mostly_prompt else fit.decode_rows
    lo, hi = ratio
    return Interval(max(central * lo, bound), central, max(central * hi, bound), bound, rows)


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


@dataclass(frozen=True)
class PublishedSteps:
    setup: Setup
    engine: str
    name: str = "published"
    fixed_s: Interval = ZERO
    _seconds: StepFn = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        setup, engine = self.setup, self.engine
        object.__setattr__(
            self, "_seconds", _bucketed(lambda r, c, p, n: step_time(setup, engine, r, c, p, n))
        )

    def duration(
        self, decode_rows: int, context_tokens: int, prefill_tokens: int, prefill_seqs: int = 0
    ) -> Interval:
        return self._seconds(decode_rows, context_tokens, prefill_tokens, prefill_seqs)

    def describe(self) -> dict:
        fit = fits().for_engine(self.engine)
        source = "engine.calc.step_model" if fitted_step_time is not None else "engine.calc.efficiency"
        read = {k: getattr(fit, k, None) for k in ("bandwidth", "flops", "overhead_s_per_layer", "borrowed")}
        return {
            "kind": self.name,
            "what": (
                f"the calculator's operators on {self.setup.n_gpus} x {self.setup.gpu.name} with the "
                f"{fit.engine_class} class's utilisation fitted on published runs ({source})"
            ),
            "engine_class": fit.engine_class,
            "decode_bandwidth_utilisation": read["bandwidth"],
            "prefill_compute_utilisation": read["flops"],
            "overhead_s_per_layer": read["overhead_s_per_layer"],
            "borrowed": list(read["borrowed"] or ()),
            "interval": "the engine class's published / predicted ratios (2.5-97.5%), applied per step",
            "per_request_fixed_s": self.fixed_s.central,
            "rows": getattr(fit, "decode_rows", 0) + getattr(fit, "prefill_rows", 0),
        }


def published_steps(setup: Setup, engine: str) -> PublishedSteps:
    """A GPU from published runs; a request's fixed cost from the estimates' fit where it is in the tree."""
    fixed = ZERO if fitted_fixed_s is None else Interval.exact(fitted_fixed_s(setup, engine))
    return PublishedSteps(setup, engine, fixed_s=fixed)


# ---------------------------------------------------------------- this machine from its calibration


@dataclass(frozen=True)
class CalibratedSteps:
    """This machine's stored calibration as step times: a decode step of `rows` at the rows' mean context is the
    fit's TPOT at that batch and context; a prompt's tokens add what the fit's TTFT adds per prompt token beyond one
    (their FLOPs and activations: the weights are read once per forward anyway); a standalone prefill is the fit's
    TTFT, fixed cost included. Intervals are the fit's bootstrap intervals (engine.calibration.fit.predict)."""

    cal: object  # engine.calibration.Calibration
    spec: object  # ModelSpec
    dtype: str
    name: str = "calibrated"
    fixed_s: Interval = ZERO
    _seconds: StepFn = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_seconds", _bucketed(self._predict))

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

    def duration(
        self, decode_rows: int, context_tokens: int, prefill_tokens: int, prefill_seqs: int = 0
    ) -> Interval:
        return self._seconds(decode_rows, context_tokens, prefill_tokens, prefill_seqs)

    def describe(self) -> dict:
        cal = self.cal
        fit = cal.fit_for(self.dtype)  # type: ignore[attr-defined]
        return {
            "kind": self.name,
            "what": f"this machine's calibration ({cal.model}, {cal.created_at}; engine.calibration.fit)",  # type: ignore[attr-defined]
            "dtype": fit.dtype,
            "achieved_bandwidth_bytes_per_s": fit.achieved_bandwidth,
            "overhead_s_per_layer": fit.overhead_s_per_layer,
            "prefill_fixed_s": fit.prefill_fixed_s,
            "interval": "the fit's residual bootstrap, 95%",
            "per_request_fixed_s": self.fixed_s.central,
            "rows": fit.shapes,
        }


def _add(a: Interval, b: Interval) -> Interval:
    return Interval(a.low + b.low, a.central + b.central, a.high + b.high)


def _sub(a: Interval, b: Interval) -> Interval:
    """a - b where both come from the same fit (their ends move together): end by end, floored at zero."""
    return Interval(*(max(0.0, x - y) for x, y in ((a.low, b.low), (a.central, b.central), (a.high, b.high))))


def _scaled(a: Interval, k: float) -> Interval:
    return Interval(a.low * k, a.central * k, a.high * k)


def end(i: Interval, which: str) -> float:
    """One end of a step's interval: the run it belongs to ("low", "central" or "high")."""
    v = getattr(i, which)
    if not math.isfinite(v) or v <= 0:
        raise InvalidParameterError(f"a step time must be a positive number of seconds, got {v!r}")
    return v
