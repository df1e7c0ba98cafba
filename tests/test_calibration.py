"""Calibration: the fit recovers known parameters from noisy synthetic runs, a slow run does not move it, the
interval covers, load is detected, storage round-trips, and the command is wired. No timing asserts."""

from __future__ import annotations

import math
import random
import time
from types import SimpleNamespace

import pytest

from engine import calibration as cal_mod
from engine.calc import model_preset
from engine.calc.timing import Efficiency
from engine.calibration import (
    CALIBRATION_SHAPES,
    SHORT_DEPTH,
    RunSample,
    build_calibration,
    compare_run,
    load_calibration,
    machine_spec,
    predict,
    predict_interval,
    save_calibration,
)
from engine.calibration.fit import efficiency_of, features, fit_precisions, gemv_factor, predict_point
from engine.calibration.runs import LoadMeter, gemm_curve, gemv_curve, load_reading, tpot_from_steps
from tests.factories import synthetic_run

MACHINE = machine_spec(55e9, {"fp32": 200e9, "bf16": 400e9}, memory_bytes=24e9)
SMOL = model_preset("smollm2-135m")
NEO = model_preset("gpt-neo-125m")
# [s/byte, s/layer, s per extra-sequence FLOP, s/FLOP, prefill fixed s]: a CPU-like machine
TRUE = {
    "fp32": [1 / 12e9, 4e-4, 1 / 30e9, 1 / 80e9, 5e-3],
    "bf16": [1 / 9e9, 5e-4, 1 / 20e9, 1 / 60e9, 6e-3],
}


def _runs(truth=TRUE, *, repeats=3, noise=0.03, seed=0, outlier=None):
    """Every calibration shape at two depths, `repeats` times, each time slowed by up to `noise` (noise only
    adds time). `outlier`: (dtype, shape index, factor) slows one run of one shape by `factor`."""
    rng = random.Random(seed)
    out = []
    for rep in range(repeats):
        for dt, coef in truth.items():
            for i, sh in enumerate(CALIBRATION_SHAPES):
                for depth in (None, SHORT_DEPTH):
                    f = features(SMOL, dt, sh.prompt_tokens, sh.output_tokens, sh.batch_size, depth)
                    ttft, tpot = predict_point(coef, f)
                    slow = 1.0
                    if outlier and rep == 0 and depth is None and (dt, i) == outlier[:2]:
                        slow = outlier[2]
                    out.append(
                        RunSample(
                            dt,
                            sh.batch_size,
                            sh.prompt_tokens,
                            sh.output_tokens,
                            ttft * (1 + rng.uniform(0, noise)) * slow,
                            tpot * (1 + rng.uniform(0, noise)) * slow,
                            n_layer=depth,
                            loadavg_1m=1.0,
                            cpu_share=0.95,
                        )
                    )
    return out


def test_fit_recovers_known_parameters_from_noisy_runs():
    fits, notes = fit_precisions(SMOL, _runs())
    for dt, coef in TRUE.items():
        got = fits[dt].coefficients
        assert got[0] == pytest.approx(coef[0], rel=0.08), "achieved bandwidth"
        assert got[1] == pytest.approx(coef[1], rel=0.25), "per-layer cost"
        assert got[2] == pytest.approx(coef[2], rel=0.25), "extra sequence cost"
        assert got[3] == pytest.approx(coef[3], rel=0.08), "prefill FLOP/s"
        assert not fits[dt].pooled
    assert not any("pooled" in n or "shared" in n for n in notes)


def test_a_slow_outlier_run_does_not_move_the_fit():
    clean, _ = fit_precisions(SMOL, _runs(noise=0.0))
    slowed, _ = fit_precisions(SMOL, _runs(noise=0.0, outlier=("fp32", 0, 3.0)))
    assert slowed["fp32"].coefficients == pytest.approx(clean["fp32"].coefficients, rel=1e-9)
    # a shape slow in every repeat is dropped as an outlier and the rest still recover the parameters
    every = [
        RunSample(
            s.dtype, s.batch_size, s.prompt_tokens, s.output_tokens, s.ttft_s, s.step_s * 2.5, s.n_layer
        )
        if (s.dtype, s.prompt_tokens, s.batch_size, s.n_layer) == ("fp32", 128, 1, None)
        else s
        for s in _runs(noise=0.01)
    ]
    fits, notes = fit_precisions(SMOL, every)
    assert fits["fp32"].dropped >= 1 and any("outliers" in n for n in notes)
    assert fits["fp32"].coefficients[0] == pytest.approx(TRUE["fp32"][0], rel=0.1)


def test_interval_covers_an_unseen_shape():
    cal = build_calibration(SMOL, _runs(noise=0.05, seed=3), MACHINE, model="smollm2-135m-instruct")
    for dt, coef in TRUE.items():
        for batch in (1, 4):
            truth_ttft, truth_tpot = predict_point(coef, features(NEO, dt, 64, 16, batch))
            p = predict_interval(cal, NEO, dtype=dt, prompt_tokens=64, output_tokens=16, batch=batch)
            assert p.tpot.low <= p.tpot.central <= p.tpot.high and p.ttft.low <= p.ttft.central <= p.ttft.high
            # runs are truth slowed by 0..5%, fastest of 3 kept: the expected measurement is truth x 1.0125
            assert p.tpot.covers(truth_tpot * 1.0125) and p.ttft.covers(truth_ttft * 1.0125), (dt, batch, p)
            assert p.tpot.high / p.tpot.low < 1.5  # and it is informative
    with pytest.raises(Exception, match="batch"):
        predict_interval(cal, NEO, dtype="fp32", prompt_tokens=64, output_tokens=16, batch=0)


def test_load_is_detected():
    quiet = load_reading(cpu_s=1.9, wall_s=1.0, threads=2, loadavg=0.5)
    assert not quiet.busy and quiet.cpu_share == pytest.approx(0.95)
    assert load_reading(cpu_s=0.6, wall_s=1.0, threads=2, loadavg=0.5).busy  # this process waited for the CPU
    assert load_reading(cpu_s=2.0, wall_s=1.0, threads=2, loadavg=9.0).busy  # more runnable tasks than cores
    with LoadMeter(threads=1) as m:
        time.sleep(0.05)  # sleeping uses no CPU: the meter must see a share far below 1
    assert m.reading is not None and m.reading.cpu_share < 0.5 and m.reading.busy
    assert "load average" in m.reading.describe()
    samples = _runs(repeats=1)
    samples[0] = RunSample(**{**samples[0].__dict__, "cpu_share": 0.2})
    cal = build_calibration(SMOL, samples, MACHINE, model="m")
    assert cal.load is not None and cal.load.busy_runs >= 1
    assert any("slowed by other work" in n for n in cal.notes)


def test_tpot_from_steps_ignores_a_step_that_lost_the_cpu():
    steps = [0.0, 0.01, 0.02, 0.03, 0.53, 0.54, 0.55]  # one 500 ms stall
    assert tpot_from_steps(steps) == pytest.approx(0.01)
    assert math.isnan(tpot_from_steps([0.0]))


def test_saved_per_machine_with_date_and_round_trips(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path))
    assert load_calibration() is None
    cal = build_calibration(
        SMOL, _runs(repeats=2), MACHINE, model="m", created_at="2026-11-29T12:00:00+00:00"
    )
    path = save_calibration(cal)
    assert path.parent == tmp_path / "calibration" and path.suffix == ".json"
    again = load_calibration()
    assert again is not None and again.created_at.startswith("2026-11-29")
    assert again.fits == cal.fits and again.load == cal.load and again.notes == cal.notes
    assert len(again.samples) == len(cal.samples)
    p1 = predict_interval(cal, NEO, dtype="bf16", prompt_tokens=64, output_tokens=16)
    p2 = predict_interval(again, NEO, dtype="bf16", prompt_tokens=64, output_tokens=16)
    assert p1.tpot == p2.tpot and p1.ttft == p2.ttft
    import json

    raw = json.loads(path.read_text(encoding="utf-8"))  # a file saved before `tpot_s` was named `step_s`
    raw["samples"] = [{("tpot_s" if k == "step_s" else k): v for k, v in s.items()} for s in raw["samples"]]
    path.write_text(json.dumps(raw), encoding="utf-8")
    older = load_calibration()
    assert older is not None and [s.step_s for s in older.samples] == [s.step_s for s in cal.samples]
    path.write_text("{not json", encoding="utf-8")
    assert load_calibration() is None  # a torn file means datasheet mode, not a crash
    path.write_text('{"machine_id": "x", "bandwidth_efficiency": 0.3}', encoding="utf-8")
    assert load_calibration() is None  # an older format too


