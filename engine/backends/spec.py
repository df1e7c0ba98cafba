"""`python -m engine serve`'s spec with the backend chosen: the engine's own server (the default) or vLLM's, from
the same options (engine/serving/runner.py ServeSpec), plus the one option only vLLM takes."""

from __future__ import annotations

from dataclasses import dataclass, fields

from engine.core.errors import InvalidParameterError
from engine.core.spec import option
from engine.serving.runner import ServeSpec

BACKENDS = ("engine", "vllm")
VLLM_EXECUTORS = ("mp", "ray")


@dataclass(frozen=True)
class BackendServeSpec(ServeSpec):
    backend: str = option(
        "engine",
        "which server: the engine's own (in-flight scheduler) or vLLM's OpenAI server from .venv-vllm",
        choices=BACKENDS,
    )
    max_model_len: int | None = option(
        None,
        "vLLM's --max-model-len: prompt + output tokens of one request, which sizes its maximum concurrency "
        "(--backend vllm; default: the model's context window)",
        kind=int,
        lo=16,
    )
    tensor_parallel_size: int = option(
        1, "vLLM's --tensor-parallel-size: ranks that split every layer (--backend vllm)", lo=1, hi=64
    )
    pipeline_parallel_size: int = option(
        1,
        "vLLM's --pipeline-parallel-size: ranks that take a share of the layers each (--backend vllm)",
        lo=1,
        hi=64,
    )
    distributed_executor_backend: str | None = option(
        None,
        "vLLM's --distributed-executor-backend for several ranks: mp (processes on this machine) or ray (a Ray "
        "cluster; past one node) (--backend vllm; default: vLLM's choice)",
        kind=str,
        choices=VLLM_EXECUTORS,
    )

    @property
    def world_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    def validate(self) -> BackendServeSpec:
        super().validate()
        vllm_only = {
            "--max-model-len": self.max_model_len is not None,
            "--tensor-parallel-size": self.tensor_parallel_size != 1,
            "--pipeline-parallel-size": self.pipeline_parallel_size != 1,
            "--distributed-executor-backend": self.distributed_executor_backend is not None,
        }
        given = [flag for flag, on in vllm_only.items() if on]
        if self.backend == "engine" and given:
            raise InvalidParameterError(
                f"{given[0]} is vLLM's option (--backend vllm); the engine's server is one process and limits "
                "requests with --max-prompt-tokens and --max-tokens"
            )
        return self

    def engine_spec(self) -> ServeSpec:
        """The same options as the engine's own server takes them."""
        return ServeSpec(**{f.name: getattr(self, f.name) for f in fields(ServeSpec)})
