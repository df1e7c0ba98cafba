"""The model steps both batching policies share: a (chunked, batched) prefill, one decode step, and a KV cache
of preallocated row slots that requests join and leave without copying the whole cache.

Layout. `SlotCache` holds, per layer, one preallocated buffer for keys and one for values,
[rows, kv_heads, columns, head_dim], plus a mask [rows, columns] (1 = real token). Active requests occupy
rows 0..n-1 (a slot table: row i is `Scheduler._running[i]`). Every row's real tokens sit contiguously and
end at the same column `end`; the model sees the window [start, end) of the first n rows, a view, no copy.
A decode step writes one column (`end`) for every row in place and moves `end` on by one. Because each row's
real tokens are contiguous, distances between them - what RoPE (Llama) and GPT-Neo's local window see - are
those of a solo run, and the position ids passed are each row's own (0-based, padding not counted): that is
why greedy outputs match a solo run token for token.

- Admission: the newcomers are prefilled together (left-padded, in chunks of at most `chunk` columns so a long
  prompt does not stall the running rows for a whole prefill: Sarathi-Serve, Agrawal et al. OSDI 2024; vLLM's
  chunked prefill), then their KV is written into the next free rows, right-aligned at `end`: one copy of the
  newcomers' own KV, nothing else moves.
- Retirement: the last active row is moved into the freed row (one row's window copied), the mask row follows.
- When `end` reaches the buffer's last column the window is moved back to the left (or the buffer grows to at
  least twice what is needed): an amortised copy, once per half a buffer of steps at most.

Orca (Yu et al., OSDI 2022) calls the policy iteration-level scheduling; NVIDIA's TensorRT-LLM calls it
in-flight batching. The previous layout concatenated the new request's cache onto the batch and index-selected
the kept rows on every retirement (a copy of the whole cache each time), and transformers' DynamicCache
re-concatenates every layer on every step; bench/batching.py measures the difference.

Compiled decode (`CompiledDecode`, `compiled_decode(lm)`): the same slot table with static shapes, so that one
torch.compile graph - and on CUDA one CUDA graph per (rows, columns), replayed with a single launch - serves every
step (gpt-fast's recipe: a preallocated KV cache written by index, the whole buffer attended under a mask). Each
step writes its new column through an index tensor into the whole buffer (an in-place index_put, no copy: a write
through a row slice made inductor copy the slice every step) and the model reads every column of the first n rows;
the 4D mask says which columns are real. GPT-Neo's local-attention layers mask relative to the last column the
model sees (its `bias` buffer), so where the buffer is wider than that window the view is right-aligned instead:
gathered so that the new column is the last one (a copy of the window, only then). Greedy tokens equal the eager
path's (tests/test_compiled.py).

No lock is taken here: callers hold `lm.lock` around each call (one forward pass at a time per model).
"""

from __future__ import annotations

import shutil
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers.cache_utils import Cache, DynamicLayer
from transformers.modeling_outputs import CausalLMOutputWithPast

_ALIGN = 64  # columns are allocated in multiples of this

# transformers 5.2x renamed the model's `past_key_values` (argument and output field) to `cache`, the old name
# deprecated until 5.40. Both are spoken, so the engine also runs under an older transformers (a GPU image's).
_CACHE = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def left_pad(ids: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids [B, L], mask [B, L], position_ids [B, L]) for rows of different lengths, padded on the left."""
    longest = max(len(r) for r in ids)
    input_ids = torch.full((len(ids), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(ids), longest), dtype=torch.long)
    for i, row in enumerate(ids):
        if row:
            input_ids[i, longest - len(row) :] = torch.tensor(list(row), dtype=torch.long)
            mask[i, longest - len(row) :] = 1
    # each row's own positions; pads get 1 (masked anyway), as transformers' generate does
    positions = (mask.cumsum(dim=1) - 1).masked_fill(mask == 0, 1)
    return input_ids, mask, positions


class Prefill:
    """A left-padded prefill of several prompts, run `chunk` columns at a time (`step()` until it returns logits)."""

    def __init__(self, lm, ids: Sequence[Sequence[int]], pad_id: int, chunk: int | None = None) -> None:
        self.lm = lm
        self.input_ids, self.mask, self.positions = (t.to(lm.model.device) for t in left_pad(ids, pad_id))
        self.lengths = [len(r) for r in ids]
        self.chunk = chunk or self.columns
        self.done_cols = 0
        self.cache = None  # transformers DynamicCache, layers of [B, H_kv, done_cols, D]

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def columns(self) -> int:
        return int(self.input_ids.shape[1])

    @property
    def finished(self) -> bool:
        return self.done_cols >= self.columns

    def step(self) -> torch.Tensor | None:
        """Run the next chunk; return the last position's logits [B, V] fp32 after the final chunk, else None."""
        lo, hi = self.done_cols, min(self.columns, self.done_cols + self.chunk)
        out = self.lm.model(
            input_ids=self.input_ids[:, lo:hi],  # [B, hi - lo]
            attention_mask=self.mask[:, :hi],  # [B, hi]: past chunks + this one
            position_ids=self.positions[:, lo:hi],
            use_cache=True,
            logits_to_keep=1,  # as `generate` does: the lm_head only for the last position
            **{_CACHE: self.cache},
        )
        self.cache, self.done_cols = getattr(out, _CACHE), hi
        return out.logits[:, -1, :].float() if self.finished else None

    def run(self) -> torch.Tensor:
        while True:
            logits = self.step()
            if logits is not None:
                return logits


