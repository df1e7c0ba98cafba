"""Words from the race's numbers: one verdict per lane, one line on each interval, and the winner line.

Every sentence here is built from the numbers it sits beside (flip the numbers, the sentence flips; see
tests/test_race.py). Rules, stated once:
- an interval needs at least MIN_TIMED_RUNS timed runs after at least MIN_WARMUP warm-up run(s); with fewer,
  the speedup is shown as a point and its interval is greyed out with the reason (one cold run of each
  lane gave "3.24x [3.24-3.24]", which is not an interval);
- a speedup whose 95% interval includes 1x is "no clear difference", whatever its point value;
- a pass-through engine (DeepSpeed without kernel injection) runs vanilla's own modules, so it cannot be
  faster than vanilla: any measured "speedup" is noise, and the verdict says so;
- the baseline drifted when vanilla, re-run at the end of the race, moved by more than DRIFT_TOLERANCE
  from its start; every lane raced in between is flagged.
"""

from __future__ import annotations

import math

from engine.core import stats
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


def is_pass_through(c: ContenderResult) -> bool:
    return bool(c.deepspeed_mode and c.deepspeed_mode.startswith("pass-through"))


def interval_line(c: ContenderResult) -> str:
    """Whether the speedup's 95% interval includes 1x, in one line."""
    if not _ok(c.speedup_vs_vanilla):
        return "no speedup: the lane or vanilla did not run"
    if not c.interval_shown:
        return c.interval_note
    lo, hi = c.speedup_low, c.speedup_high
    span = f"the 95% interval [{lo:.2f}×–{hi:.2f}×]"
    if lo <= 1.0 <= hi:
        return f"{span} includes 1×: not distinguishable from vanilla with these runs"
    if lo > 1.0:
        return f"{span} lies above 1×: faster than vanilla beyond run-to-run noise"
    return f"{span} lies below 1×: slower than vanilla beyond run-to-run noise"


def speed_phrase(c: ContenderResult) -> str:
    s = c.speedup_vs_vanilla
    if not _ok(s) or s <= 0:
        return "speed not compared"
    words = f"{s:.2f}× faster" if s >= 1 else f"{1 / s:.2f}× slower"
    words = "1.00×" if round(s, 2) == 1.0 else words  # neither faster nor slower at the shown precision
    if c.interval_shown and c.speedup_low <= 1.0 <= c.speedup_high:
        return f"no clear difference ({words}, interval includes 1×)"
    if not c.interval_shown:
        return f"{words} (one point, no interval)"
    return words


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
        return f"did not run ({c.status}): {c.reason[:240]}" if c.reason else f"did not run ({c.status})"
    if c.name == BASELINE:
        return "the baseline"
    parts = [speed_phrase(c), quality_phrase(c)]
    if is_pass_through(c):
        parts.append(
            "pass-through: it runs vanilla's own modules, so it cannot be faster than vanilla; "
            "the measured difference is noise"
        )
    if c.baseline_drift is not None and abs(c.baseline_drift - 1) > DRIFT_TOLERANCE:
        parts.append(f"baseline drifted {c.baseline_drift - 1:+.1%} during the race")
    return ", ".join(parts)


def drift(start: list[float], end: list[float]) -> float | None:
    """Vanilla's median latency at the end over the start (1.0: the machine held still)."""
    a, b = stats.median(start), stats.median(end)
    return b / a if _ok(a) and _ok(b) and a > 0 else None


def drift_note(ratio: float | None) -> str:
    if ratio is None:
        return ""
    change = f"{ratio - 1:+.1%}"
    if abs(ratio - 1) > DRIFT_TOLERANCE:
        return (
            f"baseline drift: vanilla re-run at the end took {change} median latency vs the start (more than "
            f"{DRIFT_TOLERANCE:.0%}): the machine's speed changed during the race, so every lane raced in "
            "between is flagged; rerun on a quieter machine"
        )
    return (
        f"baseline steady: vanilla re-run at the end was within {DRIFT_TOLERANCE:.0%} of the start ({change})"
    )


def winner_line(contenders: list[ContenderResult]) -> str:
    """Who won, and at what cost in quality, from the lanes' numbers."""
    others = [c for c in contenders if c.ran and c.name != BASELINE and _ok(c.speedup_vs_vanilla)]
    lanes = [c for c in others if not is_pass_through(c)]
    if not any(c.name == BASELINE and c.ran for c in contenders):
        return "No winner: vanilla, the baseline, did not run."
    if not others:
        return "No winner: no other lane ran to completion."
    if not lanes:
        return (
            "No winner: besides vanilla only pass-through lanes ran, and a pass-through engine cannot be "
            "faster than what it wraps."
        )

    def clearly_faster(c: ContenderResult) -> bool:
        return c.speedup_vs_vanilla > 1 and (not c.interval_shown or c.speedup_low > 1)

    faster = [c for c in lanes if clearly_faster(c)]
    if not faster:
        best = max(lanes, key=lambda c: c.speedup_vs_vanilla)
        return f"No lane beat vanilla beyond noise; the closest was {best.label} ({speed_phrase(best)})."
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
    drifted = [
        c for c in faster if c.baseline_drift is not None and abs(c.baseline_drift - 1) > DRIFT_TOLERANCE
    ]
    if drifted:
        line += (
            f" Caution: vanilla's own speed moved {drifted[0].baseline_drift - 1:+.1%} during the race, "
            "so these ratios are unreliable."
        )
    return line
