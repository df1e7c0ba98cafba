"""One streamed request to an OpenAI-compatible endpoint, timed on the client with time.perf_counter().

Requests are sent with `stream: true` and `stream_options.include_usage` so the server's own token count is
used when it reports one (vLLM, TGI, SGLang and OpenAI do); otherwise each content chunk counts as one token
and the record says so. Failures are records too, with a kind (http_429, http_4xx, http_5xx, timeout, connect,
stream_error, empty), never exceptions, so a run always finishes and reports its errors by kind.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx2 as httpx

from engine.loadgen.workload import LoadSpec, PlannedRequest


@dataclass
class RequestRecord:
    index: int
    start: float  # perf_counter when the request was sent
    max_tokens: int
    ok: bool = False
    error: str | None = None  # kind of failure
    detail: str = ""
    ttft_s: float = float("nan")
    e2e_s: float = float("nan")
    output_tokens: int = 0
    prompt_tokens: int | None = None
    tokens_from_usage: bool = False
    chunk_times: list[float] = field(default_factory=list)  # perf_counter of each content chunk
    request_id: str | None = None  # the server's X-Request-Id header, else the response's `id`
    turn: int = 1  # multi-turn workloads: the turn within its session (1-based)
    text: str = ""  # the answer's text (a multi-turn session sends it back with the next turn)

    @property
    def tpot_s(self) -> float:
        """(E2E - TTFT) / (output tokens - 1), vLLM's TPOT; undefined for one token."""
        if not self.ok or self.output_tokens < 2:
            return float("nan")
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    @property
    def itls(self) -> list[float]:
        return [b - a for a, b in itertools.pairwise(self.chunk_times)]


def headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def body(spec: LoadSpec, req: PlannedRequest, history: Sequence[dict] = ()) -> dict:
    """The request's JSON; `history`: the session's earlier messages (multi-turn chat), sent before this turn's."""
    out: dict = {
        "model": spec.model,
        "max_tokens": req.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if spec.temperature is not None:
        out["temperature"] = spec.temperature
    if spec.ignore_eos:
        out["ignore_eos"] = True
    if spec.endpoint == "chat":
        out["messages"] = [*history, {"role": "user", "content": req.prompt}]
    else:
        out["prompt"] = req.prompt
    return out


def _content(event: dict, endpoint: str) -> str:
    choices = event.get("choices") or []
    if not choices:
        return ""
    c = choices[0]
    if endpoint == "chat":
        return (c.get("delta") or {}).get("content") or ""
    return c.get("text") or ""


async def send(
    client: httpx.AsyncClient, spec: LoadSpec, req: PlannedRequest, history: Sequence[dict] = ()
) -> RequestRecord:
    path = "/chat/completions" if spec.endpoint == "chat" else "/completions"
    rec = RequestRecord(req.index, time.perf_counter(), req.max_tokens, turn=req.turn)
    chunks = 0
    text: list[str] = []
    try:
        async with client.stream(
            "POST",
            spec.base_url.rstrip("/") + path,
            json=body(spec, req, history),
            headers=headers(spec.api_key),
            timeout=spec.timeout_s,
        ) as resp:
            if resp.status_code != 200:
                text = (await resp.aread()).decode("utf-8", "replace")[:300]
                rec.error = "http_429" if resp.status_code == 429 else f"http_{resp.status_code // 100}xx"
                rec.detail = f"{resp.status_code}: {text}"
                return rec
            rec.request_id = resp.headers.get("x-request-id")
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                event = json.loads(data)
                if "error" in event:
                    rec.error, rec.detail = "stream_error", str(event["error"])[:300]
                    return rec
                if rec.request_id is None and isinstance(event.get("id"), str):
                    rec.request_id = event["id"]
                content = _content(event, spec.endpoint)
                if content:
                    text.append(content)
                    now = time.perf_counter()
                    if not rec.chunk_times:
                        rec.ttft_s = now - rec.start
                    rec.chunk_times.append(now)
                    chunks += 1
                usage = event.get("usage")
                if usage and usage.get("completion_tokens") is not None:
                    rec.output_tokens = int(usage["completion_tokens"])
                    rec.prompt_tokens = usage.get("prompt_tokens")
                    rec.tokens_from_usage = True
        rec.e2e_s = time.perf_counter() - rec.start
    except httpx.TimeoutException as exc:
        rec.error, rec.detail = "timeout", str(exc)[:300]
        return rec
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
        rec.error, rec.detail = "connect", f"{type(exc).__name__}: {exc}"[:300]
        return rec
    except (json.JSONDecodeError, httpx.HTTPError) as exc:
        rec.error, rec.detail = "stream_error", f"{type(exc).__name__}: {exc}"[:300]
        return rec
    rec.text = "".join(text)
    if not rec.tokens_from_usage:
        rec.output_tokens = chunks
    if not rec.chunk_times:
        rec.error, rec.detail = "empty", "the stream ended without any content"
        return rec
    rec.ok = True
    return rec
