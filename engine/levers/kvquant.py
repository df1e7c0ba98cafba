"""KV-cache quantization, measured: transformers' QuantizedCache (KIVI style, Liu et al. 2024) against the
plain DynamicCache, on the loaded model.

NVIDIA's guide names the KV cache as the memory that limits batch size: bytes per token =
2 x layers x kv_heads x head_dim x bytes per value. A quantized cache stores old tokens in `nbits` with a
scale and zero point per group and keeps the newest tokens (the residual) in full precision. We measure:
- kv_bytes: the bytes the cache really holds after a generation (quantized payload + scales + residual),
  beside the calculator's bytes (engine.calc.quant.kv_quant_bytes) for the same token counts;
- max_sequences: how many sequences of that length fit in a given byte budget, measured and predicted;
- quality at a long generation: greedy exact match and first divergent token against the plain cache.

Backends: "quanto" (optimum-quanto), "hqq" (hqq) and "fp8" (no dependency, per-tensor float8). A backend that
cannot run here (not installed, or the model has non-global attention layers, as GPT-Neo's local layers)
says why in its row.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Sequence
from dataclasses import dataclass

from engine.calc import quant as qcalc
from engine.core import libs
from engine.core.errors import InvalidParameterError
from engine.core.paths import scrub
from engine.core.spec import Spec, option
from engine.levers import runs as R
from engine.levers.speculative import _encode
from engine.race import quality
from engine.runtime.generation import greedy_kwargs
from engine.runtime.models import LoadedModel
from engine.runtime.prompt import check_context

BACKENDS: dict[str, str] = {"quanto": "optimum.quanto", "hqq": "hqq", "fp8": ""}
DEFAULT_NBITS = 4
GROUP = 64  # transformers' default q_group_size
RESIDUAL = 128  # transformers' default residual_length


@dataclass(frozen=True)
class KVSpec(Spec):
    """KV-cache quantization against the plain cache: the page's inputs and run_kv's arguments, each declared
    once (default, bounds, help)."""

    backends: tuple[str, ...] = option(
        tuple(BACKENDS),
        "quantized caches to measure against the plain one",
        choices=tuple(BACKENDS),
        label="backend",
    )
    nbits: int = option(
        DEFAULT_NBITS,
        "bits per cached value (quanto: 2 or 4; HQQ: 2, 4 or 8)",
        choices=(4, 2, 8),
        label="bits",
    )
    max_new_tokens: int = option(
        256, "new tokens of the one greedy generation", lo=1, hi=4096, label="new tokens"
    )
    budget_gb: float = option(
        1.0,
        "memory set aside for the cache: how many sequences fit in it",
        lo=0.01,
        hi=1000.0,
        label="memory budget for the cache (GB)",
    )


def backend_status(backend: str) -> tuple[bool, str]:
    if backend not in BACKENDS:
        raise InvalidParameterError(f"unknown KV backend {backend!r}; choose from {', '.join(BACKENDS)}")
    module = BACKENDS[backend]
    if module and importlib.util.find_spec(module.split(".")[0]) is None:
        return False, f"{module} is not installed (pip install it to use the {backend} backend)"
    return True, "installed" if module else "built into transformers"


def cache_bytes(cache) -> int:
    """Bytes a cache holds: every tensor reachable from its layers (quantized payloads, scales, zero points,
    the full-precision residual), each counted once."""
    import torch

    seen: set[int] = set()

    def walk(obj, depth=0) -> int:
        if depth > 6 or id(obj) in seen:
            return 0
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            if hasattr(obj, "__tensor_flatten__") and type(obj) is not torch.Tensor:
                names, _ = obj.__tensor_flatten__()
                return sum(walk(getattr(obj, n), depth + 1) for n in names)
            return obj.numel() * obj.element_size()
        if isinstance(obj, dict):
            return sum(walk(v, depth + 1) for v in obj.values())
        if isinstance(obj, list | tuple):
            return sum(walk(v, depth + 1) for v in obj)
        if hasattr(obj, "__dict__") and depth > 0:
            return sum(walk(v, depth + 1) for k, v in vars(obj).items() if not k.startswith("__"))
        return 0

    return sum(walk(layer, 1) for layer in cache.layers)


def _scale_bytes(backend: str, fp_bytes: float) -> tuple[float, float, int]:
    """(scale, zero bytes per group, group) of the group-wise backends: a scale and a zero point per group
    in the model's precision (checked against the real tensors in tests/test_levers_kv.py)."""
    return fp_bytes, fp_bytes, GROUP


