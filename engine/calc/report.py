"""The calculator in one call: memory, fit, timing, cost and paging for one set of inputs.

The CLI (`python -m engine estimate`) and the Memory & cost page both call `estimate`, so they show the
same numbers. Every field is in base units (bytes, seconds, dollars).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.calc.cost import CostEstimate, estimate_cost
from engine.calc.memory import (
    DEFAULT_OVERHEAD,
    MaxSeqLen,
    MemoryEstimate,
    estimate_memory,
    gpus_needed,
    kv_budget_bytes,
    max_batch,
    max_seq_len,
)
from engine.calc.paged import PagedComparison, compare_paged
from engine.calc.specs import GPUSpec, ModelSpec, check_precision, positive_int
from engine.calc.timing import DATASHEET, Efficiency, TimingEstimate, estimate_timing
from engine.errors import InvalidParameterError


@dataclass(frozen=True)
class Inputs:
    """Everything the calculator is asked; one source of defaults for the CLI and the page."""

    dtype: str = "fp16"
    kv_dtype: str | None = None  # None: same as dtype
    batch: int = 1
    seq_len: int | None = None  # tokens the cache is sized for; None: prompt + output
    prompt_tokens: int = 512
    output_tokens: int = 512
    overhead: float = DEFAULT_OVERHEAD
    n_gpus: int = 1
    usd_per_gpu_hour: float | None = None  # None: no cost figures (prices are the user's)

    def resolved(self) -> Inputs:
        """Validate and fill seq_len; prompt + output must fit in seq_len."""
        dtype = check_precision("weight precision", self.dtype)
        kv = check_precision("KV precision", self.kv_dtype or dtype)
        p = positive_int("prompt tokens", self.prompt_tokens)
        o = positive_int("output tokens", self.output_tokens)
        s = positive_int("sequence length", self.seq_len) if self.seq_len is not None else p + o
        if p + o > s:
            raise InvalidParameterError(
                f"prompt ({p}) + output ({o}) tokens exceed the sequence length {s}; raise the sequence length "
                "or shorten the prompt or output"
            )
        positive_int("batch", self.batch)
        positive_int("GPUs", self.n_gpus)
        return Inputs(dtype, kv, self.batch, s, p, o, self.overhead, self.n_gpus, self.usd_per_gpu_hour)


@dataclass(frozen=True)
class Estimate:
    model: str
    gpu: str
    inputs: Inputs
    memory: MemoryEstimate
    max_batch: int
    max_seq_len: MaxSeqLen
    gpus_needed: int
    timing: TimingEstimate
    cost: CostEstimate
    paged: PagedComparison | None  # None when the weights alone leave no room for a cache


def split_prompt_output(
    seq_len: int, prompt_tokens: int | None, output_tokens: int | None
) -> tuple[int, int]:
    """Defaults when only a sequence length is given: half prompt, half output; one given, the other fills s."""
    s = positive_int("sequence length", seq_len)
    if prompt_tokens is None and output_tokens is None:
        return max(1, s // 2), max(1, s - s // 2)
    if prompt_tokens is None:
        return max(1, s - int(output_tokens or 0)), int(output_tokens or 0)
    if output_tokens is None:
        return int(prompt_tokens), max(1, s - int(prompt_tokens))
    return int(prompt_tokens), int(output_tokens)


def estimate(spec: ModelSpec, gpu: GPUSpec, inputs: Inputs, eff: Efficiency = DATASHEET) -> Estimate:
    """Memory (weights + KV + overhead), fit, max batch at s, max s at batch, GPUs needed, timing and cost."""
    i = inputs.resolved()
    assert i.seq_len is not None and i.kv_dtype is not None
    mem = estimate_memory(
        spec,
        dtype=i.dtype,
        kv_dtype=i.kv_dtype,
        batch=i.batch,
        seq_len=i.seq_len,
        gpu_memory_bytes=gpu.memory_bytes,
        overhead=i.overhead,
        n_gpus=i.n_gpus,
    )
    common = dict(
        dtype=i.dtype,
        kv_dtype=i.kv_dtype,
        gpu_memory_bytes=gpu.memory_bytes,
        overhead=i.overhead,
        n_gpus=i.n_gpus,
    )
    mb = max_batch(spec, seq_len=i.seq_len, **common)
    ms = max_seq_len(spec, batch=i.batch, **common)
    timing = estimate_timing(
        spec,
        gpu,
        dtype=i.dtype,
        kv_dtype=i.kv_dtype,
        batch=i.batch,
        prompt_tokens=i.prompt_tokens,
        output_tokens=i.output_tokens,
        n_gpus=i.n_gpus,
        eff=eff,
    )
    cost = (
        estimate_cost(timing.tokens_per_s, i.usd_per_gpu_hour, i.n_gpus)
        if i.usd_per_gpu_hour is not None
        else CostEstimate(math.nan, math.nan, timing.tokens_per_s * 3600.0)
    )
    budget = kv_budget_bytes(spec, i.dtype, gpu.memory_bytes, i.overhead, i.n_gpus)
    paged = (
        compare_paged(
            spec,
            kv_dtype=i.kv_dtype,
            prompt_tokens=i.prompt_tokens,
            max_output_tokens=i.output_tokens,
            kv_budget_bytes=budget,
        )
        if budget > 0
        else None
    )
    return Estimate(
        model=spec.name,
        gpu=gpu.name,
        inputs=i,
        memory=mem,
        max_batch=mb,
        max_seq_len=ms,
        gpus_needed=gpus_needed(mem.total_bytes, gpu.memory_bytes, spec.n_head),
        timing=timing,
        cost=cost,
        paged=paged,
    )
