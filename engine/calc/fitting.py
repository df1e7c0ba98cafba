"""The engine-efficiency fit itself: each engine class's utilisation, fixed costs and GPU-family time factors by least
squares on the relative error of published times, the prediction of one published observation, and the out-of-fold
residuals the intervals are read from (engine.calc.cells). The model and its sources are engine.calc.efficiency's
docstring; this module is its arithmetic. Standard library only.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache

from engine.calc import published
from engine.calc.cells import Bands, Cell, Residual, gpu_family, regime_of
from engine.calc.fitmath import golden_search_log, least_squares_relative
from engine.calc.observations import LAYER_SPLIT, Observation
from engine.calc.serving_time import closed_loop
from engine.calc.specs import GPUSpec
from engine.calc.timing import Efficiency, Setup, TimingEstimate, timing_from, timing_inputs

ENGINE_CLASSES: dict[str, str] = {
    "hf": "Hugging Face transformers, eager (a Python loop over unfused kernels)",
    "hf-compiled": "torch.compile with CUDA graphs over a static cache (transformers compiled, gpt-fast)",
    "vllm": "serving engines with paged attention, fused kernels and CUDA graphs (vLLM, SGLang, TGI)",
    "mlc": "MLC LLM (TVM-compiled kernels)",
    "tensorrt-llm": "NVIDIA TensorRT-LLM (compiled engines, fused kernels)",
    "deepspeed-fastgen": "DeepSpeed-FastGen / DeepSpeed-MII (Dynamic SplitFuse over a blocked KV cache)",
    "llama.cpp": "llama.cpp's CUDA backend (GGUF weights; several GPUs as pipeline stages)",
    "exllamav2": "ExLlamaV2 (EXL2/GPTQ kernels for consumer GPUs; several GPUs as pipeline stages)",
    "lmdeploy": "LMDeploy TurboMind (a C++/CUDA engine from FasterTransformer, blocked KV cache, persistent batching)",
}
# `--engine` names -> class; SGLang and TGI are fitted with vLLM (the same kind of engine, few rows of their own)
ENGINES: dict[str, str] = {
    "hf": "hf",
    "hf-compiled": "hf-compiled",
    "vllm": "vllm",
    "sglang": "vllm",
    "tgi": "vllm",
    "mlc": "mlc",
    "tensorrt-llm": "tensorrt-llm",
    "deepspeed-mii": "deepspeed-fastgen",
    "llama.cpp": "llama.cpp",
    "exllamav2": "exllamav2",
    "lmdeploy": "lmdeploy",
}
# The names the pages show (and people type) for the keys above: the student's walk typed the page's "transformers"
# and got "unknown engine 'transformers'".
ENGINE_ALIASES = {
    "transformers": "hf",
    "transformers-compiled": "hf-compiled",
    "trt-llm": "tensorrt-llm",
    "trtllm": "tensorrt-llm",
    "deepspeed": "deepspeed-mii",
    "fastgen": "deepspeed-mii",
    "llamacpp": "llama.cpp",
}


def engine_name(text: str) -> str:
    """An engine as typed (a key, or the name a page shows) -> its key; anything else is left for the choices to
    refuse."""
    t = text.strip().lower()
    return ENGINE_ALIASES.get(t, t)


FOLDS = 5  # cross-validation folds behind the intervals
MIN_ROWS = 2  # fewer rows of a kind than this: a class borrows the pooled parameter
# T_half candidates (0: no ramp); a class fits its own only where its prefill rows span a 4x range of tokens
HALF_TOKENS_GRID = (0.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0)
HALF_TOKENS_SPAN = 4.0
FAMILY_PRIOR_ROWS = 3.0  # shrinkage of a family's time factor towards 1 (n / (n + 3) of its own mean)
# band kinds: which residuals an estimate's interval is read from
BAND_KIND = {
    "decode": "decode",
    "load_tpot": "decode",
    "prefill": "ttft",
    "load_ttft": "ttft",
    "throughput": "throughput",
    "load_throughput": "throughput",
}


# ---------------------------------------------------------------- all-reduce latency from published NCCL runs


def allreduce_latency_s(gpu: GPUSpec) -> float:
    """nccl-tests' all_reduce_perf time at its smallest published message over the GPU's kind of link (NVLink or
    PCIe): the fixed cost of one all-reduce before any byte counts."""
    return _allreduce_latency(link_kind(gpu.interconnect))


@cache
def _allreduce_latency(link: str) -> float:
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


# ---------------------------------------------------------------- one class's fit


@dataclass(frozen=True)
class ClassFit:
    """One engine class's fitted utilisation and fixed costs, what it was fitted on, and its GPU-family factors."""

    engine_class: str
    bandwidth: float  # e_bw: decode MBU
    overhead_s_per_layer: float  # o: fixed cost per layer per forward
    allreduce_factor: float  # k: multiplies nccl-tests' small-message latency
    flops: float  # e_f: prefill MFU
    decode_flops: float  # e_fd: a batched decode step's compute-bound matmuls
    request_fixed_s: float = 0.0  # c: a request's fixed cost before its first token
    stage_hop_s: float = 0.0  # h: a pipeline stage's hand-over (layer-split engines)
    prefill_half_tokens: float = 0.0  # T_half: prefill tokens at which the prefill reaches half of e_f
    decode_rows: int = 0
    prefill_rows: int = 0
    throughput_rows: int = 0
    sources: int = 0
    borrowed: tuple[str, ...] = ()  # parameters taken from the pooled fit (too few rows of its own)
    family_factors: Mapping[tuple[str, str], float] = field(
        default_factory=dict
    )  # (band kind, family) -> x time
    families_borrowed: tuple[str, ...] = ()  # families whose decode factor came from other classes

    def factor(self, kind: str, family: str) -> float:
        return self.family_factors.get((kind, family), 1.0)

    def efficiency(self, gpu: GPUSpec) -> Efficiency:
        """The class's utilisation on this GPU: its family's time factors applied (a slower family reaches a
        smaller share of the roofs and pays more fixed cost), never above the roofs."""
        fam = gpu_family(gpu)
        fd, fp, ft = self.factor("decode", fam), self.factor("ttft", fam), self.factor("throughput", fam)
        return Efficiency(
            bandwidth=min(1.0, self.bandwidth / fd),
            flops=min(1.0, self.flops / fp),
            step_overhead_s_per_layer=self.overhead_s_per_layer * fd,
            label=f"fitted: {self.engine_class}",
            allreduce_latency_s=self.allreduce_factor * allreduce_latency_s(gpu) * fd,
            decode_flops=min(1.0, self.decode_flops / ft),
            request_fixed_s=self.request_fixed_s * fp,
            stage_hop_s=self.stage_hop_s * fd,
            prefill_half_tokens=self.prefill_half_tokens,
        )

    @property
    def layer_split(self) -> bool:
        return self.engine_class in LAYER_SPLIT


