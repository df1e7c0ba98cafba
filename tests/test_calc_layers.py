"""engine/calc is pure: standard library plus engine.calc, engine.core.dtypes, errors, interval, memo (the fit kept
on disk as JSON, standard library only), spec and stats; never torch or streamlit."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

CALC = Path(__file__).resolve().parents[1] / "engine" / "calc"
ALLOWED_ENGINE = (
    "engine.calc",
    "engine.core.dtypes",
    "engine.core.errors",
    "engine.core.interval",
    "engine.core.memo",
    "engine.core.spec",
    "engine.core.stats",
)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_calc_imports_only_the_standard_library():
    for path in sorted(CALC.glob("*.py")):
        for name in _imports(path):
            top = name.split(".")[0]
            if top == "engine":
                assert name.startswith(ALLOWED_ENGINE), f"{path.name} imports {name}"
            else:
                assert top in sys.stdlib_module_names or top == "__future__", f"{path.name} imports {name}"


def test_engine_side_of_the_calculators_never_imports_streamlit():
    root = CALC.parent
    for path in [
        *CALC.glob("*.py"),
        *(root / "calibration").glob("*.py"),
        *(root / "arch").glob("*.py"),
        *(root / "commands").glob("*.py"),
    ]:
        assert not any(n.split(".")[0] == "streamlit" for n in _imports(path)), path
