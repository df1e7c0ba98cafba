"""What a load test sends: prompts (the shipped set or a JSONL file), output lengths (fixed or drawn), and when
(Poisson arrivals at a rate, or a fixed number of users each sending as soon as the last answer ends). Seeded:
the same spec always sends the same requests at the same offsets."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from engine.core.errors import InvalidParameterError
from engine.core.spec import Spec, option, parse_seconds, parse_token_seconds

SHIPPED_PROMPTS = Path(__file__).with_name("prompts.jsonl")
MODES = ("poisson", "concurrency")
ENDPOINTS = ("completions", "chat")
WORKLOADS = ("single", "shared-prefix", "multi-turn")  # PromptsSpec.workload
DEFAULT_URL = "http://127.0.0.1:8000/v1"


class LoadSpecError(ValueError):
    """A load spec or prompt file the generator cannot use; the message says what to change."""


_S = TypeVar("_S", bound=Spec)


def _checked(spec: _S) -> _S:
    """The generic option checks (kinds, bounds, choices) after a spec's own, as a LoadSpecError."""
    try:
        return Spec.validate(spec)
    except InvalidParameterError as exc:
        raise LoadSpecError(str(exc)) from None


@dataclass(frozen=True)
class SLO(Spec):
    """Service-level objectives per request (None = not checked); a request is 'good' when it meets all of them
    (vLLM's goodput). A run meets the SLOs when at least `min_attainment` of its requests are good. On the command
    line 0 means none (`from_args`)."""

    ttft_s: float | None = option(
        2.0,
        "TTFT objective: the longest a request may wait for its first token; 0 turns it off",
        kind=float,
        flag="--slo-ttft",
        parse=parse_seconds,
        cli_help="TTFT objective in seconds, or with a unit: 2, 2s and 2000ms are all two seconds; 0 turns it off",
    )
    tpot_s: float | None = option(
        0.2,
        "TPOT objective: the longest time per output token a request may see; 0 turns it off",
        kind=float,
        flag="--slo-tpot",
        parse=parse_token_seconds,
        cli_help="TPOT objective in seconds, or with a unit: 0.05, 0.05s and 50ms are all 50 milliseconds; 0 turns "
        "it off",
    )
    e2e_s: float | None = option(
        None,
        "end-to-end objective: the longest a whole request may take; 0 turns it off",
        kind=float,
        flag="--slo-e2e",
        parse=parse_seconds,
        cli_help="end-to-end objective in seconds, or with a unit: 30, 30s and 30000ms are all 30 seconds; 0 turns "
        "it off",
    )
    min_attainment: float = option(0.9, "share of requests that must meet them", flag="--slo-attainment")

    @classmethod
    def from_args(cls, args, **overrides) -> SLO:
        """The objectives from parsed flags, 0 read as none."""
        given = {name: getattr(args, name) or None for name in ("ttft_s", "tpot_s", "e2e_s")}
        return super().from_args(args, **{**given, **overrides})

    @classmethod
    def given(cls, ttft_s: float | None = None, tpot_s: float | None = None) -> SLO:
        """The objectives from a page's boxes, read as the command line reads its flags: 0 turns one off."""
        return cls(ttft_s=ttft_s or None, tpot_s=tpot_s or None)

    def words(self) -> str:
        """'TTFT <= 2 s and TPOT <= 200 ms': the objectives set, as a sentence says them."""
        parts = []
        if self.ttft_s is not None:
            parts.append(f"TTFT <= {self.ttft_s:g} s")
        if self.tpot_s is not None:
            parts.append(f"TPOT <= {self.tpot_s * 1e3:g} ms")
        if self.e2e_s is not None:
            parts.append(f"E2E <= {self.e2e_s:g} s")
        return " and ".join(parts)

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
class LoadSpec(Spec):
    """What a load test sends and how fast: each option once, with its default, bounds and help; the loadgen
    command's flags, bench/serving.py and the Serving page read it (the flag names are the command's: --url,
    --requests, --prompts...; the field names are the JSON keys of a result's spec)."""

    base_url: str = option(
        DEFAULT_URL, "base URL up to /v1 (vLLM, TGI, SGLang, this engine's server...)", flag="--url"
    )
    model: str | None = option(
        None, "model id to send (default: the first one GET /v1/models lists)", kind=str
    )
    api_key: str | None = option(
        None, "the server's API key (the command reads it from the environment)", kind=str, cli=False
    )
    endpoint: str = option("completions", "the OpenAI endpoint to call", choices=ENDPOINTS)
    mode: str = option("poisson", "Poisson arrivals at --rate, or --concurrency users", choices=MODES)
    rate: float = option(1.0, "requests per second (poisson)")
    # arrival gaps Gamma(shape=burstiness, mean 1/rate), vLLM's `bench serve --burstiness`: 1 is Poisson,
    # below 1 burstier (the same rate in clumps), above 1 steadier
    burstiness: float = option(
        1.0, "Gamma arrivals as vLLM's bench serve: 1 = Poisson, < 1 burstier, > 1 steadier"
    )
    concurrency: int = option(1, "users, each sending when its last answer ends", lo=1)
    n_requests: int = option(32, "requests per run", lo=1, hi=100_000, flag="--requests")
    output_tokens: int = option(64, "max_tokens per request", lo=1)
    output_tokens_max: int | None = option(None, "draw lengths uniformly up to this", kind=int, lo=1)
    prompts_file: str | None = option(
        None,
        'JSONL file with one {"prompt": ...} per line (default: the shipped set)',
        kind=str,
        flag="--prompts",
    )
    # vLLM's extension: every request makes exactly its output length (comparable runs)
    ignore_eos: bool = option(
        True,
        "send vLLM's ignore_eos so every request makes its full length (--no-ignore-eos for servers that refuse it)",
    )
    temperature: float | None = option(
        0.0, "sampling temperature sent (None: the server's default, as GuideLLM does)", kind=float, cli=False
    )
    seed: int = option(0, "seed of the request plan (prompts, lengths, arrival times)")
    # shared-prefix prompts (vLLM bench's prefix-repetition dataset, GuideLLM's prefix_tokens): a server with a
    # prefix cache reuses the prefix's KV; one without prefills it every time
    prefix_tokens: int = option(
        0,
        "shared-prefix workload: every prompt starts with one of --num-prefixes common prefixes of this many "
        "words (about one token each; 0 = none)",
        lo=0,
        hi=100_000,
    )
    num_prefixes: int = option(1, "distinct shared prefixes, taken in turn by the requests", lo=1, hi=1000)
    # multi-turn chat: a session's turn k sends the whole conversation so far (its earlier questions and the
    # server's answers) plus the next question; sessions run one turn at a time, each when the last answer ends
    turns: int = option(
        1,
        "multi-turn chat: turns per user session, each sending the conversation so far plus the next question "
        "(chat endpoint; --requests counts turns)",
        lo=1,
        hi=1000,
    )
    timeout_s: float = option(600.0, "per request: a failure guard, not a measurement", cli=False)

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
        if self.turns > 1 and self.endpoint != "chat":
            raise LoadSpecError(
                "a multi-turn workload sends conversations: choose the chat endpoint (--endpoint chat)"
            )
        # the generic checks (whole numbers, bounds, choices); a None temperature (the server's default) is
        # allowed beside the 0.0 default
        _checked(self if self.temperature is not None else replace(self, temperature=0.0))
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
class PromptsSpec(Spec):
    """Which kind of prompts a load test sends, as the Serving page offers it: the workload says which LoadSpec fields
    apply (prefix_tokens and num_prefixes for a shared prefix, turns for multi-turn). Not a LoadSpec field: a
    result's spec records those fields (its JSON keys), and the command line sets them directly."""

    workload: str = option(
        "single",
        "shared prefix: every prompt starts with a common prefix (a prefix cache's best case); multi-turn: each "
        "user's session sends its conversation so far with each new question (chat endpoint)",
        choices=WORKLOADS,
        label="prompts",
        cli=False,
    )


