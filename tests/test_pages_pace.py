"""Demo pace (issue 33 item 6): a long run's clock (elapsed and what is left, from the engine's pace or the last
run here), runs that survive a page reload (the run log keyed by the browser session), and presenter mode (a page
opens on the last run recorded on this machine, dated)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.runtime import runlog

ROOT = Path(__file__).resolve().parents[1]


def test_the_clock_says_what_is_left_and_where_the_estimate_comes_from():
    from ui.pace import Expected, clock_line, left_s

    guess = Expected(60.0, "the last run here, 2026-12-02 10:31 UTC, took 1 min")
    # early on the recorded run decides; later the run's own pace does
    assert left_s(10.0, 0.05, guess) == 50.0
    assert left_s(30.0, 0.5, guess) == 30.0
    line = clock_line("Racing", "1/4 · vanilla", 10.0, 0.05, guess)
    assert "elapsed" in line and "left" in line and "the last run here" in line
    assert "at the pace so far" in clock_line("Racing", "", 30.0, 0.5, guess)
    # past the recorded time with little done: said, not a negative 'left'
    assert "longer than expected" in clock_line("Racing", "", 90.0, 0.05, guess)
    # nothing to go by: said so
    assert "no earlier run" in clock_line("Racing", "", 3.0, 0.0, None)


def test_a_share_reached_earlier_is_timed_when_it_was_reached():
    """The walkthrough's int8 run: half done at 66 s, then no report for two minutes; the clock read "66 s elapsed ·
    about 66 s left" ... "3.0 min elapsed · about 3.0 min left" (the share re-timed as if just reached)."""
    from ui.pace import clock_line, left_s

    assert left_s(66.0, 0.5, None, reported_at=66.0) == 66.0
    assert left_s(100.0, 0.5, None, reported_at=66.0) == 32.0  # the time left shrinks between reports
    assert left_s(180.0, 0.5, None, reported_at=66.0) == 0.0
    late = clock_line("Quantizing", "int8", 180.0, 0.5, None, reported_at=66.0)
    assert "50% done, taking longer than the pace so far said" in late and "left" not in late


# a run measured on a quiet machine, and one beside other work (other programs took 1.5 cores while it ran)
QUIET = {"before": 0.1, "after": 0.3, "cores": 2, "others": 0.05}
BUSY = {"before": 5.0, "after": 6.0, "cores": 2}


def test_the_estimate_scales_the_last_run_by_the_work_asked():
    from ui.pace import expected

    runlog.save_result("test-scale", {"x": 1}, wall_s=40.0, work=4, settings={"load": QUIET})
    e = expected("test-scale", 2)
    assert (
        e is not None
        and abs(e.seconds - 20.0) < 1e-9
        and "took 40 s from the button to its result" in e.source
    )
    assert expected("test-never-run", 1) is None


def test_the_estimate_comes_from_the_run_most_like_this_one():
    """The presenter's walk: a race's clock read its estimate off the last race whatever its model; the run with the
    same settings decides now, the newest of the most alike when none matches them all."""
    from ui.pace import expected

    runlog.save_result(
        "test-alike", {}, wall_s=90.0, work=2, settings={"model": "big", "lanes": 2, "load": QUIET}
    )
    runlog.save_result(
        "test-alike", {}, wall_s=10.0, work=2, settings={"model": "small", "lanes": 2, "load": QUIET}
    )
    big = expected("test-alike", 2, {"model": "big", "lanes": 2})
    assert big is not None and big.seconds == 90.0 and big.source.startswith("the last quiet run here")
    other = expected("test-alike", 4, {"model": "big", "lanes": 4})
    assert other is not None and other.seconds == 180.0 and "other settings" in other.source
    assert expected("test-alike", 2).seconds == 50.0  # no settings given: the median of every quiet run
    # the presenter's walk: 'about 2.9 min left' for an 18 s run, read off a run made beside other work
    runlog.save_result(
        "test-quiet", {}, wall_s=20.0, work=1, settings={"model": "m", "load": {"before": 0.1}}
    )
    runlog.save_result("test-quiet", {}, wall_s=180.0, work=1, settings={"model": "m", "load": BUSY})
    e = expected("test-quiet", 1, {"model": "m"})
    assert e.seconds == 20.0 and "busy" not in e.source


