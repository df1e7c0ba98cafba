"""Team-demo load: 8 browser sessions generate on one server while others move the calculator and run an
evaluation. The figures are reported by `bench/load.py`; here they are asserted."""

from __future__ import annotations

import pytest

from bench.load import expected_outputs, run_load, serve
from tests.conftest import CHROMIUM

pytestmark = [pytest.mark.browser, pytest.mark.slow]
MODEL = "smollm2-135m-instruct"
NEW_TOKENS = 16
# Random weights almost never emit EOS, so this generation really runs to its length unless cancelled.
LONG_MODEL, LONG_TOKENS = "gpt-neo-125m-random", 2000


@pytest.mark.skipif(
    CHROMIUM is None, reason="Debian chromium is not installed (scripts/install.sh installs it as root)"
)
def test_eight_sessions_share_one_model(tmp_path):
    from engine.runtime.models import load_model

    model_bytes = load_model(MODEL).footprint_bytes
    with serve(tmp_path / "server.log") as (url, proc):
        # one document for the evaluation beside them (with two it ran 48 s past the last Playground session in
        # bench/results/load-vm-x86_64.json)
        report = run_load(
            url, proc.pid, sessions=8, model=MODEL, max_new_tokens=NEW_TOKENS, timeout_s=900, eval_docs=1
        )
    failed = [f"{r.kind}: {r.detail}" for r in report.results if not r.ok]
    assert not failed
    play = [r for r in report.results if r.kind == "playground"]
    assert len(play) == 8
    expected = expected_outputs(MODEL, [r.prompt for r in play], NEW_TOKENS)
    assert {r.prompt: r.text.strip() for r in play} == {
        p: t.strip() for p, t in expected.items()
    }  # no cross-talk
    assert report.health_checks > 0
    assert report.health_failures == 0, (
        f"{report.health_failures} of {report.health_checks} health checks unanswered within {report.health_bound_s} s "
        f"(answered: p50 {report.health_latency_s_p50:.3f} s, max {report.health_latency_s_max:.3f} s)"
    )
    assert report.rss_after_bytes - report.rss_before_bytes < model_bytes  # still one copy of the model
    assert report.throughput_tokens_per_s > 0


def test_closing_a_tab_cancels_its_generation(tmp_path, browser):  # the shared sync browser (one per thread)
    """A session that closes mid-generation is cancelled (its script is stopped when the session expires,
    and the playground cancels in `finally`); the shared scheduler is free again, the server lives."""
    import re
    import time

    from bench.load import healthy

    with serve(tmp_path / "server.log", {"STREAMLIT_SERVER_DISCONNECTED_SESSION_TTL": "2"}) as (url, _proc):

        def shared_batch(page) -> tuple[int, int]:
            """(rows running, tokens generated so far) as the Batching page shows the shared scheduler."""
            page.goto(f"{url}/Batching?model={LONG_MODEL}")
            metrics = page.locator('[data-testid="stMetric"]')
            running = metrics.filter(has_text="Running").first
            tokens = metrics.filter(has_text="Decode steps / tokens").first
            running.wait_for()
            tokens.wait_for()
            return (
                int(re.findall(r"(\d+)\s*/", running.inner_text())[0]),
                int(re.findall(r"/\s*([\d,]+)", tokens.inner_text())[-1].replace(",", "")),
            )

        def wait_until(page, want_running: int, bound_s: int = 600) -> tuple[int, int]:
            """Waits for the state asserted; the bound only guards against a hang, it is not a speed claim."""
            deadline = time.monotonic() + bound_s
            state = shared_batch(page)
            while state[0] != want_running and time.monotonic() < deadline:
                page.wait_for_timeout(1000)
                state = shared_batch(page)
            return state

        long_ctx = browser.new_context()
        long_ctx.set_default_timeout(300_000)  # a busy 2-core machine: generous guards, never speed claims
        long_page = long_ctx.new_page()
        long_page.goto(f"{url}/Playground?model={LONG_MODEL}")
        long_page.get_by_text("Loaded: ").first.wait_for()
        box = long_page.get_by_role("spinbutton", name="Max new tokens", exact=True)
        box.fill(str(LONG_TOKENS))
        box.press("Enter")
        # the page has taken the new budget when its forecast is for it (not a fixed sleep: a busy machine reruns late)
        long_page.get_by_text(f"+ all {LONG_TOKENS} new tokens").first.wait_for()
        long_page.get_by_role("button", name="Generate").click()
        # the run is streaming with that budget: its own progress line reads "n / 2000 tokens"
        long_page.get_by_text(re.compile(rf"\d+ / {LONG_TOKENS} tokens")).first.wait_for()
        watcher_ctx = browser.new_context()
        watcher_ctx.set_default_timeout(300_000)
        watcher = watcher_ctx.new_page()
        assert wait_until(watcher, 1)[0] == 1  # the long generation is in the shared batch
        long_ctx.close()  # the user closes the tab mid-generation
        running, tokens = wait_until(watcher, 0)
        assert running == 0
        # Not a timing claim: a generation that was not cancelled would leave the batch only after all its tokens.
        assert tokens < LONG_TOKENS, (
            f"the closed tab's generation ran to {tokens} tokens instead of being cancelled"
        )
        assert healthy(url)
        watcher_ctx.close()
