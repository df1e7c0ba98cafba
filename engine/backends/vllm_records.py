"""vLLM's own figures and what this machine recorded of them: the KV pool from its start-up log line "CPU KV cache
size: 46,592 tokens, Maximum concurrency for 2,048 tokens per request: 22.75x" (vllm/v1/core/kv_cache_utils.py) and
the Prometheus family `vllm:cache_config_info`, the calculator's prediction beside them
(engine.calc.serving_memory.vllm_cpu_memory), the track record each start appends to (`kv_records`, read by
engine/trackrecord.py), and the attempts past one rank that bench/vllm_parallel.py recorded (`recorded_parallel`).
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.backends.vllm import ROOT, Build
from engine.calc.serving_memory import ServingMemory
from engine.core import paths

KV_LINE = re.compile(
    r"(?P<device>[A-Z]+(?: \+ host)?) KV cache size: (?P<tokens>[\d,]+) tokens, Maximum concurrency for "
    r"(?P<length>[\d,]+) tokens per request: (?P<concurrency>[\d.]+)x"
)
CACHE_INFO = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class KvFigures:
    """The KV pool as vLLM reported it: its log line, and `vllm:cache_config_info` where it was scraped."""

    device: str  # "CPU" | "GPU", as vLLM prints it
    kv_cache_tokens: int
    max_model_len: int
    max_concurrency: float
    line: str
    block_size: int | None = None
    blocks: int | None = None
    kv_cache_memory_bytes: int | None = None


def parse_kv_line(text: str) -> KvFigures | None:
    """The last KV line of a vLLM log (a restart appends another)."""
    found = list(KV_LINE.finditer(text or ""))
    if not found:
        return None
    m = found[-1]
    return KvFigures(
        device=m["device"],
        kv_cache_tokens=int(m["tokens"].replace(",", "")),
        max_model_len=int(m["length"].replace(",", "")),
        max_concurrency=float(m["concurrency"]),
        line=m.group(0),
    )


def parse_cache_config_info(metrics_text: str) -> dict[str, str]:
    """The labels of vLLM's `vllm:cache_config_info` gauge (block_size, num_gpu_blocks, ...); {} without one."""
    m = CACHE_INFO.search(metrics_text or "")
    return dict(_LABEL.findall(m["labels"])) if m else {}


def _int(labels: dict[str, str], key: str) -> int | None:
    try:
        return int(float(labels[key]))
    except (KeyError, ValueError):
        return None


def with_cache_info(figures: KvFigures, labels: dict[str, str]) -> KvFigures:
    from dataclasses import replace

    return replace(
        figures,
        block_size=_int(labels, "block_size"),
        blocks=_int(labels, "num_gpu_blocks"),
        kv_cache_memory_bytes=_int(labels, "kv_cache_memory_bytes"),
    )


def predicted_kv(
    folder: Path, dtype: str, kv_space_bytes: int, max_model_len: int, device: str = "cpu"
) -> ServingMemory | None:
    """The calculator's figures for the same start (engine.calc.serving_memory.vllm_cpu_memory): the model's own
    config.json, its precision, the pool asked for and the length vLLM used. None on a GPU (its pool comes from a
    profile run; the published GPU rows are the track record's)."""
    if device != "cpu":
        return None
    from engine.calc.hf_config import load_config_file
    from engine.calc.serving_memory import vllm_cpu_memory

    spec = load_config_file(folder / "config.json")
    return vllm_cpu_memory(
        spec, dtype=dtype, kv_space_bytes=kv_space_bytes, ram_bytes=0.0, max_model_len=max_model_len
    )


def kv_log_path() -> Path:
    return paths.runs_dir() / f"vllm-kv-{paths.machine_id()}.jsonl"


def kv_record(
    figures: KvFigures,
    predicted: ServingMemory | None,
    *,
    build: Build,
    model: str,
    dtype: str,
    kv_space_bytes: int | None,
    started_by: str,
) -> dict[str, Any]:
    """One predicted-vs-logged row of this machine's track record."""
    row: dict[str, Any] = {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "build": build.label,
        "started_by": started_by,  # "serve" | "race"
        "model": model,
        "dtype": dtype,
        "kv_space_bytes": kv_space_bytes,
        "logged": asdict(figures),
        "source": "vLLM's start-up log (vllm/v1/core/kv_cache_utils.py)",
    }
    if predicted is not None:
        row["predicted"] = {
            "kv_cache_tokens": predicted.kv_cache_tokens,
            "max_concurrency": predicted.max_concurrency,
            "block_size": predicted.block_size,
            "blocks": predicted.blocks,
        }
        row["tokens_off"] = predicted.kv_cache_tokens - figures.kv_cache_tokens
    return row


def append_kv_record(row: dict[str, Any]) -> bool:
    """Append to this machine's vLLM KV log; False (and nothing raised) where the folder is not writable."""
    path = kv_log_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
    except OSError:
        return False
    return True


def kv_records(limit: int = 200) -> list[dict[str, Any]]:
    """The logged rows, oldest first (torn lines skipped)."""
    try:
        lines = kv_log_path().read_text(encoding="utf-8").splitlines()[-limit:]
    except OSError:
        return []
    out = []
    for line in lines:
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


# ---------------------------------------------------------------- the attempts past one rank

RESULTS = ROOT / "bench" / "results"


def recorded_parallel() -> dict | None:
    """The newest bench/results/vllm-parallel-*.json (bench/vllm_parallel.py): each way past one rank tried on this
    kind of machine, its outcome and vLLM's own error; None when none was recorded."""
    files = sorted(RESULTS.glob("vllm-parallel-*.json"), key=lambda p: p.stat().st_mtime)
    for path in reversed(files):
        with contextlib.suppress(OSError, ValueError):
            return json.loads(path.read_text(encoding="utf-8"))
    return None


def latest_kv_row(model: str | None = None) -> dict | None:
    """The newest KV row a `serve` start logged (for `model` where given)."""
    rows = [
        r
        for r in kv_records()
        if r.get("started_by") == "serve" and (model is None or r.get("model") == model)
    ]
    return rows[-1] if rows else None
