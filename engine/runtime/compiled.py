"""Compiled decode: one decode step with static shapes through the slot cache (engine.runtime.kvcache), compiled
once per model, beside `generate` as gpt-fast keeps its static cache and decode step beside its generate loop.

The same slot table with static shapes, so that one torch.compile graph - and on CUDA one CUDA graph per
(rows, columns), replayed with a single launch - serves every step (gpt-fast's recipe: a preallocated KV cache
written by index, the whole buffer attended under a mask). Each step writes its new column through an index tensor
into the whole buffer (an in-place index_put, no copy: a write through a row slice made inductor copy the slice
every step) and the model reads every column of the first n rows; the 4D mask says which columns are real.
GPT-Neo's local-attention layers mask relative to the last column the model sees (its `bias` buffer), so where the
buffer is wider than that window the view is right-aligned instead: gathered so that the new column is the last
one (a copy of the window, only then). Greedy tokens equal the eager path's (tests/test_compiled.py).

`generate` (engine.runtime.generation, `GenerationConfig(compile=True)`) and the shared scheduler
(engine.batching.scheduler, `compile_decode`) both run it.
"""

from __future__ import annotations

import shutil
import threading
import time
import weakref
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from engine.runtime.kvcache import _ALIGN, _CACHE, SlotCache, right_aligned


def static_step(model, dtype: torch.dtype, cache: SlotCache, input_ids, position_ids, mask) -> torch.Tensor:
    """One decode step with static shapes through `cache` (its window in static mode): input_ids and
    position_ids [n, 1], mask [n, C] (1 = a real token; the new column included). Returns logits [n, V] fp32.
    The 4D mask is additive (0 or the dtype's minimum), which both eager and SDPA attention take as it is."""
    w = cache.window
    real = mask != 0  # [n, C]
    if w.right:
        assert w.col is not None
        at = right_aligned(w.col, real.shape[1])  # [C]
        real = real.index_select(1, at.clamp(min=0)) & (at >= 0)
    additive = torch.zeros(real.shape, dtype=dtype, device=real.device).masked_fill(
        ~real, torch.finfo(dtype).min
    )
    out = model(
        input_ids=input_ids,
        attention_mask=additive[:, None, None, :],  # [n, 1, 1, C]
        position_ids=position_ids,
        use_cache=True,
        logits_to_keep=1,
        **{_CACHE: cache},
    )
    return out.logits[:, -1, :].float()


SUPPORTED_FAMILIES = ("gpt_neo", "llama")  # model_type: what the static step has been checked on (tests)
SUPPORTED_ATTENTION = ("eager", "sdpa")  # implementations that take an additive 4D mask as it is
# graphs dynamo keeps per code object: the shape classes (`shape_class`) of every model loaded in the process
DYNAMO_RECOMPILE_LIMIT = 64


def unsupported_reason(lm) -> str:
    """Why this model cannot take the compiled step ("" when it can)."""
    config = lm.model.config
    family = getattr(config, "model_type", "?")
    if family not in SUPPORTED_FAMILIES:
        return (
            f"compiled decode covers the GPT-Neo and Llama families (model_type {', '.join(SUPPORTED_FAMILIES)}); "
            f"{lm.name} is {family}"
        )
    attn = getattr(config, "_attn_implementation", None) or "eager"
    if attn not in SUPPORTED_ATTENTION:
        return f"compiled decode needs eager or SDPA attention; {lm.name} runs {attn}"
    if getattr(config, "sliding_window", None) and family != "gpt_neo":
        return f"{lm.name} has a sliding window, which the static step's mask does not apply"
    if lm.device == "cpu" and not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        return "torch.compile's CPU backend needs a C++ compiler and none is on PATH (c++, g++ or clang++)"
    return ""


def compile_mode(device: str) -> str:
    """On CUDA, CUDA graphs: the whole step replayed with one launch instead of hundreds of small kernels launched
    from Python (the first H200 run measured GPT-Neo 1.3B eager at 12.8 ms a step, 6% of the read bandwidth: the
    launch-bound regime graphs remove). On the CPU there are no graphs to replay."""
    return "reduce-overhead" if device.startswith("cuda") else "default"


