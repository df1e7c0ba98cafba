"""`python -m engine estimate | gpus | roofline`: flags, JSON keys, and errors that say what to do."""

from __future__ import annotations

import json
import re

import pytest

from engine.cli import main

ESTIMATE_KEYS = {
    "params",
    "weights_bytes",
    "kv_bytes_per_token",
    "kv_cache_bytes",
    "overhead_bytes",
    "total_bytes",
    "fits",
    "max_batch",
    "decode_s_per_token",
    "prefill_s",
    "generation_s",
    "usd_per_million_tokens",
}


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_estimate_json_answers_the_t4_question(capsys):
    r = _json(
        capsys,
        [
            "estimate",
            "--model",
            "gpt-neo-2.7b",
            "--dtype",
            "fp16",
            "--gpu",
            "t4",
            "--batch",
            "8",
            "--seq-len",
            "1024",
            "--usd-per-hour",
            "0.35",
            "--json",
        ],
    )
    assert r.keys() >= ESTIMATE_KEYS
    assert (
        r["params"] == 2_651_307_520 and r["fits"] is True and r["max_batch"] == 24
    )  # 15,360 MiB, the driver's T4
    assert r["kv_cache_bytes"] == 8 * 1024 * 327_680
    assert r["inputs"]["prompt_tokens"] == 512 and r["inputs"]["output_tokens"] == 512
    assert r["usd_per_million_tokens"] > 0


def test_estimate_from_a_config_file(tmp_path, capsys):
    cfg = {
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "intermediate_size": 11008,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    r = _json(
        capsys,
        [
            "estimate",
            "--config",
            str(path),
            "--dtype",
            "fp16",
            "--gpu",
            "a100-80gb",
            "--batch",
            "1",
            "--seq-len",
            "4096",
            "--prompt-tokens",
            "4000",
            "--output-tokens",
            "96",
            "--json",
        ],
    )
    assert r["params"] == 6_738_415_616 and r["kv_cache_bytes"] == 2_147_483_648
    # no price given: the GPU's published on-demand price, and where and when it was quoted
    assert r["usd_per_million_tokens"] > 0 and "quoted" in r["price_source"] and "http" in r["price_source"]


def test_estimate_text_output(capsys):
    assert (
        main(
            [
                "estimate",
                "--model",
                "llama-2-13b",
                "--dtype",
                "fp16",
                "--gpu",
                "t4",
                "--batch",
                "1",
                "--seq-len",
                "512",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out and "GPUs needed" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "gpt-5"], "unknown model"),
        (["--model", "gpt-5"], "`python -m engine gpus --models` lists all"),
        (["--model", "gpt2", "--gpu", "tpu"], "unknown GPU"),
        (["--model", "gpt2", "--batch", "0"], "batch must be a positive whole number"),
        (["--model", "gpt2", "--seq-len", "-5"], "sequence length must be"),
        (["--model", "gpt2", "--calibrated"], "--gpu this-machine"),
        # 1,000 GPUs for a 12-layer model read as '8 GPUs in tensor parallel x 125 pipeline stages', 16 MB each
        (["--model", "gpt2", "--gpus", "1000"], "more stages than the model's 12 layers"),
    ],
)
def test_estimate_errors_say_what_to_do(capsys, argv, message):
    base = {"--dtype": "fp16", "--gpu": "t4", "--batch": "1", "--seq-len": "128"}
    args = ["estimate", *argv]
    for flag, value in base.items():
        if flag not in argv:
            args += [flag, value]
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_estimate_rejects_a_file_that_is_not_a_config(tmp_path, capsys):
    bad = tmp_path / "weights.bin"
    bad.write_bytes(b"\x00\x01\x02 not json")
    assert (
        main(
            [
                "estimate",
                "--config",
                str(bad),
                "--dtype",
                "fp16",
                "--gpu",
                "t4",
                "--batch",
                "1",
                "--seq-len",
                "8",
            ]
        )
        == 2
    )
    assert "not look like a Hugging Face config.json" in capsys.readouterr().err


