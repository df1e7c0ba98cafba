"""Calibration maths with synthetic runs (fast), storage per machine, and one real run (slow)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from engine import calibration as cal_mod
from engine.calc import model_preset
from engine.calc.timing import Efficiency
from engine.calibration import (
    RunSample,
    build_calibration,
    compare_run,
    load_calibration,
    machine_spec,
    predict,
    save_calibration,
)
from tests.factories import synthetic_run

MACHINE = machine_spec(55e9, {"fp32": 200e9, "bf16": 400e9}, memory_bytes=24e9)
SMOL = model_preset("smollm2-135m")
NEO = model_preset("gpt-neo-125m")


def _synthetic(spec, true: dict[str, Efficiency], prompt=64, out=32):
    samples = []
    for dt, eff in true.items():
        s = RunSample(dt, 1, prompt, out, 0.0, 0.0)
        ttft, tpot = predict(spec, s, MACHINE, eff)
        samples.append(RunSample(dt, 1, prompt, out, ttft, tpot))
    return samples


def test_fit_recovers_known_efficiencies_and_fixed_cost():
    true = {"fp32": Efficiency(0.22, 0.45, 4e-4), "bf16": Efficiency(0.22, 0.30, 4e-4)}
    cal = build_calibration(SMOL, _synthetic(SMOL, true), MACHINE, model="smollm2-135m-instruct")
    assert cal.bandwidth_efficiency == pytest.approx(0.22, rel=1e-3)
    assert cal.step_overhead_s_per_layer == pytest.approx(4e-4, rel=1e-3)
    assert cal.flops_efficiency["fp32"] == pytest.approx(0.45, rel=1e-3)
    assert cal.flops_efficiency["bf16"] == pytest.approx(0.30, rel=1e-3)
    # and it transfers to another model of another shape exactly when the machine behaves as modelled
    for dt, eff in true.items():
        s = RunSample(dt, 1, 64, 32, 0, 0)
        assert predict(NEO, s, MACHINE, cal.efficiency(dt))[1] == pytest.approx(
            predict(NEO, s, MACHINE, eff)[1], rel=1e-3
        )


def test_one_precision_folds_fixed_cost_into_bandwidth():
    samples = _synthetic(SMOL, {"fp32": Efficiency(0.3, 0.5, 0.0)})
    cal = build_calibration(SMOL, samples, MACHINE, model="m")
    assert cal.bandwidth_efficiency == pytest.approx(0.3, rel=0.02)
    assert cal.step_overhead_s_per_layer == 0
    assert any("one precision" in n for n in cal.notes)
    assert cal.efficiency("fp16").flops == cal.flops_efficiency["fp32"]  # borrowed, said in the docstring


def test_saved_per_machine_with_date(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path))
    assert load_calibration() is None
    cal = build_calibration(
        SMOL,
        _synthetic(SMOL, {"fp32": Efficiency(0.3, 0.5, 1e-4), "bf16": Efficiency(0.3, 0.4, 1e-4)}),
        MACHINE,
        model="m",
        created_at="2026-11-29T12:00:00+00:00",
    )
    path = save_calibration(cal)
    assert path.parent == tmp_path / "calibration" and path.suffix == ".json"
    again = load_calibration()
    assert again == cal and again.created_at.startswith("2026-11-29")
    path.write_text("{not json", encoding="utf-8")
    assert load_calibration() is None  # a torn file means datasheet mode, not a crash


def test_compare_run_reports_ratios():
    s = RunSample("bf16", 1, 64, 32, 0, 0)
    ttft, tpot = predict(NEO, s, MACHINE, Efficiency(0.25, 0.4, 2e-4))
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
    cal = build_calibration(
        SMOL,
        _synthetic(SMOL, {"fp32": Efficiency(0.25, 0.5, 2e-4), "bf16": Efficiency(0.25, 0.4, 2e-4)}),
        MACHINE,
        model="m",
    )
    c = compare_run(m, MACHINE, cal)
    assert c is not None
    assert c.calibrated_tpot_ratio == pytest.approx(1.0, rel=1e-3)
    assert c.datasheet_tpot_ratio < 0.5  # peak bandwidth is optimistic
    assert compare_run(SimpleNamespace(**{**m.__dict__, "tpot_s": math.nan}), MACHINE, cal) is None


def test_spec_for_engine_presets():
    assert cal_mod.spec_for_run_model("smollm2-135m-instruct").n_kv_head == 3
    neo = cal_mod.spec_for_run_model("gpt-neo-125m-random")
    assert neo is not None and neo.n_layer == 12 and neo.window_layers == 6
    assert cal_mod.spec_for_run_model("no-such-model") is None


def test_calibrate_command_wiring(tmp_path, monkeypatch, capsys):
    """`python -m engine calibrate` end to end with the engine's runs replaced by synthetic Measurements."""
    from engine.cli import main

    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path))
    true = {"fp32": Efficiency(0.25, 0.5, 2e-4), "bf16": Efficiency(0.25, 0.35, 2e-4)}

    def fake_runs(model, dtypes, **kw):
        out = []
        for dt in dtypes:
            ttft, tpot = predict(SMOL, RunSample(dt, 1, 40, 32, 0, 0), MACHINE, true[dt])
            out.append(synthetic_run(model, dt, ttft, tpot))
        return out

    monkeypatch.setattr(cal_mod, "measure_runs", fake_runs)
    monkeypatch.setattr(cal_mod, "measure_machine", lambda dtypes=("fp32", "bf16"): MACHINE)
    assert main(["calibrate"]) == 0
    out = capsys.readouterr().out
    assert "bandwidth efficiency 0.25" in out and "stored in" in out
    stored = load_calibration()
    assert stored is not None and stored.model == "smollm2-135m-instruct"
    assert stored.flops_efficiency["bf16"] == pytest.approx(0.35, rel=1e-3)
