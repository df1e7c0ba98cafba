"""Precisions by name, with their sizes. One table, used by loading, calculators, pages and the CLI."""

from __future__ import annotations

from typing import Final

# Bytes per element. int8/int4 are storage sizes for weight-only quantization, fp8 (E4M3) the weights and KV
# cache of fp8 checkpoints and `--kv-cache-dtype fp8` (calculators only).
BYTES_PER_ELEMENT: Final[dict[str, float]] = {
    "fp32": 4.0,
    "fp16": 2.0,
    "bf16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}
LOADABLE: Final[tuple[str, ...]] = ("fp32", "fp16", "bf16")  # what the engine can load a model in
ALIASES: Final[dict[str, str]] = {
    "float32": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "fp8_e4m3": "fp8",
    "e4m3": "fp8",
    "float8_e4m3fn": "fp8",
}


def normalize(name: str) -> str:
    key = ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in BYTES_PER_ELEMENT:
        raise ValueError(f"unknown precision {name!r}; choose one of {', '.join(BYTES_PER_ELEMENT)}")
    return key


def torch_dtype(name: str):
    import torch

    table = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    key = normalize(name)
    if key not in table:
        raise ValueError(f"{name} is a storage format for the calculators, not a dtype the engine loads")
    return table[key]
