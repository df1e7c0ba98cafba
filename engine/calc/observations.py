"""Published speed rows as timing questions: the calculator's setup for each row (model, GPU, weights, parallelism,
lengths), the time the row states, and what kind of time it is. The fit (engine.calc.efficiency) learns each engine
class's utilisation from them; the track record (engine.trackrecord) scores the held-back ones.

Kinds of time, each predicted by its own formula:
- decode: one sequence's time per output token (batch-1 decode tokens/s, or TPOT at one user);
- prefill: a first-token latency at batch 1 (`request`: as a server answers it, its fixed cost included) or a
  llama-bench prompt-processing rate (no request around it);
- throughput: a static batch's time per step (b x O output tokens over TTFT + (O - 1) steps);
- load_throughput, load_ttft, load_tpot: a serving engine under a closed loop of c users (the load generator's
  and vLLM's `--max-concurrency`), predicted by the closed form of engine.calc.serving_time.

Rows are split once, by a hash of their id, into a fitting part and a held-back part no fit ever sees.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from functools import cache

from engine.calc import published
from engine.calc.hf_config import spec_from_hf_config
from engine.calc.specs import GPUSpec, load_gpu_catalog, model_preset
from engine.calc.timing import Setup, TimingInputs, timing_inputs
from engine.core.errors import EngineError

HELD_BACK_SHARE = 0.3  # rows the fit never sees; the track record reports its targets on them
DEFAULT_DECODE_TOKENS = 200  # gpt-fast's generate.py default when a source gives no output length
# Engine classes that spread a model over GPUs by layers (pipeline stages), not by tensor parallelism: llama.cpp's
# default `--split-mode layer`, ExLlamaV2's `gpu_split`, and transformers' `device_map="auto"` (accelerate).
LAYER_SPLIT = frozenset({"llama.cpp", "exllamav2", "hf"})
KINDS = ("decode", "prefill", "throughput", "load_throughput", "load_ttft", "load_tpot")


def held_back(row_id: str) -> bool:
    """A fixed, reproducible split: the first byte of sha256(id) below 30% of 256."""
    return hashlib.sha256(row_id.encode()).digest()[0] < HELD_BACK_SHARE * 256


@cache
def _catalog() -> dict[str, GPUSpec]:
    return load_gpu_catalog()


def parallel(s: Setup, engine_class: str | None, split_mode: str | None = None) -> Setup:
    """A setup's GPUs as the engine uses them: tensor parallel, or pipeline stages for a layer-split engine
    (unless the row says its engine split every matrix instead: llama.cpp's `row` mode)."""
    if engine_class in LAYER_SPLIT and split_mode != "row" and s.n_gpus > 1 and s.pipeline == 1:
        return replace(s, n_gpus=1, pipeline=s.n_gpus)
    return s


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
    if kv not in ("fp16", "bf16", "fp8", "fp32"):
        kv = row.dtype
    prompt = int(row.prompt_tokens or 1)
    output = int(row.output_tokens or DEFAULT_DECODE_TOKENS)
    s = Setup(
        spec=replace(spec, context_length=max(spec.context_length, prompt + output)),
        gpu=_catalog()[row.gpu_key],
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
    return parallel(s, row.engine_class, row.split_mode)


@dataclass(frozen=True)
class Observation:
    row: published.PublishedRow
    setup: Setup
    kind: str  # one of KINDS
    seconds: float  # the published figure as a time (see `as_time`)
    inputs: TimingInputs  # built once: a fit evaluates it hundreds of times
    request: bool = True  # a prefill row measured as a request (its fixed cost counts); False: llama-bench pp
    concurrency: int = 1  # load kinds: the closed loop's users
    burst: bool = False  # load kinds: every request sent at once (requests == concurrency): one wave


def _load_observation(row: published.PublishedRow, s: Setup) -> Observation | str:
    """A row measured under a closed loop of c users with stated lengths."""
    if not row.prompt_tokens or not row.output_tokens:
        return "measured under a load without its input and output lengths"
    c = max(row.batch, 1)
    s = replace(s, batch=c)
    burst = row.requests is not None and row.requests <= c
    m, v = row.metric, row.value
    kinds = {
        "output_tokens_per_s": ("load_throughput", c / v),
        "output_tokens_per_s_per_gpu": ("load_throughput", c / (v * row.gpu_count)),
        "requests_per_s": ("load_throughput", c / (v * row.output_tokens)),
        "ttft_ms": ("load_ttft", v / 1e3),
        "ttft_s": ("load_ttft", v),
        "tpot_ms": ("load_tpot", v / 1e3),
        "tpot_s": ("load_tpot", v),
        "itl_ms": ("load_tpot", v / 1e3),
    }
    if m not in kinds:
        return f"{m} under a load is outside the model"
    kind, seconds = kinds[m]
    if c == 1 and kind == "load_tpot":
        kind = "decode"  # one user's TPOT is batch-1 decode
    return Observation(row, s, kind, seconds, timing_inputs(s), concurrency=c, burst=burst)


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
        "tpot_ms": ("decode", v / 1e3),
        "ttft_ms": ("prefill", v / 1e3),
        "ttft_s": ("prefill", v),
    }
    if one and m in as_time:
        s = replace(s, batch=1)
        kind, seconds = as_time[m]
        return Observation(row, s, kind, seconds, timing_inputs(s))
    if one and m == "prefill_tokens_per_s" and row.prompt_tokens:
        # llama-bench ppN: N prompt tokens in one batch, timed without any request around them
        s = replace(s, batch=1, output_tokens=1)
        return Observation(row, s, "prefill", row.prompt_tokens / v, timing_inputs(s), request=False)
    if (
        m in ("output_tokens_per_s", "output_tokens_per_s_per_gpu")
        and row.batch_kind == "batch"
        and row.batch >= 1
    ):
        # a static batch (one sequence too): b x O tokens over its prefill and O - 1 decode steps
        total = v * (row.gpu_count if m == "output_tokens_per_s_per_gpu" else 1)
        if not row.output_tokens or not row.prompt_tokens:
            return "a throughput without its input and output lengths"
        return Observation(row, s, "throughput", row.batch / total, timing_inputs(s))
    if row.batch_kind == "concurrency" and row.batch >= 1:
        return _load_observation(row, s)
    if row.batch_kind in ("request-rate", "concurrency"):
        return (
            "measured under a request load whose users or lengths the source does not state: queueing is in the "
            "figure, with nothing to size it from"
        )
    if row.batch_kind == "max-throughput" or row.batch == 0:
        return "the engine chose its own batch (a max-throughput run): no batch to predict at"
    if m == "achieved_bandwidth_gb_s":
        return "the source's own bandwidth figure: compared through its tokens/s row"
    return f"{m} at {row.batch_kind} {row.batch} is outside the model"


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
