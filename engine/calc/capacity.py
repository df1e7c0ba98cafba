"""How many concurrent users a deployment holds within a TPOT objective: the calculator's prediction that the
Serving page puts beside the measured knee of a load sweep.

In steady decoding every user gets one token per decode step, so TPOT(b) = step time with b users. The chapter's
memory-bound rule (calc.timing.simple_decode_s) gives the step time: each step reads the weights once and every
user's KV cache,
    TPOT(b) = (weights + b x context x KV bytes per token) / bandwidth.
Max users = the largest b <= the batch slots with TPOT(b) <= the objective and b x context x KV per token within
the KV budget. The bandwidth is either a datasheet figure or calibrated so the rule reproduces a measured TPOT at
one user: bandwidth = (weights + context x KV per token) / TPOT(1). On a CPU, decode is partly compute-bound, so
the rule is optimistic there; the page shows both and says which is which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.calc.memory import kv_bytes_per_token, weights_bytes
from engine.calc.specs import ModelSpec, positive_float, positive_int
from engine.calc.timing import simple_decode_s


@dataclass(frozen=True)
class CapacityPrediction:
    max_users: int  # 0 when even one user misses the objective
    tpot_s_by_users: tuple[tuple[int, float], ...]  # (users, predicted TPOT) for 1..slots
    bandwidth_bytes_per_s: float
    limited_by: (
        str  # "TPOT objective" | "batch slots" | "KV budget" | "one user already misses the objective"
    )


def calibrated_bandwidth(
    weights_bytes: float, kv_bytes_per_token: float, context_tokens: int, tpot_one_user_s: float
) -> float:
    """bandwidth = (weights + context x KV per token) / measured TPOT at one user."""
    return (weights_bytes + context_tokens * kv_bytes_per_token) / positive_float(
        "TPOT at one user", tpot_one_user_s
    )


def max_users(
    weights_bytes: float,
    kv_bytes_per_token: float,
    context_tokens: int,
    bandwidth_bytes_per_s: float,
    tpot_slo_s: float,
    slots: int,
    kv_budget_bytes: float | None = None,
) -> CapacityPrediction:
    positive_float("TPOT objective", tpot_slo_s)
    slots = positive_int("batch slots", slots)
    context_tokens = positive_int("context tokens", context_tokens)
    curve = tuple(
        (b, simple_decode_s(weights_bytes, b * context_tokens * kv_bytes_per_token, bandwidth_bytes_per_s))
        for b in range(1, slots + 1)
    )
    users, limit = 0, "batch slots"
    for b, tpot in curve:
        if tpot > tpot_slo_s:
            limit = "TPOT objective" if b > 1 else "one user already misses the objective"
            break
        if kv_budget_bytes is not None and b * context_tokens * kv_bytes_per_token > kv_budget_bytes:
            limit = "KV budget"
            break
        users = b
    return CapacityPrediction(users, curve, bandwidth_bytes_per_s, limit)


@dataclass(frozen=True)
class RunPrediction:
    """The prediction beside a measured sweep, with the numbers it was built from (the page and the benchmark
    print them)."""

    prediction: CapacityPrediction
    weights_bytes: float
    kv_bytes_per_token: float
    context_tokens: int  # median prompt + half the output: the mean cached tokens while decoding


def predict_from_run(
    spec: ModelSpec,
    dtype: str,
    prompt_tokens_median: float,
    output_tokens: int,
    tpot_one_user_s: float,
    tpot_slo_s: float,
    slots: int,
) -> RunPrediction:
    """The one capacity prediction for a load sweep: the rule above with its bandwidth calibrated on the TPOT
    measured at the sweep's lowest level. A server that reports no prompt lengths (NaN) counts the prompt as 0
    tokens, so the context is half the output."""
    w, kv = weights_bytes(spec, dtype), kv_bytes_per_token(spec, dtype)
    prompt = prompt_tokens_median if math.isfinite(prompt_tokens_median) else 0.0
    ctx = max(1, int(prompt + output_tokens / 2))
    bw = calibrated_bandwidth(w, kv, ctx, tpot_one_user_s)
    return RunPrediction(max_users(w, kv, ctx, bw, tpot_slo_s, slots), w, kv, ctx)
