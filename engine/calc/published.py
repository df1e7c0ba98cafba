"""Published GPU measurements as data: vLLM/SGLang startup logs (memory), gpt-fast, TensorRT-LLM, llama.cpp,
MLC, vLLM, SGLang, TGI and DeepSpeed results (speed), NCCL all-reduce timings, and the config.json of every
model they ran. Each row carries its source (repository + commit + path, or an issue URL) and the exact quoted
text (engine/data/published/*.toml); `aliases.toml` says how a row's model, GPU and weight format map onto the
calculator's, and why. llm-d's planner keeps its validation runs beside the code the same way.

Standard library only: the calculators fit their engine efficiencies on these rows (engine.calc.efficiency) and
the track record (engine.trackrecord) puts each row beside its prediction.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from engine.calc.specs import DATA_DIR

PUBLISHED_DIR = DATA_DIR / "published"
SPEED_METRICS = (
    "decode_tokens_per_s",
    "achieved_bandwidth_gb_s",
    "output_tokens_per_s",
    "output_tokens_per_s_per_gpu",
    "ttft_ms",
    "ttft_s",
    "tpot_ms",
    "tpot_s",
    "itl_ms",
    "prefill_tokens_per_s",
    "requests_per_s",
    "requests_per_min",
)
MEMORY_METRICS = (
    "weights_gib",
    "gpu_blocks",
    "kv_cache_tokens",
    "kv_cache_gib",
    "max_concurrency",
    "activation_peak_gib",
    "peak_torch_gib",
    "non_torch_gib",
    "total_gpu_memory_gib",
    "sglang_weights_gb",
    "sglang_max_total_tokens",
)


@dataclass(frozen=True)
class PublishedRow:
    """One published figure, as its source printed it, with what the calculator needs to predict it."""

    id: str
    kind: str  # "speed" | "memory"
    model: str  # as the source names it
    config_model: str | None  # the configs.toml entry with the same architecture (None: no config found)
    gpu: str  # as the source names it
    gpu_key: str | None  # the catalogue key (None: a GPU the catalogue lacks)
    gpu_why: str  # why that key, when the source's name alone does not say
    gpu_count: int
    tensor_parallel: int
    weight_format: str  # as the source names it
    dtype: str  # the calculator's precision for the weights (or what a format computes with)
    calc_format: str | None  # the calculator's weight format (None: plain dtype)
    group_size: int | None
    scope: str | None  # modules the format covers, when the checkpoint differs from the format's default
    format_why: str
    kv_dtype: str  # "auto" = the weights' 16-bit precision
    engine: str
    engine_class: str | None  # engine.calc.efficiency.ENGINE_CLASSES key
    engine_version: str
    batch: int  # 0 = the engine chose (max-throughput runs) or not stated
    batch_kind: str  # batch | concurrency | request-rate | max-throughput
    prompt_tokens: int | None
    output_tokens: int | None
    metric: str
    value: float
    unit: str
    source: str
    quote: str
    notes: str
    gpu_memory_utilization: float | None = None
    gpu_memory_utilization_assumed: bool = False
    max_model_len: int | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None
    requests: int | None = None  # requests a load test sent (a closed loop's total; == batch: one burst)
    split_mode: str | None = (
        None  # "row": llama.cpp's old split of each matrix over the GPUs (tensor parallel)
    )
    log_text: str = ""  # every quote of the startup log this row comes from (its other rows' too)
    dataset: str | None = None  # the prompts' dataset as the source names it ("ShareGPT"), where it says one

    @property
    def source_key(self) -> str:
        """Who measured: the repository without its commit and path (rows of one README at two commits, or of two
        files of one repository, come from the same people, harness and machines, so they share their bias), or
        the issue thread without the comment's author and date."""
        if self.source.startswith("github.com/"):
            return self.source.split(":")[0].split("@")[0]
        return self.source.split(" (")[0]


@dataclass(frozen=True)
class NcclRow:
    id: str
    gpu: str
    gpu_count: int
    interconnect: str
    size_bytes: float
    time_us: float | None
    busbw_gb_s: float | None
    source: str
    quote: str


def _load(name: str) -> dict[str, Any]:
    with (PUBLISHED_DIR / name).open("rb") as f:
        return tomllib.load(f)


@cache
def aliases() -> dict[str, Any]:
    return _load("aliases.toml")


@cache
def configs() -> dict[str, dict[str, Any]]:
    """model id -> its config.json dict (configs.toml), with every `stands_for` id pointing at the same dict."""
    out: dict[str, dict[str, Any]] = {}
    for entry in _load("configs.toml")["config"]:
        cfg = json.loads(entry["config"])
        cfg.setdefault("_name_or_path", entry["model"])
        out[entry["model"]] = cfg
        for other in entry.get("stands_for", ()):
            out.setdefault(other, cfg)
    return out


