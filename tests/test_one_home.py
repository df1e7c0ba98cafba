"""One definition per concept: each is imported from its one home, and no other module of the
engine, the UI, the pages or the benchmarks defines its own copy."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOMES = {
    # concept name -> the one module allowed to define it
    "median": "engine/core/stats.py",
    "quantile": "engine/core/stats.py",
    "percentile": "engine/core/stats.py",
    "speedup": "engine/core/stats.py",
    "run_metrics": "engine/runtime/metrics.py",
    "summarize_steps": "engine/runtime/metrics.py",
    "gb": "engine/calc/format.py",
    "seconds": "engine/calc/format.py",
    "to_jsonable": "engine/core/jsonsafe.py",
    "spec_for_run_model": "engine/calibration/__init__.py",
    "sync": "engine/runtime/hardware.py",
    "greedy_kwargs": "engine/runtime/generation.py",
    "next_tokens": "engine/runtime/generation.py",
    "penalize": "engine/runtime/generation.py",
}


def _defs(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_each_concept_is_defined_once():
    files = [p for d in ("engine", "ui", "pages", "bench") for p in (ROOT / d).rglob("*.py")]
    files.append(ROOT / "app.py")
    for name, home in HOMES.items():
        where = sorted(str(p.relative_to(ROOT)) for p in files if name in _defs(p))
        assert where == [home], f"{name} is defined in {where}; its one home is {home}"


def test_each_concept_imports_from_its_home():
    from engine.calc import format as fmt
    from engine.calibration import machine
    from engine.core import stats
    from engine.runtime import metrics
    from ui import common

    assert stats.percentile([1, 2, 3, 4], 50) == 2.5  # linear interpolation between closest ranks
    assert callable(metrics.run_metrics) and callable(metrics.summarize_steps)
    assert callable(machine.measure)  # the one measurement of this machine
    assert common.fmt_bytes is fmt.gb and common.fmt_seconds is fmt.seconds  # one formatting family
    assert fmt.gb(25.28e9) == "25.28 GB"  # one unit policy: 1 GB = 1e9 bytes


def test_device_sync_and_greedy_arguments_have_one_home():
    """gpt-fast's device_sync: only engine.runtime.hardware.sync waits for the GPU before a clock is read; and the
    plain greedy `generate` arguments are written once, in engine.runtime.generation.greedy_kwargs."""
    files = [p for d in ("engine", "ui", "pages", "bench") for p in (ROOT / d).rglob("*.py")]
    syncing = sorted(str(p.relative_to(ROOT)) for p in files if "torch.cuda.synchronize()" in p.read_text())
    assert syncing == ["engine/runtime/hardware.py"]
    greedy = sorted(
        str(p.relative_to(ROOT))
        for p in files
        if '"top_k": None' in p.read_text() or "top_k=None" in p.read_text()
    )
    assert greedy == ["engine/runtime/generation.py"]
