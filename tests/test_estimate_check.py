"""Estimate against measurement over the median and spread of recent comparable runs, with
their sources, and an efficiency above 1 explained; and the pre-run forecast behind the playground's warning
(defect 4)."""

from __future__ import annotations

from engine.calc.specs import model_preset
from engine.calibration import check as estimate_check
from engine.calibration import machine_spec
from engine.runtime import runlog
from tests.factories import synthetic_run

MACHINE = machine_spec(20e9, {"fp32": 200e9}, memory_bytes=64e9)
SPEC = model_preset("gpt-neo-125m")


def spec_for(_name: str):
    return SPEC


def test_median_and_spread_of_comparable_runs_with_sources():
    runs = [
        synthetic_run("m", "fp32", 0.1, t, source=src)
        for t, src in ((0.010, "playground"), (0.030, "playground"), (0.020, "calibration"))
    ]
    runs.append(
        synthetic_run("m", "fp32", 0.1, 9.0, source="playground", stop_reason="cancelled")
    )  # never counts
    runs.append(synthetic_run("m", "fp32", 0.1, 0.02, prompt_tokens=4000))  # another shape: its own row
    rows = estimate_check.summarize(runs, MACHINE, spec_for=spec_for)
    main = next(r for r in rows if r.prompt_tokens == 40)
    assert main.n == 3 and main.tpot.median == 0.020
    assert (main.tpot.q1, main.tpot.q3) == (0.015, 0.025)
    assert main.sources == {"playground": 2, "calibration": 1}
    assert (
        "median of 3 run(s) (2 from the Playground, 1 from a calibration of this machine)"
        in main.explanation()
    )
    assert len(rows) == 2
    # shapes that differ only in length are told apart in their labels (the chart's bars are keyed on them: nine
    # rows of "tiny-gpt-neo fp32 b1" stacked into one bar beside three identical tiles)
    assert len({r.label for r in rows}) == 2 and any("4000+32 tok" in r.label for r in rows)


def test_efficiency_above_one_is_explained_and_flips():
    predicted = estimate_check.summarize([synthetic_run("m", "fp32", 0.1, 1.0)], MACHINE, spec_for=spec_for)[
        0
    ]
    roof_tpot = predicted.datasheet_tpot_s
    fast = estimate_check.summarize(
        [synthetic_run("m", "fp32", 0.1, roof_tpot / 2)], MACHINE, spec_for=spec_for
    )[0]
    slow = estimate_check.summarize(
        [synthetic_run("m", "fp32", 0.1, roof_tpot * 2)], MACHINE, spec_for=spec_for
    )[0]
    assert fast.tpot_efficiency > 1 and "faster than the roof allows" in fast.explanation()
    assert "caches" in fast.explanation()
    # without a calibration the roofs' bound is said to be a bound: no ratio drawn from it (engine.calibration.beside)
    assert slow.tpot_efficiency < 1 and "bound" in slow.explanation() and "no ratio" in slow.explanation()
    assert "reached 50% of the roof" not in slow.explanation()
    assert "fewer than 3 runs" in slow.explanation()


def test_runlog_keeps_source_and_drops_cancelled_from_comparisons():
    runlog.record(synthetic_run("prov-model", "fp32", 0.1, 0.01), source="playground", stop_reason="length")
    runlog.record(
        synthetic_run("prov-model", "fp32", 0.1, 0.01), source="playground", stop_reason="cancelled"
    )
    every = runlog.load("prov-model")
    assert [m.stop_reason for m in every] == ["length", "cancelled"] and every[0].source == "playground"
    assert [m.stop_reason for m in runlog.load("prov-model", comparable_only=True)] == ["length"]


def test_a_run_logged_without_its_load_is_stamped_with_the_load_it_ended_under(monkeypatch):
    """The Batching page's requests (the shared scheduler logs them) carried no load: measured at load 5.8 on 2
    cores during a walkthrough, they were compared (TPOT 2.2 s against an estimate of 155 ms, 'outside')."""
    from engine.core import load

    monkeypatch.setattr(load, "loadavg", lambda: (5.8, 5.0, 4.0))
    monkeypatch.setattr(runlog, "loadavg_1m", load.loadavg_1m)
    monkeypatch.setattr(runlog, "is_busy", lambda x: load.is_busy(x, 2))
    runlog.record(
        synthetic_run("stamp-model", "fp32", 0.1, 0.01, loadavg_1m=None, busy=None), source="batching"
    )
    runlog.record(
        synthetic_run("stamp-model", "fp32", 0.1, 0.01, loadavg_1m=0.5, busy=False), source="playground"
    )
    stamped, own = runlog.load("stamp-model")
    assert stamped.loadavg_1m == 5.8 and stamped.busy is True  # the load at logging time, by the one rule
    assert own.loadavg_1m == 0.5 and own.busy is False  # a run that carried its load keeps it


def test_forecast_grows_without_the_kv_cache_and_with_length():
    short = estimate_check.forecast_run(SPEC, "fp32", 8, 64, True, MACHINE)
    long = estimate_check.forecast_run(SPEC, "fp32", 8, 4096, True, MACHINE)
    off = estimate_check.forecast_run(SPEC, "fp32", 8, 4096, False, MACHINE)
    assert short.seconds < long.seconds < off.seconds
    assert long.seconds > 60  # 4096 tokens of a 125M model at 20 GB/s: minutes, so the page warns
    assert "KV cache off" in off.basis and not off.calibrated
    # a forecast is for every token asked: a run that stops at 30 of 64 looked like it beat "at least" the bound
    assert "all 64 new tokens (a run that stops early takes less)" in short.basis


