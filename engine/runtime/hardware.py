"""What this machine has: GPUs through NVML and torch.cuda, the CPU and RAM, and measured
memory bandwidth and matmul throughput (the roofline of the machine you actually run on).

NVML is nvidia-ml-py (`pynvml`). Without a GPU every function still answers: `gpu_reason` says
exactly why no GPU was found (no driver library, no device, a CPU-only torch build...).
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from dataclasses import dataclass, field

import psutil


@dataclass(frozen=True)
class GPUInfo:
    index: int
    name: str
    memory_total_bytes: int
    memory_used_bytes: int
    utilization_pct: float | None  # NVML's "percent of time a kernel was running" over the last sample period
    power_w: float | None
    power_limit_w: float | None
    source: str  # "nvml" or "torch.cuda"


@dataclass(frozen=True)
class HardwareInfo:
    cpu_name: str
    cpu_cores_logical: int
    cpu_cores_physical: int | None
    torch_threads: int
    ram_total_bytes: int
    ram_available_bytes: int
    gpus: tuple[GPUInfo, ...]
    gpu_reason: str  # empty when GPUs were found
    nvml_status: str
    torch_version: str
    cuda_build: str | None  # torch.version.cuda; None for a CPU-only build
    cuda_available: bool
    bf16_supported: bool
    fp16_supported: bool
    notes: tuple[str, ...] = field(default=())

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus) and self.cuda_available

    @property
    def accelerator(self) -> str:
        return "cuda" if self.has_gpu else "cpu"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def nvml_gpus() -> tuple[list[GPUInfo], str]:
    """Query every GPU through NVML. Returns (gpus, status); status explains an empty list."""
    try:
        import pynvml
    except ImportError:
        return [], "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        return [], "no NVIDIA driver on this machine (NVIDIA's management library is not installed)"
    except pynvml.NVMLError as exc:
        return [], f"NVML failed to initialise: {exc}"
    gpus: list[GPUInfo] = []
    try:
        count = pynvml.nvmlDeviceGetCount()
        for i in range(count):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                GPUInfo(
                    index=i,
                    name=name,
                    memory_total_bytes=int(mem.total),
                    memory_used_bytes=int(mem.used),
                    utilization_pct=_nvml_optional(
                        lambda h=handle: pynvml.nvmlDeviceGetUtilizationRates(h).gpu
                    ),
                    power_w=_nvml_optional(lambda h=handle: pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
                    power_limit_w=_nvml_optional(
                        lambda h=handle: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
                    ),
                    source="nvml",
                )
            )
        status = f"NVML ok: {count} device(s)"
    except pynvml.NVMLError as exc:
        status = f"NVML query failed: {exc}"
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    return gpus, status


def _nvml_optional(fn) -> float | None:
    """Some GPUs (and MIG slices) do not report power or utilisation; that is not an error."""
    import pynvml

    try:
        return float(fn())
    except pynvml.NVMLError:
        return None


def _torch_gpus() -> list[GPUInfo]:
    import torch

    gpus = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        free, total = torch.cuda.mem_get_info(i)
        gpus.append(GPUInfo(i, props.name, int(total), int(total - free), None, None, None, "torch.cuda"))
    return gpus


def detect() -> HardwareInfo:
    import torch

    nvml, nvml_status = nvml_gpus()
    cuda_build = torch.version.cuda
    cuda_available = torch.cuda.is_available()
    reason = ""
    gpus: list[GPUInfo] = list(nvml)
    if cuda_available and not gpus:
        gpus = _torch_gpus()
    if not gpus or not cuda_available:
        parts = [nvml_status]
        if cuda_build is None:
            parts.append(f"PyTorch {torch.__version__} here is built for CPUs only (no CUDA)")
        elif not cuda_available:
            parts.append("PyTorch was built with CUDA but sees no usable GPU")
        reason = "; ".join(parts)
    vm = psutil.virtual_memory()
    bf16 = (
        torch.cuda.is_bf16_supported() if cuda_available else True
    )  # CPUs run bf16 natively (AVX512-BF16/AMX) or emulated: correct either way
    return HardwareInfo(
        cpu_name=_cpu_name(),
        cpu_cores_logical=os.cpu_count() or 1,
        cpu_cores_physical=psutil.cpu_count(logical=False),
        torch_threads=torch.get_num_threads(),
        ram_total_bytes=int(vm.total),
        ram_available_bytes=int(vm.available),
        gpus=tuple(gpus),
        gpu_reason=reason,
        nvml_status=nvml_status,
        torch_version=torch.__version__,
        cuda_build=cuda_build,
        cuda_available=cuda_available,
        bf16_supported=bool(bf16),
        # fp16 on CPU runs through slow reference kernels and some ops refuse it; offer it on CUDA only.
        fp16_supported=cuda_available,
    )


def sync(device: str) -> None:
    """Wait until `device` has finished the work queued on it (gpt-fast's `device_sync`): the one place a clock is
    read after GPU work, so a timing covers the work and not only its launch. A no-op on the CPU, whose ops
    return when done."""
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize()


@dataclass(frozen=True)
class BandwidthMeasurement:
    read_bytes_per_s: float  # a reduction over a large buffer: every byte read once
    copy_bytes_per_s: float  # a copy: counts bytes read + bytes written
    buffer_bytes: int
    device: str
    repeats: int


@dataclass(frozen=True)
class MatmulMeasurement:
    flops_per_s: float
    n: int
    dtype: str
    device: str
    repeats: int


def measure_memory_bandwidth(
    device: str = "cpu", buffer_mib: int | None = None, repeats: int = 5
) -> BandwidthMeasurement:
    """Best-of-`repeats` bandwidth for a read (sum) and a copy over a buffer far larger than any cache.
    Best-of, because the question is what the memory system can do, not how noisy the machine is. On a GPU the
    buffer is 2 GiB by default: a 256 MiB read lasts ~0.1 ms on an H200, where the ~10 us of launch and sync
    around it would understate the bandwidth (and overstate every fraction of it) by a tenth."""
    import torch

    if buffer_mib is None:
        buffer_mib = 2048 if str(device).startswith("cuda") else 256
    n = buffer_mib * 2**20 // 4
    x = torch.ones(n, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    x.sum()
    y.copy_(x)  # warm-up: page faults and allocator
    sync(device)
    best_read = best_copy = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        x.sum()
        sync(device)
        best_read = min(best_read, time.perf_counter() - t0)
        t0 = time.perf_counter()
        y.copy_(x)
        sync(device)
        best_copy = min(best_copy, time.perf_counter() - t0)
    nbytes = x.numel() * x.element_size()
    return BandwidthMeasurement(nbytes / best_read, 2 * nbytes / best_copy, nbytes, device, repeats)


def measure_matmul_flops(
    device: str = "cpu", dtype: str = "fp32", n: int = 1024, repeats: int = 5
) -> MatmulMeasurement:
    """Best-of-`repeats` FLOP/s of an n x n x n matmul (2 n^3 FLOPs), in nn.Linear's layout (x @ W^T with W
    stored [out, in]), the one every model runs: on a CPU without bf16 instructions a plain bf16 `a @ b` takes
    a path about 20x slower than the one a Linear layer takes, which would make a roof no model is under."""
    import torch
    import torch.nn.functional as F

    from engine.core.dtypes import torch_dtype

    a = torch.randn(n, n, device=device).to(torch_dtype(dtype))
    b = torch.randn(n, n, device=device).to(torch_dtype(dtype))
    best = float("inf")
    with torch.inference_mode():
        F.linear(a, b)
        sync(device)
        for _ in range(repeats):
            t0 = time.perf_counter()
            F.linear(a, b)
            sync(device)
            best = min(best, time.perf_counter() - t0)
    return MatmulMeasurement(2 * n**3 / best, n, dtype, device, repeats)


def current_rss_bytes() -> int:
    return int(psutil.Process().memory_info().rss)


def available_memory_bytes() -> int:
    """Memory the OS can give this process now (RAM: psutil's `available`)."""
    return int(psutil.virtual_memory().available)


def free_memory_bytes(device: str) -> int:
    """Bytes free for a KV budget now: VRAM on a CUDA device, available RAM on a CPU."""
    if device.startswith("cuda"):
        import torch

        free, _total = torch.cuda.mem_get_info()
        return int(free)
    return available_memory_bytes()
