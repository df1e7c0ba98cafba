"""One answer per plan: fit, GPUs needed, the plan's tensor x pipeline size, the price and the launch command agree
over a grid of models, GPUs, counts and engines; the launch command names the model by its hub id; an estimate
beside a measurement is compared only when it may be."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import pytest

from engine.calc import published
from engine.calc.hf_config import spec_from_hf_config
from engine.calc.report import Inputs, estimate
from engine.calc.specs import gpu_spec, model_preset
from engine.cli import main
from engine.commands.estimate import flatten
from engine.core.errors import InvalidParameterError

PRICE = 2.0  # $ per GPU-hour, so the price says how many GPUs it was computed for


def _qwen72b():
    return spec_from_hf_config(published.configs()["Qwen/Qwen2-72B"], name="Qwen/Qwen2-72B")


MODELS = {
    "gpt-neo-2.7b": lambda: model_preset("gpt-neo-2.7b"),
    "llama-3-8b": lambda: model_preset("llama-3-8b"),
    "qwen2-72b": _qwen72b,
}


def _size(cmd: str, *flags: str) -> int:
    for flag in flags:
        m = re.search(rf"{flag} (\d+)", cmd)
        if m:
            return int(m.group(1))
    return 1


def _gpus_in(cmd: str) -> int:
    """tensor x pipeline GPUs of a vLLM or SGLang command line."""
    return _size(cmd, "--tensor-parallel-size", "--tp-size") * _size(
        cmd, "--pipeline-parallel-size", "--pp-size"
    )


@pytest.mark.parametrize("engine", [None, "hf", "vllm", "sglang"])
@pytest.mark.parametrize("model", list(MODELS))
def test_fit_gpus_needed_price_and_launch_command_agree_over_the_grid(model, engine):
    """The issue: 72B bf16 on 2 x 80 GB with vLLM said 'fits', 'GPUs needed 4' priced at 4, and a command for 2."""
    spec = MODELS[model]()
    contradictions = []
    for gpu_key in ("t4", "a100-80gb", "h100-sxm"):
        gpu = gpu_spec(gpu_key)
        for n in (1, 2, 3, 8):
            for batch in (1, 64):
                inputs = Inputs(
                    dtype="bf16" if gpu_key != "t4" else "fp16",
                    batch=batch,
                    prompt_tokens=512,
                    output_tokens=512,
                    n_gpus=n,
                    engine=engine,
                    usd_per_gpu_hour=PRICE,
                )
                r = flatten(estimate(spec, gpu, inputs))
                where = f"{model} {engine} {gpu_key} x{n} batch {batch}"
                cmd = r.get("launch_command") if engine in ("vllm", "sglang") else None
                replicas = r.get("replicas", 1)
                priced = r["usd_per_hour"] / PRICE if math.isfinite(r["usd_per_hour"]) else None
                if r["fits"]:
                    if r["gpus_needed"] > n:
                        contradictions.append(f"{where}: fits, but needs {r['gpus_needed']}")
                    if cmd and _gpus_in(cmd) * replicas != n:
                        contradictions.append(f"{where}: fits on {n}, command for {_gpus_in(cmd)}")
                    if priced is not None and round(priced) != n:
                        contradictions.append(f"{where}: fits on {n}, priced at {priced:g}")
                else:
                    if cmd and _gpus_in(cmd) * replicas != r["gpus_needed"]:
                        contradictions.append(
                            f"{where}: needs {r['gpus_needed']}, command for {_gpus_in(cmd)}"
                        )
                    if priced is not None and round(priced) != r["gpus_needed"]:
                        contradictions.append(f"{where}: needs {r['gpus_needed']}, priced at {priced:g}")
                if engine in ("vllm", "sglang") and r["fits"] != (r["max_batch"] >= batch):
                    contradictions.append(f"{where}: fits {r['fits']} but max batch {r['max_batch']}")
    assert not contradictions, "\n".join(contradictions[:12])


def test_qwen_72b_on_two_a100s_with_vllm_is_one_answer():
    est = estimate(
        _qwen72b(),
        gpu_spec("a100-80gb"),
        Inputs(dtype="bf16", batch=8, prompt_tokens=512, output_tokens=512, n_gpus=2, engine="vllm"),
    )
    assert est.fits and est.gpus_needed == 2 and est.priced_gpus == 2
    assert "--tensor-parallel-size 2" in est.launch.vllm
    # the paged comparison sits in the cache vLLM allocates, not in the 20%-overhead model's (which has none)
    assert est.paged is not None
    assert est.paged.kv_budget_bytes == pytest.approx(est.fit.kv_cache_tokens * est.memory.kv_bytes_per_token)
    assert (
        f"{est.fit.kv_cache_tokens:,} tokens" in est.fit.sentence
        and f"{est.max_batch:,} sequences" in est.fit.sentence
    )
    one = replace(est.inputs, n_gpus=1)
    alone = estimate(_qwen72b(), gpu_spec("a100-80gb"), one)
    assert not alone.fits and alone.gpus_needed == 2 and "--tensor-parallel-size 2" in alone.launch.vllm
    assert (
        "Does not fit on the 1 GPU(s) asked" in alone.launch.note
        and "for the 2 GPUs it needs" in alone.launch.note
    )


def test_a_serving_engine_decides_memory_the_overhead_model_is_only_a_comparison():
    """On an 8B model the page gave the KV memory three sizes and the max batch three values (195, 192, 182)."""
    spec, h100 = model_preset("llama-3-8b"), gpu_spec("h100-sxm")
    i = Inputs(dtype="bf16", batch=8, prompt_tokens=512, output_tokens=512, engine="vllm")
    est = estimate(spec, h100, i)
    held = est.fit.serving.blocks // math.ceil(1024 / est.fit.serving.block_size)
    assert est.max_batch == min(held, est.fit.serving.max_num_seqs)
    assert est.fit.model == "vllm" and est.paged.kv_budget_bytes == pytest.approx(
        est.fit.kv_cache_tokens * est.memory.kv_bytes_per_token
    )
    hf = estimate(spec, h100, replace(i, engine="hf"))
    assert hf.fit.model == "overhead" and hf.fit.serving is None


def test_the_gpus_memory_is_named_by_who_reports_it():
    """An H100's memory read four ways (80 GB, 85.52 GB, 85.06 GB, the pool) with no label telling them apart: the
    serving sentence says the total is CUDA's and what the engine keeps of it; the driver's figure is not it."""
    from engine.calc import format as fmt
    from engine.calc.serving_startup import cuda_total_bytes

    h100 = gpu_spec("h100-sxm")
    est = estimate(model_preset("llama-3-8b"), h100, Inputs(dtype="bf16", batch=8, engine="vllm"))
    cuda, util = cuda_total_bytes(h100), est.fit.serving.utilization
    assert cuda < h100.memory_bytes  # the driver keeps some for itself
    sentence = est.fit.sentence
    assert (
        f"keeps {util:.0%} of the {fmt.gb(cuda)} CUDA reports on each GPU ({fmt.gb(cuda * util)})" in sentence
    )
    assert fmt.gb(h100.memory_bytes) not in sentence and "each GPU's" not in sentence


def test_sglang_keeps_its_own_fraction_per_gpu_count():
    spec, h100 = model_preset("llama-3-8b"), gpu_spec("h100-sxm")
    for n, fraction in ((1, 0.88), (2, 0.87), (4, 0.85), (8, 0.81)):
        est = estimate(spec, h100, Inputs(dtype="bf16", batch=8, n_gpus=n, engine="sglang"))
        assert f"--mem-fraction-static {fraction:g}" in est.launch.sglang, n


# ---------------------------------------------------------------- the launch command names the model


def _cli(capsys, argv):
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


BASE = ["estimate", "--gpu", "h100-sxm", "--dtype", "bf16", "--engine", "vllm", "--json"]


def test_model_id_flag_and_defaults_give_a_command_that_pastes(capsys, tmp_path):
    r = _cli(capsys, [*BASE, "--model", "llama-3-8b", "--model-id", "acme/my-llama"])
    assert r["launch_command"].startswith("vllm serve acme/my-llama ")
    r = _cli(capsys, [*BASE, "--model", "llama-3-8b"])  # the preset's own hub id
    assert r["launch_command"].startswith("vllm serve meta-llama/Meta-Llama-3-8B ")
    cfg = dict(published.configs()["meta-llama/Llama-3.1-8B-Instruct"])
    named = tmp_path / "named.json"
    named.write_text(json.dumps(cfg))
    r = _cli(capsys, [*BASE, "--config", str(named)])  # the config's _name_or_path
    assert r["launch_command"].startswith(f"vllm serve {cfg['_name_or_path']} ")
    cfg.pop("_name_or_path")
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(cfg))
    r = _cli(capsys, [*BASE, "--config", str(bare)])
    assert r["launch_command"].startswith("vllm serve '<model-id>' ") and "<model-id>" in r["launch_note"]
    assert r["model"] != "LlamaForCausalLM" or r["model_id"] is None


def test_a_plan_that_does_not_fit_gets_a_command_for_the_gpus_it_needs(capsys):
    r = _cli(capsys, [*BASE, "--model", "meta-llama/Llama-3.1-70B-Instruct", "--gpus", "1"])
    assert not r["fits"] and r["gpus_needed"] > 1
    assert _gpus_in(r["launch_command"]) * r["replicas"] == r["gpus_needed"] == r["priced_gpus"]
    assert f"for the {r['gpus_needed']} GPUs it needs" in r["launch_note"]


def test_a_replica_layout_other_than_the_gpus_asked_says_why_once():
    """A 70B model, batch 100000 on 8 x A100 with vLLM: the plan is 391 replicas of 4 GPUs; the sentence (then
    for replicas of 3 pipeline stages) said 'one GPU x 3 pipeline stages', repeated how many sequences fit, and the launch command switched to
    --pipeline-parallel-size 3 without a word."""
    spec = spec_from_hf_config(published.configs()["meta-llama/Llama-3.3-70B-Instruct"], name="llama-3.3-70b")
    i = Inputs(dtype="fp16", batch=100_000, prompt_tokens=512, output_tokens=512, n_gpus=8, engine="vllm")
    est = estimate(spec, gpu_spec("a100-80gb"), i)
    plan = est.plan
    assert not est.fits and plan.replicas > 1 and plan.replica_gpus != 8
    s = est.fit.sentence
    assert s.count("sequences of 1,024 tokens at once") == 1, s
    assert "one GPU x" not in s and f"Each replica is {plan.layout()}, not the 8 asked" in s
    assert f"--tensor-parallel-size {plan.tensor_parallel}" in est.launch.vllm
    assert f"Run {plan.replicas:,} copies, one per group of {plan.replica_gpus} GPU(s)" in est.launch.note
    assert est.plan.brief() == f"{plan.replicas:,} replicas x {plan.replica_gpus} GPUs"


def test_a_max_num_seqs_above_what_the_cache_holds_is_explained():
    """On an H100 vLLM's default --max-num-seqs is 1024 while its cache holds 440 sequences of 1,024 tokens: the
    command showed 1024 beside 'Max batch 440' without a word."""
    i = Inputs(dtype="bf16", batch=64, prompt_tokens=512, output_tokens=512, engine="vllm")
    est = estimate(model_preset("llama-3-8b"), gpu_spec("h100-sxm"), i)
    cap = est.fit.serving.max_num_seqs
    assert est.fits and est.max_batch < cap and f"--max-num-seqs {cap}" in est.launch.vllm
    assert f"--max-num-seqs {cap} caps the requests" in est.launch.note  # as the flag is typed, no comma
    assert f"its cache holds {est.max_batch:,} sequences" in est.launch.note
    small = estimate(model_preset("llama-3-8b"), gpu_spec("a100-80gb"), replace(i, dtype="bf16"))
    if small.max_batch >= small.fit.serving.max_num_seqs:  # the cap binds: nothing to explain
        assert "caps the requests" not in small.launch.note


def test_two_replicas_of_one_gpu_are_not_badged_one_gpu():
    """GPT-Neo 2.7B in fp32 on a T4 at batch 8 takes 2 replicas of one GPU; the tile said "one GPU"."""
    i = Inputs(dtype="fp32", batch=8, prompt_tokens=512, output_tokens=512)
    est = estimate(model_preset("gpt-neo-2.7b"), gpu_spec("t4"), i)
    assert est.plan.replicas > 1 and est.plan.replica_gpus == 1
    assert est.plan.brief() == f"{est.plan.replicas} replicas x 1 GPU"


def test_fp8_on_a_gpu_without_fp8_tensor_cores_is_weight_only_and_keeps_the_models_dtype():
    spec = replace(model_preset("llama-3-8b"), checkpoint_dtype="bf16")
    a100 = gpu_spec("a100-80gb")
    # the page sends fp16 activations with a quantized format
    est = estimate(spec, a100, Inputs(dtype="fp16", weight_format="fp8", batch=4, engine="vllm"))
    assert any("weight-only" in w for w in est.warnings)
    assert "--dtype bfloat16" in est.launch.vllm and "--quantization fp8" in est.launch.vllm
    h100 = estimate(
        spec, gpu_spec("h100-sxm"), Inputs(dtype="fp16", weight_format="fp8", batch=4, engine="vllm")
    )
    assert not any("weight-only" in w for w in h100.warnings)


def test_a_plain_quantized_precision_gets_a_command_that_serves_what_was_priced():
    """`--dtype fp8` priced 1-byte weights while its command (`--dtype bfloat16 --kv-cache-dtype fp8`) served
    16-bit ones, with no weight-only caveat on an A100; plain int8/int4 gave a bf16 command without a word."""
    spec = replace(model_preset("llama-3-8b"), checkpoint_dtype="bf16")
    a100 = gpu_spec("a100-80gb")
    fp8 = estimate(spec, a100, Inputs(dtype="fp8", batch=4, engine="vllm"))
    assert fp8.memory.weights_bytes == pytest.approx(spec_params(spec), rel=0.02)  # one byte a weight
    assert "--quantization fp8" in fp8.launch.vllm and "--dtype bfloat16" in fp8.launch.vllm
    assert "--quantization fp8" in fp8.launch.sglang
    assert any("weight-only" in w for w in fp8.warnings)
    h100 = estimate(spec, gpu_spec("h100-sxm"), Inputs(dtype="fp8", batch=4, engine="vllm"))
    assert "--quantization fp8" in h100.launch.vllm and not any("weight-only" in w for w in h100.warnings)
    bf16 = estimate(spec, a100, Inputs(dtype="bf16", batch=4, engine="vllm"))
    assert "--quantization" not in bf16.launch.vllm and "do not turn" not in bf16.launch.note
    for dtype in ("int8", "int4"):
        est = estimate(spec, a100, Inputs(dtype=dtype, batch=4, engine="vllm"))
        assert f"already quantized to {dtype}" in est.launch.note and "--quantization" not in est.launch.vllm


def spec_params(spec) -> float:
    from engine.calc.memory import count_params

    return count_params(spec).total


def test_presets_cover_every_published_config_and_the_common_families():
    from engine.arch.resolve import hub_presets

    presets = hub_presets()
    assert set(published.configs()) <= set(presets)
    for family in (
        "Llama-3.1",
        "Llama-3.2",
        "Llama-3.3",
        "Qwen2.5",
        "Qwen3-",
        "Mistral",
        "gemma-2",
        "Phi-3",
        "DeepSeek-R1-Distill-Llama",
        "DeepSeek-R1-Distill-Qwen",
    ):
        assert any(family.lower() in hub.lower() for hub in presets), family
    assert all(p.source and "/" in p.hub_id for p in presets.values())


def test_a_hub_preset_serves_its_own_id_even_when_it_shares_a_config():
    from engine.arch.resolve import hub_preset_spec

    spec = hub_preset_spec("meta-llama/Llama-3.3-70B-Instruct")  # stands for Llama-3.1-70B-Instruct's config
    assert spec.hub_id == "meta-llama/Llama-3.3-70B-Instruct" and spec.checkpoint_dtype == "bf16"


def test_deepseek_distills_are_presets_with_their_bases_shapes_and_their_own_id():
    from engine.arch.resolve import hub_preset_spec

    distill = hub_preset_spec("deepseek-ai/DeepSeek-R1-Distill-Llama-8B")
    base = hub_preset_spec("meta-llama/Llama-3.1-8B")
    assert (distill.n_layer, distill.hidden, distill.n_kv_head) == (base.n_layer, base.hidden, base.n_kv_head)
    assert distill.hub_id == "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"
    assert "fine-tuned from it, as github.com/deepseek-ai/DeepSeek-R1 says" in distill.source
    est = estimate(distill, gpu_spec("a100-80gb"), Inputs(dtype="bf16", batch=4, engine="vllm"))
    assert est.launch is not None and est.launch.vllm.startswith(
        "vllm serve deepseek-ai/DeepSeek-R1-Distill-Llama-8B"
    )


# ---------------------------------------------------------------- an estimate beside a measurement


def test_a_measurement_taken_busy_is_not_compared():
    from engine.calibration.beside import beside
    from engine.core.interval import Interval

    predicted = Interval(0.020, 0.025, 0.031, 0.010)
    quiet = beside("TPOT", measured_s=0.027, predicted=predicted, loadavg_1m=0.5, n_cores=2)
    assert quiet.comparable and quiet.inside and quiet.ratio == pytest.approx(0.025 / 0.027)
    assert "inside the calibrated estimate" in quiet.sentence()
    busy = replace(quiet, loadavg_1m=20.3, busy=True)
    assert busy.ratio is None and "measured under load 20.3 on 2 cores: not comparable" in busy.sentence()
    flipped = beside("TPOT", measured_s=1.33, predicted=predicted, loadavg_1m=20.3, n_cores=2)
    assert flipped.busy and "not comparable" in flipped.sentence()
    bound_only = beside("TPOT", measured_s=1.33, predicted=None, bound_s=0.0254, loadavg_1m=0.5, n_cores=2)
    assert bound_only.ratio is None and "bound" in bound_only.sentence() and "%" not in bound_only.sentence()


def test_the_forecast_carries_the_calibrated_interval_and_says_when_the_machine_is_busy(exact_calibration):
    from engine.calibration.check import forecast_run

    spec, machine, cal = exact_calibration
    fc = forecast_run(spec, "fp32", 20, 300, True, machine, cal)
    assert fc.interval is not None and fc.interval.low <= fc.seconds <= fc.interval.high
    assert "Forecast run time" in fc.beside(loadavg=0.1).sentence()
    assert "busy now (load 50.0" in fc.beside(loadavg=50.0).sentence()
    # a walkthrough's cache-off run took 9 min against "36.5 s (95%: 25.7 s–48 s)" at load 8 on 2 cores: the
    # forecast now says what to expect at the load, sharing the CPU: (load + cores) / cores times, or more
    busy = fc.beside(loadavg=8.0)
    assert busy.busy_factor == pytest.approx((8.0 + busy.cores) / busy.cores)
    assert busy.expected_s == pytest.approx(fc.seconds * busy.busy_factor)
    assert f"expect about {busy.busy_factor:.1f}× as long or more" in busy.sentence()
    assert (
        fc.beside(loadavg=0.1).busy_factor == 1.0 and "expect about" not in fc.beside(loadavg=0.1).sentence()
    )
    uncalibrated = forecast_run(spec, "fp32", 20, 300, True, machine, None)
    assert uncalibrated.interval is None and "at least" in uncalibrated.beside(loadavg=0.1).sentence()


def test_a_cache_off_forecast_carries_the_fits_interval_not_a_point():
    """The walkthrough read "Forecast run time: the calibrated estimate 11.5 s (95%: 11.5 s–11.5 s)" for a run with
    the KV cache off: a point written as an interval. Each prefill step now carries the fit's own interval."""
    from engine.calibration import RunSample, build_calibration, machine_spec, predict
    from engine.calibration.check import forecast_run

    spec = model_preset("smollm2-135m")
    machine = machine_spec(20e9, {"fp32": 2e11, "bf16": 5e10})
    shapes = ((1, 32, 8, 1.15), (1, 128, 6, 0.9), (4, 32, 6, 1.1), (1, 64, 16, 0.92), (1, 256, 8, 1.05))
    samples = []
    for b, p, o, noise in shapes:
        ttft, tpot = predict(spec, RunSample("fp32", b, p, o, math.nan, math.nan), machine)
        samples.append(RunSample("fp32", b, p, o, ttft * noise, tpot / noise))
    cal = build_calibration(spec, samples, machine, model="smollm2-135m-instruct")
    on, off = (forecast_run(spec, "fp32", 20, 64, cache, machine, cal) for cache in (True, False))
    for fc in (on, off):
        assert fc.interval is not None and fc.interval.low <= fc.seconds <= fc.interval.high
    assert off.interval.width > 1.05 and off.seconds > on.seconds
    text = off.beside(loadavg=0.1).sentence()
    low, high = re.search(r"95%: ([\d.]+ m?s)–([\d.]+ m?s)", text).groups()
    assert low != high, text