def bound_efficiency() -> Efficiency:
    """The physical bound: every roof reached, nothing else (the datasheet calculator)."""
    return Efficiency(label="physics")


def timing(s: Setup, eff: Efficiency) -> TimingEstimate:
    return timing_from(timing_inputs(s), eff)


def bound_timing(s: Setup) -> TimingEstimate:
    return timing(s, bound_efficiency())


# ---------------------------------------------------------------- predicting an observation


@dataclass(frozen=True)
class Prediction:
    seconds: float
    regime: str


def predict(obs: Observation, eff: Efficiency) -> Prediction:
    """The time the observation states, from an efficiency (the kind's own formula: engine.calc.observations)."""
    if obs.kind.startswith("load_"):
        lt = closed_loop(obs.setup, eff, obs.concurrency, burst=obs.burst)
        seconds = {
            "load_throughput": obs.concurrency / lt.output_tokens_per_s,
            "load_ttft": lt.ttft_s,
            "load_tpot": lt.tpot_s,
        }[obs.kind]
        fixed = lt.fixed_s + (lt.queue_s if obs.kind == "load_ttft" else 0.0)
        return Prediction(seconds, regime_of(fixed_s=fixed, memory_s=seconds - fixed, compute_s=0.0))
    t = timing_from(obs.inputs, eff)
    i = obs.inputs
    fixed_step = i.allreduces * eff.allreduce_latency_s + i.hops * eff.stage_hop_s
    if obs.kind == "decode":
        d = t.decode_step
        return Prediction(
            d.seconds,
            regime_of(fixed_s=d.overhead_s + fixed_step, memory_s=d.memory_s, compute_s=d.compute_s),
        )
    p = t.prefill
    request = eff.request_fixed_s if obs.request else 0.0
    if obs.kind == "prefill":
        return Prediction(
            p.seconds + request,
            regime_of(
                fixed_s=request + p.overhead_s + fixed_step, memory_s=p.memory_s, compute_s=p.compute_s
            ),
        )
    # a static batch's time per step: its decode step plus the prefill's share spread over the output
    d = t.decode_step
    return Prediction(
        d.seconds + (p.seconds + request) / obs.setup.output_tokens,
        regime_of(fixed_s=d.overhead_s + fixed_step, memory_s=d.memory_s, compute_s=d.compute_s),
    )


