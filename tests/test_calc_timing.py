"""Timing and cost: the phases' bounds, tensor parallelism, calibrated efficiency, dollars."""

from __future__ import annotations

import pytest

from engine.calc import gpu_spec, model_preset
from engine.calc.cost import estimate_cost
from engine.calc.timing import Efficiency, estimate_timing
from engine.core.errors import InvalidParameterError


def test_efficiency_slows_decode_in_proportion():
    spec, t4 = model_preset("gpt-neo-125m"), gpu_spec("t4")
    base = estimate_timing(spec, t4, dtype="fp16", batch=1, prompt_tokens=64, output_tokens=64)
    half = estimate_timing(
        spec,
        t4,
        dtype="fp16",
        batch=1,
        prompt_tokens=64,
        output_tokens=64,
        eff=Efficiency(bandwidth=0.5, flops=0.5, step_overhead_s_per_layer=1e-4, label="calibrated"),
    )
    assert half.decode_s_per_token == pytest.approx(2 * base.decode_s_per_token + 12 * 1e-4)
    assert half.mode == "calibrated"


def test_tensor_parallel_adds_bandwidth():
    spec, a10 = model_preset("llama-2-13b"), gpu_spec("a10")
    one = estimate_timing(spec, a10, dtype="fp16", batch=1, prompt_tokens=10, output_tokens=10)
    two = estimate_timing(spec, a10, dtype="fp16", batch=1, prompt_tokens=10, output_tokens=10, n_gpus=2)
    # the rest: two ring all-reduces per layer of 1 token x 5120 x 2 B over PCIe Gen4 (64 GB/s, 32 one way)
    comm = 2 * 40 * (2 * 1 / 2) * 5120 * 2 / 32e9
    assert two.decode_step.comm_s == pytest.approx(comm)
    assert two.decode_s_per_token == pytest.approx(one.decode_s_per_token / 2 + comm)


def test_tensor_parallel_share_over_pcie_t4():
    """GPT-Neo 2.7B, fp16, batch 8, 512 + 512 tokens on T4s over PCIe Gen3 (16 GB/s one way): the all-reduce
    share of a step is computed, grows with the GPUs, and is flagged when it dominates."""
    from engine.calc.report import Inputs, estimate

    spec, t4 = model_preset("gpt-neo-2.7b"), gpu_spec("t4")
    shares = {}
    for n in (1, 2, 4):
        est = estimate(
            spec, t4, Inputs(dtype="fp16", batch=8, prompt_tokens=512, output_tokens=512, n_gpus=n)
        )
        shares[n] = (est.timing.prefill.comm_share, est.timing.decode_step.comm_share)
        dominated = any(s > 0.5 for s in shares[n])
        assert dominated == any("communication dominates" in w for w in est.warnings)
    assert shares[1] == (0.0, 0.0)
    assert 0 < shares[2][0] < shares[4][0] and 0 < shares[2][1] < shares[4][1]


def test_batch_raises_throughput_while_memory_bound():
    spec, t4 = model_preset("gpt-neo-125m"), gpu_spec("t4")
    t1 = estimate_timing(spec, t4, dtype="fp16", batch=1, prompt_tokens=64, output_tokens=64)
    t8 = estimate_timing(spec, t4, dtype="fp16", batch=8, prompt_tokens=64, output_tokens=64)
    assert t8.tokens_per_s > 6 * t1.tokens_per_s


def test_context_limit_is_enforced():
    with pytest.raises(InvalidParameterError, match="exceed"):
        estimate_timing(
            model_preset("gpt2"), gpu_spec("t4"), dtype="fp16", batch=1, prompt_tokens=1000, output_tokens=100
        )


def test_cost_per_million_tokens():
    c = estimate_cost(tokens_per_s=1000.0, usd_per_gpu_hour=2.0, n_gpus=2)
    assert c.usd_per_hour == 4.0
    assert c.usd_per_million_tokens == pytest.approx(4.0 / 3.6)
    with pytest.raises(InvalidParameterError):
        estimate_cost(tokens_per_s=0.0, usd_per_gpu_hour=1.0)
    with pytest.raises(InvalidParameterError):
        estimate_cost(tokens_per_s=10.0, usd_per_gpu_hour=float("nan"))
