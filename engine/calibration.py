"""Calibrated estimates: what fraction of the roofs a real run reaches on this machine.

A calculator that assumes peak bandwidth is optimistic (a public one predicts ~5 ms/token for GPT-Neo
125M on this CPU where the engine measures ~14 ms). This module runs one model with the engine (TTFT and
TPOT of `engine.generation.generate`), and fits three numbers to the calculator's own operator model
(engine.calc.timing.phase_time):

    TPOT_dtype = L x o + decode bytes_dtype / (e_bw x BW)          (one equation per precision)
    TTFT_dtype = L x o + sum_ops max(FLOPs / (e_flops,dtype x F_dtype), bytes / (e_bw x BW))

BW is this machine's measured read bandwidth, F its measured matmul FLOP/s per precision, o a fixed cost
per layer per forward step (dispatch, small kernels; it dominates small models on a CPU). Two precisions
give two decode equations, so e_bw and o are both determined; each precision's prefill then gives its
e_flops. The calibration is stored per machine with its date under paths.home()/calibration/.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine import paths
from engine.calc.roofline import Roof, operators
from engine.calc.specs import THIS_MACHINE, GPUSpec, ModelSpec, model_preset, spec_from_hf_config
from engine.calc.timing import DATASHEET, Efficiency, phase_time
from engine.errors import InvalidParameterError, UnknownModelError

DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_DTYPES = ("fp32", "bf16")
CALIBRATION_PROMPT = (
    "Write a long, detailed story about a lighthouse keeper who finds a message in a bottle. "
    "Describe the sea, the weather, the lighthouse and every step of the keeper's day."
)
# Names the engine's runs carry -> the calculator's preset of the same shape.
RUN_MODEL_TO_PRESET = {
    "smollm2-135m-instruct": "smollm2-135m",
    "gpt-neo-125m": "gpt-neo-125m",
    "gpt-neo-1.3b": "gpt-neo-1.3b",
    "gpt-neo-2.7b": "gpt-neo-2.7b",
}


@dataclass(frozen=True)
class RunSample:
    """One measured run, reduced to what the fit needs (a Measurement has all of these)."""

    dtype: str
    batch_size: int
    prompt_tokens: int  # per sequence
    output_tokens: int  # per sequence
    ttft_s: float
    tpot_s: float


@dataclass(frozen=True)
class Calibration:
    machine_id: str
    created_at: str  # ISO 8601 UTC
    model: str
    peak_bandwidth_bytes_per_s: float  # measured read bandwidth (the roof)
    peak_flops: dict[str, float]  # measured matmul FLOP/s per precision (the roof)
    bandwidth_efficiency: float
    flops_efficiency: dict[str, float]
    step_overhead_s_per_layer: float
    samples: list[RunSample] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def efficiency(self, dtype: str) -> Efficiency:
        """The calibrated Efficiency for math in `dtype`. fp16/int8/int4 borrow bf16's (same 2-byte
        kernels on this machine or dequantized to them); a missing precision borrows the other one."""
        key = "bf16" if dtype in ("fp16", "int8", "int4") else dtype
        fe = self.flops_efficiency.get(key) or next(iter(self.flops_efficiency.values()), 1.0)
        return Efficiency(self.bandwidth_efficiency, fe, self.step_overhead_s_per_layer, label="calibrated")

    def machine_gpu(self) -> GPUSpec:
        return machine_spec(
            self.peak_bandwidth_bytes_per_s, self.peak_flops, source=f"measured {self.created_at}"
        )


def machine_spec(
    bandwidth: float, flops: dict[str, float], *, memory_bytes: float | None = None, source: str = "measured"
) -> GPUSpec:
    """This machine as a GPUSpec: measured read bandwidth and matmul FLOP/s; memory = installed RAM."""
    if memory_bytes is None:
        import psutil

        memory_bytes = float(psutil.virtual_memory().total)
    peaks = dict(flops)
    peaks.setdefault("fp16", peaks.get("bf16", peaks.get("fp32", 0.0)))
    return GPUSpec(
        key=THIS_MACHINE,
        name="this machine (measured)",
        memory_bytes=memory_bytes,
        bandwidth_bytes_per_s=bandwidth,
        peak_flops=peaks,
        sources={
            "memory": "installed RAM (psutil)",
            "bandwidth": f"{source}: torch reduction over 256 MiB",
            **{f"{k}_tflops": f"{source}: 1024^3 matmul" for k in peaks},
        },
        notes="fp16 on this CPU runs through slow reference kernels; its figure is bf16's",
    )


def measure_machine(dtypes: Sequence[str] = DEFAULT_DTYPES) -> GPUSpec:
    """Measure this machine's roofs now (a few seconds): the GPU when torch sees one, else the CPU."""
    import torch

    from engine.hardware import measure_matmul_flops, measure_memory_bandwidth

    device = "cuda" if torch.cuda.is_available() else "cpu"
    bw = measure_memory_bandwidth(device).read_bytes_per_s
    wanted = [*dtypes, "fp16"] if device == "cuda" and "fp16" not in dtypes else list(dtypes)
    flops = {
        dt: measure_matmul_flops(device, dt, n=4096 if device == "cuda" else 1024).flops_per_s
        for dt in wanted
    }
    memory = float(torch.cuda.get_device_properties(0).total_memory) if device == "cuda" else None
    spec = machine_spec(bw, flops, memory_bytes=memory)
    return (
        spec
        if device == "cpu"
        else replace(spec, name=f"this machine ({torch.cuda.get_device_name(0)}, measured)")
    )


