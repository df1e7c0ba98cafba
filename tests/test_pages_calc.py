"""AppTest for the Memory & cost and Roofline pages: smoke runs plus widget-driven checks of what is shown."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from tests.factories import synthetic_run

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from tests.factories import tables_in_order

ROOT = Path(__file__).resolve().parents[1]
CALC = str(ROOT / "pages" / "2_Memory_and_cost.py")
ROOF = str(ROOT / "pages" / "3_Roofline.py")
TIMEOUT = 60


@pytest.fixture(autouse=True)
def _empty_home(tmp_path, monkeypatch):
    """No run log and no calibration unless a test writes one."""
    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("INFERENCE_LAB_RUNS_DIR", str(tmp_path / "runs"))


def _run(path: str) -> AppTest:
    at = AppTest.from_file(path, default_timeout=TIMEOUT).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def _page_default_estimate():
    """The estimate the page answers with its defaults: GPT-Neo 2.7B on the T4, 8 users, 512 + 512 tokens, hf."""
    from engine.calc.report import Inputs, estimate
    from engine.calc.specs import gpu_spec, model_preset

    return estimate(
        model_preset("gpt-neo-2.7b"),
        gpu_spec("t4"),
        Inputs(batch=8, prompt_tokens=512, output_tokens=512, engine="hf"),
    )


def _assumptions(at: AppTest) -> str:
    """The text of the one Assumptions expander."""
    box = next(e for e in at.expander if e.label.startswith("Assumptions"))
    return " ".join(m.value for m in box.markdown)


@pytest.mark.parametrize("path", [CALC, ROOF], ids=["memory_and_cost", "roofline"])
def test_page_runs(path):
    _run(path)


def _bound(at):
    """The book's arithmetic: no engine (every roof reached) and the chapter's $0.35 per T4-hour."""
    at.selectbox(key="calc.engine").set_value("").run()
    at.number_input(key="calc.price.t4").set_value(0.35).run()
    return at


def test_default_answers_t4_gpt_neo_2_7b_8_users_1024_tokens():
    at = _run(CALC)
    # an estimate by default, its headline the time per output token at the load asked
    assert "Time per output token at 8 users, hf estimate" in [m.label for m in at.metric]
    assert any("AWS" in c.value for c in at.caption)  # the T4's published price, with its provider
    at = _bound(at)
    # 24, not the 23 of 16e9 decimal bytes: the driver reports 15,360 MiB for a T4
    assert "Fits" in at.success[0].value and _metric(at, "Max batch at 1,024 tokens") == "24"
    assert _metric(at, "Weights") == "5.30 GB"
    assert _metric(at, "KV cache of this load") == "2.68 GB"
    assert _metric(at, "Total with overhead") == "9.58 GB"
    assert _metric(at, "TPOT, physical bound") == "24.6 ms"
    assert _metric(at, "$ per million output tokens") == "$0.31"
    # the same hour over prompt and output tokens, for a provider's blended price (the engineer's walk)
    blended = next(c.value for c in at.caption if "per million tokens in and out" in c.value)
    assert blended.startswith("$0.") and "512 prompt + 512 output tokens" in blended
    reasoning = (
        at.markdown[0].value
        if "Weights" in at.markdown[0].value
        else next(m.value for m in at.markdown if "**Weights**" in m.value)
    )
    assert "2 × 32 layers × 20 KV heads × 128 head dim × 2 B = 327,680 B per token" in reasoning


def test_widgets_recompute_fit_and_gpus_needed():
    at = _run(CALC)
    at.number_input(key="calc.batch").set_value(64).run()
    assert not at.exception
    assert "Does not fit" in at.error[0].value
    at.number_input(key="calc.batch").set_value(8).run()
    at.selectbox(key="calc.preset").set_value("llama-2-13b").run()
    assert "Does not fit" in at.error[0].value
    # 26.0 GB weights + 6.7 GB KV, x1.2 = 39.3 GB: 3 T4s by memory, but 3 does not divide 40 heads
    assert _metric(at, "GPUs needed") == "4"
    at.number_input(key="calc.gpus").set_value(4).run()
    assert at.success and "Fits" in at.success[0].value


def test_precision_changes_weights():
    from engine.calc import format as fmt
    from engine.calc.memory import weights_bytes
    from engine.calc.specs import model_preset

    at = _run(CALC)
    at.selectbox(key="calc.dtype.gpu").set_value("int4").run()
    # int4 in groups of 128 with a bf16 scale and zero per group: 4.25 bits per quantized weight
    assert _metric(at, "Weights") == fmt.gb(weights_bytes(model_preset("gpt-neo-2.7b"), "int4", "int4", 128))
    at.number_input(key="calc.group.int4").set_value(32).run()
    assert _metric(at, "Weights") == fmt.gb(weights_bytes(model_preset("gpt-neo-2.7b"), "int4", "int4", 32))
    at.selectbox(key="calc.kv_dtype").set_value("int8").run()
    assert _metric(at, "KV cache of this load") == "1.34 GB"


def test_int4_weights_keep_a_16_bit_kv_cache():
    """int8 and int4 are weight-only; the KV cache stays 16-bit unless asked."""
    at = _run(CALC)
    assert _metric(at, "KV cache of this load") == "2.68 GB"
    for weights in ("int8", "int4", "Q4_0"):
        at.selectbox(key="calc.dtype.gpu").set_value(weights).run()
        assert _metric(at, "KV cache of this load") == "2.68 GB", weights
        assert weights.lower() in _assumptions(at).lower()  # the storage assumption is on the page


def test_this_machine_defaults_to_a_precision_a_cpu_runs(monkeypatch):
    """The "this machine" GPU defaulted to fp16, 13.7 minutes of prefill on a CPU."""
    from engine.calibration import machine
    from ui.common import cached_machine_measurement

    cpu = machine.MachineMeasurement(
        "m",
        "2026-11-30T00:00:00+00:00",
        "cpu",
        "this machine (CPU, measured)",
        20e9,
        20e9,
        {"fp32": 2e11, "bf16": 5e10},
        1024,
        64e9,
    )
    monkeypatch.setattr(machine, "measure", lambda *a, **k: cpu)  # the one measurement of the machine
    cached_machine_measurement.clear()
    at = _run(CALC)
    at.selectbox(key="calc.gpu").set_value("this-machine").run()
    assert not at.exception
    assert at.selectbox(key="calc.dtype.cpu").value == "fp32"
    cached_machine_measurement.clear()


def test_cost_is_priced_at_the_gpus_needed_when_it_does_not_fit():
    """At batch 64 on one T4 the cost cards priced one GPU for a load that needs more: now the times, the price
    and the tiles all speak of the GPUs it needs."""
    at = _run(CALC)
    at.number_input(key="calc.batch").set_value(64).run()
    assert "Does not fit" in at.error[0].value
    labels = [m.label for m in at.metric]
    assert "$ per million output tokens" not in labels
    priced = next(m for m in at.metric if m.label.startswith("$ per million output tokens at "))
    n = int(priced.label.split(" at ")[1].split()[0])
    assert f"GPUs needed: {n}." in at.error[0].value and n > 1 and _metric(at, "GPUs needed") == str(n)
    tpot = next(m for m in at.metric if m.label.startswith("Time per output token"))
    assert tpot.label.endswith(f"at the {n} GPUs it needs"), tpot.label


def test_past_the_head_count_says_tensor_parallel_stops():
    """At batch 4096 the page proposed 104 GPUs as "a count that divides the 20 heads"."""
    at = _run(CALC)
    at.number_input(key="calc.batch").set_value(4096).run()
    verdict = at.error[0].value
    assert "cannot split 20 heads over more than 20 GPUs" in verdict and "replicas" in verdict
    n = int(verdict.split("GPUs needed: ")[1].split(".")[0])
    tp = int(verdict.split("replicas of ")[1].split(" GPUs")[0])
    assert 20 % tp == 0 and n % tp == 0 and _metric(at, "GPUs needed") == str(n)


def test_breakdown_table_and_batch_curve_are_shown():
    at = _bound(_run(CALC))
    frame = at.dataframe[0].value
    assert list(frame["component"])[:3] == ["embedding", "attention", "MLP"]
    assert frame["parameters"].iloc[-1] == "2,651.3 M"  # in millions: the exact count is in the caption
    assert any("(2,651,307,520 in all)" in c.value for c in at.caption)
    assert any("fit limit" in str(c.proto.spec) for c in at.get("plotly_chart"))
    curve = next(m.value for m in at.markdown if "the decode step (a token" in m.value)
    assert "Past batch 24" in curve


def test_uploaded_moe_config_counts_total_and_active_on_the_meta_device():
    import json

    from tests.test_calc_families import MIXTRAL_8X7B

    at = _run(CALC)
    at.radio(key="calc.source").set_value("config.json").run()
    at.file_uploader(key="calc.upload").set_value(
        ("config.json", json.dumps(MIXTRAL_8X7B).encode(), "application/json")
    ).run()
    assert not at.exception
    assert "mistralai/Mixtral-8x7B-v0.1" in at.subheader[1].value
    assert any(
        "46,702,792,704 parameters (12,879,925,248 active per token), counted exactly from the model's own code"
        in c.value
        for c in at.caption
    )
    frame = at.dataframe[0].value
    assert "router" in list(frame["component"]) and "active per token" in list(frame["component"])
    assert "Does not fit" in at.error[0].value


def test_raw_numbers_with_bad_heads_say_what_to_do():
    at = _run(CALC)
    at.radio(key="calc.source").set_value("raw numbers").run()
    assert not at.exception and at.metric  # defaults are a valid GQA model
    at.number_input(key="calc.kv").set_value(5).run()
    assert any("KV heads must divide" in e.value for e in at.error)


def test_estimate_vs_measurement_shows_measured_runs(tmp_path):
    from engine.calc import model_preset
    from engine.calc.timing import Efficiency
    from engine.calibration import RunSample, build_calibration, machine_spec, predict, save_calibration
    from engine.runtime import runlog

    machine = machine_spec(50e9, {"fp32": 200e9, "bf16": 300e9}, memory_bytes=24e9)
    smol = model_preset("smollm2-135m")
    truth = {"fp32": Efficiency(0.2, 0.5, 3e-4), "bf16": Efficiency(0.2, 0.4, 3e-4)}
    samples = []
    for dt, eff in truth.items():
        ttft, tpot = predict(smol, RunSample(dt, 1, 40, 32, 0, 0), machine, eff)
        samples.append(RunSample(dt, 1, 40, 32, ttft, tpot))
    save_calibration(build_calibration(smol, samples, machine, model="smollm2-135m-instruct"))
    ttft, tpot = predict(
        model_preset("gpt-neo-125m"), RunSample("bf16", 1, 40, 32, 0, 0), machine, truth["bf16"]
    )
    runlog.record(
        synthetic_run(
            "gpt-neo-125m-random", "bf16", ttft, tpot, weights_bytes=250_397_184, params=125_198_592
        )
    )
    at = _run(CALC)
    label = "gpt-neo-125m-random bf16 b1 40+32 tok"
    shown = next(m for m in at.metric if m.label == label)
    assert shown.value == f"measured {tpot * 1e3:.3g} ms"
    assert "(1.00×)" in shown.delta  # calibrated prediction of the synthetic machine is exact
    assert at.dataframe, "the per-run table is shown"
    roof = _run(ROOF)
    assert any("Runs measured on this machine" in c.value for c in roof.caption)


def test_roofline_defaults_to_the_books_t4():
    at = _run(ROOF)
    text = " ".join(c.value for c in at.caption)
    assert "216.6" in text and "320 GB/s" in text and "203" in text
    diag = " ".join(m.value for m in at.markdown)
    assert "10 of 10 operators are memory-bound" in diag
    assert "ridge 216.6 ops/byte" in diag


def test_roofline_batch_slider_moves_decode_projections_toward_the_ridge():
    at = _run(ROOF)

    def proj_intensity(at: AppTest) -> float:
        """The highest intensity of decode's weight-reading operators, as the reading states it ("do 1.0 ops/byte",
        or a span "do 365.6–423.1 ops/byte")."""
        m = next(m.value for m in at.markdown if "weight-reading operators do " in m.value)
        span = m.split("weight-reading operators do ")[1].split(" ")[0]
        return float(span.split("–")[-1])

    before = proj_intensity(at)
    at.select_slider(key="roof.b").set_value(256).run()
    assert not at.exception
    after = proj_intensity(at)
    assert after > 100 * before
    assert math.isclose(before, 1.0, rel_tol=0.05)


def test_roofline_overlays_several_gpus_and_another_model():
    at = _run(ROOF)
    at.multiselect(key="roof.gpus").set_value(["t4", "t4-datasheet", "h100-sxm"]).run()
    at.selectbox(key="roof.preset").set_value("llama-3-8b").run()
    assert not at.exception
    assert any("llama-3-8b on T4" in h.value for h in at.subheader)


def test_hub_id_offline_shows_what_to_do(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    at = _run(CALC)
    at.radio(key="calc.source").set_value("hub id").run()
    at.text_input(key="calc.hub").set_value("no-such-owner/no-such-model").run()
    assert not at.exception
    assert any("give the config.json itself instead" in e.value and "--config" in e.value for e in at.error)


def test_raw_numbers_take_a_layer_layout_and_say_the_count_is_a_formula():
    from engine.calc.memory import count_params
    from engine.calc.specs import spec_from_numbers

    at = _run(CALC)
    at.radio(key="calc.source").set_value("raw numbers").run()
    at.selectbox(key="calc.arch").set_value("gpt_neox").run()
    assert not at.exception and not at.error
    want = count_params(
        spec_from_numbers(
            arch="gpt_neox",
            n_layer=32,
            hidden=4096,
            n_head=32,
            n_kv_head=8,
            intermediate=14336,
            vocab=32000,
            context_length=8192,
        )
    ).total
    assert any(f"{want:,} parameters" in c.value for c in at.caption)
    assert "Raw numbers: parameters from the formula with the gpt_neox layer layout" in _assumptions(at)


def test_tensor_parallel_share_is_shown_with_its_interconnect():
    at = _bound(_run(CALC))
    assert "Tensor-parallel share of prefill" not in [m.label for m in at.metric]
    at.number_input(key="calc.gpus").set_value(4).run()
    assert _metric(at, "Tensor-parallel share of prefill") == "57%"  # GPT-Neo 2.7B, 4 T4s over PCIe Gen3
    assert _metric(at, "Interconnect") == "PCIe Gen3 x16"
    assert "communication dominates" in _assumptions(at)


def test_a_serving_engine_sizes_the_cache_as_it_allocates_and_gives_the_launch_command():
    at = _run(CALC)
    at.selectbox(key="calc.gpu").set_value("a100-80gb").run()
    at.selectbox(key="calc.engine").set_value("vllm").run()
    assert not at.exception
    verdict = at.success[0].value
    assert "as vllm allocates memory" in verdict and "tokens at once" in verdict
    assert _metric(at, "KV cache vllm allocates").endswith(" tokens")
    codes = [c.value for c in at.code]
    assert any(c.startswith("vllm serve EleutherAI/gpt-neo-2.7B") for c in codes)
    assert any("sglang.launch_server" in c for c in codes)
    tpot = next(m for m in at.metric if m.label.startswith("Time per output token at 8 users, vllm estimate"))
    # the interval beside the central estimate (a tile's note is cut at its width: the bound has its own line)
    from engine.calc.efficiency import INTERVAL_LEVEL

    assert tpot.delta.startswith(f"{INTERVAL_LEVEL}: ")  # the interval's nominal level, as the fit states it
    assert any(c.value.startswith("Physical bounds (every roof reached): decode step ≥ ") for c in at.caption)


def test_the_price_follows_the_selected_gpu_with_its_source():
    """The T4's price stayed when an A100 was picked: each GPU starts from its own."""
    from engine.calc.prices import price_for

    at = _run(CALC)
    assert at.number_input(key="calc.price.t4").value == price_for("t4").usd_per_gpu_hour
    at.selectbox(key="calc.gpu").set_value("a100-80gb").run()
    assert at.number_input(key="calc.price.a100-80gb").value == price_for("a100-80gb").usd_per_gpu_hour
    assert price_for("a100-80gb").usd_per_gpu_hour != price_for("t4").usd_per_gpu_hour


