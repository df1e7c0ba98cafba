"""Calibrated estimates: the public face of calibration, and the one place that runs it end to end.

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
- here: compare predictions with measured runs, `predict_interval` for pages and the CLI, `calibrate`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from engine.calc.hf_config import spec_from_hf_config
from engine.calc.roofline import Roof, operators
from engine.calc.specs import THIS_MACHINE, GPUSpec, ModelSpec, model_preset
from engine.calc.timing import DATASHEET, Efficiency, phase_time
from engine.calibration.fit import PrecisionFit, RunSample, fit_precisions
from engine.calibration.fit import predict as fit_predict
from engine.calibration.machine import machine_spec
from engine.calibration.runs import Shape, TimedRun
from engine.calibration.store import (
    Calibration,
    LoadSummary,
    calibration_path,
    load_calibration,
    save_calibration,
)
from engine.core import paths
from engine.core.errors import InvalidParameterError, UnknownModelError
from engine.core.interval import Interval
from engine.core.load import cores, is_busy
from engine.core.spec import Spec, option
from engine.core.stats import median

__all__ = [
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
    "load_calibration",
    "machine_spec",
    "measure_machine",
    "predict",
    "predict_interval",
    "save_calibration",
]

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


def require_calibration() -> Calibration:
    """This machine's stored calibration, or a clear error saying how to make one."""
    cal = load_calibration()
    if cal is None:
        raise InvalidParameterError(
            "no calibration for this machine yet: run `python -m engine calibrate` (a few minutes), "
            "or use datasheet mode"
        )
    return cal


def _over(predicted: float | None, measured: float) -> float | None:
    """predicted / measured, None where there is no prediction."""
    return None if predicted is None else predicted / measured


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


# ---------------------------------------------------------------- predictions


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


def spec_for_run_model(name: str) -> ModelSpec | None:
    """The calculator's ModelSpec for a model the engine ran: its preset's `calculator` shape (the one table,
    engine/data/presets.toml), else one built from a random preset's config, else the hub repo's name."""
    try:
        from engine.runtime.models import PRESETS
    except ImportError:
        return None
    preset = PRESETS.get(name)
    if preset is None:
        return None
    if preset.calculator:
        return model_preset(preset.calculator)
    if preset.config:
        model_type = {
            "GPTNeoForCausalLM": "gpt_neo",
            "LlamaForCausalLM": "llama",
            "GPT2LMHeadModel": "gpt2",
        }.get(preset.architecture)
        if model_type:
            return spec_from_hf_config({"model_type": model_type, **preset.config}, name=name)
    if preset.repo_id:
        key = preset.repo_id.split("/")[-1].lower()
        try:
            return model_preset(key)
        except UnknownModelError:
            return None
    return None


def resolve_model_spec(name: str) -> ModelSpec:
    """A calculator preset (gpt-neo-2.7b, llama-2-7b...), a model the engine loads (smollm2-135m-instruct,
    gpt-neo-125m-random...) or a hub id (owner/name: its config.json only)."""
    try:
        return model_preset(name)
    except UnknownModelError:
        spec = spec_for_run_model(name)
        if spec is not None:
            return spec
        if "/" in name:  # a hub id: config.json only, from the hub or the local cache
            from engine.arch.hub import spec_from_hub

            return spec_from_hub(name)
        raise


def resolve_gpu(key: str, *, measure_if_missing: bool = True) -> GPUSpec:
    """A catalog GPU by key, or `this-machine` (stored calibration's roofs, else measured now)."""
    from engine.calc.specs import gpu_spec

    if key == THIS_MACHINE:
        return this_machine_gpu(measure_if_missing=measure_if_missing)
    return gpu_spec(key)
