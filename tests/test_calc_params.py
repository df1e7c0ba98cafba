"""The calculator's parameter count against the real transformers model built on the meta device."""

from __future__ import annotations

import pytest

from engine.arch.meta import check_params, meta_count
from engine.arch.meta import config_of_spec as hf_config_of
from engine.calc import load_model_presets
from engine.calc.hf_config import parse_config_text, spec_from_hf_config

pytest.importorskip("transformers")


@pytest.mark.parametrize("key", sorted(load_model_presets()))
def test_every_preset_matches_the_meta_device_model(key):
    from engine.calc.specs import published_params

    check = check_params(load_model_presets()[key])
    assert check.match, check
    assert check.real == published_params(key)


@pytest.mark.parametrize(
    "cfg",
    [
        {
            "model_type": "gpt_neo",
            "hidden_size": 64,
            "num_layers": 4,
            "num_heads": 4,
            "vocab_size": 1000,
            "max_position_embeddings": 128,
            "window_size": 16,
            "attention_types": [[["global", "local"], 2]],
        },
        {
            "model_type": "llama",
            "hidden_size": 96,
            "num_hidden_layers": 3,
            "num_attention_heads": 6,
            "num_key_value_heads": 1,
            "intermediate_size": 200,
            "vocab_size": 500,
            "tie_word_embeddings": False,
        },
        {
            "model_type": "mistral",
            "hidden_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "intermediate_size": 256,
            "vocab_size": 300,
            "sliding_window": 64,
        },
        {
            "model_type": "qwen2",
            "hidden_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "intermediate_size": 256,
            "vocab_size": 300,
            "tie_word_embeddings": True,
        },
        {"model_type": "gpt2", "n_embd": 96, "n_layer": 2, "n_head": 4, "vocab_size": 400, "n_positions": 64},
    ],
    ids=["gpt_neo", "llama-mqa", "mistral-gqa", "qwen2-bias", "gpt2"],
)
def test_any_config_matches_the_meta_device_model(cfg):
    assert check_params(cfg).match


def test_config_round_trip_keeps_the_shape():
    for spec in load_model_presets().values():
        again = spec_from_hf_config(hf_config_of(spec), name=spec.name)
        assert (again.n_layer, again.hidden, again.n_kv_head, again.window_evicts) == (
            spec.n_layer,
            spec.hidden,
            spec.n_kv_head,
            spec.window_evicts,
        )


def test_bert_base_cased_is_433_249_280_bytes_in_fp32():
    """accelerate's own estimate-memory test: total 433,249,280 B, largest layer 90,669,056 B."""
    bert = meta_count({"model_type": "bert", "vocab_size": 28996}, head=False)
    assert bert.param_bytes + bert.buffer_bytes == 433_249_280
    assert bert.largest_layer_bytes == 90_669_056


def test_uploaded_config_text_parses_with_json_only():
    spec = parse_config_text(
        b'{"model_type": "llama", "hidden_size": 576, "num_hidden_layers": 30, '
        b'"num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536, '
        b'"vocab_size": 49152, "tie_word_embeddings": true, "max_position_embeddings": 8192}'
    )
    assert check_params(spec).real == 134_515_008


def test_hub_id_reads_config_json_only(tmp_path, monkeypatch):
    import json

    import huggingface_hub

    from engine.calibration import resolve_model_spec

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(hf_config_of(load_model_presets()["llama-2-7b"])))
    calls = []

    def fake_download(repo_id, filename, **kw):
        calls.append((repo_id, filename))
        return str(cfg)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    spec = resolve_model_spec("meta-llama/Llama-2-7b-hf")
    assert calls == [("meta-llama/Llama-2-7b-hf", "config.json")]
    assert check_params(spec).real == 6_738_415_616


def test_hub_id_offline_says_what_to_do(monkeypatch):
    from engine.calibration import resolve_model_spec
    from engine.core.errors import HubUnreachableError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubUnreachableError, match=r"give the config\.json itself instead"):
        resolve_model_spec("no-such-owner/no-such-model")


