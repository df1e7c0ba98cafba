"""Run the latency race: one worker process per contender, then compare each with vanilla.

Chapter 4.3.4 compares vanilla and DeepSpeed-optimised GPT-Neo by latency and then asks whether the
output is still as good. Here every contender gets the same prompts, the same warm-up (dropped) and N
timed greedy runs in a fresh process (clean GPU memory, its own interpreter, a timeout). A contender
that crashes, hangs or fails to initialise is reported with its error and exit code, and the race goes
on. Results: per-run latency/TTFT/TPOT/tokens/s, peak memory, speedup vs vanilla as a ratio of medians
with a bootstrap 95% interval (engine.stats), and quality beside speed (engine.race.quality).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import math
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine import stats
from engine.errors import InvalidParameterError
from engine.models import PRESETS
from engine.race import quality
from engine.race.contenders import BASELINE, Contender, ds_python

ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = ROOT / "bench" / "results"
SCHEMA = 1
MAX_RUNS = 50
Progress = Callable[[int, int, str], None]

# The CLI's --json promises at least these per contender (issue 6); CSV columns follow this order.
SUMMARY_FIELDS = (
    "name", "label", "status", "reason", "kernel_inject", "deepspeed_mode", "dtype", "device", "use_cache",
    "attn_implementation", "latency_s_median", "latency_s_q1", "latency_s_q3", "ttft_s_median",
    "tpot_s_median", "tokens_per_s_median", "output_tokens_median", "peak_memory_bytes", "speedup_vs_vanilla",
    "speedup_low", "speedup_high", "first_divergence_token", "exact_match_rate", "perplexity", "runs",
    "python", "transformers", "deepspeed", "exit_code",
)


@dataclass(frozen=True)
class RaceSpec:
    model: str
    contenders: tuple[Contender, ...]
    runs: int = 5
    warmup: int = 1
    max_new_tokens: int = 32
    dtype: str = "auto"
    device: str = "auto"
    prompts: tuple[str, ...] = quality.PROMPTS
    chat_template: bool | None = None  # None: the model's chat template when it has one (instruct models
    # answer an instruction at length; without the template SmolLM2 often stops at once)
    timeout_s: float = 600.0  # per contender, load included

    def validate(self) -> RaceSpec:
        if not self.contenders:
            raise InvalidParameterError("no contenders chosen: pick at least one (vanilla is the baseline)")
        if not isinstance(self.runs, int) or not 1 <= self.runs <= MAX_RUNS:
            raise InvalidParameterError(f"runs must be a whole number from 1 to {MAX_RUNS}, got {self.runs!r}")
        if not isinstance(self.warmup, int) or not 0 <= self.warmup <= 10:
            raise InvalidParameterError(f"warm-up runs must be from 0 to 10, got {self.warmup!r}")
        if not isinstance(self.max_new_tokens, int) or not 2 <= self.max_new_tokens <= 2048:
            raise InvalidParameterError(
                f"max new tokens must be from 2 to 2048 (TPOT needs two tokens), got {self.max_new_tokens!r}"
            )
        if not self.prompts or not all(isinstance(p, str) and p.strip() for p in self.prompts):
            raise InvalidParameterError("the race needs at least one non-empty prompt")
        if not self.model or not self.model.strip():
            raise InvalidParameterError("no model chosen")
        if self.timeout_s <= 0:
            raise InvalidParameterError("the per-contender timeout must be positive")
        return self


@dataclass
class ContenderResult:
    name: str
    label: str
    description: str
    status: str  # "ran" | "failed" | "skipped" | "crashed" | "timeout"
    reason: str = ""
    kernel_inject: bool = False  # whether DeepSpeed's kernels were actually injected
    deepspeed_mode: str | None = None
    dtype: str | None = None
    device: str | None = None
    use_cache: bool = True
    attn_implementation: str | None = None
    python: str = ""
    notes: list[str] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    ttfts_s: list[float] = field(default_factory=list)
    tpots_s: list[float] = field(default_factory=list)
    tokens_per_s: list[float] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    warmup_s: list[float] = field(default_factory=list)
    latency_s_median: float = math.nan
    latency_s_q1: float = math.nan
    latency_s_q3: float = math.nan
    ttft_s_median: float = math.nan
    tpot_s_median: float = math.nan
    tokens_per_s_median: float = math.nan
    output_tokens_median: float = math.nan
    peak_memory_bytes: int | None = None
    peak_memory_kind: str = ""
    speedup_vs_vanilla: float = math.nan
    speedup_low: float = math.nan
    speedup_high: float = math.nan
    first_divergence_token: int | None = None  # None: identical to vanilla, or not comparable (see quality_note)
    exact_match_rate: float = math.nan
    quality_note: str = ""
    perplexity: float | None = None
    token_ids: list[list[int]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    versions: dict[str, Any] = field(default_factory=dict)
    load_s: float | None = None
    init_s: float | None = None
    wall_s: float | None = None
    exit_code: int | None = None
    stderr_tail: str = ""
    traceback: str = ""
    load_avg: tuple[float, float] | None = None  # 1-minute load average before and after the worker

    @property
    def ran(self) -> bool:
        return self.status == "ran"

    def summary(self) -> dict[str, Any]:
        row = {k: getattr(self, k) for k in SUMMARY_FIELDS if hasattr(self, k)}
        row["runs"] = len(self.latencies_s)
        row["transformers"] = self.versions.get("transformers")
        row["deepspeed"] = self.versions.get("deepspeed")
        return row


@dataclass
class RaceResult:
    model: str
    dtype: str
    device: str
    runs: int
    warmup: int
    max_new_tokens: int
    prompts: list[str]
    started_at: str
    finished_at: str = ""
    hardware: dict[str, Any] = field(default_factory=dict)
    contenders: list[ContenderResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    chat_template: bool | None = None  # None: each worker used the model's chat template if it has one
    kind: str = "race"
    schema: int = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(dataclasses.asdict(self))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RaceResult:
        names = {f.name for f in dataclasses.fields(ContenderResult)}
        rows = [ContenderResult(**{k: _nan(v, k) for k, v in c.items() if k in names}) for c in data["contenders"]]
        top = {f.name for f in dataclasses.fields(cls)} - {"contenders"}
        return cls(**{k: v for k, v in data.items() if k in top}, contenders=rows)

    def summary_rows(self) -> list[dict[str, Any]]:
        return [c.summary() for c in self.contenders]

    def to_csv(self) -> str:
        """One row per contender (the summary)."""
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(SUMMARY_FIELDS), extrasaction="ignore")
        w.writeheader()
        for row in self.summary_rows():
            w.writerow({k: _csv_value(v) for k, v in row.items()})
        return buf.getvalue()

    def runs_csv(self) -> str:
        """One row per timed run: the raw numbers behind the medians."""
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["contender", "run", "latency_s", "ttft_s", "tpot_s", "tokens_per_s", "output_tokens"])
        for c in self.contenders:
            for i, lat in enumerate(c.latencies_s):
                w.writerow([c.name, i + 1, lat, _at(c.ttfts_s, i), _at(c.tpots_s, i), _at(c.tokens_per_s, i),
                            _at(c.output_tokens, i)])
        return buf.getvalue()


def _at(values: list, i: int):
    return _csv_value(values[i]) if i < len(values) else ""


def _csv_value(v):
    if isinstance(v, float) and not math.isfinite(v):
        return ""
    return "" if v is None else v


def _nan(v, key: str):
    float_keys = {"latency_s_median", "latency_s_q1", "latency_s_q3", "ttft_s_median", "tpot_s_median",
                  "tokens_per_s_median", "output_tokens_median", "speedup_vs_vanilla", "speedup_low",
                  "speedup_high", "exact_match_rate"}
    return math.nan if v is None and key in float_keys else v


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    env["PYTHONUNBUFFERED"] = "1"
    env["INFERENCE_LAB_RACE_PARENT"] = str(os.getpid())  # see worker._die_with_parent
    return env


def _base(c: Contender, status: str, reason: str = "", python: str = "") -> ContenderResult:
    return ContenderResult(c.name, c.label, c.description, status, reason, use_cache=c.use_cache,
                           python=python or c.interpreter())


def run_worker(c: Contender, job: dict[str, Any], timeout_s: float) -> ContenderResult:
    """Run one contender's worker process; never raises for a worker's failure."""
    python = c.interpreter()
    if c.python == "":
        return _base(c, "skipped", ds_python()[1], python="(none)")
    load_before = os.getloadavg()[0]
    try:
        proc = subprocess.Popen(
            [python, "-m", "engine.race.worker"], cwd=ROOT, env=_worker_env(), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
    except OSError as exc:  # a missing or non-executable interpreter
        return _base(c, "failed", f"could not start the worker with interpreter {python!r}: {exc}")
    try:
        out, err = proc.communicate(json.dumps(job), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the worker's whole group: DeepSpeed may have spawned helpers
        out, err = proc.communicate()
        r = _base(c, "timeout", f"the worker ran past the {timeout_s:.0f} s timeout and was killed")
        r.exit_code, r.stderr_tail = proc.returncode, err[-3000:]
        return r
    load = (load_before, os.getloadavg()[0])
    data = _last_json(out)
    if proc.returncode != 0 or data is None:
        how = (f"killed by signal {-proc.returncode} ({_signal_name(-proc.returncode)})" if proc.returncode < 0
               else f"exited with code {proc.returncode}")
        last = next((ln for ln in reversed(err.strip().splitlines()) if ln.strip()), "")
        r = _base(c, "crashed", f"the worker {how} without a result" + (f": {last}" if last else ""))
        r.exit_code, r.stderr_tail, r.load_avg = proc.returncode, err[-3000:], load
        return r
    return _from_worker(c, data, proc.returncode, err, load)


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return "unknown signal"


def _last_json(text: str) -> dict | None:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)  # accepts NaN, which the worker may write
            except json.JSONDecodeError:
                return None
    return None


def _from_worker(c: Contender, d: dict, rc: int, err: str, load) -> ContenderResult:
    runs = d.get("runs") or []
    r = _base(c, d.get("status", "failed"), d.get("reason", ""), python=d.get("python") or c.interpreter())
    r.kernel_inject = bool(d.get("kernel_inject"))
    r.deepspeed_mode = d.get("deepspeed_mode")
    r.dtype, r.device = d.get("dtype"), d.get("device")
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
    r.perplexity = d.get("perplexity")
    if d.get("perplexity_error"):
        r.notes.append(f"perplexity not measured: {d['perplexity_error']}")
    if d.get("deterministic") is False:
        r.notes.append("greedy tokens differed between this contender's own timed runs (non-deterministic kernels)")
    r.token_ids = d.get("token_ids") or []
    r.texts = d.get("texts") or []
    r.versions = d.get("versions") or {}
    r.load_s, r.init_s, r.wall_s = d.get("load_s"), d.get("init_s"), d.get("wall_s")
    r.exit_code, r.stderr_tail = rc, (err[-3000:] if r.status != "ran" else "")
    r.traceback = d.get("traceback", "")
    r.load_avg = load
    return r


def compare(results: list[ContenderResult]) -> list[str]:
    """Fill speedup and quality fields against the baseline in place; return race-level notes."""
    base = next((r for r in results if r.name == BASELINE and r.ran), None)
    if base is None:
        return ["vanilla did not run, so there is no baseline: speedups and divergence are not available"]
    for r in results:
        if not r.ran:
            r.quality_note = "did not run"
            continue
        s = stats.speedup(base.latencies_s, r.latencies_s)
        r.speedup_vs_vanilla, r.speedup_low, r.speedup_high = s.median, s.low, s.high
        if base.token_ids and r.token_ids:
            r.first_divergence_token = quality.first_divergence(base.token_ids[0], r.token_ids[0])
            r.exact_match_rate = quality.exact_match_rate(base.token_ids, r.token_ids)
            r.quality_note = ("identical greedy tokens" if r.first_divergence_token is None
                              else f"first differs at generated token {r.first_divergence_token}")
        length_note = (
            f"generated {r.output_tokens_median:g} tokens vs vanilla's {base.output_tokens_median:g} (EOS came "
            "at a different step): compare tokens/s and TPOT, not end-to-end latency"
        )
        if (math.isfinite(r.output_tokens_median) and math.isfinite(base.output_tokens_median)
                and r.output_tokens_median != base.output_tokens_median and length_note not in r.notes):
            r.notes.append(length_note)
    return []


def _hardware_summary() -> dict[str, Any]:
    from engine import hardware

    info = hardware.detect()
    out: dict[str, Any] = {
        "cpu": info.cpu_name, "cpu_cores_logical": info.cpu_cores_logical, "torch_threads": info.torch_threads,
        "ram_total_bytes": info.ram_total_bytes, "accelerator": info.accelerator, "torch": info.torch_version,
        "cuda_build": info.cuda_build, "gpu_reason": info.gpu_reason,
    }
    if info.gpus:
        g = info.gpus[0]
        out.update(gpu=g.name, gpu_memory_total_bytes=g.memory_total_bytes, gpu_count=len(info.gpus))
    return out


def _run_one(spec: RaceSpec, c: Contender, i: int, total: int, tmp: Path, progress: Progress | None):
    if progress:
        progress(i, total, f"{c.label}: starting a worker ({c.interpreter() if c.python != '' else 'no interpreter'})")
    job = {
        "model": spec.model, "dtype": spec.dtype, "device": spec.device, "contender": c.to_dict(),
        "prompts": list(spec.prompts), "max_new_tokens": spec.max_new_tokens, "runs": spec.runs,
        "warmup": spec.warmup, "chat_template": spec.chat_template, "reference_text": quality.REFERENCE_TEXT,
    }
    preset = PRESETS.get(spec.model)
    if preset is not None and preset.kind == "random":
        job["weights_file"] = str(tmp / "weights.safetensors")  # see worker._share_weights
    t0 = time.perf_counter()
    r = run_worker(c, job, spec.timeout_s)
    if r.wall_s is None:
        r.wall_s = time.perf_counter() - t0
    if progress:
        progress(i + 1, total, f"{c.label}: {r.status}" + (f" ({r.reason[:120]})" if r.reason else ""))
    return r


def run_race(
    spec: RaceSpec, progress: Progress | None = None, checkpoint: Callable[[RaceResult], None] | None = None
) -> RaceResult:
    """Run every contender in turn (vanilla first) and compare. Raises InvalidParameterError for a bad spec.
    `checkpoint` gets the partial result after each contender (the CLI saves it, so a race cut short by an
    outer timeout still leaves the contenders that finished)."""
    spec = spec.validate()
    hw = _hardware_summary()
    if spec.dtype != "auto":  # fail before starting workers (fp16 on a CPU, a typo) rather than in each one
        from engine.models import resolve_device, resolve_dtype

        resolve_dtype(spec.dtype, resolve_device(spec.device))
    result = RaceResult(
        model=spec.model, dtype=spec.dtype, device=hw["accelerator"] if spec.device == "auto" else spec.device,
        runs=spec.runs, warmup=spec.warmup, max_new_tokens=spec.max_new_tokens, prompts=list(spec.prompts),
        started_at=datetime.now(UTC).isoformat(timespec="seconds"), hardware=hw, chat_template=spec.chat_template,
    )
    total = len(spec.contenders)
    with tempfile.TemporaryDirectory(prefix="inference-lab-race-") as tmp:
        for i, c in enumerate(spec.contenders):
            result.contenders.append(_run_one(spec, c, i, total, Path(tmp), progress))
            if checkpoint is not None and i + 1 < total:
                compare(result.contenders)
                result.finished_at = f"incomplete: {i + 1} of {total} contenders"
                checkpoint(result)
    result.notes.extend(compare(result.contenders))
    cores = hw.get("cpu_cores_logical") or 1
    busiest = max((r.load_avg[1] for r in result.contenders if r.load_avg), default=0.0)
    if busiest > cores:
        result.notes.append(
            f"the machine was busy during the race (1-minute load average up to {busiest:.1f} on {cores} cores): "
            "timings include contention from other processes; rerun for cleaner numbers"
        )
    result.finished_at = datetime.now(UTC).isoformat(timespec="seconds")
    return result


def save(result: RaceResult, directory: Path = RESULTS_DIR, tag: str = "") -> Path:
    """Write the result as JSON under `directory`; the name says model, hardware and time."""
    hw = result.hardware.get("gpu") or result.hardware.get("accelerator", "cpu")
    stamp = result.started_at.replace(":", "").replace("-", "")[:15]
    name = "-".join(p for p in ("race", result.model, hw, tag, stamp) if p)
    path = Path(directory) / (re.sub(r"[^A-Za-z0-9_.-]+", "_", name) + ".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.to_json() + "\n", encoding="utf-8")
    return path


def load_recorded(directory: Path | None = None) -> list[tuple[Path, RaceResult]]:
    """Recorded race results (e.g. from scripts/gpu_check.sh), newest first; unreadable files are skipped."""
    found = []
    for path in sorted(Path(directory or RESULTS_DIR).glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and data.get("kind") == "race":
                found.append((path, RaceResult.from_dict(data)))
        except (OSError, ValueError, TypeError, KeyError):
            continue
    return sorted(found, key=lambda pr: pr[1].started_at, reverse=True)
