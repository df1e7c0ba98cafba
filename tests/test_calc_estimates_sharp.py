"""GPU estimates sharp enough to budget on: intervals conditioned on engine class x GPU family x regime, first-token
latency in the parts a serving engine spends it, the per-step model the simulator drives, engine classes people
compare against, layer splits as pipeline stages, and vLLM's memory at low utilisation against its own logs."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from engine.calc import cells, published
from engine.calc import efficiency as E
from engine.calc.cells import Bands, Residual
from engine.calc.fitting import fit_all, predicted_seconds
from engine.calc.observations import Observation, held_back, observations, parallel
from engine.calc.serving_memory import serving_memory
from engine.calc.serving_startup import cuda_gap_bytes, cuda_total_bytes
from engine.calc.serving_time import closed_loop
from engine.calc.specs import GIB, gpu_spec, model_preset
from engine.calc.step_model import request_fixed_s, step_time
from engine.calc.timing import Efficiency, Setup, step_seconds, timing_from, timing_inputs
from engine.cli import main
from engine.core.errors import InvalidParameterError


def _setup(
    gpu: str = "a100-80gb", n: int = 1, batch: int = 1, p: int = 512, o: int = 256, model: str = "llama-3-8b"
):
    return Setup(model_preset(model), gpu_spec(gpu), "bf16", None, None, None, "bf16", n, batch, p, o)


def _json(capsys, argv):
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


ESTIMATE = [
    "estimate",
    "--model",
    "llama-3-8b",
    "--gpu",
    "h100-sxm",
    "--dtype",
    "bf16",
    "--prompt-tokens",
    "512",
]


# ---------------------------------------------------------------- the estimate JSON's contract


def test_estimate_json_intervals_carry_width_and_rows_and_ttft_its_parts(capsys):
    r = _json(capsys, [*ESTIMATE, "--output-tokens", "256", "--batch", "8", "--engine", "vllm", "--json"])
    for key in ("decode_tokens_per_s", "ttft_s", "output_tokens_per_s", "prefill_batch_s", "tpot_s"):
        i = r[key]
        assert {"low", "central", "high", "bound", "width", "rows"} <= set(i), key
        assert i["low"] <= i["central"] <= i["high"] and i["width"] == pytest.approx(i["high"] / i["low"])
        assert isinstance(i["rows"], int) and i["rows"] > 0, key  # the published rows behind it
    parts = r["ttft_s"]["parts"]
    assert set(parts) == {"fixed", "prefill", "queue"} and all(v >= 0 for v in parts.values())
    assert sum(parts.values()) == pytest.approx(r["ttft_s"]["central"])
    assert parts["fixed"] > 0 and parts["queue"] > 0  # a serving engine's fixed cost; 8 users: a queue
    # one request's first token is not the whole batch's prefill
    assert r["prefill_batch_s"]["central"] > parts["prefill"]
    for kept in ("fits", "gpus_needed", "launch_command", "kv_cache_tokens", "efficiency", "warnings"):
        assert kept in r, kept


def test_one_user_waits_in_no_queue_and_the_batch_prefill_is_its_own_prefill(capsys):
    r = _json(capsys, [*ESTIMATE, "--output-tokens", "256", "--batch", "1", "--engine", "vllm", "--json"])
    assert r["ttft_s"]["parts"]["queue"] == 0
    assert r["prefill_batch_s"]["central"] == pytest.approx(r["ttft_s"]["parts"]["prefill"], rel=1e-9)


def test_without_an_engine_prefill_batch_s_is_a_plain_figure(capsys):
    r = _json(capsys, [*ESTIMATE, "--output-tokens", "256", "--batch", "4", "--json"])
    assert isinstance(r["prefill_batch_s"], float) and r["prefill_batch_s"] == pytest.approx(r["prefill_s"])


# ---------------------------------------------------------------- intervals conditioned on the cell


def _residuals(cell, values, sources):
    return [
        (cell, Residual(v, s, f"{cell}-{i}")) for i, (v, s) in enumerate(zip(values, sources, strict=True))
    ]


HOPPER = ("vllm", "hopper-hbm", "bandwidth")
RTX = ("vllm", "ada-gddr", "bandwidth")
TIGHT = [0.02, -0.03, 0.01, 0.04, -0.02, 0.00, 0.03, -0.01]
WIDE = [0.9, -0.7, 0.5, -0.6, 0.8, -0.9, 0.7, -0.5]


def test_a_hopper_row_does_not_borrow_rtx_residuals_when_its_own_cell_has_enough():
    bands = Bands.of(_residuals(HOPPER, TIGHT, ["a", "b"] * 4) + _residuals(RTX, WIDE, ["c", "d"] * 4))
    own = bands.band(HOPPER)
    assert own.levels_up == 0 and own.rows == len(TIGHT) and own.sources == 2
    assert own.width < 1.2  # the Hopper rows' own spread, not the RTX rows'
    assert bands.band(RTX).width > 3


def test_a_cell_with_too_few_rows_or_one_source_borrows_its_parent_and_widens():
    base = _residuals(HOPPER, TIGHT, ["a", "b"] * 4)
    one_source = ("vllm", "hopper-hbm", "compute")
    bands = Bands.of(base + _residuals(one_source, TIGHT, ["z"] * len(TIGHT)))
    borrowed = bands.band(one_source)  # eight rows, all from one source: not enough on its own
    assert borrowed.levels_up == 1 and borrowed.level == "class x family"
    alone = Bands.of(base + _residuals(one_source, TIGHT, ["z", "y"] * 4)).band(one_source)
    assert alone.levels_up == 0
    lo, hi = cells.band_from(TIGHT * 2, 0)  # the same sixteen rows, read as a cell of their own
    assert borrowed.width > hi / lo  # wider half-widths for the level climbed (BORROW_WIDENING)
    few = ("vllm", "hopper-hbm", "overhead")
    thin = Bands.of(base + _residuals(few, [0.01, -0.01], ["x", "y"]))
    assert thin.band(few).levels_up == 1 and thin.band(few).rows == len(TIGHT) + 2


def test_a_band_from_few_rows_is_wider_than_from_many_with_the_same_spread():
    lo_few, hi_few = cells.band_from([0.1, -0.1, 0.05, -0.05, 0.0, 0.02], 0)
    lo_many, hi_many = cells.band_from([0.1, -0.1, 0.05, -0.05, 0.0, 0.02] * 3, 0)
    assert hi_few / lo_few > hi_many / lo_many


def test_gpu_families_split_architectures_by_memory_kind():
    assert cells.gpu_family(gpu_spec("a100-80gb")) == "ampere-hbm"
    assert cells.gpu_family(gpu_spec("rtx-3090")) == "ampere-gddr"
    assert cells.gpu_family(gpu_spec("h100-sxm")) == "hopper-hbm"
    assert cells.gpu_family(gpu_spec("l40s")) == "ada-gddr"


def test_the_fit_and_its_intervals_never_see_the_held_back_rows():
    f = E.fits()
    held = set(f.held_back)
    seen = {r.row_id for b in f.bands.values() for rs in b.by_cell.values() for r in rs}
    assert seen and not seen & held and not set(f.fitted_on) & held


def test_estimates_say_which_rows_their_intervals_rest_on():
    s = E.estimate_speed(_setup(batch=1), "hf-compiled")
    assert s.decode_tokens_per_s.rows == s.bands["decode"].rows > 0
    assert s.decode_tokens_per_s.low <= s.decode_tokens_per_s.central <= s.decode_tokens_per_s.high
    assert s.decode_tokens_per_s.high <= s.decode_tokens_per_s.bound


# ---------------------------------------------------------------- first-token latency as a server spends it


def test_closed_loop_parts_sum_and_grow_with_users():
    s, eff = _setup(batch=1), Efficiency(bandwidth=0.8, flops=0.7, request_fixed_s=0.02)
    one, many = closed_loop(s, eff, 1), closed_loop(s, eff, 32)
    assert one.queue_s == 0 and one.ttft_s == pytest.approx(0.02 + one.prefill_s)
    assert sum(many.parts.values()) == pytest.approx(many.ttft_s)
    assert many.queue_s > 0 and many.tpot_s > one.tpot_s
    assert many.output_tokens_per_s > one.output_tokens_per_s
    burst = closed_loop(s, eff, 32, burst=True)  # every prompt at once: the batch's prefill before any token
    assert burst.ttft_s > many.ttft_s


def test_a_serving_engine_pays_a_fixed_cost_per_request_fitted_on_first_token_rows():
    fit = E.fits().for_engine("tensorrt-llm")
    assert fit.prefill_rows >= 2 and "request fixed cost" not in fit.borrowed
    assert 0 < fit.request_fixed_s < 0.1
    t = timing_from(timing_inputs(_setup()), fit.efficiency(gpu_spec("a100-80gb")))
    assert t.ttft_s == pytest.approx(t.prefill_s + fit.efficiency(gpu_spec("a100-80gb")).request_fixed_s)


def _served_ttft_rows(train, fit, extra_s):
    """Two served first-token rows made from one of vLLM's load rows (one user, 128 and 1024 prompt tokens), each
    `extra_s` slower than the fit predicts with no fixed cost."""
    template = next(o for o in train if o.row.engine_class == "vllm" and o.kind == "load_throughput")
    made = []
    for p in (128, 1024):
        s = replace(template.setup, batch=1, prompt_tokens=p)
        row = replace(template.row, id=f"made-served-ttft-{p}", metric="ttft_ms", batch=1, prompt_tokens=p)
        o = Observation(row, s, "load_ttft", 1.0, timing_inputs(s), concurrency=1)
        made.append(replace(o, seconds=predicted_seconds(o, replace(fit, request_fixed_s=0.0)) + extra_s))
    return made


def _train_without_served_ttft():
    """The fit's rows without vLLM's own served first-token rows (the published set has some): the tests below make
    their own, to see the fixed cost fitted from exactly what they made."""
    return [
        o
        for o in observations()[0]
        if not held_back(o.row.id) and not (o.row.engine_class == "vllm" and o.kind == "load_ttft")
    ]


def test_a_server_class_fits_its_own_fixed_cost_on_its_served_first_token_rows():
    train = _train_without_served_ttft()
    classes, pooled = fit_all(train)
    assert "request fixed cost" in classes["vllm"].borrowed  # no served TTFT row of its own yet: borrowed
    refit, refit_pooled = fit_all(train + _served_ttft_rows(train, classes["vllm"], 0.040))
    vllm = refit["vllm"]
    assert "request fixed cost" not in vllm.borrowed and vllm.prefill_rows == 2
    # c is fitted before the GPU-family factors (which move the prefill a little): near, not exactly, 40 ms
    assert vllm.request_fixed_s == pytest.approx(0.040, rel=0.02)
    # the static, server-less classes that borrow from the pooled fit keep a fixed cost measured without a server
    assert refit_pooled.request_fixed_s == pytest.approx(pooled.request_fixed_s)
    assert refit["mlc"].request_fixed_s == pytest.approx(classes["mlc"].request_fixed_s)


def test_one_served_first_token_row_is_too_few_and_the_class_keeps_borrowing():
    train = _train_without_served_ttft()
    classes, _ = fit_all(train)
    refit, _ = fit_all(train + _served_ttft_rows(train, classes["vllm"], 0.040)[:1])
    assert "request fixed cost" in refit["vllm"].borrowed
    assert refit["vllm"].request_fixed_s == pytest.approx(classes["vllm"].request_fixed_s)


# ---------------------------------------------------------------- the per-step model for the simulator


def test_step_time_is_an_interval_with_its_rows_and_grows_with_the_step():
    s = _setup("h100-sxm")
    small = step_time(s, "vllm", 1, 512, 0)
    big = step_time(s, "vllm", 64, 64 * 2048, 0)
    mixed = step_time(s, "vllm", 64, 64 * 2048, 1024)
    for i in (small, big, mixed):
        assert i.bound <= i.low <= i.central <= i.high and i.rows and i.rows > 0
    assert small.central < big.central < mixed.central
    assert request_fixed_s(s, "vllm") > 0


def test_a_mixed_step_reads_each_weight_once():
    s, eff = _setup("h100-sxm"), Efficiency(bandwidth=0.8, flops=0.7)
    dec = step_seconds(s, eff, decode_rows=8, context_tokens=8 * 512, prefill_tokens=0)
    pre = step_seconds(s, eff, decode_rows=0, context_tokens=0, prefill_tokens=256)
    both = step_seconds(s, eff, decode_rows=8, context_tokens=8 * 512, prefill_tokens=256)
    assert both.weights_bytes == pytest.approx(dec.weights_bytes)
    assert max(dec.seconds, pre.seconds) <= both.seconds < dec.seconds + pre.seconds


def test_a_step_without_work_or_an_unknown_engine_is_one_sentence():
    with pytest.raises(InvalidParameterError, match="decode rows or prefill tokens"):
        step_time(_setup(), "vllm", 0, 0, 0)
    with pytest.raises(InvalidParameterError, match="unknown engine"):
        step_time(_setup(), "not-an-engine", 1, 1, 0)


# ---------------------------------------------------------------- engine classes people compare against


def test_exllamav2_has_its_own_class_fitted_on_published_rows():
    fit = E.fits().for_engine("exllamav2")
    assert fit.decode_rows >= 6 and fit.sources >= 2 and "bandwidth" not in fit.borrowed
    rows = [r for r in published.rows() if r.engine == "exllamav2"]
    assert rows and all(r.source and r.quote for r in rows)


def test_deepspeed_mii_without_fitted_rows_gets_one_sentence_not_a_traceback(capsys):
    """DeepSpeed-FastGen's published figures are either held back or measured at an unstated load: the fit has none
    of its own rows, so the estimate says so instead of borrowing another engine's numbers silently."""
    f = E.fits()
    fitted = [i for i in f.fitted_on if next(r for r in published.rows() if r.id == i).engine == "deepspeed"]
    assert not fitted and "deepspeed-fastgen" not in f.classes
    with pytest.raises(InvalidParameterError, match=r"^no published runs of DeepSpeed-FastGen"):
        f.for_engine("deepspeed-mii")
    assert main([*ESTIMATE, "--output-tokens", "64", "--engine", "deepspeed-mii", "--json"]) == 2
    captured = capsys.readouterr()
    assert "no published runs of DeepSpeed-FastGen" in captured.err and "Traceback" not in captured.err
    assert json.loads(captured.out)["error"].startswith("no published runs of DeepSpeed-FastGen")  # JSON only