def test_the_forecast_is_the_median_of_the_newest_quiet_runs_of_these_settings():
    """The presenter's quiet walk: Batching's clock read 'about 75 s left' off the last run (75 s, beside other
    work that its load readings missed) where its quiet runs took 4-6 s. The forecast is now the median of the
    newest runs of the same settings measured on a quiet machine, and says so; a busy run, or one whose load was
    not recorded, never sets it."""
    from ui.pace import FORECAST_RUNS, expected

    same = {"model": "m", "users": 6}
    for wall in (4.0, 5.0, 6.0, 75.0):  # the newest, 75 s, passed the load rule: the median leaves it out
        runlog.save_result("test-median", {}, wall_s=wall, work=2, settings={**same, "load": QUIET})
    runlog.save_result("test-median", {}, wall_s=90.0, work=2, settings={**same, "load": BUSY})
    runlog.save_result("test-median", {}, wall_s=80.0, work=2, settings=same)  # its load not recorded
    runlog.save_result(
        "test-median", {}, wall_s=1.0, work=2, settings={"model": "m", "users": 1, "load": QUIET}
    )
    e = expected("test-median", 4, same)
    assert e is not None and e.seconds == 2 * 5.5  # median of 4, 5, 6, 75 s for the work of 2, scaled to 4
    assert e.source.startswith("median of the last 4 quiet runs here: 5.5 s from the button to the result")
    # only the newest FORECAST_RUNS count: an old slow habit ages out
    for _ in range(FORECAST_RUNS):
        runlog.save_result("test-median", {}, wall_s=3.0, work=2, settings={**same, "load": QUIET})
    assert expected("test-median", 2, same).seconds == 3.0
    # nothing quiet recorded: no forecast (the clock says so) rather than a busy run's time
    runlog.save_result("test-busy-only", {}, wall_s=180.0, work=1, settings={"load": BUSY})
    assert expected("test-busy-only", 1) is None
    from ui.pace import clock_line

    assert "no earlier run on a quiet machine here" in clock_line("Replaying", "", 3.0, 0.0, None)


def test_the_run_log_is_keyed_by_the_browser_session():
    from tests.factories import synthetic_run

    runlog.record(synthetic_run("sess-model", "fp32", 0.1, 0.01), source="playground", session="aaaaaaaaaaaa")
    runlog.record(synthetic_run("sess-model", "fp32", 0.2, 0.02), source="playground", session="bbbbbbbbbbbb")
    mine = runlog.load("sess-model", session="aaaaaaaaaaaa")
    assert [m.ttft_s for m in mine] == [0.1]
    assert len(runlog.load("sess-model")) == 2
    runlog.save_result("test-sess", {"n": 1}, wall_s=1.0, session="aaaaaaaaaaaa")
    runlog.save_result("test-sess", {"n": 2}, wall_s=1.0, session="bbbbbbbbbbbb")
    assert runlog.last_result("test-sess", session="aaaaaaaaaaaa").payload == {"n": 1}
    assert runlog.last_result("test-sess").payload == {"n": 2}


def test_a_stored_dataclass_comes_back_whole():
    from engine.batching.sweep import Sweep, SweepPoint
    from engine.core.jsonsafe import from_jsonable

    sweep = Sweep(
        "m", 8, 32, (SweepPoint(1, 10.0, 2.0, float("nan"), 0.1, 9.0, 2.1, 5),), 3, 1e9, False, 1.0, 2.0
    )
    runlog.save_result("test-sweep", sweep, wall_s=3.0)
    back = runlog.last_result("test-sweep").decoded(Sweep)
    assert back.points[0].batch == 1 and back.points[0].tokens_per_s == 10.0
    assert back.points[0].tpot_s != back.points[0].tpot_s  # NaN (stored as null) comes back as NaN
    assert from_jsonable(tuple[int, ...], [1, 2]) == (1, 2)


