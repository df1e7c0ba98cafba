"""Weight quantization: the calculator's bytes against torchao's real tensors, the scheme run's mechanics on
the tiny model (a failing scheme reports its reason), and verdicts that follow the numbers."""

from __future__ import annotations

import pytest

from engine.calc import quant as qcalc
from engine.core.errors import InvalidParameterError
from engine.levers import quant as Q


@pytest.mark.parametrize("dtype_name", ["fp32", "bf16"])
def test_torchao_bytes_match_the_calculator(dtype_name):
    import torch
    from torchao.prototype.quantization.int4 import PrototypeInt4WeightOnlyConfig
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    shape = (1536, 576)
    lin = torch.nn.Sequential(torch.nn.Linear(576, 1536, bias=False, dtype=dtype))
    quantize_(lin, Int8WeightOnlyConfig())
    w = lin[0].weight
    assert (w.scale.dtype, w.zero_point.dtype) == (
        torch.float32,
        torch.int8,
    )  # per row, whatever the model dtype
    assert Q.storage_bytes(w) == qcalc.tensor_bytes(shape, "int8-per-channel")

    lin = torch.nn.Sequential(torch.nn.Linear(576, 1536, bias=False, dtype=dtype))
    quantize_(lin, PrototypeInt4WeightOnlyConfig(group_size=64))  # 576 is not a multiple of 128
    w = lin[0].weight
    assert w.scale_and_zero.dtype == dtype  # scale + zero per group in the model's dtype
    fmt = "int4-g128-fp32" if dtype_name == "fp32" else "int4-g128"
    assert Q.storage_bytes(w) == qcalc.tensor_bytes(shape, fmt, group_size=64)


def test_unknown_scheme_is_a_clear_error():
    with pytest.raises(InvalidParameterError, match=r"unknown scheme 'int3'.*choose from"):
        Q.check_schemes(["int3"])
    assert Q.check_schemes(["int8"]) == ["fp32", "int8"]  # the baseline is always measured


def test_cli_unknown_scheme_exits_with_the_reason(capsys):
    from engine.cli import main

    assert main(["quant", "--model", "tiny-gpt-neo", "--schemes", "int3"]) == 2
    assert "unknown scheme 'int3'" in capsys.readouterr().err


@pytest.mark.slow
def test_run_quant_on_tiny_model(tiny_lm):
    spec = Q.QuantSpec(
        model=tiny_lm.name,
        schemes=("fp32", "fp16", "int8", "quanto-int4"),
        max_new_tokens=4,
        runs=1,
        eval_docs=1,
    )
    report = Q.run_quant(tiny_lm, spec)
    rows = {r.scheme: r for r in report.rows}
    assert rows["fp32"].status == "ok" and rows["fp32"].exact_match_rate == 1.0
    assert rows["fp32"].bits_per_byte_delta == 0.0
    assert rows["fp16"].status == "skipped" and "CUDA" in rows["fp16"].reason
    int8 = rows["int8"]
    assert int8.status == "ok"
    assert int8.weights_bytes == int8.predicted_weights_bytes  # exact, scales and zero points included
    assert int8.weights_bytes < rows["fp32"].weights_bytes
    for key in ("tokens_per_s", "speedup_vs_fp32", "bits_per_byte", "exact_match_rate", "rss_bytes"):
        assert getattr(int8, key) is not None
    # optimum-quanto int4 cannot run under torch.inference_mode on this torch: its own reason, not a crash
    assert rows["quanto-int4"].status == "failed" and rows["quanto-int4"].reason
    assert tiny_lm.dtype == "fp32" and tiny_lm.model.transformer.h[0].mlp.c_fc.weight.dtype.is_floating_point


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["bnb-int8", "bnb-nf4"])
def test_bitsandbytes_bytes_match_the_calculator(tiny_lm, scheme):
    import torch

    applied = Q.apply_scheme(tiny_lm, scheme)
    with torch.inference_mode():
        Q.R.quiet(
            applied.lm.model, input_ids=torch.tensor([[1, 2, 3]])
        )  # 8-bit moves its row scales on first use
    measured = Q.model_storage_bytes(applied.lm.model)
    assert measured == Q.predicted_bytes(
        tiny_lm.model, applied.calc_format, applied.elem_bytes, applied.group_size
    )


