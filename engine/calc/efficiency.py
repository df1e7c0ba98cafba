"""Engine efficiency fitted on published measurements: what fraction of a GPU's roofs each class of engine
reaches, so a GPU time is an estimate a team can budget on, not a datasheet bound.

The model is the roofline's (engine.calc.timing): a decode step or a prefill costs, per operator, the slower of
FLOPs / (peak x e_f) and bytes / (bandwidth x e_bw), plus a fixed cost per layer per forward (kernel launches,
Python, the scheduler: `o`), plus two tensor-parallel all-reduces per layer that each pay a fixed latency
(nccl-tests' time at its smallest messages, per interconnect, times a class factor k) and move their bytes at
the link's bandwidth; a layer-split engine (llama.cpp, ExLlamaV2, accelerate) runs its GPUs as pipeline stages
instead, one after another for a sequence, paying a hand-over per boundary (`h`). A request's first token adds a
fixed cost per request (`c`: tokenize, schedule, the first step's launch, detokenize, HTTP), and a prefill of T
tokens reaches e_f x T / (T + T_half) of the compute roof (short prompts' matrix products leave the GPU part idle:
LMDeploy's A100 runs take 22 ms for 128 tokens and 139 ms for 2048), T_half fitted per class where its first-token
rows span a 4x range of lengths, else borrowed. MBU (model
bandwidth utilisation, as Databricks and NVIDIA define it) is e_bw; MFU is e_f.

Per engine class the parameters are fitted by least squares on the relative error of published times
(engine/data/published, read as timing questions by engine.calc.observations): decode (e_bw, o, k, h) on batch-1
decode rows, (e_f, c) on first-token rows, e_fd on batched throughput rows; a class with too few rows of a kind
borrows the fit over every class and says so. One efficiency per class does not hold across GPU generations
(llama.cpp reaches a smaller share of an A100's HBM than of an RTX card's GDDR), so each class also carries a
time factor per GPU family, the geometric mean of its residuals there shrunk towards 1 (a family with n rows
keeps n / (n + FAMILY_PRIOR_ROWS) of its own mean). Intervals come from out-of-sample residuals filed by engine
class x GPU family x regime (engine.calc.cells). Rows are split once, by a hash of their id, into a fitting part
and a held-back part that neither the fit nor the intervals ever see. The physical bound (e = 1, no fixed costs)
is shown beside every estimate.

The fit's arithmetic lives in engine.calc.fitting (this module re-exports its names); this one holds the fit behind
every estimate and the estimates themselves. Standard library only; the fit takes a few seconds once per version of its inputs and is kept on disk.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cache
from pathlib import Path

from engine.calc import published
from engine.calc.cells import (
    BORROW_WIDENING,
    COVERAGE,
    FALLBACK,
    Band,
    Bands,
    Cell,
    Residual,
    gpu_family,
    regime_of,
)
from engine.calc.fitting import (
    BAND_KIND,
    ENGINE_CLASSES,
    ENGINES,
    ClassFit,
    allreduce_latency_s,
    bound_efficiency,
    bound_timing,
    fit_all,
    link_kind,
    out_of_fold_residuals,
    predict,
    predicted_seconds,
    timing,
)
from engine.calc.observations import Observation, held_back, observation, observations, parallel, setup_of
from engine.calc.serving_time import LoadTimes, closed_loop
from engine.calc.timing import Efficiency, Setup, timing_inputs
from engine.core.errors import InvalidParameterError
from engine.core.interval import Interval
from engine.core.memo import on_disk

__all__ = [
    "BAND_KIND",
    "ENGINES",
    "ENGINE_CLASSES",
    "ClassFit",
    "Fits",
    "Observation",
    "Setup",
    "SpeedEstimate",
    "allreduce_latency_s",
    "bound_efficiency",
    "bound_timing",
    "estimate_speed",
    "fits",
    "held_back",
    "link_kind",
    "observation",
    "predict",
    "predicted_seconds",
    "setup_of",
    "timing",
]

INTERVAL_LEVEL = f"{COVERAGE:.0%}"  # the nominal coverage a page prints beside an interval
INTERVAL_METHOD = (
    f"a nominal {COVERAGE:.0%} prediction interval from the errors of published rows like this one (same engine class, GPU "
    "family and regime; each predicted by a fit that never saw it), widened where too few rows stand "
    "behind it"
)


# ---------------------------------------------------------------- the fit behind every estimate


@dataclass(frozen=True)
class Fits:
    classes: dict[str, ClassFit]
    pooled: ClassFit
    bands: dict[str, Bands]  # band kind -> out-of-sample residuals by cell
    fitted_on: tuple[str, ...]  # row ids
    held_back: tuple[str, ...]
    skipped: dict[str, str]  # row id -> why it teaches nothing here

    def for_engine(self, engine: str) -> ClassFit:
        cls = ENGINES.get(engine, engine)
        if cls not in ENGINE_CLASSES:
            raise InvalidParameterError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
        if cls not in self.classes:
            raise InvalidParameterError(no_runs_message(cls))
        return self.classes[cls]

    def band(self, kind: str, cell: Cell) -> Band:
        bands = self.bands.get(kind)
        return bands.band(cell) if bands is not None else FALLBACK


def no_runs_message(cls: str) -> str:
    """Why a class the calculator names cannot be estimated: the published set holds none of its runs that a
    setup can be read from (the reasons each of its rows was left out, when it has rows)."""
    why = sorted(
        {
            reason
            for row in published.rows()
            if row.engine_class == cls and row.kind == "speed"
            for reason in [observation(row)]
            if isinstance(reason, str)
        }
    )
    held = sum(
        1
        for row in published.rows()
        if row.engine_class == cls
        and row.kind == "speed"
        and held_back(row.id)
        and not isinstance(observation(row), str)
    )
    parts = ([f"{held} held back to test the calculator"] if held else []) + (
        [f"the others {'; '.join(why)}"] if why else []
    )
    name = ENGINE_CLASSES[cls].split(" (")[0]
    return (
        f"no published runs of {name} that a GPU estimate can be fitted on"
        + (f" ({'; '.join(parts)})" if parts else "")
        + "; pick another engine, or leave the engine out for the physical bound"
    )


# what the fit is computed from: the published rows, the GPU and model tables, and the code that reads them
FIT_INPUTS = tuple(Path(__file__).resolve().parents[1] / d for d in ("calc", "core", "data"))


@cache
def fits() -> Fits:
    """The fit on the rows that are not held back, with out-of-sample residual bands from the same rows; computed
    once per version of the published data and of the calculator's code, then read from disk (engine.core.memo)."""
    return on_disk("gpu-fits", FIT_INPUTS, _fit, _fits_to_json, _fits_from_json)