def this_machine_gpu(*, measure_if_missing: bool = True) -> GPUSpec:
    """The stored calibration's roofs when there is one, else a fresh measurement."""
    cal = load_calibration()
    if cal is not None:
        return cal.machine_gpu()
    if not measure_if_missing:
        raise InvalidParameterError("this machine has no calibration yet; run `python -m engine calibrate`")
    return measure_machine()


def _decode_ops(spec: ModelSpec, s: RunSample):
    # TPOT averages steps 2..O, which see P+1 .. P+O-1 tokens: the mean context is P + O/2
    ctx = max(1, round(s.prompt_tokens + s.output_tokens / 2 - 1))
    return operators(spec, phase="decode", seq_len=ctx, batch=s.batch_size, dtype=s.dtype)


def _prefill_ops(spec: ModelSpec, s: RunSample):
    return operators(spec, phase="prefill", seq_len=s.prompt_tokens, batch=s.batch_size, dtype=s.dtype)


def fit(
    spec: ModelSpec, samples: Sequence[RunSample], machine: GPUSpec
) -> tuple[float, dict[str, float], float, list[str]]:
    """(e_bw, {dtype: e_flops}, overhead s/layer, notes) from measured runs; see the module docstring."""
    usable = [s for s in samples if math.isfinite(s.tpot_s) and s.tpot_s > 0 and s.ttft_s > 0]
    if not usable:
        raise InvalidParameterError("no usable run (each needs TTFT and a TPOT, so at least 2 output tokens)")
    notes: list[str] = []
    bw = machine.bandwidth_bytes_per_s
    L = spec.n_layer
    by_dtype: dict[str, list[RunSample]] = {}
    for s in usable:
        by_dtype.setdefault(s.dtype, []).append(s)
    # decode: bytes per step and TPOT per precision (median over runs)
    points = []
    for dt, runs in by_dtype.items():
        tpot = sorted(r.tpot_s for r in runs)[len(runs) // 2]
        nbytes = sum(op.total_bytes for op in _decode_ops(spec, runs[0]))
        points.append((nbytes, tpot, dt))
    overhead = 0.0
    e_bw = float("nan")
    if len(points) >= 2:
        points.sort()
        (b_lo, t_lo, _), (b_hi, t_hi, _) = points[0], points[-1]
        if b_hi > b_lo and t_hi > t_lo:
            achieved = (b_hi - b_lo) / (t_hi - t_lo)  # bytes/s of the part that scales with bytes
            overhead = (t_lo - b_lo / achieved) / L
            e_bw = achieved / bw
        if not (math.isfinite(e_bw) and e_bw > 0 and overhead >= 0):
            notes.append(
                "the two precisions did not separate bandwidth from fixed cost; fitted bandwidth only"
            )
            e_bw, overhead = float("nan"), 0.0
    if not math.isfinite(e_bw):
        e_bw = sum(b / t for b, t, _ in points) / len(points) / bw
        if len(points) < 2:
            notes.append("one precision only: fixed per-step cost folded into the bandwidth efficiency")
    if e_bw > 1:
        notes.append(
            f"the run moved bytes {e_bw:.2f}x faster than the measured bandwidth roof: the roof was probably measured "
            "while other work loaded the machine; re-run `python -m engine calibrate` on a quiet machine"
        )
    # prefill: solve e_flops per precision by bisection (time falls as e_flops rises)
    flops_eff: dict[str, float] = {}
    for dt, runs in by_dtype.items():
        ttft = sorted(r.ttft_s for r in runs)[len(runs) // 2]
        ops = _prefill_ops(spec, runs[0])
        roof = Roof(machine.flops_for(dt), bw)

        def t_of(ef: float, ops=ops, roof=roof) -> float:
            return phase_time(ops, roof, L, Efficiency(e_bw, ef, overhead)).seconds

        lo, hi = 1e-4, 50.0
        if t_of(hi) > ttft:
            notes.append(
                f"{dt}: prefill ran faster than the fitted memory terms allow; e_flops capped at {hi}"
            )
            flops_eff[dt] = hi
            continue
        if t_of(lo) < ttft:
            flops_eff[dt] = lo
            continue
        for _ in range(60):
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if t_of(mid) > ttft else (lo, mid)
        flops_eff[dt] = math.sqrt(lo * hi)
    return e_bw, flops_eff, overhead, notes


def build_calibration(
    spec: ModelSpec,
    samples: Sequence[RunSample],
    machine: GPUSpec,
    *,
    model: str,
    created_at: str | None = None,
) -> Calibration:
    e_bw, e_f, overhead, notes = fit(spec, samples, machine)
    return Calibration(
        machine_id=paths.machine_id(),
        created_at=created_at or datetime.now(UTC).isoformat(timespec="seconds"),
        model=model,
        peak_bandwidth_bytes_per_s=machine.bandwidth_bytes_per_s,
        peak_flops={k: v for k, v in machine.peak_flops.items()},
        bandwidth_efficiency=e_bw,
        flops_efficiency=e_f,
        step_overhead_s_per_layer=overhead,
        samples=list(samples),
        notes=notes,
    )


# ---------------------------------------------------------------- storage


def calibration_path(machine_id: str | None = None) -> Path:
    return paths.home() / "calibration" / f"{machine_id or paths.machine_id()}.json"


def save_calibration(cal: Calibration) -> Path:
    path = calibration_path(cal.machine_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(cal), indent=2), encoding="utf-8")
    return path


def load_calibration(machine_id: str | None = None) -> Calibration | None:
    """This machine's stored calibration, or None (missing or unreadable: the calculator stays in datasheet mode)."""
    try:
        raw: dict[str, Any] = json.loads(calibration_path(machine_id).read_text(encoding="utf-8"))
        raw["samples"] = [RunSample(**s) for s in raw.get("samples", [])]
        return Calibration(**raw)
    except (OSError, ValueError, TypeError):
        return None


def efficiency_for(dtype: str, calibrated: bool) -> Efficiency:
    """Efficiency to apply: the stored calibration's in calibrated mode, the datasheet's otherwise."""
    if not calibrated:
        return DATASHEET
    cal = load_calibration()
    if cal is None:
        raise InvalidParameterError(
            "no calibration for this machine yet: run `python -m engine calibrate` (about a minute), "
            "or use datasheet mode"
        )
    return cal.efficiency(dtype)


# ---------------------------------------------------------------- runs of the engine


def spec_for_run_model(name: str) -> ModelSpec | None:
    """The calculator's ModelSpec for a model the engine ran (a preset name or a random-weights preset)."""
    if name in RUN_MODEL_TO_PRESET:
        return model_preset(RUN_MODEL_TO_PRESET[name])
    try:
        from engine.models import PRESETS
    except ImportError:
        return None
    preset = PRESETS.get(name)
    if preset is None:
        return None
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


def sample_of(m: Any) -> RunSample:
    """A Measurement (batch totals) as a RunSample (per-sequence token counts)."""
    b = max(1, int(m.batch_size))
    return RunSample(
        dtype=m.dtype,
        batch_size=b,
        prompt_tokens=max(1, round(m.prompt_tokens / b)),
        output_tokens=max(1, round(m.output_tokens / b)),
        ttft_s=float(m.ttft_s),
        tpot_s=float(m.tpot_s),
    )


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

    @property
    def datasheet_tpot_ratio(self) -> float:
        return self.datasheet_tpot_s / self.measured_tpot_s

    @property
    def calibrated_tpot_ratio(self) -> float | None:
        return None if self.calibrated_tpot_s is None else self.calibrated_tpot_s / self.measured_tpot_s

    @property
    def datasheet_ttft_ratio(self) -> float:
        return self.datasheet_ttft_s / self.measured_ttft_s

    @property
    def calibrated_ttft_ratio(self) -> float | None:
        return None if self.calibrated_ttft_s is None else self.calibrated_ttft_s / self.measured_ttft_s


def predict(
    spec: ModelSpec, sample: RunSample, machine: GPUSpec, eff: Efficiency = DATASHEET
) -> tuple[float, float]:
    """(predicted TTFT, predicted TPOT) for the shape of a measured run, on `machine` with `eff`."""
    roof = Roof(machine.flops_for(sample.dtype), machine.bandwidth_bytes_per_s)
    ttft = phase_time(_prefill_ops(spec, sample), roof, spec.n_layer, eff).seconds
    tpot = phase_time(_decode_ops(spec, sample), roof, spec.n_layer, eff).seconds
    return ttft, tpot


def compare_run(
    m: Any, machine: GPUSpec, cal: Calibration | None, spec: ModelSpec | None = None
) -> Comparison | None:
    """Predicted (datasheet and calibrated) versus measured TTFT and TPOT for one Measurement."""
    spec = spec or spec_for_run_model(m.model)
    if spec is None or not math.isfinite(m.tpot_s) or m.tpot_s <= 0 or not m.use_cache:
        return None
    if m.dtype not in ("fp32", "fp16", "bf16"):
        return None
    s = sample_of(m)
    d_ttft, d_tpot = predict(spec, s, machine)
    c_ttft = c_tpot = None
    if cal is not None:
        c_ttft, c_tpot = predict(spec, s, machine, cal.efficiency(s.dtype))
    return Comparison(
        m.model,
        m.dtype,
        s.batch_size,
        s.prompt_tokens,
        s.output_tokens,
        m.started_at,
        m.ttft_s,
        m.tpot_s,
        d_ttft,
        d_tpot,
        c_ttft,
        c_tpot,
    )


def measure_runs(
    model: str, dtypes: Sequence[str], *, max_new_tokens: int = 32, repeats: int = 3, record: bool = True
):
    """Run `model` with the engine in each precision; returns the Measurements (warm-up runs dropped).
    The precisions take turns, so a load that comes and goes on the machine touches each of them alike."""
    from engine.generation import GenerationConfig, generate
    from engine.models import load_model

    cfg = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False)
    models = {dt: load_model(model, dtype=dt, device="cpu") for dt in dtypes}
    for lm in models.values():
        generate(lm, CALIBRATION_PROMPT, cfg, record=False)  # warm-up: allocator, thread pool, caches
    runs = []
    for _ in range(repeats):
        for lm in models.values():
            c = generate(lm, CALIBRATION_PROMPT, cfg, record=False)
            if record:  # logged with its source, so a comparison can say where each run came from
                from engine import runlog

                runlog.record(c.measurement, source="calibration", stop_reason=c.stop_reason)
            runs.append(c.measurement)
    return runs


