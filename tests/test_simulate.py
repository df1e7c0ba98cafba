"""The serving simulator: schedules computed by hand with constant step times, the same policy as the server's
scheduler (a closed batch through the real Scheduler and the virtual one step for step), step times from the
calculator, the CLI's JSON against the load generator's, and bad inputs in one sentence."""

from __future__ import annotations

import json
import math
import threading

import pytest

from engine.batching import policy
from engine.core.errors import InvalidParameterError
from engine.loadgen.metrics import summarize
from engine.loadgen.sweep import SweepResult, to_json
from engine.loadgen.workload import SLO, LoadSpec
from engine.simulate.clock import SimRequest, StepLog, run
from engine.simulate.spec import SimulateSpec
from engine.simulate.steps import LinearSteps, fit_linear, step_time
from engine.simulate.sweep import Deployment, check_split, simulate

BIG = policy.Limits(
    max_batch=2,
    kv_budget_bytes=10**12,
    kv_bytes_per_token=1,
    prefill_chunk_tokens=256,
    mixed_prompt_tokens=16,
)
STEP = LinearSteps(0.1)  # every forward 100 ms


def _by_index(records):
    return {r.index: r for r in records}


def test_closed_batch_schedule_by_hand():
    # 3 requests at t=0, max batch 2, 3 tokens each, 100 ms per forward:
    # prefill(r0, r1) -> 0.1 (first tokens), decode -> 0.2, decode -> 0.3 (r0, r1 done);
    # prefill(r2) -> 0.4, decode -> 0.5, decode -> 0.6
    log: list[StepLog] = []
    recs = _by_index(run([SimRequest(i, 8, 3) for i in range(3)], BIG, STEP, concurrency=3, log=log))
    assert [s.kind for s in log] == ["prefill", "decode", "decode", "prefill", "decode", "decode"]
    assert [s.prefill_tokens for s in log] == [16, 0, 0, 8, 0, 0]
    for i, (ttft, e2e) in enumerate([(0.1, 0.3), (0.1, 0.3), (0.4, 0.6)]):
        assert recs[i].ttft_s == pytest.approx(ttft) and recs[i].e2e_s == pytest.approx(e2e)
        assert recs[i].output_tokens == 3 and recs[i].itls == pytest.approx([0.1, 0.1])


def test_a_newcomer_rides_the_running_rows_decode_step():
    # r0 (4 tokens) at 0: prefill -> 0.1, decode -> 0.2; r1 (2 tokens) arrives at 0.15, joins the next decode step as
    # a mixed step -> 0.3 (r0's third token, r1's first), decode -> 0.4 (both done)
    log: list[StepLog] = []
    reqs = [SimRequest(0, 8, 4, 0.0), SimRequest(1, 8, 2, 0.15)]
    recs = _by_index(run(reqs, BIG, STEP, log=log))
    assert [s.kind for s in log] == ["prefill", "decode", "mixed", "decode"]
    assert log[2].decode_rows == 1 and log[2].prefill_tokens == 8
    assert recs[0].e2e_s == pytest.approx(0.4) and recs[0].output_tokens == 4
    assert recs[1].ttft_s == pytest.approx(0.15) and recs[1].e2e_s == pytest.approx(0.25)


def test_fixed_users_send_when_their_answer_ends_and_the_kv_budget_waits():
    # one user, two requests of 2 tokens: prefill -> 0.1, decode -> 0.2; the second is sent at 0.2
    recs = _by_index(run([SimRequest(0, 4, 2), SimRequest(1, 4, 2)], BIG, STEP, concurrency=1))
    assert recs[1].start == pytest.approx(0.2) and recs[1].ttft_s == pytest.approx(0.1)
    # a budget of one request's padded KV: the second waits for the first although a slot is free
    tight = policy.Limits(
        2, 20, 1, 256, 16
    )  # (8 prompt + 2 left) x 2 rows = 20 would fit; + the padding: not
    log: list[StepLog] = []
    recs = _by_index(run([SimRequest(0, 8, 3), SimRequest(1, 8, 3)], tight, STEP, concurrency=2, log=log))
    assert [s.kind for s in log][:3] == ["prefill", "decode", "decode"]  # r1 was not admitted beside r0
    assert recs[1].ttft_s == pytest.approx(0.4)
    # a request larger than the budget is refused at once, as Scheduler.submit refuses it
    refused = run([SimRequest(0, 30, 3)], tight, STEP)
    assert not refused[0].ok and refused[0].error == "http_4xx"