def test_the_bandwidth_share_and_the_bytes_read_agree_between_the_caption_and_the_reasoning():
    """The walkthrough read "reach 87% of the memory bandwidth in decode" above "1.80 TB/s (89% of the datasheet's,
    as fitted for vllm)", and "each step reads 15.01 GB of weights" beside a 16.06 GB weights tile, unexplained."""
    from engine.calc.explain import reasoning
    from ui.trackrecord_view import speed_caption

    spec, a100 = model_preset("llama-3-8b"), gpu_spec("a100-80gb")
    est = estimate(spec, a100, Inputs(dtype="bf16", batch=8, engine="vllm"))
    decode = next(r for r in reasoning(est, spec, a100) if r.startswith("**Decode**"))
    share = re.search(r"\((\d+)% of the [\d.]+ [TG]B/s the GPU figures give", decode).group(1)
    assert f"({share}% on the {a100.name}" in speed_caption(est, a100)
    assert "looks up one row per token of the input embedding table instead of reading it" in decode
    # a student's walk: '228.71 GB/s (76% of the datasheet's)' on a T4 whose figure is the book's 300 GB/s, not the
    # datasheet's 320: the share now names the figure it is of
    neo, t4 = model_preset("gpt-neo-2.7b"), gpu_spec("t4")
    est = estimate(neo, t4, Inputs(dtype="fp16", batch=8, seq_len=1024, engine="hf"))
    decode = next(r for r in reasoning(est, neo, t4) if r.startswith("**Decode**"))
    assert "of the 300.00 GB/s the GPU figures give" in decode and "datasheet" not in decode


