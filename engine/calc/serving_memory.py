"""GPU memory as serving engines allocate it: vLLM's KV-cache budget and "Maximum concurrency", SGLang's pool.

vLLM (vllm/worker/worker.py determine_num_available_blocks in V0; vllm/v1/worker/gpu_worker.py
determine_available_memory in V1) takes the total the driver reports, keeps `gpu_memory_utilization` of it
(0.9), profiles one forward pass of `max_num_batched_tokens` dummy tokens, and gives the KV cache what is left:

    kv = total x utilisation - weights per GPU - activation peak (the profile run) - non-torch memory (CUDA
    context, NCCL buffers),
    blocks = floor(kv / (block_size x KV bytes per token per GPU)), KV tokens = blocks x block_size,
    maximum concurrency for L tokens per request = KV tokens / L (vllm/v1/core/kv_cache_utils.py).

The activation peak and the non-torch memory are not in any config: they are fitted on vLLM's own startup logs
(engine/data/published/memory.toml, "PyTorch activation peak memory takes ...", "non_torch_memory takes ..."):
activation = bytes x T x (3 I / tp + 4 h) + c_s x 4 x S x V: the biggest transient of a layer (its MLP's gate, up
and activation outputs and the residual stream over T tokens) plus the sampler's fp32 copies of the logits of the
S sequences the profile run samples, c_s the median over the logs of what each implies; non-torch memory is the
median of the logs, one GPU and several apart. Sliding-window layers count as full
attention, as vLLM 0.8 sizes them (0.11 keeps only the window for them; the estimate says so).

SGLang (python/sglang/srt/model_executor/model_runner.py profile_max_num_token) keeps `mem_fraction_static`
(0.88 on one GPU of 80 GB or less, lower with more GPUs) of the memory for weights and the KV pool:
max_total_num_tokens = (total x fraction - weights per GPU) / KV bytes per token per GPU.
Standard library only.
"""

from __future__ import annotations

import math
import statistics
import tomllib
from dataclasses import dataclass
from functools import cache
from typing import Any

from engine.calc import published
from engine.calc.memory import kv_bytes_per_token, weights_bytes
from engine.calc.roofline import activation_bytes
from engine.calc.specs import (
    DATA_DIR,
    GPUSpec,
    ModelSpec,
    gpu_spec,
    load_gpu_catalog,
    positive_float,
    positive_int,
)
from engine.calc.timing import Setup
from engine.core.errors import InvalidParameterError

GIB = 2**30
VLLM_UTILIZATION = 0.9  # vllm/engine/arg_utils.py (0.6 ... 0.11); 0.92 from 0.21 on
VLLM_BLOCK_SIZE = 16
SERVING_ENGINES = ("vllm", "sglang")


def sglang_fraction(total_bytes: float, tp: int) -> float:
    """SGLang's default mem_fraction_static (server_args.py, 0.4.6): 0.88 / 0.87 / 0.85 / 0.81 / 0.79 for 1 / 2+ /
    4+ / 8+ / 16+ GPUs of at most 80 GiB; 0.88 on larger GPUs."""
    if total_bytes / 2**20 > 81920:
        return 0.88
    for n, f in ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87)):
        if tp >= n:
            return f
    return 0.88


def _large_gpu(total_bytes: float, gpu_name: str) -> bool:
    """vLLM V1's larger defaults: 'For GPUs like H100, H200, and MI300x with >= 70GB memory', A100s excepted
    (vllm/engine/arg_utils.py, `device_memory >= 70 * GiB_bytes and "a100" not in device_name`, since PR #17885:
    larger batches cost A100 throughput)."""
    return total_bytes >= 70 * GIB and "a100" not in gpu_name.lower()


def vllm_batched_tokens(total_bytes: float, max_model_len: int, era: str, gpu_name: str = "") -> int:
    """The profile run's tokens: V0 without chunked prefill max(max_model_len, 2048) (512 with it, which V0 turns on
    past 32768 tokens); V1's OpenAI server 2048, 8192 on the large GPUs of `_large_gpu`."""
    if era == "v0":
        return 512 if max_model_len > 32768 else max(max_model_len, 2048)
    return 8192 if _large_gpu(total_bytes, gpu_name) else 2048