def test_gpus_lists_the_catalog_with_sources(capsys):
    r = _json(capsys, ["gpus", "--json"])
    t4 = next(g for g in r["gpus"] if g["key"] == "t4")
    assert t4["ridge_fp16_ops_per_byte"] == pytest.approx(216.6, abs=0.1)
    assert all(g["sources"]["bandwidth"] for g in r["gpus"])
    assert main(["gpus"]) == 0
    table = capsys.readouterr().out
    assert "t4-datasheet" in table
    # the engineer's walk read "a100-80gb-pcieA100 80GB PCIe": every key stands apart from its name
    for g in r["gpus"]:
        assert re.search(rf"^{re.escape(g['key'])}\s{{2,}}{re.escape(g['name'])}", table, re.M), g["key"]


def test_roofline_json(capsys):
    r = _json(
        capsys,
        [
            "roofline",
            "--gpu",
            "t4",
            "--model",
            "gpt-neo-125m",
            "--phase",
            "decode",
            "--seq-len",
            "512",
            "--batch",
            "1",
            "--dtype",
            "fp16",
            "--json",
        ],
    )
    assert r["ridge_ops_per_byte"] == pytest.approx(216.6, abs=0.1)
    names = [o["name"] for o in r["operators"]]
    assert names[:3] == ["Q projection", "K projection", "V projection"] and "lm_head" in names
    for o in r["operators"]:
        assert {"name", "flops", "bytes", "intensity", "bound"} <= o.keys()
        assert o["bound"] == "memory"
    assert (
        main(
            [
                "roofline",
                "--gpu",
                "t4",
                "--model",
                "gpt-neo-125m",
                "--phase",
                "prefill",
                "--seq-len",
                "0",
                "--batch",
                "1",
            ]
        )
        == 2
    )


def test_estimate_calibrated_on_this_machine(tmp_path, monkeypatch, capsys):
    from engine.calc import model_preset
    from engine.calc.timing import Efficiency
    from engine.calibration import RunSample, build_calibration, machine_spec, predict, save_calibration

    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path))
    args = [
        "estimate",
        "--model",
        "gpt-neo-125m",
        "--dtype",
        "bf16",
        "--gpu",
        "this-machine",
        "--batch",
        "1",
        "--seq-len",
        "96",
        "--prompt-tokens",
        "64",
        "--output-tokens",
        "32",
        "--calibrated",
        "--json",
    ]
    assert main(args) == 2
    assert "python -m engine calibrate" in capsys.readouterr().err  # no calibration yet: says how to make one
    machine = machine_spec(50e9, {"fp32": 200e9, "bf16": 300e9}, memory_bytes=24e9)
    smol = model_preset("smollm2-135m")
    true = {"fp32": Efficiency(0.2, 0.5, 3e-4), "bf16": Efficiency(0.2, 0.4, 3e-4)}
    samples = []
    for dt, eff in true.items():
        ttft, tpot = predict(smol, RunSample(dt, 1, 64, 32, 0, 0), machine, eff)
        samples.append(RunSample(dt, 1, 64, 32, ttft, tpot))
    save_calibration(build_calibration(smol, samples, machine, model="smollm2-135m-instruct"))
    r = _json(capsys, args)
    assert r["mode"] == "calibrated"
    expected = predict(
        model_preset("gpt-neo-125m"), RunSample("bf16", 1, 64, 32, 0, 0), machine, true["bf16"]
    )[1]
    assert r["decode_s_per_token"] == pytest.approx(expected, rel=0.02)
    datasheet = _json(capsys, [*args[:-2], "--json"])
    assert datasheet["mode"] == "datasheet" and datasheet["decode_s_per_token"] < r["decode_s_per_token"] / 3


def _estimate_config(capsys, tmp_path, cfg, *extra):
    folder = tmp_path / "downloads-folder"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    argv = ["estimate", "--config", str(folder), "--dtype", "fp16", "--gpu", "t4", "--batch", "1"]
    return _json(capsys, [*argv, "--seq-len", "256", *extra, "--json"])


