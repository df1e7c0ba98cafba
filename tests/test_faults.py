"""Faults, simulated where they cannot be real here: the message says what to do and nothing is lost."""

from __future__ import annotations

import pytest

from engine import generation, models, runlog
from engine.errors import OutOfMemoryError
from engine.generation import GenerationConfig


@pytest.mark.parametrize("exc_factory", [
    lambda: __import__("torch").OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    lambda: MemoryError(),
    lambda: RuntimeError("DefaultCPUAllocator: not enough memory: you tried to allocate 123 bytes"),
])
def test_out_of_memory_during_generation_keeps_the_model(tiny_lm, monkeypatch, exc_factory):
    real = tiny_lm.model.generate

    def oom(*args, **kwargs):
        raise exc_factory()

    monkeypatch.setattr(tiny_lm.model, "generate", oom)
    with pytest.raises(OutOfMemoryError, match="lower max new tokens") as info:
        generation.generate(tiny_lm, "hello", GenerationConfig(max_new_tokens=8))
    assert "still loaded" in str(info.value)
    monkeypatch.setattr(tiny_lm.model, "generate", real)
    assert not tiny_lm.lock.locked()  # the failed run released the model
    assert generation.generate(tiny_lm, "hello", GenerationConfig(max_new_tokens=4)).measurement.output_tokens > 0


def test_unwritable_run_log_does_not_break_generation(tiny_lm, monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("INFERENCE_LAB_RUNS_DIR", str(blocker / "runs"))  # mkdir under a file fails, even as root
    c = generation.generate(tiny_lm, "still works", GenerationConfig(max_new_tokens=4))
    assert c.measurement.output_tokens > 0
    assert runlog.load() == []


@pytest.mark.slow
def test_unwritable_model_cache_loads_from_the_gguf(monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("INFERENCE_LAB_HOME", str(blocker / "home"))
    lm = models.load_model("smollm2-135m-instruct")
    assert any("not writable" in n for n in lm.notes)
    assert "Paris" in generation.generate(lm, "The capital of France is", GenerationConfig(max_new_tokens=6)).text
