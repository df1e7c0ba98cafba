"""The house's arrows point one way: engine/ never imports streamlit; calculators import only the standard
library (and each other); pages reach torch/transformers only through the engine."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_engine_never_imports_streamlit():
    offenders = [p for p in (ROOT / "engine").rglob("*.py") if "streamlit" in imported_modules(p)]
    assert not offenders


def test_pages_do_not_import_ml_libraries():
    banned = {"torch", "transformers", "deepspeed", "lm_eval", "accelerate"}
    offenders = {p.name: imported_modules(p) & banned for p in (ROOT / "pages").glob("*.py")}
    assert not {k: v for k, v in offenders.items() if v}


def test_calculators_are_pure():
    import sys

    allowed = set(sys.stdlib_module_names) | {"engine"}
    calc = ROOT / "engine" / "calc"
    offenders = {p.name: imported_modules(p) - allowed for p in calc.rglob("*.py")}
    assert not {k: v for k, v in offenders.items() if v}