def _race(started: str):
    from tests.test_pages_race import _recorded_race

    d = _recorded_race(0.5, None)
    d["started_at"] = started
    return d


def _this_machines_race(at: AppTest) -> bool:
    """The page's own race section (the recorded benchmark races below it are drawn in every case)."""
    return any(s.value in ("Live run (this machine)", "Race (this machine)") for s in at.subheader)


def test_a_reload_keeps_the_sessions_race():
    """A reload is a new Streamlit session with the same URL: the session's key in it finds its race again."""
    at = AppTest.from_file(str(ROOT / "pages/5_Latency_race.py"), default_timeout=120).run()
    sid = at.session_state["lab.session"]
    assert len(sid) == 12
    runlog.save_result("race", _race("2026-12-02T09:00:00+00:00"), wall_s=42.0, session=sid)
    reloaded = AppTest.from_file(str(ROOT / "pages/5_Latency_race.py"), default_timeout=120)
    reloaded.query_params["session"] = sid
    reloaded.run()
    assert not reloaded.exception
    assert any("kept across the page reload" in i.value for i in reloaded.info)
    assert _this_machines_race(reloaded)
    # another browser gets nothing of it (presenter mode off)
    other = AppTest.from_file(str(ROOT / "pages/5_Latency_race.py"), default_timeout=120).run()
    assert not _this_machines_race(other)


def test_presenter_mode_opens_on_the_last_recorded_run_with_its_date():
    runlog.save_result("race", _race("2026-12-02T09:30:00+00:00"), wall_s=55.0, session="cccccccccccc")
    at = AppTest.from_file(str(ROOT / "pages/5_Latency_race.py"), default_timeout=120)
    at.query_params["presenter"] = "1"
    at.run()
    assert not at.exception
    note = next(i.value for i in at.info if i.value.startswith("Presenter mode"))
    assert "the last run recorded on this machine" in note and " UTC" in note and "not live" in note
    assert _this_machines_race(at)
    assert at.sidebar.toggle(key="lab.presenter_switch").value is True


def test_presenter_mode_prefers_the_last_run_taken_on_a_quiet_machine():
    """The presenter's walk: presenter mode opened on a race run under load (its ratios carried other work's
    share of the CPU), with a quiet run of the day before in the log and no way to pin it."""
    from engine.calc import format as fmt

    quiet = {"load": {"before": 0.5, "after": 2.4, "cores": 2}}
    busy = {"load": {"before": 6.0, "after": 8.0, "cores": 2}}
    runlog.save_result(
        "race", _race("2026-12-01T09:00:00+00:00"), wall_s=40.0, session="a" * 12, settings=quiet
    )
    runlog.save_result(
        "race", _race("2026-12-02T09:00:00+00:00"), wall_s=90.0, session="b" * 12, settings=busy
    )
    # a run that recorded no load is not known to be quiet (the presenter's walk: one such run was called quiet)
    runlog.save_result("race", _race("2026-12-03T09:00:00+00:00"), wall_s=70.0, session="c" * 12)
    at = AppTest.from_file(str(ROOT / "pages/5_Latency_race.py"), default_timeout=120)
    at.query_params["presenter"] = "1"
    at.run()
    assert not at.exception
    note = next(i.value for i in at.info if i.value.startswith("Presenter mode"))
    assert "with these settings and no other work at their start or their end" in note, note
    assert f"it took {fmt.seconds(40.0)} from the button to its result" in note, note
    assert not any("busy machine" in w.value for w in at.warning)


def test_a_long_run_shows_the_clock_while_it_runs():
    def script():
        import time

        import streamlit as st

        from ui import pace

        def work(report):
            for k in range(4):
                report(k / 4, f"step {k}")
                time.sleep(0.4)
            return 7

        st.session_state["got"] = pace.run_experiment("test-clock", "Working", work, size=1)

    at = AppTest.from_function(script, default_timeout=30).run()
    assert at.session_state["got"] == 7 and not at.exception
    stored = runlog.last_result("test-clock")
    assert stored is not None and stored.wall_s >= 1.2 and stored.session is not None


