"""Calibrated estimates for this machine: its public face.

A calculator that assumes peak bandwidth is optimistic (a public one predicts ~5 ms/token for GPT-Neo
125M on this CPU where the engine measures ~14 ms). Calibration runs the bundled SmolLM2 on this machine at
several prompt lengths, output lengths, batch sizes 1 and 4 and two depths, per precision, and fits the
physically grounded model of engine.calibration.fit (decode = bytes / achieved bandwidth + per-layer cost x
layers + each extra sequence's FLOPs; prefill = FLOPs / achieved FLOP/s + the same memory and layer terms +
a fixed cost), with its uncertainty, so that it predicts shapes it never saw with an interval.

The concerns live in their own modules:
- engine.calibration.machine: measure the machine (the roofs), one stored measurement per machine;
- engine.calibration.runs: run measurements (timed, repeated, with the machine's load);
- engine.calibration.fit: the model, the robust fit, bootstrap intervals;
- engine.calibration.store: the stored calibration;
- engine.calibration.build: running it end to end (`calibrate`) and building a Calibration from samples;
- engine.calibration.prediction: `predict_interval`, `efficiency_at`, the `Calibrated` adapter the estimate takes;
- engine.calibration.comparison: one run predicted beside its measurement (`compare_run`);
- engine.calibration.beside: the one rule for setting an estimate beside a measurement (interval, load);
- engine.calibration.check: the same over recent runs of a shape, and the run forecast.
Name resolution (a model name or a GPU key to a shape) lives in engine.arch.resolve.
"""

from __future__ import annotations

from engine.arch.resolve import resolve_model_spec, spec_for_run_model
from engine.calibration.build import (
    CALIBRATION_SHAPES,
    DEFAULT_DTYPES,
    DEFAULT_MODEL,
    SHORT_DEPTH,
    CalibrateSpec,
    build_calibration,
    calibrate,
    load_models,
    load_summary,
    measure_machine,
    run_samples,
    this_machine_gpu,
)
from engine.calibration.comparison import Comparison, compare_run, sample_of
from engine.calibration.fit import PrecisionFit, RunSample
from engine.calibration.machine import machine_spec
from engine.calibration.prediction import (
    Calibrated,
    CalibratedPrediction,
    efficiency_at,
    predict,
    predict_interval,
    require_calibration,
)
from engine.calibration.store import (
    Calibration,
    LoadSummary,
    calibration_path,
    load_calibration,
    save_calibration,
)
from engine.core.interval import Interval

__all__ = [
    "CALIBRATION_SHAPES",
    "DEFAULT_DTYPES",
    "DEFAULT_MODEL",
    "SHORT_DEPTH",
    "CalibrateSpec",
    "Calibrated",
    "CalibratedPrediction",
    "Calibration",
    "Comparison",
    "Interval",
    "LoadSummary",
    "PrecisionFit",
    "RunSample",
    "build_calibration",
    "calibrate",
    "calibration_path",
    "compare_run",
    "efficiency_at",
    "load_calibration",
    "load_models",
    "load_summary",
    "machine_spec",
    "measure_machine",
    "predict",
    "predict_interval",
    "require_calibration",
    "resolve_model_spec",
    "run_samples",
    "sample_of",
    "save_calibration",
    "spec_for_run_model",
    "this_machine_gpu",
]
