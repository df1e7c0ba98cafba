"""A real vLLM from .venv-vllm (scripts/make_vllm_env.sh; the test command makes it): started once per session the way
the lab starts it (`python -m engine serve --backend vllm`, eager, fp32, VLLM_CPU_KVCACHE_SPACE=2, --max-model-len
2048), then: the engine's greedy text, one load-generator level, its KV figures against the calculator, a clean stop
with no process left, and the race's vllm lane against vanilla. Skipped, with the sentence that says how to make the
environment, where it is missing."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from engine.backends import vllm as V
from engine.backends import vllm_records as R
from engine.backends import vllm_server as S

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("vllm")]
BUILD, MISSING = V.availability()
needs_vllm = pytest.mark.skipif(BUILD is None, reason=MISSING or "")
MODEL = "smollm2-135m-instruct"
PROMPT = "The capital of France is"


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    """`python -m engine serve --backend vllm` as a child process (as the Serving page and bench/serving.py start
    it), with the process tree it started; stopped at the end whatever happened."""
    import psutil

    from engine.serving.process import ServerProcess

    os.environ["VLLM_CPU_KVCACHE_SPACE"] = "2"  # inherited by the command and by vLLM: the KV figures below
    srv = ServerProcess(
        MODEL,
        max_batch=4,
        extra=("--backend", "vllm", "--dtype", "fp32", "--max-model-len", "2048"),
        log_path=str(tmp_path_factory.mktemp("vllm") / "serve.log"),
    )
    try:
        S.wait_command_ready(srv)
        yield srv, psutil.Process(srv.proc.pid).children(recursive=True)
    finally:
        srv.stop(S.STOP_TIMEOUT_S + 10)
        os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)


def _completion(srv, prompt: str, max_tokens: int) -> dict:
    import httpx2 as httpx

    r = httpx.post(
        f"{srv.base_url}/completions",
        json={"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    return r.json()


def _started_eager_under_the_presets_name(srv) -> None:
    import httpx2 as httpx

    log = srv.log_tail(20000)
    assert "--enforce-eager" in log and "--served-model-name smollm2-135m-instruct" in log
    ids = [m["id"] for m in httpx.get(f"{srv.base_url}/models", timeout=10).json()["data"]]
    assert ids == [MODEL]


def _greedy_text_equals_the_engines(srv, lm) -> None:
    from engine.runtime.generation import generate
    from engine.runtime.settings import GenerationConfig

    ours = generate(lm, PROMPT, GenerationConfig(max_new_tokens=24), record=False)
    theirs = _completion(srv, PROMPT, 24)["choices"][0]["text"]
    assert theirs == ours.text, "vLLM's greedy text differs from the engine's"


def _one_loadgen_level(srv) -> None:
    from engine.loadgen.sweep import run_once
    from engine.loadgen.workload import SLO, LoadSpec

    m = run_once(
        LoadSpec(base_url=srv.base_url, model=MODEL, concurrency=2, n_requests=4, output_tokens=8),
        SLO(ttft_s=None, tpot_s=None),
    )
    assert m.completed == 4 and not m.errors
    assert m.tokens_counted_by == "server usage" and m.ttft_s.p50 > 0
    assert m.server is not None  # its /metrics were scraped under vLLM's own names


def _kv_figures_equal_the_calculators() -> None:
    rows = [r for r in R.kv_records() if r["started_by"] == "serve"]
    assert rows, "the command recorded no KV row"
    row = rows[-1]
    assert row["logged"]["kv_cache_tokens"] == 46592 and row["logged"]["max_concurrency"] == 22.75
    assert row["logged"]["block_size"] == 128 and row["tokens_off"] == 0
    est = subprocess.run(
        [
            *(sys.executable, "-m", "engine", "estimate", "--model", MODEL, "--gpu", "this-machine"),
            *("--engine", "vllm", "--dtype", "fp32", "--max-model-len", "2048", "--json"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2"},
        check=True,
    )
    out = json.loads(est.stdout)
    assert out["kv_cache_tokens"] == row["logged"]["kv_cache_tokens"]
    assert round(out["max_concurrency"], 2) == row["logged"]["max_concurrency"]
    assert out["serving_memory"]["block_size"] == row["logged"]["block_size"]


def _stops_clean(srv, tree) -> None:
    import psutil

    assert tree, "vLLM's processes were not found under the command"
    srv.stop(S.STOP_TIMEOUT_S + 10)
    _gone, alive = psutil.wait_procs(tree, timeout=15)
    assert not alive, f"processes left after the stop: {[p.pid for p in alive]}"
    assert srv.proc.returncode == 0, srv.log_tail()  # the command stopped vLLM and exited cleanly


@needs_vllm
def test_vllm_server_as_the_lab_starts_it(vllm_server, smol_lm):
    """One start for all: eager under the preset's name, the engine's greedy text, one load-generator level, its KV
    figures equal to the calculator's, and a stop that leaves no process (one test, so the suite's two workers
    never start vLLM twice)."""
    srv, tree = vllm_server
    _started_eager_under_the_presets_name(srv)
    _greedy_text_equals_the_engines(srv, smol_lm)
    _one_loadgen_level(srv)
    _kv_figures_equal_the_calculators()
    _stops_clean(srv, tree)


@needs_vllm
def test_race_lane_matches_vanilla():
    from engine.race import contenders, runner

    spec = runner.RaceSpec(
        model=MODEL,
        contenders=tuple(contenders.resolve(["vanilla", "vllm"])),
        runs=1,
        warmup=1,
        max_new_tokens=24,
        recheck_baseline=False,
    )
    result = runner.run_race(spec)
    vanilla, lane = result.contenders
    assert lane.status == "ran", lane.reason or lane.stderr_tail
    assert lane.engine == "vllm" and lane.engine_version == BUILD.version
    assert lane.first_divergence_token is None and lane.exact_match_rate == 1.0  # greedy text identical
    assert math.isfinite(lane.bits_per_byte) and abs(lane.bits_per_byte / vanilla.bits_per_byte - 1) < 0.01
    assert len(lane.tpots_s) == 1 and lane.tpots_s[0] > 0  # per-token times from the engine's steps
    kv = next(n for n in lane.notes if "KV cache size" in n)  # vLLM's own line, beside the calculator's
    assert f"(the calculator: {R.parse_kv_line(kv).kv_cache_tokens} tokens)" in kv
