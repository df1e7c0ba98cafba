"""oneDNN-packed linear layers (engine.runtime.packed), as the engine's server runs its model on a CPU: the same
greedy tokens as the unpacked model, logits equal to the last bits, a clear reason where nothing is packed, and
the server packing only a model it loaded itself."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from engine.runtime.generation import generate
from engine.runtime.packed import PackReport, pack_linears, why_not
from engine.runtime.settings import GenerationConfig

PROMPTS = ("The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,")


def _packed_copy(lm):
    own = dataclasses.replace(lm, model=copy.deepcopy(lm.model))
    return own, pack_linears(own.model)


@pytest.mark.slow  # loads the bundled model or runs a process of its own
def test_packed_linears_give_the_same_greedy_tokens_on_the_bundled_model(smol_lm):
    packed, report = _packed_copy(smol_lm)
    assert report.packed == sum(type(m) is torch.nn.Linear for m in smol_lm.model.modules()) > 0
    cfg = GenerationConfig(max_new_tokens=24)
    for prompt in PROMPTS:
        want = generate(smol_lm, prompt, cfg, record=False).token_ids
        got = generate(packed, prompt, cfg, record=False).token_ids
        assert got == want, prompt


def test_packed_logits_equal_the_unpacked_to_the_last_bits_at_any_row_count(tiny_lm):
    packed, report = _packed_copy(tiny_lm)
    assert report.packed > 0 and report.bytes > 0 and "packed for oneDNN" in report.note()
    with torch.inference_mode():
        for rows in (1, 3, 8, 11):  # packed for 8 rows; any count runs
            ids = torch.randint(0, tiny_lm.model.config.vocab_size, (rows, 7))
            want = tiny_lm.model(input_ids=ids).logits
            got = packed.model(input_ids=ids).logits
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    # the originals stay: .weight reads as before, and the shared model is untouched
    assert all("forward" not in vars(m) for m in tiny_lm.model.modules() if type(m) is torch.nn.Linear)


def test_nothing_is_packed_outside_fp32_and_it_says_why(tiny_lm):
    half = copy.deepcopy(tiny_lm.model).to(torch.bfloat16)
    assert why_not(half) == "the model is bfloat16 (packed only in fp32)"
    report = pack_linears(half)
    assert report == PackReport(skipped="the model is bfloat16 (packed only in fp32)")
    assert report.note() == "linear weights not packed: the model is bfloat16 (packed only in fp32)"


@pytest.mark.parametrize("packed", [True, False])
def test_the_server_packs_only_the_model_it_loads_itself(packed, tiny_lm):
    from engine.serving.runner import ServeSpec, build

    _, scheduler = build(ServeSpec(model="tiny-gpt-neo", packed_weights=packed, max_batch=4))
    try:
        notes = scheduler.lm.notes
        assert any("linear layers packed for oneDNN" in n for n in notes) == packed, notes
    finally:
        scheduler.close()
    _, shared = build(ServeSpec(model="tiny-gpt-neo"), lm=tiny_lm)  # a model given to it is never touched
    try:
        assert not any("packed" in n for n in shared.lm.notes)
        assert all("forward" not in vars(m) for m in tiny_lm.model.modules())
    finally:
        shared.close()
