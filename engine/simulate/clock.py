"""The in-flight scheduler on a virtual clock: the server's policy (engine.batching.policy, the same functions
engine.batching.scheduler.Scheduler calls) deciding admission, batching and the KV budget, and a step-time model
(engine.simulate.steps) saying how long each forward takes.

One iteration is the scheduler's loop (Scheduler._loop): admit (policy.take, policy.plan_admission: a mixed step
carrying newcomers' prompts, or one batched left-padded prefill in policy.prefill_chunk_columns chunks), run one
prefill chunk if a prefill is under way, then one decode step for every running row unless the admission was a
mixed step. The slot cache's window (what policy.fits reads) is the longest row's cached tokens: each row's
tokens end at the same column (engine.batching.kv), and retirement trims the leading padding. A forward's tokens
exist when it ends. A request's cost outside the steps (`fixed_s`: HTTP, tokenizing, detokenizing, the chunk's way
back) is spent in two places, as this machine's server spends it (its per-request timings on the bench/simulate.py
workload): `handling_s` before the scheduler sees the request, one request at a time (the server tokenizes under one
lock: 1-4 ms at 1-8 users), so requests sent together reach the scheduler a few milliseconds apart and the first
starts its prefill alone; the rest after each step, beside the model (1-5 ms from a token made to its chunk written,
plus the client's side): every token reaches its client that long after the step that made it. Output is one
engine.loadgen.client.RequestRecord per request, as the load generator records a real server's, so
engine.loadgen.metrics.summarize derives the same figures.

Bookkeeping is per step, not per token: every running row gets a token at every decode (or mixed) step, so a row
keeps the index of the first step it took part in, and its tokens, cached length and remaining count follow from
the number of steps run since (a sweep of 500 requests runs ~10^5 steps; touching every row at every step was
most of the time).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.batching import policy
from engine.loadgen.client import RequestRecord
from engine.simulate.steps import StepModel, end


@dataclass(frozen=True)
class SimRequest:
    """One request of the workload: its prompt length, the tokens it asks for, and when it is sent (Poisson
    arrivals; with fixed users a user sends its next request when its last answer ends)."""

    index: int
    prompt_tokens: int
    max_tokens: int
    send_at_s: float = 0.0


@dataclass(frozen=True)
class StepLog:
    """One forward as the simulator ran it (tests, and the page's timeline)."""

    start: float
    seconds: float
    kind: str  # "decode" | "mixed" | "prefill"
    decode_rows: int
    prefill_tokens: int
    prompts: int = 0  # prompts in the forward (the newcomers of a mixed step, the rows of a prefill chunk)


class VirtualScheduler:
    """The scheduler's state and loop without a model: the queue, the running rows, the prefill under way, a clock.
    `steps` holds the end time of every decode or mixed step: the running rows' token times."""

    def __init__(
        self,
        limits: policy.Limits,
        model: StepModel,
        which: str = "central",
        model_mixes: Callable[[int], bool] = lambda _k: True,
        log: list[StepLog] | None = None,
    ) -> None:
        self.limits, self.model, self.which, self.model_mixes = limits, model, which, model_mixes
        self.now = 0.0
        self.steps: list[float] = []
        self.waiting: deque[Row] = deque()
        self.running: dict[int, Row] = {}
        self._retire_at: list[tuple[int, int, Row]] = []  # (step index of its last token, tie-break, row)
        self._seq = itertools.count()
        self._prompt_sum = 0  # over the running rows
        self._joined_sum = 0
        self.prefill: _Prefill | None = None
        self.log = log
        self.finished: list[Row] = []

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running or self.prefill)

    def cache_length(self) -> int:
        return max((r.cached for r in self.running.values()), default=0)

    def context(self) -> int:
        """Cached tokens of every running row together: sum of prompt + steps since joining."""
        return self._prompt_sum + len(self.running) * len(self.steps) - self._joined_sum

    def _forward(self, kind: str, rows: int, context: int, prefill: int, seqs: int = 0) -> None:
        t = end(self.model.duration(rows, context, prefill, seqs), self.which)
        if self.log is not None:
            self.log.append(StepLog(self.now, t, kind, rows, prefill, seqs))
        self.now += t

    def iterate(self) -> None:
        """One loop of engine.batching.scheduler.Scheduler: admit, a prefill chunk, a decode step."""
        stepped = self._admit()
        if self.prefill is not None:
            self._prefill_chunk()
        if self.running and not stepped:
            self._forward("decode", len(self.running), self.context(), 0)
            self._stepped()

    def _admit(self) -> bool:
        if self.prefill is not None or not self.waiting:
            return False
        running = list(self.running.values())
        taken = policy.take(self.waiting, running, self.cache_length(), self.limits, lambda r: r)
        if not taken:
            return False
        keep = policy.plan_admission(
            [r.prompt_len for r in taken], len(running), self.limits, self.model_mixes
        )
        if keep:
            self.waiting.extendleft(reversed(taken[keep:]))
            new = taken[:keep]
            for r in new:
                r.admitted = self.now
            self._forward("mixed", len(running), self.context(), sum(r.prompt_len for r in new), len(new))
            self._stepped()  # the running rows' tokens, then the newcomers' first ones, at the same moment
            for r in new:
                self._first_token(r)
            return True
        for r in taken:
            r.admitted = self.now
        chunk = policy.prefill_chunk_columns(len(taken), self.limits)
        self.prefill = _Prefill(taken, max(r.prompt_len for r in taken), chunk)
        return False

    def _prefill_chunk(self) -> None:
        job = self.prefill
        assert job is not None
        hi = min(job.columns, job.done + job.chunk)
        # left padding is computed too
        self._forward("prefill", 0, 0, len(job.rows) * (hi - job.done), len(job.rows))
        job.done = hi
        if job.done == job.columns:
            self.prefill = None
            for r in job.rows:
                self._first_token(r)

    def _first_token(self, r: Row) -> None:
        """The row's first token exists now; it decodes from the next step on, or retires."""
        r.first_token = self.now
        r.joined = len(self.steps)
        r.sched = self
        if r.req.max_tokens <= 1:
            self.finished.append(r)
            return
        self.running[id(r)] = r
        self._prompt_sum += r.prompt_len
        self._joined_sum += r.joined
        heapq.heappush(self._retire_at, (r.joined + r.req.max_tokens - 2, next(self._seq), r))

    def _stepped(self) -> None:
        """A decode (or mixed) step ended: every running row has one more token; retire those that are done."""
        k = len(self.steps)
        self.steps.append(self.now)
        while self._retire_at and self._retire_at[0][0] == k:
            r = heapq.heappop(self._retire_at)[2]
            del self.running[id(r)]
            self._prompt_sum -= r.prompt_len
            self._joined_sum -= r.joined
            r.last_step = k
            self.finished.append(r)


