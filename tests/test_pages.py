"""Every page runs without an exception (AppTest), and the playground works when driven through its widgets."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "pages").glob("*.py"))
TIMEOUT = 180  # the first run imports torch and transformers; the first bundled-model load dequantizes it


@pytest.mark.parametrize("page", ["app.py", *PAGES])
def test_page_runs_without_exception(page):
    at = AppTest.from_file(str(ROOT / page), default_timeout=TIMEOUT).run()
    assert not at.exception, [e.value for e in at.exception]


def playground() -> AppTest:
    at = AppTest.from_file(str(ROOT / "pages/1_Playground.py"), default_timeout=TIMEOUT)
    at.run()
    at.sidebar.selectbox(key="playground.model").set_value("tiny-gpt-neo").run()
    at.sidebar.number_input(key="playground.max_new").set_value(8).run()
    return at


def test_playground_generates_and_records_history():
    at = playground()
    at.button(key="playground.go").click().run()
    assert not at.exception and not at.error
    labels = [m.label for m in at.metric]
    for label in ("TTFT", "TPOT", "Latency", "Throughput", "Peak memory"):
        assert label in labels
    assert len(at.session_state["playground.history"]) == 1
    assert at.session_state["playground.history"][0]["model"] == "tiny-gpt-neo"


def test_playground_batch_mode():
    at = playground()
    at.toggle(key="playground.batch").set_value(True).run()
    at.text_area(key="playground.prompt.True").set_value("first\nsecond\nthird").run()
    at.button(key="playground.go").click().run()
    assert not at.exception and not at.error
    assert at.session_state["playground.history"][-1]["batch"] == 3


def test_playground_empty_prompt_shows_error_and_keeps_working():
    at = playground()
    at.text_area(key="playground.prompt.False").set_value("   ").run()
    at.button(key="playground.go").click().run()
    assert at.error and "empty" in at.error[0].value
    at.text_area(key="playground.prompt.False").set_value("recovered").run()
    at.button(key="playground.go").click().run()
    assert not at.error and len(at.session_state["playground.history"]) == 1


def test_playground_unknown_custom_model_shows_error():
    at = AppTest.from_file(str(ROOT / "pages/1_Playground.py"), default_timeout=TIMEOUT).run()
    from ui.widgets import CUSTOM

    at.sidebar.selectbox(key="playground.model").set_value(CUSTOM).run()
    at.sidebar.text_input(key="playground.custom").set_value("../../etc").run()
    assert not at.exception
    assert at.error and "outside the folders" in at.error[0].value
    assert at.button(key="playground.go").disabled


def test_home_explains_missing_gpu():
    import torch

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    if not torch.cuda.is_available():
        assert any("No GPU in use" in i.value for i in at.info)