def test_a_gpu_count_that_cannot_split_the_heads_is_said_in_one_sentence():
    """70B in bf16 on 3 x H100 with vLLM: the page switched to pipeline stages without a word, and one box read 'on
    3 pipeline stages ... GPUs needed: 2 (2 GPUs in tensor parallel)'. It now says why the 3 run as stages, and that
    2 are the fewest that hold the load while the 3 asked hold it too."""
    name = "meta-llama/Llama-3.1-70B-Instruct"
    spec = spec_from_hf_config(published.configs()[name], name=name)
    h100 = gpu_spec("h100-sxm")
    three = estimate(spec, h100, Inputs(dtype="bf16", batch=8, n_gpus=3, engine="vllm"))
    s = three.fit.sentence
    assert "3 GPUs cannot split the model's 64 attention heads (8 for keys and values) evenly" in s
    assert (
        "runs them as 3 pipeline stages" in s
        and "the fewest in tensor parallel that hold the load; the 3 asked hold it too" in s
    )
    four = estimate(spec, h100, Inputs(dtype="bf16", batch=8, n_gpus=4, engine="vllm"))
    assert "cannot split" not in four.fit.sentence and "the 4 asked hold it too" in four.fit.sentence


def test_the_cpu_vllm_command_leaves_an_unasked_max_num_seqs_to_vllm():
    """The engineer's 'this machine' plan printed `--max-num-seqs 0`, which no vLLM accepts: 0 means not asked."""
    from engine.calc.launch import LaunchPlan, vllm_cpu_command

    plan = LaunchPlan("meta-llama/Meta-Llama-3-8B", 1, 1, 1024, 0.9, 0, "bf16", None, None)
    assert "--max-num-seqs" not in vllm_cpu_command(plan, None)
    assert "--max-num-seqs 8" in vllm_cpu_command(replace(plan, max_num_seqs=8), 4)


