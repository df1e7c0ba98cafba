"""Engine efficiency fitted on published measurements: what fraction of a GPU's roofs each class of engine
reaches, so a GPU time is an estimate a team can budget on, not a datasheet bound.

The model is the roofline's (engine.calc.timing): a decode step or a prefill costs, per operator, the slower of
FLOPs / (peak x e_f) and bytes / (bandwidth x e_bw), plus a fixed cost per layer per forward (kernel launches,
Python, the scheduler: `o`), plus two tensor-parallel all-reduces per layer that each pay a fixed latency
(nccl-tests' time at its smallest messages, per interconnect, times a class factor k) and move their bytes at
the link's bandwidth. MBU (model bandwidth utilisation, as Databricks and NVIDIA define it) is e_bw; MFU is e_f.

Per engine class the parameters are fitted by least squares on the relative error of published times
(engine/data/published): decode (e_bw, o, k) on batch-1 decode rows, e_f on first-token rows (and on batched
throughput rows where the class has them). Rows are split once, by a hash of their id, into a fitting part and a
held-back part the fit never sees; the interval around a central estimate spans the 2.5th to 97.5th percentile of
the ratio published / predicted over leave-one-source-out predictions (each source's rows predicted by a fit
that never saw that source), so it says how far a new setup can land from the centre. The physical bound (e = 1,
o = 0) is shown beside every estimate.

Standard library only; the fit takes a fraction of a second and is cached.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cache

from engine.calc import published
from engine.calc.hf_config import spec_from_hf_config
from engine.calc.specs import GPUSpec, gpu_spec, model_preset
from engine.calc.timing import Efficiency, Setup, TimingEstimate, TimingInputs, timing_from, timing_inputs
from engine.core.errors import EngineError, InvalidParameterError
from engine.core.interval import Interval

ENGINE_CLASSES: dict[str, str] = {
    "hf": "Hugging Face transformers, eager (a Python loop over unfused kernels)",
    "hf-compiled": "torch.compile with CUDA graphs over a static cache (transformers compiled, gpt-fast)",
    "vllm": "serving engines with fused kernels and CUDA graphs (vLLM, SGLang, TGI, MLC, DeepSpeed-FastGen)",
    "tensorrt-llm": "NVIDIA TensorRT-LLM (compiled engines, fused kernels)",
    "llama.cpp": "llama.cpp's CUDA backend (GGUF weights)",
}
# `--engine` names -> class; sglang is fitted with the vLLM class (same kind of engine, few rows of its own)
ENGINES: dict[str, str] = {
    "hf": "hf",
    "hf-compiled": "hf-compiled",
    "vllm": "vllm",
    "sglang": "vllm",
    "tensorrt-llm": "tensorrt-llm",
    "llama.cpp": "llama.cpp",
}
HELD_BACK_SHARE = 0.3  # rows the fit never sees; the track record reports its targets on them
INTERVAL = (0.025, 0.975)  # leave-one-source-out quantiles of published / predicted (a nominal 95% band)
DEFAULT_DECODE_TOKENS = 200  # gpt-fast's generate.py default when a source gives no output length
MIN_ROWS = 2  # fewer rows than this: a class borrows the pooled parameter (two fix bandwidth and step cost)


def held_back(row_id: str) -> bool:
    """A fixed, reproducible split: the first byte of sha256(id) below 30% of 256."""
    return hashlib.sha256(row_id.encode()).digest()[0] < HELD_BACK_SHARE * 256


def setup_of(row: published.PublishedRow) -> Setup | str:
    """The calculator's inputs for a published row, or why it cannot be predicted."""
    preset = published.aliases().get("calculator_presets", {}).get(row.model)
    if row.config_model is None and preset is None:
        return f"no config.json found for {row.model}"
    if row.gpu_key is None:
        return f"{row.gpu} is not in the GPU catalogue"
    if row.engine_class is None:
        return f"no efficiency class for the engine {row.engine}"
    try:
        spec = (
            replace(model_preset(preset), name=row.model)
            if row.config_model is None
            else spec_from_hf_config(published.configs()[row.config_model], name=row.model)
        )
    except EngineError as exc:
        return f"its config cannot be read: {exc}"
    kv = row.dtype if row.kv_dtype in ("auto", "unknown", "f16", "bf16", "fp16") else row.kv_dtype
    kv = "fp16" if kv in ("f16",) else kv
    if kv not in ("fp16", "bf16", "fp8", "fp32"):
        kv = row.dtype
    prompt = int(row.prompt_tokens or 1)
    output = int(row.output_tokens or DEFAULT_DECODE_TOKENS)
    return Setup(
        spec=replace(spec, context_length=max(spec.context_length, prompt + output)),
        gpu=gpu_spec(row.gpu_key),
        dtype=row.dtype,
        weight_format=row.calc_format,
        group_size=row.group_size,
        scope=row.scope,
        kv_dtype=kv,
        n_gpus=max(row.tensor_parallel, 1),
        batch=max(row.batch, 1),
        prompt_tokens=prompt,
        output_tokens=output,
    )


