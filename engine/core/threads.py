"""Where model work runs on a CPU. torch's OpenMP (libgomp) gives every thread that runs a parallel op its own
team of worker threads, kept for that thread's life. While the teams' threads outnumber the cores, libgomp
stops spinning between parallel regions and puts its workers to sleep instead, so every op pays a wake-up:
on the 2-core machine this project is built on, model work ran about a third slower beside one idle team
(bench/threads.py measures it). So long-lived threads must not keep a team they no longer use: model work
that is not the scheduler's runs on a thread of its own that ends with it (`run_in_thread`), and the
scheduler's thread ends when idle (engine.batching.scheduler.DEFAULT_IDLE_EXIT_S)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def run_in_thread(fn: Callable[[], T], name: str = "inference-lab-work") -> T:
    """fn() on a new thread, waited for; its result returned, its exception raised here. The thread, and the
    OpenMP team it may have made, end before this returns."""
    box: list = []

    def work() -> None:
        try:
            box.append((True, fn()))
        except BaseException as exc:  # re-raised in the caller's thread
            box.append((False, exc))

    t = threading.Thread(target=work, name=name, daemon=True)
    t.start()
    t.join()
    ok, value = box[0]
    if not ok:
        raise value
    return value
