"""What the server says about a run, for any OpenAI-compatible server: its Prometheus /metrics scraped before and
after (vLLM's names; whatever a server does not export is simply absent), and, where the server keeps them
(this engine's `GET /v1/requests/timings`), per-request queue and prefill seconds joined to the client's records by
the response id.

The TTFT breakdown per request: client TTFT = queue + prefill + transport, where queue and prefill are the
server's (waiting for a batch slot; admitted -> first token) and transport is the rest: the network both ways, the
server's HTTP handling and tokenizing, and writing the first chunk. Means add up (percentiles do not), so a run's
breakdown is the mean of each part over the joined requests, and the parts sum to their mean client TTFT.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx2 as httpx
from prometheus_client.parser import text_string_to_metric_families

from engine.loadgen.client import RequestRecord, headers

# vLLM's histograms whose run means the summary reports (name -> short key), and its counters
HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": "ttft_s",
    "vllm:inter_token_latency_seconds": "itl_s",
    "vllm:e2e_request_latency_seconds": "e2e_s",
    "vllm:request_queue_time_seconds": "queue_s",
    "vllm:request_prefill_time_seconds": "prefill_s",
    "vllm:request_decode_time_seconds": "decode_s",
}
COUNTERS = {
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:generation_tokens_total": "generation_tokens",
    "vllm:num_preemptions_total": "preemptions",
}
SUCCESS = "vllm:request_success_total"
Sample = dict[str, float]  # "name{sorted labels}" -> value


def metrics_url(base_url: str) -> str:
    """/metrics at the server's root (vLLM, SGLang and this engine serve it beside /v1)."""
    u = urlsplit(base_url)
    return f"{u.scheme}://{u.netloc}/metrics"


def scrape(base_url: str, api_key: str | None = None, timeout: float = 10.0) -> Sample | None:
    """Every sample of the server's /metrics summed over labels other than the finish reason, or None when the
    server has no Prometheus endpoint (or it cannot be read)."""
    try:
        r = httpx.get(metrics_url(base_url), headers=headers(api_key), timeout=timeout)
        if r.status_code != 200:
            return None
        out: Sample = {}
        for fam in text_string_to_metric_families(r.text):
            for s in fam.samples:
                key = s.name
                if s.name.endswith("_bucket"):
                    continue
                if "finished_reason" in s.labels:
                    key = f"{s.name}{{finished_reason={s.labels['finished_reason']}}}"
                out[key] = out.get(key, 0.0) + s.value
        return out
    except (httpx.HTTPError, ValueError):
        return None


@dataclass(frozen=True)
class ServerMetricsDelta:
    """The server's own figures over one run (after - before): run means of vLLM's histograms, counter
    increments, finished requests by reason. Keys present only where the server exports the metric."""

    means: dict[str, float]  # e.g. "queue_s" -> mean seconds over the requests the server finished in the run
    counts: dict[str, float]  # e.g. "generation_tokens" -> tokens in the run
    finished: dict[str, float]  # finished_reason -> requests


def delta(before: Sample | None, after: Sample | None) -> ServerMetricsDelta | None:
    if not before or not after:
        return None
    d = {k: v - before.get(k, 0.0) for k, v in after.items()}
    means = {}
    for name, key in HISTOGRAMS.items():
        n = d.get(f"{name}_count")
        if n and n > 0 and f"{name}_sum" in d:
            means[key] = d[f"{name}_sum"] / n
    counts = {key: d[name] for name, key in COUNTERS.items() if name in d}
    prefix = SUCCESS + "{finished_reason="
    finished = {k[len(prefix) : -1]: v for k, v in d.items() if k.startswith(prefix) and v > 0}
    return ServerMetricsDelta(means, counts, finished)


def fetch_timings(base_url: str, api_key: str | None = None, timeout: float = 10.0) -> dict[str, dict]:
    """The server's recent per-request timings by id; empty where the server keeps none (vLLM answers 404)."""
    try:
        r = httpx.get(
            base_url.rstrip("/") + "/requests/timings",
            params={"limit": 1024},
            headers=headers(api_key),
            timeout=timeout,
        )
        if r.status_code != 200:
            return {}
        return {t["id"]: t for t in r.json().get("data", []) if isinstance(t, dict) and "id" in t}
    except (httpx.HTTPError, ValueError, AttributeError):
        return {}


@dataclass(frozen=True)
class TTFTParts:
    """One request's client TTFT split into the server's queue and prefill and the rest (transport)."""

    index: int
    request_id: str
    ttft_s: float
    queue_s: float
    prefill_s: float

    @property
    def transport_s(self) -> float:
        return self.ttft_s - self.queue_s - self.prefill_s


def join(records: Sequence[RequestRecord], timings: dict[str, dict]) -> list[TTFTParts]:
    """Completed records whose id the server has timings for (with a queue and a prefill)."""
    out = []
    for r in records:
        t = timings.get(r.request_id or "")
        if not r.ok or t is None:
            continue
        q, p = t.get("queue_s"), t.get("prefill_s")
        if (
            isinstance(q, int | float)
            and isinstance(p, int | float)
            and math.isfinite(q)
            and math.isfinite(p)
        ):
            out.append(TTFTParts(r.index, r.request_id or "", r.ttft_s, float(q), float(p)))
    return out


@dataclass(frozen=True)
class TTFTBreakdown:
    """Mean seconds per part over the joined requests; queue + prefill + transport == ttft (means add up)."""

    joined: int  # requests with server timings
    completed: int  # requests the client completed
    ttft_s: float
    queue_s: float
    prefill_s: float
    transport_s: float


def breakdown(parts: Sequence[TTFTParts], completed: int) -> TTFTBreakdown | None:
    if not parts:
        return None
    n = len(parts)

    def mean(values) -> float:
        return sum(values) / n

    return TTFTBreakdown(
        joined=n,
        completed=completed,
        ttft_s=mean(p.ttft_s for p in parts),
        queue_s=mean(p.queue_s for p in parts),
        prefill_s=mean(p.prefill_s for p in parts),
        transport_s=mean(p.transport_s for p in parts),
    )
