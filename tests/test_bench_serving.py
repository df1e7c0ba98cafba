"""The serving benchmarks' own arithmetic: which chunk gaps held another request's first token (bench/serving_itl.py)
and the dashboard check's verdicts (bench/vllm_dashboard.py), on hand-made data."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.serving_itl import admission_split, itl_row
from bench.vllm_dashboard import check
from engine.loadgen.client import RequestRecord


def _rec(i: int, times: list[float], ok: bool = True) -> RequestRecord:
    r = RequestRecord(i, 0.0, len(times), ok=ok)
    r.chunk_times, r.ttft_s = times, times[0]
    return r


def test_gaps_holding_another_requests_first_token_are_told_apart():
    runs = [[_rec(0, [1.0, 1.01, 1.05, 1.06]), _rec(1, [1.04, 1.05, 1.06]), _rec(2, [1.02], ok=False)]]
    during, other = admission_split(runs[0])
    assert during == pytest.approx([0.04])  # request 0's gap 1.01 -> 1.05 held request 1's first token (1.04)
    assert sorted(other) == pytest.approx([0.01, 0.01, 0.01, 0.01])  # a failed request's chunk is not counted
    row = itl_row(4, runs)
    assert row["admission_gaps"] == 1 and row["admission_gap_p50_s"] == pytest.approx(0.04)
    assert row["other_gap_p50_s"] == pytest.approx(0.01) and row["gaps"] == 5


def test_dashboard_check_verdicts():
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="m",engine="0"} 1.0\n'
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        'vllm:e2e_request_latency_seconds_bucket{model_name="m",engine="0",le="+Inf"} 1.0\n'
        'vllm:e2e_request_latency_seconds_sum{model_name="m",engine="0"} 0.5\n'
        'vllm:e2e_request_latency_seconds_count{model_name="m",engine="0"} 1.0\n'
    )
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    gauge = {"family": "vllm:num_requests_running", "series": "vllm:num_requests_running", "type": "gauge"}
    hist = {"family": "vllm:e2e_request_latency_seconds", "series": "vllm:e2e_request_latency_seconds"}
    assert check({**gauge, "labels": ["model_name"]}, fams)["verdict"] == "served"
    assert check({**gauge, "labels": ["finished_reason"]}, fams)["verdict"] == "WRONG"  # a label it groups on
    assert check({**hist, "type": "histogram", "labels": ["model_name"]}, fams)["verdict"] == "served"
    assert check({**hist, "type": "counter", "labels": []}, fams)["verdict"] == "WRONG"
    gone = {"family": "vllm:x", "series": "vllm:x", "type": "gauge", "labels": []}
    assert check(gone, fams)["verdict"] == "MISSING"
    assert (
        check({**gone, "not_exported": "no such thing here"}, fams)["verdict"] == "not exported (explained)"
    )
