"""`python -m engine <command>`: the engine's command line.

Each command lives in engine/commands/<name>.py and exposes:
    HELP: str                               one line for --help
    add_arguments(parser) -> None           its flags (defaults come from the engine's own dataclasses)
    run(args) -> object                     a dataclass, dict or list; printed as JSON with --json
    format_text(result) -> str  (optional)  a human-readable rendering
Commands translate argparse values into typed engine calls; no engine function takes a Namespace.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Any

from engine.core.errors import EngineError
from engine.core.jsonsafe import to_jsonable

# Order is the order of `--help`. A command module that fails to import is reported, not fatal.
COMMANDS = (
    "hardware",
    "generate",
    "estimate",
    "gpus",
    "calibrate",
    "roofline",
    "eval",
    "fewshot",
    "race",
    "batch",
    "serve",
    "loadgen",
    "quant",
    "speculate",
    "trackrecord",
    "simulate",
)


def build_parser(only: str | None = None) -> tuple[argparse.ArgumentParser, dict[str, Any]]:
    """The parser with every command, or with `only` that one: a command imports what it needs (torch,
    transformers, a peer engine, a web server) at import time, so loading all fourteen to run one costs seconds."""
    parser = argparse.ArgumentParser(prog="python -m engine", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules: dict[str, Any] = {}
    for name in COMMANDS if only is None else (only,):
        try:
            module = importlib.import_module(f"engine.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"engine.commands.{name}":
                continue  # not built yet
            raise
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        p.add_argument("--json", action="store_true", help="print the result as JSON")
        module.add_arguments(p)
        modules[name] = module
    return parser, modules


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    chosen = (
        argv[0] if argv and argv[0] in COMMANDS else None
    )  # anything else: the full parser (help, errors)
    parser, modules = build_parser(chosen)
    args = parser.parse_args(argv)
    module = modules[args.command]
    try:
        result = module.run(args)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(to_jsonable(result), indent=2, allow_nan=False))
    elif hasattr(module, "format_text"):
        print(module.format_text(result))
    else:
        print(json.dumps(to_jsonable(result), indent=2, allow_nan=False))
    return 0
