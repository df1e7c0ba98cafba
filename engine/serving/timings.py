"""Per-request server-side timings: when the server received a request, and the scheduler's own timestamps for
its queue, prefill and decode (engine.batching.sequence.RequestTimes), kept for the most recent requests so a
client (the load generator) can join them to what it measured, by the response id.

Phases, as vLLM's RequestStateStats defines them (vllm/v1/metrics/stats.py): queue = admitted - arrival (waiting
for a batch slot), prefill = first token - admitted (the chunked prefill, interleaved with the running rows'
decode steps), decode = finished - first token, inference = prefill + decode. `handling_s` is what the server spent
before the scheduler saw the request (reading the body, validating, tokenizing).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass

RECENT = 1024  # requests kept; older ones are forgotten (the endpoint is bounded)


@dataclass(frozen=True)
class RequestTimings:
    id: str  # the response's id (also the X-Request-Id header)
    endpoint: str
    finished_reason: str  # vLLM's: stop | length | abort | error
    prompt_tokens: int
    output_tokens: int
    handling_s: float  # received -> handed to the scheduler
    queue_s: float
    prefill_s: float
    decode_s: float
    e2e_s: float  # received -> last byte written (the server's view of the request)
    ttft_s: float  # received -> first content chunk written

    @property
    def inference_s(self) -> float:
        return self.prefill_s + self.decode_s

    @property
    def tpot_s(self) -> float:
        """Mean time per output token after the first (vLLM's request_time_per_output_token); 0 for one token."""
        if self.output_tokens < 2:
            return 0.0
        return self.decode_s / (self.output_tokens - 1)

    def to_json(self) -> dict:
        out = asdict(self)
        out["inference_s"] = self.inference_s
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}


def phases(received: float, times, first_sent: float, end: float) -> dict[str, float]:
    """Seconds per phase from perf_counter stamps: the server's `received`, the scheduler's RequestTimes
    (arrival, admitted, first_token, finished; NaN where a phase never happened) and the HTTP writes."""
    return {
        "handling_s": times.arrival - received,
        "queue_s": times.admitted - times.arrival,
        "prefill_s": times.first_token - times.admitted,
        "decode_s": times.finished - times.first_token,
        "e2e_s": end - received,
        "ttft_s": first_sent - received,
    }


class RecentTimings:
    """The last RECENT requests' timings by id (thread-safe; oldest dropped first)."""

    def __init__(self, size: int = RECENT) -> None:
        self.size = size
        self._items: OrderedDict[str, RequestTimings] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, t: RequestTimings) -> None:
        with self._lock:
            self._items[t.id] = t
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def get(self, rid: str) -> RequestTimings | None:
        with self._lock:
            return self._items.get(rid)

    def recent(self, limit: int | None = None) -> list[RequestTimings]:
        with self._lock:
            items = list(self._items.values())
        return items if limit is None else items[-limit:]
