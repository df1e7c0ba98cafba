"""engine.lab.evaluation: lm-eval on the loaded model, the shipped offline task, and the engine's own
log-likelihood agreeing with the harness's bits per byte within 1%."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from engine.core.errors import HubUnreachableError, InvalidParameterError
from engine.lab import evaluation

ROOT = Path(__file__).resolve().parents[1]


def test_counting_matches_lm_eval():
    from lm_eval.api.task import ConfigurableTask

    for text in ("a b  c", " leading and trailing ", "one\n\ntwo\tthree", "héllo wörld"):
        assert evaluation.count_words(text) == ConfigurableTask.count_words(text)
        assert evaluation.count_bytes(text) == ConfigurableTask.count_bytes(text)


def test_metric_formulas_match_the_harness_aggregations():
    from lm_eval.api.metrics import bits_per_byte, weighted_perplexity

    items_bytes = [(-120.0, 100), (-300.5, 230)]
    items_words = [(-120.0, 20), (-300.5, 41)]
    stats = evaluation.PerplexityStats.from_totals(-420.5, 90, 61, 330, 2, 0.0)
    assert stats.bits_per_byte == pytest.approx(bits_per_byte(items_bytes))
    assert stats.byte_perplexity == pytest.approx(weighted_perplexity(items_bytes))
    assert stats.word_perplexity == pytest.approx(weighted_perplexity(items_words))
    assert stats.bits_per_byte == pytest.approx(420.5 / 330 / math.log(2))


def test_shipped_corpus_is_reproducible_from_pydoc_data():
    docs = evaluation.local_documents()
    assert 24 <= len(docs) <= 80
    assert all(300 <= len(d) <= 1600 for d in docs)
    if sys.version_info[:2] != (3, 11):
        pytest.skip("the committed corpus was built from Python 3.11's pydoc_data")
    from pydoc_data.topics import topics

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import build_pydoc_corpus as build
    finally:
        sys.path.pop(0)
    expected = [
        build.opening(topics[name]) for name in sorted(topics) if len(build.opening(topics[name])) >= 300
    ]
    assert docs == expected[: len(docs)]


def test_task_yaml_names_version_and_metrics():
    text = (evaluation.TASK_DIR / "pydoc_topics.yaml").read_text()
    assert "output_type: loglikelihood_rolling" in text
    assert "version: 1.0" in text
    for metric in ("word_perplexity", "byte_perplexity", "bits_per_byte"):
        assert f"metric: {metric}" in text
    assert "pydoc_data" in text and "PSF" in text  # the licence of the text is stated


def test_harness_status_reports_the_installed_version():
    ok, reason = evaluation.harness_status()
    assert ok and reason.startswith("lm-eval 0.4")


def test_wikitext_offline_gives_a_clear_message(monkeypatch, tiny_lm):
    monkeypatch.setattr(evaluation, "_wikitext_cached", lambda: False)
    monkeypatch.setattr(evaluation, "hub_reachable", lambda timeout_s=2.0: False)
    ok, reason = evaluation.task_status("wikitext")
    assert not ok and "pydoc_topics" in reason and "hub" in reason
    with pytest.raises(HubUnreachableError, match="offline task"):
        evaluation.run_eval(tiny_lm, "wikitext", limit=1)


def test_run_eval_validates_before_work(tiny_lm):
    with pytest.raises(InvalidParameterError, match="unknown task"):
        evaluation.run_eval(tiny_lm, "hellaswag")
    for bad in (0, -1, 2.5, True):
        with pytest.raises(InvalidParameterError, match="limit"):
            evaluation.run_eval(tiny_lm, limit=bad)


def test_engine_rolling_loglikelihood_windows_cover_every_token(tiny_lm):
    """Short windows force several forward passes; every token is still scored exactly once, so the total
    is close to one long window (differences come only from the shorter context)."""
    text = evaluation.local_documents(1)[0]
    with tiny_lm.lock:
        whole, n = evaluation.rolling_loglikelihood(tiny_lm, text)
        pieces, n2 = evaluation.rolling_loglikelihood(tiny_lm, text, max_length=16)
    assert n == n2 == len(tiny_lm.tokenizer(text, add_special_tokens=False)["input_ids"])
    assert pieces < 0 and whole < 0
    assert abs(pieces - whole) / abs(whole) < 0.05  # a random model barely uses context


@pytest.mark.slow
def test_harness_on_tiny_model_is_near_chance_and_crosschecks(tiny_lm):
    seen: list[float] = []
    res = evaluation.run_eval(tiny_lm, limit=2, progress=lambda f, m: seen.append(f))
    assert res.task == "pydoc_topics" and res.task_version == "1.0"
    assert res.harness_version.startswith("0.4")
    assert (res.model, res.dtype, res.device) == ("tiny-gpt-neo", "fp32", "cpu")
    assert res.documents == 2 == len(res.per_document_loglikelihood)
    # Random weights: ~ln(49152) nats per token, so several bits per byte and a huge word perplexity.
    assert res.bits_per_byte > 3.0
    assert res.word_perplexity > 1e6
    assert res.crosscheck is not None
    assert res.crosscheck.relative_difference <= 0.01  # the cross-check, within 1%
    assert res.crosscheck.agrees
    per_token = -res.crosscheck.engine.loglikelihood / res.crosscheck.engine.tokens
    assert per_token == pytest.approx(math.log(49152), rel=0.05)
    assert seen == sorted(seen) and seen[-1] == pytest.approx(1.0)


@pytest.mark.slow
def test_harness_on_bundled_model_crosschecks_within_one_percent(smol_lm):
    res = evaluation.run_eval(smol_lm, limit=2)
    assert res.crosscheck is not None
    assert abs(res.crosscheck.engine.bits_per_byte - res.bits_per_byte) / res.bits_per_byte <= 0.01
    assert res.bits_per_byte < 2.0  # a real model: far below the random model's ~3.9
    summary = res.summary()
    for key in (
        "word_perplexity",
        "byte_perplexity",
        "bits_per_byte",
        "task",
        "task_version",
        "harness_version",
    ):
        assert key in summary


def test_cli_eval_bad_limit_exits_with_reason():
    out = subprocess.run(
        [sys.executable, "-m", "engine", "eval", "--limit", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2 and "limit" in out.stderr