def test_one_depth_pools_precisions_and_transfers_the_operator_model():
    """Runs at one depth (an old-style calibration): bandwidth efficiency and per-layer cost are shared by
    the precisions, which recovers them exactly when the machine behaves as the calculator's model."""
    true = {"fp32": Efficiency(0.22, 0.45, 4e-4), "bf16": Efficiency(0.22, 0.30, 4e-4)}
    samples = []
    for dt, eff in true.items():
        ttft, tpot = predict(SMOL, RunSample(dt, 1, 64, 32, 0, 0), MACHINE, eff)
        samples.append(RunSample(dt, 1, 64, 32, ttft, tpot))
    cal = build_calibration(SMOL, samples, MACHINE, model="smollm2-135m-instruct")
    assert any("shared" in n for n in cal.notes)
    for dt, eff in true.items():
        got = cal.efficiency(dt)
        assert got.bandwidth == pytest.approx(0.22, rel=1e-3)
        assert got.step_overhead_s_per_layer == pytest.approx(4e-4, rel=1e-3)
        s = RunSample(dt, 1, 64, 32, 0, 0)
        assert predict(NEO, s, MACHINE, got)[1] == pytest.approx(predict(NEO, s, MACHINE, eff)[1], rel=1e-3)
    assert cal.efficiency("fp16") == cal.efficiency("bf16")  # borrowed, as the docstring says


def test_compare_run_reports_ratios_and_interval():
    cal = build_calibration(SMOL, _runs(noise=0.0), MACHINE, model="m")
    ttft, tpot = predict_point(TRUE["bf16"], features(NEO, "bf16", 64, 32, 1))
    m = SimpleNamespace(
        model="gpt-neo-125m-random",
        dtype="bf16",
        batch_size=1,
        prompt_tokens=64,
        output_tokens=32,
        ttft_s=ttft,
        tpot_s=tpot,
        use_cache=True,
        started_at="2026-11-29T00:00:00+00:00",
    )
    c = compare_run(m, MACHINE, cal)
    assert c is not None
    assert c.ratio("calibrated", "tpot") == pytest.approx(1.0, rel=1e-3)
    assert c.ratio("calibrated", "ttft") == pytest.approx(1.0, rel=1e-3)
    assert c.calibrated_tpot_interval is not None and c.calibrated_tpot_interval.covers(c.calibrated_tpot_s)
    assert c.ratio("datasheet", "tpot") < 0.5  # peak bandwidth is optimistic
    assert compare_run(SimpleNamespace(**{**m.__dict__, "tpot_s": math.nan}), MACHINE, cal) is None


def test_spec_for_engine_presets():
    assert cal_mod.spec_for_run_model("smollm2-135m-instruct").n_kv_head == 3
    neo = cal_mod.spec_for_run_model("gpt-neo-125m-random")
    assert neo is not None and neo.n_layer == 12 and neo.window_layers == 6
    assert cal_mod.spec_for_run_model("no-such-model") is None


