"""A simulated load sweep: the load generator's workload (engine.loadgen.workload.plan: the same seeded lengths and
arrival times a real sweep sends) through the virtual scheduler (engine.simulate.clock) at each level, summarised
by the load generator's own metrics (engine.loadgen.metrics.summarize) into its SweepResult, so the JSON, the table
and the charts are those of a measured sweep. The sweep runs three times, with every step at the low end, the
centre and the high end of its interval (engine.simulate.steps), and each figure carries the spread of the three.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from engine.batching import policy
from engine.calc.efficiency import ENGINES, Setup
from engine.calc.hf_config import read_config_file, spec_from_hf_config
from engine.calc.memory import kv_bytes_per_token
from engine.calc.plan import served_layout
from engine.calc.serving_memory import ServingMemory, serving_memory
from engine.calc.specs import THIS_MACHINE, GPUSpec, ModelSpec, gpu_spec
from engine.core.errors import InvalidParameterError
from engine.core.interval import Interval
from engine.core.jsonsafe import to_jsonable
from engine.loadgen.client import RequestRecord
from engine.loadgen.metrics import RunMetrics, summarize
from engine.loadgen.sweep import SweepResult, to_json
from engine.loadgen.workload import SLO, LoadSpec, PlannedRequest, plan
from engine.simulate.clock import SimRequest, run
from engine.simulate.spec import DEFAULT_GPU_BATCH, SimulateSpec
from engine.simulate.steps import CalibratedSteps, PublishedSteps, StepModel, end, published_steps

ENDS = ("low", "central", "high")
SIMULATED_URL = "http://simulated/v1"  # LoadSpec wants a URL; nothing is sent
Progress = Callable[[float, str], None]


@dataclass(frozen=True)
class Deployment:
    """What the simulator runs: the model on its GPUs, the scheduler's limits and the step-time model."""

    spec: ModelSpec
    gpu: GPUSpec
    n_gpus: int
    engine: str
    limits: policy.Limits
    steps: StepModel
    memory: ServingMemory | None  # the KV budget as the engine allocates it (None: this machine's scheduler)
    notes: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"simulated for {self.gpu.name} x {self.n_gpus}, {self.engine}"


def model_spec(s: SimulateSpec) -> ModelSpec:
    """The model's shape from a preset or a config.json (the calculator's formula counts)."""
    if s.config:
        cfg = read_config_file(s.config)
        return spec_from_hf_config(cfg)
    from engine.calibration import resolve_model_spec

    assert s.model is not None
    return resolve_model_spec(s.model)


def check_split(spec: ModelSpec, n_gpus: int) -> None:
    """Tensor parallel splits the attention heads evenly (vLLM refuses otherwise: 'Total number of attention heads
    must be divisible by tensor parallel size'); KV heads too, or are replicated when fewer than the GPUs."""
    if n_gpus == 1:
        return
    if spec.n_head % n_gpus:
        ok = [d for d in range(1, min(spec.n_head, 64) + 1) if spec.n_head % d == 0 and d > 1][:6]
        raise InvalidParameterError(
            f"{spec.name} has {spec.n_head} attention heads, which {n_gpus} GPUs cannot split evenly; choose a "
            f"GPU count that divides them ({', '.join(map(str, ok))}, ...)"
        )
    kv = spec.n_kv_head
    if kv >= n_gpus and kv % n_gpus:
        raise InvalidParameterError(
            f"{spec.name} has {kv} KV heads, which {n_gpus} GPUs cannot split evenly; choose a count that divides them"
        )


