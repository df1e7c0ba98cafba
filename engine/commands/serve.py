"""`python -m engine serve`: the OpenAI-compatible server over the engine's in-flight scheduler."""

from __future__ import annotations

from engine.serving.runner import API_KEY_ENV, ServeSpec, serve_forever

HELP = "serve a model over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, /metrics)"


def add_arguments(parser) -> None:
    ServeSpec.add_arguments(parser)  # every flag, its default and help from the spec
    parser.epilog = f"Set {API_KEY_ENV} in the server's environment to require 'Authorization: Bearer <key>'."


def run(args) -> dict:
    spec = ServeSpec.from_args(args)
    serve_forever(spec)
    return {"stopped": True, "model": spec.model, "port": spec.port}


def format_text(result: dict) -> str:
    return f"server for {result['model']} on port {result['port']} stopped"
