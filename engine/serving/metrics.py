"""Prometheus metrics of one server (prometheus-client, text exposition format at GET /metrics).

Two families side by side:
- the engine's own `inference_lab_*` (requests by endpoint and status, tokens, TTFT/ITL/E2E, KV bytes);
- vLLM's names, labels, units and buckets (vllm/v1/metrics/loggers.py, PrometheusStatLogger): labels
  `model_name` and `engine` ("0": one engine core), `vllm:request_success_total` also by `finished_reason`
  (stop, length, abort, error), histograms in seconds with vLLM's bucket lists, `vllm:kv_cache_usage_perc` as a
  fraction (1 = full), and the HTTP metrics vLLM's API server gets from prometheus-fastapi-instrumentator
  (`http_requests_total`, `http_request_duration_seconds`). So vLLM's Grafana dashboards
  (examples/observability/dashboards/grafana) and tools that scrape vLLM (AIPerf, GuideLLM) read this server
  unchanged. `vllm:time_per_output_token_seconds` is vLLM's older name for the inter-token latency (deprecated
  in vLLM 0.11, shown there behind --show-hidden-metrics-for-version): the same observations, for older dashboards.

Where a vLLM metric has no counterpart here it still exists with an honest value: this scheduler never preempts
(it waits for memory), has no prefix cache, and computes every prompt token locally, so those counters stay 0.
TTFT and ITL are taken on the server between receiving the request and writing each streamed chunk; queue,
prefill and decode come from the scheduler's own timestamps (engine.serving.timings). Each app has its own
registry, so several servers in one process (tests) do not collide.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from engine.serving.timings import RequestTimings

disable_created_metrics()  # the `_created` timestamp series double the output and no dashboard reads them

PREFIX = "inference_lab"
# Buckets: vLLM's (vllm/v1/metrics/loggers.py), wide enough for a 2-core CPU.
# fmt: off
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)
E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)
# fmt: on


VLLM_LABELS = ("model_name", "engine")
ENGINE_INDEX = "0"  # one engine core (vLLM numbers its data-parallel engines from 0)
FINISHED_REASONS = ("stop", "length", "abort", "error")  # vLLM's FinishReason, as str(reason) writes them
ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
HTTP_BUCKETS = (
    0.1,
    0.5,
    1.0,
)  # prometheus-fastapi-instrumentator's default for http_request_duration_seconds


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to max_value (vLLM's buckets for token counts, up to the context length)."""
    out: list[int] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_value:
                return out
            out.append(m * scale)
        scale *= 10


def vllm_finished_reason(stop_reason: str | None) -> str:
    """The engine's stop reason in vLLM's vocabulary: eos and stop strings are 'stop', a cancel is 'abort'."""
    return {"eos": "stop", "stop": "stop", "length": "length", "cancelled": "abort"}.get(
        stop_reason or "", "error"
    )


