"""`python -m engine serve`'s spec with the backend chosen: the engine's own server (the default) or vLLM's, from
the same options (engine/serving/runner.py ServeSpec), plus the one option only vLLM takes."""

from __future__ import annotations

from dataclasses import dataclass, fields

from engine.core.errors import InvalidParameterError
from engine.core.spec import option
from engine.serving.runner import ServeSpec

BACKENDS = ("engine", "vllm")


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

    def validate(self) -> BackendServeSpec:
        super().validate()
        if self.backend == "engine" and self.max_model_len is not None:
            raise InvalidParameterError(
                "--max-model-len is vLLM's option (--backend vllm); the engine's server limits requests with "
                "--max-prompt-tokens and --max-tokens"
            )
        return self

    def engine_spec(self) -> ServeSpec:
        """The same options as the engine's own server takes them."""
        return ServeSpec(**{f.name: getattr(self, f.name) for f in fields(ServeSpec)})
