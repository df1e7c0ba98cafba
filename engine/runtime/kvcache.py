"""The preallocated KV cache both generation and the batching policies decode through: a slot table of rows that
requests join and leave without copying the whole cache, and a (chunked, batched) prefill that fills it.

Layout. `SlotCache` holds, per layer, one preallocated buffer for keys and one for values,
[rows, kv_heads, columns, head_dim], plus a mask [rows, columns] (1 = real token). Active requests occupy
rows 0..n-1 (a slot table: row i is the scheduler's `_running[i]`). Every row's real tokens sit contiguously and
end at the same column `end`; the model sees the window [start, end) of the first n rows, a view, no copy.
A decode step writes one column (`end`) for every row in place and moves `end` on by one. Because each row's
real tokens are contiguous, distances between them - what RoPE (Llama) and GPT-Neo's local window see - are
those of a solo run, and the position ids passed are each row's own (0-based, padding not counted): that is
why greedy outputs match a solo run token for token.

- Admission: the newcomers are prefilled together (left-padded, in chunks of at most `chunk` columns so a long
  prompt does not stall the running rows for a whole prefill: Sarathi-Serve, Agrawal et al. OSDI 2024; vLLM's
  chunked prefill), then their KV is written into the next free rows, right-aligned at `end`: one copy of the
  newcomers' own KV, nothing else moves. (The scheduler can also carry short prompts inside a decode step:
  engine.batching.kv.)
- Retirement: the last active row is moved into the freed row (one row's window copied), the mask row follows.
- When `end` reaches the buffer's last column the window is moved back to the left (or the buffer grows to at
  least twice what is needed): an amortised copy, once per half a buffer of steps at most.

Orca (Yu et al., OSDI 2022) calls the policy iteration-level scheduling; NVIDIA's TensorRT-LLM calls it
in-flight batching. A layout that concatenated each new request's cache onto the batch and index-selected the
kept rows on every retirement copies the whole cache each time, and transformers' DynamicCache re-concatenates
every layer on every step; bench/batching.py measures the difference.

The static mode of a step (`_Window.static`: the new column written through an index tensor, every column read)
is what the compiled decode step (engine.runtime.compiled) runs through.

No lock is taken here: callers hold `lm.lock` around each call (one forward pass at a time per model).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
from transformers.cache_utils import Cache, DynamicLayer
from transformers.modeling_outputs import CausalLMOutputWithPast

if TYPE_CHECKING:
    from engine.runtime.models import LoadedModel

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

    def reserve(self, rows: int, left: int, right: int, like: Cache) -> None:
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
        self.reserve(self.n + len(keep), cols, remaining + 1, prefill.cache)
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
        self, lm, tokens: torch.Tensor, positions: torch.Tensor, step: StaticStep | None = None
    ) -> torch.Tensor:
        """One step for every active row: tokens [n] at positions [n]; logits [n, V] fp32. With `step` (a
        compiled step, engine.runtime.compiled) the step has static shapes and runs compiled; the tokens are the same."""
        assert self.mask is not None and self.n > 0
        self.reserve(self.n, 0, 1, self)
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


class StaticStep(Protocol):
    """What `SlotCache.decode` needs of a static-shape step (engine.runtime.compiled.CompiledDecode)."""

    def right_aligned(self, columns: int) -> bool: ...

    def __call__(self, cache: SlotCache, input_ids, position_ids, mask) -> torch.Tensor: ...


def right_aligned(col: torch.Tensor, columns: int) -> torch.Tensor:
    """Buffer column of each of `columns` view columns when the view ends at `col` (the new token's column):
    [columns] long; negative where the view starts before the buffer (masked)."""
    return torch.arange(columns, device=col.device) + (col + 1 - columns)


def kv_bytes_per_token(lm: LoadedModel) -> int:
    """A loaded model's KV bytes per token: 2 (K, V) x layers x kv_heads x head_dim x bytes per element, from
    the calculator (engine.calc.memory) with the model's own config."""
    from engine.calc.hf_config import spec_from_hf_config
    from engine.calc.memory import kv_bytes_per_token as calc_kv

    spec = spec_from_hf_config(lm.model.config.to_dict(), name=lm.name)
    return int(calc_kv(spec, lm.dtype))
