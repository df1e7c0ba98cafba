"""The load generator: seeded plans, the metric formulas on hand-made records, SLO goodput and the knee, errors by
kind, and real runs against the engine's server (tiny-gpt-neo) through the CLI."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math

import pytest

from engine.core import stats
from engine.loadgen.client import RequestRecord
from engine.loadgen.metrics import good, summarize
from engine.loadgen.sweep import _run_blocking, run_once, run_sweep, to_json
from engine.loadgen.workload import SLO, LoadSpec, LoadSpecError, load_prompts, plan, sessions
from engine.serving.runner import ServerThread, ServeSpec, build


def _rec(i, start, ttft, chunk_gaps, tokens=None, ok=True, error=None):
    times = [start + ttft]
    for g in chunk_gaps:
        times.append(times[-1] + g)
    r = RequestRecord(i, start, max_tokens=len(times), ok=ok, error=error)
    if ok:
        r.ttft_s, r.e2e_s, r.chunk_times = ttft, times[-1] - start, times
        r.output_tokens, r.tokens_from_usage = tokens or len(times), True
    return r


@pytest.fixture(scope="module")
def server(tiny_lm):
    app, sched = build(ServeSpec(model=tiny_lm.name), tiny_lm)
    with ServerThread(app, scheduler=sched) as srv:
        yield srv


def test_plan_is_seeded_and_poisson():
    spec = LoadSpec(
        base_url="http://x/v1", model="m", rate=4.0, n_requests=2000, output_tokens=8, output_tokens_max=32
    )
    a, b = plan(spec), plan(spec)
    assert a == b
    assert plan(LoadSpec(base_url="http://x/v1", model="m", n_requests=5, seed=1)) != plan(
        LoadSpec(base_url="http://x/v1", model="m", n_requests=5)
    )
    gaps = [y.send_at_s - x.send_at_s for x, y in itertools.pairwise(a)]
    assert abs(sum(gaps) / len(gaps) - 1 / 4.0) < 0.03  # exponential gaps with mean 1/rate (2000 draws)
    assert {r.max_tokens for r in a} <= set(range(8, 33)) and len({r.max_tokens for r in a}) > 10
    fixed = plan(LoadSpec(base_url="http://x/v1", model="m", mode="concurrency", concurrency=3, n_requests=4))
    assert all(r.max_tokens == 64 and r.send_at_s == 0 for r in fixed)


def test_metric_formulas_on_known_records():
    # two requests: TTFT 1 s and 2 s; chunk gaps 0.1 s x 4 and 0.3 s x 2
    recs = [_rec(0, 0.0, 1.0, [0.1] * 4), _rec(1, 0.5, 2.0, [0.3, 0.3])]
    m = summarize(recs, level=1.0, mode="poisson", slo=SLO(ttft_s=1.5, tpot_s=0.2))
    assert m.completed == 2 and m.errors == {}
    assert m.wall_s == pytest.approx(3.1)  # first send 0.0, last byte 0.5 + 2.0 + 0.6
    assert m.output_tokens_per_s == pytest.approx(8 / 3.1)
    assert recs[0].tpot_s == pytest.approx(0.4 / 4) and recs[1].tpot_s == pytest.approx(
        0.6 / 2
    )  # (E2E - TTFT) / (n - 1)
    assert m.itl_s.p50 == pytest.approx(stats.percentile([0.1] * 4 + [0.3] * 2, 50))
    assert m.ttft_s.p90 == pytest.approx(stats.percentile([1.0, 2.0], 90))
    assert m.slo_attainment == 0.5 and not m.meets_slo  # request 1 misses TTFT and TPOT
    assert m.goodput_rps == pytest.approx(1 / 3.1)
    assert summarize(
        recs, level=1.0, mode="poisson", slo=SLO(ttft_s=3, tpot_s=0.5)
    ).meets_slo  # flip the SLOs


def test_errors_are_counted_by_kind_and_are_never_good():
    recs = [
        _rec(0, 0.0, 0.1, [0.1]),
        _rec(1, 0.0, 0, [], ok=False, error="http_429"),
        _rec(2, 0.0, 0, [], ok=False, error="http_429"),
        _rec(3, 0.0, 0, [], ok=False, error="timeout"),
    ]
    m = summarize(recs, level=2, mode="concurrency", slo=SLO())
    assert m.errors == {"http_429": 2, "timeout": 1} and m.completed == 1 and m.slo_attainment == 0.25
    assert not good(recs[1], SLO(ttft_s=None, tpot_s=None))


def test_bad_specs_and_prompt_files_say_what_to_fix(tmp_path):
    with pytest.raises(LoadSpecError, match="http"):
        LoadSpec(base_url="localhost:8000", model="m").validate()
    with pytest.raises(LoadSpecError, match="rate"):
        LoadSpec(base_url="http://x/v1", model="m", rate=0).validate()
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"prompt": "ok"}\nnot json\n')
    with pytest.raises(LoadSpecError, match="line 2"):
        load_prompts(str(bad))
    with pytest.raises(LoadSpecError, match="TTFT"):
        SLO(ttft_s=-1).validate()
    assert len(load_prompts(None)) >= 16


def test_run_against_the_engine_server_counts_server_tokens(server, tiny_lm):
    spec = LoadSpec(
        base_url=server.base_url,
        model=tiny_lm.name,
        mode="concurrency",
        concurrency=2,
        n_requests=4,
        output_tokens=6,
    )
    m = run_once(spec, SLO(ttft_s=None, tpot_s=None))
    assert m.completed == 4 and m.errors == {} and m.tokens_counted_by == "server usage"
    assert m.output_tokens_per_s > 0 and m.ttft_s.n == 4 and math.isfinite(m.itl_s.p50)
    chat = run_once(dataclasses.replace(spec, endpoint="chat"), SLO(ttft_s=None, tpot_s=None))
    assert chat.completed == 4


def test_sweep_knee_follows_the_slo(server, tiny_lm):
    spec = LoadSpec(
        base_url=server.base_url, model=tiny_lm.name, mode="concurrency", n_requests=3, output_tokens=4
    )
    easy = run_sweep(spec, SLO(ttft_s=600, tpot_s=600), [1, 2])
    assert easy.knee == 2 and not easy.stopped_early and len(easy.points) == 2
    impossible = run_sweep(spec, SLO(ttft_s=1e-9, tpot_s=None), [1, 2])
    assert impossible.knee is None and impossible.stopped_early and len(impossible.points) == 1
    assert to_json(easy)["spec"]["api_key"] is None


def test_unreachable_server_and_wrong_model_are_errors_by_kind(server):
    spec = LoadSpec(base_url=server.base_url, model="nope", mode="concurrency", n_requests=2, output_tokens=2)
    m = run_once(spec, SLO())
    assert m.errors == {"http_4xx": 2} and "not served" in m.first_error
    dead = LoadSpec(
        base_url="http://127.0.0.1:9/v1", model="m", mode="concurrency", n_requests=1, timeout_s=5
    )
    assert run_once(dead, SLO()).errors == {"connect": 1}


def test_cli_sweep_writes_json(server, tiny_lm, tmp_path, capsys):
    from engine.cli import main

    out = tmp_path / "r.json"
    assert (
        main(
            [
                "loadgen",
                "--url",
                server.base_url,
                "--mode",
                "concurrency",
                "--sweep",
                "1,2",
                "--requests",
                "2",
                "--output-tokens",
                "3",
                "--slo-ttft",
                "600",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "knee: 2 users" in text
    # the engine's server keeps per-request timings: the text says where each level's TTFT went, and the parts
    # printed add up to the TTFT printed
    split = [line for line in text.splitlines() if "queue" in line and "transport" in line]
    assert "TTFT split" in text and len(split) == 2
    for line in split:
        nums = [
            float(x) for x in line.split("=")[0].replace("+", " ").split() if x.replace(".", "").isdigit()
        ]
        total = float(line.split("=")[1].split()[0])
        assert sum(nums[-3:]) == pytest.approx(total, abs=0.002)
    data = json.loads(out.read_text())
    assert data["spec"]["model"] == tiny_lm.name and len(data["points"]) == 2  # model found at GET /v1/models
    assert main(["loadgen", "--url", "http://127.0.0.1:9/v1"]) == 2  # a clear error, not a traceback


def test_loadgen_knows_nothing_of_the_engine():
    """It must work against any endpoint: from the engine it imports only the standard-library helpers of
    engine.core (statistics, the JSON-safe writer, the option-based Spec and its error)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "engine" / "loadgen"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("engine"):
                names = {a.name for a in node.names}
                assert (
                    node.module
                    in ("engine.core.stats", "engine.core.jsonsafe", "engine.core.spec", "engine.core.errors")
                    or (node.module == "engine.core" and names <= {"stats", "jsonsafe", "spec", "errors"})
                    or node.module.startswith("engine.loadgen")
                ), path
                if node.module == "engine":
                    assert [a.name for a in node.names] == ["stats"], path


