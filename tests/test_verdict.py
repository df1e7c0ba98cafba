"""The one verdict rule (engine.core.verdict) and the pages' verdicts that word a ratio through it: "faster" only
when the 95% interval lies above 1x, "slower" only when it lies below, otherwise no measurable difference."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.core.verdict import NO_DIFFERENCE, direction, speed_verdict
from engine.levers import quant as Q
from engine.levers import speculative as S


@pytest.mark.parametrize(
    ("ratio", "interval", "way"),
    [
        (2.0, (1.5, 2.6), "faster"),
        (0.5, (0.4, 0.6), "slower"),
        (1.0, (0.9, 1.1), "same"),
        (0.89, (0.38, 1.15), "same"),  # a point below 1 whose interval reaches above it
        (1.4, (0.95, 1.9), "same"),
        (1.4, None, "unknown"),  # one point: no interval, no direction
        (None, (0.9, 1.1), "unknown"),
        (float("nan"), (0.9, 1.1), "unknown"),
    ],
)
def test_the_interval_alone_decides_the_direction(ratio, interval, way):
    assert direction(ratio, interval) == way


def test_the_words_follow_the_interval():
    assert (
        speed_verdict(2.0, (1.5, 2.6), baseline="vanilla")
        == "2.00× faster than vanilla (95% interval 1.50×–2.60×)"
    )
    assert speed_verdict(0.5, (0.4, 0.6), show_interval=False) == "2.00× slower"
    # a slower ratio's interval is said in the same direction as its words (1 / 0.6 to 1 / 0.4)
    assert (
        speed_verdict(0.5, (0.4, 0.6), baseline="fp32") == "2.00× slower than fp32 (95% interval 1.67×–2.50×)"
    )
    same = speed_verdict(0.89, (0.38, 1.15))
    assert same.startswith(NO_DIFFERENCE[:-1]) and "faster" not in same and "slower" not in same
    assert "0.38×–1.15×" in same and "point 0.89×" in same
    point = speed_verdict(1.4, None, baseline="fp32", no_interval="fewer than 3 runs")
    assert "fewer than 3 runs" in point and "not called faster or slower" in point
    assert speed_verdict(None, None) == "speed not compared"


def test_a_faster_verdict_never_prints_its_interval_starting_at_1_00():
    """The walkthrough: "int8 1.11× faster than fp32 (95% interval 1.00×–1.41×)" beside the rule that a lever is
    faster only when its interval lies above 1×; the bound was 1.004."""
    assert (
        speed_verdict(1.11, (1.004, 1.41), baseline="fp32")
        == "1.11× faster than fp32 (95% interval 1.004×–1.41×)"
    )
    assert "(95% interval 1.20×–1.41×)" in speed_verdict(1.3, (1.2, 1.41))
    slow = speed_verdict(0.9, (0.8, 1 / 1.0004))  # 1.0004× to 1.25× slower
    assert "1.0004×–1.25×" in slow


def _spec_row(sp, ci, **kw):
    base = dict(
        acceptance_rate=0.15,
        tokens_per_target_forward=1.2,
        speedup_vs_plain=sp,
        speedup_ci=ci,
        expected_speedup=1.1,
        cost_ratio=0.3,
        identical_to_greedy=True,
    )
    base.update(kw)
    return S.SpecResult("prompt_lookup", "input_grounded", "ok", **base)


def test_speculative_verdict_says_no_difference_when_its_interval_includes_1():
    """Was "prompt_lookup ... is 0.89x plain greedy here (slower)" beside the interval 0.38-1.15."""
    line = S.verdict(_spec_row(0.89, (0.38, 1.15)))
    assert (
        "no measurable difference" in line and "(slower)" not in line and "slower" not in line.split("(")[0]
    )
    assert "1.25× slower than plain greedy" in S.verdict(_spec_row(0.8, (0.7, 0.9)))
    assert "1.80× faster than plain greedy" in S.verdict(_spec_row(1.8, (1.5, 2.1)))


def test_quant_verdict_says_no_difference_when_its_interval_includes_1():
    """Was "int8 is slower here (1.00x fp32's speed (the 95% interval includes 1x)": slower and not, at once."""
    fp32 = Q.SchemeResult("fp32", "ok", weights_bytes=100)
    row = Q.SchemeResult(
        "int8",
        "ok",
        weights_bytes=50,
        bits_per_byte_delta=0.0,
        exact_match_rate=1.0,
        speedup_vs_fp32=0.998,
        speedup_ci=(0.9, 1.1),
    )
    line = Q.verdict(row, fp32)
    assert "no measurable difference" in line and "slower" not in line and "faster" not in line


def test_a_lever_that_did_not_run_names_no_server_path():
    reason = "ImportError: libfoo.so: cannot open /opt/torch/.venv/lib/python3.11/site-packages/foo/_C.so"
    line = Q.verdict(Q.SchemeResult("int4", "failed", reason=reason))
    assert "/opt/" not in line and "_C.so" in line
    line = S.verdict(S.SpecResult("draft", "open_ended", "failed", reason=reason))
    assert "/opt/" not in line and "_C.so" in line


def test_the_drift_note_says_faster_or_slower_not_a_signed_latency():
    """The race said "vanilla re-run at the end took -46.3% median latency vs the start"."""
    from engine.race.verdict import drift_note

    faster = drift_note(0.537)
    assert "46.3% faster (median latency) than at the start" in faster and "-46.3%" not in faster
    assert "30.0% slower" in drift_note(1.30)
    assert drift_note(1.02).startswith("baseline steady")


def test_one_user_is_one_user():
    """The Serving page said "Skipped 4 users: at 1 users only 50% of requests met the SLOs"."""
    from engine.loadgen.sweep import at_level

    assert at_level(1, "users") == "1 user" and at_level(4, "users") == "4 users"
    assert at_level(1, "requests/s") == "1 requests/s"


def test_above_theory_gives_no_reason_that_reads_the_same_number_twice():
    """A student's walk, prompt lookup on open-ended prompts: 'the theory ... keeps 1.04 tokens per target forward,
    but accepted drafts came in runs here and each forward kept 1.04': a reason that explains nothing. A run of
    accepted drafts is a reason only where the forwards kept clearly more than independent acceptance would; the
    drafts a lookup with no match does not make are the reason then."""
    row = S.SpecResult("prompt_lookup", "open_ended", "ok", draft_length=4, acceptance_rate=0.04,
                       tokens_per_target_forward=1.0420, speedup_vs_plain=0.87, speedup_ci=(0.84, 0.90),
                       expected_speedup=0.70, verify_tokens=1.0)  # fmt: skip
    said = S.above_theory(row)
    assert "came in runs" not in said
    assert "a lookup that finds no match drafts nothing" in said and "checked 0 (median" in said
    runs = S.above_theory(replace(row, acceptance_rate=0.5, tokens_per_target_forward=2.6, verify_tokens=5.0))
    assert "accepted drafts came in runs here and each forward kept 2.60" in runs
