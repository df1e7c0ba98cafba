"""Words from the race's numbers: one verdict per lane, one line on each interval, and the winner line.

Every sentence here is built from the numbers it sits beside (flip the numbers, the sentence flips; see
tests/test_race.py). Rules, stated once:
- an interval needs at least MIN_TIMED_RUNS timed runs after at least MIN_WARMUP warm-up run(s); with fewer,
  the speedup is shown as a point and its interval is greyed out with the reason (one cold run of each
  lane gave "3.24x [3.24-3.24]", which is not an interval);
- a speedup is worded by engine.core.verdict (the one rule: "faster" only when its 95% interval lies above 1x,
  "slower" only below, otherwise no measurable difference; a point without an interval is neither);
- a pass-through engine (DeepSpeed without kernel injection) runs vanilla's own modules, so it cannot be
  faster than vanilla: any measured "speedup" is noise, and the verdict says so;
- the baseline drifted when vanilla, re-run at the end of the race, moved by more than DRIFT_TOLERANCE
  from its start; every lane raced in between is flagged.
"""

from __future__ import annotations

import math
import re

from engine.core import stats
from engine.core import verdict as core_verdict
from engine.core.paths import scrub
from engine.race.record import ContenderResult

MIN_TIMED_RUNS = 3
MIN_WARMUP = 1
DRIFT_TOLERANCE = 0.10  # 10% change of vanilla's median latency between the start and the end of the race
BASELINE = "vanilla"


def _ok(v) -> bool:
    return v is not None and isinstance(v, int | float) and math.isfinite(v)


def interval_reason(timed_runs: int, warmup_runs: int) -> str:
    """ "" when an interval may be shown; else why not."""
    if timed_runs >= MIN_TIMED_RUNS and warmup_runs >= MIN_WARMUP:
        return ""
    return (
        f"no interval: {timed_runs} timed run{'s' if timed_runs != 1 else ''} after {warmup_runs} warm-up; "
        f"a 95% interval needs at least {MIN_TIMED_RUNS} timed runs after at least {MIN_WARMUP} warm-up"
    )


REASON_CHARS = 200  # a lane's reason on a page is one line; the full record stays in the downloaded JSON
_WRAPPER = re.compile(r"^[\w.]+ failed: (?:[A-Z]\w*(?:Error|Exception): )?")
_NOT_IMPORTABLE = re.compile(r"^(?P<pkg>[\w.]+) is not importable in \S+?: (?P<why>.*)$")
_MISSING_ATTR = re.compile(r"^AttributeError: module '(?P<mod>[\w.]+)' has no attribute '(?P<attr>\w+)'$")


def one_line_reason(text: str) -> str:
    """A worker's failure as one line a person can read: a traceback gives its last line (the exception), the
    wrapper a worker adds ("x failed: RuntimeError: ...") is dropped, an import failure is said in words, and no
    server path survives (engine.core.paths.scrub)."""
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    line = scrub(_WRAPPER.sub("", line))
    m = _NOT_IMPORTABLE.match(line)
    if m:
        line = f"{m['pkg']} could not be imported in the lane's Python environment ({_plain(m['why'])})"
    else:
        line = _plain(line)
    if len(line) > REASON_CHARS:
        line = line[: REASON_CHARS - 1].rsplit(" ", 1)[0] + "…"
    return line


def _plain(exc: str) -> str:
    """An exception line in words where its cause is known: a module missing an attribute at import time is one
    package built against another release of a second one (the environment's versions disagree)."""
    m = _MISSING_ATTR.match(exc)
    if not m:
        return exc
    return f"versions disagree: {m['mod']} has no {m['attr']}; rebuild the environment from its pins"


def status_line(c: ContenderResult) -> str:
    """A lane that did not run, in one line: its status ("failed", "skipped", ...) and why."""
    why = one_line_reason(c.reason or c.traceback or c.stderr_tail)
    return f"{c.status}: {why}" if why else c.status


def is_pass_through(c: ContenderResult) -> bool:
    return bool(c.deepspeed_mode and c.deepspeed_mode.startswith("pass-through"))


