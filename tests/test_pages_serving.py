"""The Serving page: runs with nothing started, drives a real sweep against an in-process server through its
widgets, and its knee sentence follows the numbers."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from engine.calc.capacity import CapacityPrediction
from engine.serving.runner import ServerThread, ServeSpec, build
from ui.serving_widgets import knee_sentence

ROOT = Path(__file__).resolve().parents[1]
PAGE = str(ROOT / "pages/8_Serving.py")


def _pred(users: int) -> CapacityPrediction:
    return CapacityPrediction(users, ((1, 0.01),), 1e9, "TPOT objective")


def test_knee_sentence_follows_the_numbers():
    assert "optimistic" in knee_sentence(4, "users", _pred(8), False)
    assert "pessimistic" in knee_sentence(8, "users", _pred(4), False)
    assert "the same as measured" in knee_sentence(4, "users", _pred(4), False)
    assert "**2 users**" in knee_sentence(2, "users", None, True) and "stopped" in knee_sentence(
        2, "users", None, True
    )
    assert "No level" in knee_sentence(None, "users", None, False)
    assert "**1 user**" in knee_sentence(1, "users", None, False)


def test_page_runs_a_sweep_against_a_url(tiny_lm):
    app, sched = build(ServeSpec(model=tiny_lm.name), tiny_lm)
    with ServerThread(app, scheduler=sched) as srv:
        at = AppTest.from_file(PAGE, default_timeout=180).run()
        assert not at.exception
        at.radio(key="serving.target").set_value("Any OpenAI-compatible URL").run()
        at.text_input(key="serving.url").set_value(srv.base_url).run()
        at.button(key="serving.list").click().run()
        assert at.selectbox(key="serving.model_pick").value == tiny_lm.name
        at.text_input(key="serving.levels.concurrency").set_value("1,2").run()
        at.number_input(key="serving.requests").set_value(2).run()
        at.number_input(key="serving.out_tokens").set_value(4).run()
        at.number_input(key="serving.slo_ttft").set_value(600.0).run()
        at.number_input(key="serving.slo_tpot").set_value(60000.0).run()
        at.button(key="serving.go").click().run()
        assert not at.exception and not at.error
        sweep = at.session_state["serving.sweep"]
        assert [p.level for p in sweep.points] == [1.0, 2.0] and sweep.knee == 2.0
        text = " ".join(m.value for m in at.markdown)
        assert "Measured knee: **2 users**" in text and "calculator" in text.lower()


def test_page_shows_a_bad_url_as_an_error():
    at = AppTest.from_file(PAGE, default_timeout=180).run()
    at.radio(key="serving.target").set_value("Any OpenAI-compatible URL").run()
    at.text_input(key="serving.url").set_value("http://127.0.0.1:9/v1").run()
    at.button(key="serving.list").click().run()
    assert not at.exception and at.error and "cannot reach" in at.error[0].value
