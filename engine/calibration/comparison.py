"""Estimate against measurement for one run: the datasheet and calibrated predictions beside what was measured.

The shape-level summary over recent runs is engine.calibration.check; the one rule that decides whether an
estimate and a measurement may be compared at all is `beside` in engine.calibration.beside.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from engine.arch.resolve import spec_for_run_model
from engine.calc.specs import GPUSpec, ModelSpec
from engine.calibration.fit import RunSample
from engine.calibration.prediction import predict, predict_interval
from engine.calibration.runs import TimedRun
from engine.calibration.store import Calibration
from engine.core.interval import Interval


def _over(predicted: float | None, measured: float) -> float | None:
    """predicted / measured, None where there is no prediction."""
    return None if predicted is None else predicted / measured


@dataclass(frozen=True)
class Comparison:
    """Predicted versus measured for one run: ratio = predicted / measured (1.0 is perfect)."""

    model: str
    dtype: str
    batch_size: int
    prompt_tokens: int
    output_tokens: int
    started_at: str
    measured_ttft_s: float
    measured_tpot_s: float
    datasheet_ttft_s: float
    datasheet_tpot_s: float
    calibrated_ttft_s: float | None
    calibrated_tpot_s: float | None
    calibrated_ttft_interval: Interval | None = None
    calibrated_tpot_interval: Interval | None = None

    def ratio(self, predicted_by: str, metric: str) -> float | None:
        """predicted / measured for `metric` ("ttft" or "tpot") as `predicted_by` ("datasheet" or
        "calibrated") predicts it; None where there is no calibrated prediction."""
        return _over(getattr(self, f"{predicted_by}_{metric}_s"), getattr(self, f"measured_{metric}_s"))


def sample_of(m: Any) -> RunSample:
    """A Measurement (batch totals) or a TimedRun (per sequence) as a RunSample (per-sequence token counts)."""
    if isinstance(m, TimedRun):
        return RunSample(
            m.dtype,
            m.batch_size,
            m.prompt_tokens,
            m.output_tokens,
            m.ttft_s,
            m.step_s_median,
            loadavg_1m=m.loadavg_1m,
            cpu_share=m.cpu_share,
        )
    b = max(1, int(m.batch_size))
    return RunSample(
        dtype=m.dtype,
        batch_size=b,
        prompt_tokens=max(1, round(m.prompt_tokens / b)),
        output_tokens=max(1, round(m.output_tokens / b)),
        ttft_s=float(m.ttft_s),
        step_s=float(m.tpot_s),
    )


def compare_run(
    m: Any, machine: GPUSpec, cal: Calibration | None, spec: ModelSpec | None = None
) -> Comparison | None:
    """Predicted (datasheet, and calibrated with its interval) versus measured TTFT and TPOT for one run
    (an engine Measurement or a calibration TimedRun)."""
    spec = spec or spec_for_run_model(m.model)
    if spec is None or not math.isfinite(m.tpot_s) or m.tpot_s <= 0 or not getattr(m, "use_cache", True):
        return None
    if m.dtype not in ("fp32", "fp16", "bf16"):
        return None
    s = sample_of(m)
    d_ttft, d_tpot = predict(spec, s, machine)
    c_ttft = c_tpot = None
    if cal is not None:
        p = predict_interval(
            cal,
            spec,
            dtype=s.dtype,
            prompt_tokens=s.prompt_tokens,
            output_tokens=s.output_tokens,
            batch=s.batch_size,
        )
        c_ttft, c_tpot = p.ttft, p.tpot
    return Comparison(
        m.model,
        m.dtype,
        s.batch_size,
        s.prompt_tokens,
        s.output_tokens,
        getattr(m, "started_at", ""),
        m.ttft_s,
        m.tpot_s,
        d_ttft,
        d_tpot,
        None if c_ttft is None else c_ttft.central,
        None if c_tpot is None else c_tpot.central,
        c_ttft,
        c_tpot,
    )
