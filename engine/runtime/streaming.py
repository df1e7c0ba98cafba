"""A generation on a thread of its own, read while it runs: `stream(lm, prompt, cfg)` returns a `GenerationStream`
that yields text chunks as tokens are made (transformers' TextIteratorStreamer, fed by `generate` or the compiled
decode loop in a worker thread) and holds the measured Completion once it has ended.

The pieces other runs share: `Worker` (a generation on a daemon thread, watched through its `Progress`: tokens so
far, cancel at the next token; its error handed to the reader, engine.runtime.run's batch job uses it too) and
`TextSource` (the `poll(timeout)` protocol every run is read by, here, in engine.runtime.run and in the scheduler's
request handle, with the one way to iterate over it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from engine.runtime.generation import Completion, Progress, generate
from engine.runtime.models import LoadedModel
from engine.runtime.prompt import clean_prompt
from engine.runtime.settings import GenerationConfig


class TextSource:
    """Read by `poll(timeout)`: the next text chunk within `timeout` seconds, "" when none came in time, None once
    the run has ended (its error raised there). Iterating yields the chunks as they come, errors re-raised."""

    def poll(self, timeout: float) -> str | None:
        raise NotImplementedError

    def __iter__(self) -> Iterator[str]:
        while (chunk := self.poll(0.5)) is not None:
            if chunk:
                yield chunk


class Worker:
    """`fn(progress)` on a daemon thread of its own: `tokens` so far and `cancel()` (at the next token) through its
    `Progress`; what it returned is `result`, what it raised is `error` (for the reading thread to re-raise);
    `done` is set when it has ended either way."""

    def __init__(self, name: str, fn: Callable[[Progress], Any]) -> None:
        self.progress = Progress()
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()

        def work() -> None:
            try:
                self.result = fn(self.progress)
            except BaseException as exc:  # handed to the reading thread, which re-raises it
                self.error = exc
            finally:
                self.done.set()

        self.thread = threading.Thread(target=work, name=name, daemon=True)
        self.thread.start()

    @property
    def tokens(self) -> int:
        """Tokens generated so far."""
        return self.progress.tokens

    def cancel(self) -> None:
        self.progress.cancel.set()


class GenerationStream(Worker, TextSource):
    """Iterate for text chunks as tokens are made (or `poll`); `.completion` holds the measured result afterwards.

    Errors raised inside generation (bad parameters, out of memory) are re-raised by the iterator, so a
    page's `try` around its loop catches them like any other call. `cancel()` stops at the next token.
    """

    def __init__(self, lm: LoadedModel, prompt: str, cfg: GenerationConfig, *, record: bool = True) -> None:
        from transformers import TextIteratorStreamer

        self._request_t = time.perf_counter()
        cfg = cfg.validate()
        clean_prompt(prompt)  # fail fast, in the caller's thread, before a worker starts
        # A timeout so a generation that dies before its first token cannot hang the reader forever.
        self._streamer = TextIteratorStreamer(
            lm.tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=0.5
        )
        self._ended = False

        def work(progress: Progress) -> Completion:
            return generate(
                lm,
                prompt,
                cfg,
                streamer=self._streamer,
                progress=progress,
                record=record,
                request_t=self._request_t,
            )

        super().__init__("inference-lab-generate", work)

    @property
    def completion(self) -> Completion | None:
        """The measured result once the run has ended (None before, or when it failed)."""
        return self.result

    def poll(self, timeout: float) -> str | None:
        """The next text chunk, waiting at most `timeout` seconds: "" when none came in time, None once the run
        has ended (then `.completion` is set, or its error is raised here)."""
        import queue

        if not self._ended:
            try:
                chunk = self._streamer.text_queue.get(timeout=timeout)
            except queue.Empty:
                if not self.done.is_set():
                    return ""
                chunk = self._streamer.stop_signal  # the run ended without closing the stream (it failed)
            if chunk is not self._streamer.stop_signal:
                return chunk
            self._ended = True
        self.thread.join()
        if self.error is not None:
            raise self.error
        return None


def stream(
    lm: LoadedModel, prompt: str, cfg: GenerationConfig | None = None, *, record: bool = True
) -> GenerationStream:
    return GenerationStream(lm, prompt, cfg or GenerationConfig(), record=record)
