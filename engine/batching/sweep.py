"""Static batching measured for growing batch sizes, beside the calculator's prediction and its memory limit.

Measured: `engine.runtime.generation.generate_batch` (a padded batch through `generate`) of b copies of one prompt.
Predicted (engine.calc): a decode step streams the weights plus the batch's KV cache, t = (W + b x KV) / BW
(calc.timing.simple_decode_s), but cannot beat the compute roof t = 2 x P x b / FLOP/s
(calc.timing.simple_prefill_s with b tokens); BW and FLOP/s are calibrated from the batch-1 run and
this machine's matmul, so the curve shows where the memory-bound rule stops holding. The largest batch that
fits is calc.memory.max_batch with this device's free memory plus the weights already loaded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from engine.core.errors import InvalidParameterError, OutOfMemoryError
from engine.runtime.generation import generate_batch
from engine.runtime.hardware import free_memory_bytes
from engine.runtime.models import LoadedModel
from engine.runtime.settings import GenerationConfig

DEFAULT_SIZES = (1, 2, 4, 8, 16, 32)
SWEEP_PROMPT = "Batching shares each read of the weights between many sequences, so"


@dataclass(frozen=True)
class SweepPoint:
    batch: int
    tokens_per_s: float  # the whole batch's output tokens / wall time
    latency_s: float  # per request (every row of a static batch ends with the batch)
    tpot_s: float
    ttft_s: float
    predicted_tokens_per_s: float
    predicted_latency_s: float
    peak_memory_bytes: int


@dataclass(frozen=True)
class Sweep:
    model: str
    prompt_tokens: int
    max_new_tokens: int
    points: tuple[SweepPoint, ...]
    max_batch_fits: int  # the calculator's largest batch for this prompt + output length
    memory_bytes: float  # the memory it was computed against (free + weights)
    stopped_by_memory: bool
    calibrated_bandwidth_bytes_per_s: float
    matmul_flops_per_s: float


def _spec(lm: LoadedModel):
    from engine.calc.hf_config import spec_from_hf_config

    return spec_from_hf_config(lm.model.config.to_dict(), name=lm.name)


def run_sweep(
    lm: LoadedModel,
    sizes: Sequence[int] = DEFAULT_SIZES,
    *,
    max_new_tokens: int = 32,
    matmul_flops_per_s: float | None = None,
) -> Sweep:
    """Static batching measured per batch size against the calculator's rule. `matmul_flops_per_s`: this machine's
    matmul roof from its one stored measurement (the page passes it, so the figure it shows is the one every
    page shows); measured here, briefly, when not given."""
    from engine.calc.memory import Placement, kv_cache_bytes, max_batch
    from engine.calc.timing import simple_decode_s, simple_prefill_s
    from engine.runtime.hardware import measure_matmul_flops

    sizes = sorted({int(b) for b in sizes})
    if not sizes or sizes[0] < 1:
        raise InvalidParameterError("give at least one batch size >= 1")
    cfg = GenerationConfig(max_new_tokens=max_new_tokens)
    spec = _spec(lm)
    prompt_tokens = len(lm.tokenizer(SWEEP_PROMPT)["input_ids"])
    seq_len = prompt_tokens + max_new_tokens
    memory = free_memory_bytes(lm.device) + lm.weights_bytes
    fits = max_batch(Placement(spec, lm.dtype, memory), seq_len=seq_len)
    weights = lm.weights_bytes
    flops = (
        matmul_flops_per_s
        if matmul_flops_per_s
        else measure_matmul_flops(lm.device, lm.dtype, n=512, repeats=3).flops_per_s
    )
    generate_batch(
        lm, [SWEEP_PROMPT], GenerationConfig(max_new_tokens=4), record=False
    )  # warm-up, not counted
    measured: list[tuple[int, object]] = []
    stopped = False
    for b in sizes:
        try:
            res = generate_batch(lm, [SWEEP_PROMPT] * b, cfg, record=False)
        except OutOfMemoryError:
            stopped = True
            break
        measured.append((b, res.measurement))
    if not measured:
        raise OutOfMemoryError("even the smallest batch ran out of memory: load a smaller model or precision")
    m1 = measured[0][1]
    mean_ctx = prompt_tokens + max_new_tokens / 2

    def kv(b: int) -> float:
        return kv_cache_bytes(spec, lm.dtype, b, max(1, round(mean_ctx)))

    # calibrate bandwidth so the memory-bound rule reproduces the smallest batch's step time
    b0 = measured[0][0]
    bw = (weights + kv(b0)) / m1.tpot_s if math.isfinite(m1.tpot_s) and m1.tpot_s > 0 else math.nan
    points = []
    for b, m in measured:
        if math.isfinite(bw):
            step = max(simple_decode_s(weights, kv(b), bw), simple_prefill_s(lm.params, b, flops))
            pred_latency = m1.ttft_s * b / b0 + (max_new_tokens - 1) * step  # prefill grows with the batch
            pred_tps = b * max_new_tokens / pred_latency
        else:
            pred_latency = pred_tps = math.nan
        points.append(
            SweepPoint(
                b,
                m.tokens_per_s,
                m.latency_s,
                m.tpot_s,
                m.ttft_s,
                pred_tps,
                pred_latency,
                m.peak_memory_bytes,
            )
        )
    return Sweep(lm.name, prompt_tokens, max_new_tokens, tuple(points), fits, memory, stopped, bw, flops)