def test_calibrate_command_wiring(tmp_path, monkeypatch, capsys):
    """`python -m engine calibrate` end to end with the runs and the machine replaced by synthetic ones."""
    from engine.calibration import build as calibration_build
    from engine.calibration import machine
    from engine.calibration import runs as calibration_runs
    from engine.calibration.runs import TimedRun
    from engine.cli import main

    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path))

    def fake_measure(lms, shapes, **kw):
        return [
            TimedRun(
                "smollm2-135m-instruct",
                s.dtype,
                s.prompt_tokens,
                s.output_tokens,
                s.batch_size,
                s.ttft_s,
                s.step_s,
                s.step_s,
                0.5,
                0.97,
                s.n_layer or 30,
            )
            for s in _runs(repeats=2)
        ]

    roofs = machine.MachineMeasurement(
        machine.paths.machine_id(),
        "2026-11-29T00:00:00+00:00",
        "cpu",
        "this machine (measured)",
        55e9,
        50e9,
        {"fp32": 200e9, "bf16": 400e9},
        1024,
        24e9,
    )
    monkeypatch.setattr(calibration_runs, "measure", fake_measure)
    monkeypatch.setattr(calibration_runs, "gemv_curve", lambda dtypes: {})  # synthetic runs: no curve
    monkeypatch.setattr(calibration_runs, "gemm_curve", lambda dtypes: {})
    # where calibrate looks it up (the package re-exports it; patching the re-export loaded the real models)
    monkeypatch.setattr(calibration_build, "load_models", lambda *a, **k: [])
    monkeypatch.setattr(machine, "measure", lambda dtypes=(), store=True: roofs)
    assert main(["calibrate"]) == 0
    out = capsys.readouterr().out
    assert "stored in" in out and "GB/s achieved" in out and "ms per layer" in out
    stored = load_calibration()
    assert stored is not None and stored.model == "smollm2-135m-instruct"
    assert stored.fits["bf16"].coefficients[0] == pytest.approx(TRUE["bf16"][0], rel=0.1)
    assert machine.latest() is not None  # the roofs it was fitted against are the stored machine measurement


def test_one_machine_measurement_stored_with_its_date(tmp_path, monkeypatch):
    from engine.calibration import machine

    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path))
    assert machine.latest() is None
    m = machine.MachineMeasurement(
        machine.paths.machine_id(),
        "2026-11-30T00:00:00+00:00",
        "cpu",
        "this machine (measured)",
        40e9,
        30e9,
        {"fp32": 100e9, "bf16": 300e9},
        1024,
        24e9,
        0.5,
    )
    machine.save(m)
    assert machine.latest() == m
    spec = m.gpu_spec()
    assert spec.bandwidth_bytes_per_s == 40e9 and spec.flops_for("bf16") == 300e9
    assert machine.best_of(m, m) == m
    # the calculator's "this machine" falls back on the stored measurement when there is no calibration
    assert cal_mod.this_machine_gpu(measure_if_missing=False).bandwidth_bytes_per_s == 40e9
    assert synthetic_run("x", "fp32", 0.1, 0.01).tpot_s == 0.01  # the shared factory still builds runs


def test_a_wild_residual_cannot_make_an_interval_negative():
    from engine.calibration.fit import PrecisionFit
    from engine.calibration.fit import predict as fit_predict

    fit = PrecisionFit(
        "fp32",
        *TRUE["fp32"],
        decode_residuals=[-0.99, 5.0],
        prefill_residuals=[-1.5, 0.0],
        replicates=[TRUE["fp32"]] * 50,
    )
    ttft, tpot = fit_predict(fit, NEO, prompt=64, output=16)
    assert ttft.low > 0 and tpot.low > 0 and tpot.high <= tpot.central * 10 + 1e-12


# a CPU whose matrix-vector products stream faster the wider their inner dimension (as measured here: 576-wide
# matmuls about 15 GB/s, 2048-wide 23, 8192-wide 28), and whose matrix products speed up with rows
GEMV = {"fp32": [[256, 11e9], [512, 15e9], [1024, 22e9], [2048, 23.5e9], [4096, 27.5e9], [8192, 28.5e9]]}
GEMM = {"fp32": [[1, 21e9], [8, 35e9], [32, 86e9], [128, 145e9], [512, 162e9]]}


def test_gemv_factor_interpolates_in_log_k_and_holds_flat_beyond():
    curve = [[512, 10e9], [2048, 20e9]]
    assert gemv_factor(curve, 2048) == 1.0 and gemv_factor(curve, 512) == pytest.approx(2.0)
    assert gemv_factor(curve, 1024) == pytest.approx(20 / 15)  # halfway in log2
    assert gemv_factor(curve, 128) == pytest.approx(2.0) and gemv_factor(curve, 1 << 14) == 1.0
    assert gemv_factor([], 576) == 1.0 and gemv_factor(curve, 0) == 1.0


