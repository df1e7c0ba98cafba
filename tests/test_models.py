from __future__ import annotations

import pytest

from engine.core import paths
from engine.core.errors import (
    HubUnreachableError,
    InvalidParameterError,
    ModelLoadError,
    PathNotAllowedError,
    UnknownModelError,
)
from engine.runtime import models


def test_presets_cover_the_issue():
    for name in ("gpt-neo-125m", "gpt-neo-1.3b", "gpt-neo-2.7b", "smollm2-135m-instruct", "tiny-gpt-neo"):
        assert name in models.PRESETS
    assert models.DEFAULT_MODEL == "smollm2-135m-instruct"


def test_tiny_model_report(tiny_lm):
    assert tiny_lm.architecture == "GPTNeoForCausalLM"
    assert tiny_lm.params == sum(p.numel() for p in tiny_lm.model.parameters())
    assert tiny_lm.footprint_bytes >= tiny_lm.params * 4
    assert tiny_lm.device_map == {"": "cpu"}
    assert tiny_lm.dtype == "fp32" and tiny_lm.load_s > 0
    spec = tiny_lm.spec_dict()
    assert spec["n_layer"] == 4 and spec["hidden"] == 64 and spec["heads"] == 4


def test_bundled_model_from_safetensors_copy(smol_lm):
    assert (
        smol_lm.params == 134_515_008
    )  # the dequantized SmolLM2-135M-Instruct (HF config: 30 layers, hidden 576, tied head)
    assert (models.bundled_cache_dir() / "model.safetensors").is_file()
    again = models.load_model("smollm2-135m-instruct")
    assert (
        again.load_s < 3.0
    )  # the safetensors copy, not a second dequantization (~15 s); generous for CI noise


def test_bf16_load_halves_the_weights(tiny_lm):
    bf16 = models.load_model("tiny-gpt-neo", dtype="bf16")
    assert bf16.dtype == "bf16"
    assert bf16.weights_bytes * 2 == tiny_lm.weights_bytes
    # The footprint also counts buffers (GPT-Neo's causal-mask `bias`, a bool per position pair), which
    # do not shrink with the weights' precision.
    assert bf16.footprint_bytes < tiny_lm.footprint_bytes


def test_fp16_refused_on_cpu():
    with pytest.raises(InvalidParameterError, match="bf16"):
        models.load_model("tiny-gpt-neo", dtype="fp16", device="cpu")


def test_cuda_refused_without_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(InvalidParameterError, match="CUDA"):
        models.load_model("tiny-gpt-neo", device="cuda")


@pytest.mark.parametrize("name", ["no-such-model", "  ", "not a model!"])
def test_unknown_model(name):
    with pytest.raises(UnknownModelError):
        models.load_model(name)


def test_hub_id_offline_names_the_offline_options(monkeypatch):
    monkeypatch.setattr(models, "hub_reachable", lambda timeout_s=2.0: False)
    with pytest.raises(HubUnreachableError, match="smollm2-135m-instruct"):
        models.load_model("EleutherAI/gpt-neo-125m")


@pytest.mark.parametrize("path", ["../../etc", "/etc", "~/../../etc/passwd", "./../../../"])
def test_paths_outside_roots_refused(path):
    with pytest.raises(PathNotAllowedError):
        models.load_model(path)


def test_local_folder_that_is_not_a_model(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERENCE_LAB_MODEL_ROOTS", str(tmp_path))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UnknownModelError, match=r"config\.json"):
        models.load_model(str(tmp_path / "empty"))


def test_local_folder_loads(tmp_path, monkeypatch, tiny_lm):
    monkeypatch.setenv("INFERENCE_LAB_MODEL_ROOTS", str(tmp_path))
    tiny_lm.model.save_pretrained(tmp_path / "mine")
    tiny_lm.tokenizer.save_pretrained(tmp_path / "mine")
    lm = models.load_model("mine")
    assert lm.params == tiny_lm.params and lm.architecture == "GPTNeoForCausalLM"


def test_pickle_checkpoints_are_not_loaded(tmp_path, monkeypatch, tiny_lm):
    monkeypatch.setenv("INFERENCE_LAB_MODEL_ROOTS", str(tmp_path))
    import torch

    folder = tmp_path / "pickled"
    tiny_lm.model.save_pretrained(folder)
    tiny_lm.tokenizer.save_pretrained(folder)
    (folder / "model.safetensors").unlink()
    torch.save(tiny_lm.model.state_dict(), folder / "pytorch_model.bin")  # a pickle: never loaded from users
    with pytest.raises(ModelLoadError, match=r"(?i)safetensors"):
        models.load_model("pickled")


def test_trust_remote_code_only_from_server_env(monkeypatch):
    monkeypatch.delenv("INFERENCE_LAB_TRUST_REMOTE_CODE", raising=False)
    assert paths.trust_remote_code_allowed() is False
    monkeypatch.setenv("INFERENCE_LAB_TRUST_REMOTE_CODE", "1")
    assert paths.trust_remote_code_allowed() is True


def test_auto_and_its_resolved_precision_share_one_loaded_copy():
    """Home listed smollm2-135m-instruct fp32 twice (one page asked for "auto", another for "fp32"): two copies in
    memory under "One copy of each model serves every browser session". The precision is resolved before the cache."""
    from ui.common import cached_model, loaded_models

    a = cached_model("tiny-gpt-neo", "auto")
    b = cached_model("tiny-gpt-neo", "fp32")
    assert a is b
    assert (
        sum(lm is a for lm in loaded_models()) == 1
        and [lm.dtype for lm in loaded_models()].count("fp32") >= 1
    )


@pytest.mark.parametrize("name", ["tiny-gpt-neo", "gpt-neo-125m-random", "gpt-neo-125m"])
def test_the_wait_message_says_what_loading_does_for_each_kind_of_model(name, monkeypatch):
    """The playground said a random GPT-Neo "dequantizes" while it loaded: that is the bundled GGUF's step only.
    A random preset now says it is built with random weights from its config; a hub model says where it is read."""
    import contextlib

    from ui import widgets

    said: list[str] = []

    @contextlib.contextmanager
    def spinner(text, *args, **kwargs):
        said.append(text)
        yield

    monkeypatch.setattr(widgets.st, "spinner", spinner)
    monkeypatch.setattr(widgets, "cached_model", lambda n, d: "loaded")
    monkeypatch.setattr(models, "_bundled_copy_ready", lambda preset=None: True, raising=False)
    assert widgets.load_with_progress(name, "auto") == "loaded"
    assert said and said[0].startswith(f"Loading {name} (auto)…")
    assert "dequantiz" not in said[0]
    kind = models.PRESETS[name].kind
    if kind == "random":
        assert "random weights from a GPTNeoConfig" in said[0]
    else:
        assert "Hugging Face cache" in said[0]


def test_only_the_bundled_model_is_said_to_dequantize_on_its_first_load(monkeypatch):
    monkeypatch.setattr(models, "_bundled_copy_ready", lambda preset=None: False)
    assert "dequantizes the bundled GGUF" in models.loading_note("smollm2-135m-instruct")
    tiny = models.loading_note("tiny-gpt-neo")
    assert tiny.startswith("building the model with random weights") and "tokenizer" in tiny
    monkeypatch.setattr(models, "_bundled_copy_ready", lambda preset=None: True)
    assert "dequantiz" not in models.loading_note("smollm2-135m-instruct")
    assert models.loading_note("not a model!") == ""
