"""Shared fixtures: loaded models (once per test session), a throwaway run log, a live dashboard server
and a real Chromium for browser tests."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


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
    from engine.models import load_model

    return load_model("tiny-gpt-neo")


@pytest.fixture(scope="session")
def smol_lm():
    from engine.models import load_model

    return load_model("smollm2-135m-instruct")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"streamlit did not become healthy at {url}")


@pytest.fixture(scope="session")
def dashboard(tmp_path_factory):
    """A real `streamlit run app.py` on 127.0.0.1, shared by the browser tests; yields its URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "streamlit.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
             "--server.address", "127.0.0.1", "--server.headless", "true"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def browser():
    if CHROMIUM is None:
        pytest.skip("Debian chromium is not installed (scripts/install.sh installs it as root)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic"],
        )
        yield b
        b.close()