class Row:
    """A request inside the virtual scheduler (policy.Row: prompt_len, remaining)."""

    __slots__ = ("admitted", "arrived", "first_token", "joined", "last_step", "req", "sched", "sent")

    def __init__(self, req: SimRequest, sent: float, arrived: float) -> None:
        self.req, self.sent, self.arrived = req, sent, arrived
        self.admitted = self.first_token = float("nan")
        self.joined = self.last_step = -1
        self.sched: VirtualScheduler | None = None

    @property
    def generated(self) -> int:
        if self.sched is None:
            return 0
        if self.last_step >= 0:
            return self.req.max_tokens
        return 1 + len(self.sched.steps) - self.joined

    @property
    def prompt_len(self) -> int:
        return self.req.prompt_tokens

    @property
    def remaining(self) -> int:
        return self.req.max_tokens - self.generated

    @property
    def cached(self) -> int:
        """Tokens in its KV cache: the prompt and every generated token but the last (the next step's input)."""
        return self.prompt_len + self.generated - 1

    def token_times(self) -> list[float]:
        assert self.sched is not None
        if self.req.max_tokens <= 1:
            return [self.first_token]
        return [self.first_token, *self.sched.steps[self.joined : self.last_step + 1]]


@dataclass
class _Prefill:
    rows: list[Row]
    columns: int  # the longest prompt (left-padded)
    chunk: int
    done: int = 0


def _record(r: Row, back: float) -> RequestRecord:
    times = [t + back for t in r.token_times()]  # each token reaches its client `back` after its step
    return RequestRecord(
        index=r.req.index,
        start=r.sent,
        max_tokens=r.req.max_tokens,
        ok=True,
        ttft_s=times[0] - r.sent,
        e2e_s=times[-1] - r.sent,
        output_tokens=len(times),
        prompt_tokens=r.prompt_len,
        tokens_from_usage=True,
        chunk_times=times,
    )


def _refused(req: SimRequest, sent: float, why: str) -> RequestRecord:
    return RequestRecord(index=req.index, start=sent, max_tokens=req.max_tokens, error="http_4xx", detail=why)


def run(
    requests: Sequence[SimRequest],
    limits: policy.Limits,
    model: StepModel,
    *,
    concurrency: int | None = None,
    which: str = "central",
    model_mixes: Callable[[int], bool] = lambda _k: True,
    log: list[StepLog] | None = None,
    stagger_s: float = 0.0,
) -> list[RequestRecord]:
    """Run the workload: with `concurrency` users each sending its next request (in order) when its last answer
    ends (user k sends its first at k x `stagger_s`: 0, all at once, as the load generator starts them), else every
    request at its `send_at_s`. A request whose prompt + output alone exceed the KV budget is
    refused at once, as Scheduler.submit refuses it (the server answers 4xx). Returns records in request order."""
    fixed = end(model.fixed_s, which) if model.fixed_s.central > 0 else 0.0
    handling = min(model.handling_s, fixed)
    back = fixed - handling  # a token made -> seen by its client
    front_free = [0.0]  # when the front end can take the next request
    sched = VirtualScheduler(limits, model, which, model_mixes, log)
    seq = itertools.count()
    arrivals: list[tuple[float, int, SimRequest, float]] = []  # (arrives, tie-break, request, sent)
    records: list[RequestRecord] = []
    todo = deque(requests)

    def send(req: SimRequest, at: float) -> None:
        while True:
            if (req.prompt_tokens + req.max_tokens) * limits.kv_bytes_per_token <= limits.kv_budget_bytes:
                arrives = max(at, front_free[0]) + handling
                front_free[0] = arrives
                heapq.heappush(arrivals, (arrives, next(seq), req, at))
                return
            records.append(_refused(req, at, "needs more KV cache than the scheduler's budget"))
            if concurrency is None or not todo:
                return
            req = todo.popleft()  # a refused user sends its next request at once

    if concurrency is None:
        for req in todo:
            send(req, req.send_at_s)
        todo.clear()
    else:
        for k in range(min(concurrency, len(todo))):
            send(todo.popleft(), k * stagger_s)
    done = 0
    while arrivals or sched.busy:
        if not sched.busy:
            sched.now = max(sched.now, arrivals[0][0])
        while arrivals and arrivals[0][0] <= sched.now:
            at, _, req, sent = heapq.heappop(arrivals)
            sched.waiting.append(Row(req, sent, at))
        sched.iterate()
        for r in sched.finished[done:]:
            records.append(_record(r, back))
            if concurrency is not None and todo:  # its user sends the next one on seeing the last token
                send(todo.popleft(), r.token_times()[-1] + back)
        done = len(sched.finished)
    return sorted(records, key=lambda x: x.index)
