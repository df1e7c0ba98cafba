"""GPU estimates a team can budget on: published measurements as data, engine efficiency fitted on them with
intervals, memory as vLLM and SGLang allocate it, formats and GPUs, the track record, and the estimate CLI's
contract."""

from __future__ import annotations

import json
import math

import pytest

from engine.calc import efficiency as E
from engine.calc import published, quant
from engine.calc.hf_config import spec_from_hf_config
from engine.calc.memory import weights_bytes
from engine.calc.report import Inputs, estimate
from engine.calc.serving_memory import serving_memory
from engine.calc.specs import GIB, custom_gpu_from_figures, gpu_spec, model_preset
from engine.cli import main
from engine.core.errors import InvalidParameterError

LLAMA3_8B = "meta-llama/Meta-Llama-3-8B"


# ---------------------------------------------------------------- the published set


def test_every_published_row_has_a_source_and_a_quote_holding_its_value():
    rows = published.rows()
    assert len(rows) >= 60
    for r in rows:
        assert r.source and r.quote and r.metric and r.gpu and r.model, r.id
        digits = f"{r.value:,}".rstrip("0").rstrip(".")
        plain = f"{r.value}".rstrip("0").rstrip(".")
        assert any(
            d in r.quote.replace(",", "") or d in r.quote for d in (digits, plain, digits.replace(",", ""))
        ), r.id


def test_every_config_parses_and_every_alias_points_at_one():
    configs = published.configs()
    for model in set(published.aliases()["models"].values()):
        assert model in configs, model
    for model, cfg in configs.items():
        spec = spec_from_hf_config(cfg, name=model)
        assert spec.n_layer > 0 and spec.hidden > 0


# ---------------------------------------------------------------- GPUs: driver memory, catalogue, custom


@pytest.mark.parametrize(
    "key",
    [
        "rtx-3090",
        "rtx-3090-ti",
        "rtx-4090",
        "rtx-a6000",
        "l40s",
        "l4",
        "a10g",
        "a100-40gb",
        "a100-80gb",
        "a100-80gb-pcie",
        "a100-40gb-pcie",
        "h100-sxm",
        "h100-pcie",
        "h200",
        "b200",
        "mi300x",
    ],
)
def test_the_catalogue_has_the_gpus_teams_deploy_on_with_sources(key):
    g = gpu_spec(key)
    assert g.memory_bytes > 0 and g.bandwidth_bytes_per_s > 0 and g.flops_for("bf16") > 0
    assert g.sources["memory"] and g.sources["bandwidth"]


def test_gpu_memory_is_what_the_driver_reports_not_decimal_gb():
    h100 = gpu_spec("h100-sxm")
    assert h100.memory_bytes == 81559 * 2**20  # nvidia-smi's 81559 MiB = 79.65 GiB, not 80e9 B = 74.5 GiB
    assert round(h100.memory_bytes / GIB, 2) == 79.65
    assert "81559 MiB" in h100.sources["memory"]


def test_fp8_runs_on_fp8_tensor_cores_where_the_gpu_has_them():
    assert gpu_spec("h100-sxm").flops_for("fp8") == 1979e12
    assert gpu_spec("a100-80gb").flops_for("fp8") == gpu_spec("a100-80gb").flops_for(
        "fp16"
    )  # no fp8 on Ampere


def test_a_custom_gpu_from_its_figures_and_bad_figures_get_a_clear_message():
    g = custom_gpu_from_figures(memory_gib=48, bandwidth_gb_s=864, tflops=362, interconnect="pcie:64")
    assert (
        g.memory_bytes == 48 * 2**30
        and g.bandwidth_bytes_per_s == 864e9
        and g.interconnect_bytes_per_s == 32e9
    )
    with pytest.raises(InvalidParameterError, match=r"bandwidth.*greater than zero"):
        custom_gpu_from_figures(memory_gib=48, bandwidth_gb_s=-1, tflops=362)
    with pytest.raises(InvalidParameterError, match=r"GPU memory.*greater than zero"):
        custom_gpu_from_figures(memory_gib=0, bandwidth_gb_s=864, tflops=362)
    with pytest.raises(InvalidParameterError, match="interconnect"):
        custom_gpu_from_figures(memory_gib=48, bandwidth_gb_s=864, tflops=362, interconnect="infiniband")


