"""Output quality beside speed (chapter 4.3.4: a latency gain must be weighed against output quality).

Greedy decoding is deterministic, so any contender that computes the same function as vanilla must
produce the same tokens. Two measures of "the same":
- first divergence: the first generated position where a contender's token differs from vanilla's
  (None when the sequences are identical). Low-precision kernels usually agree for a while and then
  flip a near-tie, after which the continuations differ entirely; the position says how soon.
- exact-match rate: the fraction of the race's prompts whose whole greedy continuation equals vanilla's.
And one that does not depend on decoding: the perplexity of a fixed reference text (teacher-forced,
exp of the mean next-token cross-entropy). With random-weight presets it is near the vocabulary size
and only its equality across contenders means anything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

REFERENCE_TEXT = (
    "The key-value cache stores the attention keys and values of every token already processed, so each "
    "new token needs only one forward pass over itself instead of the whole sequence. It trades memory for "
    "time: the cache grows with the batch size, the sequence length, the number of layers and the hidden "
    "size, and on a GPU it competes with the weights for the same memory. When the cache no longer fits, "
    "the batch must shrink."
)

# The timed prompt is the first; all are used for the exact-match rate.
PROMPTS: tuple[str, ...] = (
    "Explain in two sentences why a language model generates text one token at a time.",
    "Write a short Python function that returns the factorial of n.",
    "List three ways to make neural network inference faster.",
)


def first_divergence(reference: Sequence[int], candidate: Sequence[int]) -> int | None:
    """0-based index of the first generated token that differs; None if the sequences are identical.
    A sequence that stops early (EOS) diverges at the length of the shorter one."""
    for i, (a, b) in enumerate(zip(reference, candidate, strict=False)):
        if a != b:
            return i
    if len(reference) != len(candidate):
        return min(len(reference), len(candidate))
    return None


def exact_match_rate(reference: Sequence[Sequence[int]], candidate: Sequence[Sequence[int]]) -> float:
    """Fraction of prompts whose whole greedy continuation equals the reference's."""
    pairs = list(zip(reference, candidate, strict=False))
    if not pairs:
        return math.nan
    return sum(list(a) == list(b) for a, b in pairs) / len(pairs)


def perplexity(model, tokenizer, text: str = REFERENCE_TEXT) -> float:
    """exp(mean cross-entropy) of `text` under `model`, teacher-forced in one forward pass."""
    import torch

    enc = tokenizer(text, return_tensors="pt")
    device = next(model.parameters()).device
    ids = enc["input_ids"].to(device)  # [1, T]
    with torch.inference_mode():
        logits = model(input_ids=ids, use_cache=False).logits  # [1, T, vocab]
    # Score each position's prediction of the next token, in fp32 so half-precision logits do not round.
    loss = torch.nn.functional.cross_entropy(logits[0, :-1].float(), ids[0, 1:])
    return float(torch.exp(loss))
