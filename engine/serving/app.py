"""The FastAPI application: OpenAI-compatible endpoints over one shared in-flight Scheduler.

Generation never runs on the event loop: the scheduler decodes in its own thread, tokenization and submission run
in a worker thread (anyio.to_thread), and each request's chunks cross into the loop through an asyncio.Queue fed
by a small pump thread. So /health, /metrics and new requests are answered while every slot is decoding.

Admission: at most `scheduler.max_batch` requests run and `limits.max_queue` wait; one more gets 429 with
Retry-After (the same contract as OpenAI's rate limits). A client that goes away (stream or not) has its request
cancelled, which the scheduler honours at the next token boundary, freeing the slot and its KV rows.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from engine.batching.scheduler import RequestHandle, Scheduler, encode_prompt
from engine.core.errors import CancelledError, EngineError
from engine.runtime.generation import check_context
from engine.runtime.models import LoadedModel
from engine.serving.metrics import ServerMetrics
from engine.serving.protocol import (
    Limits,
    ParsedRequest,
    RequestError,
    chunk,
    finish_reason,
    full_response,
    parse_chat,
    parse_completion,
    usage_chunk,
)

POLL_S = 0.25  # how often a waiting request checks whether its client is still there


@dataclass
class _State:
    lm: LoadedModel
    scheduler: Scheduler
    served_name: str
    limits: Limits
    api_key: str | None
    metrics: ServerMetrics
    in_system: int = 0  # requests admitted and not yet finished (only touched on the event loop)
    tokenizer_lock: threading.Lock = field(
        default_factory=threading.Lock
    )  # fast tokenizers: one caller at a time

    @property
    def capacity(self) -> int:
        return self.scheduler.max_batch + self.limits.max_queue


def _error(exc: RequestError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


def _sse(obj: dict | str) -> str:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj, separators=(',', ':'))}\n\n"


async def _read_json(request: Request, limit: int) -> object:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(
            413, f"the request body is {int(declared):,} bytes; this server accepts at most {limit:,}"
        )
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > limit:
            raise RequestError(
                413, f"the request body is over {limit:,} bytes, this server's limit; shorten the prompt"
            )
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(400, f"the request body is not valid JSON ({exc}); send a JSON object") from None


class _Pump:
    """Moves a RequestHandle's chunks (a blocking iterator, fed by the scheduler thread) onto the event loop."""

    def __init__(self, handle: RequestHandle, loop: asyncio.AbstractEventLoop) -> None:
        self.handle, self.loop = handle, loop
        self.queue: asyncio.Queue = asyncio.Queue()
        threading.Thread(target=self._run, name=f"pump-{handle.id}", daemon=True).start()

    def _put(self, item: tuple) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: the server is shutting down
            self.handle.cancel()

    def _run(self) -> None:
        try:
            for text in self.handle:
                self._put(("chunk", text))
            self._put(("end", self.handle.completion))
        except BaseException as exc:  # re-raised on the loop side as the request's failure
            self._put(("error", exc))

    async def events(self, request: Request) -> AsyncIterator[tuple]:
        """('chunk', text)... then ('end', completion) or ('error', exc); cancels the request if the client left."""
        while True:
            try:
                item = await asyncio.wait_for(self.queue.get(), POLL_S)
            except TimeoutError:
                if await request.is_disconnected():
                    self.handle.cancel()
                    return
                continue
            yield item
            if item[0] != "chunk":
                return
            if await request.is_disconnected():
                self.handle.cancel()
                return


