"""The shared scheduler's mixed step: the running rows' next tokens and newcomers' whole prompts in one forward
(vLLM's mixed prefill-decode batches, Sarathi-Serve's piggybacking), written into the slot cache
(engine.runtime.kvcache.SlotCache) as an admission would place them.

No lock is taken here: callers hold `lm.lock` around each call (one forward pass at a time per model).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, DynamicLayer

from engine.runtime.compiled import SUPPORTED_ATTENTION, SUPPORTED_FAMILIES
from engine.runtime.kvcache import _CACHE, SlotCache, _SlotLayer


def mixed_step(
    cache: SlotCache,
    lm,
    tokens: torch.Tensor,
    positions: torch.Tensor,
    prompts: Sequence[Sequence[int]],
    remaining: int,
) -> torch.Tensor:
    """One forward for the active rows' next tokens (tokens, positions [n]) and the whole prompts of newcomers,
    which join as rows n..n+k-1 right-aligned at `end` like `insert` places them; logits [n + k, V] fp32 (the
    running rows' next tokens, then each newcomer's first). `remaining`: most tokens any row may add after
    this step. The running rows wait for one forward, not a prefill and a decode step: on a CPU a forward's
    cost is mostly reading the weights once (memory-bound), so a decode step that also carries a short
    prompt costs little more than the decode step alone (vLLM's mixed prefill-decode batches, Sarathi-Serve's
    piggybacking). The tokens are flattened into one sequence [1, T] with each token's own position and a 4D
    mask that lets a token see only its own row's real columns and its own earlier tokens."""
    n, k = cache.n, len(prompts)
    lengths = [len(p) for p in prompts]
    assert n > 0 and k > 0 and min(lengths) > 0 and cache.mask is not None
    cache.reserve(n + k, max(lengths) - 1, remaining + 1, cache)
    w, device, mask = cache.window, lm.model.device, cache.mask
    end = w.end
    start = min(w.start, end + 1 - max(lengths))
    if start < w.start:
        mask[:n, start : w.start] = 0  # older rows have no tokens there
    mask[:n, end] = 1
    spans, flat, pos, lo = [], [int(t) for t in tokens], [int(p) for p in positions], n
    for j, p in enumerate(prompts):
        mask[n + j] = 0
        mask[n + j, end + 1 - len(p) : end + 1] = 1
        spans.append((lo, lo + len(p)))
        flat += list(p)
        pos += range(len(p))
        lo += len(p)
    rows, width, t = n + k, end - start, lo
    # which flattened key each flattened query may see: past columns of its own row that hold a real token
    # (running rows only: a newcomer's columns are all written in this step), then its own row's new tokens
    # up to itself
    # (built where the mask lives: on a GPU a CPU index against the CUDA mask fails, seen on the lent H200)
    at = mask.device
    owner = [*range(n), *(n + j for j, ln in enumerate(lengths) for _ in range(ln))]
    row_of = torch.tensor(owner, device=at)  # [T]
    past_real = mask[:rows, start:end].clone()  # [R, W]
    past_real[n:] = 0
    key_row = torch.arange(rows, device=at).repeat_interleave(width)  # [R x W]
    see_past = (row_of[:, None] == key_row[None, :]) & (past_real.reshape(-1) != 0)[None, :]  # [T, R x W]
    idx = torch.arange(t, device=at)
    see_new = (row_of[:, None] == row_of[None, :]) & (idx[None, :] <= idx[:, None])  # [T, T]
    see = torch.cat([see_past, see_new], dim=1).to(device)
    dtype = lm.model.dtype
    additive = torch.zeros(see.shape, dtype=dtype, device=device).masked_fill(~see, torch.finfo(dtype).min)
    plan = _MixedPlan(n, rows, start, end, spans)
    step_cache = _MixedCache([_MixedLayer(sl, plan) for sl in cache.layers])
    keep = torch.tensor([*range(n), *(hi - 1 for _, hi in spans)], device=device)
    out = lm.model(
        input_ids=torch.tensor([flat], dtype=torch.long, device=device),  # [1, T]
        attention_mask=additive[None, None],  # [1, 1, T, R x W + T]
        position_ids=torch.tensor([pos], dtype=torch.long, device=device),  # [1, T]
        use_cache=True,
        logits_to_keep=keep,
        **{_CACHE: step_cache},
    )
    cache.copied_bytes += sum(2 * sl.keys[0, :, :1].nbytes * sum(lengths) for sl in cache.layers)
    w.start, w.end, cache.n = start, end + 1, rows
    return out.logits[0].float()  # [n + k, V]


