"""In-flight (continuous) batching: one background thread per model admits and retires requests at every
decode step (Orca's iteration-level scheduling; TensorRT-LLM's "in-flight batching").

Each loop of the thread: (1) when no prefill is under way, take every waiting request that has a free slot
(`max_batch`) and fits the KV budget, first come first served. With rows running and prompts of at most
`prefill_chunk_tokens` together, the newcomers' prompts ride in the running rows' decode step: one forward
(engine.batching.kv.mixed_step, vLLM's mixed prefill-decode batch), so a running stream's gap at an
admission is one slightly longer step, not a prefill plus a step (bench/serving_itl.py measured the two
forwards as the tail of inter-token latency). Otherwise (nothing running, longer prompts, compiled steps, a
model the mixed mask does not cover) they go into one batched, left-padded prefill; (2) run the next chunk of
that prefill (at most `prefill_chunk_tokens` tokens, so the running rows wait for one chunk, not a whole prompt:
Sarathi-Serve's chunked prefill); when its last chunk is done, the first tokens are chosen and the rows join the
slot table (engine.runtime.kvcache.SlotCache: no copy of the running rows' cache); (3) one decode step for every
running row (unless (1) was a mixed step); (4) retire finished rows at once (EOS, stop string,
max_new_tokens, cancel) by moving the last row into the hole.
`breakdown()` reports where the thread's time went: prefill, decode forward, sampling, cache surgery and the
rest (Python bookkeeping, detokenizing, streaming, locks).

Locking: the thread takes `lm.lock` around each forward pass only (one prefill chunk or one decode step), then
yields, so another page's `generate()` on the same model can run between two steps (it holds the lock for its
whole run, and the batch waits for it). The model is never run by two threads at once.

transformers' own continuous batching (`model.generate_batch` / `ContinuousBatchingManager`, 4.53+) was
checked on this stack (re-measured by bench/batching.py --hf-check): it fails for GPT-Neo and, for the
Llama-family bundled model on this CPU, is several times slower than a padded batch. So this engine runs its
own scheduler for every model.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import threading
import time
from collections import deque
from collections.abc import Sequence

import torch

from engine.batching import kv, policy
from engine.batching.handle import RequestHandle, RowView, SchedulerSnapshot
from engine.batching.sequence import Request, choose_tokens
from engine.core.errors import (
    CancelledError,
    CompileUnavailableError,
    EngineError,
    InvalidParameterError,
    OutOfMemoryError,
)
from engine.runtime import compiled, hardware, kvcache, runlog
from engine.runtime.generation import Completion
from engine.runtime.metrics import memory_now
from engine.runtime.models import LoadedModel
from engine.runtime.prompt import clean_prompt, encode_prompt
from engine.runtime.settings import GenerationConfig

DEFAULT_MAX_BATCH = 8
MAX_BATCH_LIMIT = 256
DEFAULT_PREFILL_CHUNK_TOKENS = 256  # tokens per prefill chunk (all admitted rows together)
DEFAULT_MIXED_PROMPT_TOKENS = 16  # newcomers' prompt tokens one decode step carries (one prompt at least)
DEFAULT_KV_FRACTION = 0.25  # of the memory free when the scheduler starts (RAM on a CPU, VRAM on a GPU)
# An idle model thread ends after this long and `submit` starts a new one. On a CPU torch's OpenMP keeps a team
# of worker threads per thread that has run an op, for that thread's life; while two teams exist on a machine
# with as many cores as one team has threads, libgomp stops spinning between parallel regions and sleeps instead,
# and every other thread's model work ran about a third slower (bench/threads.py measures it).
DEFAULT_IDLE_EXIT_S = 1.0
BREAKDOWN = ("prefill", "decode_forward", "sampling", "cache_surgery")


class Scheduler:
    """In-flight batching over one LoadedModel, shared by every caller (thread-safe `submit`/`snapshot`)."""

    def __init__(
        self,
        lm: LoadedModel,
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
        kv_budget_bytes: int | None = None,
        record: bool = True,
        prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
        mixed_prompt_tokens: int = DEFAULT_MIXED_PROMPT_TOKENS,
        compile_decode: bool = False,
        idle_exit_s: float = DEFAULT_IDLE_EXIT_S,
    ) -> None:
        _check(
            isinstance(max_batch, int) and 1 <= max_batch <= MAX_BATCH_LIMIT,
            f"max batch must be a whole number from 1 to {MAX_BATCH_LIMIT}, got {max_batch!r}",
        )
        self.lm = lm
        self.max_batch = max_batch
        self.record = record
        self.kv_bytes_per_token = kvcache.kv_bytes_per_token(lm)
        if kv_budget_bytes is None:
            kv_budget_bytes = int(hardware.free_memory_bytes(lm.device) * DEFAULT_KV_FRACTION)
        _check(
            kv_budget_bytes >= self.kv_bytes_per_token,
            f"the KV budget of {kv_budget_bytes} bytes holds less than one token; raise it",
        )
        self.kv_budget_bytes = int(kv_budget_bytes)
        for name, value in (
            ("prefill chunk", prefill_chunk_tokens),
            ("mixed prompt tokens", mixed_prompt_tokens),
        ):
            _check(
                isinstance(value, int) and value >= 1, f"{name} must be a whole number >= 1, got {value!r}"
            )
        self.prefill_chunk_tokens = prefill_chunk_tokens
        self.mixed_prompt_tokens = mixed_prompt_tokens
        _check(
            math.isfinite(idle_exit_s) and idle_exit_s >= 0,
            f"idle_exit_s must be a finite number of seconds >= 0, got {idle_exit_s!r}",
        )
        self.idle_exit_s = float(idle_exit_s)
        # Every decode step through the compiled step (the server's --compile-decode); otherwise a step is compiled
        # when a request in it asked for it (GenerationConfig.compile). Same tokens either way; the first compiled
        # step per shape class compiles (engine.runtime.compiled.CompiledDecode).
        self.compile_decode = bool(compile_decode)
        self._decoder: compiled.CompiledDecode | None = None
        self.compile_note = ""  # why compiled steps were asked for but decoded eagerly
        self._pad_id = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._waiting: deque[tuple[Request, RequestHandle]] = deque()
        self._running: list[tuple[Request, RequestHandle]] = []  # row i of the slot cache is _running[i]
        self._cache = kvcache.SlotCache(max_batch)
        self._prefill: kvcache.Prefill | None = None
        self._prefilling: list[tuple[Request, RequestHandle]] = []
        self._spent = dict.fromkeys(BREAKDOWN, 0.0)
        self._loop_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._steps = 0
        self.mixed_steps = 0  # decode steps that also carried newcomers' prompts (_mixed_step)
        self._tokens = 0
        self._finished = 0
        self._step_log: deque[tuple[float, int]] = deque(maxlen=300)

    # ------------------------------------------------------------------ public API
    def submit(
        self,
        prompt: str,
        cfg: GenerationConfig | None = None,
        *,
        ignore_eos: bool = False,
        prompt_ids: Sequence[int] | None = None,
        arrival: float | None = None,
    ) -> RequestHandle:
        """Queue a request; return its handle at once. Validates here, in the caller's thread."""
        if self._stop.is_set():
            raise InvalidParameterError("this scheduler was closed; get a new one (the page reloads it)")
        cfg = (cfg or GenerationConfig()).validate()
        prompt = clean_prompt(prompt)
        if prompt_ids is None:
            rendered, ids = encode_prompt(self.lm, prompt, cfg)
        else:
            rendered, ids = prompt, list(prompt_ids)
            if not ids:
                raise InvalidParameterError("a request needs at least one prompt token")
        need = (len(ids) + cfg.max_new_tokens) * self.kv_bytes_per_token
        if need > self.kv_budget_bytes:
            raise OutOfMemoryError(
                f"this request needs {need / 2**20:.1f} MiB of KV cache, more than the scheduler's budget of "
                f"{self.kv_budget_bytes / 2**20:.1f} MiB: shorten the prompt or lower max new tokens"
            )
        req = Request(
            next(self._ids), self.lm, prompt, rendered, ids, cfg, ignore_eos=ignore_eos, arrival=arrival
        )
        handle = RequestHandle(req)
        with self._cond:
            self._waiting.append((req, handle))
            self._ensure_thread()
            self._cond.notify()
        return handle

    def snapshot(self) -> SchedulerSnapshot:
        now = time.perf_counter()
        with self._cond:
            running = [RowView.of(s, "running", now) for s, _ in self._running + self._prefilling]
            waiting = [RowView.of(s, "queued", now) for s, _ in self._waiting]
            log = tuple((now - t, n) for t, n in self._step_log)
            return SchedulerSnapshot(
                model=self.lm.name,
                alive=self._thread is not None and self._thread.is_alive(),
                max_batch=self.max_batch,
                kv_budget_bytes=self.kv_budget_bytes,
                kv_bytes_per_token=self.kv_bytes_per_token,
                kv_bytes_in_use=self._cache.window_bytes(),
                cache_length=self._cache.length,
                running=tuple(running),
                waiting=tuple(waiting),
                steps=self._steps,
                tokens_generated=self._tokens,
                finished=self._finished,
                recent_batch_sizes=log,
                kv_bytes_allocated=self._cache.nbytes(),
                prefilling=len(self._prefilling),
            )

    def breakdown(self) -> dict[str, float]:
        """Seconds the scheduler thread spent per part of a step since it started (see BREAKDOWN), plus
        "other": the rest of its busy time (Python bookkeeping, detokenizing, streaming, waiting for the lock)."""
        with self._cond:
            out = dict(self._spent)
            out["other"] = max(0.0, self._loop_s - sum(out.values()))
            out["total"] = self._loop_s
        return out

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread; requests still queued or running end with CancelledError."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._cond:
            leftovers = list(self._waiting) + list(self._running) + list(self._prefilling)
            self._waiting.clear()
            self._running.clear()
            self._prefilling.clear()
            self._prefill = None
            self._cache = kvcache.SlotCache(self.max_batch)
        for _, h in leftovers:
            if not h.done:
                h._finish(None, CancelledError("the scheduler was shut down; submit the request again"))

    # ------------------------------------------------------------------ the thread
    def _ensure_thread(self) -> None:
        """Called with self._cond held. The loop clears self._thread under the same lock when it decides to end,
        so a request queued here is never left without a thread."""
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name=f"inflight-{self.lm.name}", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                idle_since = time.monotonic()
                while not (self._waiting or self._running or self._prefilling or self._stop.is_set()):
                    left = self.idle_exit_s - (time.monotonic() - idle_since)
                    if left <= 0:  # end the thread, and its OpenMP team with it (see DEFAULT_IDLE_EXIT_S)
                        if self._thread is threading.current_thread():
                            self._thread = None
                        return
                    self._cond.wait(min(0.5, left))
            if self._stop.is_set():
                return
            t0 = time.perf_counter()
            try:
                with torch.inference_mode():
                    stepped = self._admit()
                    if self._prefill is not None:
                        self._prefill_chunk()
                    if self._running and not stepped:
                        self._step()
            except Exception as exc:  # a failed step fails the running batch; the thread lives on
                self._fail_running(exc)
            with self._cond:
                self._loop_s += time.perf_counter() - t0
            time.sleep(0)  # let a thread waiting for lm.lock (another page's generate) take it

    def _timed(self, part: str, t0: float) -> float:
        """Add the time since t0 to `part`; return now."""
        hardware.sync(self.lm.device)
        now = time.perf_counter()
        self._spent[part] += now - t0
        return now

    @property
    def limits(self) -> policy.Limits:
        """The knobs the policy (engine.batching.policy) reads: the simulator builds the same Limits."""
        return policy.Limits(
            self.max_batch,
            self.kv_budget_bytes,
            self.kv_bytes_per_token,
            self.prefill_chunk_tokens,
            self.mixed_prompt_tokens,
        )

    def _admit(self) -> bool:
        """Admit every waiting request that has a slot and fits (first come, first served: policy.take): with rows
        running and short enough prompts, in this iteration's decode step (`_mixed_step`; returns True: the step
        is done); otherwise as one batched prefill, run in chunks by `_prefill_chunk` (policy.plan_admission)."""
        if self._prefill is not None:
            return False
        taken = self._take()
        if not taken:
            return False
        keep = policy.plan_admission(
            [r.prompt_len for r, _ in taken],
            len(self._running),
            self.limits,
            lambda k: self._can_mix(taken[:k]),
        )
        if keep:
            with self._cond:  # the rest wait at the head of the queue for the next steps, in order
                self._waiting.extendleft(reversed(taken[keep:]))
                self._prefilling = taken = taken[:keep]
            for req, _ in taken:
                req.mark_admitted()
            self._mixed_step(taken)
            return True
        for req, _ in taken:
            req.mark_admitted()
        chunk = policy.prefill_chunk_columns(len(taken), self.limits)
        self._prefill = kvcache.Prefill(self.lm, [r.prompt_ids for r, _ in taken], self._pad_id, chunk)
        return False

    def _can_mix(self, taken: Sequence[tuple[Request, RequestHandle]]) -> bool:
        """What the policy cannot know about a mixed step: no row runs compiled (static shapes), and the model's
        attention takes the step's mask (kv.mixed_reason)."""
        if self.compile_decode or any(r.cfg.compile for r, _ in [*self._running, *taken]):
            return False
        return not kv.mixed_reason(self.lm, self._cache, [r.prompt_len for r, _ in taken])

    def _take(self) -> list[tuple[Request, RequestHandle]]:
        """Move the waiting requests that have a slot and fit into `_prefilling` (policy.take)."""

        def cancelled(item: tuple[Request, RequestHandle]) -> bool:
            req, handle = item
            if req.cancel_event.is_set():
                handle._finish(None, CancelledError("the request was cancelled while queued"))
                return True
            return False

        with self._cond:
            running = [s for s, _ in self._running]
            taken = policy.take(
                self._waiting, running, self._cache.length, self.limits, lambda t: t[0], cancelled
            )
            self._prefilling = taken
        return taken

    def _prefill_chunk(self) -> None:
        job, rows = self._prefill, self._prefilling
        assert job is not None
        t0 = time.perf_counter()
        try:
            with self.lm.lock:
                logits = job.step()  # [k, V] after the last chunk
                t1 = self._timed("prefill", t0)
                if logits is None:
                    return
                chosen = choose_tokens(logits, [r for r, _ in rows])
                self._timed("sampling", t1)
        except Exception as exc:
            err = _engine_error(exc, self.lm)
            with self._cond:
                self._prefill, self._prefilling = None, []
            for _, h in rows:
                h._finish(None, err)
            return
        now = time.perf_counter()
        size = len(self._running) + len(rows)
        keep: list[int] = []
        with self._cond:
            for j, ((req, handle), token) in enumerate(zip(rows, chosen, strict=True)):
                req.append(token, now, size)
                handle._emit(req.take_chunk())
                self._tokens += 1
                if req.done:
                    self._retire(req, handle)
                else:
                    keep.append(j)
            t2 = time.perf_counter()
            longest_left = max(
                [rows[j][0].remaining for j in keep] + [s.remaining for s, _ in self._running], default=0
            )
            self._cache.insert(job, keep, longest_left)
            self._running.extend(rows[j] for j in keep)
            self._prefill, self._prefilling = None, []
            self._timed("cache_surgery", t2)

    def _step(self) -> None:
        seqs = [s for s, _ in self._running]
        tokens = torch.tensor([s.generated[-1] for s in seqs], dtype=torch.long)  # [B]
        positions = torch.tensor([s.position for s in seqs], dtype=torch.long)  # [B]
        step = self._compiled_step(seqs)
        compiled_before = dict(step.status.compile_s) if step is not None else {}
        t0 = time.perf_counter()
        with self.lm.lock:
            logits = self._cache.decode(self.lm, tokens, positions, step)  # [B, V]
            t1 = self._timed("decode_forward", t0)
            chosen = choose_tokens(logits, seqs)
            self._timed("sampling", t1)
        now = time.perf_counter()
        paid = (
            step is not None
            and sum(v for k, v in step.status.compile_s.items() if k not in compiled_before) > 0
        )
        for seq in seqs if paid else ():  # every row of the step waited for the compile: its next token's gap
            seq.compile_steps.append(len(seq.generated))
        memory = memory_now(self.lm.device)
        with self._cond:
            self._deliver(chosen, now, memory)

    def _mixed_step(self, taken: list[tuple[Request, RequestHandle]]) -> None:
        """One forward for the running rows' next tokens and the newcomers' prompts (kv.mixed_step): the
        newcomers' first tokens come out of the same step, and they join the slot table at once. Its time counts
        as decode_forward. A failure fails the running rows and the newcomers together (`_fail_running`)."""
        seqs = [s for s, _ in self._running]
        new = [r for r, _ in taken]
        tokens = torch.tensor([s.generated[-1] for s in seqs], dtype=torch.long)  # [B]
        positions = torch.tensor([s.position for s in seqs], dtype=torch.long)  # [B]
        longest_left = max(s.remaining for s in seqs + new)
        t0 = time.perf_counter()
        with self.lm.lock:
            prompts = [r.prompt_ids for r in new]
            logits = kv.mixed_step(
                self._cache, self.lm, tokens, positions, prompts, longest_left
            )  # [B + k, V]
            t1 = self._timed("decode_forward", t0)
            chosen = choose_tokens(logits, seqs + new)
            self._timed("sampling", t1)
        now = time.perf_counter()
        memory = memory_now(self.lm.device)
        with self._cond:
            self.mixed_steps += 1
            self._running = self._running + taken  # rows n..n+k-1 of the slot cache, as mixed() placed them
            self._prefilling = []
            self._deliver(chosen, now, memory)

    def _deliver(self, chosen: Sequence[int], now: float, memory: int) -> None:
        """Called with self._cond held: one new token for every running row (row i of the cache is _running[i]);
        stream it, retire the rows that are done."""
        size = len(self._running)
        self._steps += 1
        self._tokens += size
        self._step_log.append((now, size))
        gone: list[int] = []
        for i, ((req, handle), token) in enumerate(zip(self._running, chosen, strict=True)):
            req.see_memory(memory)
            req.append(token, now, size)
            handle._emit(req.take_chunk())
            if req.done:
                self._retire(req, handle)
                gone.append(i)
        if gone:
            t2 = time.perf_counter()
            order = self._cache.retire(gone)
            self._running = [self._running[i] for i in order]
            self._timed("cache_surgery", t2)

    def _compiled_step(self, seqs: Sequence[Request]) -> compiled.CompiledDecode | None:
        """The compiled step when this decode step should run it (see compile_decode), else None."""
        if not (self.compile_decode or any(s.cfg.compile for s in seqs)):
            return None
        if self._decoder is None and not self.compile_note:
            try:
                self._decoder = compiled.compiled_decode(self.lm)
            except CompileUnavailableError as exc:  # decode eagerly; each completion says why
                self.compile_note = f"compiled decode unavailable: {exc}; decoded eagerly"
        return self._decoder

    def _decode_path(self, req: Request, completion: Completion) -> Completion:
        """The completion with how its decode steps ran (compiled or eager, and why) and the compile it waited for."""
        if not (self.compile_decode or req.cfg.compile):
            return completion
        failed = self._decoder is not None and self._decoder.status.state == "failed"
        note = self.compile_note or (self._decoder.status.reason if failed and self._decoder else "")
        return dataclasses.replace(completion, decode="eager" if note else "compiled", decode_note=note)

    def _retire(self, req: Request, handle: RequestHandle) -> None:
        self._finished += 1
        handle._emit(req.take_chunk())
        if req.stop_reason == "cancelled" and not req.generated:
            handle._finish(None, CancelledError("the request was cancelled before its first token"))
            return
        completion = self._decode_path(req, req.completion())
        if self.record:
            runlog.record(completion.measurement)
        handle._finish(completion, None)

    def _fail_running(self, exc: Exception) -> None:
        err = _engine_error(exc, self.lm)
        with self._cond:
            failed = self._running + self._prefilling
            self._running, self._prefilling, self._prefill = [], [], None
            self._cache = kvcache.SlotCache(self.max_batch)
        for _, h in failed:
            h._finish(None, err)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise InvalidParameterError(message)


def _engine_error(exc: BaseException, lm: LoadedModel) -> BaseException:
    if isinstance(exc, EngineError):
        return exc
    if isinstance(exc, MemoryError | torch.OutOfMemoryError) or "out of memory" in str(exc).lower():
        return OutOfMemoryError(
            f"out of memory in the shared batch of {lm.name}: lower the max batch or the KV budget, or max new tokens"
        )
    return exc
