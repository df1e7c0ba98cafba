"""Run the latency race: one worker process per contender, then compare each with vanilla.

Chapter 4.3.4 compares vanilla and DeepSpeed-optimised GPT-Neo by latency and then asks whether the
output is still as good. Here every contender gets the same prompts, the same warm-up (dropped) and N
timed greedy runs in a fresh process (engine.race.process: clean memory, its own interpreter, a timeout,
a crash reported with its exit code), and the race goes on. Then: speedup vs vanilla as a ratio of
medians with a bootstrap 95% interval (engine.core.stats), quality beside speed (engine.race.quality), vanilla
re-run at the end to catch a machine that changed speed, and a verdict per lane (engine.race.verdict).

The record is engine.race.record; JSON/CSV and recorded files are engine.race.serialise.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.core import stats
from engine.core.errors import InvalidParameterError
from engine.core.load import is_busy, loadavg
from engine.core.spec import Spec, option
from engine.race import quality, verdict
from engine.race.contenders import BASELINE, Contender
from engine.race.process import run_worker
from engine.race.record import SUMMARY_FIELDS, ContenderResult, RaceResult
from engine.race.serialise import RESULTS_DIR, load_recorded, save
from engine.runtime.models import PRESETS, ModelArgs

__all__ = [
    "MAX_RUNS",
    "RESULTS_DIR",
    "SUMMARY_FIELDS",
    "ContenderResult",
    "RaceResult",
    "RaceSpec",
    "compare",
    "load_recorded",
    "run_race",
    "run_worker",
    "save",
]

MAX_RUNS = 50
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class RaceSpec(ModelArgs, Spec):
    """What a race runs: each option once, with its default, bounds and help (the race command's flags, the page's
    widgets and bench/race.py read it). The lanes are Contender objects, chosen by name on the command line."""

    contenders: tuple[Contender, ...] = option((), "the lanes besides vanilla (the baseline)", cli=False)
    runs: int = option(3, "timed runs per contender (after the warm-up)", lo=1, hi=MAX_RUNS)
    warmup: int = option(1, "warm-up runs per contender, not counted", lo=0, hi=10, label="warm-up runs")
    max_new_tokens: int = option(
        32, "new tokens per run (TPOT needs two)", lo=2, hi=2048, label="max new tokens"
    )
    prompts: tuple[str, ...] = option(quality.PROMPTS, "the prompts every lane answers", cli=False)
    # None: the model's chat template when it has one (instruct models answer an instruction at length; without
    # the template SmolLM2 often stops at once); the command line's --chat auto/on/off sets it
    chat_template: bool | None = option(
        None, "wrap the prompts in the model's chat template", kind=bool, cli=False
    )
    timeout_s: float = option(
        600.0,
        "seconds per contender, load and a peer's first conversion included",
        lo=1,
        flag="--timeout",
        label="the per-contender timeout",
    )
    recheck_baseline: bool = option(
        True, "run vanilla again at the end (the re-run flags a machine whose speed drifted)", cli=False
    )

    def validate(self) -> RaceSpec:
        super().validate()  # bounds, kinds and choices of every option
        if not self.contenders:
            raise InvalidParameterError("no contenders chosen: pick at least one (vanilla is the baseline)")
        if not self.prompts or not all(isinstance(p, str) and p.strip() for p in self.prompts):
            raise InvalidParameterError("the race needs at least one non-empty prompt")
        if not self.model or not self.model.strip():
            raise InvalidParameterError("no model chosen")
        return self


def _ok(v) -> bool:
    return v is not None and not (isinstance(v, float) and not math.isfinite(v))


def compare(
    results: list[ContenderResult], recheck: ContenderResult | None = None, *, busy: bool = True
) -> list[str]:
    """Fill speedup, interval, drift, quality and verdict fields against the baseline in place; return
    race-level notes (`busy`: other work ran beside the race, which a drift note then names)."""
    base = next((r for r in results if r.name == BASELINE and r.ran), None)
    if base is None:
        for r in results:
            r.verdict = verdict.lane_verdict(r) if not r.ran else "not compared: vanilla did not run"
        return ["vanilla did not run, so there is no baseline: speedups and divergence are not available"]
    notes = []
    ratio = (
        verdict.drift(base.latencies_s, recheck.latencies_s) if recheck is not None and recheck.ran else None
    )
    if ratio is not None:
        notes.append(verdict.drift_note(ratio, busy=busy))
    for r in results:
        if not r.ran:
            r.quality_note = "did not run"
            r.verdict = verdict.lane_verdict(r)
            continue
        s = stats.speedup(base.latencies_s, r.latencies_s)
        r.speedup_vs_vanilla, r.speedup_low, r.speedup_high = s.central, s.low, s.high
        why = verdict.interval_reason(
            min(len(r.latencies_s), len(base.latencies_s)), min(len(r.warmup_s), len(base.warmup_s))
        )
        r.interval_shown, r.interval_note = not why, why
        if r is not base:
            r.baseline_drift = ratio
        if base.token_ids and r.token_ids:
            r.first_divergence_token = quality.first_divergence(base.token_ids[0], r.token_ids[0])
            r.exact_match_rate = quality.exact_match_rate(base.token_ids, r.token_ids)
            r.quality_note = (
                "identical greedy tokens"
                if r.first_divergence_token is None
                else f"first differs at generated token {r.first_divergence_token}"
            )
        length_note = (
            f"generated {r.output_tokens_median:g} tokens vs vanilla's {base.output_tokens_median:g} (EOS came "
            "at a different step): compare tokens/s and TPOT, not end-to-end latency"
        )
        if (
            _ok(r.output_tokens_median)
            and _ok(base.output_tokens_median)
            and r.output_tokens_median != base.output_tokens_median
            and length_note not in r.notes
        ):
            r.notes.append(length_note)
        r.verdict = verdict.lane_verdict(r)
    return notes


def _hardware_summary() -> dict[str, Any]:
    from engine.runtime import hardware

    info = hardware.detect()
    out: dict[str, Any] = {
        "cpu": info.cpu_name,
        "cpu_cores_logical": info.cpu_cores_logical,
        "torch_threads": info.torch_threads,
        "ram_total_bytes": info.ram_total_bytes,
        "accelerator": info.accelerator,
        "torch": info.torch_version,
        "cuda_build": info.cuda_build,
        "gpu_reason": info.gpu_reason,
    }
    if info.gpus:
        g = info.gpus[0]
        out.update(gpu=g.name, gpu_memory_total_bytes=g.memory_total_bytes, gpu_count=len(info.gpus))
    return out


def _starting(c: Contender, spec: RaceSpec) -> str:
    if c.peer == "vllm" and c.python:
        return f"{c.label}: starting vLLM in its own environment (import, load and KV pool before the timed runs)"
    if c.peer == "vllm":
        return f"{c.label}: no vLLM environment is set up for this lane"
    if c.peer:
        return (
            f"{c.label}: starting (loads the conversion an earlier race cached, or converts the model first; "
            "the lane's result says which)"
        )
    if c.python == "":
        return f"{c.label}: no Python environment is set up for this lane"
    where = "its own Python environment" if c.python else "this app's Python"
    return f"{c.label}: starting a worker process in {where}"


def _run_one(
    spec: RaceSpec,
    c: Contender,
    i: int,
    total: int,
    tmp: Path,
    device: str,
    progress: Progress | None,
    timing_only: bool = False,
) -> ContenderResult:
    if progress:
        progress(i, total, _starting(c, spec))
    job = {
        "model": spec.model,
        "dtype": spec.dtype,
        "device": spec.device,
        "race_device": device,
        "contender": c.to_dict(),
        "prompts": list(spec.prompts),
        "max_new_tokens": spec.max_new_tokens,
        "runs": spec.runs,
        "warmup": spec.warmup,
        "chat_template": spec.chat_template,
        "reference_text": quality.REFERENCE_TEXT,
        "timing_only": timing_only,
    }
    preset = PRESETS.get(spec.model)
    if preset is not None and preset.kind == "random":
        job["weights_file"] = str(tmp / "weights.safetensors")  # see worker._share_weights
    t0 = time.perf_counter()
    r = run_worker(c, job, spec.timeout_s)
    if r.wall_s is None:
        r.wall_s = time.perf_counter() - t0
    if progress:
        extra = " (converted now)" if r.converted_now else ""
        progress(i + 1, total, f"{c.label}: {r.status}{extra}" + (f" ({r.reason[:120]})" if r.reason else ""))
    return r


def run_race(
    spec: RaceSpec, progress: Progress | None = None, checkpoint: Callable[[RaceResult], None] | None = None
) -> RaceResult:
    """Run every contender in turn (vanilla first), vanilla again at the end, and compare. Raises
    InvalidParameterError for a bad spec. `checkpoint` gets the partial result after each contender (the
    CLI saves it, so a race cut short by an outer timeout still leaves the contenders that finished)."""
    spec = spec.validate()
    hw = _hardware_summary()
    if spec.dtype != "auto":  # fail before starting workers (fp16 on a CPU, a typo) rather than in each one
        from engine.runtime.models import resolve_device, resolve_dtype

        resolve_dtype(spec.dtype, resolve_device(spec.device))
    result = RaceResult(
        model=spec.model,
        dtype=spec.dtype,
        device=hw["accelerator"] if spec.device == "auto" else spec.device,
        runs=spec.runs,
        warmup=spec.warmup,
        max_new_tokens=spec.max_new_tokens,
        prompts=list(spec.prompts),
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        hardware=hw,
        chat_template=spec.chat_template,
        load_avg_start=loadavg(),
    )
    recheck = spec.recheck_baseline and any(c.name != BASELINE for c in spec.contenders)
    total = len(spec.contenders) + int(recheck)
    with tempfile.TemporaryDirectory(prefix="inference-lab-race-") as tmp:
        for i, c in enumerate(spec.contenders):
            result.contenders.append(_run_one(spec, c, i, total, Path(tmp), result.device, progress))
            if checkpoint is not None and i + 1 < total:
                compare(result.contenders)
                result.finished_at = f"incomplete: {i + 1} of {total} contenders"
                checkpoint(result)
        base = next((c for c in spec.contenders if c.name == BASELINE), None)
        if recheck and base is not None and any(r.name == BASELINE and r.ran for r in result.contenders):
            again = replace(base, label=f"{base.label} (re-run at the end)")
            result.baseline_recheck = _run_one(
                spec, again, total - 1, total, Path(tmp), result.device, progress, timing_only=True
            )
    cores = hw.get("cpu_cores_logical") or 1
    before, others = other_load(result, cores)
    busy = is_busy(before, cores) or is_busy(others, cores)
    result.notes.extend(compare(result.contenders, result.baseline_recheck, busy=busy))
    result.winner = verdict.winner_line(result.contenders)
    if busy:
        result.notes.append(busy_note(before, others, cores))
    result.finished_at = datetime.now(UTC).isoformat(timespec="seconds")
    return result


BUSY_NOTE_START = "Other work was running on this machine during the race"
OLD_BUSY_NOTE_START = "the machine was busy during the race"  # as races recorded before 2026-12-05 word it


def busy_note(before: float, others: float, cores: int) -> str:
    """The busy machine in plain words, from other_load's two readings: what the other work was, how much, and
    what it means for the timings."""
    how_much = []
    if math.isfinite(before):
        how_much.append(
            f"before the race began, about {before:.1f} cores' worth of work was running or waiting on this "
            f"{cores}-core machine (its 1-minute load average)"
        )
    if others > 0:
        how_much.append(
            f"while the lanes ran, other programs added up to {others:.1f} cores' worth on top of the race's own"
        )
    said = "; ".join(how_much)
    return (
        f"{BUSY_NOTE_START}"
        + (f": {said}." if said else ".")
        + " Every timing here includes time the race spent "
        "waiting for that work, so the times are longer and more scattered than on a quiet machine, and the "
        "comparisons less sure. Run the race again when the machine is quiet."
    )


def other_load(result: RaceResult, cores: int) -> tuple[float, float]:
    """(the 1-minute load average before the race, the most seen after a lane beyond the race's own threads).
    A lane's worker keeps up to one thread a core busy, so its own work is in the reading taken after it (and, the
    1-minute average decaying slowly, in the next lane's reading before it): only the first reading and what
    exceeds the lane's own threads are other work (the one rule, engine.core.load.is_busy, judges them)."""
    before = result.load_avg_start[0] if result.load_avg_start else math.nan
    after = [max(0.0, r.load_avg[1] - cores) for r in result.contenders if r.load_avg]
    return before, max(after, default=0.0)