class _MixedLayer(DynamicLayer):
    """One layer during a mixed step (`mixed_step`): the forward's tokens arrive flattened into one sequence
    [1, H_kv, T, D] (the running rows' next tokens, then each newcomer's prompt); `update` writes each token's K/V
    into its row and column of the slot buffers and returns [past columns of every row, flattened] + [the T new
    tokens in order], which the step's 4D mask cuts into per-row attention."""

    def __init__(self, slot: _SlotLayer, plan: _MixedPlan) -> None:
        super().__init__()
        self.slot, self.plan = slot, plan
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        p, sl = self.plan, self.slot
        rows, h, d = p.rows, key_states.shape[1], key_states.shape[3]
        past_k = sl.keys[:rows, :, p.start : p.end].transpose(0, 1).reshape(1, h, -1, d)  # [1, H, R x W, D]
        past_v = sl.values[:rows, :, p.start : p.end].transpose(0, 1).reshape(1, h, -1, d)
        k, v = key_states[0], value_states[0]  # [H, T, D]
        n = p.running
        if n:
            sl.keys[:n, :, p.end] = k[:, :n].transpose(0, 1)  # [n, H, D]
            sl.values[:n, :, p.end] = v[:, :n].transpose(0, 1)
        for j, (lo, hi) in enumerate(p.spans):
            sl.keys[n + j, :, p.end + 1 - (hi - lo) : p.end + 1] = k[:, lo:hi]
            sl.values[n + j, :, p.end + 1 - (hi - lo) : p.end + 1] = v[:, lo:hi]
        return torch.cat([past_k, key_states], dim=2), torch.cat([past_v, value_states], dim=2)


@dataclass
class _MixedPlan:
    running: int  # rows 0..running-1 each add one token at column `end`
    rows: int  # running + newcomers
    start: int  # the window's first column (after the newcomers widened it)
    end: int  # the column this step writes
    spans: list[tuple[int, int]]  # each newcomer's tokens in the flattened input [lo, hi)


class _MixedCache(Cache):
    def __init__(self, layers: list[_MixedLayer]) -> None:
        super().__init__(layers=[])
        self.layers = layers


def mixed_reason(lm, cache: SlotCache, prompt_lengths: Sequence[int]) -> str:
    """Why the running rows' step cannot also carry these prompts ("" when it can): see mixed_step."""
    config = lm.model.config
    family = getattr(config, "model_type", "?")
    if family not in SUPPORTED_FAMILIES:
        return f"{lm.name} is {family}; mixed steps are checked on {', '.join(SUPPORTED_FAMILIES)}"
    if (getattr(config, "_attn_implementation", None) or "eager") not in SUPPORTED_ATTENTION:
        return "mixed steps need eager or SDPA attention (an additive 4D mask)"
    if getattr(config, "sliding_window", None) and family != "gpt_neo":
        return "the model has a sliding window, which the mixed step's mask does not apply"
    if family == "gpt_neo":
        # GPT-Neo masks by index in the key sequence (its `bias` buffer: causal, and a local window on every other
        # layer); the flattened keys keep causal order, and within the window length the local mask masks nothing
        width = max([cache.length + 1, *prompt_lengths])
        keys = (cache.n + len(prompt_lengths)) * width + cache.n + sum(prompt_lengths)
        if keys > int(getattr(config, "window_size", 0) or 0):
            return f"{keys} flattened keys exceed GPT-Neo's local window of {config.window_size}"
    return ""
