"""Memory calculator: fit, max batch, max sequence length, GPUs needed, paged KV, bad input."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from engine.calc import Inputs, estimate, gpu_spec, model_preset
from engine.calc.hf_config import parse_config_text, spec_from_hf_config
from engine.calc.memory import (
    Placement,
    estimate_memory,
    gpus_needed,
    kv_cache_bytes,
    max_batch,
    max_seq_len,
    weights_bytes,
)
from engine.calc.paged import compare_paged
from engine.calc.specs import spec_from_numbers
from engine.core.errors import InvalidParameterError, UnknownModelError


def test_t4_gpt_neo_2_7b_fp16_8_users_1024_tokens():
    """The issue's question, worked by hand: weights 2,651,307,520 x 2 = 5.30 GB; KV 2 x 32 x 2560 x 2 =
    327,680 B/token x 8 x 1024 = 2.68 GB; x1.2 = 9.58 GB of the 15,360 MiB (16.1 GB) the driver reports for a T4:
    fits; batch up to 24 at 1,024 tokens (23 if the card held only the datasheet's decimal 16 GB)."""
    est = estimate(
        model_preset("gpt-neo-2.7b"),
        gpu_spec("t4"),
        Inputs(
            dtype="fp16", batch=8, seq_len=1024, prompt_tokens=512, output_tokens=512, usd_per_gpu_hour=0.35
        ),
    )
    m = est.memory
    assert m.weights_bytes == 5_302_615_040
    assert m.kv_bytes_per_token == 327_680
    assert m.kv_cache_bytes == 8 * 1024 * 327_680
    assert m.total_bytes == pytest.approx(1.2 * (5_302_615_040 + 2_684_354_560))
    assert m.fits
    assert m.gpu_memory_bytes == 15_360 * 2**20  # the driver's figure, not 16e9
    assert est.max_batch == math.floor((15_360 * 2**20 / 1.2 - 5_302_615_040) / (1024 * 327_680)) == 24
    assert est.timing.decode_step.bound == "memory"
    # decode step reads the weights (minus wpe, which is a lookup) and on average 768 cached tokens x 8
    assert est.timing.decode_s_per_token == pytest.approx((5.29e9 + 8 * 769 * 327_680) / 300e9, rel=0.02)
    assert est.cost.usd_per_million_tokens == pytest.approx(0.35 / (est.timing.tokens_per_s * 3600) * 1e6)


def test_max_batch_and_max_seq_len_are_the_edges_of_fit():
    spec, t4 = model_preset("gpt-neo-1.3b"), gpu_spec("t4")
    place = Placement(spec, "fp16", t4.memory_bytes)
    b = max_batch(place, seq_len=2048)
    assert estimate_memory(place, batch=b, seq_len=2048).fits
    assert not estimate_memory(place, batch=b + 1, seq_len=2048).fits
    s = max_seq_len(place, batch=64)
    assert s.limited_by == "memory"
    assert estimate_memory(place, batch=64, seq_len=s.tokens).fits
    assert not estimate_memory(place, batch=64, seq_len=s.tokens + 1).fits
    assert max_seq_len(place, batch=1).limited_by == "context"


def test_mistral_window_lets_any_length_fit_once_the_window_fits():
    spec = model_preset("mistral-7b")
    s = max_seq_len(Placement(spec, "fp16", 24e9), batch=1)
    assert s.tokens == spec.context_length and s.limited_by == "context"


def test_model_too_big_needs_more_gpus():
    spec, t4 = model_preset("llama-2-13b"), gpu_spec("t4")
    est = estimate(spec, t4, Inputs(dtype="fp16", batch=1, prompt_tokens=100, output_tokens=100))
    assert not est.memory.fits and est.max_batch == 0 and est.paged is None
    n = est.gpus_needed
    assert 40 % n == 0 and n >= math.ceil(est.memory.total_bytes / 16e9)
    assert estimate_memory(Placement(spec, "fp16", 16e9, n_gpus=n), batch=1, seq_len=200).fits
    assert gpus_needed(33e9, 16e9) == 3 and gpus_needed(33e9, 16e9, n_heads=40) == 4


def test_precisions_scale_weights():
    spec = model_preset("llama-2-7b")
    w = {d: weights_bytes(spec, d) for d in ("fp32", "fp16", "bf16", "int8", "int4")}
    assert w["fp32"] == 2 * w["fp16"] == 4 * w["int8"] == 8 * w["int4"] and w["fp16"] == w["bf16"]
    assert kv_cache_bytes(spec, "int8", 1, 4096) == 2_147_483_648 / 2


def test_paged_kv_reserves_only_what_is_used():
    spec = model_preset("llama-2-7b")
    cmp = compare_paged(spec, kv_dtype="fp16", prompt_tokens=200, max_output_tokens=800, kv_budget_bytes=40e9)
    assert cmp.static_reserved_bytes > cmp.paged_reserved_bytes >= cmp.used_bytes
    assert all(
        r.paged_reserved_bytes - r.used_bytes < 16 * 524_288 for r in cmp.rows
    )  # under one block wasted
    assert cmp.static_max_seqs == int(40e9 // (1000 * 524_288))
    assert cmp.extra_seqs > 0


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(batch=0),
        dict(batch=-3),
        dict(seq_len=0),
        dict(batch=float("nan")),
        dict(batch=2.5),
        dict(seq_len=10**16),
    ],
)
def test_bad_sizes_are_refused_with_a_message(kwargs):
    args = dict(batch=1, seq_len=128) | kwargs
    with pytest.raises(InvalidParameterError, match=r"must be|absurd"):
        estimate_memory(Placement(model_preset("gpt-neo-125m"), "fp16", 16e9), **args)


