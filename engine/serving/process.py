"""`python -m engine serve` as a child process, for the Serving page and bench/serving.py: a free port, a
readiness wait on /health, the log in a file, and a clear stop. Imports nothing heavy (no torch): the page uses it."""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"


def free_port(host: str = DEFAULT_HOST) -> int:
    """A port the OS says is free now (bind to 0, read it, release it) for a server started as a subprocess."""
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """`python -m engine serve` as a child process (the page and bench/serving.py), with a readiness wait on
    /health and a clear stop. Its output goes to `log_path`."""

    def __init__(
        self,
        model: str,
        *,
        port: int | None = None,
        max_batch: int = 8,
        extra: tuple[str, ...] = (),
        log_path: str | None = None,
        python: str | None = None,
    ) -> None:
        self.model, self.port = model, port or free_port()
        if log_path is None:
            fd, log_path = tempfile.mkstemp(prefix="engine-serve-", suffix=".log")
            os.close(fd)
        self.log_path = log_path
        cmd = [
            python or sys.executable,
            "-m",
            "engine",
            "serve",
            "--model",
            model,
            "--port",
            str(self.port),
            "--max-batch",
            str(max_batch),
            *extra,
        ]
        self._log = open(self.log_path, "w")  # noqa: SIM115 - kept open for the child's lifetime
        self.proc = subprocess.Popen(
            cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=str(Path(__file__).resolve().parents[2]),
        )
        # the parent's normal exit stops the child too (not PR_SET_PDEATHSIG: it fires when the *thread* that
        # started the child ends, and Streamlit starts it from a script-run thread that ends after each rerun)
        atexit.register(self.stop)

    @property
    def base_url(self) -> str:
        return f"http://{DEFAULT_HOST}:{self.port}/v1"

    def wait_ready(self, timeout: float = 300.0) -> ServerProcess:
        import httpx2 as httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with code {self.proc.returncode}: {self.log_tail()}")
            try:
                if httpx.get(f"http://{DEFAULT_HOST}:{self.port}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"the server was not ready within {timeout:.0f} s: {self.log_tail()}")

    def log_tail(self, n: int = 1500) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # uvicorn shuts down gracefully on SIGTERM
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        if not self._log.closed:
            self._log.close()

    def __enter__(self) -> ServerProcess:
        return self.wait_ready()

    def __exit__(self, *exc) -> None:
        self.stop()