def test_requests_sent_together_reach_the_scheduler_together():
    # 50 ms each outside the steps, spent beside the model (the server tokenizes in a thread pool and writes chunks
    # from its event loop), two slots, 100 ms a forward. Three users send at 0: r0 and r1 are prefilled together
    # (0 -> 0.1) and decode at 0.2 and 0.3; r2 waits at the scheduler for a slot (not at the front end), is
    # prefilled 0.3 -> 0.4 and decodes at 0.5 and 0.6. Every token reaches its client 50 ms after its step, so r0's
    # user sends r3 at 0.35; r3 rides r2's step at 0.5 -> 0.6 (mixed) and decodes at 0.7 and 0.8.
    from engine.core.interval import Interval

    steps = LinearSteps(0.1, fixed_s=Interval.exact(0.05))
    log: list[StepLog] = []
    recs = _by_index(run([SimRequest(i, 8, 3) for i in range(4)], BIG, steps, concurrency=3, log=log))
    assert [s.kind for s in log] == [
        "prefill",
        "decode",
        "decode",
        "prefill",
        "decode",
        "mixed",
        "decode",
        "decode",
    ]
    assert log[0].prompts == 2
    for i, (start, ttft, e2e) in enumerate(
        [(0, 0.15, 0.35), (0, 0.15, 0.35), (0, 0.45, 0.65), (0.35, 0.3, 0.5)]
    ):
        assert recs[i].start == pytest.approx(start)
        assert recs[i].ttft_s == pytest.approx(ttft) and recs[i].e2e_s == pytest.approx(e2e)
    assert recs[0].chunk_times == pytest.approx([0.15, 0.25, 0.35])


def test_the_front_end_hands_requests_over_one_at_a_time():
    # Of the 50 ms outside the steps, 10 ms are spent before the scheduler, one request at a time (the server
    # tokenizes under one lock): three requests sent at 0 reach it at 0.01, 0.02 and 0.03. r0 is prefilled alone
    # (0.01 -> 0.11) and decodes at 0.21; r1 rides the next step (mixed, 0.31), r2 the one after (0.41); two slots, so
    # r3 (sent when r0's client saw its last token, 0.31 + 0.04) waits for r1 to finish at 0.51 and rides 0.51 -> 0.61.
    # Each token is seen 40 ms after its step.
    from engine.core.interval import Interval

    steps = LinearSteps(0.1, fixed_s=Interval.exact(0.05), handling_s=0.01)
    log: list[StepLog] = []
    recs = _by_index(run([SimRequest(i, 8, 3) for i in range(4)], BIG, steps, concurrency=3, log=log))
    kinds = ["prefill", "decode", "mixed", "mixed", "decode", "mixed", "decode", "decode"]
    assert [s.kind for s in log] == kinds
    want = [(0, 0.15, 0.35), (0, 0.35, 0.55), (0, 0.45, 0.65), (0.35, 0.30, 0.50)]
    for i, (start, ttft, e2e) in enumerate(want):
        assert recs[i].start == pytest.approx(start)
        assert recs[i].ttft_s == pytest.approx(ttft) and recs[i].e2e_s == pytest.approx(e2e)