def test_a_gpu_without_a_published_price_has_no_invented_cost(monkeypatch):
    """ "this machine" was priced at $1.00/h, a made-up figure: where no price is published the field starts empty
    and the answer has no cost per token until the user enters their own price, which is then used."""
    from engine.calc.prices import price_for
    from engine.calibration import machine
    from ui.common import cached_machine_measurement

    cpu = machine.MachineMeasurement(
        "m", "2026-11-30T00:00:00+00:00", "cpu", "this machine (CPU, measured)", 20e9, 20e9,
        {"fp32": 2e11, "bf16": 5e10}, 1024, 64e9,
    )  # fmt: skip
    monkeypatch.setattr(machine, "measure", lambda *a, **k: cpu)
    cached_machine_measurement.clear()
    try:
        assert price_for("this-machine") is None
        at = _run(CALC)
        at.selectbox(key="calc.gpu").set_value("this-machine").run()
        assert not at.exception
        assert at.number_input(key="calc.price.this-machine").value is None
        cost = next(m for m in at.metric if m.label.startswith("$ per million output tokens"))
        assert cost.value == "—" and "no price" in cost.delta
        assert "$1.00" not in " ".join(str(m.value) for m in at.metric)
        assert any("no cost per token until you enter yours" in c.value for c in at.caption)
        at.number_input(key="calc.price.this-machine").set_value(2.5).run()
        assert not at.exception
        hour = next(m for m in at.metric if m.label.startswith("$ per hour"))
        assert hour.value != "—" and any(c.value == "your price" for c in at.caption)
    finally:
        cached_machine_measurement.clear()