# ---------------------------------------------------------------- formats


@pytest.mark.parametrize(
    "fmt", ["fp8", "nvfp4", "mxfp4", "awq", "gptq", "gptq-int8", "bnb-nf4", "bnb-nf4-dq", "bnb-int8"]
)
def test_each_new_format_stores_fewer_bytes_than_bf16_and_keeps_the_head_16_bit(fmt):
    spec = model_preset("llama-3-8b")
    bf16 = weights_bytes(spec, "bf16")
    q = weights_bytes(spec, "bf16", fmt, scope="linear")  # mxfp4's own default covers MoE experts only
    bits = quant.get(quant.weight_format(fmt).storage).bits
    assert q < bf16
    head = spec.vocab * spec.hidden * 2  # untied head, 16-bit under the default scope
    assert q >= head + spec.vocab * spec.hidden * 2  # the embedding table too
    if quant.weight_format(fmt).scope == "linear":
        assert q == weights_bytes(spec, "bf16", fmt)  # the format's own default
    assert weights_bytes(spec, "bf16", fmt, scope="linear+head") < q or bits >= 16


def test_ffn_only_scope_keeps_attention_16_bit():
    spec = model_preset("llama-3-8b")
    ffn = weights_bytes(spec, "bf16", "fp8", scope="mlp")
    linear = weights_bytes(spec, "bf16", "fp8", scope="linear")
    attention = spec.n_layer * (2 * spec.hidden * spec.q_dim + 2 * spec.hidden * spec.kv_dim)
    assert ffn - linear == pytest.approx(
        attention * (2 - 1), rel=1e-3
    )  # 2 bytes instead of 1, plus 8 B scales


def test_fp8_kv_cache_halves_the_cache():
    spec = model_preset("llama-3-8b")
    a = estimate(
        spec, gpu_spec("h100-sxm"), Inputs(dtype="bf16", batch=8, prompt_tokens=1024, output_tokens=1024)
    )
    b = estimate(
        spec,
        gpu_spec("h100-sxm"),
        Inputs(dtype="bf16", kv_dtype="fp8", batch=8, prompt_tokens=1024, output_tokens=1024),
    )
    assert b.memory.kv_cache_bytes == a.memory.kv_cache_bytes / 2


def test_qwen3_moe_int8_quantizes_its_experts():
    """The issue's case: Qwen3-235B under int8 came out at 448.7 GB because its experts stayed 16-bit."""
    spec = spec_from_hf_config(published.configs()["Qwen/Qwen3-235B-A22B"])
    assert spec.n_experts == 128 and spec.experts_per_token == 8
    int8 = weights_bytes(spec, "bf16", "int8")
    assert 230e9 < int8 < 260e9  # about one byte per parameter, not 448.7 GB


# ---------------------------------------------------------------- memory as vLLM allocates it


def test_vllm_kv_budget_is_utilisation_of_the_cuda_total_minus_what_the_profile_run_holds():
    from engine.calc.serving_startup import cuda_total_bytes

    spec = model_preset("llama-3-8b")
    h100 = gpu_spec("h100-sxm")
    m = serving_memory(spec, h100, dtype="bf16", max_model_len=8192)
    # CUDA's total (what vLLM budgets from) sits a few hundred MiB under the driver's 81559 MiB
    assert m.budget_bytes == pytest.approx(0.9 * cuda_total_bytes(h100))
    assert 0.9 * 78.5 * 2**30 < m.budget_bytes < 0.9 * 81559 * 2**20
    assert m.kv_bytes == pytest.approx(
        m.budget_bytes - m.weights_bytes - m.activation_bytes - m.non_torch_bytes
    )
    per_block = 16 * 2 * 32 * 8 * 128 * 2  # block x K,V x layers x KV heads x head_dim x bf16
    assert m.blocks == math.floor(m.kv_bytes / per_block) and m.kv_cache_tokens == 16 * m.blocks
    assert m.max_concurrency == pytest.approx(m.kv_cache_tokens / 8192)
    tighter = serving_memory(spec, h100, dtype="bf16", max_model_len=8192, gpu_memory_utilization=0.5)
    assert tighter.kv_cache_tokens < m.kv_cache_tokens
    tp2 = serving_memory(spec, h100, dtype="bf16", max_model_len=8192, tensor_parallel=2)
    assert (
        tp2.weights_bytes == pytest.approx(m.weights_bytes / 2)
        and tp2.kv_cache_tokens > 2 * m.kv_cache_tokens
    )