def test_the_simulator_runs_the_servers_policy_step_for_step(tiny_lm):
    """A closed batch through the real Scheduler (tiny-gpt-neo, greedy, ignore_eos) and through the virtual one:
    the same sequence of decode-step sizes and the same mixed steps, because both call engine.batching.policy."""
    from engine.batching.scheduler import Scheduler
    from engine.runtime.settings import GenerationConfig

    # tuned so that every knob shows: rows finishing together (two newcomers, 16 mixed prompt tokens: one rides,
    # one waits), a 40-token prompt past the 32-token chunk (a chunked prefill), a KV budget that holds back a slot
    prompts = [5, 9, 3, 12, 40, 7, 4, 10, 11, 6]
    outputs = [6, 3, 8, 3, 5, 9, 4, 3, 7, 2]
    probe = Scheduler(tiny_lm, max_batch=4, kv_budget_bytes=2**30, record=False)
    budget = 120 * probe.kv_bytes_per_token
    probe.close()
    sched = Scheduler(
        tiny_lm,
        max_batch=4,
        kv_budget_bytes=budget,
        prefill_chunk_tokens=32,
        mixed_prompt_tokens=16,
        record=False,
    )
    handles = []
    with sched._cond:  # every request is queued before the scheduler's thread looks (the Condition's RLock)
        for p, o in zip(prompts, outputs, strict=True):
            cfg = GenerationConfig(max_new_tokens=o)
            handles.append(sched.submit("x", cfg, ignore_eos=True, prompt_ids=list(range(10, 10 + p))))
    for h in handles:
        h.result(timeout=120)
    real_sizes = [n for _, n in sched._step_log]
    real_mixed = sched.mixed_steps
    sched.close()
    log: list[StepLog] = []
    reqs = [SimRequest(i, p, o) for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))]
    recs = run(reqs, sched.limits, STEP, concurrency=len(reqs), log=log)
    sim_sizes = [s.decode_rows + (s.prompts if s.kind == "mixed" else 0) for s in log if s.kind != "prefill"]
    assert sim_sizes == real_sizes
    assert sum(s.kind == "mixed" for s in log) == real_mixed > 0
    assert [r.output_tokens for r in recs] == outputs


def test_step_time_follows_the_calculator_and_its_interval():
    from engine.calc.efficiency import Setup
    from engine.calc.specs import gpu_spec, model_preset

    s = Setup(
        model_preset("llama-3-8b"), gpu_spec("h100-sxm"), "bf16", None, None, None, "bf16", 1, 1, 512, 128
    )
    one = step_time(s, "vllm", 1, 600, 0)
    assert one.bound <= one.low <= one.central <= one.high and one.rows
    # a decode step reads every weight once: about 16 GB of bf16 weights over 3.35 TB/s is ~4.8 ms at best
    assert 4.5e-3 < one.bound < 5.5e-3
    big = step_time(s, "vllm", 64, 64 * 600, 0)
    assert one.central < big.central < 64 * one.central  # batching amortises the weights
    mixed = step_time(s, "vllm", 8, 8 * 600, 512, 1)
    alone = step_time(s, "vllm", 8, 8 * 600, 0)
    prefill = step_time(s, "vllm", 0, 0, 512, 1)
    assert alone.central < mixed.central < alone.central + prefill.central  # the weights are read once
    # engine.calc.step_model counts prompt tokens alone: two prompts of 256 cost what one of 512 does
    assert step_time(s, "vllm", 0, 0, 512, 2).central == prefill.central


def test_fit_linear_recovers_a_known_step_model():
    truth = LinearSteps(0.02, 0.005, 1e-6, 3e-4, 0.05, 0.012)
    shapes = [
        (1, 50, 0),
        (2, 200, 0),
        (4, 400, 0),
        (8, 900, 0),
        (3, 300, 12),
        (0, 0, 40),
        (0, 0, 90),
        (6, 600, 0),
        (1, 40, 40),
        (5, 500, 44),
    ]
    fit = fit_linear([(r, c, p, truth.duration(r, c, p).central) for r, c, p in shapes])
    assert fit.coefficients == pytest.approx(truth.coefficients, rel=1e-6)
    assert fit.spread == pytest.approx((1.0, 1.0))
    # a prompt alone pays e on top; riding a decode step it does not
    assert truth.duration(0, 0, 40).central == pytest.approx(0.02 + 40 * 3e-4 + 0.05)
    # riding a decode step, each running row of that mixed step costs g on top of its decode cost b
    assert truth.duration(1, 50, 40).central == pytest.approx(0.02 + 0.005 + 50e-6 + 40 * 3e-4 + 0.012)
    assert truth.duration(5, 500, 44).central == pytest.approx(
        0.02 + 5 * (0.005 + 0.012) + 500e-6 + 44 * 3e-4
    )
    assert truth.duration(5, 500, 0).central == pytest.approx(0.02 + 5 * 0.005 + 500e-6)