# ---------------------------------------------------------------- all-reduce latency from published NCCL runs


def allreduce_latency_s(gpu: GPUSpec) -> float:
    """nccl-tests' all_reduce_perf time at its smallest published message over the GPU's kind of link (NVLink or
    PCIe): the fixed cost of one all-reduce before any byte counts."""
    link = link_kind(gpu.interconnect)
    times = [
        r.time_us
        for r in published.nccl_rows()
        if r.time_us is not None and r.size_bytes <= 65536 and link_kind(r.interconnect) == link
    ]
    return min(times) * 1e-6 if times else 0.0


def link_kind(interconnect: str) -> str:
    """ "pcie" or "nvlink" from a catalogue or nccl-tests description ("PCIe (no NVLink)" is PCIe)."""
    text = interconnect.lower()
    return "pcie" if text.startswith("pcie") or "no nvlink" in text or "nvlink" not in text else "nvlink"


# ---------------------------------------------------------------- the model


@dataclass(frozen=True)
class ClassFit:
    """One engine class's fitted utilisation, what it was fitted on, and how far a prediction can land."""

    engine_class: str
    bandwidth: float  # e_bw: decode MBU
    overhead_s_per_layer: float  # o: fixed cost per layer per forward
    allreduce_factor: float  # k: multiplies nccl-tests' small-message latency
    flops: float  # e_f: prefill MFU
    decode_flops: float  # e_fd: a batched decode step's compute-bound matmuls
    decode_rows: int
    prefill_rows: int
    sources: int
    decode_ratio: tuple[float, float]  # published / predicted time, 2.5th and 97.5th percentile (LOSO)
    prefill_ratio: tuple[float, float]
    throughput_ratio: tuple[float, float]
    borrowed: tuple[str, ...] = ()  # parameters taken from the pooled fit (too few rows of its own)

    def efficiency(self, gpu: GPUSpec) -> Efficiency:
        return Efficiency(
            bandwidth=self.bandwidth,
            flops=self.flops,
            step_overhead_s_per_layer=self.overhead_s_per_layer,
            label=f"fitted: {self.engine_class}",
            allreduce_latency_s=self.allreduce_factor * allreduce_latency_s(gpu),
            decode_flops=self.decode_flops,
        )


def timing(s: Setup, eff: Efficiency) -> TimingEstimate:
    return timing_from(timing_inputs(s), eff)


def bound_timing(s: Setup) -> TimingEstimate:
    """The physical bound: every roof reached, nothing else (the datasheet calculator)."""
    return timing(s, Efficiency(label="physics"))


def decode_features(o: Observation) -> tuple[float, float, float]:
    """(roof time at e = 1 with the all-reduces' byte time, layers, all-reduces x nccl latency) of one decode
    step: with every operator memory-bound, the fitted decode time is x1 / e_bw + x2 x o + x3 x k."""
    t = timing_from(o.inputs, Efficiency(label="features")).decode_step
    return (
        t.memory_s + t.compute_s,
        float(o.inputs.n_layer),
        o.inputs.allreduces * allreduce_latency_s(o.setup.gpu),
    )


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


