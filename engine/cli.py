"""`python -m engine <command>`: the engine's command line.

Each command lives in engine/commands/<name>.py and exposes:
    HELP: str                               one line for --help
    add_arguments(parser) -> None           its flags (defaults come from the engine's own dataclasses)
    run(args) -> object                     a dataclass, dict or list; printed as JSON with --json
    format_text(result) -> str  (optional)  a human-readable rendering
Commands translate argparse values into typed engine calls; no engine function takes a Namespace.

Under `--json` stdout is one JSON document, whatever the libraries print: from before the command's module is
imported until its result is written, file descriptor 1 points at stderr (`json_only_stdout`), so a library's
print, its logger's StreamHandler(sys.stdout) and a C library's printf all land on stderr, and the document alone
is written to the real stdout. Library noise is cut where it starts (`quiet_libraries`): DeepSpeed's accelerator
is named (cpu) where no NVIDIA GPU exists, so it never probes ("Setting accelerator to CPU"), and torchao's
missing optional CUDA kernels are not reported (nothing here uses them).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

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


class _Parser(argparse.ArgumentParser):
    """A bad flag gets one line (what is wrong, where the options are), not the whole usage block above it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the options)\n")


def build_parser(only: str | None = None) -> tuple[argparse.ArgumentParser, dict[str, Any]]:
    """The parser with every command, or with `only` that one: a command imports what it needs (torch,
    transformers, a peer engine, a web server) at import time, so loading all fourteen to run one costs seconds."""
    parser = _Parser(prog="python -m engine", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
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


def _not_torchaos_missing_kernel(record: logging.LogRecord) -> bool:
    """torchao logs one warning per optional CUDA kernel library it cannot load (_C_mxfp8, _C_cutlass_90a, ...):
    nothing the lab runs uses them, so a user of the CLI never needs to read it."""
    return not str(record.msg).startswith("Failed to load")


def _not_torchaos_enum_notice(record: logging.LogRecord) -> bool:
    """torch 2.13 warns once per enum that torchao (imported with transformers) still registers for pytrees:
    a deprecation notice for torchao's authors, two lines on every command here."""
    return "register_constant() on Enum subclasses is deprecated" not in str(record.msg)


def quiet_libraries() -> None:
    """Cut library noise at its source, before any of them is imported (see the module docstring)."""
    if "DS_ACCELERATOR" not in os.environ and not any(Path("/dev").glob("nvidia[0-9]*")):
        os.environ["DS_ACCELERATOR"] = "cpu"  # DeepSpeed's own override: no probe, no warning
    logger = logging.getLogger("torchao")
    if _not_torchaos_missing_kernel not in logger.filters:
        logger.addFilter(_not_torchaos_missing_kernel)
    pytree = logging.getLogger("torch.utils._pytree")
    if _not_torchaos_enum_notice not in pytree.filters:
        pytree.addFilter(_not_torchaos_enum_notice)


@contextlib.contextmanager
def json_only_stdout(enabled: bool = True) -> Iterator[Any]:
    """Within the block, whatever is written to stdout (file descriptor 1) goes to stderr; yields a writer for the
    real stdout, where the one JSON document goes."""
    if not enabled:
        yield sys.stdout
        return
    sys.stdout.flush()
    real, python_stdout = os.dup(1), sys.stdout
    os.dup2(2, 1)  # C libraries and streams already bound to stdout
    sys.stdout = sys.stderr  # loggers and prints that look sys.stdout up from now on
    try:
        if not _on_fd_1(
            python_stdout
        ):  # a caller's own stdout (a test's capture, redirect_stdout) gets the document
            yield python_stdout
            return
        with open(real, "w", encoding="utf-8", closefd=False) as out:
            yield out
            out.flush()
    finally:
        sys.stdout = python_stdout
        sys.stdout.flush()
        os.dup2(real, 1)
        os.close(real)


def _on_fd_1(stream: Any) -> bool:
    try:
        return stream.fileno() == 1
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: an in-memory stream
        return False


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    chosen = (
        argv[0] if argv and argv[0] in COMMANDS else None
    )  # anything else: the full parser (help, errors)
    quiet_libraries()
    with json_only_stdout("--json" in argv) as out:
        parser, modules = build_parser(chosen)
        args = parser.parse_args(argv)
        module = modules[args.command]
        try:
            result = module.run(args)
        except EngineError as exc:
            print(f"error: {exc}", file=sys.stderr)
            if args.json:  # a script that reads --json reads the refusal as JSON too
                print(json.dumps({"error": str(exc)}), file=out, flush=True)
            return 2
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        if args.json or not hasattr(module, "format_text"):
            print(json.dumps(to_jsonable(result), indent=2, allow_nan=False), file=out, flush=True)
        else:
            print(module.format_text(result), file=out, flush=True)
    return 0
