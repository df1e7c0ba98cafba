"""Which rows run: the in-flight scheduler's admission, KV budget and step composition as plain functions over the
rows' lengths. No torch, no threads, no clock.

The server's scheduler (engine.batching.scheduler.Scheduler) calls them at every loop on its real requests; the
serving simulator (engine.simulate) calls the same functions on a virtual clock with predicted step times, as
SGLang's CPU scheduler simulator and Vidur (Agrawal et al., MLSys 2024) drive a real scheduler's policy without a
GPU. Keeping the policy here, apart from the torch step (kvcache.Prefill, SlotCache.decode, kv.mixed_step), is the seam: a
change to admission or the KV budget changes what the server does and what the simulator predicts alike.

One loop iteration of the scheduler (and of the simulator) is: admission (`take`, then `plan_admission`: the
newcomers ride in the running rows' decode step, or go into one batched prefill run in chunks of
`prefill_chunk_columns`), one prefill chunk if a prefill is under way, then one decode step for every running row
unless the admission was a mixed step. A row retires when it has made its tokens.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar


class Row(Protocol):
    """What the policy reads of a request: its prompt length and the tokens it may still make."""

    @property
    def prompt_len(self) -> int: ...

    @property
    def remaining(self) -> int: ...


@dataclass(frozen=True)
class Limits:
    """The scheduler's knobs (engine.batching.scheduler.Scheduler's constructor arguments)."""

    max_batch: int  # rows decoded together
    kv_budget_bytes: int
    kv_bytes_per_token: int
    prefill_chunk_tokens: int  # tokens of one prefill chunk, all admitted rows together
    mixed_prompt_tokens: int  # newcomers' prompt tokens one decode step carries (one prompt at least)


T = TypeVar("T")


def fits(
    limits: Limits, running: Sequence[Row], prefilling: Sequence[Row], cache_length: int, req: Row
) -> bool:
    """Padded KV at the worst moment if `req` joins: rows x (window + longest remaining) x bytes/token, the window
    being the slot cache's (`cache_length` columns) widened by any prompt being prefilled. Rows never shrink the
    window before the longest finishes, so this bounds the real peak."""
    rows = [*running, *prefilling, req]
    length = max([cache_length, req.prompt_len] + [s.prompt_len for s in prefilling])
    longest_left = max(s.remaining for s in rows)
    return len(rows) * (length + longest_left) * limits.kv_bytes_per_token <= limits.kv_budget_bytes


def take(
    queue: deque[T],
    running: Sequence[Row],
    cache_length: int,
    limits: Limits,
    row: Callable[[T], Row],
    dropped: Callable[[T], bool] = lambda _item: False,
) -> list[T]:
    """Pop the waiting requests that have a slot and fit, first come first served: the head that does not fit
    stops the queue (it waits for memory rather than being skipped). `dropped(item)` says the head was cancelled
    (the caller finishes it); it is removed and the next one looked at. The first request always gets in when
    nothing runs (its own size was checked when it was submitted)."""
    taken: list[T] = []
    while queue and len(running) + len(taken) < limits.max_batch:
        head = queue[0]
        if dropped(head):
            queue.popleft()
            continue
        if (running or taken) and not fits(limits, running, [row(t) for t in taken], cache_length, row(head)):
            break
        taken.append(queue.popleft())
    return taken


def mixed_keep(prompt_lengths: Sequence[int], limits: Limits) -> int:
    """How many of the first newcomers one decode step carries: their prompts within `mixed_prompt_tokens`
    together (one at least). Each prompt token costs the step real compute (about 2.5 ms per token for
    smollm2-135m fp32 on one core, against ~106 ms for a 4-row decode step), so a step carrying three 12-token
    prompts was 1.5-1.7x a plain step; one at a time keeps it near 1.25x."""
    keep, total = 0, 0
    for n in prompt_lengths:
        if keep and total + n > limits.mixed_prompt_tokens:
            break
        keep, total = keep + 1, total + n
    return keep


def prefill_chunk_columns(rows: int, limits: Limits) -> int:
    """Columns of one chunk of a batched prefill of `rows` prompts: the chunk budget shared by the rows."""
    return max(1, limits.prefill_chunk_tokens // rows)


def plan_admission(
    prompt_lengths: Sequence[int], running: int, limits: Limits, model_mixes: Callable[[int], bool]
) -> int:
    """How the newcomers (`prompt_lengths`, in queue order) join: returns k > 0 when the first k ride in the
    running rows' decode step (the rest go back to the head of the queue), 0 when all go into one batched prefill.
    A mixed step needs rows running and the k prompts within one prefill chunk (longer ones are chunked so the
    running rows never wait for a whole long prompt); `model_mixes(k)` adds what the policy cannot know (the model's
    attention takes the step's mask, no row runs compiled)."""
    keep = mixed_keep(prompt_lengths, limits)
    if running and sum(prompt_lengths[:keep]) <= limits.prefill_chunk_tokens and model_mixes(keep):
        return keep
    return 0
