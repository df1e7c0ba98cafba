"""A real browser (Debian chromium via playwright) against a real `streamlit run app.py`."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_dashboard_loads_and_generates(dashboard, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    page.set_default_timeout(300_000)  # guards against a hang on a busy machine, not speed claims
    page.goto(dashboard)
    page.get_by_text("Inference Lab", exact=True).first.wait_for(timeout=60_000)
    page.get_by_role("heading", name="This machine").wait_for(timeout=60_000)
    page.get_by_role("link", name="Playground").click()
    page.get_by_role("button", name="Generate").wait_for(timeout=120_000)  # first load may dequantize the GGUF
    page.get_by_text("Loaded: ").first.wait_for(timeout=120_000)
    page.get_by_role("button", name="Generate").click()
    page.get_by_text("Stopped by").first.wait_for(timeout=120_000)
    # Wait for each thing asserted, not for a neighbour: the metric row renders after the stop line.
    metrics = page.locator('[data-testid="stMetric"]')
    for label in ("TTFT", "TPOT", "Latency", "Throughput"):
        metrics.filter(has_text=label).first.wait_for(timeout=60_000)
    page.locator('[data-testid="stCode"]').filter(has_text="Paris").first.wait_for(timeout=60_000)
    # the bundled SmolLM2 continues "The capital of France is" greedily with "Paris"
    assert page.locator('[data-testid="stException"]').count() == 0
    assert "Traceback" not in page.inner_text("body")
    page.close()