def test_a_closed_batch_admits_what_queued_together_then_one_mixed_step_each():
    """bench/simulate.py's probe reads the server's per-request timings of b requests sent together: those queued
    together formed one prefill; each later one (by its wait) rode a mixed step beside the rows admitted before."""
    from bench.simulate import _admissions

    group = [
        {"queue_s": 0.30, "prompt_tokens": 44, "prefill_s": 0.18},
        {"queue_s": 0.001, "prompt_tokens": 43, "prefill_s": 0.14},
        {"queue_s": 0.15, "prompt_tokens": 41, "prefill_s": 0.16},
    ]
    assert _admissions(group) == [(0, 0, 43, 0.14), (1, 0, 41, 0.16), (2, 0, 44, 0.18)]
    together = [{"queue_s": 0.001, "prompt_tokens": 40, "prefill_s": 0.2}, {**group[1], "queue_s": 0.002}]
    assert _admissions(together) == [(0, 0, 83, pytest.approx(0.17))]


def _loadgen_shape() -> dict:
    """A load generator sweep's JSON from hand-made records (the shape the simulator must print)."""
    from engine.loadgen.client import RequestRecord

    r = RequestRecord(
        0, 0.0, max_tokens=2, ok=True, ttft_s=0.1, e2e_s=0.2, output_tokens=2, tokens_from_usage=True
    )
    r.chunk_times = [0.1, 0.2]
    spec = LoadSpec(base_url="http://x/v1", model="m", mode="concurrency")
    slo = SLO()
    m = summarize([r], level=1.0, mode="concurrency", slo=slo)
    return to_json(SweepResult(spec, slo, (1.0,), (m,), 1.0, False, "now"))


SIM_ARGS = [
    "simulate", "--model", "smollm2-135m", "--gpu", "l4", "--gpus", "1", "--dtype", "bf16", "--engine", "vllm",
    "--mode", "concurrency", "--sweep", "1,4,16", "--requests", "24", "--prompt-tokens", "128",
    "--output-tokens", "16", "--slo-ttft", "2", "--slo-tpot", "0.2", "--json",
]  # fmt: skip


def test_cli_json_has_the_load_generators_shape_and_simulated(capsys):
    from engine.cli import main

    assert main(SIM_ARGS) == 0
    out = json.loads(capsys.readouterr().out)
    shape = _loadgen_shape()
    assert set(out) == set(shape) | {"simulated"}
    assert [set(p) for p in out["points"]] == [set(shape["points"][0])] * 3
    assert set(out["points"][0]["ttft_s"]) == set(shape["points"][0]["ttft_s"])
    assert {"gpu", "engine", "step_model"} <= set(out["simulated"])
    assert out["simulated"]["label"] == "simulated for L4 x 1, vllm"
    assert out["levels"] == [1.0, 4.0, 16.0] and out["knee"] in (None, 1.0, 4.0, 16.0)
    for p, iv in zip(out["points"], out["simulated"]["intervals"], strict=True):
        t = iv["ttft_s"]["p50"]
        assert t["low"] <= p["ttft_s"]["p50"] <= t["high"]
        o = iv["output_tokens_per_s"]
        assert o["low"] <= p["output_tokens_per_s"] <= o["high"]
    # spread users (a GPU's default): each user's first request is left out where a level has two per user
    assert out["simulated"]["start"] == "spread"
    assert out["simulated"]["warm_up_requests_left_out"] == [1, 4, 0]
    assert [p["completed"] for p in out["points"]] == [23, 20, 24]
    # more users share the weights: more throughput, and each one decodes no faster
    tput = [p["output_tokens_per_s"] for p in out["points"]]
    assert tput[0] < tput[1] < tput[2]