def test_a_stored_date_reads_as_a_person_reads_it():
    assert runlog.readable_date("2026-12-02T09:24:32+00:00") == "2026-12-02 09:24 UTC"
    assert runlog.readable_date("2026-12-02T10:24:32+01:00") == "2026-12-02 09:24 UTC"
    assert runlog.readable_date("not a date") == "not a date"


@pytest.mark.slow
def test_a_server_start_runs_under_the_clock_and_is_timed_for_the_next():
    """The Serving page's Start waited behind a spinner with no clock (walkthrough, issue 33): it now runs under the
    page clock, and its time is stored so the next start says how long the last one took."""
    from ui.serving_server import start_experiment

    before = runlog.last_result(start_experiment("engine"))
    at = AppTest.from_file(str(ROOT / "pages/8_Serving.py"), default_timeout=300).run()
    at.selectbox(key="serving.engine_model").set_value("tiny-gpt-neo").run()
    at.button(key="serving.start").click().run()
    try:
        assert not at.exception and not at.error, [e.value for e in at.error]
        assert any("serving **tiny-gpt-neo**" in s.value for s in at.success)
        after = runlog.last_result(start_experiment("engine"))
        assert after is not None and after != before and after.wall_s > 0
        assert after.payload == {"model": "tiny-gpt-neo"}
    finally:
        at.button(key="serving.stop").click().run()
    assert not at.exception


def test_the_playgrounds_running_line_says_what_is_left():
    """Home promises 'the time so far and what is left'; the Playground's line said '13 / 64 tokens · 2.26 s
    elapsed · 5.8 tok/s' and nothing of what was left."""
    from ui.playground_widgets import progress_text

    line = progress_text(13, 64, 2.26)
    assert "2.26 s elapsed" in line and "about 8.87 s left (sooner if the model stops early)" in line
    assert "left" not in progress_text(0, 64, 0.5) and "left" not in progress_text(64, 64, 10.0)
    # the presenter's walk, cache off: 'at most about 26.9 s left' at 25.3 s, 63 s before the end, the forecast
    # (56.2 s) saying more: what is left is the larger of the two, and past the forecast the line says so
    line = progress_text(31, 64, 25.3, expected_s=56.2)
    assert "about 29 s left" in line and "at most" not in line  # the forecast's share for 33 of 64 tokens
    assert "longer than the forecast (56.2 s)" in progress_text(50, 64, 63.3, expected_s=56.2)
    # the third walk: near the end the rate decides ('60 / 64 · 1.0 tok/s · about 24.3 s left' ended 3 s later),
    # and one token (the prompt's) gives no rate to count down by
    assert "about 5 s left" in progress_text(60, 64, 60.0, expected_s=80.0)  # not 20 s: the last 4 tokens
    assert "min left" not in progress_text(1, 64, 3.88)


def test_a_cache_off_clock_counts_down_steadily_as_each_token_costs_more():
    """A student's walk: with the KV cache off the clock swung, because each token costs more than the last (it
    recomputes the prompt and every token before it) while the line read what was left off the rate so far. A run
    whose token j costs c x (prompt + j) now reads the truth at every token, and never goes up."""
    import re

    from ui.playground_widgets import progress_text, work_split

    prompt, total, c = 265, 64, 1e-3
    positions = [prompt + j for j in range(total)]
    said = []
    for k in range(2, total):
        elapsed = c * sum(positions[:k])
        truth = c * sum(positions[k:])
        assert work_split(k, total, prompt, use_cache=False)[1] * c == pytest.approx(truth)
        line = progress_text(k, total, elapsed, prompt_tokens=prompt, use_cache=False)
        value, unit = re.search(r"about ([\d.]+) (ms|s) left", line).groups()
        left = float(value) / (1000 if unit == "ms" else 1)
        assert left == pytest.approx(truth, rel=0.02, abs=0.01)
        said.append(left)
    assert said == sorted(said, reverse=True)
    # with the cache on, a token costs what the last did: the rate so far, as before
    assert "about 8.87 s left" in progress_text(13, 64, 2.26, prompt_tokens=prompt, use_cache=True)