def deployment(s: SimulateSpec, spec: ModelSpec | None = None, gpu: GPUSpec | None = None) -> Deployment:
    """Resolve the spec into a model, GPUs, the scheduler's limits and the step model; clear errors otherwise.
    `spec`, `gpu`: a model shape or GPU figures given directly (the Memory-and-cost page's, edited or uploaded)."""
    spec = spec or model_spec(s)
    prompt_max = s.prompt_tokens_max or s.prompt_tokens
    output_max = s.output_tokens_max or s.output_tokens
    longest = prompt_max + output_max
    if longest > spec.context_length:
        raise InvalidParameterError(
            f"prompt + output up to {longest} tokens exceed {spec.name}'s context of {spec.context_length}; shorten them"
        )
    kv_dtype = s.kv_dtype or s.dtype
    per_token = math.ceil(kv_bytes_per_token(spec, kv_dtype))
    if s.gpu == THIS_MACHINE:
        return _this_machine(s, spec, per_token)
    gpu = gpu or gpu_spec(s.gpu)
    # the GPUs as the estimate lays them out: the widest tensor-parallel size that divides the count, the rest as
    # pipeline stages (engine.calc.plan.served_layout), so a count the estimate prices is one the simulator runs
    tp, pp = served_layout(spec, s.n_gpus)
    check_split(spec, tp)
    notes = []
    if pp > 1:
        notes.append(
            f"{s.n_gpus} GPUs run as {pp} pipeline stages of {tp} (--pipeline-parallel-size {pp}): a step passes "
            "through every stage in turn here, where a server keeps the stages busy with micro-batches, so the "
            "simulated throughput is a floor"
        )
    allocator = s.engine if s.engine in ("vllm", "sglang") else "vllm"
    if allocator != s.engine:
        notes.append(f"the KV budget is sized as vLLM allocates it ({s.engine} has no allocation model here)")
    sm = serving_memory(
        spec,
        gpu,
        engine=allocator,
        dtype=s.dtype,
        kv_dtype=kv_dtype,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        gpu_memory_utilization=s.gpu_memory_utilization,
        max_model_len=longest,
        max_num_seqs=s.max_batch,
    )
    if not sm.fits:
        raise InvalidParameterError(
            f"{spec.name} in {s.dtype} leaves no room for a KV cache on {s.n_gpus} x {gpu.name} "
            f"({sm.weights_bytes / 1e9:.1f} GB of weights per GPU of {sm.total_bytes / 1e9:.1f} GB): add GPUs, "
            "pick a larger GPU or a smaller format"
        )
    if not s.max_batch and not sm.max_num_seqs:
        notes.append(
            f"SGLang's own cap on running requests is not modelled: at most {DEFAULT_GPU_BATCH} run at once here "
            f"(--max-running-requests {DEFAULT_GPU_BATCH})"
        )
    chunk = s.prefill_chunk_tokens or sm.max_num_batched_tokens or 2048
    limits = policy.Limits(
        max_batch=gpu_max_batch(s, sm),
        kv_budget_bytes=int(sm.kv_cache_tokens * per_token),
        kv_bytes_per_token=per_token,
        prefill_chunk_tokens=chunk,
        mixed_prompt_tokens=s.mixed_prompt_tokens or chunk,
    )
    setup = Setup(
        spec, gpu, s.dtype, None, None, None, kv_dtype, tp, 1, s.prompt_tokens, s.output_tokens, pipeline=pp
    )
    steps = published_steps(setup, s.engine)
    if steps.anchor is not None:
        notes.append(anchored_words(steps))
    return Deployment(spec, gpu, s.n_gpus, s.engine, limits, steps, sm, tuple(notes))


def gpu_max_batch(s: SimulateSpec, sm: ServingMemory) -> int:
    """The requests the simulated server runs at once: --max-num-seqs as asked, else the allocation's (vLLM's
    default for the GPU, the number its profile run sized and the launch command states: 1024 on GPUs of 70 GiB or
    more other than A100s, 256 on the rest), else (SGLang, whose own cap is not modelled) DEFAULT_GPU_BATCH."""
    return s.max_batch or sm.max_num_seqs or DEFAULT_GPU_BATCH


def anchored_words(steps: PublishedSteps) -> str:
    """What anchoring the steps' fixed costs to a published run means, in one sentence."""
    a = steps.anchor
    assert a is not None
    return f"step times anchored to a measurement, as the estimate's are: {a.words()}"


def _this_machine(s: SimulateSpec, spec: ModelSpec, per_token: int) -> Deployment:
    """This CPU with its stored calibration and the server's own scheduler defaults (engine serve)."""
    from engine.batching.scheduler import (  # torch: only for this machine
        DEFAULT_KV_FRACTION,
        DEFAULT_MAX_BATCH,
        DEFAULT_MIXED_PROMPT_TOKENS,
        DEFAULT_PREFILL_CHUNK_TOKENS,
    )
    from engine.calibration import require_calibration
    from engine.runtime.hardware import free_memory_bytes

    if s.n_gpus != 1:
        raise InvalidParameterError(f"{THIS_MACHINE} is one device: use --gpus 1")
    cal = require_calibration()
    gpu = cal.machine_gpu()
    limits = policy.Limits(
        max_batch=s.max_batch or DEFAULT_MAX_BATCH,
        kv_budget_bytes=int(free_memory_bytes("cpu") * DEFAULT_KV_FRACTION),
        kv_bytes_per_token=per_token,
        prefill_chunk_tokens=s.prefill_chunk_tokens or DEFAULT_PREFILL_CHUNK_TOKENS,
        mixed_prompt_tokens=s.mixed_prompt_tokens or DEFAULT_MIXED_PROMPT_TOKENS,
    )
    notes = ("the KV budget is the server's: a quarter of the memory free now",)
    if s.dtype == "fp32":
        notes += (
            "step times are the calibration's, measured on the model as the pages run it; the server packs its "
            "linear weights for oneDNN in fp32 (turn its packed weights off to serve that model), so its "
            "steps with several rows are faster than simulated here",
        )
    if ENGINES.get(s.engine) != "hf":
        notes += (f"{THIS_MACHINE} runs this engine's own scheduler; --engine {s.engine} is not used",)
    return Deployment(spec, gpu, 1, "this engine", limits, CalibratedSteps(cal, spec, s.dtype), None, notes)