@dataclass
class CompileStatus:
    """What the compiled step has done so far; pages and the CLI show it."""

    state: str = "not compiled"  # "not compiled" | "compiling" | "ready" | "failed"
    mode: str = ""
    compile_s: dict[str, float] = field(default_factory=dict)  # shape class -> first call's seconds (compile)
    compiling_since: float | None = None  # perf_counter when the compile under way began
    compiling_shape: str = ""
    reason: str = ""  # why it failed (then every step runs the same step eagerly)
    cudagraph_skips: int = 0  # graphs inductor compiled but did not capture as CUDA graphs (its log says why)

    def to_dict(self) -> dict:
        return {
            "state": self.state,
            "mode": self.mode,
            "compile_s": dict(self.compile_s),
            "compiling_s": None
            if self.compiling_since is None
            else time.perf_counter() - self.compiling_since,
            "compiling_shape": self.compiling_shape,
            "reason": self.reason,
            "cudagraph_skips": self.cudagraph_skips,
        }


class CompiledDecode:
    """The static decode step of one loaded model, compiled once and kept (`compiled_decode(lm)` returns the same
    object for the same model): torch.compile with dynamic shapes, so one graph serves every batch of more than
    one row and every buffer width (one row is a graph of its own: dynamo specialises a size of 1), and on CUDA
    one CUDA graph is recorded per (rows, columns). The first call per shape class compiles: 25 to 65 s on this
    2-core CPU for the models here (bench/decode.py reports it). If compiling fails, the step runs eagerly (the
    same function, the same tokens) and `status.reason` says why."""

    def __init__(self, lm) -> None:
        self.model = lm.model
        self.device = lm.device
        self.dtype = next(lm.model.parameters()).dtype
        config = lm.model.config
        layers = getattr(config, "attention_layers", None) or ()
        self.window = int(getattr(config, "window_size", 0) or 0) if "local" in layers else 0
        self.status = CompileStatus(mode=compile_mode(self.device))
        self._lock = threading.Lock()
        self._pool: OrderedDict[tuple[int, int], SlotCache] = OrderedDict()
        self._fn = None
        model, dtype = self.model, self.dtype

        def step(cache, input_ids, position_ids, mask):
            return static_step(model, dtype, cache, input_ids, position_ids, mask)

        self._eager = step
        # CUDA graph trees keep their state in the thread that recorded them: a graph replayed from another thread
        # fails inductor's `assert torch._C._is_key_in_tls(...)` (the lent H200, 2026-12-04: every run after the
        # first thread's, e.g. the scheduler's or the next request's worker thread, then fell back to eager). So on
        # CUDA every compiled step runs on this decoder's one thread (a handoff of microseconds against a step of a
        # millisecond or more); on the CPU there are no graphs and the step runs where it is called.
        self._graphs_thread = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="compiled-decode")
            if self.status.mode == "reduce-overhead"
            else None
        )

    def right_aligned(self, columns: int) -> bool:
        """GPT-Neo's local layers see the right window only when the view ends at the new column (module doc)."""
        return bool(self.window) and columns > self.window

    def _compiled(self):
        if self._fn is None:
            config = torch._dynamo.config  # `cache_size_limit` before torch 2.6 named it
            name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
            setattr(config, name, max(getattr(config, name), DYNAMO_RECOMPILE_LIMIT))
            self._fn = _compile(self._eager, self.status.mode)
        return self._fn

    def __call__(self, cache: SlotCache, input_ids, position_ids, mask) -> torch.Tensor:
        if self.status.state == "failed":
            return self._eager(cache, input_ids, position_ids, mask)
        shape = shape_class(input_ids.shape[0], cache.capacity[0], cache.window.right)
        first = shape not in self.status.compile_s
        skips = _cudagraph_skips()
        t0 = time.perf_counter()
        if first:
            with self._lock:
                self.status.state, self.status.compiling_since, self.status.compiling_shape = (
                    "compiling",
                    t0,
                    shape,
                )
        try:
            fn = self._compiled()
            if self._graphs_thread is None:
                logits = fn(cache, input_ids, position_ids, mask)
            else:
                modes = (
                    torch.is_inference_mode_enabled(),
                    torch.is_grad_enabled(),
                )  # thread-local: carried over
                logits = self._graphs_thread.submit(
                    _replay, fn, modes, cache, input_ids, position_ids, mask
                ).result()
        except Exception as exc:  # a compiler that is missing or fails: say why, run the same step eagerly
            with self._lock:
                self.status.state, self.status.compiling_since = "failed", None
                self.status.reason = _compile_failure(exc)
            return self._eager(cache, input_ids, position_ids, mask)
        if first:
            with self._lock:
                self.status.compile_s[shape] = time.perf_counter() - t0
                self.status.cudagraph_skips += _cudagraph_skips() - skips
                self.status.state, self.status.compiling_since, self.status.compiling_shape = (
                    "ready",
                    None,
                    "",
                )
        return logits

    def slot_cache(self, rows: int, columns: int) -> SlotCache:
        """An empty static slot cache for one `generate` call of `rows` prompts and up to `columns` columns,
        reused from the last calls of the same shape: a CUDA graph replays only on buffers at the addresses it
        was recorded with (new buffers record it again, at most 128 times before torch gives up on graphs)."""
        key = (rows, -(-columns // _ALIGN) * _ALIGN)
        cache = self._pool.pop(key, None) or SlotCache(rows, slack=False)
        cache.reset()
        self._pool[key] = cache
        while len(self._pool) > POOL_SIZE:
            self._pool.popitem(last=False)
        return cache


def _replay(fn, modes: tuple[bool, bool], cache, input_ids, position_ids, mask) -> torch.Tensor:
    """One step through CUDA graphs, on the decoder's graphs thread, under the caller's inference and grad modes
    (both are per thread; the graphs were recorded under them)."""
    inference, grad = modes
    with torch.inference_mode(inference), torch.set_grad_enabled(grad):
        torch.compiler.cudagraph_mark_step_begin()  # the previous step's outputs may be overwritten
        return fn(cache, input_ids, position_ids, mask)


def shape_class(rows: int, buffer_rows: int, right: bool) -> str:
    """Which compiled graph a step needs. With dynamic shapes dynamo still specialises every size that is 1 (the
    active rows, the buffer's rows), so these make separate graphs, as does the right-aligned view; widths and
    larger row counts share one (a recompile would show as a new entry in `CompileStatus.compile_s`)."""
    return (
        f"{'1 row' if rows == 1 else 'rows > 1'} in a buffer of {'1 row' if buffer_rows == 1 else 'rows > 1'}, "
        f"{'right' if right else 'left'}-aligned view"
    )


POOL_SIZE = 4  # slot caches kept per model for `generate` (batch size x length buckets)
_DECODERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_DECODERS_LOCK = threading.Lock()


def compiled_decode(lm) -> CompiledDecode:
    """The model's compiled step, made on first use and kept as long as the model lives (per model object: its
    dtype and device are fixed; shapes are torch.compile's guards). Raises CompileUnavailableError (with the
    reason) where the model cannot take it."""
    from engine.core.errors import CompileUnavailableError

    reason = unsupported_reason(lm)
    if reason:
        raise CompileUnavailableError(reason)
    with _DECODERS_LOCK:
        decoder = _DECODERS.get(lm.model)
        if decoder is None:
            decoder = _DECODERS[lm.model] = CompiledDecode(lm)
        return decoder


def compile_status(lm) -> CompileStatus | None:
    """The model's compiled step's status, or None when nothing compiled it yet."""
    with _DECODERS_LOCK:
        decoder = _DECODERS.get(lm.model)
    return None if decoder is None else decoder.status


def _compile(fn, mode: str):
    """torch.compile of the step: dynamic shapes; fullgraph, so anything that would split the step fails here
    with a reason instead of running as pieces."""
    return torch.compile(fn, dynamic=True, fullgraph=True, mode=mode)


def _cudagraph_skips() -> int:
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["cudagraph_skips"])


def _compile_failure(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = next((line for line in text if line.strip()), "")[:300]
    return f"torch.compile failed ({type(exc).__name__}: {first}); the step ran eagerly instead"
