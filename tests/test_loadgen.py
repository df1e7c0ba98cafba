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
from engine.loadgen.sweep import run_once, run_sweep, to_json
from engine.loadgen.workload import SLO, LoadSpec, LoadSpecError, load_prompts, plan
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
    assert "knee: 2 users" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["spec"]["model"] == tiny_lm.name and len(data["points"]) == 2  # model found at GET /v1/models
    assert main(["loadgen", "--url", "http://127.0.0.1:9/v1"]) == 2  # a clear error, not a traceback


def test_loadgen_knows_nothing_of_the_engine():
    """It must work against any endpoint: from the engine it imports only the standard-library helpers of
    engine.core (statistics, the JSON-safe writer)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "engine" / "loadgen"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("engine"):
                names = {a.name for a in node.names}
                assert (
                    node.module in ("engine.core.stats", "engine.core.jsonsafe")
                    or (node.module == "engine.core" and names <= {"stats", "jsonsafe"})
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