def _class_to_json(c: ClassFit) -> dict:
    out = {f.name: getattr(c, f.name) for f in fields(c)}
    out["borrowed"] = list(c.borrowed)
    out["family_factors"] = [[*k, v] for k, v in c.family_factors.items()]
    return out


def _class_from_json(d: dict) -> ClassFit:
    return ClassFit(
        **{
            **d,
            "borrowed": tuple(d["borrowed"]),
            "families_borrowed": tuple(d.get("families_borrowed", ())),
            "family_factors": {(kind, fam): v for kind, fam, v in d["family_factors"]},
        }
    )


def _fits_to_json(f: Fits) -> dict:
    """The fit as JSON (engine.core.memo keeps it between processes): tuple keys as lists."""
    return {
        "classes": {k: _class_to_json(c) for k, c in f.classes.items()},
        "pooled": _class_to_json(f.pooled),
        "bands": {
            kind: [
                [list(cell), [[r.log_ratio, r.source, r.row_id] for r in rs]]
                for cell, rs in b.by_cell.items()
            ]
            for kind, b in f.bands.items()
        },
        "fitted_on": list(f.fitted_on),
        "held_back": list(f.held_back),
        "skipped": f.skipped,
    }


def _fits_from_json(d: dict) -> Fits:
    return Fits(
        classes={k: _class_from_json(c) for k, c in d["classes"].items()},
        pooled=_class_from_json(d["pooled"]),
        bands={
            kind: Bands({tuple(cell): tuple(Residual(*r) for r in rs) for cell, rs in cells})  # type: ignore[misc]
            for kind, cells in d["bands"].items()
        },
        fitted_on=tuple(d["fitted_on"]),
        held_back=tuple(d["held_back"]),
        skipped=dict(d["skipped"]),
    )


def _fit() -> Fits:
    obs, skipped = observations()
    train = [o for o in obs if not held_back(o.row.id)]
    classes, pooled = fit_all(train)
    return Fits(
        classes=classes,
        pooled=pooled,
        bands=out_of_fold_residuals(train, classes, pooled),
        fitted_on=tuple(o.row.id for o in train),
        held_back=tuple(o.row.id for o in obs if held_back(o.row.id)),
        skipped=skipped,
    )


# ---------------------------------------------------------------- estimates with intervals


@dataclass(frozen=True)
class SpeedEstimate:
    engine: str
    engine_class: str
    decode_tokens_per_s: Interval  # one sequence's rate at the batch (1 / TPOT)
    ttft_s: Interval  # one request's first token with `batch` users in flight (fixed + prefill + queue)
    output_tokens_per_s: Interval  # the whole batch: batch x output / (TTFT + (output - 1) x TPOT)
    tpot_s: Interval
    prefill_batch_s: Interval  # the whole batch's prompts prefilled at once
    ttft_parts: dict[str, float]  # {"fixed", "prefill", "queue"}: seconds, summing to ttft_s.central
    load: LoadTimes
    fit: ClassFit
    bands: dict[str, Band]  # "decode" | "ttft" | "throughput" -> the band each interval came from
    notes: tuple[str, ...]
    gpu_family: str = ""  # engine.calc.cells.gpu_family of the GPU timed


