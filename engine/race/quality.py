"""Output quality beside speed (chapter 4.3.4: a latency gain must be weighed against output quality).

Greedy decoding is deterministic, so any contender that computes the same function as vanilla must
produce the same tokens. Two measures of "the same":
- first divergence: the first generated position where a contender's token differs from vanilla's
  (None when the sequences are identical). Low-precision kernels usually agree for a while and then
  flip a near-tie, after which the continuations differ entirely; the position says how soon.
- exact-match rate: the fraction of the race's prompts whose whole greedy continuation equals vanilla's.
And two that do not depend on decoding: the perplexity of a fixed reference text (teacher-forced,
exp of the mean next-token cross-entropy; with random-weight presets it is near the vocabulary size and
only its equality across contenders means anything), and bits per byte on the first BPB_DOCUMENTS
documents of the shipped pydoc_topics text, lm-eval's definition (engine/lab/evaluation.py):
bits_per_byte = (-sum of ln p over every token / UTF-8 bytes) / ln 2, each document scored after a prefix
token (BOS, else EOS) in disjoint windows. It needs the log-probability of given tokens, which not every
engine exposes; tokenizer-independent, so lanes compare on it even where their tokens differ.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

BPB_DOCUMENTS = 8  # the first 8 of 48 documents (~5 kB): enough to compare lanes, cheap on 2 cores
BPB_WINDOW = 1024  # tokens scored per forward pass (CTranslate2's default scoring limit)

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


def peak_rss_bytes() -> int:
    """This process's own peak resident set size so far.

    Linux: VmHWM of /proc/self/status, the high-water mark of this process's address space, which starts afresh
    at exec. Not getrusage's ru_maxrss: Linux carries it across fork and exec (getrusage(2): "resource usage
    metrics are preserved across an execve"), so a race worker started by the dashboard reported the dashboard's
    own peak (its loaded models), and every lane showed the same figure. Elsewhere: ru_maxrss (bytes on macOS).
    """
    import resource
    import sys

    try:
        with open("/proc/self/status", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # "VmHWM:   13672 kB"
    except OSError:
        pass
    peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak if sys.platform == "darwin" else peak * 1024  # Linux and the BSDs report KiB


def bpb_documents() -> list[str]:
    from engine.lab.evaluation import local_documents

    return local_documents(BPB_DOCUMENTS)


def bits_per_byte(
    logprobs: Callable[[list[int]], list[float] | None], tokenizer, documents: Sequence[str] | None = None
) -> float | None:
    """lm-eval's bits per byte from `logprobs(seq)` = ln p(seq[i] | seq[:i]) for i >= 1; None when the
    engine gives none. Disjoint windows of BPB_WINDOW scored tokens, each starting from the token before."""
    documents = list(documents if documents is not None else bpb_documents())
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    total, nbytes = 0.0, 0
    for doc in documents:
        ids = list(tokenizer(doc, add_special_tokens=False)["input_ids"])
        seq = [prefix, *ids]
        for start in range(0, len(ids), BPB_WINDOW):
            window = seq[start : start + BPB_WINDOW + 1]
            lp = logprobs(window)
            if lp is None:
                return None
            if len(lp) != len(window) - 1:
                raise ValueError(f"expected {len(window) - 1} log-probabilities, got {len(lp)}")
            total += sum(lp)
        nbytes += len(doc.encode("utf-8"))
    return (-total / nbytes) / math.log(2) if nbytes else None


def torch_logprobs(model) -> Callable[[list[int]], list[float]]:
    """The same scoring for a transformers model: one forward pass, log_softmax in float32."""

    def score(seq: list[int]) -> list[float]:
        import torch

        ids = torch.tensor([seq], device=next(model.parameters()).device)  # [1, n]
        with torch.inference_mode():
            logits = model(input_ids=ids[:, :-1], use_cache=False).logits  # [1, n-1, vocab]
        logp = torch.log_softmax(logits.float(), dim=-1)
        return logp.gather(-1, ids[:, 1:].unsqueeze(-1))[0, :, 0].tolist()

    return score