def predicted_seconds(obs: Observation, fit: ClassFit) -> float:
    return predict(obs, fit.efficiency(obs.setup.gpu)).seconds


def _features(o: Observation) -> tuple[float, float, float, float]:
    """(roof time at e = 1 with the byte time of all-reduces and hand-overs, layers, all-reduces x nccl latency,
    stage boundaries) of one decode step: with every operator memory-bound, the decode time is
    x1 / e_bw + x2 x o + x3 x k + x4 x h."""
    return _features_cached(o.row.id, o)


_FEATURES: dict[str, tuple[float, float, float, float]] = {}


def _features_cached(key: str, o: Observation) -> tuple[float, float, float, float]:
    """A burst's TPOT is its batch's decode step (engine.calc.serving_time), so it has the same features."""
    if key not in _FEATURES:
        t = timing_from(o.inputs, Efficiency(label="features")).decode_step
        _FEATURES[key] = (
            t.memory_s + t.compute_s + t.comm_s,
            float(o.inputs.n_layer),
            o.inputs.allreduces * allreduce_latency_s(o.setup.gpu),
            float(o.inputs.hops),
        )
    return _FEATURES[key]


def _memory_bound(o: Observation) -> bool:
    """A decode step whose operators are all memory-bound at the roofs: its time is linear in 1 / e_bw."""
    return timing_from(o.inputs, Efficiency(label="features")).decode_step.compute_s == 0


def _rel_sq(obs: Iterable[Observation], fit: ClassFit) -> float:
    return sum((predicted_seconds(o, fit) / o.seconds - 1) ** 2 for o in obs)


def _fit_decode(dec: list[Observation], pooled: ClassFit | None, borrowed: list[str]) -> tuple[float, ...]:
    """(e_bw, o, k, h) by least squares on batch-1 decode rows; k and h only where rows exercise them."""
    if len(dec) < MIN_ROWS:
        if pooled is not None:
            borrowed += ["bandwidth", "overhead", "all-reduce factor", "stage hand-over"]
            return pooled.bandwidth, pooled.overhead_s_per_layer, pooled.allreduce_factor, pooled.stage_hop_s
        return 1.0, 0.0, 1.0, 0.0
    feats = [(_features(o), o.seconds) for o in dec]
    beta = least_squares_relative(feats, 4)
    inv_e, o_layer, k, h = beta
    if not any(f[2] for f, _ in feats):
        k = pooled.allreduce_factor if pooled is not None else 1.0
        if pooled is not None:
            borrowed.append("all-reduce factor")
    if not any(f[3] for f, _ in feats):
        h = pooled.stage_hop_s if pooled is not None else 0.0
    return (min(1.0, 1.0 / inv_e) if inv_e > 0 else 1.0), o_layer, k, h


def _served_first_tokens(obs: list[Observation], pooled: ClassFit | None) -> list[Observation]:
    """A class's first-token times measured under a load (a server's TTFT at c users, or a burst): each carries
    the class's own fixed cost per request. The pooled fit leaves them out, so the classes that borrow from it
    (static, server-less runs) keep a fixed cost measured without a server."""
    return [o for o in obs if o.kind == "load_ttft"] if pooled is not None else []


def _fit_request_fixed(base: ClassFit, served: list[Observation]) -> float:
    """c by least squares on the relative error of served first-token rows, given the class's prefill: a load's
    TTFT is c + prefill + queue, with the queue free of c (engine.calc.serving_time), so c has a closed form."""
    no_fixed = replace(base, request_fixed_s=0.0)
    num = sum((o.seconds - predicted_seconds(o, no_fixed)) / o.seconds**2 for o in served)
    den = sum(1 / o.seconds**2 for o in served)
    return max(0.0, num / den)


