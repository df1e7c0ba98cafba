"""The one interval type: every estimate and every speed-up the lab reports is a central value with its low and high
ends, the physical bound where one exists, and how many observations the interval rests on.

An interval is judged by its width (high / low) as much as by its coverage: one that always holds because it spans
8x says nothing, so the width travels with every interval (the JSON's `width`) and so does `rows`, the published
rows, measured runs or bootstrap samples behind it. It lives in engine.core (not engine.calc) because the
bootstrap speed-up in engine.core.stats is one too, and core sits below calc.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    low: float
    central: float
    high: float
    bound: float | None = None  # the physical bound (every roof reached), where the quantity has one
    rows: int | None = (
        None  # observations behind the interval: published rows, runs or resamples; None = unknown
    )

    @property
    def width(self) -> float:
        """high / low: 1.0 is a point, 2.0 a factor of two between the ends; inf where low is not positive."""
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low <= 0:
            return math.inf if self.high > 0 else math.nan
        return self.high / self.low

    def covers(self, x: float) -> bool:
        return self.low <= x <= self.high

    @classmethod
    def exact(cls, value: float, bound: float | None = None, rows: int | None = None) -> Interval:
        """A value with no spread (an exact count, or too few observations to say more)."""
        return cls(value, value, value, bound, rows)

    def inverse(self) -> Interval:
        """1 / x for a positive quantity (a time per token <-> a rate): the ends swap."""
        inv = lambda v: math.inf if v == 0 else 1 / v  # noqa: E731
        return Interval(
            inv(self.high),
            inv(self.central),
            inv(self.low),
            None if self.bound is None else inv(self.bound),
            self.rows,
        )

    def to_json(self) -> dict:
        """{"low", "central", "high", "bound", "width", "rows"}: the CLI's and the results' form."""
        width = self.width
        return {
            "low": self.low,
            "central": self.central,
            "high": self.high,
            "bound": self.bound,
            "width": width if math.isfinite(width) else None,
            "rows": self.rows,
        }