def test_prompt_plus_output_beyond_seq_len_says_what_to_do():
    with pytest.raises(InvalidParameterError, match="raise the sequence length"):
        estimate(
            model_preset("gpt-neo-125m"),
            gpu_spec("t4"),
            Inputs(seq_len=100, prompt_tokens=80, output_tokens=80),
        )


def test_unknown_names_and_bad_configs():
    with pytest.raises(UnknownModelError, match="choose one of"):
        model_preset("gpt-5")
    with pytest.raises(InvalidParameterError, match="unknown GPU"):
        gpu_spec("tpu-v9")
    with pytest.raises(InvalidParameterError, match="not valid JSON"):
        parse_config_text(b"\x89PNG not json")
    # the engineer's walk read the parser's "(char 43)": a person counts lines and columns
    with pytest.raises(InvalidParameterError, match="at line 2, column 7") as bad:
        parse_config_text('{"a": 1,\n "b": }')
    assert "char" not in str(bad.value)
    with pytest.raises(InvalidParameterError, match="no model_type"):
        parse_config_text(b'{"a": 1}')
    with pytest.raises(InvalidParameterError, match="lacks"):
        spec_from_hf_config({"model_type": "llama", "hidden_size": 64})
    with pytest.raises(InvalidParameterError, match="not a decoder"):
        spec_from_hf_config({"model_type": "bert", "hidden_size": 768})
    with pytest.raises(InvalidParameterError, match=r"a config\.json is a few KB"):
        parse_config_text(b" " * (6 * 2**20))
    with pytest.raises(InvalidParameterError, match="KV heads must divide"):
        spec_from_numbers(n_layer=2, hidden=64, n_head=6, n_kv_head=4, vocab=100)
    with pytest.raises(InvalidParameterError, match="precision"):
        weights_bytes(model_preset("gpt2"), "fp6")