@pytest.mark.slow
def test_track_record_section_shows_targets_on_held_back_rows():
    at = _run(CALC)
    at.toggle(key="calc.tr").set_value(True).run(timeout=300)
    assert not at.exception
    # the held-back rows' three tables (the verdicts, the errors, the intervals' coverage and width), then every
    # row's three, then the rows: one table was wider than the page at 1280 px, its target and errors cut, and its
    # 'median width' header still was at two; the verdicts are words in cells that wrap (the target was cut)
    summary = at.table[-2].value
    errors, widths = (at.dataframe[k].value for k in (-5, -4))
    assert any(w.startswith("batch-1 decode tokens/s") for w in summary["what"])
    assert "worst |error|" in errors.columns and list(errors["what"]) == list(summary["what"])
    assert "median width" in widths.columns and list(widths["what"]) == list(summary["what"])
    # the verdict second, where it shows without scrolling (the engineer's walk missed the TTFT 'NO' at the end)
    assert list(summary.columns) == ["what", "target met", "target"]  # a 'NO' shows what it missed
    # each verdict with the rows it rests on, said as few under ten (an engineer read 'yes' on 3 rows as sure)
    assert all(re.fullmatch(r"(yes|NO), (only )?\d+ rows|no rows", v) for v in summary["target met"])
    assert any(v.startswith("yes, only ") for v in summary["target met"])
    rows = at.dataframe[-1].value
    assert len(rows) >= 60 and {"published", "predicted", "source", "quote"} <= set(rows.columns)
    assert not any("_" in m for m in rows["metric"])  # words, not ids like total_gpu_memory_gib
    # the rows' table shows ten columns, what answers 'how close', and scrolled sideways at 1280 px with all 18
    # (the engineer's walk); every column is a toggle away, and the CSV has them all
    from ui.trackrecord_view import NARROW_COLUMNS

    assert list(at.dataframe[-1].proto.column_order) == list(NARROW_COLUMNS)
    assert set(NARROW_COLUMNS) <= set(rows.columns) and len(rows.columns) > len(NARROW_COLUMNS)
    at.toggle(key="calc.trwide").set_value(True).run(timeout=300)
    assert list(at.dataframe[-1].proto.column_order) == []


# ---------------------------------------------------------------- one answer per plan, said plainly


def _qwen72b_bf16_vllm_on_a100s(n: int) -> AppTest:
    at = _run(CALC)
    at.selectbox(key="calc.preset").set_value("Qwen/Qwen2-72B").run()
    at.selectbox(key="calc.gpu").set_value("a100-80gb").run()
    # a bf16 checkpoint on a GPU with a bf16 peak starts in bf16 (as vLLM's dtype "auto" serves it), not fp16
    assert at.selectbox(key="calc.dtype.bf16").value == "bf16"
    at.selectbox(key="calc.engine").set_value("vllm").run()
    return at.number_input(key="calc.gpus").set_value(n).run()


def test_72b_on_two_a100s_with_vllm_reads_as_one_answer():
    """The issue: 'Fits ... 14,768 tokens', 'GPUs needed 4' priced at 4, 'The weights alone fill the GPU' and a
    launch command for 2, on one page."""
    at = _qwen72b_bf16_vllm_on_a100s(2)
    assert not at.exception
    assert at.success and "Fits" in at.success[0].value and not at.error
    assert _metric(at, "GPUs needed") == "2"
    assert "$ per million output tokens" in [m.label for m in at.metric]  # priced at the 2 asked
    assert not any("weights alone" in i.value for i in at.info)
    command = next(c.value for c in at.code if c.value.startswith("vllm serve"))
    assert command.startswith("vllm serve Qwen/Qwen2-72B ") and "--tensor-parallel-size 2" in command
    tokens = _metric(at, "KV cache vllm allocates")
    assert tokens in at.success[0].value  # the verdict and the tile give the cache one size
    assert f"{_metric(at, 'Max batch at 1,024 tokens')} sequences" in at.success[0].value


def test_a_plan_that_needs_more_gpus_says_which_gpus_each_tile_is_for():
    """The walkthrough: a 70B model on 1 x H100 showed 'at the 2 GPUs it needs' speed and price tiles beside
    unlabelled 'KV cache vllm allocates 0 tokens' and 'Max batch 0', the figures of the 1 GPU asked."""
    at = _qwen72b_bf16_vllm_on_a100s(1)
    assert not at.exception and at.error and "Does not fit" in at.error[0].value
    labels = [m.label for m in at.metric]
    assert "KV cache vllm allocates on the 1 GPU asked" in labels
    assert "Max batch at 1,024 tokens on the 1 GPU asked" in labels
    assert any(lbl.startswith("Max tokens at batch") and lbl.endswith("on the 1 GPU asked") for lbl in labels)
    assert any("GPUs it needs" in lbl for lbl in labels if lbl.startswith("Time per output token"))
    at.number_input(key="calc.gpus").set_value(2).run()  # it fits: no qualifier
    assert "KV cache vllm allocates" in [m.label for m in at.metric]


def test_sglang_memory_fraction_follows_the_engines_rule_for_the_gpu_count():
    """The page sent 0.88 whatever the count; SGLang keeps 0.87 on 2 GPUs, 0.85 on 4."""
    at = _run(CALC)
    at.selectbox(key="calc.gpu").set_value("a100-80gb").run()
    at.selectbox(key="calc.engine").set_value("sglang").run()
    for n, fraction in ((2, "0.87"), (4, "0.85")):
        at.number_input(key="calc.gpus").set_value(n).run()
        command = next(c.value for c in at.code if "sglang.launch_server" in c.value)
        assert f"--mem-fraction-static {fraction}" in command, (n, command)


def test_the_header_names_the_model_and_the_command_takes_the_model_id_field():
    import json

    from engine.calc import published

    at = _run(CALC)
    at.selectbox(key="calc.preset").set_value("meta-llama/Llama-3.1-8B-Instruct").run()
    assert at.subheader[1].value.startswith("meta-llama/Llama-3.1-8B-Instruct · ")
    cfg = dict(published.configs()["meta-llama/Llama-3.1-8B-Instruct"])
    cfg.pop("_name_or_path")
    at.radio(key="calc.source").set_value("config.json").run()
    at.text_area(key="calc.paste").set_value(json.dumps(cfg)).run()
    at.selectbox(key="calc.engine").set_value("vllm").run()
    assert not at.exception
    assert at.subheader[1].value.startswith("your config.json (LlamaForCausalLM")  # not the class alone
    assert any("<model-id>" in w.value for w in at.warning)  # the command's placeholder is said
    at.text_input(key="calc.model_id.").set_value("acme/llama-ft").run()
    assert any(c.value.startswith("vllm serve acme/llama-ft ") for c in at.code)
    assert at.subheader[1].value.startswith("acme/llama-ft · ")


def test_assumptions_are_one_expander_of_plain_sentences_and_no_file_or_module_names():
    import re

    at = _run(CALC)
    at.selectbox(key="calc.gpu").set_value("a100-80gb").run()
    at.selectbox(key="calc.engine").set_value("vllm").run()
    at.number_input(key="calc.gpus").set_value(2).run()
    assert not at.warning  # no yellow box above the answer: the assumptions live in one expander
    text = _assumptions(at)
    assert "published set" not in text and "fit over every engine" not in text
    shown = [
        *(m.value for m in at.markdown),
        *(c.value for c in at.caption),
        *(x.value for x in (*at.success, *at.error, *at.info)),
        *(m.label for m in at.metric),
    ]
    internal = re.compile(
        r"\b(engine|ui|pages|tests|bench)/[\w/]+\.(py|toml)\b|\bengine\.[a-z_]+\.[a-z_]+|\.py\b"
    )
    assert not [s for s in shown if internal.search(s)]
    gpus = next(c.value for c in at.caption if c.value.startswith("vLLM keeps") or "GPUs needed: " in c.value)
    assert "GPUs needed: " in gpus and "=" not in gpus  # one sentence with the numbers, no formula dump


def test_the_first_token_tile_says_whose_first_token_it_is():
    """The tile showed the whole batch's prefill as 'TTFT': with an engine's estimate it is one request's first
    token at the load asked, in its parts, and the batch's prefill is its own figure; the bound says the batch
    arrives together."""
    from engine.calc import format as fmt

    at = _run(CALC)
    labels = [m.label for m in at.metric]
    assert "TTFT, one request, hf estimate" in labels
    assert not [label for label in labels if label == "TTFT, hf estimate"]
    tile = next(m for m in at.metric if m.label == "TTFT, one request, hf estimate")
    est = _page_default_estimate()
    sp = est.speed
    assert sp is not None and tile.value == fmt.seconds(sp.ttft_s.central)
    assert sp.prefill_batch_s.central > sp.ttft_parts["prefill"]  # 8 prompts take longer than one
    line = next(c.value for c in at.caption if c.value.startswith("First token of one request = "))
    assert fmt.seconds(sp.ttft_parts["prefill"]) in line and fmt.seconds(sp.prefill_batch_s.central) in line
    assert "If all 8 send at the same moment" in line
    bound = _bound(at)
    assert "TTFT, all 8 arrive together, physical bound" in [m.label for m in bound.metric]


