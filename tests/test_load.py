"""Team-demo load: 8 browser sessions generate on one server while others move the calculator and run an
evaluation (issue 8). The figures are reported by `bench/load.py`; here they are asserted."""

from __future__ import annotations

import pytest

from bench.load import expected_outputs, run_load, serve
from tests.conftest import CHROMIUM

pytestmark = [pytest.mark.browser, pytest.mark.slow]
MODEL = "smollm2-135m-instruct"
NEW_TOKENS = 16


@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (scripts/install.sh installs it as root)")
def test_eight_sessions_share_one_model(tmp_path):
    from engine.models import load_model

    model_bytes = load_model(MODEL).footprint_bytes
    with serve(tmp_path / "server.log") as (url, proc):
        report = run_load(url, proc.pid, sessions=8, model=MODEL, max_new_tokens=NEW_TOKENS, timeout_s=900)
    failed = [f"{r.kind}: {r.detail}" for r in report.results if not r.ok]
    assert not failed
    play = [r for r in report.results if r.kind == "playground"]
    assert len(play) == 8
    expected = expected_outputs(MODEL, [r.prompt for r in play], NEW_TOKENS)
    assert {r.prompt: r.text.strip() for r in play} == {p: t.strip() for p, t in expected.items()}  # no cross-talk
    assert report.health_failures == 0 and report.health_checks > 0
    assert report.rss_after_bytes - report.rss_before_bytes < model_bytes  # still one copy of the model
    assert report.throughput_tokens_per_s > 0