def workload(s: SimulateSpec, level: float) -> tuple[LoadSpec, list[PlannedRequest]]:
    """The load generator's spec and plan at one level: the same seeded output lengths and arrival times."""
    load = LoadSpec(
        base_url=SIMULATED_URL,
        model=s.model or s.config,
        mode="poisson" if s.mode == "rate" else "concurrency",
        rate=float(level) if s.mode == "rate" else 1.0,
        burstiness=s.burstiness,
        concurrency=int(level) if s.mode == "concurrency" else 1,
        n_requests=s.n_requests,
        output_tokens=s.output_tokens,
        output_tokens_max=s.output_tokens_max,
        seed=s.seed,
    ).validate()
    return load, plan(load)


def prompt_lengths(s: SimulateSpec) -> list[int]:
    """Prompt tokens per request: fixed, or drawn uniformly from [P, P max] with a seed of their own (vLLM bench's
    random dataset draws input lengths the same way)."""
    if s.prompt_tokens_max is None:
        return [s.prompt_tokens] * s.n_requests
    rng = random.Random(f"prompt-{s.seed}")
    return [rng.randint(s.prompt_tokens, s.prompt_tokens_max) for _ in range(s.n_requests)]


def requests_of(reqs: Sequence[PlannedRequest], lengths: Sequence[int]) -> list[SimRequest]:
    return [SimRequest(r.index, lengths[r.index], r.max_tokens, r.send_at_s) for r in reqs]


def steady_stagger_s(s: SimulateSpec, d: Deployment, users: int, which: str = "central") -> float:
    """How far apart `users` fixed users start so that they run in steady state, their requests spread evenly over
    one round (each user's request, back to back), as a deployment's users do, not all at once: a sweep of the
    load generator starts them together, and with equal lengths they then stay in lock step, every round's first
    tokens waiting for every prompt of the round. A round is its output's steps at `users` decoding rows plus,
    for each user, what carrying its prompt adds to a step: R = O x decode + u x (step with a prompt - decode), at
    the step times' `which` end (the run's own, so a slower run spreads its users as far as its rounds last)."""
    ctx = s.prompt_tokens + s.output_tokens // 2
    decode = end(d.steps.duration(users, ctx, 0), which)
    with_prompt = end(d.steps.duration(max(0, users - 1), ctx, s.prompt_tokens, 1), which)
    round_s = s.output_tokens * decode + users * max(0.0, with_prompt - decode)
    return round_s / max(1, users)


def warm_up(s: SimulateSpec, users: int) -> int:
    """Spread users (steady state) at a level of `users`: as many as the level, whose first requests (the ramp, on
    a server not yet full) are left out; 0 for users started together, for arrivals, and where the level has
    fewer than two requests per user (their first requests are then all it has: they start together)."""
    if s.mode != "concurrency" or s.starts_together or s.n_requests < 2 * users:
        return 0
    return users


def run_level(
    d: Deployment,
    load: LoadSpec,
    reqs: Sequence[SimRequest],
    slo: SLO,
    which: str = "central",
    *,
    stagger_s: float = 0.0,
    skip: int = 0,
) -> RunMetrics:
    """One level of the sweep: the workload through the virtual scheduler, summarised as the load generator does
    (fixed users start `stagger_s` apart; the first `skip` requests are left out of the figures)."""
    records = counted_records(d, load, reqs, which, stagger_s, skip)
    m = summarize(records, level=load.level, mode=load.mode, slo=slo)
    return steady_rates(m, load) if skip and load.mode == "concurrency" else m