def test_before_its_first_token_a_run_counts_down_from_its_forecast():
    """A presenter's cache-off run said '0 / 64 tokens · 8.05 s elapsed · 0.0 tok/s · waiting for the first token'
    for minutes: with no rate yet, the line now counts down from the forecast (scaled to the load now)."""
    from ui.playground_widgets import live_line

    line = live_line(0, 64, 8.05, None, expected_s=40.0)
    assert "waiting for the first token" in line and "about 31.9 s left by the forecast" in line
    assert "longer than the forecast (40 s)" in live_line(0, 64, 50.0, None, expected_s=40.0)
    assert "forecast" not in live_line(0, 64, 8.05, None) and "forecast" not in live_line(
        3, 64, 9.0, None, 40.0
    )


def test_a_result_measured_busy_says_so_beside_it_live_reloaded_or_presented(monkeypatch):
    """The quantization and speculative verdicts ('int8 ... 15.93x slower') gave no word that the machine was busy
    (the race's did): every experiment run through the clock now records the load before and after it, and a
    busy run says so above its result, in this session, after a reload and in presenter mode."""
    from ui import pace

    quiet = {"before": 0.4, "after": 3.9, "cores": 2}  # at the end the run's own 2 threads are in the average
    busy = {"before": 1.2, "after": 6.5, "cores": 2}
    assert pace.load_note(quiet) == "" and pace.load_note(None) == ""
    said = pace.load_note(busy)
    assert "busy machine (load average 1.2 → 6.5 on 2 cores" in said and "rerun on a quieter machine" in said
    assert pace.load_note({"before": 2.5, "after": 2.0, "cores": 2})  # busy before it started


def test_a_kept_result_says_what_it_was_run_with_and_whether_the_inputs_now_are_those():
    """The student's reload: a kept result sat under inputs reset to their defaults and passed for theirs; its
    line says what it was run with, and which inputs on the page now differ (or that they are the same)."""
    from ui.pace import ran_with

    kept = {"model": "tiny", "sizes": [1, 2], "max_new_tokens": 4, "load": {"before": 0.1}}
    said = ran_with(kept, {"model": "tiny", "sizes": [1, 2, 4, 8], "max_new_tokens": 32})
    assert said.startswith("It was run with model tiny, sizes 1, 2, max new tokens 4.") and "load" not in said
    assert said.endswith("The inputs on this page now are **not** these (sizes, max new tokens differ).")
    assert ran_with(kept, {"model": "tiny", "sizes": (1, 2), "max_new_tokens": 4}).endswith("are the same.")
    assert "may not be these" in ran_with(kept, None)
    assert "may not be these" in ran_with({"k": 2}, {"k": 2, "text": "other"})  # its text was not stored
    assert ran_with({"load": {}}, {"k": 1}) == ""
    long = ran_with({"prompt": "def f(x):\n    return x " * 10}, None)
    assert "\n" not in long and "…”" in long


def test_the_time_left_does_not_jump_up_between_coarse_reports():
    """The presenter's walk: a bar read 'about 40 s left', then 'about 90 s left', then back, as coarse progress
    reports moved the pace so far. A higher estimate now goes on counting the shown one down until it has held
    for RISE_HOLD_S; a lower one is shown at once."""
    from ui.pace import RISE_HOLD_S, SmoothedLeft, clock_line

    smooth = SmoothedLeft()
    assert smooth(10.0, 40.0) == 40.0
    assert smooth(10.5, 90.0) == 39.5  # the jump is not shown: the countdown goes on
    assert smooth(11.0, 89.5) == 39.0
    assert smooth(11.5, 30.0) == 30.0  # lower: at once
    assert smooth(12.0, 29.5) == 29.5
    # a higher estimate that holds is believed after RISE_HOLD_S
    t, shown = 12.0, []
    while t < 12.0 + RISE_HOLD_S + 1.0:
        t += 0.5
        shown.append(smooth(t, 80.0))
    assert shown[0] == 29.0 and shown[-1] == 80.0 and max(shown[:-3]) < 80.0
    assert (
        smooth(t + 0.5, None) is None
    )  # nothing to go by: nothing shown, and the next estimate starts afresh
    # the bar's words use it: the pace so far said 94.5 s half a second after 40 s
    bar = SmoothedLeft()
    clock_line("Racing", "", 10.0, 0.2, None, smooth=bar)  # 10 s for 20%: 40 s left
    assert "about 94.5 s left" in clock_line("Racing", "", 10.5, 0.1, None)  # unsteadied: the jump
    assert "about 39.5 s left" in clock_line("Racing", "", 10.5, 0.1, None, smooth=bar)