@dataclass(frozen=True)
class PlannedRequest:
    index: int
    prompt: str  # the user's message of this turn (with its shared prefix, where the workload has one)
    max_tokens: int
    send_at_s: float  # offset from the run's start (poisson); 0 for concurrency (sent when a user is free)
    session: int = 0  # multi-turn: the conversation this turn belongs to (else each request is its own)
    turn: int = 1  # 1-based turn within the session


# words that GPT-2's and Llama's BPE vocabularies each hold as one token (with their leading space)
PREFIX_WORDS = tuple(
    [
        "the",
        "of",
        "and",
        "to",
        "in",
        "is",
        "was",
        "for",
        "on",
        "that",
        "with",
        "as",
        "by",
        "at",
        "from",
        "this",
        "are",
        "be",
        "or",
        "his",
        "it",
        "an",
        "which",
        "have",
        "not",
        "had",
        "one",
        "her",
        "their",
        "were",
        "all",
        "there",
        "been",
        "has",
        "when",
        "who",
        "will",
        "more",
        "no",
        "if",
        "out",
        "so",
        "said",
        "what",
        "up",
        "its",
        "about",
        "into",
        "than",
        "them",
        "can",
        "only",
        "other",
        "new",
        "some",
        "could",
        "time",
        "these",
        "two",
        "may",
        "then",
        "first",
        "any",
        "like",
        "now",
        "my",
        "such",
    ]
)


