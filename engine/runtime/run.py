"""One call per run: every front end (the Playground, the Few-shot/code lab, the race's vanilla lane, the server,
`python -m engine generate`) hands the engine a model, its prompt(s), a GenerationConfig and, where it has one, the
shared scheduler, and gets back one thing to read.

    run = start(lm, prompt, cfg, scheduler=shared, source="playground")
    for event in run.events():       # text so far, tokens so far, seconds since the request, a compile under way
        draw(event)
    report = run.report()            # completion(s), per-token latencies, load, busy, stop reason; logged once

The route is chosen here, once (`choose_route`): several prompts run as one padded batch (`generate_batch`:
static batching); a single prompt with the KV cache on goes through the shared in-flight scheduler when one is given
(sessions generating at the same time share decode steps: one weight read serves every running request); else it
is streamed by `generate` on a thread of its own (`streaming.GenerationStream`). `run(...)` is the blocking form;
without a scheduler it calls `generate` in the caller's thread (no streamer, no extra thread: the race times
exactly that).

`cancel()` stops at the next token: the text so far is kept and the completion says `cancelled`. The run is logged
to this machine's run log once, with its source and how it ended (engine.runtime.runlog), unless `record=False`.
Imports nothing above engine.runtime: the scheduler is passed in, whatever its class (engine.batching.scheduler).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from engine.core.errors import CancelledError, InvalidParameterError
from engine.core.load import busy_during, cores, cpu_seconds, loadavg_1m, others_during
from engine.runtime import generation, runlog, streaming
from engine.runtime.generation import BatchResult, Completion, Progress, RowsDecode
from engine.runtime.measurement import Measurement
from engine.runtime.metrics import token_latencies
from engine.runtime.models import LoadedModel
from engine.runtime.settings import GenerationConfig

ROUTES = ("scheduler", "stream", "batch", "direct")
EVENT_EVERY_S = (
    0.25  # an event at least this often while nothing is made (the prefill, a compile, a busy batch)
)


def choose_route(prompts: Sequence[str], cfg: GenerationConfig, scheduler: Any = None) -> str:
    """Which path runs these prompts (see the module docstring). The scheduler always keeps a KV cache, so a run
    with the cache off runs alone."""
    if len(prompts) > 1:
        return "batch"
    return "scheduler" if scheduler is not None and cfg.use_cache else "stream"


@dataclass(frozen=True)
class RunEvent:
    """What a run has made so far: `text` is new since the previous event ("" when the event only marks time)."""

    text: str
    tokens: int  # generated so far (the engine's count; a batch counts its steps)
    elapsed_s: float  # since the request
    compiling: dict | None = (
        None  # the compiled step's status while it compiles (the first compiled run), else None
    )


@dataclass(frozen=True)
class RunReport(RowsDecode):
    """One finished run: what a page shows and what the run log keeps (`decode`, `decode_note`, `compile_s`: its
    rows', engine.runtime.generation.RowsDecode)."""

    completions: tuple[Completion, ...]
    measurement: Measurement  # the run as a whole (a batch's own measurement for several prompts)
    route: str  # one of ROUTES
    source: str | None  # who ran it (playground, lab, race, server, cli); the run log keeps it
    load: float  # 1-minute load average when it finished (NaN where the platform has none)
    cores: int
    ended_at_once: bool  # an empty completion: the model's first token was its end of sequence (see note)
    wall_s: float | None = None  # with a compile: the real request-to-last-token seconds (compile included)
    load_before: float = math.nan  # 1-minute load average when it started
    own_threads: int = 0  # the run's own compute threads, counted in `load` at its end
    # cores' worth of CPU other processes took while it ran (engine.core.load.others_during; NaN: not measured)
    others: float = math.nan

    @property
    def completion(self) -> Completion:
        return self.completions[0]

    @property
    def stop_reason(self) -> str:
        """How it ended: one row's reason, or "mixed" for a batch whose rows ended differently."""
        reasons = {c.stop_reason for c in self.completions}
        return reasons.pop() if len(reasons) == 1 else "mixed"

    @property
    def busy(self) -> bool:
        """Other work shared the CPU (engine.core.load.busy_during, the one verdict): by what other processes took
        while it ran where measured; else busy when it started, or at its end once its own threads are taken out of
        the load (a minute-long run on every core lifts the average by itself; the presenter's cache-off run read
        'busy' with nothing else running)."""
        return busy_during(self.others, self.load_before, self.other_load, self.cores)

    @property
    def other_load(self) -> float:
        """The load average at its end without the run's own threads (NaN where the platform has none)."""
        return self.load - self.own_threads if math.isfinite(self.load) else math.nan

    @property
    def shared(self) -> bool:
        """Other work shared the CPU with it: the same verdict as `busy` (one judgement per run, so a page's tile,
        its forecast line and its explanation agree)."""
        return self.busy

    @property
    def latencies(self) -> list[float]:
        """Seconds per generated token of the first row: the TTFT, then each decode step's gap (the chart)."""
        c = self.completion
        return token_latencies(c.measurement.ttft_s, c.token_times)


def _own_threads() -> int:
    """The compute threads a run here uses (torch's intra-op pool)."""
    import torch

    return int(torch.get_num_threads())


def ended_at_once(lm: LoadedModel, completions: Sequence[Completion]) -> bool:
    """Every row stopped on the model's end-of-sequence token before writing any text: an instruct model given a
    bare prompt often does this at its first token (what it learned to expect is a chat turn)."""
    return bool(completions) and all(c.stop_reason == "eos" and not c.text.strip() for c in completions)


def ended_at_once_note(report: RunReport, lm: LoadedModel, cfg: GenerationConfig, switch: str) -> str:
    """The sentence for an empty completion, built from the run: how many tokens it made and whether a chat
    template would change it; `switch` names the front end's control ("--chat", "the chat-template switch")."""
    if not report.ended_at_once:
        return ""
    n = report.completion.measurement.output_tokens
    said = (
        f"The model ended at once: its {'first token was' if n == 1 else f'{n} tokens ended with'} its "
        "end-of-sequence token, so the completion is empty."
    )
    if lm.has_chat_template and not cfg.chat_template:
        return (
            f"{said} {lm.name} has a chat template (an instruct model expects a chat turn): turn on {switch} to "
            "send the prompt as a user message."
        )
    return f"{said} Try a longer prompt, or one the model continues (a sentence it can finish)."


class Run:
    """A run under way: `events()` until it ends, `cancel()` at any time, `report()` once it has ended."""

    def __init__(
        self,
        lm: LoadedModel,
        prompts: Sequence[str],
        cfg: GenerationConfig,
        *,
        scheduler: Any = None,
        source: str | None = None,
        record: bool = True,
        prompt_ids: Sequence[int] | None = None,
        ignore_eos: bool = False,
    ) -> None:
        if isinstance(prompts, str):
            prompts = [prompts]
        prompts = list(prompts)
        if not prompts:
            raise InvalidParameterError("no prompts given: enter at least one prompt")
        self.lm, self.cfg, self.source = lm, cfg.validate(), source
        self.route = choose_route(prompts, self.cfg, scheduler)
        self.request_t = time.perf_counter()
        self._load_before, self._cpu_before = loadavg_1m(), cpu_seconds()
        # the scheduler logs its own requests only when it was made to (the shared one is not): never twice
        self._record = record and not (self.route == "scheduler" and getattr(scheduler, "record", False))
        self._report: RunReport | None = None
        if self.route == "scheduler":
            self._job: Any = scheduler.submit(
                prompts[0], self.cfg, ignore_eos=ignore_eos, prompt_ids=prompt_ids, arrival=self.request_t
            )
        elif self.route == "stream":
            self._job = streaming.stream(lm, prompts[0], self.cfg, record=False)
        else:
            self._job = _BatchJob(lm, prompts, self.cfg)

    # ------------------------------------------------------------------ while it runs
    @property
    def tokens(self) -> int:
        """Tokens generated so far (a batch: its decode steps so far)."""
        return self._job.tokens

    @property
    def times(self):
        """The scheduler's timestamps of this request (queue, admission, first token), or None off the scheduler."""
        return getattr(self._job, "times", None)

    @property
    def id(self) -> int | None:
        return getattr(self._job, "id", None)

    def poll(self, timeout: float) -> str | None:
        """The next text chunk within `timeout` seconds ("" if none came), None once the run has ended; raises what
        the run failed with."""
        return self._job.poll(timeout)

    def events(self, every_s: float = EVENT_EVERY_S) -> Iterator[RunEvent]:
        """Events until the run ends: one per text chunk, and one at least every `every_s` seconds in between."""
        while (chunk := self.poll(every_s)) is not None:
            yield RunEvent(chunk, self.tokens, time.perf_counter() - self.request_t, self._compiling())

    def _compiling(self) -> dict | None:
        if not self.cfg.compile:
            return None
        status = generation.compile_status(self.lm)
        return status if status and status.get("state") == "compiling" else None

    def listen(self, fn) -> bool:
        """On the scheduler route, have its thread hand each chunk and the end to `fn` (see
        engine.batching.handle.RequestHandle.listen) and return True; False on the other routes (read them with
        `poll`)."""
        if self.route != "scheduler":
            return False
        self._job.listen(fn)
        return True

    def cancel(self) -> None:
        self._job.cancel()

    # ------------------------------------------------------------------ once it has ended
    def report(self) -> RunReport:
        """The finished run (waits for it); logged once, with its source."""
        if self._report is not None:
            return self._report
        while self.poll(EVENT_EVERY_S) is not None:
            pass
        completions, measurement, wall = self._job_result()
        self._report = RunReport(
            completions=completions,
            measurement=measurement,
            route=self.route,
            source=self.source,
            load=loadavg_1m(),
            cores=cores(),
            ended_at_once=ended_at_once(self.lm, completions),
            wall_s=wall,
            load_before=self._load_before,
            own_threads=_own_threads(),
            others=others_during(self._cpu_before, time.perf_counter() - self.request_t),
        )
        if self._record:
            runlog.record(_with_load(self._report), source=self.source, stop_reason=self._report.stop_reason)
        return self._report

    def _job_result(self) -> tuple[tuple[Completion, ...], Measurement, float | None]:
        if isinstance(self._job, _BatchJob):
            batch = self._job.result
            assert batch is not None
            return batch.completions, batch.measurement, batch.wall_s
        c = self._job.completion
        if c is None:
            raise CancelledError("the generation was cancelled before it finished; generate again")
        return (c,), c.measurement, c.wall_s


class _BatchJob(streaming.Worker):
    """`generate_batch` on a thread of its own, so the caller can draw while the batch (or its compile) runs."""

    def __init__(self, lm: LoadedModel, prompts: list[str], cfg: GenerationConfig) -> None:
        def work(progress: Progress) -> BatchResult:
            return generation.generate_batch(lm, prompts, cfg, record=False, progress=progress)

        super().__init__("inference-lab-batch", work)

    def poll(self, timeout: float) -> str | None:
        self.thread.join(timeout)
        if self.thread.is_alive():
            return ""
        if self.error is not None:
            raise self.error
        return None


def start(lm: LoadedModel, prompts: str | Sequence[str], cfg: GenerationConfig | None = None, **kw) -> Run:
    """Start a run (see `Run` for the keywords: scheduler, source, record, prompt_ids, ignore_eos) and return at once;
    read it with `events()`, end it with `report()`."""
    return Run(lm, [prompts] if isinstance(prompts, str) else prompts, cfg or GenerationConfig(), **kw)


def run(
    lm: LoadedModel,
    prompts: str | Sequence[str],
    cfg: GenerationConfig | None = None,
    *,
    scheduler: Any = None,
    source: str | None = None,
    record: bool = True,
) -> RunReport:
    """A whole run, blocking. One prompt without a scheduler runs `generate` in this thread (what the race times:
    no streamer, no thread); otherwise as `start(...).report()`."""
    cfg = (cfg or GenerationConfig()).validate()
    single = [prompts] if isinstance(prompts, str) else list(prompts)
    if choose_route(single, cfg, scheduler) != "stream":
        return start(lm, single, cfg, scheduler=scheduler, source=source, record=record).report()
    t0, cpu_before = time.perf_counter(), cpu_seconds()
    c = generation.generate(lm, single[0], cfg, record=False)
    load, n = loadavg_1m(), cores()
    report = RunReport((c,), c.measurement, "direct", source, load, n, ended_at_once(lm, [c]), c.wall_s,
                       others=others_during(cpu_before, time.perf_counter() - t0))  # fmt: skip
    if record:
        runlog.record(_with_load(report), source=source, stop_reason=c.stop_reason)
    return report


def _with_load(report: RunReport) -> Measurement:
    """The run's measurement with the load it ended under, so that a comparison read from the log later (the Memory
    page's estimate beside measurement) can leave a busy run out."""
    return replace(report.measurement, loadavg_1m=report.load, busy=report.busy)