def test_a_model_too_big_for_this_machine_says_why_it_is_split_not_pick_one_gpu():
    """The engineer chose 'this machine' for a 70B model with GPUs at 1 and read 'tensor parallel over 2 GPUs cannot
    be timed. Pick a catalog GPU, or 1 GPU': the plan had split it because it does not fit on one."""
    small = replace(gpu_spec("a100-80gb"), interconnect_bytes_per_s=0.0, name="this machine")
    with pytest.raises(InvalidParameterError) as err:
        estimate(
            model_preset("llama-2-13b"), replace(small, memory_bytes=16e9), Inputs(dtype="bf16", batch=1)
        )
    assert "too big for one" in str(err.value) and "1 GPU" not in str(err.value)


def test_the_launch_note_speaks_of_the_chosen_engines_cache_and_flag():
    """With SGLang chosen, the note under its command said '--max-num-seqs 1024 caps ... its cache holds 440
    sequences' (vLLM's flag and vLLM's cache) beside a fit box of 438."""
    spec, h100 = model_preset("llama-3-8b"), gpu_spec("h100-sxm")
    sg = estimate(spec, h100, Inputs(dtype="bf16", batch=8, engine="sglang"))
    assert "--max-num-seqs" not in sg.launch.note
    capped = estimate(spec, h100, Inputs(dtype="bf16", batch=8, engine="sglang", max_num_seqs=1024))
    assert "--max-running-requests 1024 caps" in capped.launch.note
    assert f"holds {capped.fit.max_batch:,} sequences" in capped.launch.note
    vl = estimate(spec, h100, Inputs(dtype="bf16", batch=8, engine="vllm"))
    assert f"holds {vl.fit.max_batch:,} sequences" in vl.launch.note and "--max-num-seqs" in vl.launch.note


