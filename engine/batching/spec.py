"""The batching lab's specs (engine.core.spec): a generated workload and the batch command's own options.
Kept apart from the scheduler so the command line and the page read them without importing torch."""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.core.errors import InvalidParameterError
from engine.core.spec import Spec, option
from engine.runtime.models import ModelArgs

OUTPUT_DISTRIBUTIONS = ("uniform", "log-uniform")


@dataclass(frozen=True)
class WorkloadSpec(Spec):
    """A generated workload: how many requests, when they arrive, how long their prompts and answers are. The
    Batching page, `python -m engine batch` and bench/batching.py take their defaults and bounds here."""

    n_requests: int = option(
        16, "requests in the workload", lo=1, hi=10_000, flag="--requests", label="requests"
    )
    arrival_rate_per_s: float = option(
        0.0, "Poisson arrivals per second; 0 = all at once", lo=0, flag="--rate", label="arrival rate"
    )
    prompt_tokens_min: int = option(8, "shortest prompt", lo=1, cli=False)
    prompt_tokens_max: int = option(64, "longest prompt", lo=1, cli=False)
    output_tokens_min: int = option(8, "shortest answer", lo=1, cli=False)
    output_tokens_max: int = option(256, "longest answer", lo=1, cli=False)
    output_distribution: str = option(
        "uniform",
        "uniform, or log-uniform: many short answers, a few long ones",
        choices=OUTPUT_DISTRIBUTIONS,
    )
    seed: int = option(0, "the workload's seed")

    def validate(self) -> WorkloadSpec:
        if not isinstance(self.n_requests, int) or self.n_requests < 1:
            raise InvalidParameterError(
                f"a workload needs at least one request, got n_requests={self.n_requests!r}: ask for 1 or more"
            )
        if self.n_requests > 10_000:
            raise InvalidParameterError(f"at most 10,000 requests per workload, got {self.n_requests}")
        if not math.isfinite(self.arrival_rate_per_s) or self.arrival_rate_per_s < 0:
            raise InvalidParameterError("arrival rate must be >= 0 requests/s (0 = all at once)")
        for lo, hi, what in (
            (self.prompt_tokens_min, self.prompt_tokens_max, "prompt tokens"),
            (self.output_tokens_min, self.output_tokens_max, "output tokens"),
        ):
            if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
                raise InvalidParameterError(f"{what}: need 1 <= min <= max, got {lo}..{hi}")
        if self.output_distribution not in OUTPUT_DISTRIBUTIONS:
            raise InvalidParameterError(
                f"output distribution must be one of {', '.join(OUTPUT_DISTRIBUTIONS)}, got {self.output_distribution!r}"
            )
        super().validate()
        return self


@dataclass(frozen=True)
class BatchSpec(ModelArgs):
    """`python -m engine batch`: which policies to replay, with how many sequences decoded together."""

    policy: str = option("both", "static, inflight or both", choices=("static", "inflight", "both"))
    max_batch: int = option(
        8, "most sequences decoded together (both policies)", lo=1, hi=256, label="max batch"
    )


SWEEP_SIZES = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class SweepSpec(Spec):
    """The Batching page's static sweep: one padded batch per size, each decoding the same number of tokens."""

    sizes: tuple[int, ...] = option(
        (1, 2, 4, 8, 16, 32), "batch sizes, one padded batch each", choices=SWEEP_SIZES, label="batch sizes"
    )
    max_new_tokens: int = option(32, "new tokens per sequence", lo=4, hi=256, label="new tokens each")


@dataclass(frozen=True)
class UsersSpec(Spec):
    """'Simulate N users': N requests sent to the shared scheduler, as N people pressing Generate together."""

    users: int = option(6, "concurrent requests", lo=1, hi=32, label="users (concurrent requests)")
    max_new_tokens: int = option(24, "new tokens per request", lo=1, hi=256, label="new tokens each")
    stagger_s: float = option(
        0.0, "seconds between two arrivals", lo=0.0, hi=5.0, label="seconds between arrivals"
    )