def test_a_run_works_where_an_event_loop_already_runs():
    """Sync playwright (the browser tests, in the same pytest process) leaves an event loop running in the main
    thread; asyncio.run refuses to start there, so a run must bring its own thread and loop."""
    import asyncio

    dead = LoadSpec(
        base_url="http://127.0.0.1:9/v1", model="m", mode="concurrency", n_requests=1, timeout_s=5
    )
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop here yet: make one run around the call

        async def inside_a_loop():
            return run_once(dead, SLO()).errors

        assert asyncio.run(inside_a_loop()) == {"connect": 1}
    else:  # a loop already runs in this thread (the session's sync playwright): the very case
        assert run_once(dead, SLO()).errors == {"connect": 1}


OLD_FLAGS = (
    "--url http://h:1/v1 --model m --api-key-env K --endpoint chat --mode concurrency --rate 2 --burstiness 0.5 "
    "--concurrency 3 --sweep 1,2 --keep-going --requests 5 --output-tokens 7 --output-tokens-max 9 "
    "--no-ignore-eos --prompts p.jsonl --seed 4 --slo-ttft 0 --slo-tpot 0.5 --slo-e2e 3 --slo-attainment 0.8 "
    "--out r.json"
)
SPEC_KEYS = {
    "base_url", "model", "api_key", "endpoint", "mode", "rate", "burstiness", "concurrency", "n_requests",
    "output_tokens", "output_tokens_max", "prompts_file", "ignore_eos", "temperature", "seed", "timeout_s",
    "prefix_tokens", "num_prefixes", "turns",
}  # fmt: skip


