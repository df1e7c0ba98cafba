"""Intervals conditioned on what a setup is: engine class x GPU family x regime.

An estimate's interval comes from the out-of-sample errors of rows like it, not from every engine and size at once:
each fitted row's log(published / predicted), the prediction made by a fit that never saw the row (5-fold
cross-validation, folds by a hash of the row id: engine.calc.efficiency.fold_of), is filed under its cell

    (engine class, GPU family, regime)    family: the architecture and memory kind in engine/data/gpus.toml
                                          (ampere-hbm, ampere-gddr, ada-gddr, hopper-hbm, ...); regime: what
                                          bounds its time (`regime_of`)

and an interval for a new setup is read from the deepest level of

    (class, family, regime) -> (class, family) -> (class) -> every class

that holds at least MIN_ROWS residuals from at least MIN_SOURCES sources. From its n residuals with mean m and
standard deviation s the band is the Student-t prediction interval of one more observation,

    exp(m -/+ t(0.90, n - 1) x s x sqrt(1 + 1/n))        (nominal 80%: two-sided, 10% in each tail)

(from 20 residuals on, their own 10th-90th percentiles instead: `band_from`)

and a setup whose own cell was too thin to stand alone widens that by BORROW_WIDENING per level it climbed: the
parent pools rows unlike it, so its spread understates the doubt about this one. The band says how many rows it
rests on (`rows`) and which level it came from, so the page and the JSON can show both.

The rule's constants were chosen on the fitted rows' own out-of-fold residuals, never on held-back rows
(`Bands.calibration`: each residual's band read from the others, without the row itself or without its whole
source). At a nominal 80% with 6 rows from 2 sources, the band without any widening held 82% of decode, 75% of
first-token and 74% of throughput residuals left out one at a time; 12% per borrowed level is the smallest
widening that holds at least 80% of each kind (86%, 81%, 84%; 88%, 89%, 84% leaving out whole sources, as
`python -m engine trackrecord` prints them after the first-token rows of vLLM issue #20469 and NVIDIA's NIM
benchmarking docs came, 2026-12-05).
It was 10% until two served first-token rows of the vLLM class came (2026-12-05): out of fold they are predicted with
the borrowed fixed cost, 1.35x and 1.65x low, and at 10% first-token residuals held 79.2%. The
first pass's 25% held 85-95% at 1.5-3.5x the width. COVERAGE is the one level the page and the JSON state.
"""

from __future__ import annotations

import math
import statistics
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from engine.calc.fitmath import t_quantile
from engine.calc.specs import DATA_DIR, GPUSpec
from engine.core.stats import median, quantile

MIN_ROWS = 6  # residuals a cell needs to give its own band
MIN_SOURCES = 2  # ... from at least this many sources (one source's rows share its bias)
BORROW_WIDENING = 0.12  # half-width x (1 + 0.12) per level climbed (chosen by `Bands.calibration`, see above)
COVERAGE = 0.80  # nominal two-sided coverage of a band: the one level every interval states
EMPIRICAL_FROM = 20  # residuals from which a band uses their own percentiles
REGIMES = ("overhead", "bandwidth", "compute")
OVERHEAD_SHARE = 0.5  # fixed costs above half of a step's time: overhead-bound
UNKNOWN = "unknown"
LEVEL_NAMES = ("class x family x regime", "class x family", "class", "every class")


@cache
def _families() -> dict[str, tuple[str, str]]:
    with (DATA_DIR / "gpus.toml").open("rb") as f:
        raw = tomllib.load(f)
    return {k: (str(v.get("family", UNKNOWN)), str(v.get("memory_kind", UNKNOWN))) for k, v in raw.items()}


def gpu_family(gpu: GPUSpec) -> str:
    """The GPU's family: its architecture and its kind of memory from the catalogue ("ampere-hbm" for an A100,
    "ampere-gddr" for an RTX 3090 or A10G, "ada-gddr", "hopper-hbm", "blackwell-hbm", "turing-gddr"). The memory
    kind splits an architecture because engines reach different shares of the two: llama.cpp's kernels stream a
    GDDR6X card near its datasheet and an A100's HBM2e well below it. A custom GPU or this machine is "unknown"
    (its intervals come from the engine class's rows on every GPU)."""
    arch, memory = _families().get(gpu.key, (UNKNOWN, UNKNOWN))
    return UNKNOWN if arch == UNKNOWN else f"{arch}-{memory}"


AMD_FAMILIES = frozenset({"cdna3"})  # the catalogue's AMD architectures; the rest are NVIDIA's


def gpu_vendor(gpu: GPUSpec) -> str:
    """ "amd" or "nvidia" from the catalogue's architecture ("unknown" for a custom GPU or this machine): their
    software stacks (ROCm and RCCL, CUDA and NCCL) launch kernels and collectives at their own fixed costs."""
    arch = _families().get(gpu.key, (UNKNOWN, UNKNOWN))[0]
    return UNKNOWN if arch == UNKNOWN else "amd" if arch in AMD_FAMILIES else "nvidia"


def memory_kind(gpu: GPUSpec) -> str:
    """HBM (stacked, datacenter) or GDDR (consumer and PCIe inference cards), from the catalogue."""
    return _families().get(gpu.key, (UNKNOWN, UNKNOWN))[1]


