"""What every peer backend provides, and the registry of the peers (three converting engines and vLLM)."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Protocol

# what a page says instead (no script or environment names on a page): the README section that installs them
PAGE_INSTALL_NOTE = "not installed here: the README's 'Peer engines in the latency race' installs it"
PAGE_EXPORTER_NOTE = (
    "its exporter (optimum-intel) is not installed: it needs an environment of its own, which the README's 'Peer "
    "engines in the latency race' makes"
)
PAGE_VLLM_NOTE = "not installed here: the README's 'vLLM beside the engine' makes its environment (a few minutes, about 4 GB)"


@dataclass
class Generated:
    """One greedy generation: the new ids (EOS included when the engine stopped on it, as vanilla counts it)
    and the perf_counter time at which each new token was available (the last one: when the call returned)."""

    ids: list[int]
    step_times: list[float]


class Session(Protocol):
    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> Generated: ...

    def token_logprobs(self, ids: list[int]) -> list[float] | None:
        """ln p(ids[i] | ids[:i]) for i >= 1, teacher-forced; None where the engine does not expose them."""
        ...


class Backend(Protocol):
    name: str  # the race lane's engine key
    label: str
    dist: str  # the PyPI distribution whose version is reported
    module: str
    logprobs_note: str  # "" when log-probabilities are exposed, else why not

    def unsupported(self, architecture: str, model_type: str) -> str: ...

    def convert(self, source: Path, target: Path, precision: str) -> list[str]:
        """Convert the HF folder `source` into `target`; return the command that ran (for the record)."""
        ...

    def open(
        self, folder: Path, precision: str, threads: int, device: str, eos_ids: set[int], tokenizer
    ) -> Session: ...

    def cuda_note(self) -> str:
        """Why this engine runs on the CPU here even when a CUDA GPU exists ("" when it can use it)."""
        ...


def backend(name: str) -> Backend:
    module = importlib.import_module(f"engine.race.peers.{BACKENDS[name]}")
    return module.BACKEND


BACKENDS: dict[str, str] = {
    "openvino": "ov",
    "onnxruntime-genai": "ort",
    "ctranslate2": "ct2",
    "vllm": "vllm",
}
SIDE_ENV = ("vllm",)  # installed in their own environment (engine.backends.vllm finds it), not in this one


def version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def availability(name: str) -> tuple[bool, str | None, str]:
    """(usable, version, reason): installed and importable in this interpreter, or why not."""
    b = backend(name)
    v = version(b.dist)
    if v is None:
        # said on the race page as it is: where to install it, not this interpreter's path or the script's name
        return (
            False,
            None,
            f"{b.label} is not installed in the lab's environment: {PAGE_INSTALL_NOTE.split(': ', 1)[1]}",
        )
    try:
        importlib.import_module(b.module)
    except Exception as exc:  # a broken wheel raises anything from ImportError to OSError
        return (
            False,
            v,
            f"{b.label} {v} is installed but failed to import ({type(exc).__name__}: {exc}); reinstall it: "
            + PAGE_INSTALL_NOTE.split(": ", 1)[1],
        )
    return True, v, ""


def threads() -> int:
    """The worker's CPU threads: every logical core the process may use (torch does the same for vanilla)."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


ROOT = Path(__file__).resolve().parents[3]  # the repository
EXPORT_PYTHON_ENV = "INFERENCE_LAB_PEERS_EXPORT_PYTHON"
DEFAULT_EXPORT_VENV = ROOT / ".venv-peers"


def export_cli() -> tuple[Path | None, str]:
    """optimum-cli of the side environment, or None and how to make it."""
    configured = os.environ.get(EXPORT_PYTHON_ENV)
    python = Path(configured) if configured else DEFAULT_EXPORT_VENV / "bin" / "python"
    cli = python.parent / "optimum-cli"
    if cli.is_file():
        return cli, ""
    return None, (
        "OpenVINO's exporter (optimum-intel) is not installed: it needs its own environment because it "
        "pins transformers<5.6; run `bash scripts/install_peers.sh` (makes .venv-peers) or point "
        f"{EXPORT_PYTHON_ENV} at a python that has optimum-intel[openvino]"
    )


def installed() -> list[dict]:
    """What the page shows before a race: each peer's installed version (metadata only, nothing imported)
    or where the README installs it (no script or environment names), and whether OpenVINO's exporter
    environment exists."""
    rows = []
    for name in BACKENDS:
        if name in SIDE_ENV:
            rows.append(_side_env_row())
            continue
        b = backend(name)
        v = version(b.dist)
        note = "" if v else PAGE_INSTALL_NOTE
        if name == "openvino":
            cli, _ = export_cli()
            note = note or (
                "its exporter is installed, in its own environment" if cli else PAGE_EXPORTER_NOTE
            )
        rows.append({"engine": b.label, "lane": name, "version": v or "not installed", "note": note})
    return rows


def _side_env_row() -> dict:
    """vLLM lives in .venv-vllm: its build (read from that environment's metadata) or how to make it."""
    from engine.backends.vllm import availability

    build, _ = availability()
    if build is None:
        return {"engine": "vLLM", "lane": "vllm", "version": "not installed", "note": PAGE_VLLM_NOTE}
    return {
        "engine": "vLLM",
        "lane": "vllm",
        "version": f"{build.dist} {build.version}",
        "note": f"{build.label}, in its own environment",
    }
