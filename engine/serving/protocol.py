"""OpenAI request bodies -> the engine's GenerationConfig, and the response shapes back.

Every field OpenAI documents for /v1/completions and /v1/chat/completions is either mapped, accepted because it
changes nothing here (`user`, `metadata`), or refused with a 400 that names it: a client must never believe a
setting took effect when it did not. Mapping (OpenAI semantics, https://platform.openai.com/docs/api-reference):
    temperature 0 -> greedy; > 0 -> sampling at that temperature (OpenAI's default is 1.0, so set 0 for greedy)
    top_p -> top_p (default 1.0); top_k (vLLM extension) -> top_k (default 0 = off)
    repetition_penalty (vLLM extension) -> repetition_penalty; seed -> seed; stop (string or list) -> stop
    max_tokens (chat: max_completion_tokens too) -> max_new_tokens; default 16 for completions (OpenAI's),
    the server's limit for chat; ignore_eos (vLLM extension, used by benchmark tools) -> the scheduler's ignore_eos
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from engine.runtime.settings import GenerationConfig

COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's documented default for /v1/completions

_COMMON = {
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "repetition_penalty",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "n",
    "user",
    "ignore_eos",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "logprobs",
    "metadata",
    "min_tokens",
}
COMPLETION_FIELDS = _COMMON | {"prompt", "echo", "best_of", "suffix"}
CHAT_FIELDS = _COMMON | {
    "messages",
    "max_completion_tokens",
    "top_logprobs",
    "response_format",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "store",
    "reasoning_effort",
    "modalities",
}
# Accepted only at the value that means "off" (what the engine does anyway); anything else is a 400.
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "n": (1, None),
    "best_of": (1, None),
    "echo": (False, None),
    "suffix": (None, ""),
    "frequency_penalty": (0, 0.0, None),
    "presence_penalty": (0, 0.0, None),
    "logit_bias": (None,),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "tools": (None,),
    "tool_choice": (None, "none"),
    "parallel_tool_calls": (None,),
    "store": (None, False),
    "reasoning_effort": (None,),
    "modalities": (None,),
    "min_tokens": (None, 0),
}
_UNSUPPORTED_WHY = {
    "n": "one choice per request is served; send n requests instead",
    "best_of": "best_of is not supported; send it as separate requests",
    "echo": "echo is not supported; the prompt is not returned",
    "suffix": "suffix (insertion) is not supported",
    "frequency_penalty": "frequency_penalty is not supported; use repetition_penalty (multiplicative, 1.0 = off)",
    "presence_penalty": "presence_penalty is not supported; use repetition_penalty (multiplicative, 1.0 = off)",
    "logit_bias": "logit_bias is not supported",
    "logprobs": "logprobs are not returned by this server",
    "top_logprobs": "logprobs are not returned by this server",
    "tools": "tool calling is not supported",
    "tool_choice": "tool calling is not supported",
    "parallel_tool_calls": "tool calling is not supported",
    "store": "stored completions are not supported",
    "reasoning_effort": "reasoning_effort is not supported",
    "modalities": "only text output is supported",
    "min_tokens": "min_tokens is not supported; use ignore_eos with max_tokens for a fixed length",
}


class RequestError(Exception):
    """A request the server refuses: HTTP status, OpenAI error type, the offending parameter, a message."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        kind: str = "invalid_request_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.code = status, message, param, kind, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class Limits:
    """The server's refusals, in one place (the CLI's flags and the tests read these defaults)."""

    max_tokens: int = 1024  # most new tokens one request may ask for
    max_prompt_tokens: int | None = None  # None: the model's context window minus max_tokens decides
    max_body_bytes: int = 1_000_000  # request body, bytes
    max_queue: int = 64  # requests waiting for a slot beyond the running batch; more -> 429


@dataclass(frozen=True)
class ParsedRequest:
    kind: str  # "completion" | "chat"
    model: str
    prompt: str | None  # completions: the raw prompt
    messages: tuple[dict[str, str], ...]  # chat: role/content pairs
    cfg: GenerationConfig
    stream: bool
    include_usage: bool
    ignore_eos: bool
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))


def _bad(message: str, param: str | None = None) -> RequestError:
    return RequestError(400, message, param=param)


def _number(body: dict, name: str, default: float, lo: float, hi: float) -> float:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not lo <= v <= hi:
        raise _bad(f"{name} must be a number from {lo} to {hi}, got {v!r}", name)
    return float(v)


def _int(body: dict, name: str, default: int | None, lo: int, hi: int) -> int | None:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise _bad(f"{name} must be a whole number from {lo} to {hi}, got {v!r}", name)
    return v


