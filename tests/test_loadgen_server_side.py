"""The load generator's view of the server's side: /metrics scraped before and after a run (vLLM's names; absent
metrics are absent), per-request server timings joined by the response id, and the client TTFT split into queue,
prefill and transport whose parts add up. Hand-made records for the arithmetic, a real run for the join."""

from __future__ import annotations

import math

import pytest

from engine.loadgen.client import RequestRecord
from engine.loadgen.server_side import breakdown, delta, join, metrics_url, scrape
from engine.loadgen.sweep import run_once
from engine.loadgen.workload import SLO, LoadSpec
from engine.serving.runner import ServerThread, ServeSpec, build

NO_SLO = SLO(ttft_s=None, tpot_s=None)


def _rec(i: int, rid: str | None, ttft: float, ok: bool = True) -> RequestRecord:
    r = RequestRecord(i, 0.0, 4, ok=ok, request_id=rid)
    r.ttft_s, r.e2e_s, r.chunk_times = ttft, ttft + 0.1, [ttft, ttft + 0.1]
    return r


def test_breakdown_parts_sum_to_the_client_ttft():
    recs = [
        _rec(0, "a", 0.50),
        _rec(1, "b", 0.30),
        _rec(2, "c", 0.9),
        _rec(3, None, 0.2),
        _rec(4, "e", 1, ok=False),
    ]
    timings = {
        "a": {"id": "a", "queue_s": 0.10, "prefill_s": 0.25},
        "b": {"id": "b", "queue_s": 0.0, "prefill_s": 0.05},
        "c": {"id": "c", "queue_s": None, "prefill_s": 0.05},  # cancelled while queued: no phases, not joined
        "e": {"id": "e", "queue_s": 0.1, "prefill_s": 0.1},  # the client saw it fail: not joined
    }
    parts = join(recs, timings)
    assert [p.request_id for p in parts] == ["a", "b"]
    assert parts[0].transport_s == pytest.approx(0.15) and parts[1].transport_s == pytest.approx(0.25)
    b = breakdown(parts, completed=4)
    assert b.joined == 2 and b.completed == 4
    assert (b.ttft_s, b.queue_s, b.prefill_s, b.transport_s) == pytest.approx((0.4, 0.05, 0.15, 0.2))
    assert b.queue_s + b.prefill_s + b.transport_s == pytest.approx(b.ttft_s)
    assert breakdown(join(recs, {}), completed=4) is None  # a server without timings: no breakdown


def test_metrics_delta_reads_vllm_names_and_leaves_out_what_is_missing():
    before = {
        "vllm:request_queue_time_seconds_sum": 1.0,
        "vllm:request_queue_time_seconds_count": 2.0,
        "vllm:generation_tokens_total": 10.0,
        "vllm:request_success_total{finished_reason=length}": 2.0,
    }
    after = {
        "vllm:request_queue_time_seconds_sum": 2.5,
        "vllm:request_queue_time_seconds_count": 5.0,
        "vllm:generation_tokens_total": 40.0,
        "vllm:request_success_total{finished_reason=length}": 5.0,
        "vllm:request_success_total{finished_reason=abort}": 0.0,
    }
    d = delta(before, after)
    assert d.means == {"queue_s": pytest.approx(0.5)}  # 1.5 s over 3 requests; no TTFT metric, no TTFT mean
    assert d.counts == {"generation_tokens": 30.0} and d.finished == {"length": 3.0}
    assert delta(None, after) is None
    assert metrics_url("http://h:8000/v1") == "http://h:8000/metrics"


def test_a_server_without_metrics_or_timings_still_runs():
    dead = LoadSpec(
        base_url="http://127.0.0.1:9/v1", model="m", mode="concurrency", n_requests=1, timeout_s=5
    )
    assert scrape(dead.base_url) is None
    m = run_once(dead, NO_SLO)
    assert m.server is None and m.ttft_breakdown is None and m.errors == {"connect": 1}


def test_a_run_against_the_engine_joins_every_request(tiny_lm):
    app, sched = build(ServeSpec(model=tiny_lm.name), tiny_lm)
    with ServerThread(app, scheduler=sched) as srv:
        spec = LoadSpec(
            base_url=srv.base_url,
            model=tiny_lm.name,
            mode="concurrency",
            concurrency=2,
            n_requests=4,
            output_tokens=5,
        )
        m = run_once(spec, NO_SLO)
    assert m.completed == 4
    b = m.ttft_breakdown
    assert b is not None and b.joined == 4 == b.completed
    assert (
        b.queue_s >= 0
        and b.prefill_s >= 0
        and math.isclose(b.queue_s + b.prefill_s + b.transport_s, b.ttft_s)
    )
    assert b.ttft_s == pytest.approx(m.ttft_s.mean)  # every completed request joined: the same mean TTFT
    assert m.server is not None
    assert m.server.counts["generation_tokens"] == 20 and m.server.finished == {"length": 4}
    assert {"ttft_s", "queue_s", "prefill_s", "decode_s", "e2e_s"} <= set(m.server.means)


def test_gamma_bursts_keep_the_rate_and_change_the_spread():
    import itertools
    import statistics

    from engine.loadgen.workload import LoadSpecError, plan

    def gaps(burstiness: float) -> list[float]:
        spec = LoadSpec(base_url="http://x/v1", model="m", rate=4.0, n_requests=4000, burstiness=burstiness)
        times = [r.send_at_s for r in plan(spec)]
        return [b - a for a, b in itertools.pairwise(times)]

    for b in (0.25, 1.0, 4.0):
        g = gaps(b)
        assert statistics.mean(g) == pytest.approx(0.25, rel=0.1)  # the same mean rate at every burstiness
        cv = statistics.stdev(g) / statistics.mean(g)
        assert cv == pytest.approx(1 / math.sqrt(b), rel=0.15)  # Gamma(k): coefficient of variation 1/sqrt(k)
    assert gaps(0.5) == gaps(0.5)  # seeded
    with pytest.raises(LoadSpecError, match="burstiness"):
        LoadSpec(base_url="http://x/v1", model="m", burstiness=0).validate()