@dataclass
class _Window:
    start: int = 0
    end: int = 0
    # A compiled (static-shape) step: the new column is written at `col`, a tensor [1] (a Python int would be a
    # new graph every step), and the model reads every column; `right`: the view is right-aligned (see module doc).
    static: bool = False
    col: torch.Tensor | None = None
    right: bool = False


class _SlotLayer(DynamicLayer):
    """One layer's K and V buffers [rows, H_kv, columns, D]; `update` writes the new columns at `end` in place and
    returns the window of the first `n` rows (a view)."""

    def __init__(self, window: _Window) -> None:
        super().__init__()
        self.window = window
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        w, n, q = self.window, key_states.shape[0], key_states.shape[2]
        if w.static:
            return self._static_update(key_states, value_states)
        self.keys[:n, :, w.end : w.end + q] = key_states
        self.values[:n, :, w.end : w.end + q] = value_states
        return self.keys[:n, :, w.start : w.end + q], self.values[:n, :, w.start : w.end + q]

    def _static_update(self, key_states: torch.Tensor, value_states: torch.Tensor):
        """key/value_states [n, H_kv, 1, D] into column `col` of rows 0..n-1; returns [n, H_kv, C, D] views (or
        right-aligned gathers)."""
        w, n = self.window, key_states.shape[0]
        assert w.col is not None
        rows = torch.arange(n, device=key_states.device).view(-1, 1)  # [n, 1]
        col = w.col.view(1, 1)  # [1, 1]
        self.keys[rows, :, col] = key_states.permute(0, 2, 1, 3)  # [n, 1, H_kv, D]: in place, whole buffer
        self.values[rows, :, col] = value_states.permute(0, 2, 1, 3)
        keys, values = self.keys[:n], self.values[:n]
        if w.right:
            idx = right_aligned(w.col, keys.shape[2]).clamp(min=0)
            keys, values = keys.index_select(2, idx), values.index_select(2, idx)
        return keys, values

    def get_seq_length(self) -> int:
        return self.window.end - self.window.start

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0


