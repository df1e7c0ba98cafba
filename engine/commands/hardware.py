"""`python -m engine hardware`: what this machine has, and why no GPU was found when none was."""

from __future__ import annotations

from engine.runtime import hardware

HELP = "show GPUs (NVML, torch.cuda), CPU and RAM; with --measure, measured bandwidth and matmul FLOP/s"


def add_arguments(parser) -> None:
    parser.add_argument(
        "--measure", action="store_true", help="also measure memory bandwidth and matmul FLOP/s"
    )


def run(args) -> dict:
    info = hardware.detect()
    result: dict = {"hardware": info, "accelerator": info.accelerator}
    if args.measure:
        device = info.accelerator
        result["bandwidth"] = hardware.measure_memory_bandwidth(device)
        result["matmul"] = hardware.measure_matmul_flops(device, "fp16" if device == "cuda" else "fp32")
    return result


def format_text(result: dict) -> str:
    info: hardware.HardwareInfo = result["hardware"]
    lines = [
        f"CPU: {info.cpu_name} ({info.cpu_cores_logical} logical cores, torch uses {info.torch_threads} threads)",
        f"RAM: {info.ram_total_bytes / 2**30:.1f} GiB total, {info.ram_available_bytes / 2**30:.1f} GiB available",
        f"torch {info.torch_version}, CUDA build: {info.cuda_build or 'none'}",
    ]
    for g in info.gpus:
        lines.append(
            f"GPU {g.index}: {g.name}, {g.memory_used_bytes / 2**30:.1f}/{g.memory_total_bytes / 2**30:.1f} GiB used, "
            f"util {g.utilization_pct}%, power {g.power_w} W ({g.source})"
        )
    if info.gpu_reason:
        lines.append(f"No GPU: {info.gpu_reason}")
    if "bandwidth" in result:
        lines.append(f"Measured read bandwidth: {result['bandwidth'].read_bytes_per_s / 1e9:.1f} GB/s")
        lines.append(
            f"Measured matmul: {result['matmul'].flops_per_s / 1e9:.1f} GFLOP/s ({result['matmul'].dtype})"
        )
    return "\n".join(lines)
