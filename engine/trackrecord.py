"""The calculator's track record: every published measurement (engine/data/published) beside the calculator's
prediction for the same setup, the error per metric (median, worst, share inside the interval), and the same
for the runs this lab measured on this machine. llm-d's planner publishes its validation this way; no other
calculator does, so the accuracy of this one becomes a figure anyone can rerun:

    python -m engine trackrecord --json

Targets are reported on the held-back rows (about 30%, chosen by a hash of each row's id before any fit: the
efficiency and memory fits never see them); "all rows" adds the rows the fits were made on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from engine.calc import efficiency as E
from engine.calc import published
from engine.calc.cells import COVERAGE, gpu_family
from engine.calc.serving_memory import serving_memory_of
from engine.calc.serving_startup import activation_model, vllm_era
from engine.calc.specs import GIB
from engine.core import stats


@dataclass(frozen=True)
class TrackRow:
    id: str
    kind: str  # speed | memory
    group: str  # the metric group its error counts in (TARGETS), or "" when it is shown only
    metric: str
    model: str
    gpu: str
    engine: str
    setup: str  # what was run, in words
    published: float
    unit: str
    predicted: float | None
    low: float | None
    high: float | None
    bound: float | None  # the physical bound (speed rows)
    held_back: bool
    why: str  # why there is no prediction or no score
    source: str
    quote: str
    note: str = ""  # what the prediction assumed that the source does not say
    cell: str = ""  # speed rows: engine class x GPU family x regime
    band_level: str = ""  # the level of the hierarchy its interval came from (engine.calc.cells)
    band_rows: int = 0  # the out-of-sample residuals that interval rests on

    @property
    def error(self) -> float | None:
        """predicted / published - 1."""
        if self.predicted is None or not self.published:
            return None
        return self.predicted / self.published - 1

    @property
    def width(self) -> float | None:
        """high / low of the interval."""
        if self.low is None or self.high is None or self.low <= 0:
            return None
        return self.high / self.low

    @property
    def inside(self) -> bool | None:
        if self.low is None or self.high is None:
            return None
        return self.low <= self.published <= self.high


@dataclass(frozen=True)
class Target:
    group: str
    description: str
    median_max: float  # |error| the median may not exceed
    worst_max: float | None = None
    coverage_min: float | None = None  # share of rows inside the interval
    width_max: float | None = None  # median interval width (high / low)


TARGETS: tuple[Target, ...] = (
    Target("weights", "weights per GPU (vLLM/SGLang 'model weights take')", 0.01, 0.03),
    Target("kv capacity", "vLLM KV capacity: blocks, tokens, GiB, maximum concurrency", 0.03, 0.10),
    Target("decode", "batch-1 decode tokens/s and TPOT", 0.12, None, 0.80, 1.6),
    Target("tp scaling", "tensor-parallel speed-up 1 -> N GPUs (batch-1 decode)", 0.25),
    Target("ttft", "first-token latency (one request, at the load stated)", 0.25, None, 0.80, 2.0),
    Target("throughput", "output throughput of a batch or at a concurrency", 0.20),
)


@dataclass(frozen=True)
class Summary:
    group: str
    description: str
    rows: int
    median_abs_error: float
    worst_abs_error: float
    coverage: float | None  # share inside the interval (None: rows without one)
    median_width: float | None  # median high / low of the intervals (None: rows without one)
    target: str
    met: bool | None  # None: no rows to judge


@dataclass(frozen=True)
class TrackRecord:
    rows: tuple[TrackRow, ...]
    held_back: tuple[Summary, ...]
    all_rows: tuple[Summary, ...]
    not_fitting: tuple[str, ...]  # setups a source ran that the calculator says do not fit
    classes: dict[str, E.ClassFit]
    activation: dict[str, float]  # the vLLM activation model's constants
    this_machine: tuple[dict, ...]  # the lab's own runs against the calculator (engine.calibration.check)
    calibration: dict[str, dict[str, float]] = field(
        default_factory=dict
    )  # band kind -> `interval_calibration`


T = TypeVar("T")


def _scorable(
    kind: str, prepare: Callable[[published.PublishedRow], T | str], out: list[TrackRow]
) -> Iterator[tuple[published.PublishedRow, TrackRow, T]]:
    """The published rows of `kind` with what the calculator needs to predict each; a row it cannot predict
    goes to `out` with the reason `prepare` gave."""
    for row in published.rows():
        if row.kind != kind:
            continue
        base = _base(row)
        prepared = prepare(row)
        if isinstance(prepared, str):
            out.append(replace(base, why=prepared))
        else:
            yield row, base, prepared


# metrics stated as a rate (the time is their inverse); the others are times
RATES = frozenset(
    {
        "decode_tokens_per_s",
        "prefill_tokens_per_s",
        "output_tokens_per_s",
        "output_tokens_per_s_per_gpu",
        "requests_per_s",
    }
)


def _speed_rows() -> list[TrackRow]:
    fits = E.fits()
    out: list[TrackRow] = []
    for row, base, obs in _scorable("speed", E.observation, out):
        cls = obs.row.engine_class or "pooled"
        fit = fits.classes.get(cls, replace(fits.pooled, engine_class=cls))
        pred = E.predict(obs, fit.efficiency(obs.setup.gpu))
        bound = E.predict(obs, E.bound_efficiency()).seconds
        kind, cell = E.BAND_KIND[obs.kind], (cls, gpu_family(obs.setup.gpu), pred.regime)
        band = fits.band(kind, cell)
        to_value = _to_value(row, obs)
        lo, hi = sorted((to_value(pred.seconds * band.low), to_value(pred.seconds * band.high)))
        out.append(
            replace(
                base,
                group=kind,  # the band kinds are the target groups: decode, ttft, throughput
                predicted=to_value(pred.seconds),
                low=lo,
                high=hi,
                bound=to_value(bound),
                cell=f"{cell[0]} x {cell[1]} x {cell[2]}",
                band_level=band.level,
                band_rows=band.rows,
            )
        )
    return out


def _to_value(row: published.PublishedRow, obs: E.Observation) -> Callable[[float], float]:
    """A predicted time in the row's own unit: the observation's time is the published value times a constant
    (a time) or a constant over it (a rate), so the same constant turns a predicted time back."""
    if row.metric in RATES:
        k = obs.seconds * row.value
        return lambda t: k / t
    k = obs.seconds / row.value
    return lambda t: t / k


def _base(row: published.PublishedRow) -> TrackRow:
    fmt = row.weight_format + (f" (read as {row.calc_format})" if row.calc_format else "")
    lens = f", {row.prompt_tokens} in / {row.output_tokens} out" if row.prompt_tokens else ""
    setup = (
        f"{row.tensor_parallel} x {row.gpu}, {fmt}, {row.batch_kind} {row.batch}{lens}"
        + (f"; GPU read as {row.gpu_key}: {row.gpu_why}" if row.gpu_why else "")
        + (f"; {row.format_why}" if row.format_why else "")
    )
    return TrackRow(
        id=row.id,
        kind=row.kind,
        group="",
        metric=row.metric,
        model=row.model,
        gpu=row.gpu,
        engine=f"{row.engine} {row.engine_version}".strip(),
        setup=setup,
        published=row.value,
        unit=row.unit,
        predicted=None,
        low=None,
        high=None,
        bound=None,
        held_back=E.held_back(row.id),
        why="",
        source=row.source,
        quote=row.quote,
    )


MEMORY_GROUPS = {
    "weights_gib": "weights",
    "sglang_weights_gb": "weights",
    "gpu_blocks": "kv capacity",
    "kv_cache_tokens": "kv capacity",
    "kv_cache_gib": "kv capacity",
    "max_concurrency": "kv capacity",
}


def _memory_rows() -> list[TrackRow]:
    out: list[TrackRow] = []
    unscored = published.aliases().get("unscored", {})
    for row, base, setup in _scorable("memory", E.setup_of, out):
        if row.id in unscored:
            out.append(replace(base, why=unscored[row.id]))
            continue
        engine = "sglang" if row.engine == "sglang" else "vllm"
        mem = serving_memory_of(
            setup,
            engine,
            gpu_memory_utilization=row.gpu_memory_utilization,
            max_model_len=row.max_model_len,
            block_size=row.block_size or 16,
            era=vllm_era(row),
        )
        value = {
            "weights_gib": mem.weights_bytes / GIB,
            "sglang_weights_gb": mem.weights_bytes / GIB,  # SGLang prints GiB and calls them GB
            "gpu_blocks": float(mem.blocks),
            "kv_cache_tokens": float(mem.kv_cache_tokens),
            "sglang_max_total_tokens": float(mem.kv_cache_tokens),
            "kv_cache_gib": mem.kv_bytes / GIB,
            "max_concurrency": mem.max_concurrency,
            "activation_peak_gib": mem.activation_bytes / GIB,
            "non_torch_gib": mem.non_torch_bytes / GIB,
            "total_gpu_memory_gib": mem.total_bytes / GIB,
        }.get(row.metric)
        if value is None:
            out.append(replace(base, why=f"{row.metric}: not a figure the calculator predicts"))
            continue
        group = MEMORY_GROUPS.get(row.metric, "")
        if group == "kv capacity" and engine == "sglang":
            group = ""  # the target is vLLM's; SGLang's pool is shown beside it
        if row.metric == "max_concurrency" and not row.max_model_len:
            out.append(replace(base, why="the log's max_model_len is not known"))
            continue
        fitted = row.metric in ("activation_peak_gib", "non_torch_gib") and row.id in activation_model().rows
        why = "fitted on (the activation model's own data)" if fitted else ""
        if (
            row.metric in ("kv_cache_tokens", "gpu_blocks", "kv_cache_gib", "max_concurrency")
            and not row.max_model_len
        ):
            why = "the log does not show max_model_len: the profile run's size is the model's context"
        out.append(replace(base, group=group, predicted=value, why=why))
    return out


def _tp_rows(speed: list[TrackRow]) -> list[TrackRow]:
    """Speed-up of N GPUs over one, published and predicted, for each series a source ran at both."""
    by_key: dict[tuple, dict[int, TrackRow]] = {}
    rows = {r.id: r for r in published.rows()}
    for t in speed:
        if t.group != "decode" or t.predicted is None:
            continue
        r = rows[t.id]
        by_key.setdefault((r.source_key, r.model, r.weight_format, r.engine, r.gpu), {})[
            r.tensor_parallel
        ] = t
    out = []
    for series in by_key.values():
        one = series.get(1)
        if one is None:
            continue
        for n, t in sorted(series.items()):
            if n == 1 or t.predicted is None or one.predicted is None:
                continue
            out.append(
                replace(
                    t,
                    id=f"{t.id} / {one.id}",
                    group="tp scaling",
                    metric=f"speed-up 1 -> {n} GPUs",
                    published=t.published / one.published,
                    unit="x",
                    predicted=t.predicted / one.predicted,
                    low=None,
                    high=None,
                    bound=None,
                    held_back=t.held_back or one.held_back,
                )
            )
    return out


def summarize(rows: Sequence[TrackRow], *, held_back_only: bool) -> tuple[Summary, ...]:
    out = []
    for target in TARGETS:
        chosen = [
            r
            for r in rows
            if r.group == target.group
            and r.error is not None
            and not r.why
            and (r.held_back or not held_back_only)
        ]
        errs = [abs(r.error) for r in chosen if r.error is not None]
        inside = [r.inside for r in chosen if r.inside is not None]
        widths = [w for r in chosen if (w := r.width) is not None]
        width = stats.median(widths) if widths else None
        med = stats.median(errs) if errs else math.nan
        worst = max(errs) if errs else math.nan
        cov = sum(inside) / len(inside) if inside else None
        parts = [f"median |error| <= {target.median_max:.0%}"]
        parts += [f"worst <= {target.worst_max:.0%}"] if target.worst_max is not None else []
        parts += (
            [f"inside the interval >= {target.coverage_min:.0%}"] if target.coverage_min is not None else []
        )
        parts += [f"median width <= {target.width_max:g}x"] if target.width_max is not None else []
        met = None
        if errs:
            met = med <= target.median_max
            if target.worst_max is not None:
                met = met and worst <= target.worst_max
            if target.coverage_min is not None:
                met = met and cov is not None and cov >= target.coverage_min
            if target.width_max is not None:
                met = met and width is not None and width <= target.width_max
        out.append(
            Summary(
                target.group, target.description, len(errs), med, worst, cov, width, ", ".join(parts), met
            )
        )
    return tuple(out)


def not_fitting() -> tuple[str, ...]:
    """Setups a source ran that the calculator says cannot run: the weights per GPU, a forward pass's activations
    and the runtime leave no room for a KV cache. Serving engines (vLLM-class, TensorRT-LLM) reserve memory as vLLM
    does (utilisation 0.9 unless the source states its own, a profile run of its batched tokens); the others may
    use the whole card for one request's forward pass. A batch larger than the cache holds is not a misfit:
    in-flight batching queues the rest."""
    out = []
    seen = set()
    for row in published.rows():
        s = E.setup_of(row)
        if isinstance(s, str):
            continue
        key = (row.model, row.gpu_key, row.tensor_parallel, row.weight_format, row.max_model_len)
        if key in seen:
            continue
        seen.add(key)
        serving = row.engine_class in ("vllm", "tensorrt-llm")  # engines that reserve memory up front
        mem = serving_memory_of(
            s,
            gpu_memory_utilization=row.gpu_memory_utilization or (None if serving else 1.0),
            max_model_len=row.max_model_len or s.prompt_tokens + s.output_tokens,
            max_num_batched_tokens=None if serving else s.prompt_tokens,
            max_num_seqs=None if serving else 1,
        )
        if not mem.fits:
            out.append(
                f"{row.id}: {mem.weights_bytes / GIB:.1f} GiB of weights per GPU leave {mem.kv_bytes / GIB:.1f} GiB "
                f"for the cache on {s.gpu.name}"
            )
    return tuple(out)


def this_machine() -> tuple[dict, ...]:
    """The lab's own runs on this machine against the calculator (engine.calibration.check), newest shapes."""
    try:
        from engine.calibration import check, load_calibration, machine
        from engine.runtime import runlog
    except ImportError:  # pragma: no cover - the torch side is optional for the pure track record
        return ()
    runs = [r for r in runlog.load() if getattr(r, "use_cache", True)]
    m, cal = machine.latest(), load_calibration()
    if not runs or (m is None and cal is None):
        return ()
    # the roofs as a GPU: the calibration's (its efficiencies were fitted against them), else the measurement's
    roofs = cal.machine_gpu() if cal is not None else m.gpu_spec()
    out = []
    for c in check.summarize(runs, roofs, cal):
        predicted = c.calibrated_tpot_s if c.calibrated_tpot_s is not None else c.datasheet_tpot_s
        out.append(
            {
                "shape": c.label,
                "runs": c.n,
                "tpot_measured_median_s": c.tpot.median,
                "tpot_predicted_s": predicted,
                "prediction": "calibrated" if c.calibrated_tpot_s is not None else "datasheet",
                "error": predicted / c.tpot.median - 1 if c.tpot.median else None,
                "interval_s": c.calibrated_tpot_interval,
            }
        )
    return tuple(out)