def _curve(at):
    import json as _json

    fig = None
    for chart in at.get("plotly_chart"):
        spec = _json.loads(chart.proto.spec)
        if any(t.get("name", "").startswith("decode step (ms)") for t in spec["data"]):
            fig = spec
    assert fig is not None, "the cost curve is drawn"
    hollow = sorted({x for t in fig["data"] if t.get("name", "").endswith("does not fit") for x in t["x"]})
    solid = sorted({x for t in fig["data"] if t.get("name", "").endswith(": fits") for x in t["x"]})
    sentence = next(m.value for m in at.markdown if "the decode step (a token" in m.value)
    return hollow, solid, sentence


def test_the_cost_chart_draws_hollow_points_where_its_sentence_says_and_flips_with_the_numbers():
    """The sentence promised hollow points past the fit limit and the chart drew them solid, to 4096."""
    at = _bound(_run(CALC))
    hollow, solid, sentence = _curve(at)
    assert hollow == [32, 64] and max(solid) == 16
    assert "Past batch 24" in sentence and "(batch 32 and up)" in sentence
    at.selectbox(key="calc.gpu").set_value("a100-80gb").run()  # more memory: the limit moves, and both follow
    at.selectbox(key="calc.engine").set_value("vllm").run()
    hollow2, solid2, sentence2 = _curve(at)
    limit = int(_metric(at, "Max batch at 1,024 tokens").replace(",", ""))
    assert all(b <= limit for b in solid2) and all(b > limit for b in hollow2)
    assert (f"Past batch {limit:,}" in sentence2) == bool(hollow2)
    assert max(hollow2 or solid2) <= 4 * max(limit, 1)  # the axis ends where the sentence's points do


def test_the_calibration_is_read_once_per_render(monkeypatch):
    from engine.calc import model_preset
    from engine.calc.timing import Efficiency
    from engine.calibration import (
        RunSample,
        build_calibration,
        machine_spec,
        predict,
        save_calibration,
        store,
    )

    machine = machine_spec(50e9, {"fp32": 200e9, "bf16": 300e9}, memory_bytes=24e9)
    smol = model_preset("smollm2-135m")
    samples = [
        RunSample(
            "fp32",
            1,
            40,
            32,
            *predict(smol, RunSample("fp32", 1, 40, 32, 0, 0), machine, Efficiency(0.2, 0.5, 3e-4)),
        )
    ]
    save_calibration(build_calibration(smol, samples, machine, model="smollm2-135m-instruct"))
    reads = []
    real = store.calibration_path
    monkeypatch.setattr(store, "calibration_path", lambda *a: reads.append(1) or real(*a))
    at = AppTest.from_file(CALC, default_timeout=TIMEOUT)
    at.run()
    at.selectbox(key="calc.gpu").set_value("this-machine").run()
    at.radio(key="calc.mode").set_value("calibrated").run()
    assert not at.exception, [e.value for e in at.exception]
    reads.clear()
    at.run()  # one render in calibrated mode on this machine
    assert len(reads) == 1, f"the calibration was read {len(reads)} times in one render"
    assert any(m.label.startswith("TPOT, calibrated") for m in at.metric)


@pytest.mark.parametrize(
    ("key", "value", "words"), [("calc.prompt", -5, "Prompt tokens"), ("calc.batch", 0, "Batch")]
)
def test_an_out_of_range_number_is_refused_with_its_range_and_nothing_runs_with_the_old_value(
    key, value, words
):
    """-5 prompt tokens only turned the field red: the page kept 512 and showed its answer for it."""
    at = _run(CALC)
    assert any(m.label == "GPUs needed" for m in at.metric)
    at.number_input(key=key).set_value(value).run()
    assert not at.exception
    said = [e.value for e in at.error if words in e.value]
    assert len(said) == 1 and "must be" in said[0] and "nothing runs with it" in said[0], said
    assert not any(m.label == "GPUs needed" for m in at.metric)  # no answer for the old value


def test_calibrated_mode_without_a_calibration_offers_the_button_not_a_command(monkeypatch, tmp_path):
    """The walkthrough read "calibrate this machine (python -m engine calibrate)" three times on this page: a
    command no browser user can run. The page now offers the calibration itself, under the clock, and uses it."""
    from engine.calc import model_preset
    from engine.calc.timing import Efficiency
    from engine.calibration import (
        RunSample,
        build,
        build_calibration,
        machine_spec,
        predict,
        save_calibration,
    )

    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path))
    calls = []

    def calibrate(*a, **k):  # the real one times the bundled model for minutes; this stores what it would
        machine = machine_spec(50e9, {"fp32": 200e9, "bf16": 300e9}, memory_bytes=24e9)
        smol = model_preset("smollm2-135m")
        run = RunSample("fp32", 1, 40, 32, 0, 0)
        samples = [RunSample("fp32", 1, 40, 32, *predict(smol, run, machine, Efficiency(0.2, 0.5, 3e-4)))]
        cal = build_calibration(smol, samples, machine, model="smollm2-135m-instruct")
        save_calibration(cal)
        calls.append(1)
        return cal

    monkeypatch.setattr(build, "calibrate", calibrate)
    at = AppTest.from_file(CALC, default_timeout=TIMEOUT).run()
    at.selectbox(key="calc.gpu").set_value("this-machine").run()
    at.radio(key="calc.mode").set_value("calibrated").run()
    assert not at.exception, [e.value for e in at.exception]
    assert "python -m engine" not in "\n".join(str(w.value) for w in [*at.warning, *at.caption, *at.markdown])
    button = next(b for b in at.button if b.key == "calc.calibrate")
    assert button.label == "Calibrate this machine"
    button.click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert calls == [1]
    assert any(m.label.startswith("TPOT, calibrated") for m in at.metric)


def test_a_split_slower_than_one_gpu_says_so_with_its_all_reduces():
    """Llama-3-8B on 2 x H100 with vLLM at 8 users: the TPOT tile rose from 11 ms on one GPU to 16 ms on two with
    no word of why. The plan's decode step is now set beside one GPU's: half the weights read, 64 all-reduces at
    the latency fitted on vLLM's multi-GPU runs; without an engine (the physical bound) the split is faster."""
    at = _run(CALC)
    at.selectbox(key="calc.gpu").set_value("h100-sxm").run()
    at.selectbox(key="calc.engine").set_value("vllm").run()
    at.number_input(key="calc.gpus").set_value(2).run()
    assert not at.exception
    said = " ".join(m.value for m in at.markdown)
    assert "On 2 GPUs a decode step" in said and "all-reduces (two per layer)" in said
    from engine.calc.report import Inputs, estimate, split_against_one
    from engine.calc.specs import gpu_spec, model_preset

    spec, h100 = model_preset("llama-3-8b"), gpu_spec("h100-sxm")
    for engine, slower in (("vllm", True), (None, False)):
        est = estimate(spec, h100, Inputs(dtype="bf16", batch=8, n_gpus=2, engine=engine))
        split = split_against_one(est, spec, h100)
        assert split is not None and split.gpus == 2 and split.allreduces == 2 * spec.n_layer
        assert math.isclose(split.memory_s * 2, split.one_gpu_memory_s, rel_tol=0.05)
        assert (split.step_s > split.one_gpu_step_s) is slower
        from ui.calc_view import split_sentence

        assert ("slower than on one" in split_sentence(split, est)) is slower
    # a model that does not fit on one GPU has no one-GPU step to compare with
    from engine.calc import published
    from engine.calc.hf_config import spec_from_hf_config

    big = spec_from_hf_config(published.configs()["Qwen/Qwen2.5-72B"], name="Qwen/Qwen2.5-72B")
    est = estimate(big, h100, Inputs(dtype="bf16", batch=1, n_gpus=2, engine="vllm"))
    assert est.fits and split_against_one(est, big, h100) is None


def test_the_model_box_names_models_without_their_organisation():
    """'meta-llama/Llama-3.1-70B-Instru': the whole hub id was cut in the Inputs column's select at 1280 px. The
    box shows the name (the longest, DeepSeek-R1-Distill-Llama-70B, fits), the model id field keeps the id."""
    at = _run(CALC)
    box = at.selectbox(key="calc.preset")
    assert "Llama-3.1-70B-Instruct" in box.options and not any("/" in o for o in box.options)
    assert max(len(o) for o in box.options) <= 29
    box.set_value("meta-llama/Llama-3.1-70B-Instruct").run()
    field = next(t for t in at.text_input if t.label == "Model id for the launch command")
    assert field.value == "meta-llama/Llama-3.1-70B-Instruct"