def test_loadgen_flags_come_from_the_spec_with_their_old_names_and_json_keys():
    """LoadSpec and SLO are option-based specs: the command's flags are built from them, every flag keeps its
    name, and a result's spec keeps its JSON keys."""
    import argparse

    from engine.commands import loadgen as cmd

    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)
    args = parser.parse_args(OLD_FLAGS.split())
    spec, slo = LoadSpec.from_args(args), SLO.from_args(args)
    assert (spec.base_url, spec.model, spec.endpoint, spec.mode, spec.concurrency) == (
        "http://h:1/v1", "m", "chat", "concurrency", 3
    )  # fmt: skip
    assert (spec.n_requests, spec.output_tokens, spec.output_tokens_max, spec.prompts_file) == (
        5,
        7,
        9,
        "p.jsonl",
    )
    assert (spec.ignore_eos, spec.seed, spec.rate, spec.burstiness) == (False, 4, 2.0, 0.5)
    assert (slo.ttft_s, slo.tpot_s, slo.e2e_s, slo.min_attainment) == (None, 0.5, 3.0, 0.8)  # 0 = none
    assert (args.sweep, args.keep_going, args.out, args.api_key_env) == ("1,2", True, "r.json", "K")
    assert set(dataclasses.asdict(spec)) == SPEC_KEYS
    assert LoadSpec.bounds("n_requests") == (1, 100_000) and LoadSpec.default("output_tokens") == 64
    with pytest.raises(LoadSpecError, match="requests"):
        LoadSpec.from_args(parser.parse_args(["--model", "m", "--requests", "0"]))
    with pytest.raises(LoadSpecError, match="endpoint"):
        LoadSpec.from_args(parser.parse_args(["--model", "m", "--endpoint", "embeddings"]))


@pytest.mark.parametrize(
    ("typed", "seconds"),
    [("0.05", 0.05), ("0.05s", 0.05), ("50ms", 0.05), ("50 ms", 0.05), ("2", 2.0), ("2S", 2.0), ("0", 0.0)],
)
def test_an_slo_flag_takes_seconds_or_a_number_with_its_unit(typed, seconds):
    """The engineer's walk: the page asks TPOT in milliseconds, --slo-tpot in seconds, and its help never said so:
    '--slo-tpot 50' meant 50 seconds. The flags take seconds or a unit ("50ms", "0.05s"), and say so."""
    import argparse

    from engine.commands import loadgen as cmd

    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)
    for flag, name in (("--slo-tpot", "tpot_s"), ("--slo-ttft", "ttft_s"), ("--slo-e2e", "e2e_s")):
        if flag == "--slo-tpot" and seconds >= 1 and not typed.lower().endswith("s"):
            continue  # a bare second or more per token is refused (the next test)
        assert getattr(parser.parse_args([flag, typed]), name) == pytest.approx(seconds)


def test_a_bare_tpot_of_a_second_or_more_is_refused_as_the_milliseconds_it_likely_meant(capsys):
    """The engineer's last walk: '--slo-tpot 50' (the page's box is in ms) ran as 50 s a token and answered 180
    users where 50 ms gives 121, with no word."""
    from engine.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["simulate", "--model", "llama-3-8b", "--slo-tpot", "50"])
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert (
        "'50' would be 50 seconds per output token; write 50ms for milliseconds (or 50s if seconds are" in err
    )
    import argparse

    from engine.commands import loadgen as cmd

    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)
    assert parser.parse_args(["--slo-tpot", "50s"]).tpot_s == 50.0  # said on purpose
    assert parser.parse_args(["--slo-ttft", "2"]).ttft_s == 2.0  # a first token's seconds stay bare