def regime_of(*, fixed_s: float, memory_s: float, compute_s: float) -> str:
    """overhead when fixed costs (per-layer launches, all-reduce latencies, a request's fixed cost) are at least
    half the time; else compute when the compute-bound operators take longer than the memory-bound ones; else
    bandwidth."""
    total = fixed_s + memory_s + compute_s
    if total > 0 and fixed_s / total >= OVERHEAD_SHARE:
        return "overhead"
    return "compute" if compute_s > memory_s else "bandwidth"


Cell = tuple[str, str, str]  # (engine class, GPU family, regime)


@dataclass(frozen=True)
class Residual:
    log_ratio: float  # log(published / predicted), predicted without the row's source
    source: str
    row_id: str


@dataclass(frozen=True)
class Band:
    """Multiplicative band on a time: published / predicted lies in [low, high] with nominal `coverage`."""

    low: float
    high: float
    rows: int  # residuals it rests on
    sources: int
    level: str  # which level of the hierarchy gave it (LEVEL_NAMES)
    levels_up: int  # 0: the setup's own cell

    @property
    def width(self) -> float:
        return self.high / self.low


FALLBACK = Band(0.5, 2.0, 0, 0, "none: no residuals at all", len(LEVEL_NAMES))


def levels(cell: Cell) -> tuple[tuple[str, ...], ...]:
    cls, family, regime = cell
    return ((cls, family, regime), (cls, family), (cls,), ())


def band_from(values: Sequence[float], levels_up: int) -> tuple[float, float]:
    """(low, high) factors around the central estimate, the centre always inside.

    Up to EMPIRICAL_FROM residuals: exp(m -/+ t x s x sqrt(1 + 1/n)), the Student-t prediction interval. From
    EMPIRICAL_FROM on, the residuals' own percentiles at COVERAGE's ends, the 10th and 90th (their tails are
    heavier than a normal's: a few setups a fit gets badly wrong would inflate s and widen every band), each end's
    distance from the median scaled by sqrt(1 + 1/n). Either way the half-widths grow by BORROW_WIDENING per level borrowed."""
    n = len(values)
    grow = 1 + BORROW_WIDENING * levels_up
    if n >= EMPIRICAL_FROM:
        mid = median(values)
        lo, hi = (quantile(values, q) for q in ((1 - COVERAGE) / 2, (1 + COVERAGE) / 2))
        scale = math.sqrt(1 + 1 / n) * grow
        return min(1.0, math.exp(mid - (mid - lo) * scale)), max(1.0, math.exp(mid + (hi - mid) * scale))
    m = statistics.fmean(values)
    s = statistics.stdev(values) if n > 1 else 0.0
    half = t_quantile(0.5 + COVERAGE / 2, n - 1) * s * math.sqrt(1 + 1 / n) * grow
    return min(1.0, math.exp(m - half)), max(1.0, math.exp(m + half))


@dataclass(frozen=True)
class Bands:
    """Out-of-sample residuals of one kind of time, filed by cell; `band` reads the interval for a cell."""

    by_cell: Mapping[Cell, tuple[Residual, ...]]

    @classmethod
    def of(cls, items: Iterable[tuple[Cell, Residual]]) -> Bands:
        out: dict[Cell, list[Residual]] = {}
        for cell, r in items:
            out.setdefault(cell, []).append(r)
        return cls({k: tuple(v) for k, v in out.items()})

    def at(self, prefix: tuple[str, ...]) -> list[Residual]:
        return [r for cell, rs in self.by_cell.items() if cell[: len(prefix)] == prefix for r in rs]

    def band(self, cell: Cell, leave_out: Callable[[Residual], bool] | None = None) -> Band:
        """The band for a setup in `cell`, from the deepest level with enough rows and sources (residuals for which
        `leave_out` is true are not counted: `calibration`)."""
        for up, prefix in enumerate(levels(cell)):
            rs = [r for r in self.at(prefix) if leave_out is None or not leave_out(r)]
            sources = len({r.source for r in rs})
            if len(rs) >= MIN_ROWS and sources >= MIN_SOURCES:
                lo, hi = band_from([r.log_ratio for r in rs], up)
                return Band(lo, hi, len(rs), sources, LEVEL_NAMES[up], up)
        return FALLBACK

    def calibration(self, leave: str = "row") -> Calibration:
        """How the rule does on its own residuals: each residual's band read from the others (`leave` "row": without
        it; "source": without every residual of its source, as a new source would be), the share that falls inside
        and the median width. Fitted rows only: held-back rows never reach a Bands."""
        inside, widths = [], []
        for cell, rs in self.by_cell.items():
            for r in rs:
                b = self.band(cell, _leave_out(r, leave))
                inside.append(b.low <= math.exp(r.log_ratio) <= b.high)
                widths.append(b.width)
        n = len(inside)
        return Calibration(sum(inside) / n if n else math.nan, median(widths) if n else math.nan, n)


def _leave_out(r: Residual, leave: str) -> Callable[[Residual], bool]:
    if leave == "row":
        return lambda o: o.row_id == r.row_id
    return lambda o: o.source == r.source


@dataclass(frozen=True)
class Calibration:
    inside: float  # share of the left-out residuals inside their band
    median_width: float
    rows: int
