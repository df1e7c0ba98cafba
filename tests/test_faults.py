"""Faults, simulated where they cannot be real here: the message says what to do and nothing is lost."""

from __future__ import annotations

import pytest

from engine.core.errors import OutOfMemoryError
from engine.runtime import generation, models, runlog
from engine.runtime.settings import GenerationConfig


@pytest.mark.parametrize(
    "exc_factory",
    [
        lambda: __import__("torch").OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        lambda: MemoryError(),
        lambda: RuntimeError("DefaultCPUAllocator: not enough memory: you tried to allocate 123 bytes"),
    ],
)
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
    assert (
        generation.generate(tiny_lm, "hello", GenerationConfig(max_new_tokens=4)).measurement.output_tokens
        > 0
    )


def test_unwritable_run_log_does_not_break_generation(tiny_lm, monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(
        "INFERENCE_LAB_RUNS_DIR", str(blocker / "runs")
    )  # mkdir under a file fails, even as root
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
    assert (
        "Paris"
        in generation.generate(lm, "The capital of France is", GenerationConfig(max_new_tokens=6)).text
    )


# --- optional dependencies missing: the availability check gives a reason, nothing crashes -------
@pytest.mark.parametrize("how", ["not installed", "broken"])
def test_lm_eval_missing_is_reported_not_raised(tiny_lm, monkeypatch, how):
    import importlib.metadata
    import sys

    from engine.core.errors import DependencyMissingError
    from engine.lab import evaluation

    if how == "not installed":
        real_version = importlib.metadata.version

        def version(name):
            if name == "lm_eval":
                raise importlib.metadata.PackageNotFoundError(name)
            return real_version(name)

        monkeypatch.setattr(importlib.metadata, "version", version)
    for name in [m for m in sys.modules if m == "lm_eval" or m.startswith("lm_eval.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # `import lm_eval` now raises ImportError
    ok, reason = evaluation.harness_status()
    assert not ok and (
        "not installed: pip install lm-eval" in reason
        if how == "not installed"
        else "failed to import" in reason
    )
    with pytest.raises(DependencyMissingError, match="lm-eval"):
        evaluation.run_eval(tiny_lm, evaluation.LOCAL_TASK, limit=1)
    assert generation.generate(
        tiny_lm, "still fine", GenerationConfig(max_new_tokens=2)
    ).measurement.output_tokens


@pytest.mark.slow
def test_lab_page_explains_a_missing_lm_eval(monkeypatch):
    import sys
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    for name in [m for m in sys.modules if m == "lm_eval" or m.startswith("lm_eval.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "lm_eval", None)
    at = AppTest.from_file(
        str(Path(__file__).resolve().parents[1] / "pages/4_Few-shot_code_and_eval.py"), default_timeout=180
    )
    at.query_params["model"] = "tiny-gpt-neo"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("lm-eval" in w.value and "failed to import" in w.value for w in at.warning)
    assert not [b for b in at.button if b.key == "lab.eval_go"]  # no run button to press into a crash


def test_deepspeed_missing_fails_its_contender_with_the_reason(monkeypatch):
    """A race worker whose interpreter cannot import deepspeed reports the contender failed, with why."""
    import sys

    from engine.race import contenders, worker

    monkeypatch.setitem(sys.modules, "deepspeed", None)
    job = {
        "contender": contenders.CONTENDERS["deepspeed"].to_dict(),
        "model": "tiny-gpt-neo",
        "device": "cpu",
        "dtype": "fp32",
        "max_new_tokens": 2,
        "prompts": ["hello"],
        "runs": 1,
        "warmup": 0,
    }
    result = worker.run_job(job)
    assert result["status"] == "failed"
    assert "deepspeed is not importable" in result["reason"] and "init_inference" in result["reason"]
