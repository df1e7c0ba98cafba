"""AppTest smoke and a widget-driven run of the latency race page (real worker processes, tiny-gpt-neo)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
PAGE = "pages/5_Latency_race.py"


def _open() -> AppTest:
    """Through the app's router, as a user arrives: the shared sidebar links to app.py, which a page run on
    its own (AppTest.from_file(page)) cannot resolve."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    return at.switch_page(PAGE).run()


def _text(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [i.value for i in at.info] + [w.value for w in at.warning]
    return "\n".join(str(p) for p in parts)


@pytest.mark.slow
def test_race_page_renders_without_running():
    at = _open()
    assert not at.exception, at.exception
    assert at.title[0].value.endswith("Latency race")
    text = _text(at)
    assert "deepspeed.init_inference" in text
    assert "No recorded GPU results exist yet" in text or at.expander  # recorded results, when present, are labelled
    assert "notebook" in text.lower()


@pytest.mark.slow
def test_race_page_runs_a_small_race_from_the_widgets():
    at = _open()
    at.selectbox(key="race.model").set_value("tiny-gpt-neo")
    at.multiselect(key="race.contenders").set_value(["vanilla", "deepspeed", "no-kv-cache", "static-compile"])
    at.slider(key="race.runs").set_value(2)
    at.slider(key="race.max_new").set_value(8)
    at.button[0].click()
    at.run(timeout=600)
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    result = at.session_state["race.result"]
    status = {c["name"]: c for c in result["contenders"]}
    assert status["vanilla"]["status"] == "ran" and status["no-kv-cache"]["status"] == "ran"
    assert status["static-compile"]["status"] == "skipped"
    assert status["deepspeed"]["status"] == "ran" and status["deepspeed"]["kernel_inject"] is False
    assert len(at.dataframe) >= 3  # statuses, speed, quality
    assert any("Live run" in s.value for s in at.subheader)


def test_recorded_gpu_results_are_shown_labelled(tmp_path, monkeypatch):
    from engine.race import runner

    rows = [
        runner.ContenderResult("vanilla", "Vanilla", "", "ran", latencies_s=[1.0, 1.1, 0.9], tokens_per_s=[64, 58, 71],
                               ttfts_s=[0.02] * 3, tpots_s=[0.015] * 3, output_tokens=[64] * 3, token_ids=[[1, 2, 3]]),
        runner.ContenderResult("deepspeed", "DeepSpeed", "", "failed", reason="deepspeed.init_inference failed: boom",
                               deepspeed_mode="kernel injection"),
    ]
    rec = runner.RaceResult(model="gpt-neo-125m-random", dtype="auto", device="cuda", runs=3, warmup=1,
                            max_new_tokens=64, prompts=["p"], started_at="2026-12-01T10:00:00+00:00",
                            hardware={"gpu": "NVIDIA H200 (test fixture)", "accelerator": "cuda"}, contenders=rows)
    runner.compare(rec.contenders)
    runner.save(rec, tmp_path)
    monkeypatch.setattr(runner, "RESULTS_DIR", tmp_path)
    at = _open()
    assert not at.exception, at.exception
    labels = [e.label for e in at.expander]
    assert any(label.startswith("Recorded, not live: gpt-neo-125m-random on NVIDIA H200 (test fixture) · 2026-12-01")
               for label in labels), labels
    assert "No recorded GPU results exist yet" not in _text(at)


def test_an_empty_contender_list_shows_a_clear_error():
    at = _open()
    at.multiselect(key="race.contenders").set_value([])
    at.button[0].click()
    at.run()
    assert not at.exception, at.exception
    assert any("no contenders chosen" in e.value for e in at.error), [e.value for e in at.error]