def test_a_duration_that_is_not_one_is_refused_in_a_line_that_shows_the_forms(capsys):
    from engine.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["simulate", "--model", "llama-3-8b", "--slo-tpot", "50 msec"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1
    assert "'50 msec' is not a duration: give seconds (0.05) or a number with its unit (0.05s, 50ms)" in err


def test_the_slo_help_says_its_unit_with_an_example_and_no_contradiction(capsys):
    """'TPOT objective in seconds, above 0 (0 turns it off)': above 0, yet 0 allowed. The help says the unit, an
    example in each form and what 0 does; the page's box (in ms) shows the field's own words, which name no unit."""
    from engine.cli import main

    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "above 0" not in text
    assert (
        "TPOT objective in seconds, or with a unit: 0.05, 0.05s and 50ms are all 50 milliseconds; 0 turns it off"
        in text
    )
    assert (
        "TTFT objective in seconds, or with a unit: 2, 2s and 2000ms are all two seconds; 0 turns it off"
        in text
    )
    assert "second" not in SLO.help("tpot_s") and "0 turns it off" in SLO.help("tpot_s")


def test_the_loadgen_knee_line_says_the_objectives_with_their_units():
    from engine.commands.loadgen import slo_words

    assert slo_words({"ttft_s": 2.0, "tpot_s": 0.05, "e2e_s": None, "min_attainment": 0.9}) == (
        " (TTFT <= 2 s and TPOT <= 50 ms for 90% of requests)"
    )
    assert slo_words({"ttft_s": None, "tpot_s": None, "e2e_s": None, "min_attainment": 0.9}) == ""


def test_shared_prefix_prompts_share_their_prefix_and_reach_the_server(server, tiny_lm):
    """N prompts behind num_prefixes common prefixes of P words (one token each in GPT-2's and Llama's BPE);
    the server's own prompt-token count shows the prefix arrived."""
    spec = LoadSpec(
        base_url=server.base_url,
        model=tiny_lm.name,
        mode="concurrency",
        concurrency=2,
        n_requests=6,
        output_tokens=3,
        prefix_tokens=40,
        num_prefixes=2,
    )
    reqs = plan(spec)
    heads = [r.prompt.split("\n\n")[0] for r in reqs]
    assert heads[0] != heads[1] and heads[0::2] == [heads[0]] * 3 and heads[1::2] == [heads[1]] * 3
    assert len(heads[0].split()) == 40 and len({r.prompt for r in reqs}) == 6  # distinct suffixes
    ids = tiny_lm.tokenizer(heads[0])["input_ids"]
    assert len(ids) == 41  # 40 words and the full stop
    m = run_once(spec, SLO(ttft_s=None, tpot_s=None))
    assert m.completed == 6 and m.prompt_tokens_median >= 41
    assert plan(dataclasses.replace(spec, prefix_tokens=0))[0].prompt == reqs[0].prompt.split("\n\n", 1)[1]


def test_multi_turn_sessions_send_the_conversation_and_time_each_turn(server, tiny_lm):
    """Each session's turn k sends its earlier questions and the server's answers: the prompt grows turn by turn;
    TTFT is reported per turn; a multi-turn workload needs the chat endpoint."""
    spec = LoadSpec(
        base_url=server.base_url,
        model=tiny_lm.name,
        endpoint="chat",
        mode="concurrency",
        concurrency=2,
        n_requests=6,
        output_tokens=4,
        turns=3,
    )
    convs = sessions(plan(spec))
    assert [[r.turn for r in c] for c in convs] == [[1, 2, 3], [1, 2, 3]]
    records = _run_blocking(spec)
    assert all(r.ok for r in records) and [r.turn for r in records] == [1, 2, 3, 1, 2, 3]
    for conv in (records[:3], records[3:]):
        grown = [b.prompt_tokens - a.prompt_tokens for a, b in itertools.pairwise(conv)]
        assert all(g > a.output_tokens for g, a in zip(grown, conv, strict=False))  # answer + next question
    m = run_once(spec, SLO(ttft_s=None, tpot_s=None))
    assert len(m.ttft_by_turn) == 3 and [d.n for d in m.ttft_by_turn] == [2, 2, 2]
    poisson = plan(dataclasses.replace(spec, mode="poisson", rate=5.0, n_requests=9))
    assert all(r.send_at_s == poisson[3 * (r.session)].send_at_s for r in poisson)  # turns follow answers
    with pytest.raises(LoadSpecError, match="chat"):
        dataclasses.replace(spec, endpoint="completions").validate()
