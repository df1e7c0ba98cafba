"""engine.lab.fewshot: CSV parsing, prompt building, label log-likelihood scoring and accuracy by k."""

from __future__ import annotations

import math

import pytest
import torch

from engine.core.errors import InvalidParameterError
from engine.lab import fewshot
from engine.lab.fewshot import Example, PromptTemplate


def _manual_logprob(lm, prompt: str, continuation: str) -> float:
    """The harness recipe written out longhand: encode(prompt + continuation), read the continuation."""
    ctx, cont = fewshot._encode_pair(lm.tokenizer, prompt, continuation)
    seq = torch.tensor([[lm.tokenizer.bos_token_id, *ctx, *cont]])
    with torch.inference_mode():
        logp = torch.log_softmax(lm.model(input_ids=seq).logits.float(), dim=-1)[0]
    return sum(float(logp[len(ctx) + i, t]) for i, t in enumerate(cont))


# --- data ---------------------------------------------------------------------------------------------


def test_shipped_set_is_large_enough_and_balanced():
    ds = fewshot.load_shipped("sentiment")
    assert len(ds) >= 40
    assert set(ds.labels) == {"positive", "negative"}
    counts = {label: sum(e.label == label for e in ds.examples) for label in ds.labels}
    assert counts["positive"] == counts["negative"]
    assert len({e.text for e in ds.examples}) == len(ds)  # no duplicates


def test_parse_csv_accepts_header_case_blank_lines_and_bom():
    ds = fewshot.parse_csv("\ufeffText,Label\nGood day,pos\n\nBad day,neg\n".encode())
    assert ds.examples == (Example("Good day", "pos"), Example("Bad day", "neg"))
    assert ds.labels == ("pos", "neg")


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"", "empty"),
        (b"   \n", "empty"),
        (b"sentence_x,y\nhello,1\n", "missing the column(s) text, label"),
        (b"text,category_x\nhello,1\n", "missing the column(s) label"),
        (b"text,label\n", "no labelled rows"),
        (b"text,label\nhello,a\nbye,a\n", "at least two labels"),
        (b"text,label\nhello,\n", "empty label"),
        (b"text,label\n\xff\xfe,a\n", "not UTF-8"),
        (b"text,label\n" + b"x,a\n" * 300_000, "1 MB"),
    ],
)
def test_parse_csv_errors_say_what_to_fix(data, needle):
    with pytest.raises(InvalidParameterError, match="(?i)" + needle.replace("(", r"\(").replace(")", r"\)")):
        fewshot.parse_csv(data)


def test_parse_csv_never_evaluates_content(tmp_path):
    marker = tmp_path / "pwned"
    text = f"text,label\n\"__import__('pathlib').Path('{marker}').touch()\",a\n=1+1,b\n"
    ds = fewshot.parse_csv(text)
    assert ds.examples[0].text.startswith("__import__") and ds.examples[1].text == "=1+1"
    assert not marker.exists()


# --- prompts ------------------------------------------------------------------------------------------


def test_build_prompt_is_exactly_the_documented_layout():
    demos = [Example("Great food.", "positive"), Example("Awful service.", "negative")]
    prompt = fewshot.build_prompt(demos, "  Nice staff. ", PromptTemplate())
    assert prompt == (
        "Classify the sentiment of each text as positive or negative.\n\n"
        "Text: Great food.\nSentiment: positive\n\n"
        "Text: Awful service.\nSentiment: negative\n\n"
        "Text: Nice staff.\nSentiment:"
    )
    assert fewshot.build_prompt([], "x", PromptTemplate(instruction="")) == "Text: x\nSentiment:"


def test_build_prompt_rejects_empty_query_and_prefix():
    with pytest.raises(InvalidParameterError, match="empty"):
        fewshot.build_prompt([], "  ")
    with pytest.raises(InvalidParameterError, match="output prefix"):
        fewshot.build_prompt([], "x", PromptTemplate(output_prefix=" "))


def test_demonstrations_exclude_the_query_are_seeded_and_nested():
    pool = fewshot.load_shipped().examples
    four = fewshot.select_demonstrations(pool, 4, seed=3, exclude=5)
    eight = fewshot.select_demonstrations(pool, 8, seed=3, exclude=5)
    assert pool[5] not in eight
    assert eight[:4] == four
    assert fewshot.select_demonstrations(pool, 8, seed=3, exclude=5) == eight
    assert fewshot.select_demonstrations(pool, 8, seed=4, exclude=5) != eight
    with pytest.raises(InvalidParameterError, match="needs 3 examples"):
        fewshot.select_demonstrations(pool[:3], 3, exclude=0)
    with pytest.raises(InvalidParameterError, match="whole number"):
        fewshot.select_demonstrations(pool, -1)


# --- scoring ------------------------------------------------------------------------------------------


def test_single_token_labels_match_the_longhand_harness_recipe(tiny_lm):
    prompt = fewshot.build_prompt([Example("Great food.", "positive")], "Cold soup.")
    scores = fewshot.score_labels(tiny_lm, prompt, ["positive", "negative"])
    assert scores.token_counts == (1, 1)  # the shared-row fast path is taken
    for label, lp in zip(scores.labels, scores.logprobs, strict=True):
        assert lp == pytest.approx(_manual_logprob(tiny_lm, prompt, " " + label), abs=1e-4)
    assert math.fsum(scores.probabilities) == pytest.approx(1.0)
    assert scores.predicted == scores.labels[scores.logprobs.index(max(scores.logprobs))]


