"""The Batching page through Streamlit's AppTest: it renders, and a small widget-driven run on tiny-gpt-neo
shows both policies, their timelines and the live scheduler."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

PAGE = str(Path(__file__).resolve().parents[1] / "pages" / "6_Batching.py")


def _page() -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.run()
    at.sidebar.selectbox(key="batching.model").select("tiny-gpt-neo").run()
    return at


def test_page_renders_without_errors():
    at = _page()
    assert not at.exception and not at.error
    assert any("Static versus in-flight" in t.value for t in at.title)


@pytest.mark.slow
def test_compare_policies_on_a_small_workload():
    at = _page()
    at.number_input(key="batching.n").set_value(5)
    at.number_input(key="batching.max_batch").set_value(2)
    at.number_input(key="batching.out_max").set_value(24)
    submit = [b for b in at.button if "Run both policies" in str(b.label)]
    submit[0].click().run()
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    assert list(table["policy"]) == ["static", "inflight"]
    assert any("In-flight / static throughput" in m.label for m in at.metric)
    assert any("The trade-off" in s.value for s in at.subheader)


@pytest.mark.slow
def test_static_sweep_and_shared_scheduler():
    at = _page()
    at.multiselect(key="batching.sizes").set_value([1, 2])
    at.number_input(key="batching.sweep_tokens").set_value(4)
    at.button(key="batching.sweep_go").click().run()
    assert not at.exception and not at.error
    assert any("Largest batch that fits" in i.value for i in at.info)
    send = [b for b in at.button if str(b.label) == "Send"]
    send[0].click().run()
    assert not at.exception and not at.error
    assert any("shared the batch" in c.value for c in at.caption)
