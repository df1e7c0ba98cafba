"""The FastAPI application: OpenAI-compatible endpoints (engine.serving.routes) over one shared in-flight Scheduler.

Admission: at most `scheduler.max_batch` requests run and `limits.max_queue` wait; one more gets 429 with
Retry-After (the same contract as OpenAI's rate limits). A client that goes away (stream or not) has its request
cancelled, which the scheduler honours at the next token boundary, freeing the slot and its KV rows.
"""

from __future__ import annotations

import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.routing import Match

from engine.batching.scheduler import Scheduler
from engine.serving.metrics import ServerMetrics
from engine.serving.protocol import Limits, RequestError
from engine.serving.routes import error_response, router
from engine.serving.state import ServerState

UNTIMED = ("/metrics", "/health")  # probes: vLLM's dashboards leave them out of the HTTP request panels


class HttpMetrics:
    """ASGI middleware: every HTTP request by method, status class and route template, and its duration up to the
    last byte of the body (a stream included), as prometheus-fastapi-instrumentator records them for vLLM."""

    def __init__(self, app, metrics: ServerMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] in UNTIMED:
            await self.app(scope, receive, send)
            return
        t0, status = time.perf_counter(), 500

        async def timed_send(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            handler = next(
                (r.path for r in router.routes if r.matches(scope)[0] == Match.FULL),  # type: ignore[attr-defined]
                "none",
            )
            self.metrics.observe_http(scope["method"], handler, status, time.perf_counter() - t0)


async def _on_request_error(_request: Request, exc: RequestError) -> JSONResponse:
    return error_response(exc)


def create_app(
    scheduler: Scheduler,
    *,
    served_name: str | None = None,
    limits: Limits | None = None,
    api_key: str | None = None,
) -> FastAPI:
    """The app over a scheduler and the model it already holds (the caller owns both and closes the scheduler)."""
    lm = scheduler.lm
    name = served_name or lm.name
    metrics = ServerMetrics(name, scheduler.snapshot, max_model_len=lm.context_length)
    state = ServerState(lm, scheduler, name, limits or Limits(), api_key or None, metrics)
    app = FastAPI(title="Inference Lab OpenAI-compatible server", version="1", docs_url=None, redoc_url=None)
    app.state.serving = state
    app.add_exception_handler(RequestError, _on_request_error)  # type: ignore[arg-type]
    app.include_router(router)
    app.add_middleware(HttpMetrics, metrics=metrics)
    return app
