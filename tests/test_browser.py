"""A real browser (Debian chromium via playwright) against a real `streamlit run app.py`."""

from __future__ import annotations

import re

import pytest

# one worker runs the module (scripts/test.sh: --dist loadgroup), so one dashboard server and one Chromium serve it
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.xdist_group("dashboard")]


def test_deep_link_offline_navigation_and_bundled_icons(dashboard, browser):
    """The first visit of a fresh server is a deep link; it gets app.py's st.navigation (titles and
    Material icons, not file names), the model from the URL, and nothing is fetched from outside the server
    (the favicon and the icon font are bundled)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    outside = []

    def only_the_server(route):
        if route.request.url.startswith(dashboard):
            return route.continue_()
        outside.append(route.request.url)
        return route.abort()

    page.route("**/*", only_the_server)
    page.goto(dashboard + "/Playground?model=tiny-gpt-neo")
    page.get_by_role("button", name="Generate").wait_for(timeout=240_000)
    nav = page.get_by_test_id("stSidebarNav").inner_text()
    for title in ("Home", "Playground", "Memory and cost", "Few-shot, code and eval", "Batching"):
        assert title in nav
    assert "\napp\n" not in f"\n{nav}\n"  # Streamlit's pages-folder menu names the home page 'app'
    page.get_by_text("Loaded: ").first.wait_for(timeout=120_000)
    assert "Loaded: tiny-gpt-neo" in page.inner_text("body")
    page.get_by_test_id("stSidebarNav").get_by_role("link", name="Roofline").click()
    page.get_by_role("heading", name="Roofline").first.wait_for(timeout=120_000)
    assert not outside, outside
    page.close()


def test_dashboard_loads_and_generates(dashboard, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    page.set_default_timeout(300_000)  # guards against a hang on a busy machine, not speed claims
    page.goto(dashboard)
    page.get_by_text("Inference Lab", exact=True).first.wait_for(timeout=60_000)
    page.get_by_role("heading", name="This machine", exact=True).wait_for(
        timeout=60_000
    )  # the hardware panel
    # the sidebar's link: the home page's tour links to the Playground too
    page.get_by_test_id("stSidebarNav").get_by_role("link", name="Playground").click()
    page.get_by_role("button", name="Generate").wait_for(
        timeout=120_000
    )  # first load may dequantize the GGUF
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


def test_playground_stop_keeps_partial_text_marked_cancelled(dashboard, browser):
    """A long run shows tokens / max and elapsed, Stop ends it, and the text
    made so far stays on the page marked cancelled."""
    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    page.set_default_timeout(300_000)  # guards against a hang on a busy machine, not speed claims
    page.goto(dashboard + "/Playground?model=smollm2-135m-instruct")
    page.get_by_text("Loaded: ").first.wait_for(timeout=240_000)
    box = page.get_by_role("spinbutton", name="Max new tokens", exact=True)
    box.fill("4096")
    box.press("Enter")
    # the run's forecast (engine.calibration.beside's words) is drawn once the machine is measured (once)
    page.get_by_text(re.compile(r"^(Forecast run time|Run time: at least)")).first.wait_for(timeout=400_000)
    page.get_by_role("button", name="Generate").click()
    page.wait_for_function(
        "() => /[1-9][0-9]* \\/ 4096 tokens/.test(document.body.innerText)", timeout=300_000
    )
    # the clock and Stop sit beside the Generate button (in view when it is pressed), not under the page
    go = page.get_by_role("button", name="Generate").bounding_box()
    clock = page.get_by_text(re.compile(r"/ 4096 tokens")).first.bounding_box()
    stop = page.get_by_role("button", name="Stop").bounding_box()
    assert clock["x"] > go["x"] + go["width"] and abs(clock["y"] - go["y"]) < 150, (go, clock)
    assert stop["x"] > go["x"] + go["width"] and abs(stop["y"] - go["y"]) < 150, (go, stop)
    page.get_by_role("button", name="Stop").click()
    # Wait for the cancelled run's own notice (a bare "cancelled" also matches the Stop button's help text).
    notice = page.locator('[data-testid="stAlert"]').filter(has_text="kept out of the run log").first
    notice.wait_for(timeout=120_000)
    assert "of 4096 tokens" in notice.inner_text()
    body = page.inner_text("body")
    assert "Paris" in body  # the partial text survived the rerun
    page.close()


def _paths() -> list[str]:
    from ui.common import PAGES

    return ["", *(p.url_path for p in PAGES)]


def test_every_page_at_1280_px_clips_no_value(dashboard, browser, tmp_path):
    """Each page (first view, and the race in presenter mode on a stored run) screenshotted at 1280 px: no tile,
    select or link is cut with an ellipsis or drawn wider than its box ('451,280 ...', '145.41 GI',
    'Hugging Face transformers (eage', '6. Quantization and specul', 'T4 (boo...')."""
    from bench.tour import CLIPPED_JS, idle, screenshot
    from engine.runtime import runlog
    from tests.test_pages_race import _recorded_race

    runlog.save_result("race", _recorded_race(0.5, None), wall_s=40.0, session="dddddddddddd")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(300_000)  # guards against a hang on a busy machine, not speed claims
    clipped = {}
    for path in [*_paths(), "Latency_race?presenter=1"]:
        page.goto(f"{dashboard}/{path}")
        idle(page, 300)
        screenshot(page, tmp_path / f"{path.split('?')[0] or 'home'}.png")
        cut = [c for c in page.evaluate(CLIPPED_JS) if not c.startswith(LEFT_TO_OWNERS.get(path, ()))]
        if cut:
            clipped[path or "Home"] = cut
        assert page.locator('[data-testid="stException"]').count() == 0, path
    page.close()
    assert clipped == {}


def test_the_speculative_tables_fit_1280_px(dashboard, browser):
    """The presenter's quiet walk: the speculative 'How it ran' table was wider than its column at 1280 px, its
    last column cut to 'ar…'; the clipped-value check reads tables too now (a dataframe's sideways scroll)."""
    from bench.tour import CLIPPED_JS, idle
    from engine.levers.speculative import SpecReport, SpecResult
    from engine.runtime import runlog

    row = SpecResult("prompt_lookup", "input_grounded", "ok", draft="n-grams of the prompt", draft_length=4,
                     acceptance_rate=0.712, tokens_per_target_forward=3.6, speedup_vs_plain=2.05,
                     speedup_ci=(1.65, 2.1), identical_to_greedy=True, expected_speedup=1.76, cost_ratio=0.15,
                     verify_ratio=1.61, verify_tokens=5.0, prompt_overlap=0.98, plain_latency_s=1.0,
                     method_latency_s=0.49, runs=3)  # fmt: skip
    quiet = {"before": 0.1, "after": 0.3, "cores": 2, "others": 0.05}
    runlog.save_result("speculative", SpecReport("smollm2-135m-instruct", "cpu", 24, 3, "", (row,)), wall_s=15.0,
                       session="ffffffffffff", settings={"load": quiet})  # fmt: skip
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.set_default_timeout(300_000)  # guards against a hang on a busy machine, not speed claims
    page.goto(f"{dashboard}/Quantization_and_speculative_decoding?presenter=1")
    idle(page, 300)
    page.get_by_role("tab", name="Speculative decoding").click()
    page.get_by_text("How it ran").first.wait_for()
    page.wait_for_timeout(1000)  # the tab's tables drawn
    assert page.locator('[data-testid="stDataFrame"]').filter(has_text="answer quotes prompt").count() == 1
    assert page.evaluate(CLIPPED_JS) == []
    page.close()


# Selects a page may still cut (a select's value is an input: it cannot wrap, the page must give it room or
# shorter words): none now ('Hugging Face transformers (eager)' and 'fixed users (concurrency)' got shorter words).
LEFT_TO_OWNERS: dict[str, tuple[str, ...]] = {}


def test_a_race_run_shows_its_clock_and_survives_a_reload(dashboard, browser):
    """The race's live run draws a progress bar with the elapsed time and what is left; the result stays after a
    reload of the page (the browser session's key is in the URL)."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.set_default_timeout(600_000)
    page.goto(f"{dashboard}/Latency_race?model=tiny-gpt-neo")  # the tiny random model: seconds, not minutes
    page.get_by_role("button", name="Run the race").wait_for()
    page.get_by_role("button", name="Run the race").click()
    page.get_by_text("elapsed").first.wait_for()
    # the presenter's quiet walk at 1280 x 800: the clock was drawn below the fold, under the contenders' list; it
    # is beside the button now, in view wherever the button is
    button = page.get_by_role("button", name="Run the race").bounding_box()
    clock = page.get_by_text("elapsed").first.bounding_box()
    if button and clock:  # a race that ends between the two reads has no clock to measure
        middle = lambda box: box["y"] + box["height"] / 2  # noqa: E731
        assert abs(middle(clock) - middle(button)) < button["height"] and clock["x"] > button["x"], (
            button,
            clock,
        )
    # the winner line, or on a busy machine its refusal to call one (the headline says either)
    page.get_by_text(re.compile(r"^Winner(\.|: not called\.)")).first.wait_for()
    page.reload()
    page.get_by_text("kept across the page reload").first.wait_for()
    page.get_by_role("heading", name="Race (this machine)").wait_for()
    page.close()


def test_a_whole_number_typed_as_1e9_is_refused_not_read_as_1(dashboard, browser):
    """'1e9' typed in Batch (concurrent users) became 1 user, silently: the browser side read an integer box's text
    with parseInt. The box is read as a number now, and a billion users is refused with the field's range."""
    from bench.tour import idle

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(300_000)  # guards against a hang on a busy machine, not speed claims
    page.goto(f"{dashboard}/Memory_and_cost")
    box = page.get_by_role("spinbutton", name="Batch (concurrent users)", exact=True)
    box.wait_for(timeout=240_000)
    idle(page, 300)
    assert box.input_value() == "8"  # a whole number shown without decimals
    box.fill("1e9")
    box.press("Enter")
    page.get_by_text("must be a positive whole number up to 1,000,000, got 1000000000").first.wait_for()
    idle(page, 300)
    assert box.input_value() == "1000000000"
    assert page.locator('[data-testid="stMetric"]').count() == 0  # nothing answered with 1 user or the old 8
    page.close()
