"""The server's vLLM-compatible metrics and per-request timings: /metrics parsed with prometheus_client's own
parser, every metric vLLM's Grafana "Overview" dashboard queries present with its type and labels (the list is
data, tests/data/vllm_overview_dashboard_metrics.json, with its source), vLLM's buckets, and the request id that
joins a response to its server-side queue, prefill and decode seconds. Nothing here depends on speed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import httpx2 as httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.serving.metrics import build_1_2_5_buckets, vllm_finished_reason
from engine.serving.runner import ServerThread, ServeSpec, build

DASHBOARD = json.loads((Path(__file__).parent / "data" / "vllm_overview_dashboard_metrics.json").read_text())
GUARD_S = 60  # failure guard only
ASKED = {  # the names this server promises, with their Prometheus types
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:time_per_output_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
}


@pytest.fixture(scope="module")
def server(tiny_lm):
    app, sched = build(ServeSpec(model=tiny_lm.name), tiny_lm)
    srv = ServerThread(app, scheduler=sched).start()
    yield srv
    srv.stop()


def _root(srv) -> str:
    return srv.base_url.removesuffix("/v1")


def _stream(srv, model: str, max_tokens: int = 5) -> tuple[str, str]:
    """One streamed completion; returns (X-Request-Id header, the chunks' id)."""
    body = {
        "model": model,
        "prompt": "Hello there",
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.stream("POST", srv.base_url + "/completions", json=body, timeout=GUARD_S) as r:
        assert r.status_code == 200
        ids = {json.loads(line[5:])["id"] for line in r.iter_lines() if line.startswith("data: {")}
    assert len(ids) == 1
    return r.headers["x-request-id"], ids.pop()


def _families(srv) -> dict:
    text = httpx.get(_root(srv) + "/metrics", timeout=GUARD_S).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_every_metric_the_vllm_overview_dashboard_queries_is_served(server, tiny_lm):
    _stream(server, tiny_lm.name)
    fams = _families(server)
    missing = []
    for m in DASHBOARD["metrics"]:
        if "not_applicable" in m or "not_exported" in m:
            assert m["family"] not in fams, f"{m['family']} is served now: drop its exception from the data"
            continue
        fam = fams.get(m["family"])
        if fam is None:
            missing.append(m["family"])
            continue
        assert fam.type == m["type"], (m["family"], fam.type)
        names = (
            {m["series"]}
            if m["type"] != "histogram"
            else {m["series"] + s for s in ("_bucket", "_sum", "_count")}
        )
        samples = [s for s in fam.samples if s.name in names]
        assert {s.name for s in samples} == names, (m["family"], {s.name for s in fam.samples})
        for s in samples:
            assert set(m["labels"]) <= set(s.labels), (s.name, s.labels)
            if "model_name" in m["labels"]:
                assert s.labels["model_name"] == tiny_lm.name and s.labels["engine"] == "0"
    assert not missing, f"the dashboard queries {missing}, which /metrics does not serve"
    # the only exceptions are the ones the data file explains
    assert {m["family"] for m in DASHBOARD["metrics"] if "not_exported" in m} == {
        "vllm:iteration_tokens_total"
    }


def test_vllm_names_types_labels_and_buckets(server, tiny_lm):
    _stream(server, tiny_lm.name, max_tokens=4)
    fams = _families(server)
    for name, kind in ASKED.items():
        assert name in fams and fams[name].type == kind, name
        for s in fams[name].samples:
            assert s.labels["model_name"] == tiny_lm.name and s.labels["engine"] == "0"
    le = [
        s.labels["le"] for s in fams["vllm:time_to_first_token_seconds"].samples if s.name.endswith("_bucket")
    ]
    assert le[:3] == ["0.001", "0.005", "0.01"] and le[-2:] == ["2560.0", "+Inf"]
    le = [
        s.labels["le"] for s in fams["vllm:request_queue_time_seconds"].samples if s.name.endswith("_bucket")
    ]
    assert le[0] == "0.3" and le[-2] == "7680.0"
    reasons = {s.labels["finished_reason"] for s in fams["vllm:request_success"].samples}
    assert reasons == {"stop", "length", "abort", "error"}
    length = next(
        s.value
        for s in fams["vllm:request_success"].samples
        if s.labels["finished_reason"] == "length" and s.name == "vllm:request_success_total"
    )
    assert length >= 1
    # the deprecated name carries the same observations as its replacement
    count = {
        n: next(s.value for s in fams[n].samples if s.name.endswith("_count"))
        for n in ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
    }
    assert len(set(count.values())) == 1 and count["vllm:inter_token_latency_seconds"] >= 3
    usage = next(s.value for s in fams["vllm:kv_cache_usage_perc"].samples)
    assert 0.0 <= usage <= 1.0
    http = fams["http_requests"].samples
    assert any(s.labels["handler"] == "/v1/completions" and s.labels["status"] == "2xx" for s in http)


def test_the_response_id_joins_the_server_timings(server, tiny_lm):
    header, chunk_id = _stream(server, tiny_lm.name, max_tokens=6)
    assert header == chunk_id and chunk_id.startswith("cmpl-")
    t = httpx.get(f"{server.base_url}/requests/{chunk_id}/timings", timeout=GUARD_S).json()
    assert t["id"] == chunk_id and t["finished_reason"] == "length" and t["output_tokens"] == 6
    for k in ("handling_s", "queue_s", "prefill_s", "decode_s", "e2e_s", "ttft_s"):
        assert t[k] is not None and t[k] >= 0, k
    # the scheduler's phases happen inside the server's view of the request, in order
    assert t["handling_s"] + t["queue_s"] + t["prefill_s"] <= t["ttft_s"]
    assert t["handling_s"] + t["queue_s"] + t["prefill_s"] + t["decode_s"] <= t["e2e_s"]
    assert math.isclose(t["inference_s"], t["prefill_s"] + t["decode_s"])
    recent = httpx.get(f"{server.base_url}/requests/timings?limit=5", timeout=GUARD_S).json()["data"]
    assert recent[-1]["id"] == chunk_id
    whole = httpx.post(
        server.base_url + "/completions",
        json={"model": tiny_lm.name, "prompt": "Hi", "max_tokens": 2, "temperature": 0},
        timeout=GUARD_S,
    )
    assert whole.headers["x-request-id"] == whole.json()["id"]
    missing = httpx.get(f"{server.base_url}/requests/cmpl-nope/timings", timeout=GUARD_S)
    assert missing.status_code == 404 and "no timings" in missing.json()["error"]["message"]


def test_finished_reasons_and_token_buckets_follow_vllm():
    assert [vllm_finished_reason(r) for r in ("eos", "stop", "length", "cancelled", None)] == [
        "stop",
        "stop",
        "length",
        "abort",
        "error",
    ]
    assert build_1_2_5_buckets(100) == [1, 2, 5, 10, 20, 50, 100]


def test_vllm_histograms_agree_with_the_per_request_timings(tiny_lm):
    """A fresh server, three requests: the histograms' sums and counts are the timings' sums, and the token
    counters the usage the responses reported."""
    app, sched = build(ServeSpec(model=tiny_lm.name), tiny_lm)
    with ServerThread(app, scheduler=sched) as srv:
        usage = []
        for n in (3, 4, 5):
            r = httpx.post(
                srv.base_url + "/completions",
                json={
                    "model": tiny_lm.name,
                    "prompt": "Count",
                    "max_tokens": n,
                    "temperature": 0,
                    "ignore_eos": True,
                },
                timeout=GUARD_S,
            )
            usage.append(r.json()["usage"])
        timings = httpx.get(srv.base_url + "/requests/timings", timeout=GUARD_S).json()["data"]
        fams = _families(srv)

    def value(family: str, sample: str) -> float:
        return next(s.value for s in fams[family].samples if s.name == sample)

    assert len(timings) == 3
    for key, family in (
        ("queue_s", "vllm:request_queue_time_seconds"),
        ("prefill_s", "vllm:request_prefill_time_seconds"),
        ("decode_s", "vllm:request_decode_time_seconds"),
        ("e2e_s", "vllm:e2e_request_latency_seconds"),
    ):
        assert value(family, family + "_count") == 3
        assert value(family, family + "_sum") == pytest.approx(
            sum(t[key] for t in timings), rel=1e-9, abs=1e-12
        )
    assert value("vllm:generation_tokens", "vllm:generation_tokens_total") == sum(
        u["completion_tokens"] for u in usage
    )
    assert value("vllm:prompt_tokens", "vllm:prompt_tokens_total") == sum(u["prompt_tokens"] for u in usage)
