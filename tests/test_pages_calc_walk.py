"""Memory and cost as a presenter walks it (AppTest): a new measurement of this machine reaches every figure in the
same rerun, the inputs keep their values while the user visits other pages, and the runs measured here are listed
alike in tiles, lines and chart."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.core import paths

ROOT = Path(__file__).resolve().parents[1]
CALC = "pages/2_Memory_and_cost.py"
TIMEOUT = 120


@pytest.fixture
def machine_measured(monkeypatch, tmp_path):
    """This machine measured at 49.41 GB/s; each 'Measure this machine again' stores the next figure (52.0 GB/s)."""
    from engine.calibration import machine
    from tests.test_machine import FAKE
    from ui import common

    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("INFERENCE_LAB_RUNS_DIR", str(tmp_path / "runs"))
    figures = iter([49.41e9, 52.0e9])

    def measure(*a, **k):
        m = replace(FAKE, machine_id=paths.machine_id(), read_bytes_per_s=next(figures))
        machine.save(m)
        return m

    monkeypatch.setattr(machine, "measure", measure)
    measure()  # stored: the page reads it
    common.cached_machine_measurement.clear()
    yield
    common.cached_machine_measurement.clear()


def _why(at: AppTest) -> str:
    return " ".join(m.value for e in at.expander if e.label.startswith("Why") for m in e.markdown)


def test_measuring_this_machine_again_reaches_every_figure_in_the_same_rerun(machine_measured):
    """The presenter's walk: after 'Measure this machine again' the roofs read 52.0 GB/s while the reasoning below
    still said '+ 4.03 GB of KV cache at 49.41 GB/s' until the page was left and opened again (the figure boxes
    kept the old measurement, and the estimate was made with them)."""
    at = AppTest.from_file(str(ROOT / CALC), default_timeout=TIMEOUT).run()
    at.selectbox(key="calc.gpu").set_value("this-machine").run()
    assert not at.exception
    assert "at 49.41 GB/s" in _why(at)
    button = next(b for b in at.button if b.key == "calc.machine.measure")
    assert button.label == "Measure this machine again"
    button.click().run()
    assert not at.exception
    assert any("Read bandwidth (measured): **52.0 GB/s**" in m.value for m in at.markdown)
    why = _why(at)
    assert "at 52.00 GB/s" in why and "49.41" not in why, why
    figures = [n for n in at.number_input if n.label == "bandwidth (GB/s)"]
    assert [n.value for n in figures] == [pytest.approx(52.0)]


def test_the_inputs_keep_their_values_while_the_user_visits_another_page(machine_measured):
    """The presenter's walk: leaving Memory and cost for the Roofline and coming back reset its inputs (fp32 went
    back to fp16, 'this machine' back to the T4): Streamlit forgets a widget's value once a run leaves it undrawn."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    at.switch_page(CALC).run()
    assert not at.exception
    at.selectbox(key="calc.dtype.gpu").set_value("fp32").run()
    at.number_input(key="calc.batch").set_value(3).run()
    at.switch_page("pages/3_Roofline.py").run()
    at.switch_page(CALC).run()
    assert not at.exception
    assert at.selectbox(key="calc.dtype.gpu").value == "fp32"
    assert at.number_input(key="calc.batch").value == 3
    at.selectbox(key="calc.gpu").set_value("this-machine").run()
    at.switch_page("pages/3_Roofline.py").run()
    at.switch_page(CALC).run()
    assert not at.exception
    assert at.selectbox(key="calc.gpu").value == "this-machine"
    assert at.selectbox(key="calc.dtype.cpu").value == "fp32" and at.number_input(key="calc.batch").value == 3
    assert any(m.label.startswith("Weights") and m.value.endswith("GB") for m in at.metric)


def test_the_measured_shapes_are_the_same_in_the_tiles_the_lines_and_the_chart(tmp_path, monkeypatch):
    """The presenter's walk: 'Estimate vs measurement' drew four shapes in its chart while the lines under its
    tiles explained three (b1 66+2 was missing). Tiles, lines and bars now name the same shapes."""
    import json

    from engine.runtime import runlog
    from tests.factories import synthetic_run

    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("INFERENCE_LAB_RUNS_DIR", str(tmp_path / "runs"))
    for batch, prompt in ((1, 66), (1, 40), (2, 40), (4, 40)):
        shape = {
            "batch_size": batch,
            "prompt_tokens": prompt,
            "weights_bytes": 538_000_000,
            "params": 134_515_008,
        }
        runlog.record(synthetic_run("smollm2-135m-instruct", "fp32", 0.2, 0.05, **shape))
    at = AppTest.from_file(str(ROOT / CALC), default_timeout=TIMEOUT).run()
    assert not at.exception
    chart = next(c for c in at.get("plotly_chart") if "cmp" in c.proto.id)  # the comparison chart
    bars = {x for t in json.loads(chart.proto.spec)["data"] for x in t.get("x") or []}
    tiles = {m.label for m in at.metric if m.value.startswith("measured ")}
    lines = {c.value.split("**")[1] for c in at.caption if c.value.startswith("**smollm2")}
    assert len(tiles) == 4 and tiles == lines == bars, (tiles, lines, bars)