def vllm_max_num_seqs(total_bytes: float, era: str, gpu_name: str = "") -> int:
    return 1024 if era == "v1" and _large_gpu(total_bytes, gpu_name) else 256


@cache
def _cuda_totals() -> dict[str, float]:
    with (DATA_DIR / "gpus.toml").open("rb") as f:
        raw = tomllib.load(f)
    return {k: float(v["cuda_total_gib"]) * GIB for k, v in raw.items() if "cuda_total_gib" in v}


@cache
def cuda_gap_bytes() -> float:
    """The median of (driver total - CUDA total) over the catalogue's GPUs that have both."""
    gaps = [gpu_spec(k).memory_bytes - v for k, v in _cuda_totals().items()]
    return statistics.median(gaps) if gaps else 0.0


def cuda_total_bytes(gpu: GPUSpec) -> float:
    """The total a serving engine budgets from: what CUDA reports (torch.cuda.mem_get_info), as a vLLM startup log
    on that card prints it (engine/data/gpus.toml `cuda_total_gib`); else the driver's total less the median gap
    of the cards that have both (a custom GPU's figure is taken as given)."""
    known = _cuda_totals().get(gpu.key)
    if known is not None:
        return known
    if gpu.key in _catalog_keys():
        return gpu.memory_bytes - cuda_gap_bytes()
    return gpu.memory_bytes


@cache
def _catalog_keys() -> frozenset[str]:
    return frozenset(load_gpu_catalog())


@dataclass(frozen=True)
class ActivationModel:
    per_token: float  # c_t
    per_sequence: dict[str, float]  # c_s per engine era ("v0", "v1")
    non_torch_one_gpu: float  # bytes
    non_torch_parallel: float  # bytes, per GPU with tensor parallel
    rows: tuple[str, ...]
    assumed: tuple[str, ...]  # eras without a log to fit on: c_s = 1 (one fp32 copy of the logits)


def activation_terms(spec: ModelSpec, tp: int, dtype: str, tokens: int, seqs: int) -> tuple[float, float]:
    """(bytes x T x (3 I / tp + 4 h), 4 x S x V): the two terms the activation peak is fitted on."""
    a = activation_bytes(dtype)
    width = spec.dense_intermediate or spec.intermediate
    if spec.is_moe:
        width = max(width, spec.intermediate * spec.experts_per_token)
    return a * tokens * (3 * width / tp + 4 * spec.hidden), 4.0 * min(seqs, tokens) * spec.vocab


@cache
def activation_model() -> ActivationModel:
    """Fit c_t, c_s on the startup logs that print the activation peak (least squares on the relative error)."""
    from engine.calc.observations import held_back, setup_of

    fit_rows: list[tuple[tuple[float, float], float, str, str]] = []
    non_one: list[float] = []
    non_tp: list[float] = []
    by_id = {r.id: r for r in published.rows()}
    unscored = published.aliases().get("unscored", {})
    for r in published.rows():
        if r.kind != "memory" or r.engine != "vllm":
            continue
        if r.metric == "non_torch_gib" and not held_back(r.id):
            (non_one if r.tensor_parallel <= 1 else non_tp).append(r.value * GIB)
        if r.metric not in ("activation_peak_gib", "peak_torch_gib") or held_back(r.id) or r.id in unscored:
            continue
        s = setup_of(r)
        suffix = "-" + r.id.rsplit("-", 1)[1]
        total_row = by_id.get(r.id.replace(suffix, "-total"))
        weights_row = next(  # the same run's weights (a source states them once for all its runs)
            (
                w
                for w in by_id.values()
                if w.metric == "weights_gib" and w.source == r.source and w.model == r.model
            ),
            None,
        )
        if isinstance(s, str) or not r.max_model_len:
            continue
        peak = r.value * GIB
        if r.metric == "peak_torch_gib":  # the profile run's torch peak holds the weights too
            if weights_row is None:
                continue
            peak -= weights_row.value * GIB
        total = total_row.value * GIB if total_row else cuda_total_bytes(s.gpu)
        era = vllm_era(r)
        t = vllm_batched_tokens(total, r.max_model_len, era, s.gpu.name)
        x = activation_terms(s.spec, r.tensor_parallel, s.dtype, t, vllm_max_num_seqs(total, era, s.gpu.name))
        fit_rows.append((x, peak, r.id, era))
    per_era: dict[str, float] = {}
    assumed: list[str] = []
    for era in ("v0", "v1"):
        implied = [(y - x[0]) / x[1] for x, y, _, e in fit_rows if x[1] > 0 and e == era]
        per_era[era] = max(0.0, statistics.median(implied)) if implied else 1.0
        if not implied:
            assumed.append(era)
    return ActivationModel(
        1.0,
        per_era,
        statistics.median(non_one) if non_one else 0.0,
        statistics.median(non_tp) if non_tp else 0.0,
        tuple(i for _, _, i, _ in fit_rows),
        tuple(assumed),
    )


