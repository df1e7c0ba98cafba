"""AppTest for the Memory & cost and Roofline pages: smoke runs plus widget-driven checks of what is shown."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.factories import synthetic_run

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
CALC = str(ROOT / "pages" / "2_Memory_and_cost.py")
ROOF = str(ROOT / "pages" / "3_Roofline.py")
TIMEOUT = 60


@pytest.fixture(autouse=True)
def _empty_home(tmp_path, monkeypatch):
    """No run log and no calibration unless a test writes one."""
    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("INFERENCE_LAB_RUNS_DIR", str(tmp_path / "runs"))


def _run(path: str) -> AppTest:
    at = AppTest.from_file(path, default_timeout=TIMEOUT).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


@pytest.mark.parametrize("path", [CALC, ROOF], ids=["memory_and_cost", "roofline"])
def test_page_runs(path):
    _run(path)


def test_default_answers_t4_gpt_neo_2_7b_8_users_1024_tokens():
    at = _run(CALC)
    assert "Fits" in at.success[0].value and "**23** users" in at.success[0].value
    assert _metric(at, "Weights") == "5.30 GB"
    assert _metric(at, "KV cache") == "2.68 GB"
    assert _metric(at, "Total with overhead") == "9.58 GB"
    assert _metric(at, "Decode per token (TPOT)") == "24.6 ms"
    assert _metric(at, "$ per million output tokens") == "$0.31"
    assert _metric(at, "Max batch at 1,024 tokens") == "23"
    reasoning = (
        at.markdown[0].value
        if "Weights" in at.markdown[0].value
        else next(m.value for m in at.markdown if "**Weights**" in m.value)
    )
    assert "2 × 32 layers × 20 KV heads × 128 head dim × 2 B = 327,680 B per token" in reasoning


def test_widgets_recompute_fit_and_gpus_needed():
    at = _run(CALC)
    at.number_input(key="calc.batch").set_value(64).run()
    assert not at.exception
    assert "Does not fit" in at.error[0].value
    at.number_input(key="calc.batch").set_value(8).run()
    at.selectbox(key="calc.preset").set_value("llama-2-13b").run()
    assert "Does not fit" in at.error[0].value
    # 26.0 GB weights + 6.7 GB KV, x1.2 = 39.3 GB: 3 T4s by memory, but 3 does not divide 40 heads
    assert _metric(at, "GPUs needed") == "4"
    at.number_input(key="calc.gpus").set_value(4).run()
    assert at.success and "Fits" in at.success[0].value


def test_precision_changes_weights():
    at = _run(CALC)
    at.selectbox(key="calc.dtype").set_value("int4").run()
    assert _metric(at, "Weights") == "1.33 GB"
    at.selectbox(key="calc.kv_dtype").set_value("int8").run()
    assert _metric(at, "KV cache") == "1.34 GB"


def test_raw_numbers_with_bad_heads_say_what_to_do():
    at = _run(CALC)
    at.radio(key="calc.source").set_value("raw numbers").run()
    assert not at.exception and at.metric  # defaults are a valid GQA model
    at.number_input(key="calc.kv").set_value(5).run()
    assert any("KV heads must divide" in e.value for e in at.error)


def test_estimate_vs_measurement_shows_measured_runs(tmp_path):
    from engine import runlog
    from engine.calc import model_preset
    from engine.calc.timing import Efficiency
    from engine.calibration import RunSample, build_calibration, machine_spec, predict, save_calibration

    machine = machine_spec(50e9, {"fp32": 200e9, "bf16": 300e9}, memory_bytes=24e9)
    smol = model_preset("smollm2-135m")
    truth = {"fp32": Efficiency(0.2, 0.5, 3e-4), "bf16": Efficiency(0.2, 0.4, 3e-4)}
    samples = []
    for dt, eff in truth.items():
        ttft, tpot = predict(smol, RunSample(dt, 1, 40, 32, 0, 0), machine, eff)
        samples.append(RunSample(dt, 1, 40, 32, ttft, tpot))
    save_calibration(build_calibration(smol, samples, machine, model="smollm2-135m-instruct"))
    ttft, tpot = predict(
        model_preset("gpt-neo-125m"), RunSample("bf16", 1, 40, 32, 0, 0), machine, truth["bf16"]
    )
    runlog.record(
        synthetic_run("gpt-neo-125m-random", "bf16", ttft, tpot, weights_bytes=250_397_184, params=125_198_592)
    )
    at = _run(CALC)
    label = "gpt-neo-125m-random bf16 b1"
    shown = next(m for m in at.metric if m.label == label)
    assert shown.value == f"measured {tpot * 1e3:.3g} ms"
    assert "(1.00×)" in shown.delta  # calibrated prediction of the synthetic machine is exact
    assert at.dataframe, "the per-run table is shown"
    roof = _run(ROOF)
    assert any("Stars: runs measured on this machine" in c.value for c in roof.caption)


def test_roofline_defaults_to_the_books_t4():
    at = _run(ROOF)
    text = " ".join(c.value for c in at.caption)
    assert "216.6" in text and "320 GB/s" in text and "203" in text
    diag = " ".join(m.value for m in at.markdown)
    assert "10 of 10 operators are memory-bound" in diag
    assert "ridge 216.6 ops/byte" in diag


def test_roofline_batch_slider_moves_decode_projections_toward_the_ridge():
    at = _run(ROOF)

    def proj_intensity(at: AppTest) -> float:
        m = next(m.value for m in at.markdown if "projections' intensity is about" in m.value)
        return float(m.split("projections' intensity is about ")[1].split(" ")[0])

    before = proj_intensity(at)
    at.select_slider(key="roof.b").set_value(256).run()
    assert not at.exception
    after = proj_intensity(at)
    assert after > 100 * before
    assert math.isclose(before, 1.0, rel_tol=0.05)


def test_roofline_overlays_several_gpus_and_another_model():
    at = _run(ROOF)
    at.multiselect(key="roof.gpus").set_value(["t4", "t4-datasheet", "h100-sxm"]).run()
    at.selectbox(key="roof.preset").set_value("llama-3-8b").run()
    assert not at.exception
    assert any("llama-3-8b on T4" in h.value for h in at.subheader)


def test_hub_id_offline_shows_what_to_do(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    at = _run(CALC)
    at.radio(key="calc.source").set_value("hub id").run()
    at.text_input(key="calc.hub").set_value("no-such-owner/no-such-model").run()
    assert not at.exception
    assert any("Upload the config.json" in e.value for e in at.error)
