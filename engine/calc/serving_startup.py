"""What a serving engine settles at start-up before it sizes the KV cache (engine.calc.serving_memory's inputs that no
config states): the memory total CUDA reports, vLLM's profile run (the tokens and sequences it profiles by default),
and the activation peak and non-torch memory that run leaves.

The activation peak and the non-torch memory are fitted on vLLM's own startup logs
(engine/data/published/memory.toml, "PyTorch activation peak memory takes ...", "non_torch_memory takes ..."):
activation = max(c_t x bytes x T x (3 I / tp + 4 h), c_s x 4 x S x V): the larger of two transients that do not
overlap, the biggest of a layer's forward (its MLP's gate, up and activation outputs and the residual stream over T
tokens) and the sampler's after it (fp32 copies of the logits of the S sequences the profile run samples: logits,
probabilities, log-probabilities, sorted copies). A maintainer's log shows why it is the larger and not the sum:
Llama-3-8B at 8192 tokens peaks at 1.26 GiB on one GPU and on two (https://github.com/vllm-project/vllm/pull/10511),
though tensor parallelism halves the MLP's share; at 20000 and 29000 tokens the peak grows with T instead (0.93 and
0.94 of the counted MLP transient: c_t = 1). c_s (per era) is fitted on the logs that print the peak, least squares
on the relative error; non-torch memory is the median of the logs, one GPU and several apart.
Standard library only.
"""

from __future__ import annotations

import statistics
import tomllib
from dataclasses import dataclass
from functools import cache

from engine.calc import published
from engine.calc.roofline import activation_bytes
from engine.calc.specs import DATA_DIR, GIB, GPUSpec, ModelSpec, gpu_spec, load_gpu_catalog


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
