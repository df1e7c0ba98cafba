"""Running a calibration end to end: measure the machine's roofs, time the calibration model's shapes at two
depths per precision, fit (engine.calibration.fit) and store (engine.calibration.store)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from engine.arch.resolve import spec_for_run_model
from engine.calc.specs import GPUSpec, ModelSpec
from engine.calibration.comparison import sample_of
from engine.calibration.fit import RunSample, fit_precisions
from engine.calibration.runs import Shape, TimedRun
from engine.calibration.store import Calibration, LoadSummary, load_calibration, save_calibration
from engine.core import paths
from engine.core.errors import InvalidParameterError
from engine.core.load import cores, is_busy
from engine.core.spec import Spec, option
from engine.core.stats import median

DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_DTYPES = ("fp32", "bf16")


@dataclass(frozen=True)
class CalibrateSpec(Spec):
    """`python -m engine calibrate` and bench/calibration.py: which model and precisions to run, how often."""

    model: str = option(DEFAULT_MODEL, "an engine preset to run")
    dtypes: tuple[str, ...] = option(
        DEFAULT_DTYPES, "precisions to run", choices=("fp32", "bf16", "fp16"), label="precision"
    )
    repeats: int = option(3, "repeats of each shape after one warm-up (the fastest is kept)", lo=1, hi=20)


# The calibration's shapes: prompt lengths 32 and 128, outputs 8 and 6, batch 1 and 4, at the full depth and
# cut to SHORT_DEPTH layers (two depths separate bytes from per-layer cost; see engine.calibration.fit).
CALIBRATION_SHAPES = (Shape(32, 8, 1), Shape(128, 6, 1), Shape(32, 6, 4))
SHORT_DEPTH = 8


def measure_machine(dtypes: Sequence[str] = DEFAULT_DTYPES) -> GPUSpec:
    """This machine's roofs as a GPUSpec, measured now (engine.calibration.machine.measure, which also stores them)."""
    from engine.calibration import machine

    return machine.measure(dtypes).gpu_spec()


def this_machine_gpu(*, measure_if_missing: bool = True) -> GPUSpec:
    """The stored calibration's roofs when there is one (its fit is relative to them), else the stored
    measurement of the machine, else a fresh one."""
    from engine.calibration import machine

    cal = load_calibration()
    if cal is not None:
        return cal.machine_gpu()
    stored = machine.latest()
    if stored is not None:
        return stored.gpu_spec()
    if not measure_if_missing:
        raise InvalidParameterError("this machine has no calibration yet; run `python -m engine calibrate`")
    return measure_machine()


def load_summary(samples: Sequence[RunSample]) -> LoadSummary:
    loads = [s.loadavg_1m for s in samples]
    shares = [s.cpu_share for s in samples]
    n_cores = cores()
    busy = sum(1 for s in samples if is_busy(s.loadavg_1m, n_cores, s.cpu_share))
    finite = [v for v in loads if math.isfinite(v)]
    return LoadSummary(
        len(samples), median(loads), max(finite) if finite else math.nan, median(shares), busy, n_cores
    )


def build_calibration(
    spec: ModelSpec,
    samples: Sequence[RunSample],
    machine: GPUSpec,
    *,
    model: str,
    created_at: str | None = None,
    gemv: dict[str, list[list[float]]] | None = None,
    gemm: dict[str, list[list[float]]] | None = None,
) -> Calibration:
    """Fit `samples` of `spec` (engine.calibration.fit) against `machine`'s roofs; notes say what was assumed.
    `gemv`, `gemm`: the machine's matrix-vector and matrix-matrix curves per precision
    (engine.calibration.runs.gemv_curve, gemm_curve)."""
    fits, notes = fit_precisions(spec, samples, gemv=gemv, gemm=gemm)
    load = load_summary(samples)
    if load.busy_runs:
        notes.append(
            f"{load.describe()}. The fit keeps each shape's fastest repeat, so it describes the machine at its "
            "least loaded moments; re-run `python -m engine calibrate` on a quiet machine for a tighter fit"
        )
    return Calibration(
        machine_id=paths.machine_id(),
        created_at=created_at or datetime.now(UTC).isoformat(timespec="seconds"),
        model=model,
        peak_bandwidth_bytes_per_s=machine.bandwidth_bytes_per_s,
        peak_flops=dict(machine.peak_flops),
        fits=fits,
        samples=list(samples),
        notes=notes,
        load=load,
    )


# ---------------------------------------------------------------- running it


def load_models(model: str, dtypes: Sequence[str], *, short_depth: int | None = SHORT_DEPTH) -> list:
    """The calibration model in each precision, and the same cut to `short_depth` layers."""
    from engine.calibration.runs import load_cut
    from engine.runtime.models import load_model

    lms = [load_model(model, dtype=dt, device="cpu") for dt in dtypes]
    if short_depth:
        lms += [load_cut(model, dt, short_depth) for dt in dtypes]
    return lms


def run_samples(runs: Sequence[TimedRun], full_depth: int) -> list[RunSample]:
    """TimedRuns as RunSamples; a cut model's runs carry their depth."""
    out = []
    for r in runs:
        s = sample_of(r)
        depth = getattr(r, "n_layer", None)
        out.append(replace(s, n_layer=depth if depth and depth != full_depth else None))
    return out


def calibrate(
    model: str = DEFAULT_MODEL,
    dtypes: Sequence[str] = DEFAULT_DTYPES,
    *,
    repeats: int = 3,
    shapes: Sequence[Shape] = CALIBRATION_SHAPES,
    short_depth: int | None = SHORT_DEPTH,
) -> Calibration:
    """Measure this machine's roofs, run `model` per precision over `shapes` at two depths, fit, store."""
    from engine.calibration import machine
    from engine.calibration.runs import measure

    spec = spec_for_run_model(model)
    if spec is None:
        raise InvalidParameterError(
            f"the calculator has no shape for {model!r}; calibrate with {DEFAULT_MODEL} or a GPT-Neo preset"
        )
    from engine.calibration.runs import gemm_curve, gemv_curve

    before = machine.measure(dtypes, store=False)
    curve, rows_curve = gemv_curve(dtypes), gemm_curve(dtypes)
    lms = load_models(model, dtypes, short_depth=short_depth)
    runs = measure(lms, shapes, repeats=repeats)
    roofs = machine.best_of(before, machine.measure(dtypes, store=False))
    machine.save(roofs)
    cal = build_calibration(
        spec, run_samples(runs, spec.n_layer), roofs.gpu_spec(), model=model, gemv=curve, gemm=rows_curve
    )
    save_calibration(cal)
    return cal
