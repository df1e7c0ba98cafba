"""GPU memory as serving engines allocate it: vLLM's KV-cache budget and "Maximum concurrency", SGLang's pool.

vLLM (vllm/worker/worker.py determine_num_available_blocks in V0; vllm/v1/worker/gpu_worker.py
determine_available_memory in V1) takes the total the driver reports, keeps `gpu_memory_utilization` of it
(0.9), profiles one forward pass of `max_num_batched_tokens` dummy tokens, and gives the KV cache what is left:

    kv = total x utilisation - weights per GPU - activation peak (the profile run) - non-torch memory (CUDA
    context, NCCL buffers),
    blocks = floor(kv / (block_size x KV bytes per token per GPU)), KV tokens = blocks x block_size,
    maximum concurrency for L tokens per request = KV tokens / L (vllm/v1/core/kv_cache_utils.py).

The activation peak and the non-torch memory are not in any config: engine.calc.serving_startup fits them on
vLLM's own startup logs. Sliding-window layers count as full attention, as vLLM 0.8 sizes them (0.11 keeps only
the window for them; the estimate says so).

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
from dataclasses import dataclass
from typing import Any

from engine.calc.memory import kv_bytes_per_token, weights_bytes
from engine.calc.serving_startup import (
    activation_model,
    activation_terms,
    cuda_total_bytes,
    peak_bytes,
    vllm_batched_tokens,
    vllm_max_num_seqs,
)
from engine.calc.specs import GIB, THIS_MACHINE, GPUSpec, ModelSpec, positive_float, positive_int
from engine.calc.timing import Setup
from engine.core.errors import InvalidParameterError
from engine.core.spec import option

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


def utilization_option(help: str) -> Any:
    """A spec's --gpu-memory-utilization (engine.core.spec.option): the share of the memory the server budgets
    from (vLLM's gpu_memory_utilization, SGLang's mem_fraction_static), 0 < u <= 1; None: the engine's default."""
    return option(None, help, kind=float, lo=0.01, hi=1)


def served_kv_dtype(kv_dtype: str | None, dtype: str, weight_format: str | None) -> str:
    """The cache precision a server keeps: the one asked, else 16-bit under quantized weights (a format, or
    int8/int4/fp8), else the weights' precision."""
    return kv_dtype or ("fp16" if weight_format or dtype in ("int8", "int4", "fp8") else dtype)


def sglang_fraction(total_bytes: float, tp: int) -> float:
    """SGLang's default mem_fraction_static (server_args.py, 0.4.6): 0.88 / 0.87 / 0.85 / 0.81 / 0.79 for 1 / 2+ /
    4+ / 8+ / 16+ GPUs of at most 80 GiB; 0.88 on larger GPUs."""
    if total_bytes / 2**20 > 81920:
        return 0.88
    for n, f in ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87)):
        if tp >= n:
            return f
    return 0.88


@dataclass(frozen=True)
class ServingMemory:
    engine: str  # "vllm" | "sglang"
    total_bytes: float  # per GPU, as CUDA reports it (the figure the engine budgets from); a CPU's RAM
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


def model_length(spec: ModelSpec, max_model_len: int | None) -> int:
    """The served context: `max_model_len`, or the model's own when None. Past the model's context window vLLM
    refuses to start ("User-specified max_model_len ... is greater than the derived max_model_len"), so it is
    refused here with the longest it accepts."""
    length = positive_int("max model length", max_model_len or spec.context_length)
    if spec.context_length and length > spec.context_length:
        raise InvalidParameterError(
            f"max model length {length:,} is past {spec.name}'s context window of {spec.context_length:,} tokens: "
            f"a serving engine refuses it at start-up; give at most {spec.context_length:,}"
        )
    return length


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
    L = model_length(spec, max_model_len)
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
    kv_dtype = served_kv_dtype(kv_dtype, dtype, weight_format)
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
    # the stored weights and the cache's precision: both allocations read them alike
    stored: dict[str, Any] = {
        "dtype": s.dtype,
        "kv_dtype": s.kv_dtype,
        "weight_format": s.weight_format,
        "group_size": s.group_size,
        "scope": s.scope,
    }
    if engine == "vllm" and is_cpu(s.gpu):
        return vllm_cpu_memory(
            s.spec,
            kv_space_bytes=cpu_kv_space_bytes,
            ram_bytes=s.gpu.memory_bytes,
            max_model_len=server.get("max_model_len"),
            gpu_memory_utilization=server.get("gpu_memory_utilization"),
            max_num_seqs=server.get("max_num_seqs"),
            **stored,
        )
    return serving_memory(
        s.spec,
        s.gpu,
        engine=engine,
        tensor_parallel=s.n_gpus,
        pipeline_parallel=s.pipeline,
        **stored,
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
    L = model_length(spec, max_model_len)
    kv_dtype = served_kv_dtype(kv_dtype, dtype, weight_format)
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