def test_a_model_too_big_for_one_gpu_is_planned_in_tensor_parallel_not_stages_within_a_node():
    """The engineer's walk: a 70B in bf16 for 50 users on H100s got 'GPUs needed 3 (3 pipeline stages)', where
    4-way tensor parallel (vLLM's guide for a model that fits in one node) decodes about twice as fast and costs
    less per token. Stages within a node are now only the layout asked; past a node they follow the guide."""
    name = "meta-llama/Llama-3.3-70B-Instruct"
    spec = spec_from_hf_config(published.configs()[name], name=name)
    h100 = gpu_spec("h100-sxm")
    one = estimate(
        spec, h100, Inputs(dtype="bf16", batch=50, prompt_tokens=2048, output_tokens=2048, engine="vllm")
    )
    assert (one.plan.tensor_parallel, one.plan.pipeline_parallel) == (4, 1), one.plan
    assert "--pipeline-parallel-size" not in one.launch.vllm and "--tensor-parallel-size 4" in one.launch.vllm
    three = estimate(spec, h100, Inputs(dtype="bf16", batch=8, n_gpus=3, engine="vllm"))
    assert three.fits and three.plan.gpus <= 3  # the layout asked, kept when it holds the load
    big = spec_from_hf_config(published.configs()["meta-llama/Llama-3.1-405B"], name="405b")
    past = estimate(big, h100, Inputs(dtype="bf16", batch=8, engine="vllm"))
    assert past.plan.tensor_parallel == 8 and past.plan.pipeline_parallel >= 2, past.plan