def test_estimate_names_the_model_not_the_folder_and_lists_no_warning_when_exact(tmp_path, capsys):
    cfg = {
        "_name_or_path": "EleutherAI/pythia-70m",
        "architectures": ["GPTNeoXForCausalLM"],
        "model_type": "gpt_neox",
        "hidden_size": 512,
        "num_hidden_layers": 6,
        "num_attention_heads": 8,
        "intermediate_size": 2048,
        "vocab_size": 50304,
        "max_position_embeddings": 2048,
        "rotary_pct": 0.25,
    }
    r = _estimate_config(capsys, tmp_path, cfg)
    assert r["model"] == "EleutherAI/pythia-70m"
    assert (
        r["params"] == 70_426_624 and r["params_source"] == "meta device"
    )  # Pythia's model card: 70,426,624
    assert r["warnings"] == []


def test_estimate_warns_when_it_rests_on_an_assumption(tmp_path, capsys):
    cfg = {
        "model_type": "no-such-family",
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 1000,
    }
    r = _estimate_config(capsys, tmp_path, cfg, "--weight-format", "Q4_0")
    assert r["model"] == "no-such-family" and r["params_source"] == "formula"
    text = " ".join(r["warnings"])
    assert "Llama-like" in text and "could not be built offline" in text and "context length" in text
    assert "Q4_0" in text and r["inputs"]["kv_dtype"] == "fp16"


