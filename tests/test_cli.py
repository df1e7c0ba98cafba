"""The CLI as a user runs it: a real subprocess, JSON out, a clear message and exit code 2 on bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "engine", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.mark.slow  # loads the bundled model or runs a process of its own
def test_hardware_json():
    r = cli("hardware", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["accelerator"] in {"cpu", "cuda"}
    assert "gpu_reason" in data["hardware"] and data["hardware"]["cpu_cores_logical"] >= 1


@pytest.mark.slow  # loads the bundled model or runs a process of its own
def test_generate_json_keys():
    r = cli("generate", "--model", "tiny-gpt-neo", "--prompt", "Hello", "--max-new-tokens", "6", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    for key in ("text", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s", "latency_s", "tokens_per_s"):
        assert key in data
    assert 1 <= data["output_tokens"] <= 6 and data["ttft_s"] <= data["latency_s"]


@pytest.mark.slow  # loads the bundled model or runs a process of its own
def test_generate_batch_json():
    r = cli(
        "generate",
        "--model",
        "tiny-gpt-neo",
        "--prompt",
        "a",
        "--prompt",
        "b c",
        "--max-new-tokens",
        "4",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["completions"]) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--model", "tiny-gpt-neo", "--prompt", "hi", "--max-new-tokens", "0"), "max_new_tokens"),
        (("--model", "tiny-gpt-neo", "--prompt", "  "), "empty"),
        (("--model", "no-such-model", "--prompt", "hi"), "unknown model"),
        (("--model", "../../etc", "--prompt", "hi"), "outside the folders"),
        (("--model", "tiny-gpt-neo", "--prompt", "hi", "--sample", "--temperature", "nan"), "temperature"),
    ],
)
def test_generate_bad_input_exits_2_with_a_message(args, message):
    r = cli("generate", *args)
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr
