"""docs/CONTRACTS.md (and docs/ARCHITECTURE.md) are checked, not trusted: every engine name written in backticks
imports, and every parameter listed inside the parentheses is a parameter of that callable (inspect.signature).

How the doc writes a name, and how this test reads it:
- `engine.a.b.name(p, q=...)`: fully dotted, anywhere.
- `a.b.name(...)` where `a` is an engine package or module (`levers.quant.QuantSpec`, `kv.SlotCache`): resolved
  under engine/, the section's package (## Calculators -> engine.calc) and the block's module.
- `name(p, q)` (a bare call) inside a bullet that names its module first (`engine.levers.quant`: ... `run_quant(...)`)
  or after `engine.x.y`: in the same bullet: an attribute of that module.
Names that are not the engine's (`lm.spec_dict()`, `.validate()`, field names) are not claims and are left alone.
No model is loaded: only modules are imported."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import engine
import ui

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "CONTRACTS.md"

# The engine's package of each section whose bullets name modules relative to it.
SECTION_BASE = {
    "Calculators": ("engine.calc",),
    "GPU estimates from published measurements": ("engine.calc",),
    "Batching": ("engine.batching",),
    "Race": ("engine.race",),
    "Lab": ("engine.lab",),
    "Serving and load generation": ("engine.serving", "engine.loadgen"),
    "Levers": ("engine.levers",),
    "Serving simulator": ("engine.simulate",),
}

# Attribute paths on values the doc has just named (an Estimate's `fit.layout`, a ModelSpec's `spec.exact`).
VALUES = {"fit.layout", "spec.assumptions", "spec.exact"}

FILE = re.compile(r"\.(py|toml|json|jsonl|md|sh|txt)$")  # `app.py`, `gpus.toml`: files, not names
NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
IDENT = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class Claim:
    candidates: tuple[str, ...]  # dotted paths, the first that resolves is the claim's object
    params: tuple[str, ...] | None  # None: the doc lists no parentheses
    where: str  # the span as written, for the failure message

    def __str__(self) -> str:
        return self.where


def _modules() -> list[str]:
    """Every module of engine/ and ui/ (the UI section names ui's helpers the same way)."""
    names = ["engine", "ui"]
    for package in (engine, ui):
        names += [info.name for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")]
    return names


MODULES = _modules()
LAST_PART: dict[str, list[str]] = {}
for _m in MODULES:
    LAST_PART.setdefault(_m.rsplit(".", 1)[-1], []).append(_m)


def split_call(span: str) -> tuple[str, str | None] | None:
    """`a.b(x, y=1) -> T` -> ("a.b", "x, y=1"); `a.b` -> ("a.b", None); anything else -> None."""
    m = NAME.match(span)
    if not m:
        return None
    name, rest = m.group(0), span[m.end() :]
    if not rest.strip() or rest.lstrip().startswith("->"):
        return name, None
    if not rest.startswith("("):
        return None
    depth = 0
    for i, ch in enumerate(rest):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            return name, rest[1:i]
    return None


def param_names(inside: str) -> tuple[str, ...]:
    """The identifiers the doc gives as parameters; `x | y`, `config dict`, literals and `...` are prose, not names."""
    parts, depth, cur = [], 0, ""
    for ch in inside:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    names = []
    for part in parts:
        part = part.strip().lstrip("*")
        m = IDENT.match(part)
        if m and re.fullmatch(r"\s*(?:[=:(].*)?", part[m.end() :], flags=re.S):
            names.append(m.group(0))
    return tuple(names)


def blocks(text: str):
    """(section title, text of one bullet or paragraph)."""
    section, block = "", []
    for line in [*text.splitlines(), ""]:
        starts = line.startswith(("- ", "## ", "# ", "|")) or not line.strip()
        if starts and block:
            yield section, " ".join(block)
            block = []
        if line.startswith("#"):
            section = line.lstrip("#").strip().split(" (")[0]
        elif line.strip():
            block.append(line.strip())


def module_of(path: str) -> str | None:
    """The longest importable engine module that `path` starts with."""
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in MODULES:
            return ".".join(parts[:n])
    return None


def claims(text: str) -> list[Claim]:
    found = []
    for section, block in blocks(text):
        # Where the block's bare calls and relative names may live: the section's packages, then every module
        # the block names, the latest first.
        modules = list(SECTION_BASE.get(section, ()))
        for m in re.finditer(r"`([^`]+)`", block):
            span = m.group(1).strip()
            parsed = split_call(span)
            if parsed is None or FILE.search(span) or span in VALUES:
                continue
            name, inside = parsed
            params = param_names(inside) if inside is not None else None
            first, context = name.split(".")[0], modules[::-1]
            if name.startswith(("engine.", "ui.")):
                candidates = (name,)
            elif inside is None and "." not in name:
                # `memory`: a module of the section's package, named before its functions.
                candidates = tuple(f"{c}.{name}" for c in context if f"{c}.{name}" in MODULES)
                if not candidates:
                    continue
            elif "." in name:
                home = LAST_PART.get(first, [])
                roots = [f"engine.{name}", *(f"{c}.{name}" for c in context)]
                roots += [f"{home[0]}{name[len(first) :]}"] if len(home) == 1 else []
                packages = [f"engine.{first}", *(f"{c}.{first}" for c in context)]
                if not (
                    any(p in MODULES for p in packages)
                    or len(home) == 1
                    or any(_has(c, first) for c in context)
                ):
                    continue
                candidates = tuple(dict.fromkeys(roots))
            elif inside is not None and context:
                candidates = tuple(f"{c}.{name}" for c in context)
            else:
                continue
            found.append(Claim(candidates, params, f"{section}: `{span}`"))
            target = next((c for c in candidates if _resolve(c) is not _MISSING), None)
            home_module = module_of(target) if target else None
            if home_module and home_module not in modules[-1:]:
                modules.append(home_module)
    return found


_MISSING = object()


def _resolve(path: str):
    module = module_of(path)
    if module is None:
        return _MISSING
    obj = importlib.import_module(module)
    for attr in path[len(module) + 1 :].split(".") if path != module else []:
        obj = getattr(obj, attr, _MISSING)
        if obj is _MISSING:
            return _MISSING
    return obj


def _has(module: str, attr: str) -> bool:
    return hasattr(importlib.import_module(module), attr)


def problems(claim: Claim) -> list[str]:
    for path in claim.candidates:
        obj = _resolve(path)
        if obj is _MISSING:
            continue
        if not claim.params:
            return []
        try:
            sig = inspect.signature(obj)
        except (TypeError, ValueError):
            return []
        takes_any = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
        missing = [p for p in claim.params if p not in sig.parameters and not takes_any]
        return (
            [f"{claim}: {path} has no parameter {missing} (it takes {list(sig.parameters)})"]
            if missing
            else []
        )
    return [f"{claim}: none of {list(claim.candidates)} exists"]


def contract_problems(text: str) -> list[str]:
    return [p for c in claims(text) for p in problems(c)]


def test_the_doc_makes_claims():
    found = claims(DOC.read_text(encoding="utf-8"))
    assert len(found) > 150  # the parser still reads the doc's way of writing names


def test_every_engine_name_in_contracts_exists_with_its_parameters():
    assert contract_problems(DOC.read_text(encoding="utf-8")) == []


def test_the_architecture_walks_name_real_functions():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert len(claims(text)) > 40
    assert contract_problems(text) == []


@pytest.mark.parametrize(
    "line",
    [
        "- `engine.core.paths.scrubbed(text)`: no such name.",
        "- `engine.core.paths.scrub(message)`: no such parameter.",
        "- `engine.core.stats`: the statistics: `medianish(values)`.",
        "- `engine.levers.quant`: `run_quant(lm_fp32, schemes, repeats)`.",
    ],
)
def test_a_wrong_claim_is_caught(line):
    assert contract_problems(line) != []