def test_a_published_model_goes_by_its_hub_id_or_its_name_alone(capsys):
    by_id = _json(capsys, ["estimate", "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "a100-80gb", "--json"])
    by_name = _json(capsys, ["estimate", "--model", "qwen2.5-7b-instruct", "--gpu", "a100-80gb", "--json"])
    assert by_id["params"] == by_name["params"] > 7e9


def test_gpus_models_lists_the_published_configs_by_hub_id(capsys):
    r = _json(capsys, ["gpus", "--models", "--json"])
    names = {m["name"] for m in r["hub_models"]}
    assert "meta-llama/Llama-3.1-8B-Instruct" in names and all(m["source"] for m in r["hub_models"])


@pytest.mark.parametrize("flag", ["--prompt-tokens", "--output-tokens"])
def test_a_zero_length_is_refused_not_replaced_by_the_default(capsys, flag):
    """`--prompt-tokens 0` ran as '(512 prompt + 512 output)' without a word: 0 was read as a missing flag."""
    assert main(["estimate", "--model", "gpt2", "--gpu", "t4", flag, "0"]) == 2
    assert "must be a positive whole number, got 0" in capsys.readouterr().err


def test_no_room_for_a_cache_is_said_not_printed_as_negative_gigabytes(capsys):
    """'vllm allocates -66.87 GB per GPU for the cache' for a 70B on one H100."""
    argv = [
        "estimate",
        "--model",
        "meta-llama/Llama-3.1-70B-Instruct",
        "--gpu",
        "h100-sxm",
        "--dtype",
        "bf16",
        "--engine",
        "vllm",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "has no room for a cache per GPU: the weights and its runtime exceed its budget by" in out
    assert "allocates -" not in out


def test_a_solver_answer_without_an_upper_end_prints_unbounded():
    """`--solve cheapest` ended in 'TypeError: unsupported format string passed to NoneType.__format__' when no
    option met the objectives at the slow end (the JSON's high end is null)."""
    from engine.commands.simulate import solve_text

    r = {"solve": "cheapest", "sentence": "Cheapest ...", "unit": "USD per hour"}
    text = solve_text({**r, "answer": {"low": 44.03, "central": 64.75, "high": None, "width": None}})
    assert "answer $64.75 USD per hour (interval $44.03 to unbounded)" in text
    users = solve_text(
        {
            "solve": "max-users",
            "sentence": "",
            "unit": "users",
            "answer": {"low": 72, "central": 125, "high": 153, "width": 2.12},
        }
    )
    assert "answer 125 users (interval 72 to 153, width 2.12x)" in users


def test_a_refusal_under_json_is_json_and_a_bad_flag_is_one_line(capsys):
    """The engineer's walk: `--json` answered a refusal in plain text, and `--gpus abc` printed some thirty lines of
    usage before the one that said what was wrong."""
    base = ["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm"]
    assert main([*base, "--gpus", "0", "--json"]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out) == {"error": "GPUs must be a positive whole number up to 1,024, got 0"}
    assert "GPUs must be" in err
    with pytest.raises(SystemExit) as stop:
        main([*base, "--gpus", "abc"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid int value: 'abc'" in err and "usage:" not in err


@pytest.mark.parametrize("gpus", [1, 2])
def test_a_serving_engines_memory_keys_are_its_allocation_and_the_overhead_model_a_named_comparison(
    capsys, gpus
):
    """The engineer's walk: `estimate --engine vllm --json` gave the generic 20%-overhead model's total_bytes as if
    it were the plan's memory (24 GB for an 8B on an H100, where vLLM takes 77 GB of it: weights, its profile run,
    its runtime and a KV pool). With a serving engine the top-level figures are the engine's allocation; the
    overhead model's sit under overhead_model; fits, gpus_needed, launch_command, ttft_s, prefill_batch_s stay."""
    base = ["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--dtype", "fp16", "--batch", "32",
            "--seq-len", "1024", "--gpus", str(gpus), "--json"]  # fmt: skip
    generic = _json(capsys, base)
    r = _json(capsys, [*base, "--engine", "vllm"])
    sm = r["serving_memory"]
    runtime = sm["activation_bytes"] + sm["non_torch_bytes"]
    per_gpu = sm["weights_bytes"] + runtime + sm["kv_bytes"]
    assert r["per_gpu_bytes"] == pytest.approx(per_gpu) == pytest.approx(sm["budget_bytes"])
    assert r["total_bytes"] == pytest.approx(gpus * per_gpu)
    assert r["overhead_bytes"] == pytest.approx(gpus * runtime)
    assert r["kv_pool_bytes_per_gpu"] == pytest.approx(sm["kv_bytes"])
    # the load's own KV and the weights are the same count in both models; the overhead model is kept, named
    assert r["kv_cache_bytes"] == generic["kv_cache_bytes"] and r["weights_bytes"] == generic["weights_bytes"]
    om = r["overhead_model"]
    assert om["total_bytes"] == generic["total_bytes"] and om["per_gpu_bytes"] == generic["per_gpu_bytes"]
    assert om["overhead_bytes"] == generic["overhead_bytes"] and om["overhead_fraction"] == 0.2
    assert r["memory_figures"].startswith(f"vllm's allocation on the {gpus} GPU(s) asked")
    assert generic["memory_figures"].startswith("the overhead model") and "overhead_model" not in generic
    assert r.keys() >= ESTIMATE_KEYS | {"fits", "gpus_needed", "launch_command", "ttft_s", "prefill_batch_s"}
    assert r["fits"] is True and r["gpus_needed"] == 1 and r["launch_command"].startswith("vllm serve")


@pytest.mark.parametrize(("seq_len", "limit"), [("1024", "kv_cache"), ("128", "max_num_seqs")])
def test_the_plan_says_which_limit_sets_its_max_batch_and_the_command_states_the_cap(capsys, seq_len, limit):
    """One plan, one number: the max batch the plan prints is the cache's or the --max-num-seqs the launch command
    states (vLLM's 1024 on an H100), whichever binds first, and the output says which."""
    argv = ["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--dtype", "fp16", "--engine", "vllm",
            "--batch", "32", "--seq-len", seq_len]  # fmt: skip
    r = _json(capsys, [*argv, "--json"])
    assert "--max-num-seqs 1024 " in r["launch_command"] and r["max_batch_limited_by"] == limit
    assert (r["max_batch"] == 1024) == (limit == "max_num_seqs") and r["max_batch"] <= 1024
    assert main(argv) == 0
    text = capsys.readouterr().out
    said = (
        "(--max-num-seqs 1024 binds before the KV cache)"
        if limit == "max_num_seqs"
        else "(its KV cache binds, "
    )
    assert f"max batch at {seq_len} tokens: {r['max_batch']} {said}" in text


def test_the_estimate_help_says_what_the_memory_keys_hold(capsys):
    with pytest.raises(SystemExit):
        main(["estimate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "overhead_model" in text and "memory_figures" in text and "engine's allocation" in text


def test_the_cli_takes_the_pages_engine_names_and_says_when_its_times_are_bounds(capsys):
    """The student's walk: `estimate` without --engine printed 24.6 ms/token beside the page's 50.3 with only
    '[datasheet]' to say why, and `--engine transformers`, the page's name, was refused."""
    argv = ["estimate", "--model", "gpt-neo-2.7b", "--gpu", "t4", "--batch", "8"]
    assert main(argv) == 0
    bound = capsys.readouterr().out
    assert "physical bounds: every roof reached, no engine's costs" in bound and "--engine hf" in bound
    assert main([*argv, "--engine", "transformers", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["engine"] == "hf"
    assert main([*argv, "--engine", "transformers"]) == 0
    assert "physical bounds" not in capsys.readouterr().out


@pytest.mark.parametrize(("model", "gpu", "gpus", "dtype", "flag"), [
    ("llama-3.3-70b-instruct", "h100-sxm", "4", "bf16", "bfloat16"),
    ("llama-3.1-8b-instruct", "t4", "2", "fp16", "float16"),
])  # fmt: skip
def test_estimate_and_simulate_start_from_the_same_precision_without_dtype(
    capsys, model, gpu, gpus, dtype, flag
):
    """The engineer's walk: without --dtype, `simulate` ran bf16 and `estimate` fp16 (its launch command said
    --dtype float16 for a bf16 checkpoint). Both now start from the checkpoint's own 16-bit precision where the GPU
    has a peak for it, as the Memory-and-cost page does: both models are bf16, a T4 has no bf16 peak."""
    common = ["--model", model, "--gpu", gpu, "--gpus", gpus, "--json"]
    est = _json(capsys, ["estimate", *common, "--engine", "vllm"])
    assert est["inputs"]["dtype"] == dtype and f"--dtype {flag}" in est["launch_command"]
    sim = _json(capsys, ["simulate", *common, "--sweep", "1", "--requests", "2"])
    assert sim["simulated"]["dtype"] == dtype and sim["simulated"]["kv_dtype"] == dtype


def test_roofline_starts_from_the_pages_shape_without_seq_len_or_batch(capsys):
    """A student's walk: `roofline` refused to run without --seq-len and --batch, where the page starts at s = 512,
    b = 1."""
    out = _json(capsys, ["roofline", "--model", "gpt-neo-125m", "--gpu", "t4", "--phase", "decode", "--json"])
    assert (out["seq_len"], out["batch"]) == (512, 1)


def test_a_config_missing_fields_also_names_a_value_out_of_range(tmp_path, capsys):
    """An engineer's walk: a config with hidden_size -5 and no heads was told only that it lacks heads and vocab_size."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": -5, "num_hidden_layers": 2}))
    assert main(["estimate", "--config", str(path), "--gpu", "h100-sxm"]) == 2
    err = capsys.readouterr().err
    assert "it lacks heads, vocab_size, and hidden size is -5, not a positive whole number" in err


def test_the_default_estimates_prefill_is_not_labelled_one_requests_ttft(capsys):
    """A student's walk: `estimate --model gpt-neo-2.7b --gpu t4` printed 'prefill (TTFT) 381 ms', the batch's 8
    prompts together, beside the page's 'TTFT 121 ms for one request'."""
    assert main(["estimate", "--model", "gpt-neo-2.7b", "--gpu", "t4"]) == 0
    out = capsys.readouterr().out
    assert "prefill (TTFT)" not in out and "the first token when all 8 prompts arrive together" in out