def _interval(c: ContenderResult) -> tuple[float, float] | None:
    return (c.speedup_low, c.speedup_high) if c.interval_shown else None


def interval_line(c: ContenderResult) -> str:
    """Whether the speedup's 95% interval includes 1x, in one line (the rule: engine.core.verdict.direction)."""
    if not _ok(c.speedup_vs_vanilla):
        return "no speedup: the lane or vanilla did not run"
    if not c.interval_shown:
        return c.interval_note
    span = f"the 95% interval [{c.speedup_low:.2f}×–{c.speedup_high:.2f}×]"
    way = core_verdict.direction(c.speedup_vs_vanilla, _interval(c))
    if way in ("faster", "slower") and drifted(c):
        # the interval covers run-to-run noise inside the race, not vanilla's own speed moving during it
        return (
            f"{span} lies {'above' if way == 'faster' else 'below'} 1×, but vanilla's re-run at the end was "
            f"{_moved(c.baseline_drift)}, more than run-to-run noise: not a reliable ratio"
        )
    if way == "faster":
        return f"{span} lies above 1×: faster than vanilla beyond run-to-run noise"
    if way == "slower":
        return f"{span} lies below 1×: slower than vanilla beyond run-to-run noise"
    return f"{span} includes 1×: not distinguishable from vanilla with these runs"


def _moved(ratio: float) -> str:
    """Vanilla's end-over-start latency as the one word a reader expects: '12.8% faster', never '-12.8%'."""
    return f"{abs(ratio - 1):.1%} {'slower' if ratio > 1 else 'faster'}"


def drifted(c: ContenderResult) -> bool:
    """Vanilla's own speed moved by more than DRIFT_TOLERANCE between the start and the end of the lane's race."""
    return c.baseline_drift is not None and abs(c.baseline_drift - 1) > DRIFT_TOLERANCE


def speed_phrase(c: ContenderResult) -> str:
    """The lane's speed against vanilla, worded by the one rule (engine.core.verdict.speed_verdict)."""
    return core_verdict.speed_verdict(c.speedup_vs_vanilla, _interval(c), show_interval=False)


def quality_phrase(c: ContenderResult) -> str:
    n = len(c.token_ids)
    if not _ok(c.exact_match_rate):
        return "output not compared"
    same = round(c.exact_match_rate * n) if n else 0
    if c.first_divergence_token is None and c.exact_match_rate == 1.0:
        return f"same output as vanilla on all {n} prompts" if n else "same output as vanilla"
    head = (
        "output diverges at token " + str(c.first_divergence_token)
        if c.first_divergence_token is not None
        else "same output on the timed prompt"
    )
    return f"{head} ({same}/{n} prompts identical)" if n else head


def lane_verdict(c: ContenderResult) -> str:
    if not c.ran:
        return status_line(c)
    if c.name == BASELINE:
        return "the baseline"
    parts = [speed_phrase(c), quality_phrase(c)]
    if is_pass_through(c):
        parts.append(
            "pass-through: it runs vanilla's own modules, so it cannot be faster than vanilla; "
            "the measured difference is noise"
        )
    if drifted(c):
        parts.append(f"vanilla's re-run at the end was {_moved(c.baseline_drift)}: not a reliable ratio")
    return ", ".join(parts)


def drift(start: list[float], end: list[float]) -> float | None:
    """Vanilla's median latency at the end over the start (1.0: the machine held still)."""
    a, b = stats.median(start), stats.median(end)
    return b / a if _ok(a) and _ok(b) and a > 0 else None


