"""A long command's progress on stderr: what it is about to do, then one line per step with the seconds it took,
so a user waiting on a simulation sees it work. Always stderr, never stdout: under --json stdout carries the
result alone, and a script that pipes it still gets one JSON document.

The engine's long calls (engine.simulate.sweep.simulate, engine.simulate.solve.max_users / cheapest) take a
`progress(fraction, message)` callback, called as each step starts; the Serving and Memory pages draw a bar from
it, the command line prints these lines."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager


class StderrProgress:
    """The engine's progress callback, as lines: a step's line is printed when the next one starts (or at the
    end), with the seconds it took."""

    def __init__(self) -> None:
        self.started = self.step_started = time.perf_counter()
        self.step: str | None = None

    def __call__(self, fraction: float, message: str) -> None:
        self._close_step()
        self.step = None if message == "done" else message

    def _close_step(self) -> None:
        now = time.perf_counter()
        if self.step is not None:
            say(f"  {self.step}: done in {now - self.step_started:.1f} s")
        self.step, self.step_started = None, now

    def finish(self) -> None:
        self._close_step()
        say(f"finished in {time.perf_counter() - self.started:.1f} s")


def say(line: str) -> None:
    """One line on stderr, flushed (looked up at each call: the CLI may have pointed sys.stderr elsewhere)."""
    print(line, file=sys.stderr, flush=True)


@contextmanager
def progress_lines(what: str) -> Iterator[StderrProgress]:
    """Say `what` is starting, yield the callback, and say how long it took in all (not when it failed: the
    error says why)."""
    say(what)
    progress = StderrProgress()
    yield progress
    progress.finish()
