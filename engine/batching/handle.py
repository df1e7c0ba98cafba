"""What the in-flight scheduler (engine.batching.scheduler) hands out: a request's handle, read by polling or by a
listener on the scheduler's thread, and the read-only views of its rows for a page (`Scheduler.snapshot()`)."""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from engine.batching.sequence import Request, RequestTimes
from engine.runtime.generation import Completion
from engine.runtime.streaming import TextSource

_END = object()


class RequestHandle(TextSource):
    """What `submit` returns. Iterate for text chunks as tokens are made (errors re-raised there); `.completion`
    holds the measured result once done; `.cancel()` stops it at the next token boundary (the batch goes on)."""

    def __init__(self, req: Request) -> None:
        self._req = req
        self._chunks: queue.Queue = queue.Queue()
        self._listener: Callable[[tuple], None] | None = None
        self._listen_lock = threading.Lock()
        self._done = threading.Event()
        self._ended = False  # the reader has seen the end
        self.error: BaseException | None = None
        self.completion: Completion | None = None

    @property
    def id(self) -> int:
        return self._req.id

    @property
    def times(self) -> RequestTimes:
        return self._req.times

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def tokens(self) -> int:
        """Tokens generated so far (read from another thread: a list's length)."""
        return len(self._req.generated)

    def cancel(self) -> None:
        self._req.cancel_event.set()

    def poll(self, timeout: float) -> str | None:
        """The next text chunk, waiting at most `timeout` seconds: "" when none came in time, None once the request
        has ended (then `.completion` is set, or its error is raised here)."""
        if self._ended:
            item = _END
        else:
            try:
                item = self._chunks.get(timeout=timeout)
            except queue.Empty:
                return ""
        if item is not _END:
            return item
        self._ended = True
        if self.error is not None:
            raise self.error
        return None

    def result(self, timeout: float | None = None) -> Completion:
        """Wait for the completion; raise what the request failed with."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"request {self.id} did not finish within {timeout} s")
        if self.error is not None:
            raise self.error
        assert self.completion is not None
        return self.completion

    def listen(self, fn: Callable[[tuple], None]) -> None:
        """Have the scheduler thread call `fn(("chunk", text))` for each chunk, then `fn(("end", None))` or
        `fn(("error", exc))` once, instead of queueing chunks for `poll` (chunks already queued are handed over
        first). The server uses it to put chunks straight onto its event loop: no reader thread per request
        waking at every token to take the GIL from the model's thread. `fn` must not block."""
        with self._listen_lock:
            while True:
                try:
                    item = self._chunks.get_nowait()
                except queue.Empty:
                    break
                if item is _END:
                    self._chunks.put(_END)  # poll and report still see the end
                    fn(("end", None) if self.error is None else ("error", self.error))
                    return
                fn(("chunk", item))
            self._listener = fn

    # called by the scheduler thread
    def _emit(self, chunk: str) -> None:
        if not chunk:
            return
        with self._listen_lock:
            if self._listener is not None:
                self._listener(("chunk", chunk))
            else:
                self._chunks.put(chunk)

    def _finish(self, completion: Completion | None, error: BaseException | None) -> None:
        self.completion, self.error = completion, error
        with self._listen_lock:
            self._chunks.put(_END)
            self._done.set()
            if self._listener is not None:
                self._listener(("end", None) if error is None else ("error", error))


@dataclass(frozen=True)
class RowView:
    id: int
    state: str  # "queued" | "running"
    prompt_tokens: int
    generated: int
    max_new_tokens: int
    waited_s: float  # time in the queue (so far, or until admission)
    age_s: float  # since arrival
    preview: str

    @classmethod
    def of(cls, s: Request, state: str, now: float) -> RowView:
        t = s.times
        waited = (t.admitted if not math.isnan(t.admitted) else now) - t.arrival
        args = (s.prompt_len, len(s.generated), s.cfg.max_new_tokens, waited, now - t.arrival, tail(s.text))
        return cls(s.id, state, *args)


PREVIEW_CHARS = 60


def tail(text: str, n: int = PREVIEW_CHARS) -> str:
    """The latest words of a growing text in about `n` characters: whole words after an ellipsis when it is longer
    (the last 60 characters cut 'In-flight batching' to 'n-flight batching')."""
    if len(text) <= n:
        return text
    cut = text[-(n - 1) :]
    if text[-n].isspace():  # the cut falls between two words
        return "…" + cut.lstrip()
    space = cut.find(" ")
    return "…" + (cut[space + 1 :] if 0 <= space < len(cut) - 1 else cut)


@dataclass(frozen=True)
class SchedulerSnapshot:
    model: str
    alive: bool  # the model thread is running (it ends after idle_exit_s without work; submit restarts it)
    max_batch: int
    kv_budget_bytes: int
    kv_bytes_per_token: int
    kv_bytes_in_use: int  # the running rows' window of the slot cache, padding included, measured
    cache_length: int  # columns of that window
    running: tuple[RowView, ...]
    waiting: tuple[RowView, ...]
    steps: int
    tokens_generated: int
    finished: int
    recent_batch_sizes: tuple[tuple[float, int], ...]  # (seconds ago, rows) of the last decode steps
    kv_bytes_allocated: int = 0  # the slot cache's preallocated buffers (all slots, all columns)
    prefilling: int = 0  # rows whose (chunked) prefill is under way
