"""The one measurement of this machine's roofs: read and copy bandwidth, and matmul FLOP/s per precision.

Home, the calculator and the roofline page all read this one measurement (through one st.cache_resource
wrapper in ui/common.py), and the calibration records the roofs it was fitted against from here too, so two
pages never show two different "this machine" figures. Each measurement is stored per machine with its date
under paths.home()/machine/<machine>.json (`latest()` reads it back).

Methods (engine.runtime.hardware): bandwidth = best of 5 over a 256 MiB buffer (a sum reads every byte once; a copy
moves read + write bytes); matmul = best of 5 n x n x n products in nn.Linear's layout, 2 n^3 FLOPs each (n = 1024 on a CPU,
4096 on a GPU). Best-of, because a roof is what the machine can do, not what it did while busy.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from engine.calc.specs import THIS_MACHINE, GPUSpec
from engine.core import paths
from engine.core.load import busy_during, cores, cpu_seconds, is_busy, loadavg_1m, others_during

DEFAULT_DTYPES = ("fp32", "bf16")


@dataclass(frozen=True)
class MachineMeasurement:
    machine_id: str
    measured_at: str  # ISO 8601 UTC
    device: str  # "cpu" or "cuda"
    name: str  # "this machine (measured)" or "this machine (<GPU name>, measured)"
    read_bytes_per_s: float
    copy_bytes_per_s: float  # bytes read + bytes written
    matmul_flops_per_s: dict[str, float]  # per precision
    matmul_n: int
    memory_bytes: float  # installed RAM, or the GPU's memory
    loadavg_1m: float = float("nan")  # the machine's load while it was measured
    notes: list[str] = field(default_factory=list)
    # cores' worth of CPU other programs took while it was measured (None: not read)
    others: float | None = None

    @property
    def busy(self) -> bool:
        """The one busy verdict (engine.core.load.busy_during): other programs' CPU while it was measured, where
        read, else the load average (a lagging 1-minute figure read 'quiet' beside a test suite on both cores)."""
        return busy_during(math.nan if self.others is None else self.others, self.loadavg_1m)

    def gpu_spec(self) -> GPUSpec:
        """This machine as a GPUSpec for the calculator and the roofline (its roofs, measured)."""
        return machine_spec(
            self.read_bytes_per_s,
            self.matmul_flops_per_s,
            memory_bytes=self.memory_bytes,
            source=f"measured {self.measured_at}",
            name=CPU_NAME
            if self.device == "cpu"
            else self.name,  # older files said "this machine (measured)"
            matmul_n=self.matmul_n,
        )


CPU_NAME = "this machine's CPU (measured)"  # never "GPU": where the calculator's GPU is this machine's CPU


def machine_spec(
    bandwidth: float,
    flops: dict[str, float],
    *,
    memory_bytes: float | None = None,
    source: str = "measured",
    name: str | None = None,
    matmul_n: int = 1024,
) -> GPUSpec:
    """A machine's measured roofs as a GPUSpec; memory defaults to installed RAM. Only measured precisions
    are listed (a CPU has no fp16 figure: it runs fp16 through slow reference kernels, and the calculator
    reads a missing fp16 peak as "a CPU")."""
    if memory_bytes is None:
        import psutil

        memory_bytes = float(psutil.virtual_memory().total)
    peaks = dict(flops)
    return GPUSpec(
        key=THIS_MACHINE,
        name=name or (CPU_NAME if "fp16" not in peaks else "this machine (measured)"),  # no fp16 peak: a CPU
        memory_bytes=memory_bytes,
        bandwidth_bytes_per_s=bandwidth,
        peak_flops=peaks,
        sources={
            "memory": "installed RAM (psutil)",
            "bandwidth": f"{source}: torch reduction over 256 MiB",
            **{f"{k}_tflops": f"{source}: {matmul_n}^3 matmul" for k in peaks},
        },
        notes="" if "fp16" in peaks else "no fp16 figure: on a CPU fp16 runs through slow reference kernels",
    )


def measure(dtypes: Sequence[str] = DEFAULT_DTYPES, *, store: bool = True) -> MachineMeasurement:
    """Measure this machine's roofs now (a few seconds): the GPU when torch sees one, else the CPU.
    Stores the result per machine with its date unless `store` is False."""
    import torch

    from engine.runtime.hardware import measure_matmul_flops, measure_memory_bandwidth

    device = "cuda" if torch.cuda.is_available() else "cpu"
    n = 4096 if device == "cuda" else 1024
    cpu_before, t0 = cpu_seconds(), time.perf_counter()
    bw = measure_memory_bandwidth(device)
    wanted = list(dict.fromkeys([*dtypes, *(["fp16"] if device == "cuda" else [])]))
    flops = {dt: measure_matmul_flops(device, dt, n=n).flops_per_s for dt in wanted}
    if device == "cuda":
        memory = float(torch.cuda.get_device_properties(0).total_memory)
        name = f"this machine ({torch.cuda.get_device_name(0)}, measured)"
    else:
        import psutil

        memory, name = float(psutil.virtual_memory().total), CPU_NAME
    load, others = loadavg_1m(), others_during(cpu_before, time.perf_counter() - t0)
    m = MachineMeasurement(
        machine_id=paths.machine_id(),
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        device=device,
        name=name,
        read_bytes_per_s=bw.read_bytes_per_s,
        copy_bytes_per_s=bw.copy_bytes_per_s,
        matmul_flops_per_s=flops,
        matmul_n=n,
        memory_bytes=memory,
        loadavg_1m=load,
        notes=[f"load average {load:.2f} on {cores()} cores while measured"] if is_busy(load) else [],
        others=others if math.isfinite(others) else None,
    )
    if store and stores(m, latest()):
        save(m)
    return m


def stores(new: MachineMeasurement, kept: MachineMeasurement | None) -> bool:
    """Whether a new measurement replaces the stored one: always, unless it was taken busy and the stored one was
    not (a presenter's re-measure beside a test suite stored 33.9 GB/s over 52.0, labelled quiet, and every page
    then read it); the page says which one it keeps."""
    return kept is None or not new.busy or kept.busy


def best_of(a: MachineMeasurement, b: MachineMeasurement) -> MachineMeasurement:
    """The higher of two measurements' roofs, figure by figure (a busy moment only ever lowers a roof)."""
    from dataclasses import replace

    return replace(
        a,
        read_bytes_per_s=max(a.read_bytes_per_s, b.read_bytes_per_s),
        copy_bytes_per_s=max(a.copy_bytes_per_s, b.copy_bytes_per_s),
        matmul_flops_per_s={
            k: max(v, b.matmul_flops_per_s.get(k, 0.0)) for k, v in a.matmul_flops_per_s.items()
        },
    )


def path(machine_id: str | None = None) -> Path:
    return paths.home() / "machine" / f"{machine_id or paths.machine_id()}.json"


def save(m: MachineMeasurement) -> Path:
    p = path(m.machine_id)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(m), indent=2), encoding="utf-8")
    tmp.replace(p)  # atomic: a reader never sees half a file
    return p


def latest(machine_id: str | None = None) -> MachineMeasurement | None:
    """This machine's stored measurement, or None (missing or unreadable)."""
    try:
        raw = json.loads(path(machine_id).read_text(encoding="utf-8"))
        return MachineMeasurement(**raw)
    except (OSError, ValueError, TypeError):
        return None
