"""Run measurements for calibration: timed generations of exact shapes, repeated, with the machine's load.

A busy machine makes every run slower than the machine can go, and by a different amount each time. Three
defences, each measured rather than assumed:
- every decode step is timed (a StoppingCriteria timestamps each new token, as engine.runtime.generation does), and
  TPOT is taken as the median step interval of a run, so a step that lost the CPU to another process does
  not move it; the vLLM-style mean (engine.runtime.metrics.summarize_steps) is kept beside it;
- each shape is repeated and the fastest repeat is kept (a run can be slowed by other work, never sped up:
  the minimum is the estimate of what the machine does; see Chen & Revels, "Robust benchmarking in noisy
  environments", 2016, which recommends the minimum for the same reason);
- the load is recorded with every run: the 1-minute load average (engine.core.load) and this process's CPU time over its wall time
  (CPU share = CPU seconds / (wall seconds x torch threads); 1.0 means every thread ran all the time).

Shapes are exact: the prompt is `prompt_tokens` token ids repeated from a fixed text, every sequence of a
batch has the same length (no padding), and `min_new_tokens` forces `output_tokens` (random-weight models
would otherwise stop at an early EOS).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from engine.core.errors import InvalidParameterError
from engine.core.load import cores, is_busy, loadavg_1m
from engine.core.stats import median
from engine.runtime import hardware
from engine.runtime.generation import greedy_kwargs
from engine.runtime.metrics import summarize_steps

PROMPT_TEXT = (
    "Write a long, detailed story about a lighthouse keeper who finds a message in a bottle. "
    "Describe the sea, the weather, the lighthouse and every step of the keeper's day. "
)


@dataclass(frozen=True)
class Shape:
    """What one run asks for: per-sequence prompt and output tokens, sequences in the batch."""

    prompt_tokens: int
    output_tokens: int
    batch_size: int = 1


@dataclass(frozen=True)
class LoadReading:
    """The machine's load around a stretch of work."""

    loadavg_1m: float  # the 1-minute load average at the end (engine.core.load.loadavg_1m)
    cpu_count: int
    cpu_share: float  # this process's CPU seconds / (wall seconds x torch threads), 0..1 (NaN if unknown)

    @property
    def busy(self) -> bool:
        """The one busy rule (engine.core.load.is_busy) on this reading."""
        return is_busy(self.loadavg_1m, self.cpu_count, self.cpu_share)

    def describe(self) -> str:
        return (
            f"load average {self.loadavg_1m:.2f} on {self.cpu_count} cores, "
            f"this process got {self.cpu_share:.0%} of its threads' time"
        )


class LoadMeter:
    """Context manager: reads process CPU time and wall time around a block; `.reading` after it."""

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads
        self.reading: LoadReading | None = None

    def __enter__(self) -> LoadMeter:
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        cpu, wall = time.process_time() - self._cpu0, time.perf_counter() - self._wall0
        self.reading = load_reading(cpu, wall, self.threads)


def _torch_threads() -> int:
    try:
        import torch

        return max(1, torch.get_num_threads())
    except ImportError:
        return 1


def load_reading(
    cpu_s: float, wall_s: float, threads: int | None = None, loadavg: float | None = None
) -> LoadReading:
    """cpu_share = cpu_s / (wall_s x threads), clipped to 0..1; loadavg defaults to the 1-minute load average."""
    threads = threads or _torch_threads()
    share = min(1.0, cpu_s / (wall_s * threads)) if wall_s > 0 else float("nan")
    return LoadReading(float(loadavg_1m() if loadavg is None else loadavg), cores(), share)


@dataclass(frozen=True)
class TimedRun:
    """One timed generation. Times in seconds; TPOT is per decode step (each step gives every sequence a token)."""

    model: str
    dtype: str
    prompt_tokens: int  # per sequence
    output_tokens: int  # per sequence
    batch_size: int
    ttft_s: float  # request to first token (prefill + generate's setup)
    step_s_median: float  # median interval between decode steps 2..O (robust to a step that lost the CPU)
    tpot_s: float  # vLLM's TPOT, (latency - TTFT) / (O - 1): the mean, as every other run reports it
    loadavg_1m: float
    cpu_share: float
    n_layer: int | None = None  # layers run (a model cut shorter by `load_cut`)

    @property
    def busy(self) -> bool:
        return is_busy(self.loadavg_1m, cores(), self.cpu_share)