def test_llama_cpp_splits_layers_over_gpus_as_pipeline_stages():
    """Two GPUs hold a model twice as large for llama.cpp but do not make one sequence faster (each token crosses
    both stages in turn); tensor parallel (vLLM) does."""
    spec = model_preset("llama-3-8b")
    one = E.estimate_speed(_setup("rtx-4090", 1), "llama.cpp").decode_tokens_per_s.central
    two = E.estimate_speed(_setup("rtx-4090", 2), "llama.cpp").decode_tokens_per_s.central
    assert two <= one
    v1 = E.estimate_speed(_setup("rtx-4090", 1), "vllm").decode_tokens_per_s.central
    v2 = E.estimate_speed(_setup("rtx-4090", 2), "vllm").decode_tokens_per_s.central
    assert v2 > v1
    staged = timing_inputs(parallel(_setup("rtx-4090", 2), "llama.cpp"))
    assert staged.hops == 1 and staged.allreduces == 0 and spec.n_layer == staged.n_layer


# ---------------------------------------------------------------- memory at low utilisation, against vLLM's logs


@pytest.mark.parametrize("util", [0.25, 0.5])
def test_vllm_kv_cache_at_low_utilisation_matches_its_startup_log(util):
    """vLLM 0.10.1.1 on an A100 80GB, Qwen2-7B, max_model_len 16384 (dennislee22/vLLM-benchmarking)."""
    rid = f"dennislee-qwen2-7b-a100-80gb-u{int(util * 100):03d}-kvtokens"
    row = next(r for r in published.rows() if r.id == rid)
    spec = E.setup_of(row).spec
    m = serving_memory(
        spec, gpu_spec("a100-80gb"), dtype="bf16", max_model_len=16384, gpu_memory_utilization=util
    )
    assert m.kv_cache_tokens == pytest.approx(row.value, rel=0.03)


