"""Engine mechanics on tiny-gpt-neo (real GPT-Neo code path, random weights) and real text on SmolLM2."""

from __future__ import annotations

import math
import threading

import pytest

from engine.core.errors import InvalidParameterError, PromptTooLongError
from engine.runtime import generation, runlog, streaming
from engine.runtime.settings import GenerationConfig

GREEDY = GenerationConfig(max_new_tokens=12)


def test_measurement_is_consistent(tiny_lm):
    c = generation.generate(tiny_lm, "Hello there", GREEDY)
    m = c.measurement
    assert 0 < m.ttft_s <= m.latency_s
    assert m.output_tokens == len(c.token_ids) <= 12
    assert m.prompt_tokens == len(tiny_lm.tokenizer("Hello there")["input_ids"])
    if m.output_tokens > 1:
        assert m.tpot_s == pytest.approx((m.latency_s - m.ttft_s) / (m.output_tokens - 1))
    assert m.tokens_per_s == pytest.approx(m.output_tokens / m.latency_s)
    assert m.peak_memory_bytes > 0 and m.weights_bytes == tiny_lm.weights_bytes
    assert c.stop_reason in {"eos", "length"}


def test_length_stop_reason_and_full_text(tiny_lm):
    c = generation.generate(tiny_lm, "abc", GenerationConfig(max_new_tokens=5))
    if c.stop_reason == "length":
        assert len(c.token_ids) == 5
    assert c.full_text.startswith("abc") and c.full_text.endswith(c.text)
    assert c.shown(True) == c.full_text and c.shown(False) == c.text


def test_batch_returns_one_completion_per_prompt(tiny_lm):
    prompts = ["one", "two words here", "three"]
    result = generation.generate_batch(tiny_lm, prompts, GREEDY)
    assert [c.prompt for c in result.completions] == prompts
    assert result.measurement.batch_size == 3
    assert result.measurement.output_tokens == sum(c.measurement.output_tokens for c in result.completions)


def test_batched_greedy_matches_solo(tiny_lm):
    """Left padding and the attention mask are right: a padded row decodes as it would alone."""
    prompts = ["short", "a much longer prompt than the other one"]
    batch = generation.generate_batch(tiny_lm, prompts, GREEDY)
    for p, c in zip(prompts, batch.completions, strict=True):
        assert generation.generate(tiny_lm, p, GREEDY).token_ids == c.token_ids


def test_stream_yields_the_same_text_as_generate(tiny_lm):
    s = streaming.stream(tiny_lm, "Streaming test", GREEDY)
    streamed = "".join(s)
    assert s.completion is not None
    assert streamed == s.completion.text == generation.generate(tiny_lm, "Streaming test", GREEDY).text


def test_no_kv_cache_gives_same_greedy_tokens(tiny_lm):
    with_cache = generation.generate(tiny_lm, "cache test", GREEDY)
    without = generation.generate(tiny_lm, "cache test", GenerationConfig(max_new_tokens=12, use_cache=False))
    assert without.token_ids == with_cache.token_ids
    assert without.measurement.use_cache is False


def test_seeded_sampling_is_reproducible(tiny_lm):
    cfg = GenerationConfig(max_new_tokens=10, do_sample=True, temperature=1.0, seed=123)
    assert (
        generation.generate(tiny_lm, "seed", cfg).token_ids
        == generation.generate(tiny_lm, "seed", cfg).token_ids
    )


def test_stop_sequence_cuts_the_text(smol_lm):
    c = generation.generate(smol_lm, "1, 2, 3, 4,", GenerationConfig(max_new_tokens=20, stop=(" 7",)))
    assert c.stop_reason == "stop"
    assert " 7" not in c.text and "5" in c.text


@pytest.mark.parametrize(
    "cfg",
    [
        {"max_new_tokens": 0},
        {"max_new_tokens": -3},
        {"max_new_tokens": 10**9},
        {"do_sample": True, "temperature": 0.0},
        {"do_sample": True, "temperature": float("nan")},
        {"top_p": 0.0},
        {"top_p": float("inf")},
        {"top_k": -1},
        {"repetition_penalty": 0.0},
        {"seed": -1},
        {"stop": ("",)},
    ],
)
def test_bad_parameters_raise(tiny_lm, cfg):
    with pytest.raises(InvalidParameterError):
        generation.generate(tiny_lm, "hi", GenerationConfig(**cfg))


