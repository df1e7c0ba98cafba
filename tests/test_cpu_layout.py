"""engine.runtime.cpu_layout: the measured weight layout changes strides only - values, ties, bytes and greedy tokens
stay - and it is chosen by measurement, recorded, and can be switched off. Speed is benchmarked in
bench/decode.py, not here: these tests force the choice (keeps_transposed) so they do not depend on timing."""

from __future__ import annotations

import pytest
import torch

from engine.runtime import cpu_layout, models
from engine.runtime.generation import greedy_kwargs


def _plain(name: str, monkeypatch):
    """A model in nn.Linear's layout; the layout switched on for what the test does next."""
    monkeypatch.setenv("INFERENCE_LAB_CPU_LAYOUT", "0")
    lm = models.load_model(name, dtype="fp32", device="cpu")
    monkeypatch.setenv("INFERENCE_LAB_CPU_LAYOUT", "1")
    return lm


def _greedy(lm, n: int = 24) -> list[int]:
    enc = lm.tokenizer("The history of the printing press begins", return_tensors="pt")
    with torch.inference_mode():
        out = lm.model.generate(**enc, **greedy_kwargs(lm, n))
    return out[0, enc["input_ids"].shape[1] :].tolist()


@pytest.mark.slow  # loads the bundled model or runs a process of its own
def test_transposed_layout_keeps_values_ties_bytes_and_greedy_tokens(monkeypatch):
    lm = _plain("smollm2-135m-instruct", monkeypatch)
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    weights_bytes, tokens = lm.weights_bytes, _greedy(lm)
    monkeypatch.setattr(cpu_layout, "keeps_transposed", lambda *timings: True)  # every shape transposed

    report = cpu_layout.optimize(lm.model)

    linears = [m for m in lm.model.modules() if isinstance(m, torch.nn.Linear)]
    assert report.changed == len({id(m.weight) for m in linears}) > 0
    assert all(c.transposed for c in report.choices)
    assert all(m.weight.t().is_contiguous() and not m.weight.is_contiguous() for m in linears)
    assert lm.model.lm_head.weight is lm.model.model.embed_tokens.weight  # the tie survives
    after = lm.model.state_dict()
    assert after.keys() == before.keys()
    assert all(torch.equal(after[k], v) for k, v in before.items())
    assert lm.weights_bytes == weights_bytes
    assert _greedy(lm) == tokens
    assert f"{report.changed} linear weights stored [in, out]" in report.note()


def test_the_rule_wants_a_clear_gain_for_one_token_and_no_loss_for_a_batch():
    # (one token linear, transposed, batch linear, transposed) in seconds
    assert cpu_layout.keeps_transposed(2.0, 1.0, 1.0, 1.0)
    assert not cpu_layout.keeps_transposed(2.0, 1.0, 1.0, 1.01)  # a batched step would slow down
    assert not cpu_layout.keeps_transposed(1.05, 1.0, 1.0, 0.5)  # within the margin: not worth it
    assert cpu_layout.keeps_transposed(1.0 * cpu_layout.MARGIN + 0.01, 1.0, 1.0, 1.0)


def test_layout_is_measured_per_shape_and_left_when_not_faster(monkeypatch):
    lm = _plain("tiny-gpt-neo", monkeypatch)
    monkeypatch.setattr(cpu_layout, "keeps_transposed", lambda *timings: False)

    report = cpu_layout.optimize(lm.model)

    shapes = {tuple(m.weight.shape) for m in lm.model.modules() if isinstance(m, torch.nn.Linear)}
    assert {c.shape for c in report.choices} == shapes
    assert report.changed == 0 and not any(c.transposed for c in report.choices)
    assert all(c.linear_bytes_per_s > 0 and c.transposed_bytes_per_s > 0 for c in report.choices)
    assert all(m.weight.is_contiguous() for m in lm.model.modules() if isinstance(m, torch.nn.Linear))
    assert "nn.Linear's for all" in report.note()


def test_switched_off_by_the_environment(monkeypatch):
    lm = _plain("tiny-gpt-neo", monkeypatch)
    monkeypatch.setenv("INFERENCE_LAB_CPU_LAYOUT", "0")
    report = cpu_layout.optimize(lm.model)
    assert report.skipped and not report.choices
    assert "INFERENCE_LAB_CPU_LAYOUT is not 1" in report.note()


def test_off_by_default_and_recorded_when_on(monkeypatch, tiny_lm):
    monkeypatch.delenv("INFERENCE_LAB_CPU_LAYOUT", raising=False)
    assert not cpu_layout.enabled()
    assert not any(n.startswith("weight layout:") for n in tiny_lm.notes)
    assert all(p.is_contiguous() for p in tiny_lm.model.parameters())
    monkeypatch.setenv("INFERENCE_LAB_CPU_LAYOUT", "1")
    lm = models.load_model("tiny-gpt-neo", dtype="fp32", device="cpu")
    assert any(n.startswith("weight layout:") for n in lm.notes)


@pytest.mark.slow
def test_compiled_decode_matches_eager_token_for_token(tiny_lm):
    """Scheduler(compile_decode=True): rows joining and leaving a compiled decode step (dynamic rows and
    window) give the same greedy tokens as the eager scheduler."""
    from engine.batching.scheduler import Scheduler
    from engine.runtime.settings import GenerationConfig

    prompts = ["def add(a, b):", "The GPU is", "Once upon a time, in a small village by the sea,"]
    lengths = [12, 5, 9]

    def run(compile_decode: bool) -> list[tuple[int, ...]]:
        sched = Scheduler(tiny_lm, max_batch=2, record=False, compile_decode=compile_decode)
        try:
            handles = [
                sched.submit(p, GenerationConfig(max_new_tokens=n), ignore_eos=True)
                for p, n in zip(prompts, lengths, strict=True)
            ]
            return [tuple(h.result(600).token_ids) for h in handles]
        finally:
            sched.close()

    assert run(True) == run(False)