def test_gpus_needed_below_the_count_asked_says_the_price_is_for_the_count_asked():
    """Llama-3-8B on 2 x H100: the tile read 'GPUs needed 1 / one GPU' beside '$ per hour $6.98', the price of 2."""
    at = _run(CALC)
    at.selectbox(key="calc.preset").set_value("llama-3-8b").run()
    at.selectbox(key="calc.gpu").set_value("h100-sxm").run()
    at.selectbox(key="calc.engine").set_value("vllm").run()
    at.number_input(key="calc.gpus").set_value(2).run()
    tile = next(m for m in at.metric if m.label == "GPUs needed")
    assert tile.value == "1" and "priced at the 2 asked" in str(tile.proto.delta)
    at.number_input(key="calc.gpus").set_value(1).run()
    tile = next(m for m in at.metric if m.label == "GPUs needed")
    assert "priced at" not in str(tile.proto.delta)


def test_an_engine_without_a_server_says_why_there_is_no_launch_command():
    """With transformers the launch box was simply absent while the model id 'for the launch command' stayed."""
    at = AppTest.from_file(CALC, default_timeout=TIMEOUT).run()
    captions = " ".join(c.value for c in at.caption)
    assert "No launch command for this engine" in captions and not at.code
    at.selectbox(key="calc.engine").set_value("vllm").run()
    assert "No launch command" not in " ".join(c.value for c in at.caption)
    assert any(c.value.startswith("vllm serve") for c in at.code)


def test_the_memory_bar_and_cost_curve_of_a_plan_that_does_not_fit_the_gpus_asked():
    """The engineer's walk, a 70B asked on one H100: the bar stopped at the GPU's 85 GB with the weights at 141 GB,
    and the cost curve drew one GPU's batches 1 and 2 under tiles timed 'at the 4 GPUs it needs'."""
    from engine.calc import published
    from engine.calc.hf_config import spec_from_hf_config
    from engine.calc.report import Inputs, estimate
    from engine.calc.specs import gpu_spec
    from ui.calc_view import swept_gpus
    from ui.plots_calc import serving_bar

    name = "meta-llama/Llama-3.3-70B-Instruct"
    spec = spec_from_hf_config(published.configs()[name], name=name)
    est = estimate(spec, gpu_spec("h100-sxm"), Inputs(dtype="bf16", batch=50, engine="vllm"))
    assert not est.fits and swept_gpus(est) == est.fit.layout.tensor_parallel > 1
    fig = serving_bar(est.serving)
    assert fig.layout.xaxis.range[1] * 1e9 >= est.serving.weights_bytes  # the bar is drawn whole
    assert any(
        s.x0 == est.serving.total_bytes / 1e9 for s in fig.layout.shapes
    )  # and the GPU's end is marked
    fits = estimate(spec, gpu_spec("h100-sxm"), Inputs(dtype="bf16", batch=8, n_gpus=8, engine="vllm"))
    assert swept_gpus(fits) == 8  # a load that fits is drawn on the GPUs asked


def test_the_request_time_tile_agrees_with_the_first_token_and_tpot_tiles():
    """The engineer read 'Generation time 6.17 s' beside TTFT 109 ms and TPOT 15.2 ms (109 ms + 255 x 15.2 ms is 3.99
    s) with the help 'TTFT + (output - 1) x TPOT': at a steady load each round also carries the other users'
    prompts. The tile says so and gives the time per token a user sees at that load."""
    from engine.calc import format as fmt

    at = _run(CALC)
    tile = next(m for m in at.metric if m.label == "Time per request at this load")
    est = _page_default_estimate()
    sp = est.speed
    assert sp is not None and tile.value == fmt.seconds(est.timing.generation_s)
    seen = (est.timing.generation_s - sp.ttft_s.central) / 511
    assert seen > sp.tpot_s.central and fmt.seconds(seen) in tile.delta
    assert "TTFT + (output - 1) x TPOT" not in (tile.help or "")
    assert "Time per request" in [
        m.label for m in _bound(at).metric
    ]  # the bound: TTFT + (O - 1) x TPOT holds


def _after(at: AppTest, key: str):
    """The element drawn right after the widget `key`, in the same block (None: it is the block's last)."""

    def walk(node):
        kids = list(getattr(node, "children", {}).values())
        for i, kid in enumerate(kids):
            if getattr(kid, "key", None) == key:
                return kids[i + 1] if i + 1 < len(kids) else None
            found = walk(kid)
            if found is not None:
                return found
        return None

    return walk(at.main)


def test_a_gpu_count_the_engine_refuses_is_said_under_its_field():
    """GPUs = 1000 was refused at the top of the answer column, then at the top of the inputs column, away from the
    field the user had just typed in. It is said under the GPUs field now, as a number out of range is, and nothing
    runs with the old count."""
    at = _run(CALC)
    assert any(m.label == "GPUs needed" for m in at.metric)
    at.number_input(key="calc.gpus").set_value(1000).run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "1000 GPUs would run as" in errors[0].replace(",", "")
    under = _after(at, "calc.gpus")
    assert under is not None and under.type == "error" and under.value == errors[0]
    assert errors[0].endswith("nothing runs with it until it is changed.")
    assert not any(m.label == "GPUs needed" for m in at.metric)  # no answer for the old count
    assert any(i.value.startswith("Nothing to answer yet: 1,000 GPUs would run as") for i in at.info)
    at.number_input(key="calc.gpus").set_value(2).run()
    assert not at.error and any(m.label == "GPUs needed" for m in at.metric)


def test_the_pages_gpu_memory_utilization_takes_the_command_lines_bounds():
    """The page refused 0.03 (its own floor was 0.05) where `estimate --gpu-memory-utilization 0.03` runs."""
    from engine.calc.report import Inputs

    at = _run(CALC)
    at.selectbox(key="calc.engine").set_value("vllm").run()
    box = next(n for n in at.number_input if n.key.startswith("calc.util.vllm"))
    lo = Inputs.bounds("gpu_memory_utilization")[0]
    assert f"from {lo:g} to 1" in (box.help or "")
    box.set_value(0.03).run()
    assert not at.exception and not [e.value for e in at.error if "must be" in e.value]
    assert "keeps 3% of the" in " ".join(e.value for e in at.error)  # the answer for 0.03: too little


def test_the_report_carries_the_answer_tiles_and_the_launch_command():
    """The engineer's downloaded report had the sentences and charts but not the tiles (GPUs needed, TTFT, TPOT,
    price) nor the command to paste."""
    from engine.calc.report import Inputs
    from engine.calc.specs import gpu_spec, model_preset
    from ui import export
    from ui.calc_view import calc_answer, export_parts
    from ui.calc_widgets import CalcRequest

    spec = model_preset("llama-3-8b")
    inputs = Inputs(
        batch=16,
        prompt_tokens=1024,
        output_tokens=256,
        engine="vllm",
        model_id="meta-llama/Meta-Llama-3-8B",
        usd_per_gpu_hour=3.0,
    )
    answer = calc_answer(CalcRequest(spec, gpu_spec("h100-sxm"), inputs, None, False))
    page = export.build_html("Memory and cost", export_parts(answer))
    est = answer.est
    assert est.launch is not None and est.speed is not None
    for figure in (
        "GPUs needed",
        "TTFT, one request",
        "Time per output token at 16 users",
        "Decode step alone",
        "$ per hour",
        "Throughput",
    ):
        assert f"<td>{figure}</td>" in page
    assert "vllm serve meta-llama/Meta-Llama-3-8B" in page


def test_a_model_picked_comes_back_after_a_look_at_another_way_of_giving_it():
    """The engineer's walk: picking a preset, looking at 'raw numbers' and coming back reset the preset (and the raw
    numbers when going the other way): Streamlit forgets a widget a run does not draw."""
    at = _run(CALC)
    at.selectbox(key="calc.preset").set_value("meta-llama/Llama-3.1-8B-Instruct").run()
    at.radio(key="calc.source").set_value("raw numbers").run()
    at.number_input(key="calc.L").set_value(48).run()
    at.radio(key="calc.source").set_value("preset").run()
    assert not at.exception
    assert at.selectbox(key="calc.preset").value == "meta-llama/Llama-3.1-8B-Instruct"
    at.radio(key="calc.source").set_value("raw numbers").run()
    assert at.number_input(key="calc.L").value == 48


def test_the_measured_shapes_table_fits_the_page_without_losing_a_column():
    """At 1280 px the table of runs measured here scrolled sideways (eleven columns, 1,281 px in an 818 px column);
    it is now two tables of at most six columns, each led by the shape, whose name carries the prompt and output
    lengths that had columns of their own: the TPOT against the estimates first, then the runs behind it."""
    from engine.runtime import runlog

    runlog.record(synthetic_run("gpt-neo-125m-random", "bf16", 0.05, 0.02))
    at = _run(CALC)
    tables = [df.value for df in tables_in_order(at) if "shape" in df.value.columns]
    assert len(tables) == 2 and all(t.columns[0] == "shape" and len(t.columns) <= 6 for t in tables)
    assert list(tables[0].columns[1:3]) == ["measured", "estimate"]
    assert {c for t in tables for c in t.columns} == {
        "shape",
        "measured",
        "estimate",
        "interval",
        "roofs' bound",
        "comparable",
        "runs",
        "from",
        "newest",
    }
    assert list(tables[0]["shape"]) == ["gpt-neo-125m-random bf16 b1 40+32 tok"]
    assert list(tables[0]["measured"]) == ["20.00"]


