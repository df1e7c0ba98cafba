"""How the next token is chosen: the one home of token choice for `generate`'s own loops (compiled decode) and the
shared scheduler's rows, so a request decodes the same tokens whichever path runs it.

Greedy rows of a batch share one batched argmax. A sampled row follows transformers' warper order (temperature,
top-k, top-p, then one draw; `transformers.generation.logits_process`), a repetition penalty its
RepetitionPenaltyLogitsProcessor over the row's own prompt and output.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol


class Choice(Protocol):
    """The fields of a GenerationConfig (engine.runtime.settings) that choose a token; named here so this module
    needs nothing above it."""

    do_sample: bool
    temperature: float
    top_p: float
    top_k: int
    repetition_penalty: float


def eos_ids(lm) -> set[int]:
    """The model's end-of-sequence token ids (its generation config may list several)."""
    eos = lm.model.generation_config.eos_token_id
    return set(eos if isinstance(eos, list) else [eos]) - {None}


def penalize(scores, seen: Sequence[int], penalty: float):
    """transformers' RepetitionPenaltyLogitsProcessor for one row, in place: scores [V]; `seen`: the row's
    prompt and output ids."""
    import torch

    idx = torch.tensor(list(seen), dtype=torch.long, device=scores.device)
    s = scores.gather(0, idx)
    scores.scatter_(0, idx, torch.where(s < 0, s * penalty, s / penalty))
    return scores


def sample(scores, cfg: Choice, generator=None) -> int:
    """Temperature, then top-k, then top-p (transformers' warper order), then one draw: scores [V]. `generator`
    None draws from the process-wide RNG (what `generate` does after `torch.manual_seed(cfg.seed)`)."""
    import torch

    scores = scores / cfg.temperature
    if cfg.top_k and cfg.top_k < scores.shape[-1]:
        kth = torch.topk(scores, cfg.top_k).values[-1]
        scores = scores.masked_fill(scores < kth, -math.inf)
    if cfg.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=True)
        cum = sorted_scores.softmax(-1).cumsum(-1)
        drop = cum - sorted_scores.softmax(-1) > cfg.top_p  # keep the smallest set whose mass reaches top_p
        scores = scores.scatter(0, order, sorted_scores.masked_fill(drop, -math.inf))
    probs = scores.softmax(-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def next_tokens(
    logits, cfgs: Sequence[Choice], seen: Callable[[int], Sequence[int]], generators=None
) -> list[int]:
    """The next token of every row, as `generate` chooses it: logits [B, V] fp32; `cfgs[i]`: row i's settings;
    `seen(i)`: row i's prompt and output ids (asked only for a repetition penalty); `generators[i]`: row i's RNG
    (None: the process-wide one). The scheduler's rows and a `generate` batch choose with this one function."""
    greedy = logits.argmax(dim=-1).tolist()  # [B]: one batched argmax serves every plain greedy row
    out: list[int] = []
    for i, cfg in enumerate(cfgs):
        if not cfg.do_sample and cfg.repetition_penalty == 1.0:
            out.append(int(greedy[i]))
            continue
        scores = logits[i].clone()
        if cfg.repetition_penalty != 1.0:
            penalize(scores, seen(i), cfg.repetition_penalty)
        gen = generators[i] if generators is not None else None
        out.append(sample(scores, cfg, gen) if cfg.do_sample else int(scores.argmax()))
    return out
