"""The HTTP handlers, module-level on one APIRouter (engine.serving.app mounts it): health, metrics, models, the
two generation endpoints, and the per-request timings a load generator joins to its own measurements.

Generation never runs on the event loop: the scheduler decodes in its own thread, tokenization and submission run
in a worker thread (anyio.to_thread), and each request's chunks cross into the loop through an asyncio.Queue that
the scheduler's thread feeds (call_soon_threadsafe). So /health, /metrics and new requests are answered while every slot is decoding.

Every generation response carries its id (the body's `id` and the `X-Request-Id` header); when the request ends
(finished, failed, or its client left) its server-side timings are kept (engine.serving.timings) and fed to the
Prometheus metrics: `GET /v1/requests/{id}/timings` for one, `GET /v1/requests/timings?limit=N` for the most recent.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import AsyncIterator

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from engine.core.errors import CancelledError, EngineError
from engine.runtime import run
from engine.runtime.chat import chat_prompt_ids
from engine.runtime.prompt import check_context, encode_prompt
from engine.serving.metrics import vllm_finished_reason
from engine.serving.protocol import (
    ParsedRequest,
    RequestError,
    chunk,
    finish_reason,
    full_response,
    parse_chat,
    parse_completion,
    response_id,
    usage_chunk,
)
from engine.serving.state import ServerState, state_of
from engine.serving.timings import RECENT, RequestTimings, phases

POLL_S = 0.25  # how often a waiting request checks whether its client is still there

router = APIRouter()


def error_response(exc: RequestError) -> JSONResponse:
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


# ---------------------------------------------------------------------------------------------- plain endpoints
@router.get("/health")
async def health(request: Request) -> dict:
    state = state_of(request)
    snap = state.scheduler.snapshot()
    return {
        "status": "ok",
        "model": state.served_name,
        "running": len(snap.running),
        "waiting": len(snap.waiting),
        "admitted": state.in_system,
        "capacity": state.capacity,
    }


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    body = await anyio.to_thread.run_sync(state_of(request).metrics.render)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


@router.get("/v1/models")
async def list_models(request: Request) -> dict:
    state = state_of(request)
    state.check_key(request)
    return {
        "object": "list",
        "data": [
            {
                "id": state.served_name,
                "object": "model",
                "created": 0,
                "owned_by": "inference-lab",
                "max_model_len": state.lm.context_length,
            }
        ],
    }


@router.get("/v1/requests/timings")
async def recent_timings(request: Request, limit: int = 100) -> dict:
    """The most recent requests' server-side timings, oldest first (at most the RECENT the server keeps)."""
    state = state_of(request)
    state.check_key(request)
    if not 1 <= limit <= RECENT:
        raise RequestError(400, f"limit must be 1..{RECENT}, got {limit}", param="limit")
    return {"object": "list", "data": [t.to_json() for t in state.timings.recent(limit)]}


@router.get("/v1/requests/{rid}/timings")
async def request_timings(request: Request, rid: str) -> dict:
    state = state_of(request)
    state.check_key(request)
    t = state.timings.get(rid)
    if t is None:
        raise RequestError(
            404,
            f"no timings for request {rid!r}: it is unknown, still running, or older than the last {RECENT}",
            param="id",
            code="not_found",
        )
    return t.to_json()


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    return await _generate(request, "completions")


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    return await _generate(request, "chat")