def class_efficiency(fit: ClassFit, s: Setup, *, fixed_factor: float = 1.0) -> Efficiency:
    """The class's efficiency on the setup's GPU (its family's factors), its fixed costs (per-layer overhead and
    all-reduce latency) x `fixed_factor` (engine.calc.anchor)."""
    return scaled_fixed(fit.efficiency(s.gpu), fixed_factor)


def scaled_fixed(eff: Efficiency, fixed_factor: float) -> Efficiency:
    """`eff` with its per-layer overhead and all-reduce latency x `fixed_factor`."""
    if fixed_factor == 1.0:
        return eff
    return replace(
        eff,
        step_overhead_s_per_layer=eff.step_overhead_s_per_layer * fixed_factor,
        allreduce_latency_s=eff.allreduce_latency_s * fixed_factor,
    )


def _time(central: float, band: Band, bound: float) -> Interval:
    """A time's interval from its band, never below the physical bound."""
    return Interval(max(central * band.low, bound), central, central * band.high, bound, band.rows)


def _rate(central: float, band: Band, bound: float) -> Interval:
    """A rate from a time-based band: rate / high .. rate / low, never above the physical bound."""
    return Interval(central / band.high, central, min(central / band.low, bound), bound, band.rows)


def estimate_speed(s: Setup, engine: str, *, fixed_factor: float = 1.0) -> SpeedEstimate:
    """Decode rate, first-token latency (one request at the load asked, in parts), the batch's prefill and batch
    throughput for `engine` on the setup's GPU, each as a central estimate from the class's fitted utilisation
    at the GPU's family, an interval from the residuals of rows like it, and the physical bound. `fixed_factor`:
    the step's fixed costs x this factor, as a published run of the setup's layout puts them (engine.calc.anchor;
    never for the track record, which would score a row against its own anchor)."""
    all_fits = fits()
    fit = all_fits.for_engine(engine)
    s = parallel(s, fit.engine_class)
    eff = class_efficiency(fit, s, fixed_factor=fixed_factor)
    central = timing(s, eff)
    bound = bound_timing(s)
    load = closed_loop(s, eff, s.batch)
    load_bound = closed_loop(s, bound_efficiency(), s.batch)
    fam, cls = gpu_family(s.gpu), fit.engine_class
    d = central.decode_step
    fixed_step = timing_inputs(s).allreduces * eff.allreduce_latency_s + (s.pipeline - 1) * eff.stage_hop_s
    decode_regime = regime_of(fixed_s=d.overhead_s + fixed_step, memory_s=d.memory_s, compute_s=d.compute_s)
    ttft_regime = regime_of(fixed_s=load.fixed_s + load.queue_s, memory_s=load.prefill_s, compute_s=0.0)
    bands = {
        "decode": all_fits.band("decode", (cls, fam, decode_regime)),
        "ttft": all_fits.band("ttft", (cls, fam, ttft_regime)),
        "throughput": all_fits.band("decode" if s.batch <= 1 else "throughput", (cls, fam, decode_regime)),
    }
    tpot = _time(central.decode_s_per_token, bands["decode"], bound.decode_s_per_token)
    ttft = _time(load.ttft_s, bands["ttft"], load_bound.ttft_s)
    prefill_batch = _time(central.prefill_s, bands["ttft"], bound.prefill_s)
    out_rate = _rate(central.tokens_per_s, bands["throughput"], bound.tokens_per_s)
    notes = []
    if fit.borrowed:
        notes.append(
            f"Too few published runs of {engine} to fit its own {', '.join(fit.borrowed)}: "
            "those come from the fit over every engine"
        )
    label = engine
    wider = {
        1: f"runs of {label} on {fam} GPUs",
        2: f"runs of {label} on any GPU",
        3: "runs of every engine",
    }
    for name, b in bands.items():
        if b.levels_up:
            what = {"decode": "time per token", "ttft": "first-token", "throughput": "throughput"}[name]
            notes.append(
                f"Too few published runs are like this one for its own {what} interval: it comes from {b.rows} "
                f"{wider.get(b.levels_up, 'runs of every engine')}, made {b.levels_up * BORROW_WIDENING:.0%} wider for that"
            )
    return SpeedEstimate(
        engine=engine,
        engine_class=cls,
        decode_tokens_per_s=tpot.inverse(),
        ttft_s=ttft,
        output_tokens_per_s=out_rate,
        tpot_s=tpot,
        prefill_batch_s=prefill_batch,
        ttft_parts=load.parts,
        load=load,
        fit=fit,
        bands=bands,
        notes=tuple(notes),
        gpu_family=fam,
    )
