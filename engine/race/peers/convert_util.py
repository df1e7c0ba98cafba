"""Run a converter command line, offline, and turn its failure into an error that says what went wrong."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

CONVERT_TIMEOUT_S = 900.0


def run(command: list[str], what: str) -> list[str]:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    env.pop("PYTHONPATH", None)  # the converter runs on its own packages, not the engine's tree
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=CONVERT_TIMEOUT_S)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr + proc.stdout).strip().splitlines() if ln.strip()]
        last = next(
            (ln for ln in reversed(lines) if "Error" in ln or "error" in ln), lines[-1] if lines else ""
        )
        raise RuntimeError(f"{what} exited with code {proc.returncode}: {last.strip()[:400]}")
    return [Path(command[0]).name, *command[1:]]