def _check_fields(body: dict, allowed: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise _bad(
            f"unsupported field(s) {', '.join(unknown)}: this server does not implement them "
            "(remove them from the request)",
            unknown[0],
        )
    for name, neutral in _NEUTRAL.items():
        if name in body and body[name] not in neutral and not (name == "tools" and body[name] == []):
            raise _bad(f"{name}={body[name]!r} is not supported: {_UNSUPPORTED_WHY[name]}", name)


def _stop(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop) or len(stop) > 4:
        raise _bad("stop must be a non-empty string or a list of up to 4 non-empty strings", "stop")
    return tuple(stop)


def _config(
    body: dict, limits: Limits, default_max_tokens: int, max_tokens_field: str = "max_tokens"
) -> GenerationConfig:
    max_tokens = _int(body, max_tokens_field, None, 1, limits.max_tokens)
    if max_tokens is None and max_tokens_field != "max_tokens":
        max_tokens = _int(body, "max_tokens", None, 1, limits.max_tokens)
    temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    if top_p == 0:
        raise _bad("top_p must be above 0 (1.0 turns it off)", "top_p")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise _bad(f"seed must be a whole number >= 0, got {seed!r}", "seed")
    return GenerationConfig(
        max_new_tokens=max_tokens if max_tokens is not None else default_max_tokens,
        do_sample=temperature > 0,
        temperature=temperature if temperature > 0 else 1.0,
        top_p=top_p,
        top_k=_int(body, "top_k", 0, -1, 1_000_000) if body.get("top_k") != -1 else 0,  # vLLM: -1 = off
        repetition_penalty=_number(body, "repetition_penalty", 1.0, 0.01, 10.0),
        seed=seed,
        stop=_stop(body),
    )


def _stream_flags(body: dict) -> tuple[bool, bool, bool]:
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad("stream must be true or false", "stream")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict) or set(opts) - {"include_usage", "continuous_usage_stats"}:
        raise _bad("stream_options may only hold include_usage", "stream_options")
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise _bad("ignore_eos must be true or false", "ignore_eos")
    return stream, bool(opts.get("include_usage", False)), ignore_eos


def _model(body: dict) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model is required: GET /v1/models lists the one this server serves", "model")
    return model


def parse_completion(body: Any, limits: Limits) -> ParsedRequest:
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    _check_fields(body, COMPLETION_FIELDS)
    model = _model(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt.strip():
        raise _bad(
            "prompt must be one non-empty string (a list of prompts or token ids is not supported)", "prompt"
        )
    cfg = _config(body, limits, min(COMPLETION_DEFAULT_MAX_TOKENS, limits.max_tokens))
    stream, usage, ignore_eos = _stream_flags(body)
    return ParsedRequest("completion", model, prompt, (), cfg, stream, usage, ignore_eos)


def parse_chat(body: Any, limits: Limits) -> ParsedRequest:
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    _check_fields(body, CHAT_FIELDS)
    model = _model(body)
    if body.get("response_format") not in (None, {"type": "text"}):
        raise _bad("response_format other than text is not supported", "response_format")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages must be a non-empty list of {role, content} objects", "messages")
    clean: list[dict[str, str]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "developer", "user", "assistant"):
            raise _bad(f"messages[{i}] needs a role of system, user or assistant", "messages")
        content = m.get("content")
        if isinstance(content, list):  # [{"type": "text", "text": ...}] parts
            if not all(
                isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                for p in content
            ):
                raise _bad(f"messages[{i}].content: only text parts are supported", "messages")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise _bad(f"messages[{i}].content must be text", "messages")
        role = "system" if m["role"] == "developer" else m["role"]
        clean.append({"role": role, "content": content})
    cfg = _config(body, limits, limits.max_tokens, max_tokens_field="max_completion_tokens")
    stream, usage, ignore_eos = _stream_flags(body)
    return ParsedRequest("chat", model, None, tuple(clean), cfg, stream, usage, ignore_eos)


def finish_reason(stop_reason: str) -> str:
    """The engine's stop reasons in OpenAI's vocabulary: eos and stop strings are 'stop', the limit is 'length'."""
    return "length" if stop_reason in ("length", "cancelled") else "stop"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def response_id(req: ParsedRequest) -> str:
    """The id every response and chunk of a request carries (and its X-Request-Id header): OpenAI's prefixes."""
    return f"chatcmpl-{req.id}" if req.kind == "chat" else f"cmpl-{req.id}"


def _envelope(req: ParsedRequest, obj: str) -> dict:
    """The fields every OpenAI response and streamed chunk of one request share."""
    return {"id": response_id(req), "object": obj, "created": req.created, "model": req.model}


def full_response(
    req: ParsedRequest, text: str, reason: str, prompt_tokens: int, completion_tokens: int
) -> dict:
    if req.kind == "chat":
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": reason,
        }
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
        obj = "text_completion"
    return {**_envelope(req, obj), "choices": [choice], "usage": usage(prompt_tokens, completion_tokens)}


def chunk(req: ParsedRequest, text: str | None, reason: str | None, *, first: bool = False) -> dict:
    """One streamed event; `text=None` with a reason is the closing chunk."""
    if req.kind == "chat":
        delta: dict[str, str] = {"role": "assistant"} if first else {}
        if text:
            delta["content"] = text
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}
        obj = "text_completion"
    return {**_envelope(req, obj), "choices": [choice]}


def usage_chunk(req: ParsedRequest, prompt_tokens: int, completion_tokens: int) -> dict:
    obj = "chat.completion.chunk" if req.kind == "chat" else "text_completion"
    return {**_envelope(req, obj), "choices": [], "usage": usage(prompt_tokens, completion_tokens)}
