"""Published runs of the setup an estimate is for, shown beside it: the same model shape, GPU, GPU count and
engine class in engine/data/published (rows the fit may or may not use: a TPOT measured under a request load it
cannot size is still a fact about the setup).

A time per output token measured under load is at least the time of one user's step (a decode step carries every
running request), so a published TPOT under any load below the estimate's one-user interval says the estimate
counts too much time per step for this setup. The estimate says so and names the figure to budget from.
Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

from engine.calc import published
from engine.calc.specs import ModelSpec

TPOT_METRICS = {"tpot_ms": 1e-3, "decode_tokens_per_s": None}  # seconds per unit; None: a rate in tokens/s


@dataclass(frozen=True)
class Seen:
    """One published time per output token of the same setup."""

    tpot_s: float
    load: str  # "one user", "request rate 4/s", "8 concurrent users", "batch 8"
    engine: str  # the engine and its version, as the source names them
    source: str
    row_id: str
    prompt_tokens: int | None = None  # per request, as the source states them (None: not stated)
    output_tokens: int | None = None
    dataset: str | None = None  # the prompts' dataset, where the source names one ("ShareGPT")
    users: int | None = (
        None  # sequences in flight at once (a batch or a concurrency); None: a rate or the engine's
    )

    @property
    def lengths(self) -> str:
        """The run's prompt and output lengths in words: the stated tokens, else the dataset, else "not stated"."""
        if self.prompt_tokens is None and self.output_tokens is None:
            return f"{self.dataset}'s own (varied, not stated)" if self.dataset else "not stated"
        p, o = self.prompt_tokens, self.output_tokens
        if p is None or o is None:
            words = (
                f"{p:,} prompt tokens, output not stated"
                if o is None
                else f"prompt not stated, {o:,} output tokens"
            )
        else:
            words = f"{p:,} + {o:,} tokens"
        return words + (f" ({self.dataset}, means)" if self.dataset else "")

    def same_as(self, prompt_tokens: int, output_tokens: int, users: int) -> bool:
        """Whether this run is of an estimate's very workload: the same lengths (stated) at the same users in flight
        (a request rate is not a number of users): only such a run checks that estimate."""
        return self.dataset is None and (self.prompt_tokens, self.output_tokens, self.users) == (
            prompt_tokens,
            output_tokens,
            users,
        )


def _shape(spec: ModelSpec) -> tuple[int, ...]:
    return (spec.n_layer, spec.hidden, spec.n_head, spec.n_kv_head, spec.vocab)


@cache
def _row_shape(config_model: str) -> tuple[int, ...] | None:
    from engine.calc.hf_config import spec_from_hf_config

    cfg = published.configs().get(config_model)
    return None if cfg is None else _shape(spec_from_hf_config(cfg, name=config_model))


def _width(dtype: str) -> str:
    """fp16 and bf16 read the same bytes: one setup for a time per token."""
    return "16-bit" if dtype in ("fp16", "bf16") else dtype


def _load(r: published.PublishedRow) -> str:
    if r.batch <= 1 and r.batch_kind in ("batch", "concurrency"):
        return "one user"
    if r.batch_kind == "request-rate":
        return f"request rate {r.batch:g}/s"
    if r.batch_kind == "concurrency":
        return f"{r.batch} concurrent users"
    return f"batch {r.batch}"


def seen_runs(spec: ModelSpec, gpu_key: str, gpus: int, engine_class: str, dtype: str) -> list[Seen]:
    """Published TPOTs of this model shape on `gpus` x `gpu_key` by an engine of `engine_class` in 16-bit weights
    like `dtype` (a quantized run reads fewer bytes: not the same setup), quickest first."""
    out = []
    for r in published.rows():
        if r.kind != "speed" or r.metric not in TPOT_METRICS or r.gpu_key != gpu_key or r.gpu_count != gpus:
            continue
        if r.engine_class != engine_class or r.calc_format is not None or _width(r.dtype) != _width(dtype):
            continue
        if r.config_model is None or _row_shape(r.config_model) != _shape(spec) or r.value <= 0:
            continue
        scale = TPOT_METRICS[r.metric]
        tpot = r.value * scale if scale is not None else 1.0 / r.value
        if r.metric == "decode_tokens_per_s" and not (
            r.batch <= 1 and r.batch_kind in ("batch", "concurrency")
        ):
            continue  # a rate under load is not one user's time per token
        users = max(1, r.batch) if r.batch_kind in ("batch", "concurrency") else None
        out.append(
            Seen(
                tpot,
                _load(r),
                f"{r.engine} {r.engine_version}",
                r.source,
                r.id,
                r.prompt_tokens,
                r.output_tokens,
                r.dataset,
                users,
            )
        )
    return sorted(out, key=lambda s: s.tpot_s)


def context_words(
    seen: list[Seen] | tuple[Seen, ...], prompt_tokens: int, output_tokens: int, users: int
) -> str:
    """One sentence on what the published runs beside an estimate can say about it: a time per output token grows
    with the users in a step and the tokens each holds, so only a run of the estimate's lengths and load checks
    it; the rest are context. Empty without runs."""
    if not seen:
        return ""
    at = f"{users:,} user{'s' if users != 1 else ''} of {prompt_tokens:,} + {output_tokens:,} tokens"
    same = [r for r in seen if r.same_as(prompt_tokens, output_tokens, users)]
    if not same:
        return (
            f"None of these runs is at this estimate's {at}: runs at other lengths or loads are context, not a "
            "check of it (a step's time grows with the users in it and the tokens each holds); only a run of the "
            "same lengths and load would check it."
        )
    many = len(same) > 1
    return (
        f"{len(same)} of these runs {'are' if many else 'is'} at this estimate's {at} and so check{'' if many else 's'} "
        "it; the others, at other lengths or loads, are context, not a check of it."
    )


def below_estimate(seen: list[Seen], one_user_low_s: float) -> Seen | None:
    """The quickest published TPOT when it lies below the estimate's one-user interval (None otherwise)."""
    if not seen or not math.isfinite(one_user_low_s):
        return None
    quickest = seen[0]
    return quickest if quickest.tpot_s < one_user_low_s else None