def test_hub_id_offline_points_to_the_shipped_variant_and_a_shipped_name_needs_no_owner(monkeypatch):
    """The engineer's walk: Qwen/Qwen2.5-72B-Instruct offline got no word of the Qwen/Qwen2.5-72B config the lab
    ships, and the page's hub-id box refused 'llama-3.1-8b-instruct', a name the command line takes."""
    from engine.arch.resolve import hub_spec
    from engine.calibration import resolve_model_spec
    from engine.core.errors import HubUnreachableError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubUnreachableError, match=r"ships the config of Qwen/Qwen2\.5-72B, a variant"):
        resolve_model_spec("Qwen/Qwen2.5-72B-Instruct")
    with pytest.raises(HubUnreachableError) as exc:
        resolve_model_spec("no-such-owner/no-such-model")
    assert "ships the config" not in str(exc.value)
    assert hub_spec("llama-3.1-8b-instruct").name == "meta-llama/Llama-3.1-8B-Instruct"
    assert hub_spec("llama-3-8b").n_layer == 32  # a calculator preset by its name, as --model takes it


@pytest.mark.parametrize(
    "text",
    [
        "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct",
        "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/",
        "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/tree/main",
        "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/blob/main/config.json",
        "huggingface.co/meta-llama/Llama-3.1-8B-Instruct?library=transformers",
        "  http://www.huggingface.co/meta-llama/Llama-3.1-8B-Instruct#model-card ",
        "https://hf.co/meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.1-8B-Instruct",
    ],
)
def test_a_hub_address_reads_as_its_owner_and_name(text):
    """A model's page address pasted from the browser was refused as 'not a hub id' on the page and the command
    line; the engine reads it as owner/name, and a shipped config needs nothing fetched."""
    from engine.arch.hub import hub_repo_id
    from engine.arch.resolve import hub_spec
    from engine.calibration import resolve_model_spec

    assert hub_repo_id(text) == "meta-llama/Llama-3.1-8B-Instruct"
    assert hub_spec(text).name == resolve_model_spec(text).name == "meta-llama/Llama-3.1-8B-Instruct"


def test_a_hub_address_that_names_no_model_is_refused_with_what_to_give():
    from engine.arch.hub import config_from_hub, hub_repo_id
    from engine.core.errors import InvalidParameterError

    for text, what in (
        ("https://huggingface.co/datasets/HuggingFaceFW/fineweb", "a dataset"),
        ("https://huggingface.co/spaces/owner/app", "a Space"),
        ("https://huggingface.co/meta-llama", "an owner's page"),
        ("https://huggingface.co/", "the hub's front page"),
    ):
        with pytest.raises(
            InvalidParameterError, match=f"is {what}, not a model's page: give a model's address"
        ):
            hub_repo_id(text)
    with pytest.raises(InvalidParameterError, match="a Space"):
        config_from_hub("https://huggingface.co/spaces/owner/app")
    assert hub_repo_id("gpt-neo-2.7b") == "gpt-neo-2.7b"  # a preset's name is left as it is


def test_the_command_line_takes_a_hub_address(capsys):
    import json

    from engine.cli import main

    url = "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/tree/main"
    assert main(["estimate", "--model", url, "--gpu", "h100-sxm", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == out["model_id"] == "meta-llama/Llama-3.1-8B-Instruct" and out["fits"] is True


def test_a_truncated_config_says_at_once_where_it_stops():
    """The engineer's walk: 'unterminated string starting at at line 1' (json's message ends in 'at')."""
    from engine.calc.hf_config import parse_config_json
    from engine.core.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError) as e:
        parse_config_json('{"model_type": "lla')
    assert "unterminated string starting at line 1, column 16" in str(e.value) and "at at" not in str(e.value)