@dataclass(frozen=True)
class KVResult:
    backend: str  # "none" = DynamicCache
    status: str
    reason: str = ""
    nbits: int | None = None
    tokens: int = 0  # cached tokens (prompt + generated - 1)
    kv_bytes: int | None = None
    kv_bytes_per_token: float | None = None
    predicted_bytes: float | None = None
    predicted_ratio: float | None = None
    max_sequences: int | None = None
    predicted_max_sequences: int | None = None
    exact_match: bool | None = None
    first_divergence_token: int | None = None
    tokens_per_s: float | None = None
    full_precision_tokens: int | None = (
        None  # quanto/hqq: the newest tokens still in the residual, unquantized
    )
    quantized_ratio: float | None = (
        None  # plain bytes / quantized bytes per value: the saving past the residual
    )


def _cache(lm: LoadedModel, backend: str, nbits: int):
    from transformers import DynamicCache, QuantizedCache

    if backend == "none":
        return DynamicCache(config=lm.model.config)
    if backend == "fp8":
        return QuantizedCache(backend="fp8", config=lm.model.config)
    if backend == "hqq":
        libs.hqq_quantizer()  # deferred at the engine's import (engine.core.libs)
    return QuantizedCache(
        backend=backend, config=lm.model.config, nbits=nbits, q_group_size=GROUP, residual_length=RESIDUAL
    )