def test_simulated_sweep_stops_at_the_first_level_that_misses_the_slos():
    spec = SimulateSpec(
        model="llama-3-8b", gpu="l4", sweep="1,8,64", n_requests=64, prompt_tokens=512, output_tokens=64
    )
    out = simulate(spec, SLO(ttft_s=0.5, tpot_s=None))
    assert out.result.knee is not None and out.result.knee < 64
    assert len(out.result.points) == out.result.levels.index(out.result.knee) + 2
    k = out.knee_interval()
    assert k["low"] is None or k["low"] <= k["central"] <= (k["high"] or math.inf)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"sweep": "a,b"}, "not a number"),
        ({"sweep": "1.5"}, "whole numbers"),
        ({"n_gpus": 264}, "more stages than the model's 32 layers"),  # 8-way tensor parallel x 33 stages
        ({"prompt_tokens": 9000}, "context"),
        ({"model": None}, "--model"),
        ({"gpu": "no-such-gpu"}, "no-such-gpu"),
    ],
)
def test_bad_inputs_say_what_to_change(change, words):
    spec = {"model": "llama-3-8b", "gpu": "h100-sxm", "sweep": "1,2", "n_requests": 4, **change}
    with pytest.raises(InvalidParameterError, match=words) as exc:
        simulate(SimulateSpec(**spec), SLO())
    text = str(exc.value)
    assert "\n" not in text and "Traceback" not in text and "/" not in text.replace("--", "")


def test_an_slo_of_zero_is_one_sentence():
    from engine.loadgen.workload import LoadSpecError

    with pytest.raises(LoadSpecError, match="positive number of seconds"):
        simulate(SimulateSpec(model="llama-3-8b", sweep="1", n_requests=2), SLO(ttft_s=0.0))


def test_check_split_names_the_counts_that_work():
    from engine.calc.specs import model_preset

    with pytest.raises(InvalidParameterError, match=r"32 attention heads.*\(2, 4, 8"):
        check_split(model_preset("llama-3-8b"), 3)
    check_split(model_preset("llama-3-8b"), 4)


def test_deployment_uses_vllms_kv_budget_and_batch():
    from engine.simulate.sweep import deployment

    d: Deployment = deployment(SimulateSpec(model="llama-3-8b", gpu="h100-sxm").validate())
    assert (
        d.memory is not None
        and d.limits.kv_budget_bytes == d.memory.kv_cache_tokens * d.limits.kv_bytes_per_token
    )
    # vLLM's own default on a GPU of 70 GiB or more other than an A100 (vllm/engine/arg_utils.py,
    # get_batch_defaults): the number the allocation profiled and the launch command states
    assert d.limits.max_batch == 1024 == d.memory.max_num_seqs
    assert d.limits.prefill_chunk_tokens == d.memory.max_num_batched_tokens


@pytest.mark.parametrize(("gpu", "engine", "cap"), [("l4", "vllm", 256), ("a100-80gb", "vllm", 256),
                                                    ("h200", "vllm", 1024), ("h100-sxm", "sglang", 256)])  # fmt: skip