def counted_records(
    d: Deployment, load: LoadSpec, reqs: Sequence[SimRequest], which: str, stagger_s: float, skip: int
) -> list[RequestRecord]:
    """The level's records through the virtual scheduler, the first `skip` (the ramp) left out."""
    records = run(
        reqs,
        d.limits,
        d.steps,
        concurrency=load.concurrency if load.mode == "concurrency" else None,
        which=which,
        stagger_s=stagger_s,
    )
    return [r for r in records if r.index >= skip]


def steady_rates(m: RunMetrics, load: LoadSpec) -> RunMetrics:
    """Rates of users in steady state by Little's law for a closed loop (each user sends its next request when the
    last ends): requests/s = users / mean request time. Counted over the run's wall clock instead, they take in
    the users' spread-out start and the drain after the first user's last request, when fewer users are left
    (50 users of 8B on an H100: 6.64 against 8.2 requests/s), and no longer match the estimate's closed form."""
    done = m.completed
    if not done or not math.isfinite(m.e2e_s.mean) or m.e2e_s.mean <= 0 or not load.concurrency:
        return m
    rps = load.concurrency / m.e2e_s.mean
    per_request = m.output_tokens_per_s / m.request_throughput if m.request_throughput else math.nan
    return replace(
        m,
        request_throughput=rps,
        output_tokens_per_s=rps * per_request,
        goodput_rps=rps * m.slo_attainment,
    )


# Requests per user for a run of fixed users to stand for its steady state (engine.simulate.solve confirms its
# answers with this many; its comment there says why 20).
STEADY_REQUESTS_PER_USER = 20


@dataclass(frozen=True)
class SimulatedSweep:
    spec: SimulateSpec
    deployment: Deployment
    runs: dict[str, SweepResult]  # "low" / "central" / "high": every step at that end of its interval

    @property
    def result(self) -> SweepResult:
        return self.runs["central"]

    def knee_interval(self) -> dict:
        """The knee of each run: the fast run's is the high end (None where a run met no level)."""
        return {"low": self.runs["high"].knee, "central": self.result.knee, "high": self.runs["low"].knee}

    def intervals(self) -> list[dict]:
        """Per level, each figure as an Interval over the three runs (low = the smaller value); `rows`: the
        observations behind the step times' interval (published rows, calibration shapes or measured steps)."""
        rows = self.deployment.steps.describe().get("rows")
        out = []
        for i, p in enumerate(self.result.points):
            trio = [self.runs[e].points[i] for e in ENDS]
            row: dict = {"level": p.level}
            for name in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
                row[name] = {
                    q: _spread([getattr(getattr(t, name), q) for t in trio], rows)
                    for q in ("p50", "p90", "p99")
                }
            for name in ("output_tokens_per_s", "request_throughput", "goodput_rps", "slo_attainment"):
                row[name] = _spread([getattr(t, name) for t in trio], rows)
            out.append(row)
        return out

    def to_json(self) -> dict:
        """The load generator's JSON (spec, slo, levels, points, knee, ...) for the central run, plus `simulated`."""
        out = to_json(self.result)
        d = self.deployment
        out["simulated"] = to_jsonable(
            {
                "gpu": d.gpu.name,
                "gpu_key": self.spec.gpu,
                "gpus": d.n_gpus,
                "engine": d.engine,
                "model": d.spec.name,
                "dtype": self.spec.dtype,
                "kv_dtype": self.spec.kv_dtype or self.spec.dtype,
                "label": d.label,
                "step_model": d.steps.describe(),
                "scheduler": {
                    "max_batch": d.limits.max_batch,
                    "kv_budget_bytes": d.limits.kv_budget_bytes,
                    "kv_bytes_per_token": d.limits.kv_bytes_per_token,
                    "kv_budget_tokens": d.limits.kv_budget_bytes // d.limits.kv_bytes_per_token,
                    "prefill_chunk_tokens": d.limits.prefill_chunk_tokens,
                    "mixed_prompt_tokens": d.limits.mixed_prompt_tokens,
                    "policy": "the lab server's own scheduler policy",
                },
                "start": "together" if self.spec.starts_together else "spread",
                "warm_up_requests_left_out": [warm_up(self.spec, int(p.level)) for p in self.result.points],
                # spread users: rates by Little's law (users / mean request time), as the estimate counts them
                "rates": "steady state: users / mean request time"
                if not self.spec.starts_together and self.spec.mode == "concurrency"
                else "requests over the run's wall clock",
                "prompt_tokens": self.spec.prompt_tokens,
                "prompt_tokens_max": self.spec.prompt_tokens_max,
                "knee_interval": self.knee_interval(),
                "intervals": [
                    {
                        k: (_json(v) if isinstance(v, Interval) else {q: _json(x) for q, x in v.items()})
                        if k != "level"
                        else v
                        for k, v in row.items()
                    }
                    for row in self.intervals()
                ],
                "notes": [*d.notes, *self.short_run_notes()],
            }
        )
        return out

    def short_run_notes(self) -> list[str]:
        """Fixed users whose run is too short for steady state, said (the engineer's walk: 121 users at the default
        200 requests 'failed' every objective here, 9.71 s to a first token, where the most-users answer, confirmed
        with 20 requests a user, met them; with 2,800 requests this run agrees)."""
        if self.spec.mode != "concurrency":
            return []
        short = [
            p.level for p in self.result.points if self.spec.n_requests < STEADY_REQUESTS_PER_USER * p.level
        ]
        if not short:
            return []
        top = int(max(short))
        return [
            f"at {', '.join(f'{v:g}' for v in short)} users, {self.spec.n_requests:,} requests are fewer than "
            f"{STEADY_REQUESTS_PER_USER} per user: the run is not the steady state the same users see once running "
            "(under 2 per user every user's only request starts at once, which reads worse; a few per user end on a "
            "machine the others have left, which reads better); "
            f"the most-users answer confirms with at least {STEADY_REQUESTS_PER_USER} per user (--requests "
            f"{STEADY_REQUESTS_PER_USER * top:,} for {top:g} users)"
        ]


