"""The one place every run metric is computed: TTFT, TPOT, latency, tokens/s, decode tokens/s and peak memory.

Used by engine.runtime.generation (a padded `generate` batch and each of its rows) and by the batching engine
(engine.batching.sequence: each request of the static runner and of the in-flight scheduler), in the spirit of
vLLM's single `calculate_metrics` (benchmarks/benchmark_serving.py). Definitions (vLLM's; the pages say the same):

- TTFT = first token time - request time (queueing included).
- latency = last token time - request time.
- TPOT = (latency - TTFT) / (longest output - 1): the steady decode interval, first token excluded; NaN for a
  single-token output. ITL (inter-token latency) is the same interval seen per token: the batch's step times
  give each one; their mean over a request equals its TPOT.
- tokens/s = all output tokens / latency; decode tokens/s = output tokens after each row's first / (latency - TTFT).
- peak memory = the largest value seen during the run: `torch.cuda.max_memory_allocated` since the run (or
  step) began on a GPU; on a CPU the largest process RSS sampled at the run's start, every few steps and at its
  end (psutil; about 20 us a sample). Never the current value alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from engine.core.stats import median
from engine.runtime.measurement import Measurement

CUDA_KIND = "cuda max_memory_allocated"
CPU_KIND = "process RSS (CPU)"


def memory_now(device: str) -> int:
    """One sample for a peak: the CUDA allocator's high-water mark on a GPU, the process RSS on a CPU."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.max_memory_allocated())
    from engine.runtime.hardware import current_rss_bytes

    return current_rss_bytes()


class PeakMemory:
    """A running peak of the device's memory. `sample()` is cheap enough for every decode step on a CPU when
    `every` > 1 (only every `every`-th call reads RSS); on CUDA it reads the allocator's own high-water mark."""

    def __init__(self, device: str, *, every: int = 1, reset_cuda: bool = False) -> None:
        self.cuda = device.startswith("cuda")
        self.every = max(1, every)
        self._calls = 0
        self.bytes = 0
        if self.cuda and reset_cuda:
            import torch

            torch.cuda.reset_peak_memory_stats()
        self.sample(force=True)

    @property
    def kind(self) -> str:
        return CUDA_KIND if self.cuda else CPU_KIND

    def sample(self, *, force: bool = False) -> int:
        self._calls += 1
        if force or self._calls % self.every == 1 or self.every == 1:
            self.bytes = max(self.bytes, memory_now("cuda" if self.cuda else "cpu"))
        return self.bytes

    def see(self, value: int) -> None:
        """Fold in a peak observed elsewhere (the scheduler's per-step sample)."""
        self.bytes = max(self.bytes, int(value))


def timings(
    request_t: float, first_token_t: float, last_token_t: float, output_tokens: Sequence[int]
) -> dict:
    """TTFT, TPOT, latency, tokens/s and decode tokens/s (seconds, tokens) for a run of one or more rows that
    share the request time and whose first and last tokens came at the given times."""
    if not output_tokens:
        raise ValueError("no generation step was timed")
    ttft = first_token_t - request_t
    latency = last_token_t - request_t
    total = sum(output_tokens)
    longest = max(output_tokens)
    decode_tokens = total - len(output_tokens)
    return {
        "ttft_s": ttft,
        "tpot_s": (latency - ttft) / (longest - 1) if longest > 1 else math.nan,
        "latency_s": latency,
        "tokens_per_s": total / latency if latency > 0 else math.nan,
        "decode_tokens_per_s": decode_tokens / (latency - ttft)
        if latency > ttft and decode_tokens > 0
        else math.nan,
    }


def run_metrics(
    lm,
    *,
    request_t: float,
    first_token_t: float,
    last_token_t: float,
    output_tokens: Sequence[int],
    prompt_tokens: int,
    batch_size: int,
    peak: PeakMemory,
    started_at: str,
    queue_s: float,
    use_cache: bool,
    max_new_tokens: int,
) -> Measurement:
    """The Measurement of one run (one request, or a padded batch as a whole)."""
    return Measurement(
        model=lm.name,
        dtype=lm.dtype,
        device=lm.device,
        batch_size=batch_size,
        prompt_tokens=prompt_tokens,
        output_tokens=sum(output_tokens),
        **timings(request_t, first_token_t, last_token_t, output_tokens),
        peak_memory_bytes=peak.bytes,
        peak_memory_kind=peak.kind,
        use_cache=use_cache,
        started_at=started_at,
        weights_bytes=lm.weights_bytes,
        queue_s=queue_s,
        params=lm.params,
        max_new_tokens=max_new_tokens,
    )


