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


def _import_graph() -> dict[str, set[str]]:
    """module -> the engine/ui modules it imports (at module level or inside a function alike)."""
    mods = {}
    for p in [*(ROOT / "engine").rglob("*.py"), *(ROOT / "ui").rglob("*.py")]:
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        mods[name] = p
    graph: dict[str, set[str]] = {}
    for name, p in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    deps.add(full if full in mods else node.module)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def test_no_import_cycles():
    """Strongly connected groups of more than one module (Tarjan): a split that left two modules importing each
    other, even lazily, is one concept in two files."""
    graph, index, low, stack, on, cycles = _import_graph(), {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles


# The engine's floors, lowest first (docs/CONTRACTS.md): a module imports only from its own folder or a lower floor.
FLOORS = (
    ("core", "data"),
    ("calc",),
    ("runtime",),
    ("batching", "lab", "arch"),
    # trackrecord reads the calibration and vLLM's records, and the simulator's solver reads it: one floor
    ("calibration", "race", "serving", "loadgen", "backends", "simulate", "trackrecord"),
    ("levers",),
    ("commands", "cli", "__main__"),
)
FLOOR = {part: i for i, parts in enumerate(FLOORS) for part in parts}


def _part(module: str) -> str:
    """engine.<part>...: the folder (or root module) a module lives in."""
    return module.split(".")[1] if module.count(".") else module


def test_engine_imports_point_down_its_floors():
    """core < calc < runtime < batching/lab/arch < calibration/race/serving < levers < commands: no engine module
    imports from a floor above its own (lazily inside a function alike). The compiled decode step once lived in
    batching/kv.py, so runtime/generation.py reached up into batching for it."""
    graph = _import_graph()
    unplaced = sorted({_part(m) for m in graph if m.startswith("engine.") and _part(m) not in FLOOR})
    assert not unplaced, f"place these engine folders on a floor in FLOORS: {unplaced}"
    up = sorted(
        f"{m} -> {d}"
        for m, deps in graph.items()
        if m.startswith("engine.")
        for d in deps
        if d.startswith("engine.") and FLOOR[_part(d)] > FLOOR[_part(m)]
    )
    assert not up, up