def test_a_run_measured_busy_is_left_out_of_its_shapes_comparison():
    """The page says a run measured while the machine was busy is not compared, and a student found her busy
    Playground runs (load 5.3 on 2 cores) compared at 0.22x: the run log did not keep the load a run ended under.
    Now the quiet runs of a shape are compared, the busy ones counted out; a shape with only busy runs is not
    comparable."""
    quiet = [synthetic_run("m", "fp32", 0.1, t, loadavg_1m=0.8, busy=False) for t in (0.010, 0.012, 0.011)]
    busy = [synthetic_run("m", "fp32", 0.1, t, loadavg_1m=5.3, busy=True) for t in (0.050, 0.060)]
    [mixed] = estimate_check.summarize([*quiet, *busy], MACHINE, spec_for=spec_for)
    assert mixed.n == 3 and mixed.tpot.median == 0.011 and mixed.busy_left_out == 2
    assert not mixed.beside().busy
    assert "2 run(s) measured while the machine was busy left out" in mixed.explanation()
    [only_busy] = estimate_check.summarize(busy, MACHINE, spec_for=spec_for)
    assert only_busy.n == 2 and only_busy.beside().busy and only_busy.busy_left_out == 0
    assert "not comparable" in only_busy.explanation()


def test_the_run_log_keeps_the_load_a_run_ended_under(tiny_lm):
    from engine.runtime import run

    report = run.run(tiny_lm, "Hello", run.GenerationConfig(max_new_tokens=3), source="playground")
    logged = runlog.load()[-1]
    assert logged.loadavg_1m == report.load and logged.busy == report.busy


def test_the_track_records_machine_rows_read_a_stored_measurement_without_a_calibration(
    tmp_path, monkeypatch
):
    """`python -m engine trackrecord --rows --json` ended in a traceback ('MachineMeasurement' object has no
    attribute 'flops_for') on a machine measured but not calibrated: the measurement went where roofs belong."""
    from engine.calibration import machine
    from engine.core import paths
    from engine.trackrecord import this_machine

    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path))
    monkeypatch.setenv("INFERENCE_LAB_RUNS_DIR", str(tmp_path / "runs"))  # this test's run alone
    machine.save(
        machine.MachineMeasurement(
            paths.machine_id(),
            "2026-12-05T01:00:00+00:00",
            "cpu",
            "this machine (measured)",
            20e9,
            40e9,
            {"fp32": 2e11},
            512,
            24e9,
        )
    )
    runlog.record(synthetic_run("smollm2-135m-instruct", "fp32", 0.1, 0.02, loadavg_1m=0.5, busy=False))
    [row] = this_machine()
    assert row["runs"] == 1 and "smollm2" in row["shape"]


def test_a_measurement_that_recorded_no_load_is_not_compared():
    """The engineer's walk read three ratios (0.78x, 0.18x, 0.07x) beside runs logged before runs carried their
    load: they may have shared the CPU, so they get no ratio and say why."""
    import math

    from engine.calibration.beside import beside
    from engine.core.interval import Interval

    predicted = Interval(0.1, 0.155, 0.2)
    old = beside("TPOT", measured_s=2.2, predicted=predicted, loadavg_1m=math.nan)
    assert old.load_unknown and not old.comparable and old.ratio is None
    assert old.sentence() == (
        "Measured TPOT 2.2 s, with no record of the machine's load then: not compared with the calibrated estimate "
        "155 ms (95%: 100 ms–200 ms)."
    )
    quiet = beside("TPOT", measured_s=0.16, predicted=predicted, loadavg_1m=0.5, n_cores=2)
    assert not quiet.load_unknown and quiet.comparable and quiet.inside
    assert not beside(
        "TPOT", measured_s=None, predicted=predicted
    ).load_unknown  # a forecast measures nothing


def test_the_interval_beside_runs_measured_here_is_for_one_run_and_says_how_many_it_held(exact_calibration):
    """The engineer's walk (Memory and cost, this machine, calibrated): every shape's median measured TPOT fell
    outside its own '95%' interval. That interval was the fit's, made on each shape's fastest run, so an interval for
    the fastest run, which most runs on a shared machine sit above. Beside the runs it is now an interval for one
    more run (the point times the spread of measured / estimated over the runs compared), and the page says how
    many runs it held, each left out of the spread that judged it."""
    from engine.calibration.prediction import predict_interval

    spec, machine, cal = exact_calibration
    point = predict_interval(cal, spec, dtype="fp32", prompt_tokens=40, output_tokens=32).tpot.central
    factors = (0.95, 1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 1.8, 2.0, 2.4)  # a quiet machine's run-to-run spread
    runs = [synthetic_run("smollm2-135m-instruct", "fp32", 0.1, point * f) for f in factors]
    [shape] = estimate_check.summarize(runs, machine, cal, spec_for=lambda _: spec)
    lo, hi = shape.calibrated_tpot_interval
    assert (
        lo <= point * 1.25 <= hi and shape.beside().inside
    )  # the fit's own interval here is a point: outside
    spread = shape.run_spread
    assert spread is not None and spread.n == 10 and 8 <= spread.held <= 10
    assert f"it held {spread.held} of 10" in spread.sentence()
    assert "(one run here, 95%: " in shape.explanation()
    assert sum(lo <= point * f <= hi for f in factors) >= 8  # it holds most of the runs it sits beside
    # too few runs for a spread: the fit's interval, named for what it is
    [few] = estimate_check.summarize(runs[:3], machine, cal, spec_for=lambda _: spec)
    assert (
        few.run_spread is None and "(the fit's 95%, for the fastest of a shape's runs: " in few.explanation()
    )
    assert estimate_check.run_spread([few]) is None
