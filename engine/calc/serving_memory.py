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
activation = max(c_t x bytes x T x (3 I / tp + 4 h), c_s x 4 x S x V): the larger of two transients that do not
overlap, the biggest of a layer's forward (its MLP's gate, up and activation outputs and the residual stream over T
tokens) and the sampler's after it (fp32 copies of the logits of the S sequences the profile run samples: logits,
probabilities, log-probabilities, sorted copies). A maintainer's log shows why it is the larger and not the sum:
Llama-3-8B at 8192 tokens peaks at 1.26 GiB on one GPU and on two (https://github.com/vllm-project/vllm/pull/10511),
though tensor parallelism halves the MLP's share; at 20000 and 29000 tokens the peak grows with T instead (0.93 and
0.94 of the counted MLP transient: c_t = 1). c_s (per era) is fitted on the logs that print the peak, least squares
on the relative error;
non-torch memory is the median of the logs, one GPU and several apart. Sliding-window layers count as full
attention, as vLLM 0.8 sizes them (0.11 keeps only the window for them; the estimate says so).

SGLang (python/sglang/srt/model_executor/model_runner.py profile_max_num_token) keeps `mem_fraction_static`
(0.88 on one GPU of 80 GB or less, lower with more GPUs) of the memory for weights and the KV pool:
max_total_num_tokens = (total x fraction - weights per GPU) / KV bytes per token per GPU.

vLLM on a CPU (vllm_cpu_memory; vLLM 0.32, vllm/platforms/cpu.py and vllm/v1/worker/cpu_worker.py) profiles
nothing: the pool is `VLLM_CPU_KVCACHE_SPACE` GiB (whole GiB, read with int(); it sets kv_cache_memory_bytes), or
`--kv-cache-memory-bytes`; unset, it is ceil(RAM x gpu_memory_utilization (0.92)) less the worker's resident memory
at that moment. Blocks are 128 tokens unless asked otherwise (16 for latent attention), and
(vllm/v1/core/kv_cache_utils.py) blocks = pool // (block x KV bytes per token), maximum concurrency = blocks /
ceil(max_model_len / block), and the tokens it logs = int(concurrency x max_model_len).
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
    THIS_MACHINE,
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
# vLLM 0.32 on a CPU (vllm/platforms/cpu.py check_and_update_config): "elif not
# cache_config.user_specified_block_size: cache_config.block_size = 128"; the CPU MLA kernel needs 16
VLLM_CPU_BLOCK_SIZE = 128
VLLM_CPU_MLA_BLOCK_SIZE = 16
VLLM_CPU_KV_ENV = "VLLM_CPU_KVCACHE_SPACE"  # GiB, a whole number (vLLM reads int(os.environ[...]))
# vllm/config/cache.py (0.32): gpu_memory_utilization default 0.92; on a CPU it is the share of RAM the worker may
# take ("the `--gpu-memory-utilization` flag controls the fraction of CPU memory reserved", cpu_worker.py)
VLLM_CPU_UTILIZATION = 0.92


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
    per_token: float  # c_t (every era)
    per_sequence: dict[str, float]  # c_s per engine era ("v0", "v1")
    non_torch_one_gpu: float  # bytes
    non_torch_parallel: float  # bytes, per GPU with tensor parallel
    rows: tuple[str, ...]
    assumed: tuple[str, ...]  # eras without a log to fit on: c_s = 1 (one fp32 copy of the logits)


def peak_bytes(c_t: float, c_s: float, x: tuple[float, float]) -> float:
    """The profile run's activation peak: the larger of the forward's transient and the sampler's."""
    return max(c_t * x[0], c_s * x[1])


PEAK_GRID = 161  # log-spaced grid points for c_s


