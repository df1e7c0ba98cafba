"""The model steps both batching policies share: prefill, one decode step, and surgery on a padded KV cache.

A running batch is a transformers `DynamicCache` (5.x: `cache.layers[i].keys/values`, each
[B, kv_heads, S, head_dim]; GPT-Neo and Llama both get plain `DynamicLayer`s here - GPT-Neo's local
layers mask by distance over a full-length cache) plus a 2-D attention mask [B, S] that is 0 on left
padding. Every row's real tokens sit contiguously at the right end of the cache, so distances between
real tokens - what RoPE (Llama) and GPT-Neo's local window see - are the same as in a solo run; the
position ids we pass are each row's own (0-based, no padding counted), which is what GPT-Neo's learned
position table and Llama's rotary embedding need. That is why greedy outputs match a solo run.

Admitting a request = left-pad the shorter of (batch cache, new cache) to the longer and concatenate on the
batch axis; retiring = index-select the kept rows, then drop leading columns that are padding in every
row (the cache shrinks back when the longest row leaves). Orca (Yu et al., OSDI 2022) calls this
iteration-level scheduling; NVIDIA's TensorRT-LLM calls it in-flight batching.

No lock is taken here: callers hold `lm.lock` around each call (one forward pass at a time per model).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Batch:
    """A padded running batch: the cache and its mask. `cache is None` means empty."""

    cache: Any = None  # transformers DynamicCache, layers of [B, H_kv, S, D]
    mask: torch.Tensor | None = None  # [B, S] long, 1 = real token

    @property
    def size(self) -> int:
        return 0 if self.mask is None else int(self.mask.shape[0])

    @property
    def length(self) -> int:
        return 0 if self.mask is None else int(self.mask.shape[1])

    def kv_bytes(self) -> int:
        """Bytes the cache tensors really hold, padding included."""
        if self.cache is None:
            return 0
        return int(sum(layer.keys.nbytes + layer.values.nbytes for layer in self.cache.layers if layer.keys is not None))


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


def prefill(lm, ids: Sequence[Sequence[int]], pad_id: int) -> tuple[Batch, torch.Tensor]:
    """Run the prompts (left-padded together) through the model; return the batch and last logits [B, V] fp32."""
    input_ids, mask, positions = left_pad(ids, pad_id)
    device = lm.model.device
    out = lm.model(
        input_ids=input_ids.to(device),  # [B, L]
        attention_mask=mask.to(device),  # [B, L]
        position_ids=positions.to(device),  # [B, L]
        use_cache=True,
        logits_to_keep=1,  # as `generate` does: the lm_head only for the last position
    )
    return Batch(out.cache, mask.to(device)), out.logits[:, -1, :].float()  # logits [B, V]


def decode(lm, batch: Batch, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """One step for every row: tokens [B] at positions [B]; grows the cache by one column; logits [B, V] fp32."""
    assert batch.mask is not None and batch.cache is not None
    device = lm.model.device
    mask = torch.cat([batch.mask, torch.ones((batch.size, 1), dtype=batch.mask.dtype, device=device)], dim=1)
    out = lm.model(
        input_ids=tokens.view(-1, 1).to(device),  # [B, 1]
        attention_mask=mask,  # [B, S + 1]
        position_ids=positions.view(-1, 1).to(device),  # [B, 1]
        cache=batch.cache,
        use_cache=True,
        logits_to_keep=1,
    )
    batch.cache, batch.mask = out.cache, mask
    return out.logits[:, -1, :].float()


def _pad_left(t: torch.Tensor, columns: int, dim: int) -> torch.Tensor:
    if columns == 0:
        return t
    shape = list(t.shape)
    shape[dim] = columns
    return torch.cat([torch.zeros(shape, dtype=t.dtype, device=t.device), t], dim=dim)


def merge(a: Batch, b: Batch) -> Batch:
    """Rows of `b` appended after the rows of `a`; the shorter cache is left-padded to the longer."""
    if a.size == 0:
        return b
    if b.size == 0:
        return a
    assert a.mask is not None and b.mask is not None
    length = max(a.length, b.length)
    pad_a, pad_b = length - a.length, length - b.length
    for la, lb in zip(a.cache.layers, b.cache.layers, strict=True):
        la.keys = torch.cat([_pad_left(la.keys, pad_a, 2), _pad_left(lb.keys, pad_b, 2)], dim=0)
        la.values = torch.cat([_pad_left(la.values, pad_a, 2), _pad_left(lb.values, pad_b, 2)], dim=0)
    a.mask = torch.cat([_pad_left(a.mask, pad_a, 1), _pad_left(b.mask, pad_b, 1)], dim=0)
    return a


def keep_rows(batch: Batch, rows: Sequence[int]) -> Batch:
    """Only `rows` stay (in that order); columns that are padding in every kept row are dropped."""
    if not rows:
        return Batch()
    assert batch.mask is not None
    idx = torch.tensor(list(rows), dtype=torch.long, device=batch.mask.device)
    if len(rows) != batch.size:
        batch.cache.batch_select_indices(idx)
        batch.mask = batch.mask.index_select(0, idx)
    real_cols = batch.mask.any(dim=0).nonzero()
    first = int(real_cols[0]) if len(real_cols) else batch.length
    if first > 0:
        for layer in batch.cache.layers:
            layer.keys = layer.keys[:, :, first:, :]
            layer.values = layer.values[:, :, first:, :]
        batch.mask = batch.mask[:, first:]
    return batch
