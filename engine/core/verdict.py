"""The one rule that words a speed ratio (contender over baseline: above 1 is faster) with its 95% interval.

Every page and engine sentence that calls something "faster" or "slower" than a baseline goes through here, so
the words cannot disagree with the interval printed beside them (tests/test_one_home.py keeps it the only rule):
- "faster" only when the interval's low end is above 1;
- "slower" only when its high end is below 1;
- otherwise "no measurable difference (the 95% interval includes 1×)", whatever the point value;
- a point without an interval (too few runs) is neither: it is shown as a point and said to be one.
"""

from __future__ import annotations

import math
from typing import Literal

Direction = Literal["faster", "slower", "same", "unknown"]

NO_DIFFERENCE = "no measurable difference (the 95% interval includes 1×)"


def _finite(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def direction(ratio: float | None, interval: tuple[float, float] | None) -> Direction:
    """Which way the ratio points, decided by its 95% interval only ("unknown": no ratio or no interval)."""
    if not _finite(ratio) or ratio <= 0 or interval is None:
        return "unknown"
    low, high = interval
    if not (_finite(low) and _finite(high)):
        return "unknown"
    if low > 1.0:
        return "faster"
    if high < 1.0:
        return "slower"
    return "same"


def speed_verdict(
    ratio: float | None,
    interval: tuple[float, float] | None,
    *,
    baseline: str = "",
    show_interval: bool = True,
    no_interval: str = "one point, no interval",
) -> str:
    """A speed ratio in words, e.g. "2.00× faster than plain greedy (95% interval 1.61×–2.40×)".

    `ratio` is baseline time / contender time (or contender speed / baseline speed); `interval` its bootstrap 95%
    interval, None when too few runs gave one (then `no_interval` says why). `baseline` names what it is
    compared with ("vanilla", "plain greedy", "fp32")."""
    if not _finite(ratio) or ratio <= 0:
        return "speed not compared"
    tail = f" than {baseline}" if baseline else ""
    way = direction(ratio, interval)
    if way == "unknown":
        of = f" {baseline}'s speed" if baseline else ""
        return f"{ratio:.2f}×{of} ({no_interval}: not called faster or slower)"
    low, high = interval  # type: ignore[misc]
    span = _span(way, low, high)
    if way == "same":
        return f"{NO_DIFFERENCE[:-1]}: {span}, point {ratio:.2f}×)"
    words = f"{ratio:.2f}× faster{tail}" if way == "faster" else f"{1 / ratio:.2f}× slower{tail}"
    return f"{words} (95% interval {span})" if show_interval else words


def _span(way: Direction, low: float, high: float) -> str:
    """The interval as its direction says it: a "slower" one in slower terms too (0.66×–0.99× the speed is
    1.01×–1.52× slower), the end nearest 1× in as many digits as show it is past 1."""
    if way == "faster":
        return f"{_past_one(low)}×–{high:.2f}×"
    if way == "slower":
        return f"{_past_one(1 / high)}×–{1 / low:.2f}×"
    return f"{low:.2f}×–{high:.2f}×"


def ratio_cell(ratio: float | None, interval: tuple[float, float] | None) -> str | None:
    """A table cell of the same rule, short: "1.40× faster", "6.10× slower", "no measurable difference", or the
    point alone where there is no interval ("0.90× (a point)"); None without a ratio."""
    if not _finite(ratio) or ratio <= 0:
        return None
    way = direction(ratio, interval)
    if way == "faster":
        return f"{ratio:.2f}× faster"
    if way == "slower":
        return f"{1 / ratio:.2f}× slower"
    if way == "same":
        return "no measurable difference"
    return f"{ratio:.2f}× (a point)"


def interval_cell(ratio: float | None, interval: tuple[float, float] | None) -> str | None:
    """The 95% interval in the words its ratio cell uses: a "slower" ratio's interval as slower too (0.07×–0.32×
    the speed is 3.13×–14.29× slower), else as the ratio's own span; None without an interval."""
    if interval is None or not all(_finite(x) and x > 0 for x in interval):
        return None
    way = direction(ratio, interval)
    return _span(way, *interval) + (" slower" if way == "slower" else "")


def _past_one(bound: float) -> str:
    """The interval's end nearest 1×, in as many digits as show it is past 1 (1.004 is "1.004", not "1.00": a
    "faster" whose interval reads 1.00× contradicts the rule it was called by)."""
    for digits in (2, 3, 4):
        text = f"{bound:.{digits}f}"
        if float(text) > 1:
            return text
    return f"{bound:.6f}"