# ---------------------------------------------------------------------------------------------- generation
class _Pump:
    """Moves a run's chunks (engine.runtime.run.Run) onto the event loop. On the scheduler's route its thread hands
    them over itself (Run.listen: one call_soon_threadsafe per chunk); otherwise a small thread polls the run."""

    def __init__(self, handle: run.Run, loop: asyncio.AbstractEventLoop) -> None:
        self.handle, self.loop = handle, loop
        self.queue: asyncio.Queue = asyncio.Queue()
        if not handle.listen(self._put):
            threading.Thread(target=self._run, name=f"pump-{handle.id}", daemon=True).start()

    def _put(self, item: tuple) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: the server is shutting down
            self.handle.cancel()

    def _run(self) -> None:
        try:
            while (text := self.handle.poll(POLL_S)) is not None:
                if text:
                    self._put(("chunk", text))
            self._put(("end", None))
        except BaseException as exc:  # re-raised on the loop side as the request's failure
            self._put(("error", exc))

    def _ended(self) -> tuple:
        """('end', completion) once the run has ended (its report: no wait by then), or ('error', exc)."""
        try:
            return ("end", self.handle.report().completion)
        except BaseException as exc:
            return ("error", exc)

    async def events(self, request: Request) -> AsyncIterator[tuple]:
        """('chunk', text)... then ('end', completion) or ('error', exc); cancels the request if the client left
        (asked at most every POLL_S seconds, not at every chunk)."""
        checked = time.perf_counter()
        while True:
            try:
                item = self.queue.get_nowait()  # a chunk already here: no timer to arm
            except asyncio.QueueEmpty:
                try:
                    item = await asyncio.wait_for(self.queue.get(), POLL_S)
                except TimeoutError:
                    item = None
            if item is not None and item[0] != "chunk":
                yield self._ended() if item[0] == "end" else item
                return
            if item is not None:
                yield item
            now = time.perf_counter()
            if item is None or now - checked >= POLL_S:
                checked = now
                if await request.is_disconnected():
                    self.handle.cancel()
                    return


class _Run:
    """One admitted request on the event loop: its chunk times, and its timings once it ends (any way)."""

    def __init__(
        self,
        state: ServerState,
        req: ParsedRequest,
        handle: run.Run,
        prompt_tokens: int,
        endpoint: str,
        received: float,
    ) -> None:
        self.state, self.req, self.handle = state, req, handle
        self.prompt_tokens, self.endpoint, self.received = prompt_tokens, endpoint, received
        self.id = response_id(req)
        self.first_sent = math.nan
        self.last_sent: float | None = None
        self.chunks = 0
        self.done = False

    def sent(self) -> None:
        """A content chunk was written (streamed) or received from the scheduler (whole response)."""
        now = time.perf_counter()
        if self.last_sent is None:
            self.first_sent = now
            self.state.metrics.observe_first_token(now - self.received)
        else:
            self.state.metrics.observe_gap(now - self.last_sent)
        self.last_sent = now
        self.chunks += 1

    def finish(self, reason: str, output_tokens: int | None = None) -> None:
        """Record the request's timings (once): reason in vLLM's words (stop, length, abort, error)."""
        if self.done:
            return
        self.done = True
        n = self.chunks if output_tokens is None else output_tokens
        t = RequestTimings(
            self.id,
            self.endpoint,
            reason,
            self.prompt_tokens,
            n,
            **phases(self.received, self.handle.times, self.first_sent, time.perf_counter()),
        )
        self.state.timings.add(t)
        self.state.metrics.observe_finished(t, self.req.cfg.max_new_tokens)
        if reason in ("stop", "length"):
            self.state.metrics.observe_done(self.prompt_tokens, n, t.e2e_s)


def _submit(state: ServerState, req: ParsedRequest) -> tuple[run.Run, int]:
    """Tokenize and queue (in a worker thread); returns the handle and the prompt's token count."""
    with state.tokenizer_lock:
        if req.kind == "chat":
            if not state.lm.has_chat_template:
                raise RequestError(
                    400, f"{state.lm.name} has no chat template: use /v1/completions with a raw prompt"
                )
            rendered, ids = chat_prompt_ids(state.lm.tokenizer, req.messages)
            check_context(state.lm, len(ids), req.cfg.max_new_tokens)
        else:
            rendered, ids = encode_prompt(state.lm, req.prompt or "", req.cfg)
    cap = state.limits.max_prompt_tokens
    if cap is not None and len(ids) > cap:
        raise RequestError(
            400, f"the prompt is {len(ids)} tokens; this server accepts at most {cap}", param="prompt"
        )
    handle = run.start(
        state.lm,
        rendered,
        req.cfg,
        scheduler=state.scheduler,
        source="server",
        record=False,  # a server's requests are load, not the machine's run log
        prompt_ids=ids,
        ignore_eos=req.ignore_eos,
    )
    return handle, len(ids)


