"""GenerationConfig: the decoding settings every generation path takes (`generate` and `generate_batch`, the stream,
the shared scheduler, the server, the race), with their bounds and one validation. Its fields are the
playground's widgets' defaults and the CLI's flags (`GenerationConfig.add_arguments`). `parse_stops` reads stop
sequences as a person types them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from engine.core.errors import InvalidParameterError
from engine.core.spec import Spec, option

MAX_NEW_TOKENS_LIMIT = 4096
MAX_STOP_SEQUENCES = 8


@dataclass(frozen=True)
class GenerationConfig(Spec):
    """Decoding settings: the one spec of `generate`. Its fields are the playground's widgets' defaults and the CLI's
    flags (`GenerationConfig.add_arguments`)."""

    max_new_tokens: int = option(
        64, "new tokens to generate at most", lo=1, hi=MAX_NEW_TOKENS_LIMIT, label="max new tokens"
    )
    # greedy by default: reproducible, and what the race compares
    do_sample: bool = option(False, "sample instead of greedy decoding", flag="--sample")
    temperature: float = option(0.7, "sampling temperature (when sampling: above 0)", hi=10.0)
    top_p: float = option(
        0.95, "sampling: keep the smallest set of tokens whose probability reaches top-p", hi=1.0
    )
    top_k: int = option(50, "sampling: keep the k most likely tokens (0 turns it off)", lo=0, hi=1000)
    repetition_penalty: float = option(1.0, "repetition penalty (1 = off; above 0)", hi=10.0)
    seed: int | None = option(0, "seed of the sampling RNG", kind=int, lo=0)
    # repeatable on the command line (--stop, engine/commands/generate.py): a stop sequence may hold a comma
    stop: tuple[str, ...] = option((), "stop sequences", cli=False)
    use_cache: bool = option(
        True,
        "keep the KV cache (off recomputes every past token's keys and values each step)",
        flag="--cache",
    )
    chat_template: bool = option(False, "wrap the prompt in the model's chat template", flag="--chat")
    include_prompt: bool = option(False, "show the prompt with the completion")
    compile: bool = option(
        False,
        "compiled decode: a static KV cache and a torch.compile'd decode step (CUDA graphs on a GPU); the first "
        "run per model compiles (25-65 s on a 2-core CPU), later runs reuse it",
    )

    def validate(self) -> GenerationConfig:
        def finite(name: str, value: float) -> None:
            if not isinstance(value, int | float) or not math.isfinite(value):
                raise InvalidParameterError(f"{name} must be a finite number, got {value!r}")

        if not isinstance(self.max_new_tokens, int) or isinstance(self.max_new_tokens, bool):
            raise InvalidParameterError(f"max_new_tokens must be a whole number, got {self.max_new_tokens!r}")
        if not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS_LIMIT:
            raise InvalidParameterError(
                f"max_new_tokens must be between 1 and {MAX_NEW_TOKENS_LIMIT}, got {self.max_new_tokens}"
            )
        for name in ("temperature", "top_p", "repetition_penalty"):
            finite(name, getattr(self, name))
        if self.do_sample and not 0 < self.temperature <= 10:
            raise InvalidParameterError(
                f"temperature must be in (0, 10] when sampling, got {self.temperature}; use greedy for 0"
            )
        if not 0 < self.top_p <= 1:
            raise InvalidParameterError(f"top_p must be in (0, 1], got {self.top_p}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise InvalidParameterError(
                f"top_k must be a whole number >= 0 (0 turns it off), got {self.top_k!r}"
            )
        if not 0 < self.repetition_penalty <= 10:
            raise InvalidParameterError(
                f"repetition_penalty must be in (0, 10], got {self.repetition_penalty}"
            )
        if self.seed is not None and (not isinstance(self.seed, int) or not 0 <= self.seed < 2**63):
            raise InvalidParameterError(f"seed must be a whole number >= 0, got {self.seed!r}")
        if len(self.stop) > MAX_STOP_SEQUENCES:
            raise InvalidParameterError(f"at most {MAX_STOP_SEQUENCES} stop sequences, got {len(self.stop)}")
        if any(not s for s in self.stop):
            raise InvalidParameterError("stop sequences must not be empty strings")
        if self.compile and not self.use_cache:
            raise InvalidParameterError(
                "compiled decode runs on the KV cache: turn the KV cache on, or compiled decode off"
            )
        return self


def parse_stops(text: str | Sequence[str]) -> tuple[str, ...]:
    """Stop sequences as a person types them: one comma-separated text (the Playground; blank entries dropped) or
    one value per flag (the CLI's repeated --stop, so a sequence may hold a comma; kept as given, so an empty one
    is refused by GenerationConfig). "\\n" written out means a newline. The server's JSON `stop` field is
    validated by its protocol (OpenAI's rules)."""
    parts = [p.strip() for p in text.split(",") if p.strip()] if isinstance(text, str) else list(text)
    return tuple(s.replace("\\n", "\n") for s in parts)
