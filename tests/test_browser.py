"""A real browser (Debian chromium via playwright) against a real `streamlit run app.py`."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_dashboard_loads_and_generates(dashboard, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    page.goto(dashboard)
    page.get_by_text("Inference Lab", exact=True).first.wait_for(timeout=60_000)
    page.get_by_role("heading", name="This machine").wait_for(timeout=60_000)
    page.get_by_role("link", name="Playground").click()
    page.get_by_role("button", name="Generate").wait_for(timeout=120_000)  # first load may dequantize the GGUF
    page.get_by_text("Loaded: ").first.wait_for(timeout=120_000)
    page.get_by_role("button", name="Generate").click()
    page.get_by_text("Stopped by").first.wait_for(timeout=120_000)
    body = page.inner_text("body")
    assert "Paris" in body  # the bundled SmolLM2 continues "The capital of France is" greedily
    for label in ("TTFT", "TPOT", "Latency", "Throughput"):
        assert label in body
    assert "Traceback" not in body
    page.close()
