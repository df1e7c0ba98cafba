"""One request inside a batch: its tokens, how the next one is chosen, when it stops, its text and its timings.

Shared by the static runner and the in-flight scheduler so both policies decode with the same code.
Greedy rows of a batch take one batched argmax. Sampling is per row with the request's own
`torch.Generator` seeded from `cfg.seed`: a request's sample does not depend on what else shares the batch
(it is not the same stream as `generate`'s, which seeds the process-wide RNG).
Repetition penalty follows transformers' RepetitionPenaltyLogitsProcessor over the row's own prompt +
output (a padded `generate` batch also penalises the pad token; a solo run does not, and neither do we).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from datetime import UTC, datetime

import torch

from engine.runtime.generation import Completion
from engine.runtime.metrics import PeakMemory, run_metrics, without_compile
from engine.runtime.sampling import eos_ids, next_tokens
from engine.runtime.settings import GenerationConfig


@dataclass
class RequestTimes:
    """perf_counter seconds; NaN until the event happens."""

    arrival: float
    admitted: float = math.nan  # prefill starts: the request holds a batch slot from here
    first_token: float = math.nan
    finished: float = math.nan
    slot_released: float = math.nan  # static batching: when the whole batch ends (>= finished)


class Request:
    """A request's decoding state (one row of a batch). Not thread-safe: only the thread running the model
    touches it. (Named `Request`, not `Sequence`, so that it does not shadow collections.abc.Sequence.)"""

    def __init__(
        self,
        rid: int,
        lm,
        prompt: str,
        rendered: str,
        prompt_ids: Seq[int],
        cfg: GenerationConfig,
        *,
        ignore_eos: bool = False,
        arrival: float | None = None,
    ) -> None:
        self.id = rid
        self.lm = lm
        self.prompt = prompt
        self.rendered = rendered
        self.prompt_ids = list(prompt_ids)
        self.cfg = cfg
        self.ignore_eos = ignore_eos
        self.times = RequestTimes(arrival=time.perf_counter() if arrival is None else arrival)
        self.generated: list[int] = []
        self.token_times: list[float] = []  # when each generated token existed
        self.compile_steps: list[
            int
        ] = []  # tokens whose step compiled the decode step first (their gap holds it)
        self.stop_reason: str | None = None
        self.text = ""
        self.emitted = 0  # characters of `text` already streamed
        self.max_batch_seen = 0
        self.started_at = ""
        self.peak: PeakMemory | None = None  # the largest memory seen while the request held a slot
        self.cancel_event = threading.Event()
        self.eos: set[int] = set() if ignore_eos else eos_ids(lm)
        self.generator: torch.Generator | None = None
        if cfg.do_sample:
            self.generator = torch.Generator(device=lm.model.device)
            self.generator.manual_seed(cfg.seed if cfg.seed is not None else int(torch.seed() % 2**63))

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def position(self) -> int:
        """Position id of the last generated token, the next decode input."""
        return self.prompt_len + len(self.generated) - 1

    @property
    def remaining(self) -> int:
        return self.cfg.max_new_tokens - len(self.generated)

    @property
    def done(self) -> bool:
        return self.stop_reason is not None

    def mark_admitted(self) -> None:
        self.times.admitted = time.perf_counter()
        self.started_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.peak = PeakMemory(self.lm.device)

    def see_memory(self, step_peak: int) -> None:
        """Fold in the memory peak of a step this request took part in (sampled by the batch runner)."""
        if self.peak is not None:
            self.peak.see(step_peak)

    def append(self, token: int, now: float, batch_size: int) -> None:
        """Add a token (made at `now` in a batch of `batch_size`) and decide whether the sequence stops."""
        self.generated.append(token)
        self.token_times.append(now)
        self.max_batch_seen = max(self.max_batch_seen, batch_size)
        if len(self.generated) == 1:
            self.times.first_token = now
        self.text = self.lm.tokenizer.decode(self.generated, skip_special_tokens=True)
        if token in self.eos:
            self.stop_reason = "eos"
        for s in self.cfg.stop:
            at = self.text.find(s)
            if at != -1:
                self.text, self.stop_reason = self.text[:at], "stop"
        if self.stop_reason is None and len(self.generated) >= self.cfg.max_new_tokens:
            self.stop_reason = "length"
        if self.stop_reason is None and self.cancel_event.is_set():
            self.stop_reason = "cancelled"
        if self.stop_reason is not None:
            self.times.finished = now

    def take_chunk(self) -> str:
        """New text since the last call. Holds back a partial UTF-8 character and, while running, the tail
        that could still become a stop string (so a stop sequence is never streamed)."""
        end = len(self.text)
        if not self.done:
            hold = max((len(s) - 1 for s in self.cfg.stop), default=0)
            end = max(self.emitted, end - hold)
            while end > self.emitted and self.text[end - 1] == "\ufffd":
                end -= 1
        chunk = self.text[self.emitted : end]
        self.emitted = end
        return chunk

    def completion(self) -> Completion:
        t = self.times
        if self.peak is None:
            self.peak = PeakMemory(self.lm.device)
        self.peak.sample(force=True)
        # a step that compiled is left out of the figures (reported once, as compile_s): see generation._run
        times, cut = without_compile(self.token_times, self.compile_steps)
        m = run_metrics(
            self.lm,
            request_t=t.arrival,
            first_token_t=t.first_token,
            last_token_t=times[-1] if times else t.finished,
            output_tokens=[max(1, len(self.generated))],
            prompt_tokens=self.prompt_len,
            batch_size=self.max_batch_seen,
            peak=self.peak,
            started_at=self.started_at,
            queue_s=t.admitted - t.arrival,
            use_cache=True,
            max_new_tokens=self.cfg.max_new_tokens,
        )
        return Completion(
            self.prompt,
            self.text,
            self.rendered + self.text,
            tuple(self.generated),
            self.stop_reason or "length",
            m,
            compile_s=cut or None,
            token_times=tuple(times),
            wall_s=t.finished - t.arrival if cut else None,
        )


def choose_tokens(logits: torch.Tensor, seqs: Seq[Request]) -> list[int]:
    """The next token of every row: logits [B, V] fp32, one row per sequence, each with its own settings and RNG."""
    return next_tokens(
        logits,
        [s.cfg for s in seqs],
        lambda i: seqs[i].prompt_ids + seqs[i].generated,
        [s.generator for s in seqs],
    )
