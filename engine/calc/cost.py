"""Cost of serving: dollars per hour and per million output tokens at a throughput.

Price per GPU-hour is the user's (cloud list prices change weekly; the calculator carries none).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.calc.specs import positive_float, positive_int
from engine.core.errors import InvalidParameterError

# The dearest GPU-hour on any cloud list is tens of dollars; a million is a typo (cents, or a yearly price).
MAX_USD_PER_GPU_HOUR = 1e6


@dataclass(frozen=True)
class CostEstimate:
    usd_per_hour: float
    usd_per_million_tokens: float
    tokens_per_hour: float


def estimate_cost(tokens_per_s: float, usd_per_gpu_hour: float, n_gpus: int = 1) -> CostEstimate:
    """$/hour = price per GPU-hour x GPUs; $/M output tokens = $/hour / (tokens/s x 3600) x 1e6.

    Assumes the GPUs are kept busy at that throughput; idle time costs the same and produces nothing."""
    tps = positive_float("throughput (tokens/s)", tokens_per_s)
    price = positive_float("price per GPU-hour", usd_per_gpu_hour, allow_zero=True)
    if price > MAX_USD_PER_GPU_HOUR:
        raise InvalidParameterError(
            f"price per GPU-hour ${price:,.4g} is absurdly large; give the price of one GPU for one hour in USD"
        )
    per_hour = price * positive_int("GPUs", n_gpus)
    tokens_per_hour = tps * 3600.0
    return CostEstimate(per_hour, per_hour / tokens_per_hour * 1e6, tokens_per_hour)