def test_the_gpus_needed_say_the_other_layout_when_it_takes_a_different_count():
    """The engineer's re-walk: 'GPUs needed: 4 ... the fewest that hold the load' with 1, 2, 6 or 8 GPUs asked, and
    'GPUs needed: 3' with 3 asked (as pipeline stages). Each answer now names the other layout and its count."""
    name = "meta-llama/Llama-3.3-70B-Instruct"
    spec = spec_from_hf_config(published.configs()[name], name=name)
    h100 = gpu_spec("h100-sxm")

    def sentence(n: int) -> str:
        i = Inputs(dtype="bf16", batch=50, prompt_tokens=2048, output_tokens=256, n_gpus=n, engine="vllm")
        return estimate(spec, h100, i).fit.sentence

    one = sentence(1)
    assert "GPUs needed: 4 (4 GPUs in tensor parallel)" in one
    assert "As pipeline stages, 3 GPUs would hold it (3 pipeline stages of one GPU each: ask for 3" in one
    three = sentence(3)
    assert "GPUs needed: 3." in three and "In tensor parallel" in three and "it takes 4 GPUs" in three
    eight = sentence(8)
    assert "the fewest in tensor parallel that hold the load; the 8 asked hold it too" in eight


def test_a_forecast_beside_other_work_below_the_core_count_still_expects_longer():
    """The student's walk: at load 1.5 on 2 cores (not 'busy' by the one rule: the run's own threads are not
    counted yet) the forecast said 76 s and the run took 5.4 min, labelled 'quiet otherwise'. Other work shares
    the cores with the run's threads, so the forecast scales by it and says so; the label names the other work."""
    from engine.calibration.beside import beside
    from ui.playground_widgets import _shared_words

    shared = beside("run time", measured_s=None, predicted=None, bound_s=10.0, loadavg_1m=1.5, n_cores=2)
    assert not shared.busy and shared.busy_factor == pytest.approx(1.75)
    assert "Other work is running now (load 1.5 on 2 cores)" in shared.sentence()
    assert "expect about 1.8× as long or more" in shared.sentence()
    quiet = beside("run time", measured_s=None, predicted=None, bound_s=10.0, loadavg_1m=0.2, n_cores=2)
    assert quiet.busy_factor == 1.0 and "Other work" not in quiet.sentence()
    # the tile's label follows the run's one verdict, naming what other programs took while it ran
    assert "quiet otherwise" not in _shared_words(True, 1.5) and "took 1.5 cores' worth" in _shared_words(
        True, 1.5
    )
    assert _shared_words(False) == " (quiet otherwise)."