def test_the_simulated_max_batch_is_the_servers_own_cap(gpu, engine, cap):
    """The engineer's walk: the simulator ran at most 256 requests at once on an H100 ('vLLM's default') while the
    launch command of the same plan said --max-num-seqs 1024, vLLM's real default there. One plan, one number:
    vLLM's default for the GPU (1024 on 70 GiB or more but A100s), or the cap asked; SGLang's is not modelled and
    the note says the simulator's."""
    from engine.simulate.sweep import deployment

    d = deployment(SimulateSpec(model="llama-3-8b", gpu=gpu, engine=engine).validate())
    assert d.limits.max_batch == cap
    assert any("--max-running-requests 256" in n for n in d.notes) == (engine == "sglang")
    asked = deployment(SimulateSpec(model="llama-3-8b", gpu=gpu, engine=engine, max_batch=2048).validate())
    assert asked.limits.max_batch == 2048  # past the old ceiling of 256: vLLM takes any cap


def test_a_sweep_is_the_same_twice_and_threads_do_not_share_state():
    spec = SimulateSpec(
        model="smollm2-135m", gpu="l4", sweep="1,4", n_requests=12, prompt_tokens=64, output_tokens=8
    )
    outs: list[dict] = []

    def go():
        outs.append(simulate(spec, SLO()).to_json()["points"])

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outs[0] == outs[1]


def test_spread_users_see_the_first_token_time_the_estimate_gives_at_that_load(capsys):
    """The engineer's walk: at 50 users the estimate said 109 ms to a first token, the most-users answer 130 users
    at TTFT <= 1 s, and the simulated sweep 3.99 s with its knee at 1 user: it started every user at once, and with
    equal lengths they stayed in lock step. Spread users (the default on a GPU) run the steady state the other two
    answers take; started together, the sweep still shows the lock step."""
    from engine.cli import main

    common = ["--model", "llama-3-8b", "--gpu", "h100-sxm", "--dtype", "fp16", "--engine", "vllm",
              "--prompt-tokens", "2048", "--output-tokens", "256", "--json"]  # fmt: skip
    assert main(["estimate", *common, "--batch", "50"]) == 0
    est = json.loads(capsys.readouterr().out)
    ttft = est["ttft_s"]
    sim = ["simulate", *common, "--sweep", "50", "--requests", "150", "--slo-ttft", "0", "--slo-tpot", "0"]
    assert main(sim) == 0
    out = json.loads(capsys.readouterr().out)
    point = out["points"][0]
    spread = point["ttft_s"]["p50"]
    assert ttft["low"] <= spread <= ttft["high"]
    # its rates are the steady state's, as the estimate counts them: users / mean request time (the wall clock
    # took in the spread start and the drain: 1,699 tok/s against the estimate's 2,052)
    assert out["simulated"]["rates"] == "steady state: users / mean request time"
    assert point["request_throughput"] == pytest.approx(50 / point["e2e_s"]["mean"])
    rate = est["output_tokens_per_s"]
    assert rate["low"] <= point["output_tokens_per_s"] <= rate["high"]
    assert point["output_tokens_per_s"] == pytest.approx(rate["central"], rel=0.15)  # 3 requests a user here
    assert main([*sim, "--start", "together"]) == 0
    together = json.loads(capsys.readouterr().out)["points"][0]["ttft_s"]["p50"]
    assert together > 5 * ttft["high"]


def test_this_machines_step_model_describes_itself(exact_calibration):
    """A slip of this session gave CalibratedSteps.describe the published model's 'scaled_to_published' entry,
    which reads fields only PublishedSteps has: `simulate --gpu this-machine --json` would have raised."""
    from engine.simulate.steps import CalibratedSteps

    spec, _, cal = exact_calibration
    described = CalibratedSteps(cal, spec, "fp32").describe()
    assert described["kind"] == "calibrated" and "scaled_to_published" not in described