def interval_calibration() -> dict[str, dict[str, float]]:
    """Per band kind, the interval rule on the fitted rows' own out-of-fold residuals (engine.calc.cells
    `Bands.calibration`): the nominal level, and the share inside and median width when each residual's band is read
    without it and without its whole source. The held-back rows' coverage is in the summaries; this is what chose
    the rule."""
    out = {}
    for kind, bands in E.fits().bands.items():
        row, src = bands.calibration("row"), bands.calibration("source")
        out[kind] = {
            "nominal": COVERAGE,
            "residuals": row.rows,
            "inside_leaving_out_the_row": row.inside,
            "median_width_leaving_out_the_row": row.median_width,
            "inside_leaving_out_its_source": src.inside,
            "median_width_leaving_out_its_source": src.median_width,
        }
    return out


def vllm_kv_rows() -> tuple[dict, ...]:
    """vLLM's KV pool as each start the lab made logged it (engine/backends/vllm_records.py), beside the calculator's
    CPU branch of vLLM's memory model: this machine's rows of the KV-capacity record (0 tokens off is the target)."""
    from engine.backends.vllm_records import kv_records

    out = []
    for r in kv_records():
        logged, pred = r.get("logged") or {}, r.get("predicted") or {}
        out.append(
            {
                "shape": f"vLLM KV pool: {r.get('model')} {r.get('dtype')}, {logged.get('max_model_len')} tokens per "
                f"request, {(r.get('kv_space_bytes') or 0) / GIB:g} GiB ({r.get('started_by')})",
                "build": r.get("build"),
                "at": r.get("at"),
                "kv_cache_tokens_logged": logged.get("kv_cache_tokens"),
                "kv_cache_tokens_predicted": pred.get("kv_cache_tokens"),
                "max_concurrency_logged": logged.get("max_concurrency"),
                "max_concurrency_predicted": pred.get("max_concurrency"),
                "block_size_logged": logged.get("block_size"),
                "block_size_predicted": pred.get("block_size"),
                "tokens_off": r.get("tokens_off"),
                "quote": logged.get("line"),
            }
        )
    return tuple(out)


def track_record(*, include_machine: bool = True) -> TrackRecord:
    speed = _speed_rows()
    rows = [*_memory_rows(), *speed, *_tp_rows(speed)]
    act = activation_model()
    return TrackRecord(
        rows=tuple(rows),
        held_back=summarize(rows, held_back_only=True),
        all_rows=summarize(rows, held_back_only=False),
        not_fitting=not_fitting(),
        classes=E.fits().classes,
        activation={
            "per_token": act.per_token,
            **{f"per_sequence_{era}": c for era, c in act.per_sequence.items()},
            "non_torch_one_gpu_bytes": act.non_torch_one_gpu,
            "non_torch_parallel_bytes": act.non_torch_parallel,
        },
        this_machine=this_machine() + vllm_kv_rows() if include_machine else (),
        calibration=interval_calibration(),
    )
