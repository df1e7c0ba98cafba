"""A calibration as stored: per machine, with its date, under paths.home()/calibration/<machine>.json.

A missing, torn or old-format file reads as None: the calculator stays in datasheet mode and says how to
calibrate, rather than failing.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.calc.specs import GPUSpec, ModelSpec
from engine.calc.timing import Efficiency
from engine.calibration.fit import PrecisionFit, RunSample, efficiency_of
from engine.calibration.machine import machine_spec
from engine.core import paths
from engine.core.jsonsafe import to_jsonable

SCHEMA = 2


@dataclass(frozen=True)
class LoadSummary:
    """The machine's load over the calibration's runs (engine.calibration.runs)."""

    runs: int
    loadavg_1m_median: float
    loadavg_1m_max: float
    cpu_share_median: float  # this process's CPU seconds / (wall x torch threads); 1.0 = never waited
    busy_runs: int  # runs flagged busy (CPU share under 0.8, or more runnable tasks than cores)
    cpu_count: int

    def describe(self) -> str:
        return (
            f"load average {self.loadavg_1m_median:.1f} (max {self.loadavg_1m_max:.1f}) on {self.cpu_count} cores; "
            f"the runs got {self.cpu_share_median:.0%} of their threads' time; {self.busy_runs} of {self.runs} "
            "runs were slowed by other work"
        )


@dataclass(frozen=True)
class Calibration:
    machine_id: str
    created_at: str  # ISO 8601 UTC
    model: str
    peak_bandwidth_bytes_per_s: float  # measured read bandwidth (the roof)
    peak_flops: dict[str, float]  # measured matmul FLOP/s per precision (the roof)
    fits: dict[str, PrecisionFit]
    samples: list[RunSample] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    load: LoadSummary | None = None
    schema: int = SCHEMA

    def fit_for(self, dtype: str) -> PrecisionFit:
        """The fit for math in `dtype`: fp16/int8/int4 borrow bf16's (same 2-byte kernels, or dequantized to
        them); a missing precision borrows another one."""
        key = "bf16" if dtype in ("fp16", "int8", "int4") else dtype
        return self.fits.get(key) or self.fits.get("bf16") or next(iter(self.fits.values()))

    def efficiency(self, dtype: str, spec: ModelSpec | None = None) -> Efficiency:
        """The calibrated Efficiency for the calculator (engine.calc.timing) in `dtype`; with `spec`, at the
        matrix-vector rate that model's matmul shapes reach (engine.calibration.fit.efficiency_of)."""
        key = "bf16" if dtype in ("fp16", "int8", "int4") else dtype
        flops = self.peak_flops.get(key) or self.peak_flops.get("fp32") or 0.0
        return efficiency_of(self.fit_for(dtype), self.peak_bandwidth_bytes_per_s, flops, spec)

    # summaries kept for the CLI and older readers
    @property
    def bandwidth_efficiency(self) -> float:
        f = self.fit_for("fp32")
        return f.achieved_bandwidth / self.peak_bandwidth_bytes_per_s

    @property
    def step_overhead_s_per_layer(self) -> float:
        return self.fit_for("fp32").overhead_s_per_layer

    @property
    def flops_efficiency(self) -> dict[str, float]:
        return {dt: self.efficiency(dt).flops for dt in self.fits}

    def machine_gpu(self) -> GPUSpec:
        return machine_spec(
            self.peak_bandwidth_bytes_per_s, self.peak_flops, source=f"measured {self.created_at}"
        )


def calibration_path(machine_id: str | None = None) -> Path:
    return paths.home() / "calibration" / f"{machine_id or paths.machine_id()}.json"


def _nan(d: dict, *keys: str) -> dict:
    return {**d, **{k: math.nan for k in keys if d.get(k) is None and k in d}}


def save_calibration(cal: Calibration) -> Path:
    path = calibration_path(cal.machine_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(to_jsonable(asdict(cal)), indent=2), encoding="utf-8")
    tmp.replace(path)
    return path


def _renamed(sample: dict[str, Any]) -> dict[str, Any]:
    """A stored sample from before RunSample's `tpot_s` was named `step_s` (the same number)."""
    if "tpot_s" in sample and "step_s" not in sample:
        sample = {**sample, "step_s": sample["tpot_s"]}
        del sample["tpot_s"]
    return sample


def load_calibration(machine_id: str | None = None) -> Calibration | None:
    """This machine's stored calibration, or None (missing, unreadable or an older format)."""
    try:
        raw: dict[str, Any] = json.loads(calibration_path(machine_id).read_text(encoding="utf-8"))
        if raw.get("schema") != SCHEMA:
            return None
        raw["fits"] = {k: PrecisionFit(**v) for k, v in raw["fits"].items()}
        raw["samples"] = [
            RunSample(**_nan(_renamed(s), "loadavg_1m", "cpu_share")) for s in raw.get("samples", [])
        ]
        if raw.get("load") is not None:
            raw["load"] = LoadSummary(
                **_nan(raw["load"], "loadavg_1m_median", "loadavg_1m_max", "cpu_share_median")
            )
        cal = Calibration(**raw)
        return cal if cal.fits else None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