def test_a_max_model_len_shorter_than_one_request_is_refused_on_the_page_and_the_command_line(capsys):
    """The engineer's walk: --max-model-len 1000 with 2,048 + 256-token requests read 'Fits ... 195 sequences of
    2,304 tokens' and gave a command whose server would refuse every request."""
    from engine.cli import main

    at = _run(CALC)
    at.selectbox(key="calc.engine").set_value("vllm").run()
    at.number_input(key="calc.mml").set_value(1000).run()
    assert not at.exception
    said = [e.value for e in at.error if "shorter than one request" in e.value]
    assert len(said) == 1 and "1,024" in said[0]
    assert not any(m.label == "GPUs needed" for m in at.metric)
    code = main(["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--prompt-tokens",
                 "2048", "--output-tokens", "256", "--max-model-len", "1000", "--json"])  # fmt: skip
    assert code == 2 and "shorter than one request" in json.loads(capsys.readouterr().out)["error"]


def test_the_time_per_token_a_user_sees_at_the_load_is_the_headline_and_the_decode_step_is_labelled(capsys):
    """The engineer's walks: the big tile said 'TPOT, decode step' 15.4 ms while what each of 50 users sees is 24 ms,
    said only in small grey text (and before that, nowhere; the command line's text never said it). The headline
    tile is now the time per output token at the load asked, with its interval; the decode step alone is a labelled
    figure under the tiles; every sentence that quotes them gives the same numbers."""
    from dataclasses import replace

    from engine.calc import format as fmt
    from engine.calc.efficiency import INTERVAL_LEVEL
    from engine.calc.report import estimate
    from engine.calc.specs import gpu_spec, model_preset
    from engine.cli import main

    at = _run(CALC)
    at.number_input(key="calc.batch").set_value(50).run()
    assert not at.exception
    base = _page_default_estimate()
    est = estimate(model_preset("gpt-neo-2.7b"), gpu_spec("t4"), replace(base.inputs, batch=50))
    sp = est.speed
    assert sp is not None and est.tpot_at_load_s > sp.tpot_s.central
    tile = next(m for m in at.metric if m.label.startswith("Time per output token at 50 users, hf estimate"))
    assert tile.value == fmt.seconds(est.tpot_at_load_s)
    # with its interval (the second walk: only the decode step had one), the throughput's read as a time
    lo, hi = est.tpot_at_load_interval
    rate = sp.output_tokens_per_s
    assert lo < est.tpot_at_load_s < hi and hi / lo == pytest.approx(rate.high / rate.low)
    assert tile.delta == f"{INTERVAL_LEVEL}: {fmt.seconds(lo)}–{fmt.seconds(hi)}"
    assert not any(m.label.startswith("TPOT") for m in at.metric)  # one headline, not two figures called TPOT
    step = next(c.value for c in at.caption if c.value.startswith("Decode step alone: "))
    assert step.startswith(
        f"Decode step alone: {fmt.seconds(sp.tpot_s.central)} ({INTERVAL_LEVEL}: {fmt.seconds(sp.tpot_s.low)}–"
    )
    assert f"The time per output token above ({fmt.seconds(est.tpot_at_load_s)})" in step
    # the request-time tile and every help text say the same two numbers, and none calls the step 'the TPOT tile'
    request = next(m for m in at.metric if m.label.startswith("Time per request at this load"))
    assert fmt.seconds(est.tpot_at_load_s) in request.delta
    assert fmt.seconds(sp.tpot_s.central) in (request.help or "")
    words = [c.value for c in at.caption] + [m.value for m in at.markdown] + [m.help or "" for m in at.metric]
    assert not any("TPOT tile" in w for w in words)
    argv = ["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--batch", "50"]
    assert main(argv) == 0
    assert "at this load" in capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    low, high = json.loads(capsys.readouterr().out)["tpot_at_load_interval_s"]
    assert low < high


def test_the_paged_sentence_says_its_cache_is_every_gpu_of_the_replica():
    """The engineer's walk: 'In the 160.27 GB vllm gives the cache' beside a tile of 40.07 GB per GPU, unsaid that
    the first is four GPUs' worth."""
    from engine.calc import format as fmt
    from engine.calc.report import Inputs, estimate
    from engine.calc.specs import gpu_spec, model_preset

    at = _run(CALC)
    at.selectbox(key="calc.preset").set_value("llama-3-8b").run()
    at.selectbox(key="calc.engine").set_value("vllm").run()
    at.number_input(key="calc.gpus").set_value(2).run()
    est = estimate(model_preset("llama-3-8b"), gpu_spec("t4"), Inputs(n_gpus=2, engine="vllm"))
    assert est.paged is not None
    text = " ".join(m.value for m in at.markdown)
    assert f"({fmt.gb(est.paged.kv_budget_bytes / 2)} per GPU x 2 GPUs)" in text


def test_the_launch_command_shows_one_flag_a_line_and_pastes_as_the_one_line_command():
    """The engineer's walk: the wrapped code block broke the command inside a flag ('--max-' / 'model-len')."""
    from ui.widgets import shell_lines

    one = "vllm serve acme/m --max-model-len 2304 --gpu-memory-utilization 0.9 --dtype float16"
    shown = shell_lines(one)
    assert shown.splitlines()[1:] == [
        "  --max-model-len 2304 \\",
        "  --gpu-memory-utilization 0.9 \\",
        "  --dtype float16",
    ]
    assert shown.replace(" \\\n ", "") == one  # the shell reads the continued lines as the one command
    at = _run(CALC)
    at.selectbox(key="calc.engine").set_value("vllm").run()
    code = next(c.value for c in at.code if c.value.startswith("vllm serve"))
    assert all(line.lstrip().startswith("--") for line in code.splitlines()[1:])


def test_an_emptied_number_box_is_said_and_never_silently_becomes_the_default():
    """The engineer's walk: letters typed into Batch (50) and Enter gave 8, the default, with every figure redone
    for 8 users and no word: the browser empties a number box that gets letters, and Streamlit put the box's
    starting value back."""
    at = _run(CALC)
    at.number_input(key="calc.batch").set_value(50).run()
    assert at.number_input(key="calc.batch").value == 50
    at.number_input(key="calc.batch").set_value(None).run()
    assert not at.exception
    said = [e.value for e in at.error if "is empty" in e.value]
    assert len(said) == 1 and "Batch (concurrent users) is empty" in said[0] and "nothing runs" in said[0]
    assert not any(m.label == "GPUs needed" for m in at.metric)  # no answer for a value nobody gave
    at.number_input(key="calc.batch").set_value(50).run()
    assert any(m.label == "GPUs needed" for m in at.metric) and not [
        e for e in at.error if "is empty" in e.value
    ]


def test_one_slow_shape_no_longer_flattens_the_measured_chart_and_is_named_when_not_compared():
    """The engineer's walk: one shape measured at 357 ms (no record of the machine's load) beside shapes of 60 to
    130 ms, on a linear axis, left the others' bars unreadable. The chart is on a log axis, says so, draws a shape
    that is not compared grey and names it, and shows the calibrated bar's interval."""
    from ui.calc_view import chart_note
    from ui.plots_calc import comparison_chart

    rows = [
        {"label": "slow", "measured": 0.357, "datasheet": 0.015, "calibrated": 0.065, "interval": (0.047, 0.25),
         "comparable": False},
        {"label": "quiet", "measured": 0.064, "datasheet": 0.015, "calibrated": 0.065, "interval": (0.047, 0.25),
         "comparable": True},
    ]  # fmt: skip
    fig = comparison_chart(rows)
    assert fig.layout.yaxis.type == "log"
    grey = next(t for t in fig.data if t.name == "measured, not compared")
    assert list(grey.y) == [357.0, None]
    calibrated = next(t for t in fig.data if t.name.startswith("predicted (calibrated)"))
    assert list(calibrated.error_y.array) == pytest.approx([185.0, 185.0])
    note = chart_note(rows)
    assert (
        note.startswith("Log scale: the bars span 24×") and "not compared" in note and note.endswith("slow.")
    )
    rows[0]["comparable"] = True
    assert "grey" not in chart_note(rows)


def _on_this_cpu(monkeypatch) -> AppTest:
    """The page with this machine picked, measured as a CPU (no fp16 peak)."""
    from engine.calibration import machine
    from ui.common import cached_machine_measurement

    cpu = machine.MachineMeasurement(
        "m",
        "2026-11-30T00:00:00+00:00",
        "cpu",
        "this machine (measured)",
        20e9,
        20e9,
        {"fp32": 2e11, "bf16": 5e10},
        1024,
        64e9,
    )  # fmt: skip  (the name older measurements stored)
    monkeypatch.setattr(machine, "measure", lambda *a, **k: cpu)
    cached_machine_measurement.clear()
    at = _run(CALC)
    at.selectbox(key="calc.gpu").set_value("this-machine").run()
    assert not at.exception
    return at