def test_the_budget_is_the_cuda_visible_total_not_the_drivers():
    t4 = gpu_spec("t4-datasheet")
    assert cuda_total_bytes(t4) == pytest.approx(14.56 * GIB)  # vLLM's own 'total_gpu_memory (14.56GiB)'
    h100 = gpu_spec("h100-sxm")
    assert cuda_total_bytes(h100) == pytest.approx(79.22 * GIB)  # vLLM PR #12126's H100-80G log
    h200 = gpu_spec("h200")  # no log on the card: the driver's total less the median gap of those with one
    assert cuda_total_bytes(h200) == pytest.approx(h200.memory_bytes - cuda_gap_bytes())
    assert 0.2 * GIB < cuda_gap_bytes() < 1.0 * GIB
    a100 = gpu_spec("a100-80gb")
    m = serving_memory(model_preset("llama-3-8b"), a100, dtype="bf16", max_model_len=8192)
    assert m.budget_bytes == pytest.approx(0.9 * cuda_total_bytes(a100))
    assert m.max_num_batched_tokens == 2048 and m.max_num_seqs == 256  # vLLM's V1 defaults skip the A100
    h = serving_memory(model_preset("llama-3-8b"), h100, dtype="bf16", max_model_len=8192)
    assert h.max_num_batched_tokens == 8192 and h.max_num_seqs == 1024