@pytest.mark.slow
def test_bitsandbytes_nf4_with_bf16_absmax_matches_the_calculator(tiny_lm):
    """The AVX-512 BF16 case set on any CPU: each module is repacked as bitsandbytes' Linear4bit.forward does on
    such a CPU (functional._convert_weight_packed_for_cpu: a layout change and a bf16 absmax, plain torch
    ops), and the calculator follows what the library did."""
    from bitsandbytes.functional import _convert_weight_packed_for_cpu
    from bitsandbytes.nn import Linear4bit

    applied = Q.apply_scheme(tiny_lm, "bnb-nf4")
    model = applied.lm.model
    fp32_absmax = Q.model_storage_bytes(model)
    for m in model.modules():
        if isinstance(m, Linear4bit):
            m.support_avx512bf16_for_cpu = True  # what has_avx512bf16() returns on such a CPU
    assert Q.bnb_nf4_format(model) == "bnb-nf4-bf16-absmax"  # decided before the first forward
    blocks = 0
    for m in model.modules():
        if isinstance(m, Linear4bit) and not getattr(m.weight.quant_state, "packing_format_for_cpu", False):
            blocks += m.weight.quant_state.absmax.numel()
            m.weight.data, m.weight.quant_state = _convert_weight_packed_for_cpu(
                m.weight.data, m.weight.quant_state
            )
    measured = Q.model_storage_bytes(model)
    if "bf16" not in applied.calc_format:  # this CPU stored fp32 absmax: the repack saved 2 bytes a block
        assert fp32_absmax - measured == 2 * blocks
    assert Q.bnb_nf4_format(model) == "bnb-nf4-bf16-absmax"  # read back from the repacked quant_state
    assert measured == Q.predicted_bytes(tiny_lm.model, "bnb-nf4-bf16-absmax", applied.elem_bytes, None)
    assert qcalc.tensor_bytes((256, 64), "bnb-nf4-bf16-absmax") == 256 * 64 // 2 + 256 * 2


def _row(**kw):
    base = dict(
        scheme="int8",
        status="ok",
        weights_bytes=50,
        bits_per_byte_delta=0.02,
        exact_match_rate=1.0,
        speedup_vs_fp32=1.3,
        speedup_ci=(1.2, 1.4),
    )
    base.update(kw)
    return Q.SchemeResult(**base)


def test_verdict_follows_the_numbers():
    fp32 = Q.SchemeResult("fp32", "ok", weights_bytes=100)
    assert "1.30× faster than fp32" in Q.verdict(_row(), fp32) and "+0.020 bits/byte" in Q.verdict(
        _row(), fp32
    )
    assert "50% of fp32's bytes" in Q.verdict(_row(), fp32)
    slow = Q.verdict(_row(speedup_vs_fp32=0.7, speedup_ci=(0.6, 0.8)), fp32)
    assert "1.43× slower than fp32" in slow and "up to 2.00×; it measured 1.43× slower, so" in slow
    same_bytes = Q.verdict(_row(weights_bytes=100, speedup_vs_fp32=0.7, speedup_ci=(0.6, 0.8)), fp32)
    assert "no fewer bytes" in same_bytes
    assert "no measurable quality (-0.0001 bits/byte)" in Q.verdict(_row(bits_per_byte_delta=-1e-4), fp32)
    assert "0.010 bits/byte better" in Q.verdict(_row(bits_per_byte_delta=-0.01), fp32)
    assert "unmeasured" in Q.verdict(_row(bits_per_byte_delta=None), fp32)
    unsure = Q.verdict(_row(speedup_ci=(0.9, 1.5)), fp32)
    assert "no measurable difference (the 95% interval includes 1×" in unsure and "faster" not in unsure
    assert "did not run here: boom" in Q.verdict(_row(status="failed", reason="boom"), fp32)
    # not faster (its interval includes 1x) though it reads half the bytes: the bytes argument is said with the
    # measurement beside it (a student saw int8 at 0.84x beside the Roofline page's 'fewer bytes per step')
    unsure_slow = Q.verdict(_row(speedup_vs_fp32=0.84, speedup_ci=(0.6, 1.1)), fp32)
    assert (
        "no measurable difference" in unsure_slow
        and "up to 2.00×; this run cannot tell it from fp32" in unsure_slow
    )
    # ... and no cause is drawn from a point estimate the verdict just called not measurable (a student read
    # "no measurable difference ... measured 0.68×, so the kernels ..., not the bytes, set its speed")
    assert "set its speed on this machine" not in unsure_slow and "set its speed on this machine" in slow


def test_the_headline_follows_the_numbers():
    """The one line under the button says each scheme's speed as its table cell does, and flips with the ratio."""
    fp32 = Q.SchemeResult("fp32", "ok", speedup_vs_fp32=1.0, runs=3, weights_bytes=400)
    slow = Q.SchemeResult(
        "int8", "ok", speedup_vs_fp32=1 / 2, speedup_ci=(1 / 2.5, 1 / 1.5), runs=3, weights_bytes=100
    )
    fast = Q.SchemeResult("int8", "ok", speedup_vs_fp32=2.0, speedup_ci=(1.5, 2.5), runs=3, weights_bytes=100)
    broken = Q.SchemeResult("int4", "error", reason="no kernel")
    assert Q.headline((fp32, slow)) == (
        "**int8** against fp32: 2.00× slower (95% interval 1.50×–2.50× slower), weights in 25% of fp32's bytes."
    )
    assert Q.headline((fp32, fast)).startswith(
        "**int8** against fp32: 2.00× faster (95% interval 1.50×–2.50×)"
    )
    assert Q.headline((fp32, broken)) == "**int4** did not run here."
    assert Q.headline((fp32,)) == ""