def vllm_era(row: published.PublishedRow) -> str:
    """ "v0" or "v1" from the version a log states, else from the log's own wording (V0 prints '# GPU blocks',
    'worker.py' memory profiling, 'Loading model weights took'; V1 'GPU KV cache size' and 'Model loading took')."""
    v = row.engine_version
    if v and v[0].isdigit():
        parts = v.split(".")
        return (
            "v0"
            if len(parts) > 1
            and int(parts[0]) == 0
            and int("".join(c for c in parts[1] if c.isdigit()) or 0) < 8
            else "v1"
        )
    q = row.log_text or row.quote
    if "GPU blocks" in q or "CUDA blocks" in q or "worker.py" in q or "Loading model weights took" in q:
        return "v0"
    return "v1"


@dataclass(frozen=True)
class ServingMemory:
    engine: str  # "vllm" | "sglang"
    total_bytes: float  # per GPU, as the driver reports it
    utilization: float  # gpu_memory_utilization / mem_fraction_static
    budget_bytes: float  # total x utilisation
    weights_bytes: float  # per GPU
    activation_bytes: float  # the profile run's peak (vLLM)
    non_torch_bytes: float
    kv_bytes: float  # per GPU; <= 0: no room
    kv_bytes_per_token: float  # per GPU
    block_size: int
    blocks: int
    kv_cache_tokens: int
    max_model_len: int
    max_concurrency: float  # requests of max_model_len tokens the cache holds at once
    max_num_batched_tokens: int
    max_num_seqs: int
    era: str
    notes: tuple[str, ...]

    @property
    def fits(self) -> bool:
        """The weights, the profile run and the runtime leave room for a cache (at least one block). A cache
        smaller than one request of max_model_len makes vLLM ask for a shorter --max-model-len (max_concurrency
        below 1 says so), not for more GPUs."""
        return self.kv_cache_tokens >= self.block_size