def test_this_machines_cpu_is_never_called_a_gpu(monkeypatch):
    """The engineer's walk: with this machine picked the page read '1 x this machine' GPUs, 'GPU memory', 'per GPU'
    and a 'GPUs needed' tile of 1, for a CPU. The CPU is named as one, and the GPU count gives way to its RAM."""
    from ui.common import cached_machine_measurement

    at = _on_this_cpu(monkeypatch)
    head = next(s.value for s in at.subheader if "users ×" in s.value)
    assert "this machine's CPU (measured)" in head and "1 ×" not in head
    assert not any(m.label == "GPUs needed" for m in at.metric)
    assert _metric(at, "This machine's memory") == "64.00 GB"
    gpus = at.number_input(key="calc.gpus")
    assert gpus.disabled and "this machine's CPU" in gpus.label
    bar = at.get("plotly_chart")[0].proto.spec
    assert "this machine's RAM 64.00 GB" in bar and "GPU memory" not in bar and "per GPU" not in bar
    assert any("On this machine's CPU (measured), batch 1" in m.value for m in at.markdown)
    cached_machine_measurement.clear()


def test_picking_this_machines_cpu_says_why_the_precision_became_fp32(monkeypatch):
    """The engineer's walk: picking this machine changed the weights from fp16 to fp32 under the user, unsaid."""
    from ui.common import cached_machine_measurement

    at = _on_this_cpu(monkeypatch)
    assert at.selectbox(key="calc.dtype.cpu").value == "fp32"
    [note] = [c.value for c in at.caption if c.value.startswith("This machine's CPU runs fp32")]
    assert "switched to fp32 when it was picked (its bf16 matmul measured at 1/4 of its fp32 rate)" in note
    cached_machine_measurement.clear()
    at.selectbox(key="calc.gpu").set_value("t4").run()
    assert not any(c.value.startswith("This machine's CPU runs fp32") for c in at.caption)


def _catalogue_tags() -> set[str]:
    """The short source names engine/data/gpus.toml's header defines ('#   MODAL = https://...')."""
    import re

    text = (ROOT / "engine" / "data" / "gpus.toml").read_text()
    return set(re.findall(r"^#\s+([A-Z]{3,})\s+=", text, flags=re.M))


def test_gpu_source_captions_read_as_prose_without_catalogue_tags_or_keys():
    """The T4's memory caption read "MODAL: '- T4: 15360MiB (16.11 GB)'" and its note "see t4-datasheet": a short
    name and a catalogue key a reader cannot decode. Every GPU's shown sources and notes now name the page quoted
    in words, and no catalogue key stands in for a GPU's name (a quote such as '"rtx-3090": {...}' may keep one)."""
    import re

    from engine.calc.specs import SOURCE_NAMES, load_gpu_catalog

    catalog = load_gpu_catalog()
    tags = _catalogue_tags() | {"DERIVED", "UNATTRIBUTED"}
    assert {"MODAL", "GSPEC", "GDS"} <= tags and _catalogue_tags() <= set(SOURCE_NAMES)
    for key, gpu in catalog.items():
        for figure, text in [*gpu.sources.items(), ("notes", gpu.notes)]:
            assert not tags & set(re.findall(r"\b[A-Z]{3,}\b", text)), (key, figure, text)
            assert not re.search(r"\b[A-Z]{3,}:", text), (key, figure, text)
            for other in catalog:
                assert not re.search(rf"(?<![\w.\"-]){re.escape(other)}(?![\w.\"-])", text), (
                    key,
                    other,
                    text,
                )
            assert "supplements." not in text, (key, figure, text)

    at = _run(CALC)  # the T4 by default: its figures' captions as the page shows them
    captions = " ".join(c.value for c in at.caption)
    assert "memory: 15360 MiB as the driver reports it: Modal's list of nvidia-smi totals (" in captions
    assert "'- T4: 15360MiB (16.11 GB)'" in captions  # the quote itself is kept word for word
    assert "MODAL" not in captions and "t4-datasheet" not in captions
    assert "pick the T4 (NVIDIA datasheet: 320 GB/s) to use it" in captions


def test_the_decode_step_says_why_it_reads_less_than_the_weights_tile():
    """'Weights 5.30 GB' sat beside 'each step reads 5.29 GB of weights' with no word on the gap: GPT-Neo's
    position-embedding table is looked up a row per token, and the norms are too small to time."""
    at = _run(CALC)
    assert _metric(at, "Weights") == "5.30 GB"
    decode = next(m.value for m in at.markdown if "**Decode**" in m.value)
    assert (
        "each step reads 5.29 GB of weights (11.15 MB less than the 5.30 GB stored: a step looks up one row per "
        "token of the position-embedding table instead of reading it; the estimate leaves out the norms' 665.60 KB"
    ) in decode


def test_the_runs_table_says_where_runs_came_from_and_why_one_is_not_compared_in_words():
    """The runs table read 'unlabelled ×4', 'probe ×1' and 'no: load not recorded': the log's own tags. It now says
    who measured the runs and that a run without a recorded load is an older one."""
    import json

    from engine.runtime import runlog

    log = runlog.log_path()
    log.parent.mkdir(parents=True, exist_ok=True)
    older = synthetic_run("gpt-neo-125m-random", "bf16", 0.05, 0.02, loadavg_1m=None, busy=None)
    probe = synthetic_run(
        "gpt-neo-125m-random", "bf16", 0.05, 0.02, loadavg_1m=None, busy=None, source="probe"
    )
    with log.open("a") as f:  # as logged before runs carried where they came from and their load
        for m in [older] * 4 + [probe]:
            f.write(json.dumps(m.to_dict()) + "\n")
    at = _run(CALC)
    runs = next(df.value for df in tables_in_order(at) if "from" in df.value.columns)
    cmp = next(df.value for df in tables_in_order(at) if "comparable" in df.value.columns)
    assert list(runs["from"]) == [
        "4 older runs that did not record where they came from, 1 from another tool"
    ]
    assert list(cmp["comparable"]) == ["no: load not recorded (older run)"]
    shown = " ".join(
        [str(v) for df in tables_in_order(at) for v in df.value.to_numpy().ravel()]
        + [c.value for c in at.caption]
        + [str(m.delta) for m in at.metric]
    )
    for tag in ("unlabelled", "probe", "×4", "×1"):
        assert tag not in shown
    assert "not compared: load not recorded (older run)" in shown


def test_the_published_runs_beside_an_estimate_say_their_lengths_and_load():
    """The engineer's walk: the 70B's published runs (23.6-33.1 ms at 4-8 requests/s, ShareGPT lengths) sat beside
    the estimate for 50 users of 2,048 + 256 tokens with no lengths, below its interval: read as 'the estimate is
    wrong'. Each row now gives its lengths and load, and one sentence says they are context, not a check."""
    at = _run(CALC)
    at.selectbox(key="calc.preset").set_value("meta-llama/Llama-3.3-70B-Instruct").run()
    at.selectbox(key="calc.gpu").set_value("h100-sxm").run()
    at.selectbox(key="calc.engine").set_value("vllm").run()
    at.number_input(key="calc.gpus").set_value(4).run()
    at.number_input(key="calc.batch").set_value(50).run()
    at.number_input(key="calc.prompt").set_value(2048).run()
    at.number_input(key="calc.output").set_value(256).run()
    assert not at.exception
    box = next(e for e in at.expander if e.label.startswith("Published runs of this setup"))
    said = " ".join(m.value for m in box.markdown)
    assert "None of these runs is at this estimate's 50 users of 2,048 + 256 tokens" in said
    assert "context, not a check of it" in said
    table = box.dataframe[0].value
    assert list(table.columns[:3]) == ["TPOT (ms)", "prompt + output", "load"]
    assert set(table["prompt + output"]) == {"ShareGPT's own (varied, not stated)"}
    assert set(table["load"]) == {"request rate 4/s", "request rate 8/s"}


def _columns_around(at: AppTest, key: str) -> int:
    """How many columns hold the widget `key` (1: the page's inputs column alone; 2: a pair inside it)."""

    def walk(node, depth):
        for kid in getattr(node, "children", {}).values():
            if getattr(kid, "key", None) == key:
                return depth
            found = walk(kid, depth + (getattr(kid, "type", "") == "column"))
            if found is not None:
                return found
        return None

    return walk(at.main, 0)


def test_the_inputs_take_the_columns_whole_width_at_1280_px():
    """The engineer's walk at 1280 px: two fields a row in the inputs column left 113 px each ('Batch (concurrent
    users)' on three lines beside 'GPUs' on one, the rows out of step; the GPU's figures three a row at 60 px). One
    field a row now; only the two lengths share one."""
    at = _run(CALC)
    at.selectbox(key="calc.engine").set_value("vllm").run()
    alone = [
        "calc.batch",
        "calc.gpus",
        "calc.mml",
        "calc.price.t4",
        "calc.kv_dtype",
        "calc.t4.mem",
        "calc.t4.link",
    ]
    assert {k: _columns_around(at, k) for k in alone} == dict.fromkeys(alone, 1)
    assert _columns_around(at, next(n.key for n in at.number_input if n.key.startswith("calc.util"))) == 1
    assert [_columns_around(at, k) for k in ("calc.prompt", "calc.output")] == [2, 2]