def config_source(model: str) -> str:
    for entry in _load("configs.toml")["config"]:
        if entry["model"] == model or model in entry.get("stands_for", ()):
            return entry["source"]
    return ""


def _config_model(model: str) -> str | None:
    known = configs()
    target = aliases()["models"].get(model, model)
    return target if target in known else None


def _gpu_key(name: str, source: str) -> tuple[str | None, str]:
    for prefix, entry in aliases().get("gpus_by_source", {}).items():
        if source.startswith(prefix) and name in ("A100", "Nvidia A100"):
            return entry["gpu"], entry["why"]
    return aliases()["gpus"].get(name), ""


def _row(kind: str, r: dict[str, Any]) -> PublishedRow:
    wf = aliases()["weight_formats"].get(r["weight_format"], {})
    scoped = aliases().get("model_scopes", {}).get(r["model"], {})
    engine_class = aliases()["engine_class"].get(r["engine"])
    gpu_key, why = _gpu_key(r["gpu"], r["source"])
    return PublishedRow(
        id=r["id"],
        kind=kind,
        model=r["model"],
        config_model=_config_model(r["model"]),
        gpu=r["gpu"],
        gpu_key=gpu_key,
        gpu_why=why,
        gpu_count=int(r.get("gpu_count", 1)),
        tensor_parallel=int(r.get("tensor_parallel", 1)),
        weight_format=r["weight_format"],
        dtype=wf.get("dtype", "bf16"),
        calc_format=wf.get("format"),
        group_size=wf.get("group_size"),
        scope=scoped.get("scope"),
        format_why="; ".join(w for w in (wf.get("why", ""), scoped.get("why", "")) if w),
        kv_dtype=str(r.get("kv_dtype", "auto")),
        engine=r["engine"],
        engine_class=engine_class,
        engine_version=str(r.get("engine_version", "unknown")),
        batch=int(r.get("batch", 1)),
        batch_kind=str(r.get("batch_kind", "batch")),
        prompt_tokens=r.get("prompt_tokens"),
        output_tokens=r.get("output_tokens"),
        metric=r["metric"],
        value=float(r["value"]),
        unit=str(r.get("unit", "")),
        source=r["source"],
        quote=r["quote"],
        notes=r.get("notes", ""),
        gpu_memory_utilization=r.get("gpu_memory_utilization"),
        gpu_memory_utilization_assumed=bool(r.get("gpu_memory_utilization_assumed", False)),
        max_model_len=r.get("max_model_len") or r.get("tokens_per_request"),
        block_size=r.get("block_size"),
        max_num_seqs=r.get("max_num_seqs"),
        requests=r.get("requests"),
        split_mode=r.get("split_mode"),
        dataset=r.get("dataset"),
    )


# Fields one startup log states once: its other rows (same id but the last part) share them.
SHARED_LOG_FIELDS = (
    "max_model_len",
    "engine_version",
    "gpu_memory_utilization",
    "block_size",
    "max_num_seqs",
)


@cache
def rows() -> tuple[PublishedRow, ...]:
    """Every published row, memory first, in file order; a startup log's rows share what the log states once."""
    memory, speed = _load("memory.toml")["row"], _load("speed.toml")["row"] + _load("lab.toml")["row"]
    shared: dict[str, dict[str, Any]] = {}
    texts: dict[str, str] = {}
    for r in memory:
        log = r["id"].rsplit("-", 1)[0]
        texts[log] = texts.get(log, "") + "\n" + r["quote"]
        for k in SHARED_LOG_FIELDS:
            if r.get(k) not in (None, "unknown"):
                shared.setdefault(log, {}).setdefault(k, r[k])
    out = []
    for r in memory:
        log = r["id"].rsplit("-", 1)[0]
        own = {k: v for k, v in r.items() if v not in (None, "unknown")}
        out.append(replace(_row("memory", {**shared.get(log, {}), **own}), log_text=texts[log]))
    return tuple(out) + tuple(_row("speed", r) for r in speed)


@cache
def nccl_rows() -> tuple[NcclRow, ...]:
    out = []
    for r in _load("speed.toml").get("nccl", ()):
        out.append(
            NcclRow(
                id=r["id"],
                gpu=r.get("gpu", ""),
                gpu_count=int(r.get("gpu_count", 0) or 0),
                interconnect=str(r.get("interconnect", "")),
                size_bytes=float(r.get("message_bytes", 0) or 0),
                time_us=r.get("time_us"),
                busbw_gb_s=r.get("busbw_gb_s"),
                source=r["source"],
                quote=r["quote"],
            )
        )
    return tuple(out)
