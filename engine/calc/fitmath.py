"""The small numerical tools the engine-efficiency fit needs, standard library only: least squares on the relative
error (normal equations, coefficients kept non-negative), a golden-section search, and Student's t quantile for
prediction intervals from a handful of residuals.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence


def least_squares_relative(rows: Sequence[tuple[Sequence[float], float]], n: int) -> list[float]:
    """Least squares on the relative error: minimise sum ((x . beta) / y - 1)^2, by normal equations (n <= 3),
    coefficients clipped at zero and the rest refitted; a feature that is zero on every row stays at zero."""
    active = [i for i in range(n) if any(x[i] for x, _ in rows)]
    while True:
        a = [[0.0] * len(active) for _ in active]
        b = [0.0] * len(active)
        for x, y in rows:
            xs = [x[i] / y for i in active]
            for i in range(len(active)):
                b[i] += xs[i]
                for j in range(len(active)):
                    a[i][j] += xs[i] * xs[j]
        sol = _solve(a, b)
        if sol is None:
            return [0.0] * n
        neg = [active[i] for i, v in enumerate(sol) if v < 0]
        if not neg:
            out = [0.0] * n
            for i, v in zip(active, sol, strict=True):
                out[i] = v
            return out
        active = [i for i in active if i not in neg]
        if not active:
            return [0.0] * n


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for c in range(n):
        piv = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[piv][c]) < 1e-300:
            return None
        m[c], m[piv] = m[piv], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [vr - f * vc for vr, vc in zip(m[r], m[c], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def golden_search_log(f: Callable[[float], float], lo: float, hi: float, steps: int = 32) -> float:
    """Golden-section search on log x for the minimum of a unimodal f on [lo, hi]."""
    a, b = math.log(lo), math.log(hi)
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(math.exp(c)), f(math.exp(d))
    for _ in range(steps):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(math.exp(d))
    return math.exp((a + b) / 2)


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile: exact for 1 and 2 degrees of freedom, the Cornish-Fisher expansion around the normal
    quantile above (Abramowitz and Stegun 26.7.5; within 0.5% of the tables from 3 degrees of freedom)."""
    if df <= 0:
        return math.inf
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = statistics.NormalDist().inv_cdf(p)
    v = float(df)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
    )
