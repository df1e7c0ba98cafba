"""Run one contender's worker process (`python -m engine.race.worker`) and read its reply into a record.

One interpreter per contender: a JSON job on stdin, one JSON line on stdout, a timeout that kills the
worker's whole process group, and a crash (no reply, a signal, a non-zero exit) reported with its exit code.
This function never raises for a worker's failure: the race goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from engine.core import stats
from engine.core.load import loadavg_1m
from engine.race.contenders import Contender, missing_reason
from engine.race.record import ContenderResult

ROOT = Path(__file__).resolve().parents[2]


def worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    env["PYTHONUNBUFFERED"] = "1"
    env["INFERENCE_LAB_RACE_PARENT"] = str(os.getpid())  # see worker._die_with_parent
    # The race measures Hugging Face as it ships: nn.Linear's weight layout in every lane, not the engine's
    # measured CPU layout (engine.runtime.cpu_layout), so "vanilla" means vanilla and peers are raced against it.
    env["INFERENCE_LAB_CPU_LAYOUT"] = "0"
    return env


def base_result(c: Contender, status: str, reason: str = "", python: str = "") -> ContenderResult:
    """The record's identity, before (or without) a worker's reply: a lane that timed out still names its
    engine and version (a peer's from its installed metadata)."""
    version = None
    if c.peer:
        from engine.race.peers import base

        version = base.version(base.backend(c.peer).dist)
    return ContenderResult(
        c.name,
        c.label,
        c.description,
        status,
        reason,
        group=c.group,
        engine=c.engine_name(),
        engine_version=version,
        precision=c.precision,
        use_cache=c.use_cache,
        python=python or c.interpreter(),
    )


def run_worker(c: Contender, job: dict[str, Any], timeout_s: float) -> ContenderResult:
    """Run one contender's worker process; never raises for a worker's failure."""
    python = c.interpreter()
    if c.python == "":
        return base_result(c, "skipped", missing_reason(c), python="(none)")
    load_before = loadavg_1m()
    try:
        proc = subprocess.Popen(
            [python, "-m", "engine.race.worker"],
            cwd=ROOT,
            env=worker_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    except OSError as exc:  # a missing or non-executable interpreter
        return base_result(c, "failed", f"could not start the worker with interpreter {python!r}: {exc}")
    try:
        out, err = proc.communicate(json.dumps(job), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, err = proc.communicate()
        r = base_result(c, "timeout", f"the worker ran past the {timeout_s:.0f} s timeout and was killed")
        r.exit_code, r.stderr_tail = proc.returncode, err[-3000:]
        return r
    # whatever the worker left in its group: it ends at once after its result (engine.race.worker), so vLLM's engine
    # core process outlived it, orphaned with the model in memory (3.7 GB RSS, found after a test run)
    _kill_group(proc.pid)
    load = (load_before, loadavg_1m())
    data = last_json(out)
    if proc.returncode != 0 or data is None:
        how = (
            f"killed by signal {-proc.returncode} ({signal_name(-proc.returncode)})"
            if proc.returncode < 0
            else f"exited with code {proc.returncode}"
        )
        last = next((ln for ln in reversed(err.strip().splitlines()) if ln.strip()), "")
        r = base_result(c, "crashed", f"the worker {how} without a result" + (f": {last}" if last else ""))
        r.exit_code, r.stderr_tail, r.load_avg = proc.returncode, err[-3000:], load
        return r
    return from_worker(c, data, proc.returncode, err, load)


def _kill_group(pgid: int) -> None:
    """SIGKILL every process left in the worker's process group (its session: start_new_session above); the
    helpers a library spawned (DeepSpeed's, vLLM's engine core) are in it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return "unknown signal"


def last_json(text: str) -> dict | None:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)  # accepts NaN, which the worker may write
            except json.JSONDecodeError:
                return None
    return None


def from_worker(c: Contender, d: dict, rc: int, err: str, load) -> ContenderResult:
    """The worker's reply as a record, with the medians of its timed runs (engine.core.stats)."""
    runs = d.get("runs") or []
    r = base_result(
        c, d.get("status", "failed"), d.get("reason", ""), python=d.get("python") or c.interpreter()
    )
    r.kernel_inject = bool(d.get("kernel_inject"))
    r.deepspeed_mode = d.get("deepspeed_mode")
    r.dtype, r.device = d.get("dtype"), d.get("device")
    v = d.get("versions") or {}
    r.engine_version = d.get("engine_version") or v.get("deepspeed" if c.deepspeed else "transformers")
    r.precision = d.get("precision") or c.precision or r.dtype
    r.attn_implementation = d.get("attn_implementation")
    r.notes = list(d.get("notes") or [])
    r.latencies_s = [m["latency_s"] for m in runs]
    r.ttfts_s = [m["ttft_s"] for m in runs]
    r.tpots_s = [m["tpot_s"] for m in runs]
    r.tokens_per_s = [m["tokens_per_s"] for m in runs]
    r.output_tokens = [m["output_tokens"] for m in runs]
    r.warmup_s = list(d.get("warmup_s") or [])
    lat = stats.spread(r.latencies_s)
    r.latency_s_median, r.latency_s_q1, r.latency_s_q3 = lat.median, lat.q1, lat.q3
    r.ttft_s_median = stats.median(r.ttfts_s)
    r.tpot_s_median = stats.median(r.tpots_s)
    r.tokens_per_s_median = stats.median(r.tokens_per_s)
    r.output_tokens_median = stats.median(r.output_tokens)
    if runs:
        r.peak_memory_bytes = max(int(m["peak_memory_bytes"]) for m in runs)
        r.peak_memory_kind = runs[0].get("peak_memory_kind", "")
    r.peak_rss_bytes = d.get("peak_rss_bytes")
    r.perplexity = d.get("perplexity")
    if d.get("perplexity_error"):
        r.notes.append(f"perplexity not measured: {d['perplexity_error']}")
    r.bits_per_byte = d.get("bits_per_byte")
    r.bits_per_byte_note = d.get("bits_per_byte_note", "")
    if d.get("deterministic") is False:
        r.notes.append(
            "greedy tokens differed between this contender's own timed runs (non-deterministic kernels)"
        )
    r.conversion_s, r.converted_now = d.get("conversion_s"), d.get("converted_now")
    r.conversion_dir = d.get("conversion_dir", "")
    r.token_ids = d.get("token_ids") or []
    r.texts = d.get("texts") or []
    r.versions = d.get("versions") or {}
    r.load_s, r.init_s, r.wall_s = d.get("load_s"), d.get("init_s"), d.get("wall_s")
    r.exit_code, r.stderr_tail = rc, (err[-3000:] if r.status != "ran" else "")
    r.traceback = d.get("traceback", "")
    r.load_avg = load
    return r
