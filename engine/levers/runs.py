"""What every lever measures the same way: a derived model shares the LoadedModel contract (so the engine's
one `generate` times it), greedy continuations over the race's prompts (exact match and first divergence
against the reference come from engine.race.quality), and repeated timed runs."""

from __future__ import annotations

import dataclasses
import logging
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.race import quality
from engine.runtime.generation import generate
from engine.runtime.measurement import Measurement
from engine.runtime.models import LoadedModel
from engine.runtime.settings import GenerationConfig

Progress = Callable[[float, str], None]


def derived(lm: LoadedModel, model, label: str, notes: tuple[str, ...] = ()) -> LoadedModel:
    """The same tokenizer and facts around another model object, with its own lock."""
    return dataclasses.replace(
        lm,
        model=model,
        dtype=label,
        lock=threading.Lock(),
        notes=lm.notes + notes,
        name=f"{lm.name} [{label}]",
    )


def config(lm: LoadedModel, max_new_tokens: int) -> GenerationConfig:
    """Greedy, chat template when the model has one: what the race compares."""
    return GenerationConfig(max_new_tokens=max_new_tokens, chat_template=lm.has_chat_template).validate()


def quiet(fn, *args, **kwargs):
    """Run fn with third-party warnings silenced (bitsandbytes logs a warning on every CPU 8-bit matmul)."""
    noisy = logging.getLogger("bitsandbytes")
    level = noisy.level
    noisy.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args, **kwargs)
    finally:
        noisy.setLevel(level)


@dataclass(frozen=True)
class Timed:
    runs: tuple[Measurement, ...]
    token_ids: tuple[int, ...]  # the first run's greedy continuation

    @property
    def tpots(self) -> list[float]:
        return [m.tpot_s for m in self.runs]


def timed_runs(lm: LoadedModel, prompt: str, cfg: GenerationConfig, runs: int, warmup: int = 1) -> Timed:
    """`warmup` untimed runs (first-call allocations, lazy kernels), then `runs` measured ones."""
    for _ in range(warmup):
        quiet(
            generate,
            lm,
            prompt,
            dataclasses.replace(cfg, max_new_tokens=min(4, cfg.max_new_tokens)),
            record=False,
        )
    done = [quiet(generate, lm, prompt, cfg, record=False) for _ in range(runs)]
    return Timed(tuple(c.measurement for c in done), done[0].token_ids)


def greedy_tokens(lm: LoadedModel, prompts: Sequence[str], cfg: GenerationConfig) -> list[tuple[int, ...]]:
    return [quiet(generate, lm, p, cfg, record=False).token_ids for p in prompts]


@dataclass(frozen=True)
class Agreement:
    exact_match_rate: float
    first_divergence_token: int | None  # earliest over the prompts; None when every continuation matches
    per_prompt: tuple[int | None, ...]


def agreement(reference: Sequence[Sequence[int]], candidate: Sequence[Sequence[int]]) -> Agreement:
    per = tuple(quality.first_divergence(r, c) for r, c in zip(reference, candidate, strict=True))
    diverged = [d for d in per if d is not None]
    return Agreement(quality.exact_match_rate(reference, candidate), min(diverged) if diverged else None, per)
