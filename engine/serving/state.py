"""What one server holds (the model, its scheduler, limits, key, metrics, recent timings) and the checks every
handler shares. Named `ServerState` and reached as `request.app.state.serving`; handlers call it `state`."""

from __future__ import annotations

import hmac
import threading
from dataclasses import dataclass, field

from fastapi import Request

from engine.batching.scheduler import Scheduler
from engine.runtime.models import LoadedModel
from engine.serving.metrics import ServerMetrics
from engine.serving.protocol import Limits, RequestError
from engine.serving.timings import RecentTimings


@dataclass
class ServerState:
    lm: LoadedModel
    scheduler: Scheduler
    served_name: str
    limits: Limits
    api_key: str | None
    metrics: ServerMetrics
    timings: RecentTimings = field(default_factory=RecentTimings)
    in_system: int = 0  # requests admitted and not yet finished (only touched on the event loop)
    tokenizer_lock: threading.Lock = field(
        default_factory=threading.Lock
    )  # fast tokenizers: one caller at a time

    @property
    def capacity(self) -> int:
        return self.scheduler.max_batch + self.limits.max_queue

    def check_key(self, request: Request) -> None:
        if self.api_key is None:
            return
        got = request.headers.get("authorization", "")
        if not hmac.compare_digest(got.encode(), f"Bearer {self.api_key}".encode()):
            raise RequestError(
                401,
                "missing or wrong API key: send 'Authorization: Bearer <key>' (the server's "
                "INFERENCE_LAB_API_KEY)",
                kind="authentication_error",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )


def state_of(request: Request) -> ServerState:
    return request.app.state.serving