def _fit_prefill(
    base: ClassFit, pre: list[Observation], half: float | None = None
) -> tuple[float, float, float]:
    """(e_f, c, T_half): for each T_half of HALF_TOKENS_GRID (or the one given), e_f by a one-dimensional search (the
    time is not linear in 1/e where operators change bound) and the fixed cost c in closed form for each e_f (least
    squares on the relative error, c >= 0); the T_half whose best fit errs least."""

    requests = [o for o in pre if o.request]

    def fixed_for(e: float, t_half: float) -> float:
        if not requests:
            return 0.0
        return _fit_request_fixed(replace(base, flops=e, prefill_half_tokens=t_half), requests)

    def fitted(e: float, t_half: float) -> ClassFit:
        return replace(base, flops=e, request_fixed_s=fixed_for(e, t_half), prefill_half_tokens=t_half)

    best: tuple[float, float, float, float] | None = None
    for t_half in HALF_TOKENS_GRID if half is None else (half,):
        e_f = golden_search_log(_prefill_error(pre, fitted, t_half), 0.02, 1.0)
        err = _rel_sq(pre, fitted(e_f, t_half))
        if best is None or err < best[0]:
            best = (err, e_f, fixed_for(e_f, t_half), t_half)
    assert best is not None
    return best[1], best[2], best[3]


def _prefill_error(
    pre: list[Observation], fitted: Callable[[float, float], ClassFit], t_half: float
) -> Callable[[float], float]:
    return lambda e: _rel_sq(pre, fitted(e, t_half))


def _spans_prompt_lengths(pre: list[Observation]) -> bool:
    """Prefill rows whose token counts span HALF_TOKENS_SPAN: enough to tell a ramp from a lower utilisation."""
    tokens = [o.setup.batch * o.setup.prompt_tokens for o in pre]
    return bool(tokens) and max(tokens) >= HALF_TOKENS_SPAN * min(tokens)


def _family_factors(cls_fit: ClassFit, obs: list[Observation]) -> dict[tuple[str, str], float]:
    """Per band kind, in order (decode first: its factor moves the bandwidth prefill also reads), the geometric
    mean of published / predicted over the class's rows on each GPU family, shrunk towards 1."""
    factors: dict[tuple[str, str], float] = {}
    for kind in ("decode", "ttft", "throughput"):
        current = replace(cls_fit, family_factors=dict(factors))
        sums: dict[str, list[float]] = {}
        for o in obs:
            if BAND_KIND[o.kind] != kind or o.kind.startswith("load_"):
                continue
            sums.setdefault(gpu_family(o.setup.gpu), []).append(
                math.log(o.seconds / predicted_seconds(o, current))
            )
        for fam, logs in sums.items():
            factors[(kind, fam)] = math.exp(sum(logs) / (len(logs) + FAMILY_PRIOR_ROWS))
    return factors


def _fit_class(cls: str, obs: list[Observation], pooled: ClassFit | None) -> ClassFit:
    borrowed: list[str] = []
    dec = [o for o in obs if o.kind == "decode" or (o.kind == "load_tpot" and o.burst and _memory_bound(o))]
    pre = [o for o in obs if o.kind == "prefill"]
    served = _served_first_tokens(obs, pooled)
    thr = [
        o for o in obs if o.kind == "throughput" or (o.kind in ("load_tpot", "load_throughput") and o.burst)
    ]
    e_bw, o_layer, k, h = _fit_decode(dec, pooled, borrowed)
    base = ClassFit(cls, e_bw, o_layer, k, 1.0, 1.0, 0.0, h)
    half: float | None = None
    if len(pre) >= MIN_ROWS and not _spans_prompt_lengths(pre) and pooled is not None:
        half = pooled.prefill_half_tokens
        borrowed.append("prefill ramp")
    if len(pre) >= MIN_ROWS and any(o.request for o in pre):
        e_f, fixed, t_half = _fit_prefill(base, pre, half)
    elif len(pre) >= MIN_ROWS:
        e_f, _, t_half = _fit_prefill(base, pre, half)
        fixed = pooled.request_fixed_s if pooled is not None else 0.0
        borrowed.append("request fixed cost")
    elif pooled is not None:
        e_f, fixed, t_half = pooled.flops, pooled.request_fixed_s, pooled.prefill_half_tokens
        borrowed += ["prefill utilisation", "prefill ramp"]
        if len(served) < MIN_ROWS:
            borrowed.append("request fixed cost")
    else:
        e_f, fixed, t_half = 0.5, 0.0, 0.0
    base = replace(base, flops=e_f, decode_flops=e_f, request_fixed_s=fixed, prefill_half_tokens=t_half)
    if len(served) >= MIN_ROWS:
        # the class's own served first tokens, with the batch-1 prefill rows that measure a request (if any)
        own = served + [o for o in pre if o.request and len(pre) >= MIN_ROWS]
        base = replace(base, request_fixed_s=_fit_request_fixed(base, own))
    if len(thr) >= MIN_ROWS:
        e_fd = golden_search_log(lambda e: _rel_sq(thr, replace(base, decode_flops=e)), 0.02, 1.0)
    elif pooled is not None:
        e_fd = pooled.decode_flops
        borrowed.append("batched decode utilisation")
    else:
        e_fd = e_f
    fit = replace(
        base,
        decode_flops=e_fd,
        decode_rows=len(dec),
        prefill_rows=len(pre) + len(served),
        throughput_rows=len(thr),
        sources=len({o.row.source_key for o in obs}),
        borrowed=tuple(borrowed),
    )
    return replace(fit, family_factors=_family_factors(fit, obs))


