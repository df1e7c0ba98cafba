"""Published runs of the very setup an estimate is for, beside it (engine.calc.seen): the engineer's walk found
the 70B on 4 x H100 estimated at 46 ms per token for one user while the lab's own data held vLLM runs of that
setup at 23.6 ms under load, unscored and unshown."""

from __future__ import annotations

import json
from dataclasses import replace

from engine.calc import published
from engine.calc.hf_config import spec_from_hf_config
from engine.calc.report import Inputs, estimate
from engine.calc.seen import Seen, below_estimate, seen_runs
from engine.calc.specs import gpu_spec
from engine.calc.timing import Setup
from engine.cli import main

NAME = "meta-llama/Llama-3.3-70B-Instruct"


def _spec(name: str = NAME):
    return spec_from_hf_config(published.configs()[name], name=name)


def test_runs_of_the_same_shape_gpu_count_and_engine_class_are_found_quickest_first():
    runs = seen_runs(_spec(), "h100-sxm", 4, "vllm", "bf16")  # Llama-3.1-70B has the 3.3's shape
    assert [round(r.tpot_s * 1e3, 2) for r in runs] == [23.58, 25.03, 29.15, 33.07]
    assert runs[0].load == "request rate 4/s" and runs[0].engine == "vllm v0.6.0"
    assert seen_runs(_spec(), "h100-sxm", 8, "vllm", "bf16") == []  # another GPU count is another setup
    assert seen_runs(_spec(), "h100-sxm", 4, "vllm", "fp8") == []  # fewer bytes per weight: another setup
    assert seen_runs(_spec(), "a100-80gb", 4, "vllm", "bf16") == []


def test_only_a_published_time_below_the_one_user_interval_is_called_out():
    run = Seen(0.0236, "request rate 4/s", "vllm v0.6.0", "s", "id")
    assert below_estimate([run], 0.030) is run
    assert below_estimate([run], 0.020) is None
    assert below_estimate([], 0.030) is None


def test_the_estimate_shows_them_and_says_which_figure_to_budget_from(capsys):
    from engine.calc.efficiency import estimate_speed

    i = Inputs(dtype="bf16", batch=1, n_gpus=4, engine="vllm")
    est = estimate(_spec(), gpu_spec("h100-sxm"), i)
    assert est.seen and est.seen_below is est.seen[0]
    # below the fit's own one-user interval: the reason it is said, and taken in (engine.calc.anchor)
    j = est.inputs
    one = Setup(
        _spec(),
        gpu_spec("h100-sxm"),
        "bf16",
        None,
        None,
        None,
        "bf16",
        4,
        1,
        j.prompt_tokens,
        j.output_tokens,
    )
    fitted = estimate_speed(one, "vllm").tpot_s  # the fit's own, before the anchor
    assert fitted.low > est.seen_below.tpot_s
    assert est.anchor is not None and est.speed.tpot_s.central < fitted.central
    assert est.warnings[0] == est.seen_note
    assert est.seen_note.startswith("Anchored to a measurement: a published run of ")
    assert (
        "The times, throughput and price here, and the simulated answers below, use those costs"
        in est.seen_note
    )
    argv = f"estimate --model {NAME} --gpu h100-sxm --dtype bf16 --engine vllm --gpus 4".split()
    assert main([*argv, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["published_below_estimate"] is True and r["published_runs"][0]["tpot_s"] == 0.02358
    assert r["fixed_costs_anchored"]["factor"] == est.anchor.factor
    assert main(argv) == 0
    assert (
        "published         23.6 ms per output token (request rate 4/s; vllm v0.6.0;"
        in capsys.readouterr().out
    )


def test_an_estimate_without_published_runs_of_its_setup_says_nothing_of_them():
    other = replace(_spec(), n_layer=79)  # a layout nobody published
    est = estimate(other, gpu_spec("h100-sxm"), Inputs(dtype="bf16", batch=1, n_gpus=8, engine="vllm"))
    assert est.seen == () and est.seen_below is None and est.seen_note == "" and est.anchor is None
    assert not any(w.startswith("A published run") for w in est.warnings)


def test_a_run_on_4_gpus_anchors_the_layout_on_8_and_2_and_says_so():
    """The engineer's walk: Llama-3.3-70B with vLLM on H100s ran 55.2 ms per token on 2 GPUs, 25.1 on 4 (anchored to
    a published run on 4) and 38.1 on 8 (the fit's own fixed costs): 8 GPUs slower than 4. The run's factor on the
    fit's per-layer and all-reduce costs now carries to the sizes nobody published, and the words say where from."""
    times = {}
    for n in (2, 4, 8):
        est = estimate(_spec(), gpu_spec("h100-sxm"), Inputs(dtype="bf16", batch=1, n_gpus=n, engine="vllm"))
        assert est.anchor is not None and est.anchor.run_tp == 4 and est.anchor.tp == n
        times[n] = est.speed.tpot_s.central
        carried = f"on {n} GPUs as on the run's 4 (no run of this layout on {n} GPUs was published"
        assert (carried in est.seen_note) == (n != 4)
    assert times[2] > times[4] > times[8]


def test_each_published_run_says_its_lengths_and_load_and_which_would_check_the_estimate():
    """The engineer's walk: 23.6-33.1 ms published at 4 and 8 requests/s with ShareGPT lengths were listed beside the
    70B estimate for 50 users of 2,048 + 256 tokens without their lengths, below its interval: read as 'the estimate
    is wrong'. Each run now says its lengths and load, and one sentence says they are context, not a check."""
    from engine.calc.seen import context_words

    runs = seen_runs(_spec(), "h100-sxm", 4, "vllm", "bf16")
    assert {r.lengths for r in runs} == {"ShareGPT's own (varied, not stated)"}
    assert {r.load for r in runs} == {"request rate 4/s", "request rate 8/s"}
    assert all(r.users is None for r in runs)  # a request rate is not a number of users
    said = context_words(runs, 2048, 256, 50)
    assert said == (
        "None of these runs is at this estimate's 50 users of 2,048 + 256 tokens: runs at other lengths or loads "
        "are context, not a check of it (a step's time grows with the users in it and the tokens each holds); only "
        "a run of the same lengths and load would check it."
    )
    # the words follow the runs: one at the estimate's lengths and users checks it
    same = Seen(0.040, "50 concurrent users", "vllm v0.8", "s", "id", 2048, 256, None, 50)
    assert same.lengths == "2,048 + 256 tokens" and same.same_as(2048, 256, 50)
    assert not same.same_as(2048, 256, 8) and not same.same_as(1024, 256, 50)
    assert context_words([*runs, same], 2048, 256, 50) == (
        "1 of these runs is at this estimate's 50 users of 2,048 + 256 tokens and so checks it; the others, at "
        "other lengths or loads, are context, not a check of it."
    )
    assert (
        Seen(0.02, "one user", "e", "s", "id", 229, 218, "ShareGPT", 1).lengths
        == "229 + 218 tokens (ShareGPT, means)"
    )
    assert Seen(0.02, "one user", "e", "s", "id").lengths == "not stated"
    assert Seen(0.02, "one user", "e", "s", "id", 512).lengths == "512 prompt tokens, output not stated"
    assert context_words([], 2048, 256, 50) == ""