def test_a_run_is_judged_busy_by_what_other_programs_took_while_it_ran():
    """The presenter's quiet walk: at the tour's own pace the race and quantization called no verdict, 'measured on
    a busy machine', the 1-minute load average (2.5, 2.0) still holding the lab's own previous stop. A run now stores
    the cores' worth of CPU other processes took while it ran, and that decides where it was measured."""
    from engine.core.load import cpu_seconds, others_during
    from ui.pace import load_note

    lingering = {"before": 2.5, "after": 3.0, "cores": 2}
    assert load_note(lingering)  # without the measurement, the load averages decide, as before
    assert load_note({**lingering, "others": 0.1}) == ""
    busy = load_note({"before": 0.2, "after": 1.0, "cores": 2, "others": 1.2})
    assert "other programs took 1.2 cores' worth of CPU" in busy
    before = cpu_seconds()
    if before is not None:  # Linux: /proc/stat
        took = others_during(before, 0.5)
        assert math.isfinite(took) and took >= 0


def test_a_time_left_never_stands_still_and_near_zero_says_about_to_finish():
    """The presenter's walk: the speculative run's bar read 'about 4.35 s left' from 10.1 s to 13.1 s elapsed, the
    countdown paused while a higher estimate waited to be believed. What is shown now falls with every redraw
    until that estimate has held; at the end of the count the bar says the run is about to finish."""
    from itertools import pairwise

    from ui.pace import RISE_HOLD_S, Expected, SmoothedLeft, clock_line

    smooth = SmoothedLeft()
    t, shown = 10.1, [smooth(10.1, 4.35)]
    while t < 10.1 + RISE_HOLD_S - 0.5:
        t += 0.5
        shown.append(smooth(t, 8.0))  # higher, and not yet believed
    assert all(b < a for a, b in pairwise(shown)), shown  # falls at every redraw
    assert shown[-1] == 0.0  # counted down to the end
    guess = Expected(20.0, "the last quiet run here")
    bar = SmoothedLeft()
    clock_line("Measuring", "", 19.0, 0.0, guess, smooth=bar)  # 1 s left by the forecast
    assert "about to finish (the last quiet run here)" in clock_line(
        "Measuring", "", 19.7, 0.0, guess, smooth=bar
    )
    assert "about to finish (at the pace so far)" in clock_line("Racing", "", 9.8, 0.98, None)


def test_presenter_mode_shows_the_tours_recording_first(monkeypatch, tmp_path):
    """The presenter's walk: presenter mode replayed whatever anyone ran last (a 0-shot run with other settings on
    Few-shot). The tour benchmark names its own session's runs as the recording (runlog.set_curated_session), and
    presenter mode shows that session's quiet run first, saying so; without one, the rule is as before."""
    from engine.runtime import runlog
    from ui import pace

    monkeypatch.setenv("INFERENCE_LAB_RUNS_DIR", str(tmp_path))
    quiet = {"before": 0.2, "after": 0.3, "cores": 2, "others": 0.0}
    runlog.save_result("x", {"v": 1}, wall_s=1.0, session="aaaaaaaaaaaa", settings={"load": quiet})
    runlog.save_result("x", {"v": 2}, wall_s=0.5, session="bbbbbbbbbbbb", settings={"load": quiet})
    best, which = pace.presented("x")
    assert best.payload == {"v": 2} and "quickest" in which  # no recording named: the rule as before
    assert runlog.set_curated_session("aaaaaaaaaaaa")
    best, which = pace.presented("x")
    assert best.payload == {"v": 1} and which.startswith("the tour's recording on this machine")
