"""Static versus paged KV allocation: memory reserved against memory used.

A static cache reserves prompt + maximum output tokens for every sequence up front; a paged cache
(vLLM's PagedAttention, Kwon et al., SOSP 2023) allocates fixed blocks as tokens arrive, so a sequence
that stops early holds only what it used (rounded up to a block). NVIDIA's "Mastering LLM Techniques:
Inference Optimization" names the over-provisioned static cache as a pitfall; this module puts numbers on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.calc.memory import cached_tokens, kv_bytes_per_token
from engine.calc.specs import ModelSpec, positive_float, positive_int
from engine.core.errors import InvalidParameterError

DEFAULT_BLOCK_TOKENS = 16  # vLLM's default block size


@dataclass(frozen=True)
class PagedRow:
    output_tokens: int
    static_reserved_bytes: float  # per sequence
    paged_reserved_bytes: float  # per sequence: used tokens rounded up to whole blocks
    used_bytes: float  # per sequence: what the tokens actually occupy


@dataclass(frozen=True)
class PagedComparison:
    rows: list[PagedRow]
    static_reserved_bytes: float  # the whole spread of sequences
    paged_reserved_bytes: float
    used_bytes: float
    static_waste_fraction: float  # (static reserved - used) / static reserved
    kv_budget_bytes: float
    static_max_seqs: int  # sequences that fit the budget with static reservations
    paged_max_seqs: int  # with paging, at the spread's mean paged size
    extra_seqs: int


def output_spread(max_output_tokens: int, points: int = 8) -> list[int]:
    """An even spread of output lengths, max/points .. max: requests stop at different lengths (EOS)."""
    m = positive_int("maximum output tokens", max_output_tokens)
    return sorted({max(1, round(m * (i + 1) / points)) for i in range(points)})


def compare_paged(
    spec: ModelSpec,
    *,
    kv_dtype: str,
    prompt_tokens: int,
    max_output_tokens: int,
    output_lengths: list[int] | None = None,
    kv_budget_bytes: float,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
) -> PagedComparison:
    """static per sequence = cached(P + O_max) x KV/token; paged = ceil(cached(P + o) / block) x block x KV/token;
    max sequences = floor(budget / per-sequence reservation), paged at the spread's mean."""
    p = positive_int("prompt tokens", prompt_tokens)
    o_max = positive_int("maximum output tokens", max_output_tokens)
    block = positive_int("block size", block_tokens)
    lengths = output_lengths or output_spread(o_max)
    if any(o > o_max or o <= 0 for o in lengths):
        raise InvalidParameterError(f"output lengths must lie in 1..{o_max}")
    per_tok = kv_bytes_per_token(spec, kv_dtype)
    static_one = cached_tokens(spec, p + o_max) * per_tok
    rows = []
    for o in lengths:
        used_tokens = cached_tokens(spec, p + o)
        rows.append(
            PagedRow(o, static_one, math.ceil(used_tokens / block) * block * per_tok, used_tokens * per_tok)
        )
    static_total = sum(r.static_reserved_bytes for r in rows)
    paged_total = sum(r.paged_reserved_bytes for r in rows)
    used_total = sum(r.used_bytes for r in rows)
    budget = positive_float("KV budget", kv_budget_bytes, allow_zero=True)
    static_max = int(budget // static_one)
    paged_max = int(budget // (paged_total / len(rows)))
    return PagedComparison(
        rows=rows,
        static_reserved_bytes=static_total,
        paged_reserved_bytes=paged_total,
        used_bytes=used_total,
        static_waste_fraction=(static_total - used_total) / static_total,
        kv_budget_bytes=budget,
        static_max_seqs=static_max,
        paged_max_seqs=paged_max,
        extra_seqs=paged_max - static_max,
    )
