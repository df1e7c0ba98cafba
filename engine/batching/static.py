"""Static batching (the chapter's section 4.2.3): a batch of prompts padded together runs until its longest
sequence finishes; rows that finished early keep their slot (and keep being computed) until then, and the
next batch waits. This is what `generate` does with a padded batch (engine.runtime.generation.generate_batch); it is
written here with the same prefill, KV slot cache and decode step as the in-flight scheduler so that the
comparison measures the policy, not two different code paths, and so that each row's own last token can be
timestamped.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from engine.batching.scheduler import BREAKDOWN
from engine.batching.sequence import Request, choose_tokens
from engine.runtime import hardware, kvcache
from engine.runtime.metrics import memory_now
from engine.runtime.models import LoadedModel


def run_static_batch(lm: LoadedModel, seqs: Sequence[Request], spent: dict[str, float] | None = None) -> None:
    """Decode `seqs` as one padded batch until every row is done; fills each Request's tokens and times.
    Takes `lm.lock` per forward pass, like the scheduler. `spent` accumulates the step-time breakdown
    (the scheduler's BREAKDOWN parts, plus "total")."""
    spent = spent if spent is not None else {}
    for part in (*BREAKDOWN, "total"):
        spent.setdefault(part, 0.0)
    pad_id = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    b = len(seqs)
    start = time.perf_counter()
    for s in seqs:
        s.mark_admitted()

    def tick(part: str, t0: float) -> float:
        hardware.sync(lm.device)
        now = time.perf_counter()
        spent[part] += now - t0
        return now

    with torch.inference_mode():
        with lm.lock:
            t0 = time.perf_counter()
            job = kvcache.Prefill(lm, [s.prompt_ids for s in seqs], pad_id)
            logits = job.run()  # [B, V]
            t1 = tick("prefill", t0)
            chosen = choose_tokens(logits, seqs)
            t2 = tick("sampling", t1)
            cache = kvcache.SlotCache(b)
            cache.insert(job, list(range(b)), max(s.cfg.max_new_tokens for s in seqs))
            tick("cache_surgery", t2)
        now = time.perf_counter()
        for s, t in zip(seqs, chosen, strict=True):
            s.append(t, now, b)
        feed = [s.generated[-1] for s in seqs]
        positions = [s.position for s in seqs]
        while not all(s.done for s in seqs):
            with lm.lock:
                t0 = time.perf_counter()
                logits = cache.decode(lm, torch.tensor(feed), torch.tensor(positions))  # [B, V]
                t1 = tick("decode_forward", t0)
                chosen = choose_tokens(logits, seqs)
                tick("sampling", t1)
            now = time.perf_counter()
            memory = memory_now(lm.device)
            for i, (s, t) in enumerate(zip(seqs, chosen, strict=True)):
                positions[i] += 1
                if s.done:
                    feed[i] = pad_id  # a finished row still occupies its slot: computed, thrown away
                    continue
                s.see_memory(memory)
                s.append(t, now, b)
                feed[i] = t
    end = time.perf_counter()
    spent["total"] += end - start
    for s in seqs:
        s.times.slot_released = end