# ---------------------------------------------------------------- the track record prints what it promises


def test_the_track_record_reports_width_and_whether_each_target_is_met(capsys):
    r = _json(capsys, ["trackrecord", "--no-machine", "--json"])
    groups = {s["group"]: s for s in r["targets_on_held_back_rows"]}
    for g in ("decode", "ttft"):
        s = groups[g]
        assert s["rows"] > 0 and s["median_width"] is not None and s["median_width"] >= 1
        assert "median width" in s["target"] and s["met"] in (True, False)
    scored = [x for x in r["rows"] if x["group"] == "decode" and x["interval"]]
    assert scored and all(
        x["interval_width"] == pytest.approx(x["interval"][1] / x["interval"][0]) for x in scored
    )
    assert all(x["cell"] and x["interval_from"]["rows"] > 0 for x in scored)
    assert not math.isnan(groups["throughput"]["median_abs_error"])


def test_the_profile_peak_is_the_larger_of_the_forward_and_the_sampler_not_their_sum():
    """vLLM V0 logged the same 1.26 GiB activation peak for Llama-3-8B at 8192 tokens on one GPU and on two
    (PR #10511), though tensor parallelism halves the MLP's transient: the sampler's logits set that peak. At 20000
    and 29000 tokens (issue #10517) the peak grows with the tokens instead."""
    from engine.calc.serving_startup import activation_model, activation_terms, peak_bytes

    model = activation_model()
    spec = model_preset("llama-3-8b")

    def peak(tp: int, tokens: int) -> float:
        x = activation_terms(spec, tp, "bf16", tokens, 256)
        return peak_bytes(model.per_token, model.per_sequence["v0"], x)

    assert peak(1, 8192) == pytest.approx(peak(2, 8192))
    assert peak(1, 8192) == pytest.approx(1.26 * GIB, rel=0.15)
    assert peak(1, 29000) - peak(1, 20000) == pytest.approx((2.99 - 2.07) * GIB, rel=0.15)