def serving_memory(
    spec: ModelSpec,
    gpu: GPUSpec,
    *,
    engine: str = "vllm",
    dtype: str,
    weight_format: str | None = None,
    group_size: int | None = None,
    scope: str | None = None,
    kv_dtype: str | None = None,
    tensor_parallel: int = 1,
    pipeline_parallel: int = 1,
    gpu_memory_utilization: float | None = None,
    max_model_len: int | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    block_size: int = VLLM_BLOCK_SIZE,
    era: str = "v1",
) -> ServingMemory:
    """KV cache in tokens and maximum concurrency for L tokens per request, as vLLM (or SGLang) would print them
    at start-up on `tensor_parallel` x `pipeline_parallel` GPUs of `gpu`."""
    if engine not in SERVING_ENGINES:
        raise InvalidParameterError(
            f"memory as a serving engine allocates it: engine must be one of {SERVING_ENGINES}"
        )
    tp = positive_int("tensor parallel size", tensor_parallel)
    pp = positive_int("pipeline parallel size", pipeline_parallel)
    L = positive_int("max model length", max_model_len or spec.context_length)
    total = cuda_total_bytes(gpu)
    if engine == "vllm":
        util = gpu_memory_utilization if gpu_memory_utilization is not None else VLLM_UTILIZATION
    else:
        util = gpu_memory_utilization if gpu_memory_utilization is not None else sglang_fraction(total, tp)
    util = positive_float("GPU memory utilization", util)
    if util > 1:
        raise InvalidParameterError(
            f"GPU memory utilization is a fraction of the memory (0 < u <= 1), got {util}"
        )
    kv_dtype = kv_dtype or ("fp16" if weight_format or dtype in ("int8", "int4", "fp8") else dtype)
    notes: list[str] = []
    w = weights_bytes(spec, dtype, weight_format, group_size, scope) / (tp * pp)
    per_token = kv_bytes_per_token(spec, kv_dtype) / pp
    kv_heads_per_rank = spec.n_kv_head / tp
    if spec.is_mla:
        notes.append("latent attention: every tensor-parallel rank keeps the whole latent cache")
    elif kv_heads_per_rank < 1:
        per_token = per_token / spec.n_kv_head  # each rank keeps one KV head: replicated past the head count
        notes.append(f"{spec.n_kv_head} KV heads over {tp} GPUs: each GPU keeps a copy of one KV head")
    else:
        per_token /= tp
    if spec.window_evicts and spec.window_layers:
        notes.append(
            "sliding-window layers are sized as full attention, as vLLM 0.8 does; vLLM 0.11's hybrid allocator "
            "keeps only the window for them, so it holds more"
        )
    budget = total * util
    if engine == "vllm":
        model = activation_model()
        seqs = max_num_seqs or vllm_max_num_seqs(total, era, gpu.name)
        batched = max_num_batched_tokens or vllm_batched_tokens(total, L, era, gpu.name)
        x_t, x_s = activation_terms(spec, tp, dtype, batched, seqs)
        act = model.per_token * x_t + model.per_sequence[era] * x_s
        if era in model.assumed:
            notes.append(
                f"no vLLM {era.upper()} startup log in the published set prints its activation peak: the sampler's "
                "logits are counted once in fp32"
            )
        non_torch = model.non_torch_parallel if tp * pp > 1 else model.non_torch_one_gpu
        kv = budget - w - act - non_torch
        block = positive_int("block size", block_size)
        blocks = max(0, math.floor(kv / (block * per_token))) if per_token else 0
        tokens = blocks * block
    else:
        seqs = max_num_seqs or 0
        batched, act, non_torch, block = 0, 0.0, 0.0, 1
        kv = budget - w
        tokens = max(0, math.floor(kv / per_token)) if per_token else 0
        blocks = tokens
    return ServingMemory(
        engine=engine,
        total_bytes=total,
        utilization=util,
        budget_bytes=budget,
        weights_bytes=w,
        activation_bytes=act,
        non_torch_bytes=non_torch,
        kv_bytes=kv,
        kv_bytes_per_token=per_token,
        block_size=block,
        blocks=blocks,
        kv_cache_tokens=tokens,
        max_model_len=L,
        max_concurrency=tokens / L,
        max_num_batched_tokens=batched,
        max_num_seqs=seqs,
        era=era,
        notes=tuple(notes),
    )


def serving_memory_of(s: Setup, engine: str = "vllm", **server: Any) -> ServingMemory:
    """Memory as a serving engine allocates it for this setup's weights, cache precision and tensor parallel;
    `server` are the engine's own options (engine.calc.serving_memory: utilisation, max model length, ...)."""
    return serving_memory(
        s.spec,
        s.gpu,
        engine=engine,
        dtype=s.dtype,
        weight_format=s.weight_format,
        group_size=s.group_size,
        scope=s.scope,
        kv_dtype=s.kv_dtype,
        tensor_parallel=s.n_gpus,
        pipeline_parallel=s.pipeline,
        **server,
    )
