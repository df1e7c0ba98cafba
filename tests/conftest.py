"""Shared fixtures: loaded models (once per test session), a throwaway run log, a live dashboard server
and a real Chromium for browser tests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# One thread per torch op in tests: they assert behaviour, never speed, and a single-threaded op leaves no OpenMP
# team behind to slow the next test's model work (engine.core.threads); scripts/test.sh runs two test processes
# (pytest-xdist) to use both cores instead. Set before anything imports torch.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import pytest

from bench.common import CHROMIUM_ARGS
from bench.load import serve

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


# The longest files first (each 1-3.5 minutes of one worker in CI, 2026-12-05), then every other slow test, then the
# fast ones: pytest-xdist hands tests out in collection order, and a long test collected late (test_load.py, 133-210
# s) ran alone on one worker while the other had finished.
LONGEST_FIRST = ("test_load.py", "test_race_peers.py", "test_faults.py", "test_vllm_live.py", "test_race.py")


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own hook, whose group ids it completes
def pytest_collection_modifyitems(config, items):
    _keep_groups_together(config, items)

    def order(item) -> tuple[int, int]:
        name = item.path.name
        if name in LONGEST_FIRST:
            return 0, LONGEST_FIRST.index(name)
        return (1 if item.get_closest_marker("slow") else 2), 0

    items.sort(key=order)  # stable: file order within each group


def _keep_groups_together(config, items) -> None:
    """--dist loadgroup keeps a module marked xdist_group on one worker by suffixing its tests' ids ('@group').
    pytest-xdist 3.8 writes that suffix to `item._nodeid`, which pytest 9 no longer reads (an item's id is
    `item._id`), so each group was split over both workers and its module fixture (a whole peer-engine race) ran
    once on each. Written here as xdist means it, where its own write did not take."""
    from _pytest.nodeid import NodeId

    if not getattr(config.option, "loadgroup", False):  # set by pytest-xdist under --dist loadgroup
        return
    for item in items:
        marks = item.iter_markers("xdist_group")
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks})
        if names and "@" not in item.nodeid:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


@pytest.fixture(autouse=True, scope="session")
def _isolated_run_log(tmp_path_factory):
    """Tests must not pollute (or read) the user's run log; the model cache stays shared on purpose:
    dequantizing the bundled GGUF once per machine is enough."""
    os.environ["INFERENCE_LAB_RUNS_DIR"] = str(tmp_path_factory.mktemp("runs"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


@pytest.fixture(scope="session")
def tiny_lm():
    from engine.runtime.models import load_model

    return load_model("tiny-gpt-neo")


@pytest.fixture(scope="session")
def smol_lm():
    from engine.runtime.models import load_model

    return load_model("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def dashboard(tmp_path_factory):
    """A real `streamlit run app.py` on 127.0.0.1, shared by the browser tests; yields its URL."""
    with serve(tmp_path_factory.mktemp("server") / "streamlit.log") as (url, _proc):
        yield url


@pytest.fixture(scope="session")
def browser():
    if CHROMIUM is None:
        pytest.skip("Debian chromium is not installed (scripts/install.sh installs it as root)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=list(CHROMIUM_ARGS),
        )
        yield b
        b.close()


@pytest.fixture
def exact_calibration():
    """(spec, machine, calibration) of SmolLM2-135M on a made-up machine whose runs are the model's own predictions:
    a calibration without noise, for what reads one (the forecast, this machine's step model)."""
    import math

    from engine.calc.specs import model_preset
    from engine.calibration import RunSample, build_calibration, machine_spec, predict

    spec = model_preset("smollm2-135m")
    machine = machine_spec(20e9, {"fp32": 2e11, "bf16": 5e10})
    samples = [
        RunSample("fp32", b, p, o, *predict(spec, RunSample("fp32", b, p, o, math.nan, math.nan), machine))
        for b, p, o in ((1, 32, 8), (1, 128, 6), (4, 32, 6), (1, 64, 16))
    ]
    return spec, machine, build_calibration(spec, samples, machine, model="smollm2-135m-instruct")