def _quantiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return (math.nan, math.nan)
    v = sorted(values)

    def q(p: float) -> float:
        pos = p * (len(v) - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, len(v) - 1)
        return v[lo] + (v[hi] - v[lo]) * (pos - lo)

    return q(INTERVAL[0]), q(INTERVAL[1])


# ---------------------------------------------------------------- which rows teach what


@dataclass(frozen=True)
class Observation:
    row: published.PublishedRow
    setup: Setup
    kind: str  # "decode" | "prefill" | "throughput"
    seconds: float  # the published figure as a time: s per token (decode), s (TTFT), s per batch step
    inputs: TimingInputs  # built once: a fit evaluates it hundreds of times


def observation(row: published.PublishedRow) -> Observation | str:
    """A published speed row as a time the model predicts, or why it is not one."""
    unscored = published.aliases().get("unscored", {})
    if row.id in unscored:
        return unscored[row.id]
    s = setup_of(row)
    if isinstance(s, str):
        return s
    m, v = row.metric, row.value
    one = row.batch <= 1 and row.batch_kind == "batch"
    as_time = {
        "decode_tokens_per_s": ("decode", 1.0 / v),
        "tpot_s": ("decode", v),
        "ttft_ms": ("prefill", v / 1e3),
    }
    as_time["ttft_s"] = ("prefill", v)
    if one and m in as_time:
        s = replace(s, batch=1)
        kind, seconds = as_time[m]
        return Observation(row, s, kind, seconds, timing_inputs(s))
    if (
        m in ("output_tokens_per_s", "output_tokens_per_s_per_gpu")
        and row.batch_kind == "batch"
        and row.batch > 1
    ):
        total = v * (row.gpu_count if m == "output_tokens_per_s_per_gpu" else 1)
        if not row.output_tokens or not row.prompt_tokens:
            return "a throughput without its input and output lengths"
        return Observation(row, s, "throughput", row.batch / total, timing_inputs(s))
    if row.batch_kind in ("request-rate", "concurrency"):
        return "measured under a request load: queueing is in the figure, which a per-request model does not predict"
    if row.batch_kind == "max-throughput" or row.batch == 0:
        return "the engine chose its own batch (a max-throughput run): no batch to predict at"
    if m == "achieved_bandwidth_gb_s":
        return "the source's own bandwidth figure: compared through its tokens/s row"
    return f"{m} at {row.batch_kind} {row.batch} is outside the model"


def predicted_seconds(obs: Observation, fit: ClassFit) -> float:
    t = timing_from(obs.inputs, fit.efficiency(obs.setup.gpu))
    if obs.kind == "decode":
        return t.decode_s_per_token
    if obs.kind == "prefill":
        return t.ttft_s
    # throughput rows: steady state of in-flight batching, a prefill's share spread over the output
    return t.decode_s_per_token + t.ttft_s / obs.setup.output_tokens