def test_qwen25_72b_on_two_h100s_fits_as_vllm_served_it():
    """The issue: the 20% rule said 'does not fit' for Qwen2.5-72B on 2 x H100, which vLLM serves."""
    spec = spec_from_hf_config(published.configs()["Qwen/Qwen2.5-72B"], name="Qwen/Qwen2.5-72B")
    est = estimate(
        spec,
        gpu_spec("h100-sxm"),
        Inputs(dtype="bf16", batch=1, prompt_tokens=1024, output_tokens=1024, n_gpus=2, engine="vllm"),
    )
    assert (
        est.fits and est.serving is not None and est.serving.max_concurrency >= 1
    )  # a 2048-token request fits


def test_bad_utilisation_is_a_clear_message():
    with pytest.raises(InvalidParameterError, match="utilization"):
        serving_memory(
            model_preset("llama-3-8b"), gpu_spec("h100-sxm"), dtype="bf16", gpu_memory_utilization=1.5
        )


# ---------------------------------------------------------------- efficiency: fitted, held back, intervals


def test_the_fit_never_sees_the_held_back_rows():
    fits = E.fits()
    assert fits.held_back and fits.fitted_on
    assert not set(fits.held_back) & set(fits.fitted_on)
    assert all(E.held_back(i) for i in fits.held_back)


def test_estimates_carry_an_interval_and_never_exceed_physics():
    spec = model_preset("llama-3-8b")
    setup = E.Setup(spec, gpu_spec("a100-80gb"), "bf16", None, None, None, "bf16", 1, 1, 5, 200)
    s = E.estimate_speed(setup, "hf-compiled")
    for rate in (s.decode_tokens_per_s, s.output_tokens_per_s):
        assert rate.low <= rate.central <= rate.high <= rate.bound
    assert s.ttft_s.bound <= s.ttft_s.low <= s.ttft_s.central <= s.ttft_s.high
    assert 0.4 < s.fit.bandwidth <= 1.0  # gpt-fast-class engines reach 40-100% of the bandwidth


def test_tensor_parallel_pays_an_allreduce_latency_from_nccl_tests():
    a100 = gpu_spec("a100-80gb")
    assert E.allreduce_latency_s(a100) == pytest.approx(
        43.83e-6
    )  # nccl-tests all_reduce_perf at 32 KiB, 8 x A100
    assert E.link_kind("PCIe (no NVLink)") == "pcie" and E.link_kind("NVLink 3") == "nvlink"


# ---------------------------------------------------------------- the estimate CLI's contract


def _json(capsys, argv):
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_estimate_cli_contract_with_a_serving_engine(capsys, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(published.configs()[LLAMA3_8B]))
    r = _json(
        capsys,
        [
            "estimate",
            "--config",
            str(cfg),
            "--gpu",
            "h100-sxm",
            "--gpus",
            "1",
            "--dtype",
            "bf16",
            "--kv-dtype",
            "fp8",
            "--batch",
            "4",
            "--prompt-tokens",
            "512",
            "--output-tokens",
            "256",
            "--engine",
            "vllm",
            "--gpu-memory-utilization",
            "0.85",
            "--max-model-len",
            "8192",
            "--json",
        ],
    )
    for key in ("decode_tokens_per_s", "ttft_s", "output_tokens_per_s"):
        assert {"low", "central", "high", "bound", "width", "rows"} <= set(r[key]), key
        assert r[key]["low"] <= r[key]["central"] <= r[key]["high"]
        assert r[key]["width"] == pytest.approx(r[key]["high"] / r[key]["low"])
    assert r["decode_tokens_per_s"]["high"] <= r["decode_tokens_per_s"]["bound"]
    assert r["weights_bytes_per_gpu"] > 0 and r["kv_cache_tokens"] > 0 and r["max_concurrency"] > 0
    cmd = r["launch_command"]
    assert cmd.startswith("vllm serve meta-llama/Meta-Llama-3-8B")
    assert (
        "--max-model-len 8192" in cmd
        and "--gpu-memory-utilization 0.85" in cmd
        and "--kv-cache-dtype fp8" in cmd
    )


