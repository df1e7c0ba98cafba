"""`python -m engine serve`: the OpenAI-compatible server over the engine's in-flight scheduler."""

from __future__ import annotations

from engine.runtime import models
from engine.serving.protocol import Limits
from engine.serving.runner import API_KEY_ENV, ServeSpec, serve_forever

HELP = "serve a model over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, /metrics)"
_S, _L = ServeSpec(), Limits()  # one source of defaults


def add_arguments(parser) -> None:
    parser.add_argument(
        "--model",
        default=models.DEFAULT_MODEL,
        help=f"preset, hub id or local folder (default {models.DEFAULT_MODEL})",
    )
    parser.add_argument(
        "--served-name", default=None, help="the model id clients send (default: the model's name)"
    )
    parser.add_argument("--dtype", default=_S.dtype, help="auto, fp32, bf16 or fp16 (fp16 on CUDA only)")
    parser.add_argument("--device", default=_S.device, help="auto, cpu or cuda")
    parser.add_argument(
        "--host",
        default=_S.host,
        help="address to bind (default 127.0.0.1: this machine only; "
        "0.0.0.0 serves the network, set an API key then)",
    )
    parser.add_argument("--port", type=int, default=_S.port)
    parser.add_argument("--max-batch", type=int, default=_S.max_batch, help="requests decoded together")
    parser.add_argument(
        "--max-queue", type=int, default=_L.max_queue, help="requests waiting beyond the batch; more get 429"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=_L.max_tokens, help="largest max_tokens a request may ask for"
    )
    parser.add_argument(
        "--max-prompt-tokens",
        type=int,
        default=None,
        help="longest prompt in tokens (default: the context window)",
    )
    parser.add_argument("--max-body-bytes", type=int, default=_L.max_body_bytes, help="largest request body")
    parser.add_argument(
        "--kv-budget-bytes",
        type=int,
        default=None,
        help="KV cache budget (default: a quarter of free memory)",
    )
    parser.epilog = f"Set {API_KEY_ENV} in the server's environment to require 'Authorization: Bearer <key>'."


def spec_from_args(args) -> ServeSpec:
    limits = Limits(
        max_tokens=args.max_tokens,
        max_prompt_tokens=args.max_prompt_tokens,
        max_body_bytes=args.max_body_bytes,
        max_queue=args.max_queue,
    )
    return ServeSpec(
        model=args.model,
        dtype=args.dtype,
        device=args.device,
        host=args.host,
        port=args.port,
        served_name=args.served_name,
        max_batch=args.max_batch,
        kv_budget_bytes=args.kv_budget_bytes,
        limits=limits,
    ).validate()


def run(args) -> dict:
    spec = spec_from_args(args)
    serve_forever(spec)
    return {"stopped": True, "model": spec.model, "port": spec.port}


def format_text(result: dict) -> str:
    return f"server for {result['model']} on port {result['port']} stopped"