def tpot_from_steps(step_times: Sequence[float]) -> float:
    """Median of the intervals between consecutive decode steps (NaN with fewer than two steps)."""
    gaps = [b - a for a, b in itertools.pairwise(step_times)]
    return median(gaps)


def prompt_ids(tokenizer, n: int) -> list[int]:
    """Exactly n token ids of ordinary text (the fixed prompt repeated and cut)."""
    ids = tokenizer(PROMPT_TEXT, add_special_tokens=False)["input_ids"]
    if not ids:
        raise InvalidParameterError("the tokenizer gave no tokens for the calibration prompt")
    return (ids * (n // len(ids) + 1))[:n]


def timed_run(lm, shape: Shape) -> TimedRun:
    """Generate `shape` with `lm` (greedy, cache on) and time every step; the model's lock is held."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    if shape.output_tokens < 2:
        raise InvalidParameterError("a calibration run needs at least 2 output tokens to have a TPOT")
    if shape.prompt_tokens + shape.output_tokens > lm.context_length:
        raise InvalidParameterError(
            f"{shape.prompt_tokens} + {shape.output_tokens} tokens exceed {lm.name}'s context of {lm.context_length}"
        )
    times: list[float] = []

    class _Timer(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            hardware.sync(lm.device)
            times.append(time.perf_counter())
            return torch.zeros((input_ids.shape[0],), dtype=torch.bool, device=input_ids.device)

    ids = torch.tensor(
        [prompt_ids(lm.tokenizer, shape.prompt_tokens)] * shape.batch_size, device=lm.model.device
    )
    mask = torch.ones_like(ids)
    with lm.lock, torch.inference_mode(), LoadMeter() as meter:
        request_t = time.perf_counter()
        lm.model.generate(
            input_ids=ids,
            attention_mask=mask,
            **greedy_kwargs(lm, shape.output_tokens, exact=True),
            use_cache=True,
            stopping_criteria=StoppingCriteriaList([_Timer()]),
        )
    assert meter.reading is not None
    ttft, tpot, _ = summarize_steps(request_t, times, [len(times)])
    return TimedRun(
        model=lm.name,
        dtype=lm.dtype,
        prompt_tokens=shape.prompt_tokens,
        output_tokens=len(times),
        batch_size=shape.batch_size,
        ttft_s=ttft,
        step_s_median=tpot_from_steps(times),
        tpot_s=tpot,
        loadavg_1m=meter.reading.loadavg_1m,
        cpu_share=meter.reading.cpu_share,
        n_layer=getattr(lm.model.config, "num_hidden_layers", None),
    )


def measure(
    lms: Sequence, shapes: Iterable[Shape], *, repeats: int = 3, warmup: bool = True
) -> list[TimedRun]:
    """Every shape on every loaded model, `repeats` times, round-robin (models and shapes take turns, so
    a load that comes and goes touches each alike). One untimed warm-up per model first."""
    shapes = list(shapes)
    if warmup:
        for lm in lms:
            timed_run(lm, Shape(min(s.prompt_tokens for s in shapes), 4, 1))
    runs: list[TimedRun] = []
    for _ in range(repeats):
        for shape in shapes:
            for lm in lms:
                runs.append(timed_run(lm, shape))
    return runs


def load_cut(name: str, dtype: str, n_layer: int):
    """`name` in `dtype` with only its first `n_layer` decoder layers: the same kernels and head with fewer
    layers, so runs at two depths separate bytes from per-layer cost. Loaded fresh (never the shared copy)."""
    from dataclasses import replace as dc_replace

    import torch

    from engine.runtime.models import load_model

    lm = load_model(name, dtype=dtype, device="cpu")
    inner = getattr(lm.model, "model", None) or getattr(lm.model, "transformer", None)
    blocks_name = "layers" if hasattr(inner, "layers") else "h"
    blocks = getattr(inner, blocks_name, None)
    if blocks is None or n_layer >= len(blocks):
        raise InvalidParameterError(f"{name} cannot be cut to {n_layer} layers")
    setattr(inner, blocks_name, torch.nn.ModuleList(list(blocks)[:n_layer]))
    cfg = lm.model.config
    cfg.num_hidden_layers = n_layer
    if hasattr(cfg, "num_layers"):
        cfg.num_layers = n_layer
    for attr in ("layer_types", "attention_layers"):
        if isinstance(getattr(cfg, attr, None), list):
            setattr(cfg, attr, getattr(cfg, attr)[:n_layer])
    return dc_replace(lm, name=f"{name}[:{n_layer}]")


GEMV_INNER_DIMS = (256, 512, 1024, 2048, 4096, 8192)
GEMV_MATRIX_BYTES = 64e6  # well beyond a CPU's last-level cache, as a model's weights are
GEMM_ROWS = (1, 8, 32, 128, 512)
CURVE_DTYPES = ("fp32", "bf16", "fp16")


def _fastest_linear_s(x, w, repeats: int) -> float:
    """Seconds of the fastest of `repeats` `linear(x, w)` calls after one untimed call (nn.Linear's layout)."""
    import torch
    import torch.nn.functional as F

    best = math.inf
    with torch.inference_mode():
        F.linear(x, w)
        for _ in range(repeats):
            t = time.perf_counter()
            F.linear(x, w)
            best = min(best, time.perf_counter() - t)
    return best


def gemv_curve(
    dtypes: Sequence[str], inner_dims: Sequence[int] = GEMV_INNER_DIMS, *, repeats: int = 7
) -> dict[str, list[list[float]]]:
    """This machine's matrix-vector rate by inner dimension: {dtype: [[K, bytes/s], ...]}, each the fastest of
    `repeats` `torch.nn.functional.linear` calls of one token through a [N, K] weight of GEMV_MATRIX_BYTES,
    in the layout the engine keeps for it (nn.Linear's, or [K, N] where engine.runtime.cpu_layout would measure that
    faster and choose it). A decode step is such products; on a CPU their rate depends on K (a 576-wide
    model's matmuls stream slower than a 2048-wide one's), and a fit on one model shape cannot see that."""
    import torch

    from engine.core.dtypes import BYTES_PER_ELEMENT, torch_dtype
    from engine.runtime import cpu_layout

    out: dict[str, list[list[float]]] = {}
    for dt in (d for d in dtypes if d in CURVE_DTYPES):
        width = BYTES_PER_ELEMENT[dt]
        points = []
        for k in inner_dims:
            n = max(1, int(GEMV_MATRIX_BYTES / (k * width)))
            w = torch.randn(n, k).to(torch_dtype(dt))
            x = torch.randn(1, k).to(torch_dtype(dt))
            seconds = _fastest_linear_s(x, w, repeats)
            if (
                cpu_layout.enabled()
            ):  # the layout the engine would keep for this shape (engine.runtime.cpu_layout)
                wt = cpu_layout.transposed(w)
                xb = torch.randn(cpu_layout.BATCH_ROWS, k).to(x.dtype)
                transposed_s = _fastest_linear_s(x, wt, repeats)
                batch = (_fastest_linear_s(xb, w, repeats), _fastest_linear_s(xb, wt, repeats))
                if cpu_layout.keeps_transposed(seconds, transposed_s, *batch):
                    seconds = transposed_s
            points.append([float(k), n * k * width / seconds])
        out[dt] = points
    return out


def gemm_curve(
    dtypes: Sequence[str], rows: Sequence[int] = GEMM_ROWS, *, width: int = 2048, repeats: int = 3
) -> dict[str, list[list[float]]]:
    """This machine's matrix-matrix rate by rows: {dtype: [[M, FLOP/s], ...]}, each the fastest of `repeats`
    `linear` calls of M tokens through a [width, width] weight. A prefill of M tokens runs at the M-row rate:
    on a CPU 32 rows reach about half the FLOP/s of 512, so a fit on one prompt length cannot carry over."""
    import torch

    from engine.core.dtypes import torch_dtype

    out: dict[str, list[list[float]]] = {}
    for dt in (d for d in dtypes if d in CURVE_DTYPES):
        w = torch.randn(width, width).to(torch_dtype(dt))
        out[dt] = [
            [
                float(m),
                2.0 * m * width * width / _fastest_linear_s(torch.randn(m, width).to(w.dtype), w, repeats),
            ]
            for m in rows
        ]
    return out