def test_measured_curves_carry_a_fit_on_a_narrow_model_to_a_wide_one():
    """Truth: every weight byte at the curve's rate for its K, a prefill at the curve's rate for its rows. A fit
    on SmolLM2 (576 wide, prompts 32 and 128) with the curves predicts GPT-Neo 1.3B (2048 wide) within 3%;
    without them it takes SmolLM2's slow narrow matmuls for the machine and misses by more than 15%."""
    best = max(r for _, r in GEMV["fp32"])
    truth = {"fp32": [1 / best, 3e-4, 1 / 30e9, 1 / 150e9, 5e-3]}
    rng = random.Random(0)
    runs = []
    for _ in range(3):
        for sh in CALIBRATION_SHAPES:
            for depth in (None, SHORT_DEPTH):
                f = features(
                    SMOL,
                    "fp32",
                    sh.prompt_tokens,
                    sh.output_tokens,
                    sh.batch_size,
                    depth,
                    GEMV["fp32"],
                    GEMM["fp32"],
                )
                ttft, tpot = predict_point(truth["fp32"], f)
                noise = 1 + rng.uniform(0, 0.02)
                runs.append(
                    RunSample(
                        "fp32",
                        sh.batch_size,
                        sh.prompt_tokens,
                        sh.output_tokens,
                        ttft * noise,
                        tpot * noise,
                        n_layer=depth,
                    )
                )
    big = model_preset("gpt-neo-1.3b")
    true_ttft, true_tpot = predict_point(
        truth["fp32"], features(big, "fp32", 32, 5, 1, None, GEMV["fp32"], GEMM["fp32"])
    )
    with_curves = build_calibration(SMOL, runs, MACHINE, model="smollm2-135m-instruct", gemv=GEMV, gemm=GEMM)
    p = predict_interval(with_curves, big, dtype="fp32", prompt_tokens=32, output_tokens=5)
    assert p.tpot.central / true_tpot == pytest.approx(1, abs=0.03)
    assert p.ttft.central / true_ttft == pytest.approx(1, abs=0.03)
    without = build_calibration(SMOL, runs, MACHINE, model="smollm2-135m-instruct")
    q = predict_interval(without, big, dtype="fp32", prompt_tokens=32, output_tokens=5)
    assert abs(q.tpot.central / true_tpot - 1) > 0.15
    # the calculator's calibrated efficiency for a model follows that model's matmul widths
    fit = with_curves.fits["fp32"]
    assert efficiency_of(fit, 30e9, 200e9, big).bandwidth > efficiency_of(fit, 30e9, 200e9, SMOL).bandwidth


def test_curves_are_measured_on_this_machine():
    v = gemv_curve(["fp32"], (256, 1024), repeats=1)
    m = gemm_curve(["fp32", "int4"], (1, 8), width=256, repeats=1)
    assert [k for k, _ in v["fp32"]] == [256, 1024] and all(r > 0 for _, r in v["fp32"])
    assert [k for k, _ in m["fp32"]] == [1, 8] and all(r > 0 for _, r in m["fp32"]) and "int4" not in m


def test_efficiency_at_makes_the_calculator_agree_with_the_fit():
    """The page's calibrated headline (calculator with efficiency_at) equals the fit's own prediction."""
    from engine.calc.timing import estimate_timing
    from engine.calibration import efficiency_at

    cal = build_calibration(SMOL, _runs(noise=0.02, seed=5), MACHINE, model="smollm2-135m-instruct")
    for batch in (1, 8):
        eff, pi = efficiency_at(
            cal, NEO, MACHINE, dtype="fp32", prompt_tokens=256, output_tokens=64, batch=batch
        )
        t = estimate_timing(
            NEO, MACHINE, dtype="fp32", batch=batch, prompt_tokens=256, output_tokens=64, eff=eff
        )
        assert t.ttft_s == pytest.approx(pi.ttft.central, rel=1e-3)
        assert t.decode_s_per_token == pytest.approx(pi.tpot.central, rel=1e-3)
        assert eff.label == "calibrated"