def test_after_a_run_the_forecast_gives_way_to_what_the_run_took():
    """The presenter's walk: '... (about 69.7 s)' stayed on screen beside a 5.5 min run, with no word why."""
    from ui.forecast_view import forecast_outcome

    slow = forecast_outcome(69.7, 332.5, True)
    assert slow.startswith(
        "Forecast before the run: 69.7 s; generation took 5.5 min (from the request to its last token), 4.8× the "
        "forecast: other work"
    )
    assert forecast_outcome(69.7, 332.5, False).endswith("4.8× the forecast.")
    # what the time counts is said (a presenter's click-to-result disagreed with a bare 'it took')
    assert forecast_outcome(36.5, 40.0, False) == (
        "Forecast before the run: 36.5 s; generation took 40 s (from the request to its last token)."
    )


def test_the_labs_own_last_run_is_not_other_work_in_a_forecast():
    """The presenter's quiet walk: 'Other work is running now (load 0.9 on 2 cores) ... expect about 1.4× as long'
    where the 0.9 was the lab's own run a minute before; the run took 40.6 s against 36.5 s unscaled."""
    from engine.calibration.beside import beside
    from ui.playground_widgets import _shared_words

    quiet = beside("run time", measured_s=None, predicted=None, bound_s=36.5, loadavg_1m=0.9, n_cores=2)
    assert quiet.busy_factor == 1.0 and "Other work" not in quiet.sentence()
    assert _shared_words(False, 0.1).endswith("(quiet otherwise).")


def test_an_overhead_verdict_that_does_not_fit_says_a_serving_engine_counts_otherwise():
    """The engineer's walk: Qwen2.5-72B in bf16 on 2 x H100 'fits' with vLLM and SGLang (their allocation) and 'does
    not fit, 87.70 GB per GPU' with TensorRT-LLM and transformers (the overhead rule), the difference unsaid."""
    ask = Inputs(
        dtype="bf16", batch=1, prompt_tokens=2048, output_tokens=256, n_gpus=2, engine="tensorrt-llm"
    )
    trt = estimate(_qwen72b(), gpu_spec("h100-sxm"), ask)
    assert not trt.fits and "vLLM and SGLang are counted as they allocate" in trt.fit.sentence
    vllm = estimate(_qwen72b(), gpu_spec("h100-sxm"), replace(ask, engine="vllm"))
    assert vllm.fits and "counted as they allocate" not in vllm.fit.sentence
    four = estimate(_qwen72b(), gpu_spec("h100-sxm"), replace(ask, n_gpus=4))
    assert four.fits and "counted as they allocate" not in four.fit.sentence