def test_simulate_and_solve_say_their_progress_on_stderr_and_keep_json_stdout_pure(capsys):
    """The engineer's walk: the command printed nothing for ten seconds while it worked. It says what it is doing
    and how long each step took, on stderr only: under --json stdout is still one JSON document."""
    from engine.cli import main

    sim = ["simulate", "--model", "smollm2-135m", "--gpu", "l4", "--sweep", "1,2", "--requests", "4",
           "--output-tokens", "4", "--slo-tpot", "50ms", "--json"]  # fmt: skip
    assert main(sim) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)  # the whole of stdout
    assert doc["slo"]["tpot_s"] == pytest.approx(0.05)
    assert err.startswith("simulating 2 load levels (1, 2 users) of 4 requests each on 1 x l4")
    assert "  1 user, central step times: done in " in err and "  2 users, high step times: done in " in err
    assert err.rstrip().splitlines()[-1].startswith("finished in ")
    solve = ["estimate", "--model", "llama-3-8b", "--gpu", "l4", "--engine", "vllm", "--prompt-tokens", "64",
             "--output-tokens", "4", "--solve", "max-users", "--solve-requests", "4", "--slo-tpot", "60ms", "--json"]  # fmt: skip
    assert main(solve) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["solve"] == "max-users"
    assert "searching the most users that meet TTFT <= 2 s and TPOT <= 60 ms on 1 x l4" in err
    assert "  searching the knee with central step times: done in " in err


def test_a_run_too_short_for_steady_state_says_so_and_how_many_requests_would_do(capsys):
    """The engineer's last walk: `simulate --sweep 121` at the default 200 requests said 121 users fail every
    objective (9.71 s to a first token: each user's only request started at once) where the most-users answer,
    confirmed with 20 requests a user, said 121 meet them; nothing said the run was too short."""
    from engine.cli import main

    argv = ["simulate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--prompt-tokens", "512",
            "--output-tokens", "16", "--sweep", "4,30", "--requests", "100", "--json"]  # fmt: skip
    assert main(argv) == 0
    notes = json.loads(capsys.readouterr().out)["simulated"]["notes"]
    said = [n for n in notes if "fewer than 20 per user" in n]
    assert len(said) == 1 and said[0].startswith("at 30 users, 100 requests are fewer than 20 per user")
    assert "(--requests 600 for 30 users)" in said[0]
    assert main([*argv[:-2], "600", "--json"]) == 0
    assert not any("fewer than 20" in n for n in json.loads(capsys.readouterr().out)["simulated"]["notes"])


def test_without_requests_a_sweep_of_fixed_users_runs_long_enough_for_steady_state(capsys):
    """The engineer's walks: `simulate --sweep 121,122` at the default 200 requests said 121 users miss the
    objectives (TTFT 9.71 s, every user's only request starting at once) where the most-users answer says 121 meet
    them, and only a note said why. Without --requests it now runs 20 per user at the most users asked, and its
    table gives TPOT's p90 beside its p50 (the objective is read at 90% of requests)."""
    from engine.cli import main
    from engine.commands.loadgen import format_text

    argv = ["simulate", "--model", "llama-3.1-8b-instruct", "--gpu", "h100-sxm", "--engine", "vllm",
            "--prompt-tokens", "2048", "--output-tokens", "256", "--sweep", "121,122", "--slo-ttft", "1s",
            "--slo-tpot", "50ms", "--json"]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["spec"]["n_requests"] == 20 * 122
    assert [p["meets_slo"] for p in out["points"]] == [True, False]  # the most-users answer's 121
    assert not any("fewer than 20" in n for n in out["simulated"]["notes"])
    table = format_text(out)
    assert "TPOT p50/p90 ms" in table
    p90 = out["points"][0]["tpot_s"]["p90"] * 1e3
    assert f"/{p90:.1f}" in table


def test_the_knee_is_said_to_be_read_among_the_levels_asked(capsys):
    """An engineer's walk: `simulate --sweep 77,78,79` printed 'knee: 79 users meets the SLOs' and a knee interval
    of levels, read as the limit where the most-users answer is 121."""
    from engine.cli import main

    argv = ["simulate", "--model", "llama-3.1-8b-instruct", "--gpu", "h100-sxm", "--sweep", "77,78,79",
            "--prompt-tokens", "2048", "--output-tokens", "256", "--slo-ttft", "1s", "--slo-tpot", "50ms"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "among the levels asked" in out and "--solve max-users` searches every count" in out