def test_the_interval_rule_holds_its_nominal_level_on_the_fitted_rows_own_residuals():
    """The rule (80%, 6 rows from 2 sources, +12% per borrowed level) was chosen on the fitted rows' out-of-fold
    residuals: each one's band, read from the others, holds it at least as often as the level says, for every kind
    of time. Held-back rows never enter (a Bands holds fitted rows only)."""
    bands = E.fits().bands
    assert cells.COVERAGE == 0.80 and E.INTERVAL_LEVEL == "80%"
    for kind in ("decode", "ttft", "throughput"):
        cal = bands[kind].calibration("row")
        assert cal.rows >= 20
        assert cal.inside >= cells.COVERAGE, kind
    held = set(E.fits().held_back)
    assert not any(r.row_id in held for b in bands.values() for rs in b.by_cell.values() for r in rs)


def test_without_the_borrowing_widening_some_kind_falls_short_of_its_level(monkeypatch):
    """Why the widening stays: a band borrowed from a parent level pools rows unlike the setup, and without the
    extra half-width at least one kind's left-out residuals fall inside less often than the nominal level."""
    bands = E.fits().bands
    monkeypatch.setattr(cells, "BORROW_WIDENING", 0.0)
    shares = [bands[k].calibration("row").inside for k in ("decode", "ttft", "throughput")]
    assert min(shares) < cells.COVERAGE


def test_a_short_prompt_fills_the_gpu_less_than_a_long_one():
    """LMDeploy's A100 runs take 22 ms for 128 prompt tokens and 139 ms for 2048 (16x the tokens, 6x the time): the
    prefill's utilisation ramps with its tokens, T / (T + T_half), fitted where a class's rows span the lengths."""
    from engine.calc.timing import ramped

    fit = E.fits().classes["lmdeploy"]
    assert fit.prefill_half_tokens > 0 and "prefill ramp" not in fit.borrowed
    eff = fit.efficiency(gpu_spec("a100-80gb"))
    assert ramped(eff, 128).flops < ramped(eff, 2048).flops < eff.flops
    assert ramped(replace_half(eff, 0.0), 128).flops == eff.flops  # no ramp: the fitted utilisation as it is
    assert "prefill ramp" in E.fits().classes["llama.cpp"].borrowed  # its first-token rows are all 512 tokens