def test_the_price_counts_prompts_too_for_a_providers_blended_price(capsys):
    """The engineer's walk: the cost was per million output tokens only; a provider's price counts the prompt too."""
    plan = "--model llama-3.1-8b-instruct --gpu h100-sxm --engine vllm --dtype bf16 --batch 50"
    load = "--prompt-tokens 2048 --output-tokens 256 --usd-per-hour 3.49"
    argv = ["estimate", *plan.split(), *load.split()]
    assert main([*argv, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    both = r["usd_per_million_tokens_in_and_out"]
    assert both == pytest.approx(r["usd_per_million_tokens"] * 256 / (2048 + 256))
    assert main(argv) == 0
    assert f"${both:.2f} per million tokens in and out (prompts counted)" in capsys.readouterr().out


def test_the_plan_says_why_an_h100_holds_fewer_sequences_than_an_a100_of_the_same_memory():
    """The engineer's walk: Qwen2.5-72B (Qwen2-72B's shape) in bf16 on 2 x H100 held fewer sequences than on 2 x A100, no
    word on why. vLLM profiles 8,192 tokens at once on an H100 and 2,048 on an A100 (its default
    --max-num-batched-tokens), so its profile run takes more of an H100; the plan's sentence now says so."""
    spec = _qwen72b()
    inputs = Inputs(dtype="bf16", batch=8, seq_len=1024, n_gpus=2, engine="vllm")
    h100 = estimate(spec, gpu_spec("h100-sxm"), inputs)
    a100 = estimate(spec, gpu_spec("a100-80gb"), inputs)
    assert h100.max_batch < a100.max_batch
    assert "8,192 tokens at once, vLLM's default --max-num-batched-tokens on this GPU" in h100.fit.sentence
    assert "2,048 tokens at once, vLLM's default --max-num-batched-tokens on this GPU" in a100.fit.sentence
    for est in (h100, a100):
        assert f"{est.max_batch:,} sequences of 1,024 tokens at once" in est.fit.sentence


def _flop(text: str) -> float:
    number, prefix = re.fullmatch(r"([\d.,]+) ([kMGTPE]?)FLOP", text).groups()
    return float(number.replace(",", "")) * 10 ** (3 * " kMGTPE".index(prefix or " "))


@pytest.mark.parametrize("engine", ["hf", "vllm", "tensorrt-llm"])
@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_the_reasoning_never_gives_a_part_larger_than_its_whole(engine, gpus):
    """The engineer's walk: Qwen2.5-72B on 2 x H100 with transformers read "Prefill: 14.93 PFLOP, 57.52 PFLOP of it
    in compute-bound operators", "+ 559.37 GB of activations" per decode step (vLLM's plan: 5.90 GB) and "5.46 µs
    all-reduces" for 160 of them: the reasoning counted 4 GPUs' rates and bandwidth where transformers runs its 4
    layer-split stages one after another, as its times are computed. It now counts one GPU for a layer-split
    engine, calls the stage hand-offs what they are, and the plan's sentence does not say tensor parallel."""
    from engine.calc.explain import reasoning

    spec, gpu = _qwen72b(), gpu_spec("h100-sxm")
    inputs = Inputs(dtype="bf16", batch=50, seq_len=2304, prompt_tokens=2048, output_tokens=256, n_gpus=gpus,
                    engine=engine)  # fmt: skip
    est = estimate(spec, gpu, inputs)
    lines = reasoning(est, spec, gpu)
    prefill = next(line for line in lines if line.startswith("**Prefill**"))
    whole = re.search(r"\*\*Prefill\*\*: ([\d.,]+ [kMGTPE]?FLOP)", prefill).group(1)
    part = re.search(r", ([\d.,]+ [kMGTPE]?FLOP) of it in compute-bound", prefill)
    assert part is None or _flop(part.group(1)) <= _flop(whole)
    decode = next(line for line in lines if line.startswith("**Decode**"))
    activations = re.search(r"\+ ([\d.,]+) GB of activations", decode)
    assert activations is None or float(activations.group(1)) < 0.1 * est.memory.weights_bytes / 1e9
    split = engine == "hf" and (est.fit.layout.tensor_parallel if est.fit.layout else gpus) > 1
    assert any(line.startswith("**Layer split**") for line in lines) == split
    tp = (est.fit.layout.tensor_parallel if est.fit.layout else gpus) > 1
    assert ("hand-offs between stages" in decode) == split
    assert ("all-reduces" in decode) == (tp and not split)
    if split:
        assert "in tensor parallel" not in est.fit.sentence.replace("not in tensor parallel", "")


def test_a_tensor_parallel_plan_with_no_run_of_its_layout_says_the_engines_runs_found_its_costs_too_slow():
    """The engineer's walk: Qwen2.5-7B on 2 x H100 rested on a published run of its layout and scaled 106 -> 142
    tok/s, while Llama-3.1-8B did not and ran slower on 2 GPUs than on 1, with nothing said. An unanchored plan now
    says that the engine's runs of other layouts took those fixed costs at a fraction of the fit's."""
    llama = spec_from_hf_config(published.configs()["meta-llama/Llama-3.1-8B-Instruct"], name="llama-8b")
    inputs = Inputs(dtype="bf16", batch=1, prompt_tokens=512, output_tokens=256, n_gpus=2, engine="vllm")
    est = estimate(llama, gpu_spec("h100-sxm"), inputs)
    assert est.anchor is None
    note = est.warnings[0]
    assert note.startswith("No published run of this model's layout on several GPUs")
    assert "Qwen/Qwen2-7B-Instruct on 2 x A100 80GB SXM (" in note and "likely pessimistic" in note
    one = estimate(llama, gpu_spec("h100-sxm"), replace(inputs, n_gpus=1))
    assert not any("No published run of this model's layout" in w for w in one.warnings)  # one GPU: no split