@pytest.mark.parametrize("prompt", ["", "   \n\t", "\x00\x00"])
def test_empty_prompt_raises(tiny_lm, prompt):
    with pytest.raises(InvalidParameterError, match="empty"):
        generation.generate(tiny_lm, prompt, GREEDY)


def test_prompt_longer_than_context_raises(tiny_lm):
    with pytest.raises(PromptTooLongError, match="context window"):
        generation.generate(tiny_lm, "word " * 3000, GREEDY)
    with pytest.raises(PromptTooLongError):
        generation.generate(tiny_lm, "x" * 300_000, GREEDY)


def test_model_still_works_after_errors(tiny_lm):
    for bad in ("", "word " * 3000):
        with pytest.raises((InvalidParameterError, PromptTooLongError)):
            generation.generate(tiny_lm, bad, GREEDY)
    assert generation.generate(tiny_lm, "still alive", GREEDY).measurement.output_tokens > 0


def test_control_characters_and_bad_unicode_are_accepted(tiny_lm):
    c = generation.generate(tiny_lm, "tab\there \x07 bell \udcff surrogate", GREEDY)
    assert c.measurement.output_tokens > 0


def test_concurrent_sessions_do_not_cross_talk(tiny_lm):
    prompts = [f"session {i} says" for i in range(6)]
    expected = {p: generation.generate(tiny_lm, p, GREEDY).token_ids for p in prompts}
    got: dict[str, tuple[int, ...]] = {}

    def worker(p: str) -> None:
        got[p] = generation.generate(tiny_lm, p, GREEDY).token_ids

    threads = [threading.Thread(target=worker, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == expected


def test_cancel_stops_a_stream(tiny_lm):
    s = streaming.stream(tiny_lm, "cancel me", GenerationConfig(max_new_tokens=2000))
    s.cancel()
    list(s)
    assert s.completion is not None and s.completion.stop_reason == "cancelled"
    assert s.completion.measurement.output_tokens < 2000


def test_runs_are_logged(tiny_lm):
    before = len(runlog.load("tiny-gpt-neo"))
    generation.generate(tiny_lm, "log me", GREEDY)
    generation.generate(tiny_lm, "but not me", GREEDY, record=False)
    runs = runlog.load("tiny-gpt-neo")
    assert len(runs) == before + 1
    assert runs[-1].model == "tiny-gpt-neo" and math.isfinite(runs[-1].latency_s)


@pytest.mark.slow
def test_bundled_model_knows_paris(smol_lm):
    c = generation.generate(smol_lm, "The capital of France is", GenerationConfig(max_new_tokens=8))
    assert "Paris" in c.text


@pytest.mark.slow
def test_chat_template(smol_lm):
    c = generation.generate(
        smol_lm, "What is the capital of France?", GenerationConfig(max_new_tokens=16, chat_template=True)
    )
    assert "Paris" in c.text


def test_run_metrics_have_one_home():
    """Every run metric comes from engine.runtime.metrics: generation and the batching rows use the same function."""
    import engine.batching.sequence as sequence
    import engine.runtime.measurement as measurement
    from engine.runtime import metrics

    assert generation.run_metrics is metrics.run_metrics and sequence.run_metrics is metrics.run_metrics
    assert not hasattr(measurement, "summarize_steps")
    t = metrics.timings(10.0, 10.5, 12.5, [5, 3])  # two rows, the longest made 5 tokens
    assert t["ttft_s"] == 0.5 and t["latency_s"] == 2.5 and t["tpot_s"] == pytest.approx(2.0 / 4)
    assert t["tokens_per_s"] == pytest.approx(8 / 2.5) and t["decode_tokens_per_s"] == pytest.approx(6 / 2.0)
    assert math.isnan(metrics.timings(0.0, 1.0, 1.0, [1])["tpot_s"])


def test_peak_memory_is_a_peak_not_the_current_value():
    from engine.runtime import metrics

    peak = metrics.PeakMemory("cpu")
    start = peak.bytes
    peak.see(start * 4)
    assert peak.sample(force=True) == start * 4  # a later, lower sample never lowers the peak
