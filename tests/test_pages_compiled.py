"""The Playground's compiled-decode switch (AppTest): it reaches the engine, the compile is reported once, a
machine that cannot compile says why and still generates, and the recorded GPU decode table is shown as
recorded evidence with its machine and date."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 600  # a compile on a busy 2-core CPU


def playground() -> AppTest:
    at = AppTest.from_file(str(ROOT / "pages/1_Playground.py"), default_timeout=TIMEOUT)
    at.run()
    at.sidebar.selectbox(key="playground.model").set_value("tiny-gpt-neo").run()
    at.sidebar.number_input(key="playground.max_new").set_value(8).run()
    return at


def compile_toggle(at: AppTest):
    return at.sidebar.toggle(key="playground.compile.cpu")


def test_the_switch_says_why_it_starts_where_it_does_and_needs_the_cache():
    at = playground()
    assert not at.exception
    assert any("compiled" in c.value.lower() and "starts **" in c.value for c in at.sidebar.caption)
    at.sidebar.toggle(key="playground.cache").set_value(False).run()
    assert compile_toggle(at).disabled


@pytest.mark.slow
def test_compiled_playground_run_reports_its_compile_once():
    at = playground()
    compile_toggle(at).set_value(True).run()
    at.button(key="playground.go").click().run()
    assert not at.exception and not at.error
    row = at.session_state["playground.history"][-1]
    assert row["decode"] == "compiled"
    first = [i.value for i in at.info if "compiled the decode step" in i.value]
    at.button(key="playground.go").click().run()  # the same model and shape: nothing to compile
    assert at.session_state["playground.history"][-1]["decode"] == "compiled"
    again = [i.value for i in at.info if "compiled the decode step" in i.value]
    # The first compiled run in this server process pays the compile (and says so); another test may have
    # compiled this model object first, so the first run may have had none to pay. The second never does.
    assert len(first) <= 1 and not again


def test_a_machine_that_cannot_compile_says_why_and_still_generates(monkeypatch):
    import weakref

    from engine.runtime import compiled
    from ui import batching_widgets

    monkeypatch.setattr(compiled.shutil, "which", lambda name: None)  # no C++ compiler on PATH
    # A machine without a compiler never compiled anything: forget the steps and shared schedulers that tests
    # before this one (in the same process) made, so the check runs as it would on that machine.
    monkeypatch.setattr(compiled, "_DECODERS", weakref.WeakKeyDictionary())
    batching_widgets._scheduler.clear()
    at = playground()
    compile_toggle(at).set_value(True).run()
    at.button(key="playground.go").click().run()
    assert not at.exception and not at.error
    assert any("needs a C++ compiler" in w.value and "decoded eagerly" in w.value for w in at.warning)
    assert at.session_state["playground.history"][-1]["decode"] == "eager"
    at.toggle(key="playground.batch").set_value(True).run()
    at.text_area(key="playground.prompt.True").set_value("first\nsecond").run()
    at.button(key="playground.go").click().run()
    assert not at.exception and not at.error
    assert any("needs a C++ compiler" in w.value for w in at.warning)


def test_recorded_gpu_decode_is_labelled_with_machine_and_date():
    at = playground()
    labels = [e.label for e in at.expander]
    recorded = [label for label in labels if label.startswith("Recorded GPU decode, not live")]
    assert recorded and "H200" in recorded[0] and "2026-" in recorded[0]
    assert any(
        "of the" in m.value and "read bandwidth measured in the same run" in m.value for m in at.markdown
    )
