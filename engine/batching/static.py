"""Static batching (the chapter's section 4.2.3): a batch of prompts padded together runs until its longest
sequence finishes; rows that finished early keep their slot (and keep being computed) until then, and the
next batch waits. This is what `generate` does with a padded batch (engine.generation.generate_batch); it is
written here with the same prefill/decode steps as the in-flight scheduler so that the comparison measures
the policy, not two different code paths, and so that each row's own last token can be timestamped.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from engine.batching import kv
from engine.batching.sequence import Sequence as Seq
from engine.batching.sequence import choose_tokens
from engine.models import LoadedModel


def run_static_batch(lm: LoadedModel, seqs: Sequence[Seq]) -> None:
    """Decode `seqs` as one padded batch until every row is done; fills each Sequence's tokens and times.
    Takes `lm.lock` per forward pass, like the scheduler."""
    pad_id = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    b = len(seqs)
    for s in seqs:
        s.mark_admitted()
    with torch.inference_mode():
        with lm.lock:
            batch, logits = kv.prefill(lm, [s.prompt_ids for s in seqs], pad_id)  # logits [B, V]
            chosen = choose_tokens(logits, seqs)
        now = time.perf_counter()
        for s, t in zip(seqs, chosen, strict=True):
            s.append(t, now, b)
        feed = [s.generated[-1] for s in seqs]
        positions = [s.position for s in seqs]
        while not all(s.done for s in seqs):
            with lm.lock:
                logits = kv.decode(lm, batch, torch.tensor(feed), torch.tensor(positions))  # [B, V]
                chosen = choose_tokens(logits, seqs)
            now = time.perf_counter()
            for i, (s, t) in enumerate(zip(seqs, chosen, strict=True)):
                positions[i] += 1
                if s.done:
                    feed[i] = pad_id  # a finished row still occupies its slot: computed, thrown away
                    continue
                s.append(t, now, b)
                feed[i] = t
    end = time.perf_counter()
    for s in seqs:
        s.times.slot_released = end