async def _admit(state: ServerState, request: Request, endpoint: str) -> tuple[ParsedRequest, run.Run, int]:
    """Check, parse and queue a generation request; raises RequestError (or EngineError) when refused."""
    state.check_key(request)
    body = await _read_json(request, state.limits.max_body_bytes)
    req = parse_chat(body, state.limits) if endpoint == "chat" else parse_completion(body, state.limits)
    if req.model != state.served_name:
        raise RequestError(
            404,
            f"model {req.model!r} is not served here; GET /v1/models lists {state.served_name!r}",
            param="model",
            code="model_not_found",
        )
    if state.in_system >= state.capacity:
        raise RequestError(
            429,
            f"the server is full ({state.scheduler.max_batch} running, {state.limits.max_queue} "
            "queued): retry after the Retry-After seconds",
            kind="rate_limit_exceeded",
            headers={"Retry-After": "1"},
        )
    state.in_system += 1
    try:
        handle, prompt_tokens = await anyio.to_thread.run_sync(_submit, state, req)
    except BaseException:
        state.in_system -= 1
        raise
    return req, handle, prompt_tokens


async def _generate(request: Request, endpoint: str) -> Response:
    state = state_of(request)
    received = time.perf_counter()
    try:
        req, handle, prompt_tokens = await _admit(state, request, endpoint)
    except RequestError as exc:
        state.metrics.observe_request(endpoint, exc.status)
        return error_response(exc)
    except EngineError as exc:  # bad prompt, too long for the context or the KV budget
        state.metrics.observe_request(endpoint, 400)
        return error_response(RequestError(400, str(exc)))
    state.metrics.observe_request(endpoint, 200)
    run = _Run(state, req, handle, prompt_tokens, endpoint, received)
    pump = _Pump(handle, asyncio.get_running_loop())
    if req.stream:
        return StreamingResponse(
            _stream(request, run, pump),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "X-Request-Id": run.id},
        )
    try:
        return await _whole(request, run, pump)
    finally:
        handle.cancel()  # no-op when finished; frees the slot when the client left
        run.finish("abort")  # no-op when it finished
        state.in_system -= 1


async def _whole(request: Request, run: _Run, pump: _Pump) -> Response:
    async for kind, value in pump.events(request):
        if kind == "chunk":
            run.sent()
        elif kind == "error":
            run.finish("abort" if isinstance(value, CancelledError) else "error")
            return error_response(
                RequestError(
                    500 if not isinstance(value, EngineError) else 400, str(value), kind="server_error"
                )
            )
        elif kind == "end":
            n = len(value.token_ids)
            run.finish(vllm_finished_reason(value.stop_reason), n)
            body = full_response(run.req, value.text, finish_reason(value.stop_reason), run.prompt_tokens, n)
            return JSONResponse(body, headers={"X-Request-Id": run.id})
    return Response(status_code=499)  # the client went away; nobody reads this


async def _stream(request: Request, run: _Run, pump: _Pump) -> AsyncIterator[str]:
    req = run.req
    try:
        async for kind, value in pump.events(request):
            if kind == "chunk":
                yield _sse(chunk(req, value, None, first=run.last_sent is None))
                run.sent()
            elif kind == "error":
                cancelled = isinstance(value, CancelledError)
                run.finish("abort" if cancelled else "error")
                kind_ = "cancelled" if cancelled else "server_error"
                yield _sse({"error": {"message": str(value), "type": kind_, "param": None, "code": None}})
                yield _sse("[DONE]")
                return
            else:
                n = len(value.token_ids)
                yield _sse(chunk(req, None, finish_reason(value.stop_reason), first=run.last_sent is None))
                if req.include_usage:
                    yield _sse(usage_chunk(req, run.prompt_tokens, n))
                # recorded before [DONE], so a client that asks for the timings when its stream ends finds them
                run.finish(vllm_finished_reason(value.stop_reason), n)
                yield _sse("[DONE]")
                return
    finally:
        pump.handle.cancel()  # a disconnect mid-stream frees the slot at the next token
        run.finish("abort")  # no-op when it finished
        run.state.in_system -= 1
