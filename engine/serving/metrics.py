"""Prometheus metrics of one server (prometheus-client, text exposition format at GET /metrics).

Names follow Prometheus' conventions (base units, `_total` counters, `_seconds` histograms) and mirror what
vLLM exports (`vllm:time_to_first_token_seconds`, `vllm:inter_token_latency_seconds`, running/waiting gauges,
KV usage), so a dashboard built for one reads the other with a renamed prefix. Times are taken on the server
between receiving the request and writing each streamed chunk. Each app has its own registry, so several
servers in one process (tests) do not collide.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

disable_created_metrics()  # the `_created` timestamp series double the output and no dashboard reads them

PREFIX = "inference_lab"
# Buckets: vLLM's TTFT and ITL buckets (vllm/engine/runtime/metrics.py), wide enough for a 2-core CPU.
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
)


class ServerMetrics:
    def __init__(self, model: str, snapshot: Callable[[], object]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            f"{PREFIX}_requests",
            "HTTP requests to the generation endpoints, by endpoint and status",
            ["endpoint", "status"],
            registry=r,
        )
        self.output_tokens = Counter(
            f"{PREFIX}_output_tokens", "generated tokens returned to clients", ["model"], registry=r
        )
        self.prompt_tokens = Counter(
            f"{PREFIX}_prompt_tokens", "prompt tokens prefilled", ["model"], registry=r
        )
        self.ttft = Histogram(
            f"{PREFIX}_time_to_first_token_seconds",
            "request received -> first token sent",
            ["model"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            f"{PREFIX}_inter_token_latency_seconds",
            "gap between successive streamed chunks",
            ["model"],
            buckets=ITL_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            f"{PREFIX}_e2e_request_latency_seconds",
            "request received -> last token sent",
            ["model"],
            buckets=E2E_BUCKETS,
            registry=r,
        )
        self.model = model
        running = Gauge(f"{PREFIX}_requests_running", "requests in the running batch", ["model"], registry=r)
        waiting = Gauge(f"{PREFIX}_requests_waiting", "requests queued for a slot", ["model"], registry=r)
        kv = Gauge(
            f"{PREFIX}_kv_cache_bytes_in_use",
            "bytes of the padded KV cache tensors (measured)",
            ["model"],
            registry=r,
        )
        budget = Gauge(f"{PREFIX}_kv_cache_budget_bytes", "the scheduler's KV budget", ["model"], registry=r)
        # read at scrape time from the scheduler's snapshot: never stale, nothing to update on the hot path
        running.labels(model).set_function(lambda: len(snapshot().running))
        waiting.labels(model).set_function(lambda: len(snapshot().waiting))
        kv.labels(model).set_function(lambda: snapshot().kv_bytes_in_use)
        budget.labels(model).set_function(lambda: snapshot().kv_budget_bytes)

    def observe_request(self, endpoint: str, status: int) -> None:
        self.requests.labels(endpoint, str(status)).inc()

    def observe_done(self, prompt_tokens: int, output_tokens: int, e2e_s: float) -> None:
        self.prompt_tokens.labels(self.model).inc(prompt_tokens)
        self.output_tokens.labels(self.model).inc(output_tokens)
        self.e2e.labels(self.model).observe(e2e_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)
