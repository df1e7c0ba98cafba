"""Workloads of requests (arrival rate, prompt and output length distributions, a fixed seed) and their replay
under static or in-flight batching, measured: throughput, TTFT and latency percentiles, and a per-request
timeline (queued, prefill, decode, and for static batching the slot held idle after a row finished).

Static policy here: when the model is free, take up to `max_batch` requests that have already arrived (no
waiting to fill a batch: the kindest static batching), run them until the longest finishes, repeat.
In-flight policy: a fresh engine.batching.scheduler.Scheduler with the same `max_batch`, requests submitted at
their arrival times. Output lengths are forced (EOS ignored, as `vllm bench` does with --ignore-eos) so both
policies generate exactly the same tokens. Metric names follow vLLM's benchmark (benchmarks/benchmark_serving.py).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from engine.batching.scheduler import Scheduler
from engine.batching.sequence import Request
from engine.batching.spec import OUTPUT_DISTRIBUTIONS, BatchSpec, WorkloadSpec  # noqa: F401 (their home)
from engine.batching.static import run_static_batch
from engine.core.errors import InvalidParameterError
from engine.core.stats import percentile
from engine.core.threads import run_in_thread
from engine.runtime.models import LoadedModel
from engine.runtime.settings import GenerationConfig

POLICIES = ("static", "inflight")
_WORDS = [
    "the",
    "model",
    "reads",
    "every",
    "weight",
    "once",
    "per",
    "step",
    "so",
    "a",
    "batch",
    "shares",
    "that",
    "cost",
    "between",
    "many",
    "requests",
    "while",
    "memory",
    "holds",
    "the",
    "cache",
    "of",
    "keys",
    "and",
    "values",
    "for",
    "each",
    "token",
    "of",
    "each",
    "sequence",
    "in",
    "flight",
    "and",
    "the",
    "scheduler",
    "decides",
    "who",
    "runs",
    "next",
    "when",
    "one",
    "finishes",
    "early",
    "another",
    "joins",
    "at",
    "the",
    "following",
    "token",
    "boundary",
]


@dataclass(frozen=True)
class WorkloadRequest:
    index: int
    arrival_s: float  # offset from the start of the replay
    prompt: str
    prompt_ids: tuple[int, ...]
    max_new_tokens: int


def generate_workload(spec: WorkloadSpec, tokenizer) -> tuple[WorkloadRequest, ...]:
    """The same requests for the same spec and seed, whatever the policy."""
    spec = spec.validate()
    rng = random.Random(spec.seed)
    t = 0.0
    out = []
    for i in range(spec.n_requests):
        if spec.arrival_rate_per_s > 0 and i > 0:
            t += rng.expovariate(spec.arrival_rate_per_s)
        n_prompt = rng.randint(spec.prompt_tokens_min, spec.prompt_tokens_max)
        lo, hi = spec.output_tokens_min, spec.output_tokens_max
        if spec.output_distribution == "uniform":
            n_out = rng.randint(lo, hi)
        else:
            n_out = min(hi, max(lo, round(math.exp(rng.uniform(math.log(lo), math.log(hi + 1))))))
        words = " ".join(rng.choice(_WORDS) for _ in range(n_prompt + 4))
        ids = tuple(tokenizer(words, add_special_tokens=False)["input_ids"][:n_prompt])
        out.append(WorkloadRequest(i, t, tokenizer.decode(list(ids)), ids, n_out))
    return tuple(out)


@dataclass(frozen=True)
class RequestResult:
    index: int
    prompt_tokens: int
    output_tokens: int
    arrival_s: float  # all times relative to the replay's start
    admitted_s: float
    first_token_s: float
    finished_s: float
    slot_released_s: float  # static: the end of its batch; in-flight: = finished_s
    ttft_s: float
    latency_s: float
    queue_s: float
    token_ids: tuple[int, ...]


@dataclass(frozen=True)
class TimelineRow:
    request: int
    phase: str  # "queued" | "prefill" | "decode" | "idle slot"
    start_s: float
    end_s: float


@dataclass(frozen=True)
class PolicyResult:
    policy: str
    model: str
    max_batch: int
    n_requests: int
    output_tokens: int
    wall_s: float
    throughput_tokens_per_s: float
    requests_per_s: float
    ttft_s_p50: float
    ttft_s_p95: float
    latency_s_p50: float
    latency_s_p95: float
    queue_s_p50: float
    slot_utilization: float  # useful row-steps / row-steps computed (static wastes the idle slots)
    requests: tuple[RequestResult, ...]
    breakdown: tuple[
        tuple[str, float], ...
    ] = ()  # (part, seconds) of the model thread's time; see scheduler.BREAKDOWN
    decode_steps: int = 0  # forward passes after the prefills: decode_forward / decode_steps = time per step
    replay_walls: tuple[
        float, ...
    ] = ()  # every replay's wall time where this is the fastest of several (compare)

    def timeline(self) -> list[TimelineRow]:
        rows: list[TimelineRow] = []
        for r in self.requests:
            rows.append(TimelineRow(r.index, "queued", r.arrival_s, r.admitted_s))
            rows.append(TimelineRow(r.index, "prefill", r.admitted_s, r.first_token_s))
            rows.append(TimelineRow(r.index, "decode", r.first_token_s, r.finished_s))
            if r.slot_released_s > r.finished_s + 1e-9:
                rows.append(TimelineRow(r.index, "idle slot", r.finished_s, r.slot_released_s))
        return rows

    def summary(self) -> dict[str, float | int | str]:
        return {k: (dict(v) if k == "breakdown" else v) for k, v in self.__dict__.items() if k != "requests"}


def _cfg(n: int) -> GenerationConfig:
    return GenerationConfig(max_new_tokens=n, do_sample=False)


def _result(seq: Request, index: int, t0: float) -> RequestResult:
    t = seq.times
    released = t.slot_released if not math.isnan(t.slot_released) else t.finished
    return RequestResult(
        index=index,
        prompt_tokens=seq.prompt_len,
        output_tokens=len(seq.generated),
        arrival_s=t.arrival - t0,
        admitted_s=t.admitted - t0,
        first_token_s=t.first_token - t0,
        finished_s=t.finished - t0,
        slot_released_s=released - t0,
        ttft_s=t.first_token - t.arrival,
        latency_s=t.finished - t.arrival,
        queue_s=t.admitted - t.arrival,
        token_ids=tuple(seq.generated),
    )


def _summarize(
    policy: str,
    lm: LoadedModel,
    max_batch: int,
    results: list[RequestResult],
    breakdown: dict[str, float] | None = None,
    decode_steps: int = 0,
) -> PolicyResult:
    results.sort(key=lambda r: r.index)
    wall = max(r.finished_s for r in results)
    tokens = sum(r.output_tokens for r in results)
    held = sum(r.slot_released_s - r.first_token_s for r in results)
    used = sum(r.finished_s - r.first_token_s for r in results)
    return PolicyResult(
        policy=policy,
        model=lm.name,
        max_batch=max_batch,
        n_requests=len(results),
        output_tokens=tokens,
        wall_s=wall,
        throughput_tokens_per_s=tokens / wall if wall > 0 else math.nan,
        requests_per_s=len(results) / wall if wall > 0 else math.nan,
        ttft_s_p50=percentile([r.ttft_s for r in results], 50),
        ttft_s_p95=percentile([r.ttft_s for r in results], 95),
        latency_s_p50=percentile([r.latency_s for r in results], 50),
        latency_s_p95=percentile([r.latency_s for r in results], 95),
        queue_s_p50=percentile([r.queue_s for r in results], 50),
        slot_utilization=used / held if held > 0 else 1.0,
        requests=tuple(results),
        breakdown=tuple((breakdown or {}).items()),
        decode_steps=decode_steps,
    )


@dataclass(frozen=True)
class PolicyBound:
    """What each policy must compute on a workload whose requests all wait at the start, in steps (one token per
    running row per step, the first token's prefill included) and in row-steps (rows computed per step, summed).
    Static batching runs each batch of max_batch until its longest row is done, computing finished rows; in-flight
    batching refills a freed slot at once and computes only live rows.

    The most in-flight batching can gain then lies between two regimes of what a step costs:
    - every step the same, whatever its rows (memory-bound decode: the weights are read once per step, as on a
      GPU at small batches): static_steps / inflight_steps;
    - every row the same (compute-bound: cost grows with the rows): static_row_steps / inflight_row_steps.
    A real step costs a fixed part plus a part per row, so a measurement lands between the two; where it lands says
    how much a row costs on the machine. Above the larger one, the replays ran at different speeds (other work on
    the machine, a cold start), which is not the policy's doing."""

    static_steps: int  # batches of max_batch in arrival order, each until its longest row is done
    inflight_steps: int  # first come, first served, a freed slot refilled at once
    full_slots_steps: int  # every slot busy every step: total tokens / max_batch, rounded up
    static_row_steps: int = (
        0  # each static batch's rows x its longest row (finished rows computed); 0: not counted
    )
    inflight_row_steps: int = 0  # the tokens themselves: in-flight computes live rows only
    waiting: int = (
        -1
    )  # requests that could not start at once (requests - max batch, at least 0); -1: not counted

    @property
    def throughput_ratio(self) -> float:
        """The gain when every step costs the same (memory-bound)."""
        return self.static_steps / self.inflight_steps

    @property
    def row_ratio(self) -> float:
        """The gain when every row costs the same (compute-bound); NaN where the row-steps were not counted (runs
        recorded before they were)."""
        return self.static_row_steps / self.inflight_row_steps if self.inflight_row_steps else math.nan

    @property
    def most(self) -> float:
        """The most either regime allows: a measured ratio above it is not the policy's alone."""
        return (
            max(self.throughput_ratio, self.row_ratio)
            if math.isfinite(self.row_ratio)
            else self.throughput_ratio
        )

    @property
    def full_slots_ratio(self) -> float:
        return self.static_steps / self.full_slots_steps


def policy_bound(workload: Sequence[WorkloadRequest], max_batch: int) -> PolicyBound:
    """The step and row-step counts of `PolicyBound` for `workload`'s output lengths (max_new_tokens; EOS
    ignored)."""
    lengths = [r.max_new_tokens for r in sorted(workload, key=lambda r: r.arrival_s)]
    batches = [lengths[i : i + max_batch] for i in range(0, len(lengths), max_batch)]
    static = sum(max(b) for b in batches)
    static_rows = sum(len(b) * max(b) for b in batches)
    queue, rows, inflight = list(lengths), [], 0
    while queue or rows:
        while queue and len(rows) < max_batch:
            rows.append(queue.pop(0))
        inflight += 1
        rows = [r - 1 for r in rows if r > 1]
    return PolicyBound(
        static,
        inflight,
        -(-sum(lengths) // max_batch),
        static_rows,
        sum(lengths),
        max(0, len(lengths) - max_batch),
    )


@dataclass(frozen=True)
class Headline:
    """The page's headline figure, in-flight throughput / static throughput, and whether it may stand alone."""

    ratio: float
    valid: bool  # False: above what either step-cost regime allows the workload, so part of it is not the policy's
    why: str  # "" when valid; else what batching can account for, and where the rest came from
    bound: float = math.nan  # the most the workload allows (PolicyBound.most), NaN without one


def throughput_headline(static: PolicyResult, inflight: PolicyResult, bound: PolicyBound | None) -> Headline:
    """In-flight over static throughput, marked when it passes the most the workload allows (PolicyBound.most).

    Below that, every part of the ratio is the policy's: fewer steps, fewer rows computed. Above it, the two
    replays ran at different speeds, so the figure measures the machine during each replay as much as the policy;
    the time per step of each replay says which."""
    if static.throughput_tokens_per_s <= 0 or not math.isfinite(static.throughput_tokens_per_s):
        return Headline(math.nan, False, "static batching produced no tokens, so there is no ratio")
    ratio = inflight.throughput_tokens_per_s / static.throughput_tokens_per_s
    if bound is None or ratio <= bound.most:
        return Headline(ratio, True, "", math.nan if bound is None else bound.most)
    per_static = static.wall_s / bound.static_steps if bound.static_steps else math.nan
    per_inflight = inflight.wall_s / bound.inflight_steps if bound.inflight_steps else math.nan
    rows = (
        f" and {bound.row_ratio:.2f}× if every row costs the same (static computes {bound.static_row_steps} "
        f"row-steps, finished rows included; in-flight {bound.inflight_row_steps})"
        if math.isfinite(bound.row_ratio)
        else ""
    )
    why = (
        f"{ratio:.2f}× is more than batching can give this workload: {bound.throughput_ratio:.2f}× if every step "
        f"costs the same (static {bound.static_steps} steps, in-flight {bound.inflight_steps}){rows}. Per step, "
        f"static took {per_static * 1e3:.1f} ms and in-flight {per_inflight * 1e3:.1f} ms: the two replays ran at "
        "different speeds, most likely because other work took the cores during one of them. Run again on a "
        "quieter machine."
    )
    return Headline(ratio, False, why, bound.most)


def _wait_until(t: float) -> None:
    delay = t - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


def replay_static(lm: LoadedModel, workload: Sequence[WorkloadRequest], max_batch: int) -> PolicyResult:
    """Runs the model on a thread of its own that ends with the replay (engine.core.threads.run_in_thread), as the
    in-flight scheduler's does, so that neither policy runs beside an OpenMP team the other left behind."""
    _check(workload, max_batch)
    return run_in_thread(lambda: _replay_static(lm, workload, max_batch), name="static-batching")


def _replay_static(lm: LoadedModel, workload: Sequence[WorkloadRequest], max_batch: int) -> PolicyResult:
    t0 = time.perf_counter()
    pending = sorted(workload, key=lambda r: r.arrival_s)
    results: list[RequestResult] = []
    spent: dict[str, float] = {}
    steps = 0
    while pending:
        _wait_until(t0 + pending[0].arrival_s)
        now = time.perf_counter() - t0
        take = [r for r in pending if r.arrival_s <= now][:max_batch]
        pending = pending[len(take) :]
        seqs = [
            Request(
                r.index,
                lm,
                r.prompt,
                r.prompt,
                r.prompt_ids,
                _cfg(r.max_new_tokens),
                ignore_eos=True,
                arrival=t0 + r.arrival_s,
            )
            for r in take
        ]
        run_static_batch(lm, seqs, spent)
        steps += max(len(s.generated) for s in seqs) - 1  # the batch runs until its longest row is done
        results.extend(_result(s, s.id, t0) for s in seqs)
    spent["other"] = max(0.0, spent.pop("total") - sum(spent.values()))
    return _summarize("static", lm, max_batch, results, spent, steps)


def replay_inflight(
    lm: LoadedModel,
    workload: Sequence[WorkloadRequest],
    max_batch: int,
    *,
    kv_budget_bytes: int | None = None,
) -> PolicyResult:
    _check(workload, max_batch)
    sched = Scheduler(lm, max_batch=max_batch, kv_budget_bytes=kv_budget_bytes, record=False)
    try:
        t0 = time.perf_counter()
        handles = []
        for r in sorted(workload, key=lambda r: r.arrival_s):
            _wait_until(t0 + r.arrival_s)
            h = sched.submit(
                r.prompt,
                _cfg(r.max_new_tokens),
                ignore_eos=True,
                prompt_ids=r.prompt_ids,
                arrival=t0 + r.arrival_s,
            )
            handles.append((r.index, h))
        for _, h in handles:
            h.result()
        results = [_result(h._req, index, t0) for index, h in handles]
        spent = sched.breakdown()
        spent.pop("total")
        steps = sched.snapshot().steps
    finally:
        sched.close()
    return _summarize("inflight", lm, max_batch, results, spent, steps)


def replay(lm: LoadedModel, workload: Sequence[WorkloadRequest], policy: str, max_batch: int) -> PolicyResult:
    if policy == "static":
        return replay_static(lm, workload, max_batch)
    if policy == "inflight":
        return replay_inflight(lm, workload, max_batch)
    raise InvalidParameterError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")


def warm_up(lm: LoadedModel, workload: Sequence[WorkloadRequest], max_batch: int) -> None:
    """Run each policy once, untimed, on the first two requests cut to 4 new tokens: a model's first forward
    passes pay for allocator growth and kernel setup, which would otherwise land on whichever policy runs
    first."""
    _check(workload, max_batch)
    warm = [replace(r, max_new_tokens=min(4, r.max_new_tokens)) for r in workload[:2]]
    for policy in POLICIES:
        replay(lm, warm, policy, min(2, max_batch))


COMPARE_REPEATS = 2  # replays per policy in `compare`, interleaved static, in-flight, in-flight, static


def interleaved(repeats: int) -> list[str]:
    """The replay order of `compare`: pairs of the policies, each pair the reverse of the last (ABBA for two), so a
    load that rises or falls through the comparison hits both policies alike."""
    order: list[str] = []
    for k in range(repeats):
        order += list(POLICIES) if k % 2 == 0 else list(reversed(POLICIES))
    return order


def compare(
    lm: LoadedModel, workload: Sequence[WorkloadRequest], max_batch: int, repeats: int = COMPARE_REPEATS
) -> dict[str, PolicyResult]:
    """Both policies on the same workload after `warm_up`, each replayed `repeats` times in the `interleaved` order;
    each policy's fastest replay is its result (the one other work on the machine disturbed least: a CPU-hungry
    neighbour during one replay made the ratio 0.64x one time and 1.70x another on this workload), with every
    replay's wall time in replay_walls."""
    warm_up(lm, workload, max_batch)
    runs: dict[str, list[PolicyResult]] = {p: [] for p in POLICIES}
    for policy in interleaved(max(1, repeats)):
        runs[policy].append(replay(lm, workload, policy, max_batch))
    return {
        policy: replace(min(done, key=lambda r: r.wall_s), replay_walls=tuple(r.wall_s for r in done))
        for policy, done in runs.items()
    }


def _check(workload: Sequence[WorkloadRequest], max_batch: int) -> None:
    if not workload:
        raise InvalidParameterError("the workload has no requests: generate one with n_requests >= 1")
    if not isinstance(max_batch, int) or max_batch < 1:
        raise InvalidParameterError(f"max batch must be a whole number >= 1, got {max_batch!r}")