def _fit_peak(
    rows: list[tuple[tuple[float, float], float, str]], eras: tuple[str, ...]
) -> tuple[float, dict[str, float]]:
    """(c_t, {era: c_s}): c_t = 1, the forward's transient counted tensor by tensor (the logs that show it grow with T
    imply 0.93 and 0.94), and each era's c_s on a log grid in [0.25, 64] minimising sum (predicted / logged - 1)^2
    over its logs (the peak is a maximum, so not linear in c_s). An era without logs: c_s = 1 (one fp32 copy)."""
    grid = [0.25 * 256 ** (i / (PEAK_GRID - 1)) for i in range(PEAK_GRID)]

    def err(c_s: float, era: str) -> float:
        return sum((peak_bytes(1.0, c_s, x) / y - 1) ** 2 for x, y, e in rows if e == era)

    def best(era: str) -> float:
        if not any(e == era for *_, e in rows):
            return 1.0
        return min(grid, key=lambda c: err(c, era))

    return 1.0, {era: best(era) for era in eras}


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
    eras = ("v0", "v1")
    assumed = [era for era in eras if not any(e == era for *_, e in fit_rows)]
    per_token, per_era = _fit_peak([(x, y, e) for x, y, _, e in fit_rows], eras)
    return ActivationModel(
        per_token,
        {era: (1.0 if era in assumed else c) for era, c in per_era.items()},
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
    device: str = "gpu"  # "cpu": vLLM's CPU pool (vllm_cpu_memory), sized by VLLM_CPU_KVCACHE_SPACE

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
        act = peak_bytes(model.per_token, model.per_sequence[era], (x_t, x_s))
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


def serving_memory_of(
    s: Setup, engine: str = "vllm", *, cpu_kv_space_bytes: int | None = None, **server: Any
) -> ServingMemory:
    """Memory as a serving engine allocates it for this setup's weights, cache precision and tensor parallel;
    `server` are the engine's own options (engine.calc.serving_memory: utilisation, max model length, ...).
    vLLM on this machine's CPU takes its CPU pool (vllm_cpu_memory; `cpu_kv_space_bytes`: VLLM_CPU_KVCACHE_SPACE)."""
    if engine == "vllm" and is_cpu(s.gpu):
        return vllm_cpu_memory(
            s.spec,
            dtype=s.dtype,
            kv_dtype=s.kv_dtype,
            kv_space_bytes=cpu_kv_space_bytes,
            ram_bytes=s.gpu.memory_bytes,
            max_model_len=server.get("max_model_len"),
            weight_format=s.weight_format,
            group_size=s.group_size,
            scope=s.scope,
            gpu_memory_utilization=server.get("gpu_memory_utilization"),
            max_num_seqs=server.get("max_num_seqs"),
        )
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


def vllm_cpu_memory(
    spec: ModelSpec,
    *,
    dtype: str,
    kv_dtype: str | None = None,
    kv_space_bytes: int | None,
    ram_bytes: float,
    max_model_len: int | None = None,
    block_size: int | None = None,
    weight_format: str | None = None,
    group_size: int | None = None,
    scope: str | None = None,
    worker_other_bytes: float | None = None,
    gpu_memory_utilization: float | None = None,
    max_num_seqs: int | None = None,
) -> ServingMemory:
    """The KV pool, blocks, tokens and maximum concurrency vLLM logs at start-up on a CPU ("CPU KV cache size:
    46,592 tokens, Maximum concurrency for 2,048 tokens per request: 22.75x").

    `kv_space_bytes`: VLLM_CPU_KVCACHE_SPACE x 2^30 or --kv-cache-memory-bytes (exact). None: vLLM's own default,
    ceil(RAM x utilisation) less the worker's resident memory, which no config gives: the weights plus
    `worker_other_bytes` (the runtime's own memory), so that figure is an estimate and a note says so."""
    L = positive_int("max model length", max_model_len or spec.context_length)
    kv_dtype = kv_dtype or ("fp16" if weight_format or dtype in ("int8", "int4", "fp8") else dtype)
    per_token = kv_bytes_per_token(spec, kv_dtype)
    w = weights_bytes(spec, dtype, weight_format, group_size, scope)
    block = positive_int(
        "block size", block_size or (VLLM_CPU_MLA_BLOCK_SIZE if spec.is_mla else VLLM_CPU_BLOCK_SIZE)
    )
    util = positive_float(
        "memory utilization",
        gpu_memory_utilization if gpu_memory_utilization is not None else VLLM_CPU_UTILIZATION,
    )
    notes: list[str] = []
    if kv_space_bytes is not None:
        if isinstance(kv_space_bytes, bool) or not isinstance(kv_space_bytes, int) or kv_space_bytes < 0:
            raise InvalidParameterError(
                f"the CPU KV space must be a whole number of bytes, at least 0, got {kv_space_bytes!r}"
            )
        kv: float = kv_space_bytes
        other = 0.0
    else:
        other = (
            positive_float("the worker's other memory", worker_other_bytes, allow_zero=True)
            if worker_other_bytes is not None
            else 0.0
        )
        kv = math.ceil(ram_bytes * util) - w - other
        notes.append(
            f"{VLLM_CPU_KV_ENV} unset: vLLM gives the cache ceil(RAM x {util}) less its worker's resident memory "
            "when it sizes the pool; that memory (the weights plus the runtime's own) is estimated here, so the "
            f"pool is too, and vLLM refuses to start unless that share of the RAM is free; set {VLLM_CPU_KV_ENV} "
            "(GiB) for the figure vLLM will print"
        )
    if spec.window_evicts and spec.window_layers:
        notes.append("sliding-window layers are sized as full attention here")
    blocks = max(0, int(kv // (block * per_token))) if per_token else 0
    per_request = math.ceil(L / block)  # cdiv(max_model_len, block_size) blocks of one request
    concurrency = blocks / per_request
    return ServingMemory(
        engine="vllm",
        total_bytes=ram_bytes,
        utilization=util,
        budget_bytes=kv,
        weights_bytes=w,
        activation_bytes=0.0,  # a CPU worker profiles no forward pass for the pool
        non_torch_bytes=other,
        kv_bytes=kv,
        kv_bytes_per_token=per_token,
        block_size=block,
        blocks=blocks,
        kv_cache_tokens=int(concurrency * L),  # as get_kv_cache_capacity computes what it logs
        max_model_len=L,
        max_concurrency=concurrency,
        max_num_batched_tokens=0,
        max_num_seqs=max_num_seqs or 0,
        era="v1",
        notes=tuple(notes),
        device="cpu",
    )


def is_cpu(gpu: GPUSpec) -> bool:
    """This machine measured as a CPU: its calibration lists no fp16 peak (engine.calibration.machine)."""
    return gpu.key == THIS_MACHINE and "fp16" not in gpu.peak_flops


def cpu_kv_space_bytes(value: str | None) -> int | None:
    """VLLM_CPU_KVCACHE_SPACE as vLLM reads it: unset or empty -> None (its default), else whole GiB."""
    if value is None or value.strip() == "":
        return None
    text = value.strip()
    if not text.isdigit():
        raise InvalidParameterError(
            f"{VLLM_CPU_KV_ENV} must be a whole number of GiB (vLLM reads it with int()), got {value!r}"
        )
    return int(text) * GIB