def shared_prefixes(spec: LoadSpec) -> list[str]:
    """The workload's common prefixes: `num_prefixes` seeded texts of `prefix_tokens` words each."""
    if spec.prefix_tokens <= 0:
        return []
    rng = random.Random(f"prefix-{spec.seed}")
    return [
        " ".join(rng.choice(PREFIX_WORDS) for _ in range(spec.prefix_tokens)).capitalize() + "."
        for _ in range(spec.num_prefixes)
    ]


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
    mean where burstiness != 1 (vLLM: shape = burstiness, scale = 1 / (rate x burstiness)). Shared prefixes go
    before each session's first prompt; with `turns` > 1, requests i*turns .. i*turns + turns - 1 are session i's
    turns, and only a session's first turn has an arrival time (the others follow its answers)."""
    spec.validate()
    rng = random.Random(spec.seed)
    prompts = load_prompts(spec.prompts_file)
    order = list(range(len(prompts)))
    rng.shuffle(order)
    prefixes = shared_prefixes(spec)
    t = 0.0
    out: list[PlannedRequest] = []
    for i in range(spec.n_requests):
        n = (
            spec.output_tokens
            if spec.output_tokens_max is None
            else rng.randint(spec.output_tokens, spec.output_tokens_max)
        )
        session, turn = divmod(i, spec.turns)
        if spec.mode == "poisson" and i > 0 and turn == 0:  # a session's later turns follow its answers
            if spec.burstiness == 1.0:
                t += rng.expovariate(spec.rate)
            else:
                t += rng.gammavariate(spec.burstiness, 1.0 / (spec.rate * spec.burstiness))
        prompt = prompts[order[i % len(order)]]
        if prefixes and turn == 0:
            prompt = f"{prefixes[session % len(prefixes)]}\n\n{prompt}"
        at = t if spec.mode == "poisson" else 0.0
        out.append(PlannedRequest(i, prompt, n, at, session if spec.turns > 1 else i, turn + 1))
    return out


def sessions(reqs: list[PlannedRequest]) -> list[list[PlannedRequest]]:
    """The plan as conversations, in order: each a list of turns (one request each where there is one turn)."""
    out: dict[int, list[PlannedRequest]] = {}
    for r in reqs:
        out.setdefault(r.session, []).append(r)
    return list(out.values())