class SlotCache(Cache):
    """Preallocated KV rows (a slot table) for up to `max_rows` requests; see the module docstring."""

    def __init__(self, max_rows: int, *, slack: bool = True) -> None:
        """`slack`: allocate columns for twice what is needed (the scheduler: its window slides as rows come and
        go); False allocates what the first request needs, rounded up to 64 columns (one `generate` call)."""
        self.window = _Window()
        super().__init__(layers=[])
        self.max_rows = max_rows
        self.slack = slack
        self.n = 0  # active rows: 0..n-1
        self.mask: torch.Tensor | None = None  # [rows, columns] long
        self.copied_bytes = 0  # cache surgery so far (admissions, retirements, relayouts)

    # ---------------------------------------------------------------- shape
    @property
    def capacity(self) -> tuple[int, int]:
        return (0, 0) if self.mask is None else (int(self.mask.shape[0]), int(self.mask.shape[1]))

    @property
    def length(self) -> int:
        return self.window.end - self.window.start

    def nbytes(self) -> int:
        """Bytes the preallocated buffers hold (all slots, all columns)."""
        return int(sum(la.keys.nbytes + la.values.nbytes for la in self.layers))

    def window_bytes(self) -> int:
        """Bytes of the window the model reads: active rows x window columns, padding included."""
        if not self.layers or self.n == 0:
            return 0
        k = self.layers[0].keys
        per_col_row = k.shape[1] * k.shape[3] * k.element_size() * 2 * len(self.layers)
        return int(self.n * self.length * per_col_row)

    def _reserve(self, rows: int, left: int, right: int, like: Cache) -> None:
        """Make room for `rows` active rows, `left` columns before `end` and `right` columns from `end` on,
        moving the window (and growing the buffers) only when they do not fit."""
        w = self.window
        r_cap, c_cap = self.capacity
        if self.layers and rows <= r_cap and left <= w.end and w.end + right <= c_cap:
            return
        if self.layers and self.n == 0 and rows <= r_cap and left + right <= c_cap:
            w.start = w.end = left  # empty: the buffers are reused as they are (their addresses too)
            return
        span = max(left, self.length)
        if rows > r_cap:
            r_cap = min(self.max_rows, max(rows, 2 * r_cap, 8))
        if not self.layers or span + right > c_cap or (self.slack and 2 * span > c_cap):
            need = (2 if self.slack else 1) * (span + right)
            c_cap = max(2 * c_cap if self.slack else 0, -(-need // _ALIGN) * _ALIGN)
        new_end = span
        new_start = new_end - self.length
        src = like.layers if not self.layers else self.layers
        layers = []
        for la in src:
            shape = (r_cap, la.keys.shape[1], c_cap, la.keys.shape[3])
            nl = _SlotLayer(w)
            nl.keys = torch.zeros(shape, dtype=la.keys.dtype, device=la.keys.device)
            nl.values = torch.zeros(shape, dtype=la.values.dtype, device=la.values.device)
            # CUDA graphs read these in place instead of copying them in every replay; a new buffer (growth)
            # makes them record again, not recompile
            torch._dynamo.mark_static_address(nl.keys)
            torch._dynamo.mark_static_address(nl.values)
            if self.layers and self.n:
                nl.keys[: self.n, :, new_start:new_end] = la.keys[: self.n, :, w.start : w.end]
                nl.values[: self.n, :, new_start:new_end] = la.values[: self.n, :, w.start : w.end]
                self.copied_bytes += 2 * la.keys[: self.n, :, w.start : w.end].nbytes
            layers.append(nl)
        mask = torch.zeros((r_cap, c_cap), dtype=torch.long, device=src[0].keys.device)
        if self.mask is not None and self.n:
            mask[: self.n, new_start:new_end] = self.mask[: self.n, w.start : w.end]
        self.layers, self.mask = layers, mask
        w.start, w.end = new_start, new_end

    # ---------------------------------------------------------------- surgery
    def insert(self, prefill: Prefill, keep: Sequence[int], remaining: int) -> None:
        """Append rows `keep` of a finished prefill after the active rows, right-aligned at `end`;
        `remaining`: most tokens any row may still add (sizes the buffer)."""
        if not keep:
            return
        w = self.window
        cols = prefill.columns
        longest = max(prefill.lengths[j] for j in keep)
        self._reserve(self.n + len(keep), cols, remaining + 1, prefill.cache)
        a, b = self.n, self.n + len(keep)
        idx = torch.tensor(list(keep), dtype=torch.long, device=prefill.mask.device)
        whole = len(keep) == prefill.rows
        for sl, pl in zip(self.layers, prefill.cache.layers, strict=True):
            k, v = (
                (pl.keys, pl.values)
                if whole
                else (pl.keys.index_select(0, idx), pl.values.index_select(0, idx))
            )
            sl.keys[a:b, :, w.end - cols : w.end] = k
            sl.values[a:b, :, w.end - cols : w.end] = v
            self.copied_bytes += k.nbytes + v.nbytes
        assert self.mask is not None
        new_start = min(w.start, w.end - longest) if self.n else w.end - longest
        if new_start < w.start and self.n:
            self.mask[: self.n, new_start : w.start] = 0  # older rows have no tokens there
        self.mask[a:b] = 0
        self.mask[a:b, w.end - cols : w.end] = prefill.mask if whole else prefill.mask.index_select(0, idx)
        w.start, self.n = new_start, b

    def retire(self, rows: Sequence[int]) -> list[int]:
        """Free `rows`; the last active rows move into the holes. Returns the new order as old row indices."""
        order = list(range(self.n))
        gone = set(rows)
        w = self.window
        for i in sorted(gone, reverse=True):
            last = len(order) - 1
            if i != last:
                src = order[last]
                # the moved row's data lives at physical row `last`; copy it to physical row i
                for la in self.layers:
                    la.keys[i, :, w.start : w.end] = la.keys[last, :, w.start : w.end]
                    la.values[i, :, w.start : w.end] = la.values[last, :, w.start : w.end]
                    self.copied_bytes += 2 * la.keys[i, :, w.start : w.end].nbytes
                assert self.mask is not None
                self.mask[i] = self.mask[last]
                order[i] = src
            order.pop()
        self.n = len(order)
        self._trim()
        return order

    def _trim(self) -> None:
        """Drop leading window columns that are padding in every active row."""
        w = self.window
        if self.n == 0:
            w.start = w.end
            return
        assert self.mask is not None
        real = self.mask[: self.n, w.start : w.end].any(dim=0).nonzero()
        if len(real):
            w.start += int(real[0])

    # ---------------------------------------------------------------- the step
    def reset(self) -> None:
        """No active rows; the buffers stay allocated for the next request (a compiled step's CUDA graphs read
        them at the same addresses)."""
        self.n = 0
        self.window.start = self.window.end = 0
        if self.mask is not None:
            self.mask.zero_()

    def decode(
        self, lm, tokens: torch.Tensor, positions: torch.Tensor, step: CompiledDecode | None = None
    ) -> torch.Tensor:
        """One step for every active row: tokens [n] at positions [n]; logits [n, V] fp32. With `step` (a
        CompiledDecode) the step has static shapes and runs compiled; the tokens are the same."""
        assert self.mask is not None and self.n > 0
        self._reserve(self.n, 0, 1, self)
        w, device = self.window, lm.model.device
        self.mask[: self.n, w.end] = 1
        if step is not None:
            w.static, w.col, w.right = (
                True,
                torch.tensor([w.end], device=device),
                step.right_aligned(self.capacity[1]),
            )
            try:
                logits = step(
                    self,
                    tokens.view(-1, 1).to(device),  # [n, 1]
                    positions.view(-1, 1).to(device),  # [n, 1]
                    self.mask[: self.n],  # [n, C]: every column of the buffer
                )
            finally:
                w.static, w.col = False, None
            w.end += 1
            return logits
        # One row has no padding in its (trimmed) window: no mask, as `generate` drops an all-ones mask, so the
        # attention takes its unmasked (flash) kernel.
        mask = None if self.n == 1 else self.mask[: self.n, w.start : w.end + 1]  # [n, S + 1]
        out = lm.model(
            input_ids=tokens.view(-1, 1).to(device),  # [n, 1]
            attention_mask=mask,
            position_ids=positions.view(-1, 1).to(device),  # [n, 1]
            use_cache=True,
            logits_to_keep=1,
            **{_CACHE: self},
        )
        w.end += 1
        return out.logits[:, -1, :].float()

    def mixed(
        self,
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
        n, k = self.n, len(prompts)
        lengths = [len(p) for p in prompts]
        assert n > 0 and k > 0 and min(lengths) > 0 and self.mask is not None
        self._reserve(n + k, max(lengths) - 1, remaining + 1, self)
        w, device, mask = self.window, lm.model.device, self.mask
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
        row_of = torch.tensor([*range(n), *(n + j for j, ln in enumerate(lengths) for _ in range(ln))])  # [T]
        past_real = mask[:rows, start:end].clone()  # [R, W]
        past_real[n:] = 0
        key_row = torch.arange(rows).repeat_interleave(width)  # [R x W]
        see_past = (row_of[:, None] == key_row[None, :]) & (past_real.reshape(-1) != 0)[None, :]  # [T, R x W]
        idx = torch.arange(t)
        see_new = (row_of[:, None] == row_of[None, :]) & (idx[None, :] <= idx[:, None])  # [T, T]
        see = torch.cat([see_past, see_new], dim=1).to(device)
        dtype = lm.model.dtype
        additive = torch.zeros(see.shape, dtype=dtype, device=device).masked_fill(
            ~see, torch.finfo(dtype).min
        )
        plan = _MixedPlan(n, rows, start, end, spans)
        cache = _MixedCache([_MixedLayer(sl, plan) for sl in self.layers])
        keep = torch.tensor([*range(n), *(hi - 1 for _, hi in spans)], device=device)
        out = lm.model(
            input_ids=torch.tensor([flat], dtype=torch.long, device=device),  # [1, T]
            attention_mask=additive[None, None],  # [1, 1, T, R x W + T]
            position_ids=torch.tensor([pos], dtype=torch.long, device=device),  # [1, T]
            use_cache=True,
            logits_to_keep=keep,
            **{_CACHE: cache},
        )
        self.copied_bytes += sum(2 * sl.keys[0, :, :1].nbytes * sum(lengths) for sl in self.layers)
        w.start, w.end, self.n = start, end + 1, rows
        return out.logits[0].float()  # [n + k, V]


class _MixedLayer(DynamicLayer):
    """One layer during a mixed step (`SlotCache.mixed`): the forward's tokens arrive flattened into one sequence
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
    """Why the running rows' step cannot also carry these prompts ("" when it can): see SlotCache.mixed."""
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


def right_aligned(col: torch.Tensor, columns: int) -> torch.Tensor:
    """Buffer column of each of `columns` view columns when the view ends at `col` (the new token's column):
    [columns] long; negative where the view starts before the buffer (masked)."""
    return torch.arange(columns, device=col.device) + (col + 1 - columns)


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


# --------------------------------------------------------------------------------------------- compiled decode
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
            if self.status.mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()  # the previous step's outputs may be overwritten
            logits = fn(cache, input_ids, position_ids, mask)
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
