"""The calibrated timing model and its fit: physically grounded, fitted per precision, with its uncertainty.

Per precision d, five numbers, each with a physical meaning (features from engine.calc.roofline.operators,
the calculator's own operator list, so the bytes and FLOPs are the calculator's):

    TPOT = B_dec x 1/BW_d + L x o_d + (b - 1) x F_seq x 1/Fs_d
    TTFT = F_pre x 1/F_d + B_pre x 1/BW_d + L x o_d + c_d

B_dec: bytes a decode step moves (every weight once, the KV cache read at the mean context P + O/2, the
activations); BW_d: achieved bandwidth; L: layers; o_d: fixed seconds per layer per step (kernel dispatch,
thread wake-ups: it dominates small models on a CPU); F_seq: one sequence's decode FLOPs, so the last term
is what each extra sequence of a batch costs when a small-batch matmul is not free (on a CPU it is not);
F_pre, B_pre: prefill FLOPs and bytes for the batch; F_d: achieved prefill FLOP/s; c_d: a prefill's fixed
cost (generate's setup, the first step's bookkeeping).

The fit (Chen & Revels, "Robust benchmarking in noisy environments", 2016, for the minimum):
1. repeats of one shape are reduced to their fastest TTFT and fastest TPOT (noise only ever adds time);
2. weighted least squares on relative error (each point weighs 1/t^2, so a 10 ms and a 1 s point count
   alike), coefficients kept >= 0 (a negative time per byte is not physics: that feature is dropped);
3. a point whose relative residual is over 3x the median absolute residual (and over 10%) is dropped and
   the fit redone once (a shape that was slow in every repeat);
4. uncertainty: a residual bootstrap (Efron & Tibshirani, ch. 9): refit on the fitted times scaled by
   residuals drawn with replacement; each replicate's prediction is scaled by one more residual, so the
   interval carries both the parameters' spread and the model's error on the shapes it saw.

Identifiability: bytes and layers move together in one model, so runs at two depths (the calibration model
cut to fewer layers) separate 1/BW from o. Without them the precisions are pooled (one bandwidth and one
per-layer cost for all, two equations from two byte counts); with one precision and one depth, o = 0 and the
fixed cost is folded into the bandwidth (the notes say so).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from engine.calc.roofline import operators
from engine.calc.specs import ModelSpec
from engine.calc.timing import Efficiency
from engine.core.errors import InvalidParameterError
from engine.core.interval import Interval
from engine.core.stats import median, quantile

BOOTSTRAP = 200
COVERAGE = 0.95
OUTLIER_FACTOR = 3.0
OUTLIER_FLOOR = 0.10


@dataclass(frozen=True)
class RunSample:
    """One measured run, reduced to what the fit needs."""

    dtype: str
    batch_size: int
    prompt_tokens: int  # per sequence
    output_tokens: int  # per sequence
    ttft_s: float
    # seconds per decode step the fit explains: a calibration run's median step interval (robust to a step that
    # lost the CPU), or a logged run's TPOT (its mean; the median was not kept)
    step_s: float
    n_layer: int | None = None  # layers actually run (a calibration model cut shorter); None = the full model
    loadavg_1m: float = math.nan
    cpu_share: float = math.nan


@dataclass(frozen=True)
class PrecisionFit:
    """The five numbers of one precision (see the module docstring) and what they rest on."""

    dtype: str
    s_per_byte: float  # 1 / achieved bandwidth
    overhead_s_per_layer: float
    s_per_extra_seq_flop: float  # decode: each extra sequence's FLOPs at the small-batch rate
    s_per_flop: float  # prefill: 1 / achieved FLOP/s
    prefill_fixed_s: float
    decode_residuals: list[float] = field(default_factory=list)  # relative: (fit - measured) / measured
    prefill_residuals: list[float] = field(default_factory=list)
    replicates: list[list[float]] = field(default_factory=list)  # bootstrap coefficient vectors, same order
    shapes: int = 0  # distinct shapes fitted
    dropped: int = 0  # shapes dropped as outliers
    pooled: bool = False  # bandwidth and per-layer cost shared with the other precisions
    # measured matrix-vector rate by inner dimension, [[K, bytes/s], ...] (engine.calibration.runs.gemv_curve);
    # s_per_byte is then per byte at the fastest K, and a matmul of inner dimension K reads its weights
    # rate(fastest) / rate(K) times slower. Empty: every weight byte costs the same.
    gemv: list[list[float]] = field(default_factory=list)
    # measured matrix-matrix rate by rows (tokens in one forward), [[M, FLOP/s], ...] (gemm_curve): a prefill of
    # M tokens runs its matmuls rate(fastest) / rate(M) times slower per FLOP than the fastest M measured
    gemm: list[list[float]] = field(default_factory=list)

    @property
    def achieved_bandwidth(self) -> float:
        return 1 / self.s_per_byte if self.s_per_byte > 0 else math.inf

    @property
    def achieved_flops(self) -> float:
        return 1 / self.s_per_flop if self.s_per_flop > 0 else math.inf

    @property
    def coefficients(self) -> list[float]:
        return [
            self.s_per_byte,
            self.overhead_s_per_layer,
            self.s_per_extra_seq_flop,
            self.s_per_flop,
            self.prefill_fixed_s,
        ]


@dataclass(frozen=True)
class Features:
    layers: int
    batch: int
    decode_bytes: float
    decode_extra_flops: float  # (b - 1) x one sequence's decode FLOPs
    prefill_flops: float
    prefill_bytes: float


def gemv_factor(curve: Sequence[Sequence[float]], k: int) -> float:
    """How many times longer a matrix-vector product of inner dimension `k` takes per weight byte than the
    curve's fastest one: rate(fastest) / rate(k), the rate interpolated linearly in log2(k) between measured
    points and held flat beyond them. 1.0 without a curve or for an operator without weights (k = 0).
    The same for a matrix-matrix curve by rows (gemm)."""
    pts = sorted((float(a), float(b)) for a, b in curve if a > 0 and b > 0)
    if not pts or k <= 0:
        return 1.0
    best = max(b for _, b in pts)
    x = math.log2(k)
    if x <= math.log2(pts[0][0]):
        return best / pts[0][1]
    if x >= math.log2(pts[-1][0]):
        return best / pts[-1][1]
    for (k0, r0), (k1, r1) in itertools.pairwise(pts):
        x0, x1 = math.log2(k0), math.log2(k1)
        if x0 <= x <= x1:
            return best / (r0 + (r1 - r0) * (x - x0) / (x1 - x0))
    return 1.0


def weighted_weight_bytes(ops, curve: Sequence[Sequence[float]]) -> float:
    """The operators' weight bytes, each matmul's weighted by gemv_factor of its inner dimension."""
    return sum(op.count * op.weight_bytes * gemv_factor(curve, op.d_in) for op in ops)


def decode_weighted_bytes(ops, curve: Sequence[Sequence[float]]) -> float:
    """A decode step's bytes with each matmul's weights weighted by gemv_factor of its inner dimension."""
    return weighted_weight_bytes(ops, curve) + sum(op.count * (op.bytes - op.weight_bytes) for op in ops)


def features(
    spec: ModelSpec,
    dtype: str,
    prompt: int,
    output: int,
    batch: int,
    n_layer: int | None = None,
    gemv: Sequence[Sequence[float]] = (),
    gemm: Sequence[Sequence[float]] = (),
) -> Features:
    """The calculator's bytes and FLOPs for one shape (decode at the mean context P + O/2, as its estimate);
    decode bytes weighted by the measured matrix-vector curve `gemv` when given (see PrecisionFit.gemv)."""
    if n_layer is not None and n_layer != spec.n_layer:
        spec = replace(spec, n_layer=n_layer)
    ctx = max(1, round(prompt + output / 2 - 1))
    dec = operators(spec, phase="decode", seq_len=ctx, batch=batch, dtype=dtype)
    pre = operators(spec, phase="prefill", seq_len=prompt, batch=batch, dtype=dtype)
    dec_flops = sum(op.total_flops for op in dec)
    return Features(
        layers=spec.n_layer,
        batch=batch,
        decode_bytes=decode_weighted_bytes(dec, gemv),
        decode_extra_flops=dec_flops * (batch - 1) / batch,
        prefill_flops=sum(
            op.total_flops * (gemv_factor(gemm, prompt * batch) if op.weight_bytes else 1.0) for op in pre
        ),
        prefill_bytes=sum(op.total_bytes for op in pre),
    )


def predict_point(coef: Sequence[float], f: Features) -> tuple[float, float]:
    """(TTFT, TPOT) from the five coefficients."""
    s_byte, o, s_xflop, s_flop, c = coef
    tpot = f.decode_bytes * s_byte + f.layers * o + f.decode_extra_flops * s_xflop
    ttft = f.prefill_flops * s_flop + f.prefill_bytes * s_byte + f.layers * o + c
    return ttft, tpot


# ---------------------------------------------------------------- least squares (stdlib)


def _solve(rows: list[list[float]], y: list[float], w: list[float] | None = None) -> list[float] | None:
    """argmin sum w (row . c - y)^2, w = 1 / y^2 unless given (relative error), by the normal equations on
    scaled columns; None when singular."""
    k = len(rows[0])
    scale = [max(abs(r[j]) for r in rows) or 1.0 for j in range(k)]
    X = [[r[j] / scale[j] for j in range(k)] for r in rows]
    w = w or [1 / (v * v) for v in y]
    A = [[sum(wi * x[i] * x[j] for wi, x in zip(w, X, strict=True)) for j in range(k)] for i in range(k)]
    b = [sum(wi * x[i] * yi for wi, x, yi in zip(w, X, y, strict=True)) for i in range(k)]
    n = k
    for col in range(n):  # Gaussian elimination with partial pivoting
        piv = max(range(col, n), key=lambda r: abs(A[r][col]))
        if abs(A[piv][col]) < 1e-9 * max(1.0, max(abs(v) for v in A[col])):
            return None
        A[col], A[piv], b[col], b[piv] = A[piv], A[col], b[piv], b[col]
        for r in range(col + 1, n):
            f = A[r][col] / A[col][col]
            for c in range(col, n):
                A[r][c] -= f * A[col][c]
            b[r] -= f * b[col]
    out = [0.0] * n
    for r in range(n - 1, -1, -1):
        out[r] = (b[r] - sum(A[r][c] * out[c] for c in range(r + 1, n))) / A[r][r]
    # a near-singular system (features moving together) gives huge opposite-signed coefficients
    return [v / s for v, s in zip(out, scale, strict=True)]


def nonneg_fit(
    rows: list[list[float]], y: list[float], active: list[bool], fixed: dict[int, float] | None = None
) -> list[float] | None:
    """Least squares (relative error) over the active columns with every coefficient >= 0: drop the most
    negative, refit. `fixed`: columns whose coefficient is known (measured, not fitted)."""
    fixed = fixed or {}
    active = [a and j not in fixed for j, a in enumerate(active)]
    known = [sum(c * r[j] for j, c in fixed.items()) for r in rows]
    rest = [yi - k for yi, k in zip(y, known, strict=True)]
    weights = [1 / (v * v) for v in y]
    while any(active):
        idx = [j for j, a in enumerate(active) if a]
        if len(rows) < len(idx):
            active[idx[-1]] = False
            continue
        sol = _solve([[r[j] for j in idx] for r in rows], rest, weights)
        if sol is None:
            active[idx[-1]] = False  # columns are listed most-essential first
            continue
        if min(sol) >= 0:
            full = [fixed.get(j, 0.0) for j in range(len(active))]
            for j, v in zip(idx, sol, strict=True):
                full[j] = v
            return full
        active[idx[sol.index(min(sol))]] = False
    return None


def rel_residuals(rows: list[list[float]], y: list[float], coef: Sequence[float]) -> list[float]:
    return [
        (sum(c * x for c, x in zip(coef, r, strict=True)) - yi) / yi for r, yi in zip(rows, y, strict=True)
    ]


def _without_outliers(rows, y, active, fixed=None) -> tuple[list[float] | None, list[int]]:
    """Fit, drop points whose |relative residual| > max(3 x median |residual|, 10%), refit once."""
    coef = nonneg_fit(rows, y, active, fixed)
    if coef is None or len(rows) <= sum(active) + 1:
        return coef, []
    res = [abs(r) for r in rel_residuals(rows, y, coef)]
    limit = max(OUTLIER_FACTOR * median(res), OUTLIER_FLOOR)
    bad = [i for i, r in enumerate(res) if r > limit]
    keep = [i for i in range(len(rows)) if i not in bad]
    if not bad or len(keep) < sum(active) + 1:
        return coef, []
    again = nonneg_fit([rows[i] for i in keep], [y[i] for i in keep], active, fixed)
    return (again, bad) if again is not None else (coef, [])


# ---------------------------------------------------------------- the fit


def fastest_per_shape(samples: Sequence[RunSample]) -> list[RunSample]:
    """Repeats of one (dtype, batch, prompt, output, depth) reduced to the fastest TTFT and fastest TPOT."""
    best: dict[tuple, RunSample] = {}
    for s in samples:
        if not (math.isfinite(s.step_s) and s.step_s > 0 and math.isfinite(s.ttft_s) and s.ttft_s > 0):
            continue
        key = (s.dtype, s.batch_size, s.prompt_tokens, s.output_tokens, s.n_layer)
        b = best.get(key)
        best[key] = (
            s if b is None else replace(b, ttft_s=min(b.ttft_s, s.ttft_s), step_s=min(b.step_s, s.step_s))
        )
    return list(best.values())


@dataclass
class _Design:
    dtype: str
    feats: list[Features]
    ttft: list[float]
    tpot: list[float]
    gemv_best: float = 0.0  # the measured matrix-vector curve's fastest rate (bytes/s); 0 without a curve

    @property
    def fixed(self) -> dict[int, float] | None:
        """With a measured curve the seconds per byte are measured (1 / its fastest rate), not fitted."""
        return {0: 1 / self.gemv_best} if self.gemv_best > 0 else None


def _decode_rows(d: _Design) -> list[list[float]]:
    return [[f.decode_bytes, f.layers, f.decode_extra_flops] for f in d.feats]


def _decode_active(d: _Design, pooled: bool) -> list[bool]:
    depths = {f.layers for f in d.feats}
    return [True, len(depths) > 1 or pooled or d.fixed is not None, any(f.batch > 1 for f in d.feats)]


def _fit_decode(designs: list[_Design], pooled: bool) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    """{dtype: [s_per_byte, o, s_per_extra_flop]} and the dropped points per precision."""
    out: dict[str, list[float]] = {}
    dropped: dict[str, list[int]] = {}
    if pooled:
        rows = [r for d in designs for r in _decode_rows(d)]
        y = [t for d in designs for t in d.tpot]
        active = [True, True, any(f.batch > 1 for d in designs for f in d.feats)]
        coef, bad = _without_outliers(rows, y, active)
        if coef is None:
            return {}, {}
        for d in designs:  # pooled outliers are counted in the notes, not mapped back to a precision
            out[d.dtype], dropped[d.dtype] = coef, []
        return out, dropped
    for d in designs:
        coef, bad = _without_outliers(_decode_rows(d), d.tpot, _decode_active(d, False), d.fixed)
        if coef is not None:
            out[d.dtype], dropped[d.dtype] = coef, bad
    return out, dropped


def _fit_prefill(d: _Design, dec: Sequence[float]) -> tuple[list[float] | None, list[int]]:
    """[s_per_flop, c] from TTFT minus the decode-fitted byte and layer terms."""
    s_byte, o, _ = dec
    y = [t - f.prefill_bytes * s_byte - f.layers * o for f, t in zip(d.feats, d.ttft, strict=True)]
    if min(y) <= 0:  # the memory terms alone exceed a measured TTFT: fit the FLOP term on TTFT itself
        y = list(d.ttft)
    rows = [[f.prefill_flops, 1.0] for f in d.feats]
    varied = len({round(f.prefill_flops) for f in d.feats}) > 1
    return _without_outliers(rows, y, [True, varied])


def _designs(
    spec: ModelSpec,
    samples: Sequence[RunSample],
    gemv: dict[str, list[list[float]]],
    gemm: dict[str, list[list[float]]],
) -> list[_Design]:
    by: dict[str, _Design] = {}
    for s in fastest_per_shape(samples):
        curve = gemv.get(s.dtype, [])
        d = by.setdefault(s.dtype, _Design(s.dtype, [], [], [], max((r for _, r in curve), default=0.0)))
        d.feats.append(
            features(
                spec,
                s.dtype,
                s.prompt_tokens,
                s.output_tokens,
                s.batch_size,
                s.n_layer,
                curve,
                gemm.get(s.dtype, []),
            )
        )
        d.ttft.append(s.ttft_s)
        d.tpot.append(s.step_s)
    return list(by.values())


def _fit_once(designs: list[_Design], pooled: bool) -> dict[str, list[float]] | None:
    dec, _ = _fit_decode(designs, pooled)
    out = {}
    for d in designs:
        if d.dtype not in dec:
            return None
        pre, _ = _fit_prefill(d, dec[d.dtype])
        if pre is None:
            return None
        out[d.dtype] = [*dec[d.dtype], *pre]
    return out


def fit_precisions(
    spec: ModelSpec,
    samples: Sequence[RunSample],
    *,
    bootstrap: int = BOOTSTRAP,
    seed: int = 0,
    gemv: dict[str, list[list[float]]] | None = None,
    gemm: dict[str, list[list[float]]] | None = None,
) -> tuple[dict[str, PrecisionFit], list[str]]:
    """Fit every precision in `samples` (see the module docstring); returns the fits and notes. `gemv`:
    the measured matrix-vector curve per precision (engine.calibration.runs.gemv_curve), if any."""
    gemv, gemm = gemv or {}, gemm or {}
    designs = _designs(spec, samples, gemv, gemm)
    if not designs:
        raise InvalidParameterError("no usable run (each needs TTFT and a TPOT, so at least 2 output tokens)")
    notes: list[str] = []
    per_depth = all(len({f.layers for f in d.feats}) > 1 for d in designs)
    pooled = not per_depth and len(designs) > 1
    if pooled:
        notes.append(
            "the runs were all at one depth: bandwidth and per-layer cost are shared by the precisions "
            "(two byte counts, two equations); run `python -m engine calibrate` for a per-precision fit"
        )
    elif not per_depth:
        notes.append("one precision at one depth: the per-layer cost is folded into the bandwidth")
    dec, dropped = _fit_decode(designs, pooled)
    fits: dict[str, PrecisionFit] = {}
    rng = random.Random(seed)
    for d in designs:
        if d.dtype not in dec:
            notes.append(f"{d.dtype}: the decode times could not be fitted")
            continue
        pre, pre_bad = _fit_prefill(d, dec[d.dtype])
        if pre is None:
            notes.append(f"{d.dtype}: the prefill times could not be fitted")
            continue
        coef = [*dec[d.dtype], *pre]
        dec_res = rel_residuals(_decode_rows(d), d.tpot, coef[:3])
        pre_res = [(predict_point(coef, f)[0] - t) / t for f, t in zip(d.feats, d.ttft, strict=True)]
        bad = sorted(set(dropped.get(d.dtype, [])) | set(pre_bad))
        # residuals of a fit are smaller than its errors on new points: inflate by sqrt(n / (n - k))
        n = len(d.feats) - len(bad)
        dec_res = [r * math.sqrt(n / max(1, n - 3)) for r in dec_res]
        pre_res = [r * math.sqrt(n / max(1, n - 2)) for r in pre_res]
        fits[d.dtype] = PrecisionFit(
            d.dtype,
            *coef,
            decode_residuals=[r for i, r in enumerate(dec_res) if i not in bad],
            prefill_residuals=[r for i, r in enumerate(pre_res) if i not in bad],
            shapes=len(d.feats),
            dropped=len(bad),
            pooled=pooled,
            gemv=[list(p) for p in gemv.get(d.dtype, [])],
            gemm=[list(p) for p in gemm.get(d.dtype, [])],
        )
        if bad:
            notes.append(f"{d.dtype}: {len(bad)} of {len(d.feats)} shapes left out of the fit as outliers")
    # residual bootstrap: the shapes stay, each measured time is redrawn as the fit's time scaled by one of
    # the fit's residuals (a case bootstrap over a few shapes would often drop every batch-4 or short-depth
    # shape and with it a coefficient); all precisions redrawn together (a pooled fit couples them)
    reps: dict[str, list[list[float]]] = {dt: [] for dt in fits}
    fitted = {
        d.dtype: [predict_point(fits[d.dtype].coefficients, f) for f in d.feats]
        for d in designs
        if d.dtype in fits
    }
    for _ in range(bootstrap):
        drawn = []
        for d in designs:
            if d.dtype not in fits:
                continue
            fr = fits[d.dtype]
            dres, pres = fr.decode_residuals or [0.0], fr.prefill_residuals or [0.0]
            drawn.append(
                _Design(
                    d.dtype,
                    d.feats,
                    [t / _scale(rng.choice(pres)) for t, _ in fitted[d.dtype]],
                    [t / _scale(rng.choice(dres)) for _, t in fitted[d.dtype]],
                    d.gemv_best,
                )
            )
        one = _fit_once(drawn, pooled)
        if one is None:
            continue
        for dt, c in one.items():
            reps[dt].append(c)
    fits = {dt: replace(f, replicates=reps[dt]) for dt, f in fits.items()}
    if not fits:
        raise InvalidParameterError("the runs could not be fitted: run `python -m engine calibrate` again")
    return fits, notes


def _scale(residual: float) -> float:
    """measured = fitted / (1 + r); r is floored at -0.9 so a wild residual cannot make a time negative."""
    return 1 + max(residual, -0.9)


def predict(
    fit: PrecisionFit,
    spec: ModelSpec,
    *,
    prompt: int,
    output: int,
    batch: int = 1,
    n_layer: int | None = None,
) -> tuple[Interval, Interval]:
    """(TTFT, TPOT) intervals at COVERAGE: the point from the fit, the bounds from the bootstrap replicates,
    each scaled by one of the fit's own relative residuals (a deterministic draw)."""
    f = features(spec, fit.dtype, prompt, output, batch, n_layer, fit.gemv, fit.gemm)
    ttft, tpot = predict_point(fit.coefficients, f)
    if not fit.replicates:
        return Interval.exact(ttft), Interval.exact(tpot)
    rng = random.Random(1)
    dres = fit.decode_residuals or [0.0]
    pres = fit.prefill_residuals or [0.0]
    t_ttft, t_tpot = [], []
    for c in fit.replicates:
        a, b = predict_point(c, f)
        t_ttft.append(a / _scale(rng.choice(pres)))
        t_tpot.append(b / _scale(rng.choice(dres)))
    lo, hi = (1 - COVERAGE) / 2, 1 - (1 - COVERAGE) / 2

    def interval(point: float, values: list[float]) -> Interval:
        return Interval(min(point, quantile(values, lo)), point, max(point, quantile(values, hi)))

    return interval(ttft, t_ttft), interval(tpot, t_tpot)


def efficiency_of(
    fit: PrecisionFit, bandwidth: float, flops: float, spec: ModelSpec | None = None
) -> Efficiency:
    """The fit as the calculator's Efficiency (fractions of the measured roofs, per-layer cost); the batch
    and prefill fixed terms have no place there. With `spec`, the bandwidth is the one `spec`'s own matmuls
    reach on the fit's matrix-vector curve (their weight-byte-weighted gemv_factor), so the calculator's
    batch-1 decode for that model matches this fit's."""
    e_bw = fit.achieved_bandwidth / bandwidth if bandwidth > 0 else 1.0
    if spec is not None and fit.gemv:
        ops = operators(spec, phase="decode", seq_len=1, batch=1, dtype=fit.dtype)
        weights = sum(op.count * op.weight_bytes for op in ops)
        if weights > 0:
            e_bw /= weighted_weight_bytes(ops, fit.gemv) / weights
    e_f = fit.achieved_flops / flops if flops > 0 and math.isfinite(fit.achieved_flops) else 1.0
    return Efficiency(e_bw, e_f, fit.overhead_s_per_layer, label="calibrated")