def test_multi_token_labels_sum_every_token(tiny_lm):
    prompt = fewshot.build_prompt([], "Cold soup.")
    labels = ["very positive indeed", "negative"]
    scores = fewshot.score_labels(tiny_lm, prompt, labels)
    assert scores.token_counts[0] > 1
    for label, lp in zip(labels, scores.logprobs, strict=True):
        assert lp == pytest.approx(_manual_logprob(tiny_lm, prompt, " " + label), abs=1e-4)
    # softmax over the summed log-likelihoods
    expected = math.exp(scores.logprobs[0]) / (math.exp(scores.logprobs[0]) + math.exp(scores.logprobs[1]))
    assert scores.probabilities[0] == pytest.approx(expected)


def test_batched_scores_equal_one_at_a_time(tiny_lm):
    prompts = [
        fewshot.build_prompt([], q) for q in ("A fine day.", "A much longer and sadder day than usual.")
    ]
    batch = fewshot.score_labels_batch(tiny_lm, prompts, ["positive", "negative"])
    for p, b in zip(prompts, batch, strict=True):
        single = fewshot.score_labels(tiny_lm, p, ["positive", "negative"])
        assert b.logprobs == pytest.approx(single.logprobs, abs=1e-4)


def test_score_labels_needs_two_labels(tiny_lm):
    with pytest.raises(InvalidParameterError, match="two"):
        fewshot.score_labels(tiny_lm, "Text: x\nSentiment:", ["positive"])


# --- accuracy -----------------------------------------------------------------------------------------


def test_confusion_matrix_rows_are_truth():
    cm = fewshot.confusion_matrix(["a", "a", "b"], ["a", "b", "b"], ["a", "b"])
    assert cm == ((1, 1), (0, 1))


def test_accuracy_by_k_on_tiny_model(tiny_lm):
    ds = fewshot.load_shipped()
    seen: list[float] = []
    results = fewshot.accuracy_by_k(
        tiny_lm, ds, (0, 1, 2), max_queries=6, progress=lambda f, m: seen.append(f)
    )
    assert [r.k for r in results] == [0, 1, 2]
    for r in results:
        assert r.total == 6 and sum(map(sum, r.confusion)) == 6
        assert r.correct == sum(r.confusion[i][i] for i in range(len(r.labels)))
        assert r.accuracy == r.correct / 6
    assert results[2].mean_prompt_tokens > results[1].mean_prompt_tokens > results[0].mean_prompt_tokens
    assert seen and seen[-1] == pytest.approx(1.0)
    assert fewshot.majority_baseline(ds) == 0.5


def test_accuracy_by_k_validates(tiny_lm):
    ds = fewshot.load_shipped()
    with pytest.raises(InvalidParameterError, match="queries"):
        fewshot.accuracy_by_k(tiny_lm, ds, (0,), max_queries=0)
    with pytest.raises(InvalidParameterError, match="at least one k"):
        fewshot.accuracy_by_k(tiny_lm, ds, ())


@pytest.mark.slow
def test_bundled_model_beats_chance_with_examples(smol_lm):
    """The chapter's claim on the shipped set: with 8 examples SmolLM2 labels sentiment well above chance."""
    ds = fewshot.load_shipped()
    (k8,) = fewshot.accuracy_by_k(smol_lm, ds, (8,), max_queries=16)
    assert k8.accuracy >= 0.75


def test_fewshot_command_reports_accuracy_per_k(tiny_lm, tmp_path):
    import argparse

    from engine.commands import fewshot as cmd

    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)
    out = cmd.run(parser.parse_args(["--model", "tiny-gpt-neo", "--queries", "3", "--k", "0", "--k", "2"]))
    assert [r["k"] for r in out["results"]] == [0, 2]
    assert out["majority_baseline"] > 0 and "accuracy" in cmd.format_text(out)
    with pytest.raises(InvalidParameterError, match="cannot read"):
        cmd.run(parser.parse_args(["--csv", str(tmp_path / "missing.csv")]))


def test_accuracy_carries_its_wilson_interval_and_the_sentence_follows_it():
    """The student's walk: accuracy against k had no interval, so 7/16 against 9/16 read as a gain. The Wilson score
    interval (8/16: 28.0%-72.0%; 0/10: 0%-27.75%, Agresti & Coull's worked values) sits on the chart, in the table and
    in the sentence, which says an overlap is possibly chance and a clear gap is not."""
    from engine.core import stats
    from ui.lab_widgets import accuracy_sentence

    half = stats.proportion(8, 16)
    assert (round(half.low, 3), half.central, round(half.high, 3), half.rows) == (0.280, 0.5, 0.720, 16)
    none = stats.proportion(0, 10)
    assert none.low == 0.0 and round(none.high, 4) == 0.2775

    def row(k: int, correct: int, total: int = 16) -> fewshot.KAccuracy:
        return fewshot.KAccuracy(
            k, correct / total, correct, total, ("a", "b"), ((0, 0), (0, 0)), 10.0, 1.0, ()
        )

    close = accuracy_sentence([row(0, 7), row(2, 9)])
    assert "intervals overlap" in close and "can be chance" in close and "k = 2 scored 56%" in close
    clear = accuracy_sentence([row(0, 2), row(2, 15)])
    assert "do not overlap" in clear and "more than chance" in clear
    assert accuracy_sentence([row(0, 9), row(2, 7)]).startswith("No k above 0 scored higher")