def test_gpu_plan_never_proposes_a_count_that_does_not_divide_the_heads():
    """At batch 4096 the page proposed 104 GPUs "that divide the 20 heads"."""
    from engine.calc.memory import plan_gpus

    spec = model_preset("gpt-neo-2.7b")
    place = Placement(spec, "fp16", 16e9, kv_dtype="fp16")
    for batch in (1, 8, 64, 500, 4096):
        plan = plan_gpus(place, batch=batch, seq_len=1024)
        assert spec.n_head % plan.tensor_parallel == 0 and plan.tensor_parallel <= spec.n_head
        assert plan.gpus == plan.tensor_parallel * plan.replicas
        assert plan.replicas * plan.batch_per_replica >= batch
        # each replica really fits its share
        replica = replace(place, n_gpus=plan.tensor_parallel)
        assert estimate_memory(replica, batch=plan.batch_per_replica, seq_len=1024).fits
    big = plan_gpus(place, batch=4096, seq_len=1024)
    assert big.memory_gpus > spec.n_head and "cannot split 20 heads" in big.sentence(spec.n_head)
    assert "divides" not in big.sentence(spec.n_head)


def test_weight_only_int8_int4_keep_a_16_bit_kv_cache_by_default():
    """The "KV cache: same" choice shrank the cache with int8/int4 weights, though they are weight-only."""
    spec, t4 = model_preset("gpt-neo-125m"), gpu_spec("t4")
    for dtype in ("int8", "int4"):
        i = Inputs(dtype=dtype, batch=4, prompt_tokens=100, output_tokens=100)
        assert i.resolved().kv_dtype == "fp16"
        est = estimate(spec, t4, i)
        assert est.memory.kv_bytes_per_token == 2 * 12 * 12 * 64 * 2
    assert Inputs(dtype="int8", kv_dtype="int8").resolved().kv_dtype == "int8"  # asked for: honoured
    assert Inputs(dtype="bf16").resolved().kv_dtype == "bf16"


def test_a_cpu_defaults_to_a_precision_it_runs():
    """The "this machine" GPU defaulted to fp16, which a CPU runs through reference kernels."""
    from engine.calc.report import default_precision
    from engine.calc.specs import GPUSpec

    cpu = GPUSpec("this-machine", "this machine (CPU)", 64e9, 20e9, {"fp32": 1e11, "bf16": 5e10})
    assert default_precision(cpu) == "fp32"
    assert default_precision(gpu_spec("t4")) == "fp16"


def test_a_bf16_checkpoint_starts_in_bf16_where_the_gpu_has_a_bf16_peak():
    """A walkthrough priced a bf16 Llama on an A100 in fp16 by default; a T4 (no bf16 peak) keeps fp16."""
    from engine.arch.resolve import hub_preset_spec
    from engine.calc.report import default_precision

    qwen = hub_preset_spec("Qwen/Qwen2-72B")
    assert qwen.checkpoint_dtype == "bf16"
    assert default_precision(gpu_spec("a100-80gb"), qwen) == "bf16"
    assert default_precision(gpu_spec("t4"), qwen) == "fp16"
    assert default_precision(gpu_spec("a100-80gb"), replace(qwen, checkpoint_dtype="")) == "fp16"


def test_zero_group_size_and_max_model_len_mean_the_engines_own_as_the_page_says():
    """The Memory & cost page's "0 = per output channel" and "0 = prompt + output" are the spec's own values."""
    q = Inputs(weight_format="int8", group_size=0, max_model_len=0).resolved()
    assert q.group_size is None and q.max_model_len is None and q.weights_label == "int8 (per channel)"
    four = Inputs(weight_format="int4", group_size=0).resolved()
    assert four.weights_label == "int4 (g128)"  # int4's own groups of 128
    assert Inputs.problem("group_size", 65_537) and Inputs.problem("max_model_len", -1)
    with pytest.raises(InvalidParameterError, match="group size"):
        Inputs(weight_format="int4", group_size=-1).resolved()


def test_a_gpus_editable_figures_have_a_real_gpus_bounds():
    from engine.calc.specs import GPUFigures

    assert GPUFigures.problem("memory_bytes", 16e9) == ""
    assert "GPU memory must be from" in GPUFigures.problem("memory_bytes", 0.0)
    assert GPUFigures.problem("interconnect_bytes_per_s", 0.0) == ""  # no link: one GPU only
    assert GPUFigures.problem("peak_flops", 1e18)  # above any accelerator's dense peak
