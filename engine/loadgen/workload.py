"""What a load test sends: prompts (the shipped set or a JSONL file), output lengths (fixed or drawn), and when
(Poisson arrivals at a rate, or a fixed number of users each sending as soon as the last answer ends). Seeded:
the same spec always sends the same requests at the same offsets."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, replace
from pathlib import Path

SHIPPED_PROMPTS = Path(__file__).with_name("prompts.jsonl")
MODES = ("poisson", "concurrency")
ENDPOINTS = ("completions", "chat")


class LoadSpecError(ValueError):
    """A load spec or prompt file the generator cannot use; the message says what to change."""


@dataclass(frozen=True)
class SLO:
    """Service-level objectives per request (None = not checked); a request is 'good' when it meets all of them
    (vLLM's goodput). A run meets the SLOs when at least `min_attainment` of its requests are good."""

    ttft_s: float | None = 2.0
    tpot_s: float | None = 0.2
    e2e_s: float | None = None
    min_attainment: float = 0.9

    def validate(self) -> SLO:
        for name in ("ttft_s", "tpot_s", "e2e_s"):
            v = getattr(self, name)
            if v is not None and (not math.isfinite(v) or v <= 0):
                raise LoadSpecError(
                    f"the {name[:-2].upper()} SLO must be a positive number of seconds, got {v}"
                )
        if not 0 < self.min_attainment <= 1:
            raise LoadSpecError(f"the SLO attainment target must be in (0, 1], got {self.min_attainment}")
        return self


@dataclass(frozen=True)
class LoadSpec:
    base_url: str  # e.g. http://127.0.0.1:8000/v1 (the part before /completions)
    model: str
    api_key: str | None = None
    endpoint: str = "completions"
    mode: str = "poisson"
    rate: float = 1.0  # requests per second (poisson)
    # arrival gaps Gamma(shape=burstiness, mean 1/rate), vLLM's `bench serve --burstiness`: 1 is Poisson,
    # below 1 burstier (the same rate in clumps), above 1 steadier
    burstiness: float = 1.0
    concurrency: int = 1  # users (concurrency)
    n_requests: int = 32
    output_tokens: int = 64
    output_tokens_max: int | None = (
        None  # set: lengths drawn uniformly from [output_tokens, output_tokens_max]
    )
    prompts_file: str | None = None
    ignore_eos: bool = (
        True  # vLLM's extension: every request makes exactly its output length (comparable runs)
    )
    temperature: float | None = 0.0  # None: leave it to the server's default (as GuideLLM does)
    seed: int = 0
    timeout_s: float = 600.0  # per request: a failure guard, not a measurement

    def validate(self) -> LoadSpec:
        if not self.base_url.startswith(("http://", "https://")):
            raise LoadSpecError(f"the URL must start with http:// or https://, got {self.base_url!r}")
        if not self.model:
            raise LoadSpecError("give the model name the server serves (its GET /v1/models lists it)")
        if self.endpoint not in ENDPOINTS or self.mode not in MODES:
            raise LoadSpecError(f"endpoint must be one of {ENDPOINTS} and mode one of {MODES}")
        if self.mode == "poisson" and not (math.isfinite(self.rate) and self.rate > 0):
            raise LoadSpecError(f"the request rate must be a positive number per second, got {self.rate}")
        if not (math.isfinite(self.burstiness) and self.burstiness > 0):
            raise LoadSpecError(f"burstiness must be a positive number (1 = Poisson), got {self.burstiness}")
        if self.mode == "concurrency" and not (isinstance(self.concurrency, int) and self.concurrency >= 1):
            raise LoadSpecError(f"concurrency must be a whole number >= 1, got {self.concurrency}")
        if not 1 <= self.n_requests <= 100_000:
            raise LoadSpecError(f"requests per run must be 1..100000, got {self.n_requests}")
        if self.output_tokens < 1 or (
            self.output_tokens_max is not None and self.output_tokens_max < self.output_tokens
        ):
            raise LoadSpecError("output tokens must be >= 1, and the maximum (if given) >= the minimum")
        return self

    def at(self, value: float) -> LoadSpec:
        """The same spec at another load level (a rate, or a number of users)."""
        return (
            replace(self, rate=float(value))
            if self.mode == "poisson"
            else replace(self, concurrency=int(value))
        )

    @property
    def level(self) -> float:
        return self.rate if self.mode == "poisson" else float(self.concurrency)


@dataclass(frozen=True)
class PlannedRequest:
    index: int
    prompt: str
    max_tokens: int
    send_at_s: float  # offset from the run's start (poisson); 0 for concurrency (sent when a user is free)


def parse_levels(text: str) -> tuple[float, ...]:
    """Load levels as a person types them: numbers separated by commas ("1, 2, 4, 8"); a clear message otherwise."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    levels = []
    for p in parts:
        try:
            v = float(p)
        except ValueError:
            raise LoadSpecError(
                f"load levels are numbers separated by commas (e.g. 1, 2, 4, 8); {p!r} is not a number"
            ) from None
        if not math.isfinite(v) or v <= 0:
            raise LoadSpecError(f"load levels must be positive numbers; got {p!r}")
        levels.append(v)
    if not levels:
        raise LoadSpecError(
            "give at least one load level (rates per second, or numbers of users), e.g. 1, 2, 4, 8"
        )
    return tuple(levels)


def load_prompts(path: str | None) -> list[str]:
    """One JSON object per line with a "prompt" (or "text") string; blank lines skipped."""
    p = Path(path) if path else SHIPPED_PROMPTS
    if not p.is_file():
        raise LoadSpecError(f'no prompt file at {p}: give a JSONL file with one {{"prompt": ...}} per line')
    prompts: list[str] = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LoadSpecError(f"{p.name} line {n} is not JSON ({exc})") from None
        text = obj.get("prompt", obj.get("text")) if isinstance(obj, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise LoadSpecError(f'{p.name} line {n} has no non-empty "prompt" string')
        prompts.append(text)
    if not prompts:
        raise LoadSpecError(f"{p.name} holds no prompts")
    return prompts


def plan(spec: LoadSpec) -> list[PlannedRequest]:
    """The run's requests: prompts cycled in a seeded shuffle, lengths drawn, Poisson offsets (exponential gaps
    with mean 1/rate, the arrival process vLLM's benchmark uses for a finite rate), or Gamma gaps with the same
    mean where burstiness != 1 (vLLM: shape = burstiness, scale = 1 / (rate x burstiness))."""
    spec.validate()
    rng = random.Random(spec.seed)
    prompts = load_prompts(spec.prompts_file)
    order = list(range(len(prompts)))
    rng.shuffle(order)
    t = 0.0
    out: list[PlannedRequest] = []
    for i in range(spec.n_requests):
        n = (
            spec.output_tokens
            if spec.output_tokens_max is None
            else rng.randint(spec.output_tokens, spec.output_tokens_max)
        )
        if spec.mode == "poisson" and i > 0:
            if spec.burstiness == 1.0:
                t += rng.expovariate(spec.rate)
            else:
                t += rng.gammavariate(spec.burstiness, 1.0 / (spec.rate * spec.burstiness))
        out.append(PlannedRequest(i, prompts[order[i % len(order)]], n, t if spec.mode == "poisson" else 0.0))
    return out