def drift_note(ratio: float | None, *, busy: bool = True) -> str:
    """The re-run's line. On a busy machine other work is the likely cause; on a quiet one, the first lane ran
    cold (files read from disk, first allocations), which more warm-up runs absorb."""
    if ratio is None:
        return ""
    change = f"{ratio - 1:+.1%}"
    if abs(ratio - 1) > DRIFT_TOLERANCE:
        cause = (
            "the machine's speed changed during the race (other work ran beside it); rerun on a quieter machine"
            if busy
            else "no other work ran beside the race, so the start ran cold (files read from disk, first "
            "allocations); a warm-up run more per lane absorbs that"
        )
        return (
            f"baseline drift: vanilla's re-run at the end was {_moved(ratio)} (median latency) than at the start "
            f"(more than {DRIFT_TOLERANCE:.0%}), so every lane raced in between is flagged: {cause}"
        )
    return (
        f"baseline steady: vanilla re-run at the end was within {DRIFT_TOLERANCE:.0%} of the start ({change})"
    )


def _why_no_other_lane(contenders: list[ContenderResult]) -> str:
    """Why nothing besides vanilla can be compared: which lanes did not run, and the first one's reason."""
    missing = [c for c in contenders if c.name != BASELINE and not c.ran]
    if not missing:
        return "vanilla was the only lane in this race; add a contender to compare against it."
    names = ", ".join(c.label for c in missing) if len(missing) <= 3 else f"{len(missing)} lanes"
    states = sorted({c.status for c in missing})
    state = states[0] if len(states) == 1 else "did not run"
    only = "the only other lane" if len(missing) == 1 else "every other lane"
    why = one_line_reason(missing[0].reason or missing[0].traceback or missing[0].stderr_tail)
    reasons = {one_line_reason(c.reason or c.traceback or c.stderr_tail) for c in missing}
    said = (
        "" if not why else (f" Why: {why}." if len(reasons) == 1 else f" Why, for {missing[0].label}: {why}.")
    )
    return f"{only} ({names}) {state}, so there is nothing to compare vanilla with.{said}"


def winner_line(contenders: list[ContenderResult]) -> str:
    """Who won, and at what cost in quality, from the lanes' numbers."""
    others = [c for c in contenders if c.ran and c.name != BASELINE and _ok(c.speedup_vs_vanilla)]
    lanes = [c for c in others if not is_pass_through(c)]
    if not any(c.name == BASELINE and c.ran for c in contenders):
        return "No winner: vanilla, the baseline, did not run."
    if not others:
        return "No winner: " + _why_no_other_lane(contenders)
    if not lanes:
        return (
            "No winner: besides vanilla only pass-through lanes ran, and a pass-through engine cannot be "
            "faster than what it wraps."
        )

    def clearly_faster(c: ContenderResult) -> bool:
        return core_verdict.direction(c.speedup_vs_vanilla, _interval(c)) == "faster"

    faster = [c for c in lanes if clearly_faster(c)]
    if not faster:
        best = max(lanes, key=lambda c: c.speedup_vs_vanilla)
        line = f"No lane beat vanilla beyond noise; the closest was {best.label} ({speed_phrase(best)})."
        if best.speedup_vs_vanilla > 1:
            # a point well above 1x beside "no difference" reads as a contradiction unless the spread is said
            line += (
                f" Its point estimate was {best.speedup_vs_vanilla:.2f}× vanilla's speed, but its runs spread too "
                "widely to call it faster"
                + (
                    f" (vanilla's re-run at the end was {_moved(best.baseline_drift)})"
                    if drifted(best)
                    else ""
                )
                + "; rerun on a quieter machine, or with more runs, to settle it."
            )
        return line
    exact = [c for c in faster if c.exact_match_rate == 1.0]
    best = max(faster, key=lambda c: c.speedup_vs_vanilla)
    line = f"Fastest: {best.label}, {speed_phrase(best)}, {quality_phrase(best)}."
    if exact and best not in exact:
        top = max(exact, key=lambda c: c.speedup_vs_vanilla)
        line += f" Fastest with vanilla's exact output: {top.label}, {speed_phrase(top)}."
    elif not exact:
        line += " No faster lane kept vanilla's exact output."
    if any(not c.interval_shown for c in faster):
        line += " (Some speedups are single points without an interval: too few runs.)"
    moved = [c for c in faster if drifted(c)]
    if moved:
        line += (
            f" Caution: vanilla's re-run at the end was {_moved(moved[0].baseline_drift)}, so these ratios are "
            "unreliable."
        )
    return line