def _fit_class(cls: str, obs: list[Observation], pooled: ClassFit | None) -> ClassFit:
    dec = [o for o in obs if o.kind == "decode"]
    borrowed: list[str] = []
    if len(dec) >= MIN_ROWS:
        feats = [(decode_features(o), o.seconds) for o in dec]
        has_tp = any(o.setup.n_gpus > 1 for o in dec)
        inv_e, o_layer, k = least_squares_relative(feats, 3 if has_tp else 2) + ([] if has_tp else [0.0])
        if not has_tp and pooled is not None:
            k = pooled.allreduce_factor
            borrowed.append("all-reduce factor")
        e_bw = min(1.0, 1.0 / inv_e) if inv_e > 0 else 1.0
    elif pooled is not None:
        e_bw, o_layer, k = pooled.bandwidth, pooled.overhead_s_per_layer, pooled.allreduce_factor
        borrowed += ["bandwidth", "overhead", "all-reduce factor"]
    else:
        e_bw, o_layer, k = 1.0, 0.0, 1.0
    base = ClassFit(cls, e_bw, o_layer, k, 1.0, 1.0, len(dec), 0, 0, (1, 1), (1, 1), (1, 1))
    # e_f on first-token rows, then e_fd on batched throughput rows with e_f fixed: one-dimensional searches
    # (the time is not linear in 1/e where operators change bound)
    pre = [o for o in obs if o.kind == "prefill"]
    thr = [o for o in obs if o.kind == "throughput"]

    def utilisation(
        rows: list[Observation],
        fit: Callable[[float], ClassFit],
        pooled_e: float | None,
        what: str,
        default: float,
    ) -> float:
        """e searched on `rows` when there are enough of them; else the pooled fit's (borrowed), else `default`."""
        if len(rows) >= MIN_ROWS:
            return _search(lambda e: _rel_sq(rows, fit(e)), 0.02, 1.0)
        if pooled_e is not None:
            borrowed.append(what)
            return pooled_e
        return default

    e_f = utilisation(
        pre,
        lambda e: replace(base, flops=e, decode_flops=e),
        None if pooled is None else pooled.flops,
        "prefill utilisation",
        0.5,
    )
    e_fd = utilisation(
        thr,
        lambda e: replace(base, flops=e_f, decode_flops=e),
        None if pooled is None else pooled.decode_flops,
        "batched decode utilisation",
        e_f,
    )
    return replace(
        base,
        flops=e_f,
        decode_flops=e_fd,
        prefill_rows=len(pre) + len(thr),
        sources=len({o.row.source_key for o in obs}),
        borrowed=tuple(borrowed),
    )


def _rel_sq(obs: Iterable[Observation], fit: ClassFit) -> float:
    return sum((predicted_seconds(o, fit) / o.seconds - 1) ** 2 for o in obs)


def _search(f: Callable[[float], float], lo: float, hi: float) -> float:
    """Golden-section search on log e for a unimodal error."""
    a, b = math.log(lo), math.log(hi)
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    for _ in range(40):
        if f(math.exp(c)) < f(math.exp(d)):
            b = d
        else:
            a = c
        c, d = b - g * (b - a), a + g * (b - a)
    return math.exp((a + b) / 2)


@dataclass(frozen=True)
class Fits:
    classes: dict[str, ClassFit]
    pooled: ClassFit
    fitted_on: tuple[str, ...]  # row ids
    held_back: tuple[str, ...]
    skipped: dict[str, str]  # row id -> why it teaches nothing here

    def for_engine(self, engine: str) -> ClassFit:
        cls = ENGINES.get(engine, engine)
        if cls not in ENGINE_CLASSES:
            raise InvalidParameterError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
        return self.classes.get(cls, replace(self.pooled, engine_class=cls, borrowed=("everything",)))


def observations() -> tuple[list[Observation], dict[str, str]]:
    obs, skipped = [], {}
    for row in published.rows():
        if row.kind != "speed":
            continue
        o = observation(row)
        if isinstance(o, str):
            skipped[row.id] = o
        else:
            obs.append(o)
    return obs, skipped


def fit_all(obs: list[Observation]) -> tuple[dict[str, ClassFit], ClassFit]:
    pooled = _fit_class("pooled", obs, None)
    classes = {}
    for cls in ENGINE_CLASSES:
        mine = [o for o in obs if o.row.engine_class == cls]
        if mine:
            classes[cls] = _fit_class(cls, mine, pooled)
    return classes, pooled


def loso_ratios(obs: list[Observation]) -> dict[tuple[str, str], list[float]]:
    """(class, kind) -> published / predicted over every row, each predicted by a fit without its source."""
    out: dict[tuple[str, str], list[float]] = {}
    for src in sorted({o.row.source_key for o in obs}):
        train = [o for o in obs if o.row.source_key != src]
        classes, pooled = fit_all(train)
        for o in obs:
            if o.row.source_key != src:
                continue
            cls = o.row.engine_class or "pooled"
            fit = classes.get(cls, pooled)
            out.setdefault((cls, o.kind), []).append(o.seconds / predicted_seconds(o, fit))
            out.setdefault(("pooled", o.kind), []).append(o.seconds / predicted_seconds(o, fit))
    return out