def calibrate(
    model: str = DEFAULT_MODEL, dtypes: Sequence[str] = DEFAULT_DTYPES, *, repeats: int = 3
) -> Calibration:
    """Measure this machine's roofs, run `model` in each precision, fit, store; returns the calibration."""
    spec = spec_for_run_model(model)
    if spec is None:
        raise InvalidParameterError(
            f"the calculator has no shape for {model!r}; calibrate with {DEFAULT_MODEL} or a GPT-Neo preset"
        )
    before = measure_machine(dtypes)
    runs = measure_runs(model, dtypes, repeats=repeats)
    after = measure_machine(dtypes)
    # best of two measurements: the roofs are what the machine can do, not what it did while busy
    machine = machine_spec(
        max(before.bandwidth_bytes_per_s, after.bandwidth_bytes_per_s),
        {dt: max(before.flops_for(dt), after.flops_for(dt)) for dt in dtypes},
        memory_bytes=before.memory_bytes,
    )
    short = [m for m in runs if m.output_tokens < 8]
    if len(short) == len(runs):
        raise InvalidParameterError(
            f"{model} stopped after fewer than 8 tokens in every run; TPOT is not measurable"
        )
    samples = [sample_of(m) for m in runs if m.output_tokens >= 8]
    cal = build_calibration(spec, samples, machine, model=model)
    save_calibration(cal)
    return cal


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
            from engine.calc_check import spec_from_hub

            return spec_from_hub(name)
        raise


def resolve_gpu(key: str, *, measure_if_missing: bool = True) -> GPUSpec:
    """A catalog GPU by key, or `this-machine` (stored calibration's roofs, else measured now)."""
    from engine.calc.specs import gpu_spec

    if key == THIS_MACHINE:
        return this_machine_gpu(measure_if_missing=measure_if_missing)
    return gpu_spec(key)