def run_kv(
    lm: LoadedModel,
    backends: Sequence[str] = ("quanto", "hqq", "fp8"),
    *,
    nbits: int = DEFAULT_NBITS,
    max_new_tokens: int = 256,
    budget_bytes: float = 1e9,
    prompt: str = quality.PROMPTS[0],
    progress: R.Progress | None = None,
) -> list[KVResult]:
    """The plain cache first (the reference), then each backend, on one greedy generation of `max_new_tokens`."""
    import torch

    if nbits not in (2, 4, 8):
        raise InvalidParameterError(f"nbits must be 2, 4 or 8, got {nbits!r}")
    if not 1 <= max_new_tokens <= 4096:
        raise InvalidParameterError(f"max new tokens must be between 1 and 4096, got {max_new_tokens}")
    if not budget_bytes > 0:
        raise InvalidParameterError(f"the memory budget must be > 0 bytes, got {budget_bytes}")
    spec = lm.spec_dict()
    values = 2 * spec["n_layer"] * spec["kv_heads"] * spec["head_dim"]
    fp_bytes = next(lm.model.parameters()).element_size()
    enc = _encode(lm, prompt)
    prompt_len = int(enc["input_ids"].shape[1])
    check_context(lm, prompt_len, max_new_tokens)
    rows: list[KVResult] = []
    reference: tuple[int, ...] | None = None
    names = ["none", *backends]
    for i, backend in enumerate(names):
        if progress is not None:
            progress(i / len(names), f"KV cache: {backend} ({i + 1}/{len(names)})")
        if backend != "none":
            ok, why = backend_status(backend)
            if not ok:
                rows.append(KVResult(backend, "skipped", why))
                continue
        try:
            cache = _cache(lm, backend, nbits)
            with lm.lock, torch.inference_mode():
                t0 = time.perf_counter()
                out = R.quiet(
                    lm.model.generate,
                    **enc,
                    **greedy_kwargs(lm, max_new_tokens, exact=True),
                    past_key_values=cache,
                )
                took = time.perf_counter() - t0
            ids = tuple(out[0, prompt_len:].tolist())
            measured = cache_bytes(cache)
            decoded = len(ids) - 1  # the last token is returned, never fed back
            residual, saving = None, None
            if (
                backend == "fp8"
            ):  # per-tensor fp32 scales for K and V of each layer, appended without a residual
                predicted = (prompt_len + decoded) * values * 1 + 2 * spec["n_layer"] * 4
                residual, saving = 0, fp_bytes / 1
            else:
                q = None
                if backend != "none":
                    scale, zero, group = _scale_bytes(backend, fp_bytes)
                    q = qcalc.KVQuant(nbits, group, scale, zero, RESIDUAL)
                    residual = decoded % RESIDUAL
                    saving = fp_bytes / (nbits / 8 + (scale + zero) / group)
                predicted = qcalc.kv_quant_bytes(values, prompt_len, decoded, fp_bytes, q)
            if reference is None:
                reference = ids
            div = quality.first_divergence(reference, ids)
            rows.append(
                KVResult(
                    backend,
                    "ok",
                    nbits=None if backend == "none" else (8 if backend == "fp8" else nbits),
                    tokens=prompt_len + decoded,
                    kv_bytes=measured,
                    kv_bytes_per_token=measured / (prompt_len + decoded),
                    predicted_bytes=predicted,
                    predicted_ratio=measured / predicted if predicted else None,
                    max_sequences=int(budget_bytes // measured) if measured else None,
                    predicted_max_sequences=int(budget_bytes // predicted) if predicted else None,
                    exact_match=div is None,
                    first_divergence_token=div,
                    tokens_per_s=len(ids) / took,
                    full_precision_tokens=residual,
                    quantized_ratio=saving,
                )
            )
        except (RuntimeError, ValueError, ImportError, TypeError, AttributeError, NotImplementedError) as exc:
            if backend == "none":
                raise
            rows.append(KVResult(backend, "failed", f"{type(exc).__name__}: {str(exc).strip()}"[:300]))
    if progress is not None:
        progress(1.0, "done")
    return rows


def verdict(row: KVResult, base: KVResult | None) -> str:
    if row.status != "ok":
        return f"{row.backend} cannot run here: {scrub(row.reason)}"
    if row.backend == "none" or base is None or not base.kv_bytes or not row.kv_bytes:
        return f"the plain cache holds {row.kv_bytes_per_token:,.0f} bytes per token: the reference."
    ratio = base.kv_bytes / row.kv_bytes
    match = (
        "keeps the same greedy tokens as the plain cache"
        if row.exact_match
        else f"its greedy output departs from the plain cache's at token {row.first_divergence_token}"
    )
    said = (
        f"{row.backend} {row.nbits}-bit holds {ratio:.1f}× "
        f"{'fewer' if ratio >= 1 else 'more'} bytes than the plain cache "
        f"({row.max_sequences:,} vs {base.max_sequences:,} sequences in the budget) and {match}."
    )
    return said + _why_this_ratio(row, ratio)


def _why_this_ratio(row: KVResult, ratio: float) -> str:
    """Why a 4-bit cache can save less than an 8-bit one on a short run: its residual window."""
    if row.quantized_ratio is None or row.full_precision_tokens is None:
        return ""
    if row.full_precision_tokens == 0:
        return (
            f" Every cached token is stored in {row.nbits} bits (no full-precision window), so {ratio:.1f}× is "
            "what it saves at any length."
        )
    return (
        f" The prompt was quantized at its first step; {row.full_precision_tokens:,} of the {row.tokens:,} tokens, "
        f"the ones made since, are still in the full-precision window (transformers keeps up to {RESIDUAL} new "
        f"tokens unquantized, then quantizes them together), so this short run saves {ratio:.1f}×; "
        f"tokens past the window cost {row.quantized_ratio:.1f}× fewer bytes (bits and a scale and zero point per "
        f"{GROUP} values), which a long context approaches."
    )
