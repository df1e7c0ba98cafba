from __future__ import annotations

import pytest

from engine.runtime import hardware


def test_detect_never_crashes_and_explains():
    info = hardware.detect()
    assert info.cpu_cores_logical >= 1 and info.ram_total_bytes > 0
    if not info.has_gpu:
        assert info.gpu_reason  # the exact reason is shown on the home page
        assert info.accelerator == "cpu" and info.fp16_supported is False


def test_nvml_failing_is_reported_not_raised(monkeypatch):
    """NVML present but broken (driver/library mismatch): a reason, never a crash."""
    import pynvml

    def broken():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", broken)
    gpus, status = hardware.nvml_gpus()
    assert gpus == [] and "NVML failed to initialise" in status
    assert "NVML failed" in hardware.detect().gpu_reason or hardware.detect().has_gpu


def test_nvml_query_failure_mid_way(monkeypatch):
    import pynvml

    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    monkeypatch.setattr(
        pynvml,
        "nvmlDeviceGetCount",
        lambda: (_ for _ in ()).throw(pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)),
    )
    gpus, status = hardware.nvml_gpus()
    assert gpus == [] and "query failed" in status


def test_measured_bandwidth_and_flops_are_plausible():
    bw = hardware.measure_memory_bandwidth("cpu", buffer_mib=64, repeats=2)
    mm = hardware.measure_matmul_flops("cpu", "fp32", n=256, repeats=2)
    assert 1e8 < bw.read_bytes_per_s < 1e13 and 1e8 < bw.copy_bytes_per_s < 1e13
    assert 1e7 < mm.flops_per_s < 1e15


@pytest.mark.gpu
def test_nvml_sees_the_gpu():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine")
    info = hardware.detect()
    assert info.gpus and info.gpus[0].source == "nvml" and info.gpus[0].memory_total_bytes > 0
