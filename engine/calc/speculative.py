"""Expected speedup of speculative decoding (Leviathan, Kalman & Matias, "Fast Inference from Transformers
via Speculative Decoding", ICML 2023, Theorem 3.8 and Corollary 3.9).

With acceptance rate alpha (the chance that the target accepts a drafted token), gamma drafted tokens per
target forward pass and cost ratio c = time of one draft forward / time of one target forward:

    tokens per target forward = (1 - alpha^(gamma + 1)) / (1 - alpha)
    expected speedup           = (1 - alpha^(gamma + 1)) / ((1 - alpha) (gamma c + 1))

Prompt lookup decoding drafts by n-gram matching in the prompt, so its c is about 0. Pure standard library.
"""

from __future__ import annotations

import math

from engine.core.errors import InvalidParameterError


def _check(alpha: float, gamma: int) -> None:
    if not (isinstance(alpha, int | float) and 0 <= alpha <= 1 and math.isfinite(alpha)):
        raise InvalidParameterError(f"acceptance rate must be in [0, 1], got {alpha!r}")
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise InvalidParameterError(f"draft length gamma must be a whole number >= 1, got {gamma!r}")


def tokens_per_forward(alpha: float, gamma: int) -> float:
    """(1 - alpha^(gamma+1)) / (1 - alpha); gamma + 1 when every draft is accepted (alpha = 1)."""
    _check(alpha, gamma)
    if alpha == 1:
        return float(gamma + 1)
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def expected_speedup(alpha: float, gamma: int, cost_ratio: float) -> float:
    """(1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)): > 1 means faster than plain decoding."""
    if not (isinstance(cost_ratio, int | float) and cost_ratio >= 0 and math.isfinite(cost_ratio)):
        raise InvalidParameterError(f"cost ratio c must be >= 0, got {cost_ratio!r}")
    return tokens_per_forward(alpha, gamma) / (gamma * cost_ratio + 1)