def fit_all(obs: list[Observation]) -> tuple[dict[str, ClassFit], ClassFit]:
    pooled = _fit_class("pooled", obs, None)
    classes = {}
    for cls in ENGINE_CLASSES:
        mine = [o for o in obs if o.row.engine_class == cls]
        if mine:
            classes[cls] = _fit_class(cls, mine, pooled)
    return borrow_family_factors(classes), pooled


def borrow_family_factors(classes: Mapping[str, ClassFit], kind: str = "decode") -> dict[str, ClassFit]:
    """A class with no rows on a GPU family takes that family's decode time factor from the classes that ran on
    it and on a family this class ran on: factor(F) = exp(mean over the class's own families G of
    [log factor(G) + mean over the other classes of log(their factor(F) / their factor(G))]).

    One efficiency per class cannot hold across families (engines stream a GDDR6X card nearer its datasheet than
    an A100's HBM2e: llama.cpp, MLC and ExLlamaV2 each run 3-19% less time per token on Ada GDDR than on Ampere
    HBM, relative to their own fit); a class fitted only on A100s would otherwise read an RTX 4090 at the A100's
    share. Only families where the class has no rows of any kind borrow (where it has first-token or throughput
    rows, its own factors for those were fitted with the decode factor it had). Families no two classes share
    stay at 1."""
    own = {
        c: {fam: f for (k, fam), f in fit.family_factors.items() if k == kind} for c, fit in classes.items()
    }
    rel: dict[tuple[str, str], list[float]] = {}
    for fams in own.values():
        for f, a in fams.items():
            for g, b in fams.items():
                if f != g:
                    rel.setdefault((f, g), []).append(math.log(a / b))
    out = {}
    for c, fit in classes.items():
        fams, extra = own[c], {}
        ran_on = {
            fam for _, fam in fit.family_factors
        }  # any kind: its own ttft/throughput factors hold there
        for f in sorted({f for f, _ in rel} - ran_on):
            logs = [math.log(fams[g]) + statistics.fmean(rel[(f, g)]) for g in fams if (f, g) in rel]
            if logs:
                extra[(kind, f)] = math.exp(statistics.fmean(logs))
        out[c] = (
            replace(
                fit,
                family_factors={**fit.family_factors, **extra},
                families_borrowed=tuple(f for _, f in extra),
            )
            if extra
            else fit
        )
    return out


def _cell(o: Observation, fit: ClassFit) -> tuple[str, Cell]:
    """(band kind, cell) of an observation; the regime from the fit's own prediction."""
    p = predict(o, fit.efficiency(o.setup.gpu))
    return BAND_KIND[o.kind], (o.row.engine_class or "pooled", gpu_family(o.setup.gpu), p.regime)


def fold_of(row_id: str) -> int:
    """Cross-validation fold of a fitted row: the second byte of sha256(id) mod FOLDS (the first byte decides the
    held-back split, so the folds cut across it)."""
    return hashlib.sha256(row_id.encode()).digest()[1] % FOLDS


def out_of_fold_residuals(
    obs: list[Observation], full: Mapping[str, ClassFit], pooled: ClassFit
) -> dict[str, Bands]:
    """Per band kind: every fitted row's log(published / predicted), each predicted by a fit made without its
    fold (FOLDS-fold cross-validation), filed under the row's cell (its regime as the full fit sees it)."""
    items: dict[str, list[tuple[Cell, Residual]]] = {}
    for k in range(FOLDS):
        classes, fold_pooled = fit_all([o for o in obs if fold_of(o.row.id) != k])
        for o in obs:
            if fold_of(o.row.id) != k:
                continue
            cls = o.row.engine_class or "pooled"
            fold = classes.get(cls, replace(fold_pooled, engine_class=cls))
            kind, cell = _cell(o, full.get(cls, pooled))
            r = Residual(math.log(o.seconds / predicted_seconds(o, fold)), o.row.source_key, o.row.id)
            items.setdefault(kind, []).append((cell, r))
    return {kind: Bands.of(v) for kind, v in items.items()}