@cache
def fits() -> Fits:
    """The fit on the rows that are not held back, with leave-one-source-out intervals on the same rows."""
    obs, skipped = observations()
    train = [o for o in obs if not held_back(o.row.id)]
    classes, pooled = fit_all(train)
    ratios = loso_ratios(train)

    def band(cls: str, kind: str) -> tuple[float, float]:
        own = ratios.get((cls, kind), [])
        values = own if len(own) >= 5 else ratios.get(("pooled", kind), []) + own
        q = _quantiles(values)
        return q if all(map(math.isfinite, q)) else (0.5, 2.0)

    def with_bands(f: ClassFit) -> ClassFit:
        return replace(
            f,
            decode_ratio=band(f.engine_class, "decode"),
            prefill_ratio=band(f.engine_class, "prefill"),
            throughput_ratio=band(f.engine_class, "throughput"),
        )

    return Fits(
        classes={k: with_bands(v) for k, v in classes.items()},
        pooled=with_bands(pooled),
        fitted_on=tuple(o.row.id for o in train),
        held_back=tuple(o.row.id for o in obs if held_back(o.row.id)),
        skipped=skipped,
    )


# ---------------------------------------------------------------- estimates with intervals


@dataclass(frozen=True)
class SpeedEstimate:
    engine: str
    engine_class: str
    decode_tokens_per_s: Interval  # one sequence's rate at the batch (1 / TPOT)
    ttft_s: Interval
    output_tokens_per_s: Interval  # the whole batch: batch x output / (TTFT + (output - 1) x TPOT)
    tpot_s: Interval
    fit: ClassFit
    notes: tuple[str, ...]


def _rate(central: float, ratio: tuple[float, float], bound: float) -> Interval:
    """A rate from a central time-based estimate: published/predicted time ratios r widen it to
    rate / r_high .. rate / r_low; never above the physical bound."""
    lo, hi = ratio
    return Interval(central / hi, central, min(central / lo, bound), bound)


def _time(central: float, ratio: tuple[float, float], bound: float) -> Interval:
    lo, hi = ratio
    return Interval(max(central * lo, bound), central, central * hi, bound)


def estimate_speed(s: Setup, engine: str) -> SpeedEstimate:
    """Decode rate, first-token latency and batch throughput for `engine` on the setup's GPU, each as a central
    estimate from the class's fitted utilisation, an interval from its leave-one-source-out errors, and the
    bound."""
    all_fits = fits()
    fit = all_fits.for_engine(engine)
    gpu, batch = s.gpu, s.batch
    central = timing(s, fit.efficiency(gpu))
    bound = bound_timing(s)
    tpot = _time(central.decode_s_per_token, fit.decode_ratio, bound.decode_s_per_token)
    ttft = _time(central.ttft_s, fit.prefill_ratio, bound.ttft_s)
    batch_ratio = fit.decode_ratio if batch <= 1 else fit.throughput_ratio
    out_rate = _rate(central.tokens_per_s, batch_ratio, bound.tokens_per_s)
    notes = []
    if fit.borrowed:
        notes.append(
            f"{ENGINES.get(engine, engine)}: too few published rows for its own {', '.join(fit.borrowed)}: "
            "taken from the fit over every engine"
        )
    if batch > 1 and fit.throughput_ratio == fit.decode_ratio:
        notes.append("batched throughput's interval comes from single-sequence decode rows")
    return SpeedEstimate(
        engine=engine,
        engine_class=fit.engine_class,
        decode_tokens_per_s=tpot.inverse(),
        ttft_s=ttft,
        output_tokens_per_s=out_rate,
        tpot_s=tpot,
        fit=fit,
        notes=tuple(notes),
    )
