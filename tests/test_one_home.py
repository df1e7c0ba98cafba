"""One definition per concept: each is imported from its one home, and no other module of the
engine, the UI, the pages or the benchmarks defines its own copy."""

from __future__ import annotations

import ast
import functools
import re
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
    "spec_for_run_model": "engine/arch/resolve.py",
    "sync": "engine/runtime/hardware.py",
    "greedy_kwargs": "engine/runtime/generation.py",
    "next_tokens": "engine/runtime/sampling.py",
    "penalize": "engine/runtime/sampling.py",
    "parse_stops": "engine/runtime/settings.py",
    "eos_ids": "engine/runtime/sampling.py",
    "is_busy": "engine/core/load.py",
    "predict_from_run": "engine/calc/capacity.py",
}


@functools.cache
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


def _sources():
    files = [p for d in ("engine", "ui", "pages", "bench") for p in (ROOT / d).rglob("*.py")]
    return {str(p.relative_to(ROOT)): p.read_text() for p in [*files, ROOT / "app.py"]}


def test_one_busy_rule_one_capacity_prediction_one_json_helper():
    """ "The machine was busy" is decided by engine.core.load.is_busy alone (no page compares a load average with
    the cores itself); a sweep's capacity prediction is built by engine.calc.capacity.predict_from_run alone; and
    results become JSON-safe through engine.core.jsonsafe.to_jsonable alone (no local NaN-to-null walker)."""
    import re

    rule = re.compile(r">\s*[0-9.\s*]*(cores|cpu_count)\b")  # "x > cores", "start > 0.5 * cores"
    sources = _sources()
    assert sorted(p for p, text in sources.items() if rule.search(text)) == ["engine/core/load.py"]
    assert sorted(p for p, text in sources.items() if "calibrated_bandwidth(" in text) == [
        "engine/calc/capacity.py"
    ]
    walkers = sorted(
        p
        for p, text in sources.items()
        if re.search(r"isinstance\(\w+, float\) and not math\.isfinite\(\w+\)\s*:\s*\n\s*return None", text)
    )
    assert walkers == ["engine/core/jsonsafe.py"], walkers


def test_capacity_prediction_counts_a_missing_prompt_length_as_zero():
    """A server that reports no prompt lengths (NaN) still gets a prediction, from half the output."""
    import math

    from engine.calc.capacity import predict_from_run
    from engine.calc.specs import model_preset

    spec = model_preset("smollm2-135m")
    missing = predict_from_run(spec, "fp32", math.nan, 64, 0.02, 0.05, 8)
    zero = predict_from_run(spec, "fp32", 0.0, 64, 0.02, 0.05, 8)
    assert missing == zero and missing.context_tokens == 32
    longer = predict_from_run(spec, "fp32", 200.0, 64, 0.02, 0.05, 8)
    assert longer.context_tokens == 232 and longer.prediction.max_users <= zero.prediction.max_users


# How a speed ratio is worded: one rule, engine.core.verdict (faster only when the 95% interval lies above 1x,
# slower only below). A second rule shows up as an f-string that puts "x faster" / "x slower" / "x plain" right
# after a number, or as "interval includes 1" spelled out in a message. The Playground's narrative compares two
# single runs, where no interval exists, by ui.narrative.compare_word.
AFTER_NUMBER = re.compile(r"^\s*[x×]\s*(faster|slower|plain)\b")
SPELLED = re.compile(r"interval includes 1")


def _docstrings(tree: ast.AST) -> set[int]:
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef))]
    return {
        id(n.body[0].value)
        for n in nodes
        if n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)
    }


def _ratio_wordings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            for a, b in zip(node.values, node.values[1:], strict=False):
                if (
                    isinstance(a, ast.FormattedValue)
                    and isinstance(b, ast.Constant)
                    and AFTER_NUMBER.match(str(b.value))
                ):
                    found.append(f"line {node.lineno}: {{...}}{b.value[:30]!r}")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docs
            and SPELLED.search(node.value)
        ):
            found.append(f"line {node.lineno}: {node.value[:40]!r}")
    return found


def test_a_speed_ratio_is_worded_by_one_rule():
    """engine.core.verdict is the only place that turns a ratio and its interval into faster / slower / no
    measurable difference; the quantization, speculative-decoding and race verdicts all call it."""
    from engine.core import verdict

    home = "engine/core/verdict.py"
    allowed = {home, "ui/narrative.py"}
    files = [p for d in ("engine", "ui", "pages", "bench") for p in (ROOT / d).rglob("*.py")]
    offenders = {
        str(p.relative_to(ROOT)): hits
        for p in files
        if str(p.relative_to(ROOT)) not in allowed and (hits := _ratio_wordings(p))
    }
    assert offenders == {}, f"speed ratios worded outside {home}: {offenders}"
    for name in ("direction", "speed_verdict"):
        where = sorted(str(p.relative_to(ROOT)) for p in files if name in _defs(p))
        assert where == [home], f"{name} is defined in {where}; its one home is {home}"
    assert verdict.direction(0.89, (0.38, 1.15)) == "same"


def test_one_reader_of_the_load_average():
    """The engine, the UI, the pages and the benchmarks read the load average through engine.core.load alone
    (loadavg, loadavg_1m), so every reading has the same fallback where the platform has none; a second
    `os.getloadavg` caller fails here."""
    files = [p for d in ("engine", "ui", "pages", "bench") for p in (ROOT / d).rglob("*.py")] + [
        ROOT / "app.py"
    ]
    readers = sorted(str(p.relative_to(ROOT)) for p in files if "getloadavg" in _names(p))
    assert readers == ["engine/core/load.py"], readers


@functools.cache
def _names(path: Path) -> set[str]:
    """Every name and attribute the module's code uses (not its comments or docstrings)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return (
        {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        | {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    )
