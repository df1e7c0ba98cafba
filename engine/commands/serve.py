"""`python -m engine serve`: the OpenAI-compatible server over the engine's in-flight scheduler, or with
`--backend vllm` vLLM's own OpenAI server from .venv-vllm with the same options (engine/backends/vllm.py)."""

from __future__ import annotations

from engine.backends.spec import BackendServeSpec
from engine.serving.runner import API_KEY_ENV, serve_forever

HELP = "serve a model over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, /metrics)"


def add_arguments(parser) -> None:
    BackendServeSpec.add_arguments(parser)  # every flag, its default and help from the spec
    parser.epilog = f"Set {API_KEY_ENV} in the server's environment to require 'Authorization: Bearer <key>'."


def run(args) -> dict:
    spec = BackendServeSpec.from_args(args)
    if spec.backend == "vllm":
        from engine.backends.vllm_server import serve_until_signal

        return serve_until_signal(spec)
    serve_forever(spec.engine_spec())
    return {"stopped": True, "backend": "engine", "model": spec.model, "port": spec.port}


def format_text(result: dict) -> str:
    where = f" ({result['build']})" if result.get("build") else ""
    return f"{result['backend']} server{where} for {result['model']} on port {result['port']} stopped"