class ServerMetrics:
    def __init__(self, model: str, snapshot: Callable[[], object], max_model_len: int = 2048) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.model = model
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
        self.vllm = VllmMetrics(r, model, snapshot, max_model_len)
        self.http_requests = Counter(
            "http_requests",
            "Total number of requests by method, status and handler.",
            ["method", "status", "handler"],
            registry=r,
        )
        self.http_duration = Histogram(
            "http_request_duration_seconds",
            "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important.",
            ["method", "handler"],
            buckets=HTTP_BUCKETS,
            registry=r,
        )

    def observe_request(self, endpoint: str, status: int) -> None:
        self.requests.labels(endpoint, str(status)).inc()

    def observe_http(self, method: str, handler: str, status: int, seconds: float) -> None:
        """One HTTP request as prometheus-fastapi-instrumentator records it (status grouped as 2xx, 4xx, ...)."""
        self.http_requests.labels(method, f"{status // 100}xx", handler).inc()
        self.http_duration.labels(method, handler).observe(seconds)

    def observe_first_token(self, ttft_s: float) -> None:
        self.ttft.labels(self.model).observe(ttft_s)
        self.vllm.ttft.observe(ttft_s)

    def observe_gap(self, itl_s: float) -> None:
        self.itl.labels(self.model).observe(itl_s)
        self.vllm.itl.observe(itl_s)
        self.vllm.tpot_old.observe(itl_s)

    def observe_done(self, prompt_tokens: int, output_tokens: int, e2e_s: float) -> None:
        self.prompt_tokens.labels(self.model).inc(prompt_tokens)
        self.output_tokens.labels(self.model).inc(output_tokens)
        self.e2e.labels(self.model).observe(e2e_s)

    def observe_finished(self, t: RequestTimings, max_tokens: int | None = None) -> None:
        """A request that reached the scheduler has ended (any reason): vLLM's per-request figures."""
        self.vllm.finished(t, max_tokens)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class VllmMetrics:
    """vLLM's Prometheus metrics (names, label names, buckets: vllm/v1/metrics/loggers.py), bound to this server's
    one model and engine index."""

    def __init__(
        self, r: CollectorRegistry, model: str, snapshot: Callable[[], object], max_model_len: int
    ) -> None:
        labels = (model, ENGINE_INDEX)

        def hist(name: str, doc: str, buckets) -> Histogram:
            return Histogram(name, doc, VLLM_LABELS, buckets=tuple(buckets), registry=r).labels(*labels)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, VLLM_LABELS, registry=r).labels(*labels)

        def gauge(name: str, doc: str, fn: Callable[[], float]) -> None:
            Gauge(name, doc, VLLM_LABELS, registry=r).labels(*labels).set_function(fn)

        gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            lambda: len(snapshot().running),
        )
        gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            lambda: len(snapshot().waiting),
        )
        waiting_by = Gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of requests waiting, by reason (capacity: for a batch slot or KV memory).",
            (*VLLM_LABELS, "reason"),
            registry=r,
        )
        waiting_by.labels(*labels, "capacity").set_function(lambda: len(snapshot().waiting))
        waiting_by.labels(*labels, "deferred").set(0)  # nothing here holds a request back for another reason
        gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            lambda: _kv_usage(snapshot()),
        )
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prefix_queries = counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
        )
        self.prefix_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        by_source = Counter(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source (local_compute, local_cache_hit, external_kv_transfer).",
            (*VLLM_LABELS, "source"),
            registry=r,
        )
        self.prompt_computed = by_source.labels(*labels, "local_compute")
        for source in ("local_cache_hit", "external_kv_transfer"):
            by_source.labels(*labels, source)  # exported at 0: no prefix cache, no KV connector
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            (*VLLM_LABELS, "finished_reason"),
            registry=r,
        )
        self.success = {reason: success.labels(*labels, reason) for reason in FINISHED_REASONS}
        token_buckets = build_1_2_5_buckets(max_model_len)
        self.prompt_len = hist(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_buckets
        )
        self.output_len = hist(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", token_buckets
        )
        self.max_tokens = hist(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", token_buckets
        )
        self.ttft = hist(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS
        )
        self.itl = hist(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS
        )
        self.tpot_old = hist(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
            ITL_BUCKETS,
        )
        self.tpot = hist(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            ITL_BUCKETS,
        )
        self.e2e = hist(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", E2E_BUCKETS
        )
        self.queue = hist(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            E2E_BUCKETS,
        )
        self.inference = hist(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            E2E_BUCKETS,
        )
        self.prefill = hist(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            E2E_BUCKETS,
        )
        self.decode = hist(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            E2E_BUCKETS,
        )

    def finished(self, t: RequestTimings, max_tokens: int | None = None) -> None:
        self.success[t.finished_reason if t.finished_reason in self.success else "error"].inc()
        self.prompt_tokens.inc(t.prompt_tokens)
        self.prompt_computed.inc(t.prompt_tokens)
        self.generation_tokens.inc(t.output_tokens)
        self.prompt_len.observe(t.prompt_tokens)
        self.output_len.observe(t.output_tokens)
        if max_tokens:
            self.max_tokens.observe(max_tokens)
        for hist, value in (
            (self.e2e, t.e2e_s),
            (self.queue, t.queue_s),
            (self.prefill, t.prefill_s),
            (self.decode, t.decode_s),
            (self.inference, t.inference_s),
        ):
            if math.isfinite(value):  # a request cancelled while queued never had a prefill or decode
                hist.observe(value)
        if t.output_tokens >= 1 and math.isfinite(t.decode_s):
            self.tpot.observe(t.tpot_s)


def _kv_usage(snap) -> float:
    """The running rows' KV window over the scheduler's budget: vLLM's fraction of KV blocks in use."""
    budget = snap.kv_budget_bytes
    return min(1.0, snap.kv_bytes_in_use / budget) if budget else 0.0