def create_app(
    lm: LoadedModel,
    scheduler: Scheduler,
    *,
    served_name: str | None = None,
    limits: Limits | None = None,
    api_key: str | None = None,
) -> FastAPI:
    """The app over an already loaded model and its scheduler (the caller owns both and closes the scheduler)."""
    st = _State(
        lm,
        scheduler,
        served_name or lm.name,
        limits or Limits(),
        api_key or None,
        ServerMetrics(served_name or lm.name, scheduler.snapshot),
    )
    app = FastAPI(title="Inference Lab OpenAI-compatible server", version="1", docs_url=None, redoc_url=None)
    app.state.serving = st

    @app.exception_handler(RequestError)
    async def _on_request_error(_request: Request, exc: RequestError) -> JSONResponse:
        return _error(exc)

    def check_key(request: Request) -> None:
        if st.api_key is None:
            return
        got = request.headers.get("authorization", "")
        if not hmac.compare_digest(got.encode(), f"Bearer {st.api_key}".encode()):
            raise RequestError(
                401,
                "missing or wrong API key: send 'Authorization: Bearer <key>' (the server's "
                "INFERENCE_LAB_API_KEY)",
                kind="authentication_error",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )

    @app.get("/health")
    async def health() -> dict:
        snap = st.scheduler.snapshot()
        return {
            "status": "ok",
            "model": st.served_name,
            "running": len(snap.running),
            "waiting": len(snap.waiting),
            "admitted": st.in_system,
            "capacity": st.capacity,
        }

    @app.get("/metrics")
    async def metrics() -> Response:
        body = await anyio.to_thread.run_sync(st.metrics.render)
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/models")
    async def list_models(request: Request) -> dict:
        check_key(request)
        return {
            "object": "list",
            "data": [
                {
                    "id": st.served_name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "inference-lab",
                    "max_model_len": st.lm.context_length,
                }
            ],
        }

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await _generate(request, "completions")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await _generate(request, "chat")

    def submit(req: ParsedRequest) -> tuple[RequestHandle, int]:
        """Tokenize and queue (in a worker thread); returns the handle and the prompt's token count."""
        with st.tokenizer_lock:
            if req.kind == "chat":
                if not st.lm.has_chat_template:
                    raise RequestError(
                        400, f"{st.lm.name} has no chat template: use /v1/completions with a raw prompt"
                    )
                rendered = st.lm.tokenizer.apply_chat_template(
                    list(req.messages), add_generation_prompt=True, tokenize=False
                )
                ids = list(st.lm.tokenizer(rendered, add_special_tokens=False)["input_ids"])
                check_context(st.lm, len(ids), req.cfg.max_new_tokens)
            else:
                rendered, ids = encode_prompt(st.lm, req.prompt or "", req.cfg)
        cap = st.limits.max_prompt_tokens
        if cap is not None and len(ids) > cap:
            raise RequestError(
                400, f"the prompt is {len(ids)} tokens; this server accepts at most {cap}", param="prompt"
            )
        return st.scheduler.submit(rendered, req.cfg, ignore_eos=req.ignore_eos, prompt_ids=ids), len(ids)

    async def _generate(request: Request, endpoint: str) -> Response:
        t0 = time.perf_counter()
        try:
            check_key(request)
            body = await _read_json(request, st.limits.max_body_bytes)
            req = parse_chat(body, st.limits) if endpoint == "chat" else parse_completion(body, st.limits)
            if req.model != st.served_name:
                raise RequestError(
                    404,
                    f"model {req.model!r} is not served here; GET /v1/models lists {st.served_name!r}",
                    param="model",
                    code="model_not_found",
                )
            if st.in_system >= st.capacity:
                raise RequestError(
                    429,
                    f"the server is full ({st.scheduler.max_batch} running, {st.limits.max_queue} "
                    "queued): retry after the Retry-After seconds",
                    kind="rate_limit_exceeded",
                    headers={"Retry-After": "1"},
                )
            st.in_system += 1
            try:
                handle, prompt_tokens = await anyio.to_thread.run_sync(submit, req)
            except BaseException:
                st.in_system -= 1
                raise
        except RequestError as exc:
            st.metrics.observe_request(endpoint, exc.status)
            return _error(exc)
        except EngineError as exc:  # bad prompt, too long for the context or the KV budget
            st.metrics.observe_request(endpoint, 400)
            return _error(RequestError(400, str(exc)))
        st.metrics.observe_request(endpoint, 200)
        pump = _Pump(handle, asyncio.get_running_loop())
        if req.stream:
            return StreamingResponse(
                _stream(request, req, pump, prompt_tokens, t0),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        try:
            return await _whole(request, req, pump, prompt_tokens, t0)
        finally:
            handle.cancel()  # no-op when finished; frees the slot when the client left
            st.in_system -= 1

    async def _whole(
        request: Request, req: ParsedRequest, pump: _Pump, prompt_tokens: int, t0: float
    ) -> Response:
        first = True
        async for kind, value in pump.events(request):
            if kind == "chunk" and first:
                st.metrics.ttft.labels(st.served_name).observe(time.perf_counter() - t0)
                first = False
            elif kind == "error":
                return _error(
                    RequestError(
                        500 if not isinstance(value, EngineError) else 400, str(value), kind="server_error"
                    )
                )
            elif kind == "end":
                n = len(value.token_ids)
                st.metrics.observe_done(prompt_tokens, n, time.perf_counter() - t0)
                return JSONResponse(
                    full_response(req, value.text, finish_reason(value.stop_reason), prompt_tokens, n)
                )
        return Response(status_code=499)  # the client went away; nobody reads this

    async def _stream(
        request: Request, req: ParsedRequest, pump: _Pump, prompt_tokens: int, t0: float
    ) -> AsyncIterator[str]:
        last: float | None = None
        try:
            async for kind, value in pump.events(request):
                if kind == "chunk":
                    yield _sse(chunk(req, value, None, first=last is None))
                    now = time.perf_counter()
                    if last is None:
                        st.metrics.ttft.labels(st.served_name).observe(now - t0)
                    else:
                        st.metrics.itl.labels(st.served_name).observe(now - last)
                    last = now
                elif kind == "error":
                    kind_ = "cancelled" if isinstance(value, CancelledError) else "server_error"
                    yield _sse({"error": {"message": str(value), "type": kind_, "param": None, "code": None}})
                    yield _sse("[DONE]")
                    return
                else:
                    n = len(value.token_ids)
                    yield _sse(chunk(req, None, finish_reason(value.stop_reason), first=last is None))
                    if req.include_usage:
                        yield _sse(usage_chunk(req, prompt_tokens, n))
                    yield _sse("[DONE]")
                    st.metrics.observe_done(prompt_tokens, n, time.perf_counter() - t0)
                    return
        finally:
            pump.handle.cancel()  # a disconnect mid-stream frees the slot at the next token
            st.in_system -= 1

    return app