# ---------------------------------------------------------------- a refused field keeps the others


def _utilization(at: AppTest):
    return next(n for n in at.number_input if n.key.startswith("calc.util.vllm"))


def _launch(at: AppTest) -> str:
    return next(c.value for c in at.code if c.value.startswith("vllm serve"))


def test_a_refused_gpu_count_never_clears_the_gpu_memory_utilization():
    """The engineer's walk: GPUs = 1000 (refused under the field, fine), then back to 1, and the GPU memory
    utilization box was empty, every answer blocked until 0.90 was typed again in a box never touched: the box's
    key named the GPU count, so each count (and a refused one) drew another box. One box now, whatever the count:
    it follows the engine's rule until the user types a value, and a value typed stays."""
    at = _run(CALC)
    at.selectbox(key="calc.engine").set_value("vllm").run()
    at.number_input(key="calc.gpus").set_value(1000).run()
    assert "1000 GPUs would run as" in at.error[0].value.replace(",", "")
    assert _utilization(at).value == 0.9  # the refused count leaves it alone
    at.number_input(key="calc.gpus").set_value(1).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert _utilization(at).value == 0.9
    assert any(m.label == "GPUs needed" for m in at.metric) and "--gpu-memory-utilization 0.9" in _launch(at)
    # a value typed survives a new count, a refused count and the way back
    _utilization(at).set_value(0.8).run()
    for n in (2, 1000, 2, 1):
        at.number_input(key="calc.gpus").set_value(n).run()
        assert _utilization(at).value == 0.8, n
    assert "--gpu-memory-utilization 0.8" in _launch(at)


def test_a_whole_number_box_reads_1e9_as_a_billion_and_refuses_it():
    """'1e9' typed in Batch (concurrent users) became 1 user, silently: Streamlit's browser side reads an integer
    box's text with parseInt ('1e9' -> 1). A whole-number field is a float box now (shown without decimals), so the
    browser hands over 1,000,000,000, and it is refused with the allowed range, as any number out of range is."""
    from streamlit.proto.NumberInput_pb2 import NumberInput as NumberInputProto

    at = _run(CALC)
    box = at.number_input(key="calc.batch")
    assert box.proto.data_type == NumberInputProto.FLOAT  # parsed with parseFloat in the browser
    assert box.proto.format == "%g" and box.proto.step == 1  # '8', not '8.00'
    box.set_value(1e9).run()
    said = [e.value for e in at.error]
    assert said == [
        "Batch (concurrent users) must be a positive whole number up to 1,000,000, got 1000000000: nothing runs "
        "with it until it is changed."
    ]
    assert not any(m.label == "GPUs needed" for m in at.metric)  # no answer with 1 user nor the old 8
    at.number_input(key="calc.batch").set_value(2.5).run()
    assert any("must be a whole number, got 2.5" in e for e in [e.value for e in at.error])
    at.number_input(key="calc.batch").set_value(16).run()
    assert not at.error and any(m.label.startswith("Time per output token at 16 users") for m in at.metric)


def test_the_track_records_targets_are_drawn_whole_in_cells_that_wrap():
    """At 1280 px the verdicts' 'target' column was cut: 'median |error| <= 12%, inside the interval >= 80%, median
    wid'. The verdicts are a table of words now, whose cells wrap; the measured figures stay dataframes."""

    def page():
        from engine.trackrecord import summarize
        from ui.trackrecord_view import summary_tables

        summary_tables([s.__dict__ for s in summarize((), held_back_only=True)])

    at = AppTest.from_function(page, default_timeout=TIMEOUT).run()
    assert not at.exception
    from engine.trackrecord import TARGETS, summarize

    verdicts = at.table[0].value
    assert list(verdicts.columns) == ["what", "target met", "target"]
    targets = [s.target for s in summarize((), held_back_only=True)]
    assert list(verdicts["target"]) == targets and len(targets) == len(TARGETS)
    assert any(t.endswith("median width <= 1.6x") for t in targets)  # the one that was cut
    assert all("target" not in d.value.columns for d in at.dataframe)


def test_a_hub_address_pasted_in_the_hub_id_box_reads_as_its_id(monkeypatch):
    """A hub URL pasted into the hub-id box was refused ('is not a hub id'); it reads as its owner/name now (the
    engine trims it, so the command line takes it too), and the page says what it read."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a config the lab ships: nothing fetched
    at = _run(CALC)
    at.radio(key="calc.source").set_value("hub id").run()
    at.text_input(key="calc.hub").set_value(
        "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/tree/main"
    ).run()
    assert not at.exception
    assert not [
        e.value for e in at.error if "hub id" in e.value or "Does not fit" not in e.value
    ]  # an answer
    assert "Read as meta-llama/Llama-3.1-8B-Instruct." in [c.value for c in at.caption]
    assert any(m.label == "GPUs needed" for m in at.metric)
    assert at.subheader and any("Llama-3.1-8B-Instruct" in h.value for h in at.subheader)


def test_a_prompt_past_the_models_context_is_said_under_the_lengths():
    """The student's walk: 100,000 prompt tokens were refused at the top of the inputs, out of view of the field
    just typed in, as '100512 tokens' (no thousands separator)."""
    at = _run(CALC)
    at.number_input(key="calc.prompt").set_value(100000).run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith("Prompt + output = 100,512 tokens exceed")
    assert "context of 2,048" in errors[0]
    under = _after_row(at, "calc.output")  # the lengths share a row: the sentence is the row's next element
    assert under is not None and under.type == "error" and under.value == errors[0]
    assert not any(m.label == "GPUs needed" for m in at.metric)
    at.number_input(key="calc.prompt").set_value(512).run()
    assert not at.error and any(m.label == "GPUs needed" for m in at.metric)


def _after_row(at: AppTest, key: str):
    """The element drawn right after the row (a block of columns) that holds the widget `key`."""

    def holds(node) -> bool:
        return getattr(node, "key", None) == key or any(
            holds(k) for k in getattr(node, "children", {}).values()
        )

    def walk(node):
        kids = list(getattr(node, "children", {}).values())
        for i, kid in enumerate(kids):
            found = walk(kid)  # the innermost row first: the page's own two columns hold every field
            if found is not None:
                return found
            cols = list(getattr(kid, "children", {}).values())
            if len(cols) > 1 and all(getattr(c, "type", None) == "column" for c in cols) and holds(kid):
                return kids[i + 1] if i + 1 < len(kids) else None
        return None

    return walk(at.main)


def test_one_user_is_said_as_one():
    """The engineer's last walk: '1 users × 2,304 tokens' in the page's header and sums."""
    at = _run(CALC)
    at.number_input(key="calc.batch").set_value(1).run()
    assert not at.exception
    text = " ".join([h.value for h in at.subheader] + [m.value for m in at.markdown])
    assert "1 user × " in text and "1 users" not in text


def test_the_formulas_are_named_as_a_reader_knows_them():
    """A student's walk: the memory formulas were labelled 'count_params:', 'kv_bytes_per_token:', 'plan_gpus:', the
    functions' own names. Each is named in words now."""
    at = _run(CALC)
    shown = [m.value for m in at.markdown]
    assert any(v.startswith("**KV cache per token**: ") for v in shown)
    assert any(v.startswith("**GPUs needed**: ") for v in shown)
    assert not [v for v in shown if re.match(r"`\w+_\w+`:", v)]


def test_the_answer_is_one_line_above_the_assumptions_with_the_tiles_figures():
    """An engineer's walk: at 1280 x 800 the page's top showed the title, the assumptions and a long 'Does not fit'
    paragraph, the time per token, the first token and the price 1.5 screens down. One line under the header now
    gives them, the same figures as the tiles."""
    at = _run(CALC)
    at.selectbox(key="calc.preset").set_value("llama-3-8b").run()
    at.selectbox(key="calc.gpu").set_value("h100-sxm").run()
    at.selectbox(key="calc.engine").set_value("vllm").run()
    assert not at.exception
    card = next(m.value for m in at.markdown if "per output token** at" in m.value)
    tiles = {m.label.split(",")[0]: m.value for m in at.metric}
    per_token = next(v for k, v in tiles.items() if k.startswith("Time per output token"))
    assert card.startswith("**Fits** on the 1 GPU asked") and f"**{per_token} per output token**" in card
    assert f"TTFT {tiles['TTFT']} for one request" in card
    order = [m.value for m in at.markdown]
    assert order.index(card) < min(
        k for k, v in enumerate(order) if v.startswith("- ")
    )  # above the reasoning


def test_the_answer_line_on_this_machines_cpu_counts_no_gpus():
    """The presenter's walk: on this machine's CPU the answer line read 'Fits on the 1 GPU asked' beside 'GPUs
    (none: this machine's CPU)'."""
    at = _run(CALC)
    at.selectbox(key="calc.gpu").set_value("this-machine").run()
    assert not at.exception
    card = next(
        m.value for m in at.markdown if "per output token** at" in m.value or "machine's memory" in m.value
    )
    assert "in this machine's memory" in card and "GPU" not in card
