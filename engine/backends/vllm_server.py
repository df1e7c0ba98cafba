"""vLLM's OpenAI server as a process: started from a Launch (engine/backends/vllm.py) with its log in a file,
health-checked, stopped with every process it started, its KV figures recorded once it is ready
(engine/backends/vllm_records.py), and its failure read from its log as one line. Also `python -m engine serve
--backend vllm` itself (`serve_until_signal`) and the readiness of that command run as a ServerProcess.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.backends.vllm import ROOT, Build, VllmStartError, find_build, launch, model_folder
from engine.backends.vllm_records import (
    KvFigures,
    append_kv_record,
    kv_record,
    parse_cache_config_info,
    parse_kv_line,
    predicted_kv,
    with_cache_info,
)
from engine.core import paths

READY_TIMEOUT_S = 900.0  # an eager start took 38 s on a quiet 2-core machine; a busy one, minutes
STOP_TIMEOUT_S = 30.0  # vLLM tears EngineCore and its worker down in 2-4 s after SIGTERM
READY_LINE = (
    "ready: "  # serve_until_signal prints it once /v1/models lists the model and the KV row is written
)


# ---------------------------------------------------------------- a readable reason from vLLM's log

# vLLM prefixes each line with its process and, for its own logger, level, time and source: "(EngineCore pid=7) ERROR
# 12-02 07:13:25 [core.py:1512] KeyError: 'x'"; a traceback's last line names the exception, with or without a message
_PREFIX = re.compile(
    r"^\((?P<proc>[\w-]+) pid=\d+\)\s*(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) [\d-]+ [\d:]+ \[[^\]]*\]\s?)?"
)
_EXC_LINE = re.compile(r"^(?:[a-z_][\w]*\.)*(?P<kind>[A-Z]\w*(?:Error|Exception))(?:: (?P<msg>.+))?$")
_WRAPPERS = ("Engine core initialization failed", "EngineCore encountered", "EngineDeadError")
_VALIDATION = re.compile(r"^\s*(?:Value error|Assertion failed), (?P<msg>.+?)(?: \[type=.*)?$")
LONG_MESSAGE = 160  # past this, a message keeps its first sentence (vLLM lists every supported architecture)


def _short(msg: str) -> str:
    if len(msg) > LONG_MESSAGE and ". " in msg:
        return msg.split(". ", 1)[0] + "."
    return msg


def _exceptions(lines: list[str]) -> list[str]:
    """Every exception a traceback in the log ends with, in order, in words ("AssertionError in Worker_PP1: assert
    x is not None" where it has no message: the statement that raised it)."""
    found: list[str] = []
    for i, raw in enumerate(lines):
        m = _PREFIX.match(raw)
        proc = m["proc"] if m else ""
        line = raw[m.end() :].strip() if m else raw.strip()
        v = _VALIDATION.match(line)
        if v and "validation error" in " ".join(lines[max(0, i - 2) : i]):
            found.append(_short(v["msg"]))
            continue
        e = _EXC_LINE.match(line)
        if not e or any(w in line for w in _WRAPPERS) or e["kind"] == "ValidationError":
            continue
        where = f" in {proc}" if proc and proc not in ("APIServer", "MainProcess") else ""
        if e["msg"]:
            found.append(f"{e['kind']}{where}: {_short(e['msg'])}")
            continue
        code = [
            ln
            for ln in (_PREFIX.sub("", x).strip() for x in lines[max(0, i - 4) : i])
            if ln and set(ln) - set("^~ ")
        ]
        found.append(f"{e['kind']}{where}" + (f": {code[-1]}" if code else ""))
    return list(dict.fromkeys(found))  # the same error printed by vLLM's logger and again bare, once


def log_reason(text: str) -> str:
    """vLLM's own error in one line, from its log: the root cause (the first exception a traceback ends with,
    not the wrappers that report it again: "Engine core initialization failed. See root cause above"), a pydantic
    validation's message, no traceback, no server path."""
    from engine.race.verdict import one_line_reason

    lines = (text or "").splitlines()
    found = _exceptions(lines)
    if found:
        return one_line_reason(found[0])
    tail = [ln.strip() for ln in lines if ln.strip()][-1:]
    return one_line_reason(tail[0]) if tail else "vLLM wrote nothing to its log"


def command_reason(text: str) -> str:
    """Why `python -m engine serve --backend vllm` stopped, from its own output: the one line it printed
    ("error: vLLM exited (code 1) before it was ready: ValueError: ...") without the prefix, else vLLM's own error."""
    for line in reversed((text or "").splitlines()):
        if line.startswith("error: "):
            return paths.scrub(line.removeprefix("error: ").strip())
    return log_reason(text)


# ---------------------------------------------------------------- the server process


def free_port(host: str = "127.0.0.1") -> int:
    from engine.serving.process import free_port as engine_free_port

    return engine_free_port(host)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """The vLLM server gets SIGTERM if the process that started it dies (a SIGKILLed `engine serve`), so it
    never outlives the lab's command (Linux; elsewhere the stop below is the only guard)."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


class VllmServer:
    """vLLM's OpenAI server for a serve spec: `start()`, `wait_ready()`, `figures()`, `stop()` (SIGTERM, then
    SIGKILL for the whole process group and every process it started). Its log is a file (`log_path`)."""

    def __init__(self, spec, *, build: Build | None = None, log_path: Path | None = None) -> None:
        self.spec = spec.validate()
        self.build = build or find_build()
        self.folder, self.served_name = model_folder(spec.model, spec.served_name)
        self.port = spec.port or free_port(spec.host)
        self.launch = launch(spec, self.build, self.folder, self.served_name, self.port)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        self.log_path = log_path or paths.home() / "logs" / f"vllm-{self.served_name}-{self.port}-{stamp}.log"
        self.proc: subprocess.Popen | None = None
        self.answered = False  # /health answered once
        self._log = None

    @property
    def host_url(self) -> str:
        host = "127.0.0.1" if self.spec.host in ("0.0.0.0", "") else self.spec.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.host_url}/v1"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> VllmServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in self.launch.unset} | self.launch.env
        self._log = open(self.log_path, "w", encoding="utf-8")  # noqa: SIM115 - open for the child's life
        self.proc = subprocess.Popen(
            list(self.launch.argv),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=str(ROOT),
            start_new_session=True,  # its own process group: the stop can reach every process it starts
            preexec_fn=_die_with_parent,  # the command starts it from its main thread (PDEATHSIG follows that thread)
        )
        return self

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def _get(self, path: str, timeout: float = 3.0) -> tuple[int, str]:
        req = urllib.request.Request(self.host_url + path)
        key = self.launch.env.get("VLLM_API_KEY")
        if key and path.startswith("/v1"):
            req.add_header("Authorization", f"Bearer {key}")
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")

    def ready(self) -> bool:
        try:
            if self._get("/health")[0] != 200:
                return False
            self.answered = True  # a client may already be talking to it
            status, body = self._get("/v1/models")
        except (OSError, urllib.error.URLError, ValueError):
            return False
        return status == 200 and self.served_name in body

    def wait_ready(self, timeout: float = READY_TIMEOUT_S, stop: threading.Event | None = None) -> bool:
        """True once /health answers and /v1/models lists the model; False if `stop` was set first. Raises
        VllmStartError with vLLM's own error when it exits or is not ready in time (and stops it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if stop is not None and stop.is_set():
                return False
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                self.stop()
                text = self.log_text()
                served = self.answered or "Starting vLLM server on" in text  # a client may have been first
                when = "after it began to serve" if served else "before it was ready"
                raise VllmStartError(f"vLLM exited (code {code}) {when}: {log_reason(text)}")
            if self.ready():
                return True
            time.sleep(0.5)
        self.stop()
        raise VllmStartError(
            f"vLLM was not ready within {timeout:.0f} s; its last words: {log_reason(self.log_text())}"
        )

    def figures(self) -> KvFigures | None:
        """vLLM's KV pool: its log line, with the block size and blocks of `vllm:cache_config_info`."""
        figures = parse_kv_line(self.log_text())
        if figures is None:
            return None
        try:
            labels = parse_cache_config_info(self._get("/metrics")[1])
        except (OSError, urllib.error.URLError, ValueError):
            labels = {}
        return with_cache_info(figures, labels)

    def record_figures(self, started_by: str = "serve") -> dict[str, Any] | None:
        """Read vLLM's figures, put the calculator's beside them and append the row to the track record."""
        figures = self.figures()
        if figures is None:
            return None
        predicted = None
        # the calculator's CPU branch sizes one rank's pool; past one rank the heads or layers split it
        if self.launch.kv_space_bytes is not None and getattr(self.spec, "world_size", 1) == 1:
            predicted = predicted_kv(
                self.folder,
                self.launch.dtype,
                self.launch.kv_space_bytes,
                figures.max_model_len,
                self.build.device,
            )
        row = kv_record(
            figures,
            predicted,
            build=self.build,
            model=self.served_name,
            dtype=self.launch.dtype,
            kv_space_bytes=self.launch.kv_space_bytes,
            started_by=started_by,
        )
        append_kv_record(row)
        return row

    def _tree(self) -> list:
        import psutil

        try:
            return psutil.Process(self.proc.pid).children(recursive=True) if self.proc else []
        except psutil.Error:
            return []

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM to the API server (it tears EngineCore and the worker down), then SIGKILL for its process group
        and for any process it started that is still there: nothing is left running."""
        proc = self.proc
        if proc is not None:
            started = self._tree()
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # stragglers in its group
            for child in started:
                with contextlib.suppress(Exception):
                    child.kill()  # one that left the group (a new session of its own)
        if self._log is not None and not self._log.closed:
            self._log.close()

    def __enter__(self) -> VllmServer:
        self.start()
        self.wait_ready()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def serve_until_signal(spec, out=sys.stderr) -> dict[str, Any]:
    """`python -m engine serve --backend vllm`: start vLLM, wait until it is ready, record its KV figures, and
    stop it (with every process it started) on SIGTERM or SIGINT, or say why it died."""
    server = VllmServer(spec)
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    row = None
    try:
        print(f"starting {server.build.label}: {server.launch.shell()}", file=out, flush=True)
        print(f"vLLM's log: {server.log_path}", file=out, flush=True)
        server.start()
        if server.wait_ready(stop=stop):
            row = server.record_figures()
            kv = f"; {row['logged']['line']}" if row else ""
            print(f"{READY_LINE}{server.base_url} serving {server.served_name}{kv}", file=out, flush=True)
            while not stop.is_set() and server.alive:
                stop.wait(0.5)
            if not stop.is_set():
                raise VllmStartError(
                    f"vLLM exited (code {server.proc.returncode if server.proc else None}): "
                    f"{log_reason(server.log_text())}"
                )
    finally:
        server.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return {
        "stopped": True,
        "backend": "vllm",
        "build": server.build.label,
        "model": server.served_name,
        "port": server.port,
        "kv": row,
        "log": str(server.log_path),
    }


def wait_command_ready(srv, timeout: float = READY_TIMEOUT_S):
    """`python -m engine serve --backend vllm` run as an engine.serving.process.ServerProcess: ready once the
    command says so (its "ready:" line), which comes after vLLM's /health, /v1/models and its KV row in the track
    record; /health alone answers before the model is listed and before the row is written. RuntimeError (the
    command's own reason in the log) when it exits first or is not ready in time."""
    deadline = time.monotonic() + timeout
    srv.wait_ready(timeout)
    while time.monotonic() < deadline:
        if any(ln.startswith(READY_LINE) for ln in srv.log_tail(200_000).splitlines()):
            return srv
        if not srv.alive:
            raise RuntimeError(f"the server exited with code {srv.proc.returncode}: {srv.log_tail()}")
        time.sleep(0.25)
    srv.stop(STOP_TIMEOUT_S + 10)
    raise RuntimeError(f"the server was not ready within {timeout:.0f} s: {srv.log_tail()}")
