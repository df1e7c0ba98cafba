"""Demo pace: a clock on every long run, runs that survive a page reload, and a presenter mode.

- `run_with_clock(label, work, expected)`: the work runs on a thread of its own (engine.core.threads' rule: model
  work does not keep a long-lived thread's OpenMP team) while the page's own thread redraws one progress bar every
  half second with the elapsed time and an estimate of what is left: from the engine's own progress (fraction
  done so far) once it reports one, else from the median of the newest runs of that experiment on this machine
  measured on a quiet machine, scaled by the work asked (lanes x runs x tokens, requests...).
- `run_experiment(...)`: that, plus the engine's error on the page (engine.core.paths.scrub via show_error) and the
  result stored with its date, wall time and browser session (engine.runtime.runlog.save_result).
- `shown_result(...)`: what a page draws: this session's result; after a reload, the session's last stored one;
  in presenter mode, the last run recorded on this machine, with its date, until something runs live.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import streamlit as st

from engine.calc import format as fmt
from engine.core import stats
from engine.core.errors import EngineError
from engine.core.jsonsafe import to_jsonable
from engine.core.load import OTHERS_BUSY, cores, cpu_seconds, is_busy, loadavg_1m, others_during
from engine.runtime import runlog
from ui.common import browser_session, presenter_mode, show_error

T = TypeVar("T")
Report = Callable[[float, str], None]  # the engine's progress(fraction done, message)
REDRAW_S = 0.5
# Below this share done, the engine's own pace says little (a model load, a first conversion): the last recorded
# run's time says more.
TRUST_FRACTION = 0.15


@dataclass(frozen=True)
class Expected:
    """How long a run should take: seconds, and the words for where that comes from."""

    seconds: float
    source: str


# The forecast's median: of the newest runs of the same settings measured on a quiet machine (one run beside other
# work, a walk's 75 s Batching replay against its 5 s peers, must not set the clock).
FORECAST_RUNS = 5


def quiet(stored: runlog.StoredResult) -> bool:
    """The run was measured on a quiet machine: its load was recorded and the one rule (load_note) finds no other
    work; a run whose load was not recorded is not known to be quiet."""
    load = recorded_load(stored)
    return load is not None and not load_note(load)


def expected(experiment: str, work: float, settings: dict | None = None) -> Expected | None:
    """How long a run should take, from the earlier runs of this experiment on this machine measured on a quiet
    machine (a busy run, or one whose load was not recorded, says little about this one): the median time per unit
    of work of the newest FORECAST_RUNS of them with these `settings` (where none has them all, of those with the
    most in common: another model's race says little about this one), scaled by the work asked. None: no run here
    measured on a quiet machine."""
    runs = [r for r in runlog.results(experiment) if r.work > 0 and r.wall_s > 0 and quiet(r)]
    if not runs:
        return None
    want = to_jsonable(settings or {})

    def same(r: runlog.StoredResult) -> int:
        return sum(r.settings.get(k) == v for k, v in want.items())

    most = max(map(same, runs))
    alike = [r for r in runs if same(r) == most][:FORECAST_RUNS]  # results come newest first
    per_work = stats.median([r.wall_s / r.work for r in alike])
    other = "" if most == len(want) else " (other settings)"
    if len(alike) == 1:
        basis = (
            f"the last quiet run here{other}, {alike[0].when}, took {fmt.seconds(alike[0].wall_s)} from the button "
            "to its result"
        )
    else:
        basis = (
            f"median of the last {len(alike)} quiet runs here{other}: "
            f"{fmt.seconds(stats.median([r.wall_s for r in alike]))} from the button to the result, the newest "
            f"{alike[0].when}"
        )
    return Expected(per_work * work, basis)


def left_s(
    elapsed: float, fraction: float, guess: Expected | None, reported_at: float | None = None
) -> float | None:
    """Seconds still to go: the engine's own pace once it has done enough to go by, else the recorded run's
    time less what has passed; None when neither is known. The pace is the one at which `fraction` was reached
    (`reported_at` seconds in; now when not given): a run that reports in coarse steps (half done after 66 s) is
    not re-timed as if it had just reached that share, which kept 'left' equal to 'elapsed' between its steps."""
    at = elapsed if reported_at is None else min(reported_at, elapsed)
    if fraction > 0 and at > 0 and (fraction >= TRUST_FRACTION or guess is None):
        return max(at / fraction - elapsed, 0.0)
    if guess is not None:
        return max(guess.seconds - elapsed, 0.0)
    return None


# A higher 'left' is shown only after it has held this long; before that the shown one goes on counting down (a
# coarse progress report turned '40 s left' into '90 s left' and back within seconds). It once paused instead, and a
# presenter read 'about 4.35 s left' from 10.1 s to 13.1 s: a clock that stands still reads as stuck.
RISE_HOLD_S = 5.0


class SmoothedLeft:
    """One run's 'about N s left', steadied: a lower estimate is shown at once; a higher one only once it has held
    for RISE_HOLD_S, the shown one counting down meanwhile (to 0, which the bar words as about to finish). Call it
    with (elapsed, estimate) at every redraw of the run's bar."""

    def __init__(self) -> None:
        self.shown: float | None = None
        self.at = 0.0
        self.higher_since: float | None = None

    def __call__(self, elapsed: float, left: float | None) -> float | None:
        if left is None:
            self.shown, self.higher_since = None, None
            return None
        counted = None if self.shown is None else max(self.shown - (elapsed - self.at), 0.0)
        if counted is None or left <= counted:
            self.higher_since = None
            shown = left
        else:
            self.higher_since = elapsed if self.higher_since is None else self.higher_since
            held = elapsed - self.higher_since >= RISE_HOLD_S
            shown = left if held else counted
        self.shown, self.at = shown, elapsed
        return shown


ABOUT_DONE_S = 0.5  # less left than one redraw of the bar: said as about to finish, not 'about 0.2 s left'


def clock_line(
    label: str,
    message: str,
    elapsed: float,
    fraction: float,
    guess: Expected | None,
    reported_at: float | None = None,
    smooth: SmoothedLeft | None = None,
) -> str:
    """The bar's words: what is happening, the time so far and what is left (steadied by `smooth`, the run's own
    SmoothedLeft, where given), and where the estimate comes from."""
    left = left_s(elapsed, fraction, guess, reported_at)
    if smooth is not None:
        left = smooth(elapsed, left)
    head = f"{label}: {message}" if message else label
    clock = f"{fmt.seconds(elapsed)} elapsed"
    if left is None:
        return f"{head} · {clock} · no earlier run on a quiet machine here to estimate from"
    if fraction >= TRUST_FRACTION or guess is None:
        if left <= 0 and fraction < 1:
            return f"{head} · {clock} · {fraction:.0%} done, taking longer than the pace so far said"
        if left < ABOUT_DONE_S:
            return f"{head} · {clock} · about to finish (at the pace so far)"
        return f"{head} · {clock} · about {fmt.seconds(left)} left (at the pace so far)"
    if elapsed > guess.seconds:
        return f"{head} · {clock} · longer than expected ({guess.source})"
    if left < ABOUT_DONE_S:
        return f"{head} · {clock} · about to finish ({guess.source})"
    return f"{head} · {clock} · about {fmt.seconds(left)} left ({guess.source})"


def _bar_fraction(elapsed: float, fraction: float, guess: Expected | None) -> float:
    if fraction > 0 or guess is None or guess.seconds <= 0:
        return min(max(fraction, 0.0), 1.0)
    return min(elapsed / guess.seconds, 0.95)  # a guess never fills the bar: the run is not done until it is


def run_with_clock(
    label: str, work: Callable[[Report], T], guess: Expected | None = None, where: Any = None
) -> T:
    """work(report) on its own thread, a progress bar with the clock redrawn while it runs (in `where`, a place
    the page keeps beside its button, where given; else where the page has got to); its result returned, its
    exception raised here. A rerun or a closed tab stops this loop, not the thread: the run finishes (or fails) on
    its own and is simply not shown."""
    state: dict = {"fraction": 0.0, "message": "", "at": None}
    box: list = []
    t0 = time.perf_counter()

    def report(fraction: float, message: str) -> None:
        if float(fraction) != state["fraction"]:  # the pace is the time at which the share was reached
            state["at"] = time.perf_counter() - t0
        state["fraction"], state["message"] = float(fraction), str(message)

    def target() -> None:
        try:
            box.append((True, work(report)))
        except BaseException as exc:  # re-raised on the page's thread
            box.append((False, exc))

    smooth = SmoothedLeft()
    bar = (where if where is not None else st).progress(
        0.0, text=clock_line(label, "starting", 0.0, 0.0, guess, smooth=smooth)
    )
    thread = threading.Thread(target=target, name="inference-lab-page-run", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(REDRAW_S)
            elapsed = time.perf_counter() - t0
            f = state["fraction"]
            bar.progress(
                _bar_fraction(elapsed, f, guess),
                text=clock_line(label, state["message"], elapsed, f, guess, state["at"], smooth),
            )
    finally:
        bar.empty()
    ok, value = box[0]
    if not ok:
        raise value
    return value


def run_experiment(
    experiment: str,
    label: str,
    work: Callable[[Report], T],
    *,
    size: float = 1.0,
    settings: dict | None = None,
    store: Callable[[T], Any] | None = None,
    where: Any = None,
) -> T | None:
    """Run one experiment with the clock, show an engine error in one sentence (None then), and store the result
    for a reload and for presenter mode. `size`: the work in the experiment's own unit, so the next run's estimate
    scales; `store`: what to keep of the result when it is not a plain dataclass; `where`: the clock's place
    (run_with_clock)."""
    t0 = time.perf_counter()
    load_before, cpu_before = loadavg_1m(), cpu_seconds()
    try:
        result = run_with_clock(label, work, expected(experiment, size, settings), where)
    except (EngineError, ValueError) as exc:
        show_error(exc)
        return None
    wall = time.perf_counter() - t0
    keep(experiment, store(result) if store else result, wall_s=wall, size=size, settings=settings,
         load_before=load_before, others=others_during(cpu_before, wall))  # fmt: skip
    return result


def keep(
    experiment: str,
    result: Any,
    *,
    wall_s: float,
    size: float,
    settings: dict | None,
    load_before: float,
    others: float = math.nan,
) -> None:
    """Store a finished run (with the load it ran under: `others`, other processes' cores' worth of CPU while it
    ran, where measured) for a reload, presenter mode and the next run's clock, and mark it as this session's
    live one."""
    load = load_record(load_before, others)
    runlog.save_result(
        experiment,
        result,
        wall_s=wall_s,
        work=size,
        session=browser_session(),
        settings={**(settings or {}), "load": load},
    )
    st.session_state[f"pace.{experiment}.live"] = True
    st.session_state[f"pace.{experiment}.load"] = load


def load_record(before: float, others: float = math.nan) -> dict:
    """The load a run is stored with: the 1-minute average before it and now (its end), the cores, and, where
    measured, the cores' worth of CPU other processes took while it ran (engine.core.load.others_during)."""
    record = {"before": before, "after": loadavg_1m(), "cores": cores()}
    if math.isfinite(others):
        record["others"] = others
    return record


def load_note(load: dict | None) -> str:
    """A run measured on a busy machine, said beside its result: its times and ratios mix in the neighbours' load
    (the one rule, engine.core.load.is_busy, on the load average before and after it); empty when quiet."""
    if not load:
        return ""
    n = int(load.get("cores") or cores())

    def number(x) -> float | None:
        return float(x) if isinstance(x, int | float) and x == x else None

    before, after = number(load.get("before")), number(load.get("after"))
    others = number(load.get("others"))
    if others is not None:
        # measured while it ran: what other processes took, not the 1-minute average, which still holds the
        # lab's own run of a minute ago (a tour that moved on read its next stop as busy)
        if others < OTHERS_BUSY:
            return ""
        return (
            f"Measured on a busy machine: other programs took {others:.1f} cores' worth of CPU on this {n}-core "
            "machine while it ran, so its times and speed ratios carry their share; rerun on a quieter machine "
            "before trusting a ratio."
        )
    # at the end the 1-minute average holds the run's own threads too (one a core): only the rest is other work
    others_after = None if after is None else max(0.0, after - n)
    if not any(x is not None and is_busy(x, n) for x in (before, others_after)):
        return ""
    seen = " → ".join(f"{x:.1f}" for x in (before, after) if x is not None)
    return (
        f"Measured on a busy machine (load average {seen} on {n} cores, this run's own threads included at the "
        "end): its times and speed ratios carry other work's share of the CPU, which moved during the run; rerun "
        "on a quieter machine before trusting a ratio."
    )


@dataclass(frozen=True)
class Shown:
    """A result to draw and the words that say what it is (empty for this session's live run)."""

    result: Any
    note: str
    busy: str = ""  # load_note: the run was measured on a busy machine
    presenter: bool = False  # another session's run, shown by presenter mode


def recorded_load(stored: runlog.StoredResult) -> dict | None:
    """The load a stored run ran under: the one every run keeps in its settings (ui.pace.keep), else the one an
    older run kept in its own result (the Batching replay's [before, after, cores]); None: not recorded."""
    load = stored.settings.get("load")
    if isinstance(load, dict) and load:
        return load
    kept = stored.payload.get("load") if isinstance(stored.payload, dict) else None
    if isinstance(kept, list | tuple) and len(kept) == 3:
        return {"before": kept[0], "after": kept[1], "cores": kept[2]}
    return None


RECENT_QUIET = 10  # presenter mode's pick among the newest quiet runs of the same settings


def presented(experiment: str, match: dict | None = None) -> tuple[runlog.StoredResult, str] | None:
    """Presenter mode's run of the experiment (of the `match` settings, e.g. the page's model): the newest one
    measured on a quiet machine; only when there is none, the newest whose load was not recorded, then the newest
    measured on a busy machine; with the words that say which it is. None: never run here."""
    want = to_jsonable(match or {})
    runs = [r for r in runlog.results(experiment) if all(r.settings.get(k) == v for k, v in want.items())]
    if not runs:
        return None
    curated = runlog.curated_session()
    chosen = [r for r in runs if curated is not None and r.session == curated]
    if chosen and (
        quiet := [r for r in chosen if recorded_load(r) is not None and load_note(recorded_load(r)) == ""]
    ):
        # the tour's own recording, each stop with the page's defaults, measured quiet (bench/tour.py): a room sees
        # the runs chosen for it, not the last visitor's (a presenter's walk found a 0-shot run with other settings)
        return quiet[
            0
        ], "the tour's recording on this machine, with the page's own settings and no other work"

    def rank(r: runlog.StoredResult) -> int:  # 0 quiet, 1 load unknown, 2 busy
        load = recorded_load(r)
        return 1 if load is None else 2 if load_note(load) else 0

    top = min(rank(r) for r in runs)
    best = next(r for r in runs if rank(r) == top)  # the newest of the best rank (results come newest first)
    alike = [best]

    def setup(r: runlog.StoredResult) -> dict:
        return {k: v for k, v in r.settings.items() if k != "load"}

    if top == 0:
        # the load rule reads the load average at a run's two ends; work in between escapes it (a walk's 75 s
        # Batching run, 16x its quiet peers, passed for quiet): of the newest quiet runs of these settings, the
        # least disturbed, the quickest per unit of its work
        alike = [r for r in runs if rank(r) == 0 and setup(r) == setup(best)][:RECENT_QUIET]
        best = min(alike, key=lambda r: r.wall_s / r.work if r.work else r.wall_s)
    which = (
        f"the quickest of the last {len(alike)} run(s) recorded on this machine with these "
        "settings and no other work at their start or their end",
        "no run recorded on a quiet machine, so the last run recorded on this machine (its load was not recorded)",
        "no run recorded on a quiet machine, so the last run recorded on this machine, on a busy machine",
    )[rank(best)]
    return best, which


def _setting(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list | tuple):
        return ", ".join(map(_setting, value))
    if isinstance(value, str):  # a prompt in one line, cut: the setting is named, not printed
        value = " ".join(value.split())
    if isinstance(value, str) and len(value) > 60:
        return f"“{value[:60]}…”"
    return f"“{value}”" if isinstance(value, str) and " " in value else str(value)


def ran_with(settings: dict, now: dict | None, subject: str = "It") -> str:
    """What a stored run was run with (its settings, the load aside), and whether the inputs on the page now are
    those: a reload resets them to their defaults, so a stored result must not pass for theirs. `now`: the page's
    settings as it would store them (None: not known); `subject`: what the line is about. Empty when the run stored
    no settings."""
    kept = {k: v for k, v in to_jsonable(settings).items() if k != "load"}
    if not kept:
        return ""
    line = (
        f"{subject} was run with "
        + ", ".join(f"{k.replace('_', ' ')} {_setting(v)}" for k, v in kept.items())
        + "."
    )
    if now is None:
        return line + " The inputs on this page were not set from it and may not be these."
    now = to_jsonable(now)
    differ = [k.replace("_", " ") for k, v in kept.items() if now.get(k) != v]
    if differ:
        return line + f" The inputs on this page now are **not** these ({', '.join(differ)} differ)."
    unknown = [k.replace("_", " ") for k in now if k not in kept and k != "load"]
    if unknown:
        return (
            line
            + f" Its {', '.join(unknown)} {'was' if len(unknown) == 1 else 'were'} not stored with it: the inputs on "
            "this page may not be these."
        )
    return line + " The inputs on this page now are the same."


def shown_result(
    experiment: str,
    live: Any,
    decode: Callable[[Any], Any],
    match: dict | None = None,
    now: dict | None = None,
) -> Shown | None:
    """What the page draws: `live` (this session's result, kept in session state) when there is one; else the
    session's last stored run (a reload lost the session state, not the run); else, in presenter mode, the last
    run recorded on this machine on a quiet machine (`presented`), dated. `decode` turns a stored payload back
    into the page's result; `match`: settings a stored run must have to be shown (the page's model); `now`: the
    page's inputs as settings, so a stored run says whether they are the ones it was run with (ran_with)."""
    if live is not None:
        return Shown(live, "", load_note(st.session_state.get(f"pace.{experiment}.load")))
    want = to_jsonable(match or {})
    stored = runlog.last_result(
        experiment,
        session=browser_session(),
        where=lambda r: all(r.settings.get(k) == v for k, v in want.items()),
    )
    if stored is not None:
        return Shown(
            decode(stored.payload),
            f"This session's run of {stored.when}, kept across the page reload. "
            f"{ran_with(stored.settings, now)}".rstrip(),
            load_note(recorded_load(stored)),
        )
    if presenter_mode():
        # a run measured on a quiet machine first: its times and ratios are the ones to show a room
        found = presented(experiment, match)
        if found is not None:
            stored, which = found
            return Shown(
                decode(stored.payload),
                f"Presenter mode: {which}, {stored.when} "
                f"(it took {fmt.seconds(stored.wall_s)} from the button to its result); not live. Press the button to run it now. "
                f"{ran_with(stored.settings, now)}".rstrip(),
                load_note(recorded_load(stored)),
                presenter=True,
            )
    return None


def note(shown: Shown | None) -> None:
    """The line above a result that is not this session's live run."""
    if shown is not None and shown.note:
        st.info(shown.note, icon=":material/history:")
    if shown is not None and shown.busy:
        st.warning(shown.busy, icon=":material/speed:")