def summarize_steps(
    request_t: float, step_times: Sequence[float], output_tokens_per_seq: Sequence[int]
) -> tuple[float, float, float]:
    """(ttft_s, tpot_s, latency_s) from the request time and the wall-clock time each decode step ended
    (`step_times[i]`: when generated token i of every still-running row existed); `timings` underneath."""
    if not step_times:
        raise ValueError("no generation step was timed")
    t = timings(request_t, step_times[0], step_times[-1], output_tokens_per_seq or [len(step_times)])
    return t["ttft_s"], t["tpot_s"], t["latency_s"]


def token_latencies(ttft_s: float, token_times: Sequence[float]) -> list[float]:
    """Seconds per generated token, from the times each token existed: the first is the TTFT (request to first
    token: the prefill), each next one the gap since the previous token (one decode step: vLLM's ITL)."""
    if not token_times:
        return []
    return [ttft_s] + [max(0.0, b - a) for a, b in pairwise(token_times)]


def without_compile(token_times: Sequence[float], compile_steps: Sequence[int]) -> tuple[list[float], float]:
    """A compiled run's token times with its compiles left out: the step that made token k (k in `compile_steps`,
    k >= 1) compiled the decode step first, so its gap is cut to the median of the run's other steps and every
    later time moves back by what was cut. Returns (times, seconds cut): the compile's own time beyond an
    ordinary step, reported once (as `compile_s`) instead of inside every per-token figure. A run with no other
    step to compare with keeps its times (0 cut)."""
    times = list(token_times)
    gaps = [b - a for a, b in pairwise(times)]
    steps = {k for k in compile_steps if 1 <= k < len(times)}
    ordinary = [g for i, g in enumerate(gaps, start=1) if i not in steps]
    if not steps or not ordinary:
        return times, 0.0
    typical = median(ordinary)
    cut = 0.0
    out = times[:1]
    for i, gap in enumerate(gaps, start=1):
        if i in steps and gap > typical:
            cut += gap - typical
            gap = typical
        out.append(out[-1] + gap)
    return out, cut


# A decode step costs about what its neighbours cost: the same work each step with the KV cache, a little more each
# step without it. So a step well above the run's median, a mean far from its median, or (with the cache) a level
# that moved between the run's start and end, is other work taking the CPU, not the model. The thresholds are wide
# (a quiet CPU run's steps stay within ~20% of their median): only what other work does crosses them.
SPIKE_OF_MEDIAN = 3.0  # a step above 3x the run's median step
MEAN_OFF_MEDIAN = 0.25  # a mean step more than 25% above or below the median step
CACHED_SHIFT = 1.5  # cache on: the last fifth's median step 1.5x the first fifth's, or the other way round
UNCACHED_FALL = (
    1.15  # cache off: the last fifth's median 15% below the first fifth's (each step re-runs more)
)
MIN_STEPS = 10  # fewer decode steps say nothing about their shape


@dataclass(frozen=True)
class StepShape:
    """A run's decode steps (its first token, the prefill, left out), in seconds: their mean (the TPOT), median,
    slowest, and the medians of the first and last fifth; `uneven` names what shows other work ("" for none)."""

    steps: int
    mean_s: float
    median_s: float
    max_s: float
    early_s: float
    late_s: float
    uneven: str  # "" | "spike" | "shift" | "fall" | "skew"


def step_shape(latencies: Sequence[float] | None, use_cache: bool) -> StepShape | None:
    """The shape of a run's per-token latencies (token_latencies: the TTFT, then each step), or None for fewer than
    MIN_STEPS decode steps. `uneven`: "spike" (a step above SPIKE_OF_MEDIAN x the median), "shift" (cache on: the
    level moved by CACHED_SHIFT), "fall" (cache off: the steps fell by UNCACHED_FALL), "skew" (the mean more than
    MEAN_OFF_MEDIAN from the median), checked in that order; "" when the steps are as smooth as the model makes them."""
    steps = [s for s in list(latencies or ())[1:] if math.isfinite(s)]
    if len(steps) < MIN_STEPS:
        return None
    k = max(2, len(steps) // 5)
    mid, mean = median(steps), sum(steps) / len(steps)
    early, late = median(steps[:k]), median(steps[-k:])
    uneven = ""
    if mid > 0 and max(steps) > SPIKE_OF_MEDIAN * mid:
        uneven = "spike"
    elif use_cache and early > 0 and late > 0 and max(late / early, early / late) >= CACHED_SHIFT:
        uneven = "shift"
    elif not use_cache and late * UNCACHED_FALL < early:
        uneven = "fall"
    elif mid > 0 and abs(mean / mid - 1) > MEAN_OFF_MEDIAN:
        uneven = "skew"
    return StepShape(len(steps), mean, mid, max(steps), early, late, uneven)
