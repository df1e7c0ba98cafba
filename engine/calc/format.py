"""Formatting for people: decimal units as datasheets print them (1 GB = 1e9 bytes), alongside GiB where asked.
Calculators return base units; only pages and the CLI's text output call these."""

from __future__ import annotations

import math


def gb(n: float | None, digits: int = 2) -> str:
    """Bytes as decimal GB/MB/KB (1 GB = 1e9 bytes)."""
    if n is None or not math.isfinite(n):
        return "n/a"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.{digits}f} {unit}"
    return f"{n:.0f} B"


def number(x: float | None, spec: str, scale: float | None = None, missing: str = "n/a") -> str:
    """`x` (times `scale`) in a format spec for a table cell; `missing` for None or NaN."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return missing
    return format(x * scale if scale else x, spec)


def cell(x: float | None, spec: str) -> str:
    """A plain-text table cell: `number` with "-" for a missing value."""
    return number(x, spec, missing="-")


def span(interval: tuple[float, float] | list[float] | None, spec: str = ".2f") -> str:
    """An interval as a plain-text table cell, "low-high"; "-" where there is none."""
    return f"{interval[0]:{spec}}-{interval[1]:{spec}}" if interval else "-"


def seconds(s: float | None) -> str:
    """Seconds in the unit that suits them (µs, ms, s, min); a negative difference keeps its sign."""
    if s is None or not math.isfinite(s):
        return "n/a"
    if s < 0:
        return "−" + seconds(-s)
    if s < 1e-3:
        return f"{s * 1e6:.3g} µs"
    if s < 1:
        return f"{s * 1e3:.3g} ms"
    if s < 120:
        return f"{s:.3g} s"
    return f"{s / 60:.1f} min"


def _scaled(n: float | None, prefixes: tuple[tuple[str, float], ...], unit: str, sep: str) -> str:
    """n with the largest prefix it reaches, two decimals ("1.23 TFLOP", "4.56M"); "n/a" when undefined."""
    if n is None or not math.isfinite(n):
        return "n/a"
    for prefix, size in prefixes:
        if abs(n) >= size:
            return f"{n / size:.2f}{sep}{prefix}{unit}"
    return f"{n:.0f}{sep}{unit}".rstrip()


def flops(n: float | None, unit: str = "FLOP") -> str:
    return _scaled(n, (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)), unit, " ")


def compact(n: float | None) -> str:
    """A count in a few characters: 1.23K, 4.56M, 7.89B (parameters, tokens)."""
    return _scaled(n, (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)), "", "")


def usd(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    if abs(x) < 0.01 and x:
        return f"${x:.4f}"
    return f"${x:,.2f}"


def count(n: float | None) -> str:
    if n is None or not math.isfinite(n):
        return "n/a"
    return f"{n:,.0f}"


def ridge(x: float) -> str:
    """A ridge point as the chapter prints it: truncated to one decimal (65 / 0.3 = 216.66... -> 216.6); below 10,
    to two (a CPU's 172.49 GFLOP/s / 49.41 GB/s = 3.491 -> 3.49): one decimal read 3.4 beside figures whose
    quotient a reader makes 3.49."""
    if not math.isfinite(x):
        return "n/a"
    places = 1 if abs(x) >= 10 else 2
    scale = 10**places
    return f"{math.floor(x * scale + 1e-9) / scale:.{places}f}"  # 1e-9: 0.29 * 100 is 28.999999999999996