def test_estimate_cli_custom_gpu_and_its_errors(capsys):
    args = ["estimate", "--model", "llama-3-8b", "--dtype", "bf16", "--gpu", "custom"]
    r = _json(
        capsys,
        [
            *args,
            "--gpu-memory-gib",
            "48",
            "--gpu-bandwidth-gbs",
            "864",
            "--gpu-tflops",
            "362",
            "--engine",
            "sglang",
            "--json",
        ],
    )
    assert r["gpu"] == "custom GPU" and r["launch_command"].startswith("python -m sglang.launch_server")
    assert main([*args, "--gpu-memory-gib", "48", "--gpu-tflops", "362"]) == 2
    assert "--gpu-bandwidth-gbs" in capsys.readouterr().err
    assert main([*args, "--gpu-memory-gib", "0", "--gpu-bandwidth-gbs", "864", "--gpu-tflops", "362"]) == 2
    assert "greater than zero" in capsys.readouterr().err


def test_bitsandbytes_nf4_from_the_cli(capsys):
    r = _json(
        capsys,
        [
            "estimate",
            "--model",
            "llama-3-8b",
            "--dtype",
            "bf16",
            "--gpu",
            "t4-datasheet",
            "--weight-format",
            "bnb-nf4",
            "--batch",
            "1",
            "--json",
        ],
    )
    assert r["weights_bytes"] == weights_bytes(model_preset("llama-3-8b"), "bf16", "bnb-nf4")
    assert any("bitsandbytes" in w for w in r["warnings"])


def test_mxfp4_covers_the_experts_of_gpt_oss_only():
    spec = spec_from_hf_config(published.configs()["openai/gpt-oss-20b"])
    assert spec.is_moe and spec.n_experts == 32
    assert weights_bytes(spec, "bf16", "mxfp4") < weights_bytes(spec, "bf16") / 2
    assert weights_bytes(model_preset("llama-3-8b"), "bf16", "mxfp4") == weights_bytes(
        model_preset("llama-3-8b"), "bf16"
    )


def test_the_reasoning_states_the_efficiency_that_made_its_times():
    """With an engine, the Why bullets give the fitted share of the datasheet and the parts the time is made of,
    so the sentence's arithmetic gives the figure beside it (the datasheet bandwidth alone would not)."""
    import re

    from engine.calc.explain import reasoning
    from engine.calc.report import Inputs, estimate
    from engine.calc.specs import gpu_spec, model_preset

    spec, gpu = model_preset("gpt-neo-2.7b"), gpu_spec("t4")
    est = estimate(
        spec, gpu, Inputs(dtype="fp16", batch=8, prompt_tokens=512, output_tokens=512, engine="hf")
    )
    decode = next(line for line in reasoning(est, spec, gpu) if line.startswith("**Decode**"))
    assert "as fitted for hf" in decode
    parts = re.search(
        r": ([\d.]+) ms memory-bound operators \+ ([\d.]+) ms fixed per-step cost = ([\d.]+) ms", decode
    )
    assert parts, decode
    memory, fixed, total = map(float, parts.groups())
    assert abs(memory + fixed - total) <= 0.15 and abs(total - est.timing.decode_s_per_token * 1e3) <= 0.1


def test_pipeline_stages_under_load_say_their_throughput_is_a_floor():
    """The engineer's walk: a plan over pipeline stages timed each stage after the other for 16 users, with no word
    that a server's micro-batches keep every stage busy."""
    from engine.calc.specs import gpu_spec
    from engine.calibration import resolve_model_spec

    spec, gpu = resolve_model_spec("meta-llama/Llama-3.1-70B-Instruct"), gpu_spec("a10g")
    many = estimate(spec, gpu, Inputs(batch=16, n_gpus=12, dtype="bf16", engine="vllm"))
    assert many.fit.layout is not None and many.fit.layout.pipeline_parallel == 3
    assert any("Pipeline stages (3)" in w and "floor" in w for w in many.warnings)
    one = estimate(spec, gpu, Inputs(batch=1, n_gpus=12, dtype="bf16", engine="vllm"))
    assert not any("Pipeline stages" in w for w in one.warnings)
