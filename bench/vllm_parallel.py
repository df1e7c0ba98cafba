"""vLLM past one rank on this CPU: each way the lab's launch plan could run a model on two ranks, tried for real with
`python -m engine serve --backend vllm` (engine/backends/vllm.py), with its outcome and, where vLLM refuses, its own
error quoted in one line (the Serving page shows these).

    .venv/bin/python -m bench.vllm_parallel [--only ray-pp2,mp-tp2-smollm2,...] [--timeout 300]

Attempts: Ray (the multi-node path: `--distributed-executor-backend ray`, which starts a local Ray cluster) with
pipeline parallel 2; the multiprocessing executor with pipeline parallel 2; tensor parallel 2 on the bundled SmolLM2
(9 heads) and on two models whose heads divide by 2 (the tiny GPT-Neo preset, 4 heads; a tiny random Llama of the
bundled model's family, 4 heads and 2 KV heads, saved once under <lab home>/models). Every attempt gets one greedy
request once it is ready. Writes bench/results/vllm-parallel-<machine>.json.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.common import write_result
from engine.backends.vllm import availability
from engine.backends.vllm_records import recorded_parallel
from engine.backends.vllm_server import (
    READY_TIMEOUT_S,
    STOP_TIMEOUT_S,
    command_reason,
    wait_command_ready,
)
from engine.core import load, paths
from engine.serving.process import ServerProcess

TINY_LLAMA = "tiny-llama-tp2"  # a folder under <lab home>/models, made once by tiny_llama()
PROMPT = "The capital of France is"


@dataclass(frozen=True)
class Attempt:
    name: str
    model: str  # a preset or a folder
    flags: tuple[str, ...]
    what: str


def _two_ranks(executor: str, parallel: str) -> tuple[str, ...]:
    """vLLM's flags for two ranks: its distributed executor ("ray", "mp") and what is split ("pipeline", "tensor")."""
    return ("--distributed-executor-backend", executor, f"--{parallel}-parallel-size", "2")


ATTEMPTS = (
    Attempt(
        "ray-pp2",
        "smollm2-135m-instruct",
        _two_ranks("ray", "pipeline"),
        "Ray executor (vLLM's multi-node path), pipeline parallel 2 on a local Ray cluster",
    ),
    Attempt(
        "mp-pp2",
        "smollm2-135m-instruct",
        _two_ranks("mp", "pipeline"),
        "multiprocessing executor, pipeline parallel 2 (15 of 30 layers per rank)",
    ),
    Attempt(
        "mp-tp2-smollm2",
        "smollm2-135m-instruct",
        _two_ranks("mp", "tensor"),
        "multiprocessing executor, tensor parallel 2 on the bundled model (9 attention heads)",
    ),
    Attempt(
        "mp-tp2-gpt-neo",
        "tiny-gpt-neo",
        _two_ranks("mp", "tensor"),
        "multiprocessing executor, tensor parallel 2 on the tiny GPT-Neo preset (4 heads)",
    ),
    Attempt(
        "mp-tp2-llama",
        TINY_LLAMA,
        _two_ranks("mp", "tensor"),
        "multiprocessing executor, tensor parallel 2 on a tiny random Llama (4 heads, 2 KV heads)",
    ),
)


def tiny_llama() -> Path:
    """A random Llama of SmolLM2's family whose heads divide by 2, saved once with the bundled model's tokenizer."""
    folder = paths.models_dir() / TINY_LLAMA
    if (folder / "config.json").is_file():
        return folder
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from engine.runtime.models import ensure_bundled_copy

    bundled = ensure_bundled_copy()
    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=49152,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
    )
    tmp = folder.with_name(f".{folder.name}.tmp")
    LlamaForCausalLM(cfg).save_pretrained(tmp)
    AutoTokenizer.from_pretrained(bundled).save_pretrained(tmp)
    tmp.rename(folder)
    return folder


def one_request(srv: ServerProcess, model: str) -> tuple[bool, str]:
    import httpx2 as httpx

    try:
        r = httpx.post(
            f"{srv.base_url}/completions",
            json={"model": model, "prompt": PROMPT, "max_tokens": 8, "temperature": 0},
            timeout=120,
        )
    except httpx.HTTPError as exc:
        return False, f"{type(exc).__name__}: {exc}"
    if r.status_code != 200:
        return False, f"HTTP {r.status_code}: {r.text[:300]}"
    return True, r.json()["choices"][0]["text"]


def attempt(a: Attempt, timeout: float) -> dict:
    model = str(tiny_llama()) if a.model == TINY_LLAMA else a.model
    served = TINY_LLAMA if a.model == TINY_LLAMA else a.model
    flags = (
        "--backend",
        "vllm",
        "--dtype",
        "fp32",
        "--max-model-len",
        "512",
        "--kv-budget-bytes",
        str(2**28),
    )
    srv = ServerProcess(model, max_batch=2, extra=(*flags, *a.flags))
    out = {
        "name": a.name,
        "what": a.what,
        "model": served,
        "flags": list(a.flags),
        "loadavg_before": load.loadavg(),
    }
    t0 = time.perf_counter()
    try:
        wait_command_ready(srv, min(timeout, READY_TIMEOUT_S))
    except RuntimeError:
        out.update(outcome="refused at start", error=command_reason(srv.log_tail(200_000)))
    else:
        out["ready_s"] = time.perf_counter() - t0
        ok, text = one_request(srv, served)
        if ok:
            out.update(outcome="served", text=text)
        else:
            deadline = time.monotonic() + 60  # the command says why vLLM died once it has stopped
            while srv.alive and time.monotonic() < deadline:
                time.sleep(0.5)
            out.update(
                outcome="started, failed on the first request", error=command_reason(srv.log_tail(200_000))
            )
            out["request_error"] = text
    finally:
        srv.stop(STOP_TIMEOUT_S + 10)
    out["wall_s"] = time.perf_counter() - t0
    out["loadavg_after"] = load.loadavg()
    return out


def merged(old: dict | None, new: list[dict], build: str) -> list[dict]:
    """The recorded attempts with the rerun ones replaced (same build and machine only), in the recorded order."""
    if not old or old.get("build") != build or old.get("machine") != paths.machine_id():
        return new
    fresh = {r["name"]: r for r in new}
    kept = [fresh.pop(a["name"], a) for a in old.get("attempts", [])]
    return kept + list(fresh.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated attempt names")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for each start")
    args = ap.parse_args()
    # an outer `timeout` sends SIGTERM: leave through the finally blocks, which stop each server and what it started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    build, why = availability()
    if build is None:
        raise SystemExit(why)
    chosen = [a for a in ATTEMPTS if not args.only or a.name in args.only.split(",")]
    results = []
    for a in chosen:
        r = attempt(a, args.timeout)
        results.append(r)
        print(f"{a.name:<16} {r['outcome']:<38} {r.get('error') or r.get('text', '')}", flush=True)
    if (
        args.only
    ):  # a partial rerun replaces its attempts in the recorded file of the same build, keeps the rest
        results = merged(recorded_parallel(), results, build.label)
    write_result(
        "vllm-parallel",
        {
            "benchmark": "vllm-parallel",
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": paths.machine_id(),
            "build": build.label,
            "cores": load.cores(),
            "attempts": results,
        },
    )


if __name__ == "__main__":
    main()
