"""Calibrated predictions: this machine's TTFT and TPOT for a shape with their 95% interval, the calculator's
Efficiency that reproduces them, and the adapter through which `engine.calc.report.estimate` takes a calibration.

The fit itself is engine.calibration.fit; the stored calibration engine.calibration.store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from engine.calc.report import CalibratedSpeed
from engine.calc.roofline import Roof, operators
from engine.calc.specs import GPUSpec, ModelSpec
from engine.calc.timing import DATASHEET, Efficiency, Setup, phase_time
from engine.calibration.fit import RunSample
from engine.calibration.fit import predict as fit_predict
from engine.calibration.store import Calibration, load_calibration
from engine.core.errors import InvalidParameterError
from engine.core.interval import Interval


def require_calibration() -> Calibration:
    """This machine's stored calibration, or a clear error saying how to make one."""
    cal = load_calibration()
    if cal is None:
        raise InvalidParameterError(
            "no calibration for this machine yet: run `python -m engine calibrate` (a few minutes), "
            "or use datasheet mode"
        )
    return cal


@dataclass(frozen=True)
class CalibratedPrediction:
    """TTFT and TPOT for one shape from a calibration, each with its interval (engine.calibration.fit.COVERAGE)."""

    model: str
    dtype: str
    batch_size: int
    prompt_tokens: int
    output_tokens: int
    ttft: Interval  # seconds
    tpot: Interval  # seconds per decode step
    calibrated_on: str  # the calibration's model and date
    notes: tuple[str, ...] = ()


def predict_interval(
    cal: Calibration,
    spec: ModelSpec,
    *,
    dtype: str,
    prompt_tokens: int,
    output_tokens: int,
    batch: int = 1,
) -> CalibratedPrediction:
    """Calibrated TTFT and TPOT of `spec` at this shape, with 95% intervals. The calculator page and the
    CLI call this for their calibrated figures; `cal` from `load_calibration()`."""
    for name, v in (("prompt tokens", prompt_tokens), ("output tokens", output_tokens), ("batch", batch)):
        if not isinstance(v, int) or v < 1:
            raise InvalidParameterError(f"{name} must be a whole number >= 1, got {v!r}")
    fit = cal.fit_for(dtype)
    notes = []
    if fit.dtype != dtype:
        notes.append(f"{dtype} borrows the {fit.dtype} calibration (no {dtype} runs were fitted)")
    ttft, tpot = fit_predict(fit, spec, prompt=prompt_tokens, output=output_tokens, batch=batch)
    return CalibratedPrediction(
        spec.name,
        dtype,
        batch,
        prompt_tokens,
        output_tokens,
        ttft,
        tpot,
        f"{cal.model}, {cal.created_at}",
        tuple(notes),
    )


def efficiency_at(
    cal: Calibration,
    spec: ModelSpec,
    gpu: GPUSpec,
    *,
    dtype: str,
    prompt_tokens: int,
    output_tokens: int,
    batch: int = 1,
    n_gpus: int = 1,
) -> tuple[Efficiency, CalibratedPrediction | None]:
    """The calculator's Efficiency whose TTFT and TPOT at this shape equal the calibrated fit's points
    (`predict_interval`), and that prediction. The fit has terms the calculator's Efficiency has no place
    for (each extra sequence's cost, the matmul rate at this many rows, a fixed prefill cost); scaling the
    bandwidth and FLOP/s fractions until the two agree keeps one answer on the page: the headline figures,
    cost and the interval beside them come from the same fit. Other shapes (a batch sweep) reuse the scales,
    an approximation the page labels. The fit describes one device: with `n_gpus` > 1 it is applied as
    fractions of the roofs (`cal.efficiency`) and there is no prediction."""
    from engine.calc.timing import estimate_timing

    if n_gpus != 1:
        return cal.efficiency(dtype, spec), None
    pi = predict_interval(
        cal, spec, dtype=dtype, prompt_tokens=prompt_tokens, output_tokens=output_tokens, batch=batch
    )
    eff = cal.efficiency(dtype, spec)

    def timing(e: Efficiency):
        return estimate_timing(
            spec,
            gpu,
            dtype=dtype,
            batch=batch,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            eff=e,
        )

    def solve(field: str, target: float, measure) -> Efficiency:
        lo, hi = 1e-4, 1e4  # scale on the fraction; time falls as the scale grows
        base = getattr(eff, field)
        for _ in range(60):
            mid = math.sqrt(lo * hi)
            if measure(timing(replace(eff, **{field: base * mid}))) > target:
                lo = mid
            else:
                hi = mid
        return replace(eff, **{field: base * math.sqrt(lo * hi)})

    for _ in range(3):  # prefill is mostly FLOPs and decode mostly bytes; a few alternations settle both
        eff = solve("flops", pi.ttft.central, lambda t: t.ttft_s)
        eff = solve("bandwidth", pi.tpot.central, lambda t: t.decode_s_per_token)
    return replace(eff, label="calibrated"), pi


def _decode_ops(spec: ModelSpec, s: RunSample):
    # TPOT averages steps 2..O, which see P+1 .. P+O-1 tokens: the mean context is P + O/2
    ctx = max(1, round(s.prompt_tokens + s.output_tokens / 2 - 1))
    return operators(spec, phase="decode", seq_len=ctx, batch=s.batch_size, dtype=s.dtype)


def _prefill_ops(spec: ModelSpec, s: RunSample):
    return operators(spec, phase="prefill", seq_len=s.prompt_tokens, batch=s.batch_size, dtype=s.dtype)


def predict(
    spec: ModelSpec, sample: RunSample, machine: GPUSpec, eff: Efficiency = DATASHEET
) -> tuple[float, float]:
    """(TTFT, TPOT) of the calculator's operator model (engine.calc.timing.phase_time) for the shape of a run,
    on `machine` with `eff` (datasheet by default)."""
    roof = Roof(machine.flops_for(sample.dtype), machine.bandwidth_bytes_per_s)
    ttft = phase_time(_prefill_ops(spec, sample), roof, spec.n_layer, eff).seconds
    tpot = phase_time(_decode_ops(spec, sample), roof, spec.n_layer, eff).seconds
    return ttft, tpot


@dataclass(frozen=True)
class Calibrated:
    """A calibration as `engine.calc.report.estimate` asks it (the `Calibrated` protocol): the calculator stays
    pure, this adapter does the calibrated arithmetic."""

    cal: Calibration

    def speed_at(self, setup: Setup) -> CalibratedSpeed:
        eff, pi = efficiency_at(
            self.cal,
            setup.spec,
            setup.gpu,
            dtype=setup.dtype,
            prompt_tokens=setup.prompt_tokens,
            output_tokens=setup.output_tokens,
            batch=setup.batch,
            n_gpus=setup.n_gpus,
        )
        basis = f"{self.cal.model}, {self.cal.created_at}"
        if pi is None:
            return CalibratedSpeed(
                eff,
                None,
                None,
                basis,
                ("the calibration describes one device: applied as fractions of the roofs",),
            )
        return CalibratedSpeed(eff, pi.ttft, pi.tpot, basis, pi.notes)