def replace_half(eff: Efficiency, half: float) -> Efficiency:
    from dataclasses import replace

    return replace(eff, prefill_half_tokens=half)


def test_a_workers_own_kv_pool_is_shown_not_scored_and_the_data_says_why():
    """vllm#13061 quotes 8.69 GiB 'reserved for KV Cache' and, from the same run, 81,536 tokens. At this model's
    bytes per token per GPU (tensor parallel 2) the tokens are 7.46 GiB: the GiB figure is one worker's pool, while
    vLLM 0.7 sizes the cache by the smallest worker's. The row is shown with that reason and not scored; the tokens
    row of the same log is scored, and the calculator is within 3% of it."""
    from engine.calc.hf_config import spec_from_hf_config
    from engine.calc.memory import kv_bytes_per_token
    from engine.trackrecord import track_record

    name = "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B"
    per_gpu = kv_bytes_per_token(spec_from_hf_config(published.configs()[name], name), "bf16") / 2
    assert per_gpu == 98_304
    tokens_gib = 81_536 * per_gpu / GIB
    assert tokens_gib == pytest.approx(7.465, abs=1e-3) and 8.69 / tokens_gib > 1.15  # not the same pool
    rows = {r.id: r for r in track_record(include_machine=False).rows}
    gib = rows["vllm-13061-r1-distill-qwen-14b-2x4090-kv"]
    assert "smallest" in gib.why and "7.46 GiB" in gib.why
    tokens = rows["vllm-13061-r1-distill-qwen-14b-2x4090-kvtokens"]
    assert not tokens.why and abs(tokens.predicted / tokens.published - 1) < 0.03


def test_a_class_takes_a_family_factor_it_has_no_rows_for_from_the_classes_that_ran_on_both():
    """vLLM's rows all ran on A100s; its RTX 4090 sweeps were read at the A100's share of bandwidth, 20-25% slow
    (bench/simulate.md). Classes that ran on both families show the GDDR card's shorter time per token."""
    from engine.calc.fitting import ClassFit, borrow_family_factors

    def fit(name, **f):
        return ClassFit(
            name, 0.8, 1e-4, 1.0, 0.5, 0.5, family_factors={("decode", k): v for k, v in f.items()}
        )

    got = borrow_family_factors(
        {
            "a": fit("a", hbm=1.1, gddr=0.88),  # gddr / hbm = 0.8
            "b": fit("b", hbm=1.0, gddr=0.9, other=1.2),  # 0.9
            "vllm": fit("vllm", hbm=0.98),
        }
    )
    v = got["vllm"]
    assert v.factor("decode", "gddr") == pytest.approx(0.98 * math.exp((math.log(0.8) + math.log(0.9)) / 2))
    assert v.factor("decode", "other") == pytest.approx(0.98 * 1.2)
    assert v.families_borrowed == ("gddr", "other") and v.factor("decode", "hbm") == 0.98  # its own kept
    # b alone ran on "other": a reads it from each of its own families through b's ratios, averaged
    assert got["a"].factor("decode", "other") == pytest.approx(math.sqrt(1.1 * 1.2 * 0.88 * 1.2 / 0.9))
    assert not got["b"].families_borrowed


def test_a_max_model_len_past_the_context_window_is_refused_as_vllm_refuses_it():
    """The engineer's walk: --max-model-len 999999 for Llama-3.1-8B (context 131,072) gave 'GPUs needed: 2' and a
    launch command vLLM rejects at start-up; it is one sentence now, on the page and in the CLI."""
    import subprocess
    import sys

    from engine.calc.serving_memory import serving_memory
    from engine.calc.specs import gpu_spec, model_preset

    spec = model_preset("llama-3-8b")
    with pytest.raises(InvalidParameterError, match="past llama-3-8b's context window of 8,192 tokens"):
        serving_memory(spec, gpu_spec("h100-sxm"), dtype="bf16", max_model_len=8193)
    assert serving_memory(spec, gpu_spec("h100-sxm"), dtype="bf16", max_model_len=8192).max_model_len == 8192
    r = subprocess.run(
        [sys.executable, "-m", "engine", "estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm",
         "--engine", "vllm", "--max-model-len", "999999"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode != 0 and "context window of 8,192 tokens" in r.stderr + r.stdout
    assert "Traceback" not in r.stderr
