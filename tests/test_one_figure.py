"""One figure per quantity: every page that shows this machine's bandwidth or matmul FLOP/s reads the one stored
source (the calibration, else the stored measurement) and says when it was measured and under what load."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.calibration import machine
from engine.core import paths
from tests.test_machine import FAKE

ROOT = Path(__file__).resolve().parents[1]
WHEN = "measured 2026-11-30 00:00 UTC on cpu, load average 0.50"


@pytest.fixture
def stored(monkeypatch, tmp_path):
    """This machine measured once and stored (no calibration); measuring again would be a second source."""
    from ui import common

    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path))
    machine.save(replace(FAKE, machine_id=paths.machine_id()))

    def refuse(*a, **k):
        raise AssertionError("measured again: a second 'this machine' figure")

    monkeypatch.setattr(machine, "measure", refuse)
    common.cached_machine_measurement.clear()
    yield FAKE
    common.cached_machine_measurement.clear()


def test_roofline_draws_this_machine_from_the_stored_measurement_and_says_when(stored):
    at = AppTest.from_file(str(ROOT / "pages/3_Roofline.py"), default_timeout=120).run()
    at.multiselect(key="roof.gpus").set_value(["this-machine"]).run()
    assert not at.exception
    assert any(WHEN in c.value for c in at.caption)
    assert any("this machine" in h.value and "fp16" in h.value for h in at.subheader)


@pytest.mark.slow
def test_batching_sweep_uses_the_stored_matmul_roof_and_says_when(stored):
    """The sweep measured its own matmul (n = 512, 3 repeats): a third 'this machine' FLOP/s beside Home's and
    the calculator's."""
    at = AppTest.from_file(str(ROOT / "pages/6_Batching.py"), default_timeout=120)
    at.run()
    at.sidebar.selectbox(key="batching.model").select("tiny-gpt-neo").run()
    at.multiselect(key="batching.sizes").set_value([1])
    at.number_input(key="batching.sweep_tokens").set_value(4)
    at.button(key="batching.sweep_go").click().run()
    assert not at.exception and not at.error
    assert at.session_state["batching.sweep"].matmul_flops_per_s == stored.matmul_flops_per_s["fp32"]
    text = " ".join(m.value for m in at.markdown)
    assert "this machine's matmul (123 GFLOP/s)" in text and WHEN in text


def test_calculator_puts_this_machines_measured_tpot_beside_its_bound(stored):
    """For SmolLM2 fp32 batch 1 on 'this machine' the tile shows a bound; the same quantity measured here (the
    Playground's runs) is said in one line beside it, with how many runs and when."""
    from engine.runtime import runlog
    from tests.factories import synthetic_run

    for tpot in (0.050, 0.060, 0.070):
        runlog.record(
            synthetic_run(
                "smollm2-135m-instruct", "fp32", 0.2, tpot, params=134_515_008, weights_bytes=538_060_032
            ),
            source="playground",
        )
    at = AppTest.from_file(str(ROOT / "pages/2_Memory_and_cost.py"), default_timeout=120).run()
    at.selectbox(key="calc.preset").set_value("smollm2-135m").run()
    at.selectbox(key="calc.gpu").set_value("this-machine").run()
    at.number_input(key="calc.batch").set_value(1).run()
    assert not at.exception
    tpot = next(m for m in at.metric if m.label.startswith("TPOT"))
    assert "bound" in tpot.label or "estimate" in tpot.label  # what the tile is, in its label
    lines = [m.value for m in at.markdown if m.value.startswith("On this machine (")]
    assert lines, [m.value for m in at.markdown]
    assert "median of 3 runs: 3 from the Playground" in lines[0] and "2026-11-29 10:00 UTC" in lines[0]
    assert "60 ms" in lines[0]  # the measured median, beside the estimate by the one rule


def test_playground_labels_its_tpot_measured_with_the_load():
    at = AppTest.from_file(str(ROOT / "pages/1_Playground.py"), default_timeout=180).run()
    at.sidebar.selectbox(key="playground.model").set_value("tiny-gpt-neo").run()
    at.sidebar.number_input(key="playground.max_new").set_value(4).run()
    at.button(key="playground.go").click().run()
    assert not at.exception and not at.error
    assert any(m.label == "TPOT" for m in at.metric)
    assert any(
        c.value.startswith("All measured on this run, on this machine: load average ") for c in at.caption
    )
