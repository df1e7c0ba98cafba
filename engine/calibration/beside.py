"""An estimate beside a measurement: the one rule every page follows before it sets the two side by side.

- The estimate is the calibrated model (engine.calibration.fit: bytes over the achieved bandwidth plus a per-layer
  step cost, FLOPs over the achieved FLOP/s), shown with its 95% interval. Without a calibration there is only
  the measured roofs' bound, which a real run never reaches (no per-step cost): it is said to be a bound, and no
  ratio is drawn from it.
- A measurement taken while the machine was busy (engine.core.load.is_busy: runnable tasks above the cores, or
  the run got under 80% of its threads' time) measures the neighbours as much as the model: it is "measured under
  load X: not comparable", never a ratio.
- Otherwise: the ratio predicted / measured, and whether the measurement fell inside the interval.

The calculator's "Estimate vs measurement", the Playground's forecast and the Roofline's measured points call
`beside`; the sentence is built from the numbers it returns. Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.calc import format as fmt
from engine.core.interval import Interval
from engine.core.load import cores, is_busy, shares_cores

CALIBRATE = (
    "calibrate this machine (Calibrate this machine on the Memory and cost page; `calibrate` on the command line) "
    "for an estimate with its interval"
)


@dataclass(frozen=True)
class Beside:
    """An estimate and a measurement of one quantity, and whether they may be compared."""

    quantity: str  # "TPOT", "run time"
    measured_s: float | None  # None: a forecast before the run
    predicted: Interval | None  # the calibrated model's, with its interval; None without a calibration
    bound_s: float | None  # the measured roofs' bound (no per-step cost)
    loadavg_1m: float  # the 1-minute load average when measured (or now, for a forecast); NaN unknown
    busy: bool
    cores: int
    load_unknown: bool = False  # a measurement that recorded no load (logged before runs carried it)
    level: str = "95%"  # what the interval is, in the words beside it ("one run here, 95%")

    @property
    def comparable(self) -> bool:
        return (
            not self.busy
            and not self.load_unknown
            and self.predicted is not None
            and self.measured_s is not None
        )

    @property
    def ratio(self) -> float | None:
        """predicted / measured, only where the two may be compared."""
        if not self.comparable or not self.measured_s:
            return None
        assert self.predicted is not None
        return self.predicted.central / self.measured_s

    @property
    def inside(self) -> bool | None:
        """Whether the measurement fell inside the estimate's interval (None where not comparable)."""
        if not self.comparable:
            return None
        assert self.predicted is not None and self.measured_s is not None
        return self.predicted.low <= self.measured_s <= self.predicted.high

    @property
    def shared(self) -> bool:
        """Other work is running now (a forecast's load average is the others': the run has not started), enough
        to share the cores with the run's threads, busy or not by the one rule."""
        return self.busy or shares_cores(self.loadavg_1m)

    @property
    def busy_factor(self) -> float:
        """How much longer a run may take now, sharing the CPU: its threads (one a core) beside `loadavg_1m`
        runnable others get cores / (load + cores) of the time, so (load + cores) / cores; 1 when nothing else runs
        or the load is unknown. A lower bound: memory bandwidth is shared too, and the load moves during a run."""
        if not self.shared or not math.isfinite(self.loadavg_1m) or self.cores <= 0:
            return 1.0
        return (self.loadavg_1m + self.cores) / self.cores

    @property
    def expected_s(self) -> float | None:
        """The estimate (the calibrated central, else the bound) scaled by the load now: what to expect."""
        base = self.predicted.central if self.predicted is not None else self.bound_s
        return None if base is None else base * self.busy_factor

    def load_text(self) -> str:
        return (
            f"load {self.loadavg_1m:.1f} on {self.cores} cores"
            if math.isfinite(self.loadavg_1m)
            else "a busy machine"
        )

    def _estimate(self) -> str:
        if self.predicted is not None:
            p = self.predicted
            return f"calibrated estimate {fmt.seconds(p.central)} ({self.level}: {fmt.seconds(p.low)}–{fmt.seconds(p.high)})"
        if self.bound_s is not None:
            return f"measured roofs' bound {fmt.seconds(self.bound_s)} (no per-step cost, never reached)"
        return "no estimate"

    def sentence(self) -> str:
        """One sentence from the numbers above (flip them and it flips)."""
        q, estimate = self.quantity, self._estimate()
        if self.measured_s is None:  # a forecast, before the run
            if self.predicted is not None:
                head = f"Forecast {q}: the {estimate}, from this machine's calibration"
            else:
                head = f"{q[0].upper()}{q[1:]}: at least the {estimate}; {CALIBRATE}"
            if self.busy:
                slower = (
                    f"; sharing the CPU with that load, expect about {self.busy_factor:.1f}× as long or more "
                    f"(about {fmt.seconds(self.expected_s)})"
                    if self.busy_factor > 1 and self.expected_s is not None
                    else ""
                )
                return (
                    f"{head}. The machine is busy now ({self.load_text()}): a run now is not comparable with it"
                    f"{slower}."
                )
            if self.shared and self.busy_factor > 1 and self.expected_s is not None:
                return (
                    f"{head}. Other work is running now ({self.load_text()}): a run now shares the cores with it, "
                    f"so expect about {self.busy_factor:.1f}× as long or more (about {fmt.seconds(self.expected_s)})."
                )
            return head + "."
        measured = f"Measured {q} {fmt.seconds(self.measured_s)}"
        if self.load_unknown:
            return f"{measured}, with no record of the machine's load then: not compared with the {estimate}."
        if self.busy:
            return f"{measured}, measured under {self.load_text()}: not comparable with the {estimate}."
        if self.predicted is None:
            return f"{measured}, beside the {estimate}: no ratio; {CALIBRATE}."
        where = "inside" if self.inside else "outside"
        return f"{measured} is {where} the {estimate}: predicted / measured = {self.ratio:.2f}."


def beside(
    quantity: str,
    *,
    measured_s: float | None,
    predicted: Interval | None,
    bound_s: float | None = None,
    loadavg_1m: float = math.nan,
    cpu_share: float = math.nan,
    busy: bool | None = None,
    n_cores: int | None = None,
    level: str = "95%",
) -> Beside:
    """`measured_s` (None for a forecast) beside the calibrated `predicted` interval (None without a calibration)
    and the roofs' `bound_s`; busy by the one rule (engine.core.load) from the load average and CPU share, unless
    the measurement recorded its own `busy` flag."""
    n = n_cores or cores()
    flagged = is_busy(loadavg_1m, n, cpu_share) if busy is None else busy
    # a measurement with neither a load nor a busy flag may have shared the CPU: it is not compared
    unknown = (
        measured_s is not None
        and busy is None
        and not math.isfinite(loadavg_1m)
        and not math.isfinite(cpu_share)
    )
    return Beside(quantity, measured_s, predicted, bound_s, loadavg_1m, flagged, n, unknown, level)


def run_load(run: object) -> tuple[float, float, bool | None]:
    """(1-minute load average, CPU share, busy flag) a measured run recorded; NaN and None where it recorded none
    (runs logged before the run report carried them)."""
    load = getattr(run, "loadavg_1m", math.nan)
    share = getattr(run, "cpu_share", math.nan)
    busy = getattr(run, "busy", None)
    return (
        float(load) if isinstance(load, int | float) else math.nan,
        float(share) if isinstance(share, int | float) else math.nan,
        busy if isinstance(busy, bool) else None,
    )