def _spread(values: Sequence[float], rows: int | None) -> Interval:
    c = values[1]  # the runs with low, central and high step times
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite or c is None or not math.isfinite(c):
        return Interval(math.nan, math.nan, math.nan, rows=rows)
    return Interval(min(finite), c, max(finite), rows=rows)


def _json(i: Interval) -> dict:
    return to_jsonable(i.to_json())


def simulate(
    s: SimulateSpec,
    slo: SLO,
    *,
    progress: Progress | None = None,
    lengths: Sequence[int] | None = None,
    deploy: Deployment | None = None,
) -> SimulatedSweep:
    """The sweep at every level of `s` (stopping after the first that misses the SLOs unless keep_going), three
    times over the step-time interval. `lengths`: prompt tokens per request (default: prompt_lengths(s));
    `deploy`: a resolved deployment (bench/simulate.py passes measured step times)."""
    s.validate()
    slo.validate()
    if progress and deploy is None:
        progress(0.0, f"reading {s.model or s.config}'s shape and sizing its memory")
    d = deploy or deployment(s)
    lengths = list(lengths) if lengths is not None else prompt_lengths(s)
    if len(lengths) < s.n_requests:
        raise InvalidParameterError(f"{len(lengths)} prompt lengths for {s.n_requests} requests")
    levels = s.levels()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    runs: dict[str, SweepResult] = {}
    ran: list[float] = []
    total = len(levels) * len(ENDS)
    for j, which in enumerate(("central", "low", "high")):
        points: list[RunMetrics] = []
        stopped = False
        todo = levels if which == "central" else ran
        for i, level in enumerate(todo):
            if progress:
                unit = ("user" if level == 1 else "users") if s.mode == "concurrency" else "requests/s"
                progress((j * len(levels) + i) / total, f"{level:g} {unit}, {which} step times")
            load, planned = workload(s, level)
            users = warm_up(s, int(level))  # spread users: as many as the level, else 0
            stagger = steady_stagger_s(s, d, users, which) if users else 0.0
            m = run_level(d, load, requests_of(planned, lengths), slo, which, stagger_s=stagger, skip=users)
            points.append(m)
            if which == "central" and not m.meets_slo and not s.keep_going:
                stopped = i < len(levels) - 1
                break
        if which == "central":
            ran = [p.level for p in points]
        knee = _knee(points, s.keep_going)
        runs[which] = SweepResult(
            workload(s, levels[0])[0], slo, levels, tuple(points), knee, stopped, started
        )
    if progress:
        progress(1.0, "done")
    return SimulatedSweep(s, d, runs)


def _knee(points: Sequence[RunMetrics], keep_going: bool) -> float | None:
    """run_sweep's knee: the highest level meeting the SLOs before the first that misses (any, with keep_going)."""
    knee = None
    for p in points:
        if p.meets_slo:
            knee = p.level
        elif not keep_going:
            break
    return knee


def with_steps(d: Deployment, steps: StepModel, notes: Sequence[str] = ()) -> Deployment:
    """The same deployment with another step-time model (bench/simulate.py: the scheduler's measured steps)."""
    return replace(d, steps=steps, notes=d.notes + tuple(notes))
