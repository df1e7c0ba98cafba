"""Generate from a LoadedModel, one prompt or a batch, streamed or not, and measure every run.

The chapter's section 4.1.1 workflow (tokenize -> `generate` -> decode) with the serving metrics of
section 4.2 taken on every call: TTFT, TPOT (vLLM's definition, first token excluded), latency,
tokens/s and peak memory. Timing: a StoppingCriteria is called once per decode step, after the new
token exists; on CUDA it synchronises before reading the clock, so the step times are real.
Streaming uses transformers' TextIteratorStreamer with `generate` in a worker thread.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from engine.core.errors import (
    CancelledError,
    EngineError,
    InvalidParameterError,
    OutOfMemoryError,
    PromptTooLongError,
)
from engine.runtime import runlog
from engine.runtime.measurement import Measurement
from engine.runtime.metrics import PeakMemory, run_metrics
from engine.runtime.models import LoadedModel

MAX_NEW_TOKENS_LIMIT = 4096
MAX_PROMPT_CHARS = 200_000  # far beyond any context window; guards the tokenizer against pathological input
MAX_STOP_SEQUENCES = 8


@dataclass(frozen=True)
class GenerationConfig:
    """Decoding settings. Defaults are the one source for the playground's widgets and the CLI's flags."""

    max_new_tokens: int = 64
    do_sample: bool = False  # greedy by default: reproducible, and what the race compares
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 50
    repetition_penalty: float = 1.0
    seed: int | None = 0
    stop: tuple[str, ...] = ()
    use_cache: bool = True
    chat_template: bool = False
    include_prompt: bool = False

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
        return self


@dataclass(frozen=True)
class Completion:
    prompt: str
    text: str  # the completion only
    full_text: str  # what `generate` really returns decoded: the prompt followed by the completion
    token_ids: tuple[int, ...]  # generated ids only
    stop_reason: str  # "eos" | "stop" | "length" | "cancelled"
    measurement: Measurement

    def shown(self, include_prompt: bool) -> str:
        """The chapter's point: what `generate` returns includes the prompt; show it or not."""
        return self.full_text if include_prompt else self.text


@dataclass(frozen=True)
class BatchResult:
    completions: tuple[Completion, ...]
    measurement: Measurement  # the batch as a whole: tokens/s is the batch's throughput


def clean_prompt(prompt: Any) -> str:
    """Text as the tokenizer can take it: strict type, no NULs, no lone surrogates (from bad bytes)."""
    if isinstance(prompt, bytes):
        prompt = prompt.decode("utf-8", errors="replace")
    if not isinstance(prompt, str):
        raise InvalidParameterError(f"the prompt must be text, got {type(prompt).__name__}")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise PromptTooLongError(
            f"the prompt has {len(prompt):,} characters; the limit is {MAX_PROMPT_CHARS:,} and far fewer fit any "
            "model's context window. Shorten it."
        )
    prompt = prompt.replace("\x00", "").encode("utf-8", errors="replace").decode("utf-8")
    if not prompt.strip():
        raise InvalidParameterError("the prompt is empty: type some text to continue")
    return prompt


class _StepTimer:
    """StoppingCriteria that timestamps every decode step, tracks peak memory and honours cancellation.
    Called by `generate` after each new token has been appended (transformers' StoppingCriteria contract)."""

    def __init__(self, device: str, cancel: threading.Event | None) -> None:
        self.device = device
        self.cancel = cancel
        self.times: list[float] = []
        self.peak: PeakMemory | None = None  # started with the run, under the model's lock

    def start(self) -> None:
        self.peak = PeakMemory(
            self.device, every=8, reset_cuda=True
        )  # RSS sampled every 8th step: ~20 us each

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
        self.times.append(time.perf_counter())
        if self.peak is not None:
            self.peak.sample()
        stop = bool(self.cancel is not None and self.cancel.is_set())
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)


def _render(lm: LoadedModel, prompt: str, cfg: GenerationConfig) -> str:
    if not cfg.chat_template:
        return prompt
    if not lm.has_chat_template:
        raise InvalidParameterError(
            f"{lm.name} has no chat template; turn 'use chat template' off to send the raw prompt"
        )
    return lm.tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )


def _encode(lm: LoadedModel, prompts: Sequence[str], cfg: GenerationConfig):
    tok = lm.tokenizer
    rendered = [_render(lm, p, cfg) for p in prompts]
    tok.padding_side = "left"  # decoder-only batches pad on the left so every row's last token is real
    enc = tok(rendered, return_tensors="pt", padding=True, add_special_tokens=not cfg.chat_template)
    lengths = enc["attention_mask"].sum(dim=1).tolist()
    longest = int(enc["input_ids"].shape[1])
    check_context(lm, longest, cfg.max_new_tokens)
    return enc, rendered, [int(n) for n in lengths]


def check_context(lm: LoadedModel, prompt_tokens: int, max_new_tokens: int) -> None:
    """Prompt plus requested tokens must fit the model's context window (one check for every generation path)."""
    if prompt_tokens + max_new_tokens > lm.context_length:
        raise PromptTooLongError(
            f"the prompt is {prompt_tokens} tokens and {max_new_tokens} new tokens were asked for: "
            f"{prompt_tokens + max_new_tokens} is more than {lm.name}'s context window of "
            f"{lm.context_length} tokens. Shorten the prompt or lower max new tokens."
        )


def _generate_kwargs(lm: LoadedModel, cfg: GenerationConfig, timer: _StepTimer, streamer=None) -> dict:
    from transformers import StoppingCriteriaList

    kwargs: dict[str, Any] = {
        "max_new_tokens": cfg.max_new_tokens,
        "do_sample": cfg.do_sample,
        "use_cache": cfg.use_cache,
        "repetition_penalty": cfg.repetition_penalty,
        "pad_token_id": lm.tokenizer.pad_token_id,
        "stopping_criteria": StoppingCriteriaList([timer]),
    }
    if cfg.do_sample:
        kwargs.update(temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k)
    else:  # unset the model's own sampling defaults so greedy is greedy without warnings
        kwargs.update(temperature=None, top_p=None, top_k=None)
    if cfg.stop:
        kwargs.update(stop_strings=list(cfg.stop), tokenizer=lm.tokenizer)
    if streamer is not None:
        kwargs["streamer"] = streamer
    return kwargs


def _oom_message(lm: LoadedModel, n_prompts: int, cfg: GenerationConfig) -> str:
    return (
        f"out of memory generating {cfg.max_new_tokens} tokens for {n_prompts} prompt(s) with {lm.name} "
        f"in {lm.dtype}: lower max new tokens, the number of prompts in the batch, or load a smaller "
        "model or a half precision. The model is still loaded."
    )


def _split(
    lm: LoadedModel, row, prompt_len: int, cfg: GenerationConfig, cancelled: bool
) -> tuple[list[int], str, str]:
    """Cut one output row after EOS or a stop string; return (generated ids, text, stop reason)."""
    tok = lm.tokenizer
    generated = row[prompt_len:].tolist()
    eos_ids = lm.model.generation_config.eos_token_id
    eos_set = set(eos_ids if isinstance(eos_ids, list) else [eos_ids]) - {None}
    reason = "length"
    for i, t in enumerate(generated):
        if t in eos_set:
            generated = generated[: i + 1]  # the EOS token counts as an output token, as servers count it
            reason = "eos"
            break
    text = tok.decode(generated, skip_special_tokens=True)
    for s in cfg.stop:
        at = text.find(s)
        if at != -1:
            text, reason = text[:at], "stop"
    if cancelled and reason == "length" and len(generated) < cfg.max_new_tokens:
        reason = "cancelled"
    return generated, text, reason


def _run(
    lm: LoadedModel,
    prompts: Sequence[str],
    cfg: GenerationConfig,
    *,
    streamer=None,
    cancel: threading.Event | None = None,
    record: bool = True,
    request_t: float | None = None,
) -> BatchResult:
    """Generate for `prompts` as one padded batch under the model's lock; return completions + measurements."""
    import torch

    request_t = time.perf_counter() if request_t is None else request_t
    cfg = cfg.validate()
    prompts = [clean_prompt(p) for p in prompts]
    if not prompts:
        raise InvalidParameterError("no prompts given: enter at least one prompt")
    enc, rendered, lengths = _encode(lm, prompts, cfg)
    enc = {k: v.to(lm.model.device) for k, v in enc.items()}
    timer = _StepTimer(lm.device, cancel)
    with lm.lock:  # one generation at a time per model: seeds and peak-memory counters are per process
        queue_s = time.perf_counter() - request_t
        started_at = datetime.now(UTC).isoformat(timespec="seconds")
        if cfg.do_sample and cfg.seed is not None:
            torch.manual_seed(cfg.seed)
        timer.start()
        try:
            with torch.inference_mode():
                out = lm.model.generate(**enc, **_generate_kwargs(lm, cfg, timer, streamer))
        except torch.OutOfMemoryError as exc:
            torch.cuda.empty_cache()
            raise OutOfMemoryError(_oom_message(lm, len(prompts), cfg)) from exc
        except MemoryError as exc:
            raise OutOfMemoryError(_oom_message(lm, len(prompts), cfg)) from exc
        except RuntimeError as exc:
            if any(
                m in str(exc).lower() for m in ("out of memory", "not enough memory")
            ):  # CUDA / CPU allocator
                raise OutOfMemoryError(_oom_message(lm, len(prompts), cfg)) from exc
            raise
    cancelled = bool(cancel is not None and cancel.is_set())
    if cancelled and not timer.times:
        raise CancelledError("the request was cancelled before its first token")
    prompt_len = enc["input_ids"].shape[1]
    rows = [_split(lm, out[i], prompt_len, cfg, cancelled) for i in range(len(prompts))]
    out_lengths = [max(1, len(ids)) for ids, _, _ in rows]
    assert timer.peak is not None
    timer.peak.sample(force=True)
    common = dict(
        request_t=request_t,
        first_token_t=timer.times[0],
        peak=timer.peak,
        started_at=started_at,
        queue_s=queue_s,
        use_cache=cfg.use_cache,
        max_new_tokens=cfg.max_new_tokens,
    )
    batch_m = run_metrics(
        lm,
        last_token_t=timer.times[-1],
        output_tokens=out_lengths,
        prompt_tokens=sum(lengths),
        batch_size=len(out_lengths),
        **common,
    )
    completions = []
    for prompt, shown, n_prompt, (ids, text, reason) in zip(prompts, rendered, lengths, rows, strict=True):
        n = len(ids) or 1
        own = run_metrics(
            lm,
            last_token_t=timer.times[min(n, len(timer.times)) - 1],
            output_tokens=[n],
            prompt_tokens=n_prompt,
            batch_size=len(out_lengths),
            **common,
        )
        completions.append(Completion(prompt, text, shown + text, tuple(ids), reason, own))
    if record:
        runlog.record(batch_m)
    return BatchResult(tuple(completions), batch_m)


def generate(lm: LoadedModel, prompt: str, cfg: GenerationConfig | None = None, **kw) -> Completion:
    """One prompt in, one measured completion out."""
    return _run(lm, [prompt], cfg or GenerationConfig(), **kw).completions[0]


def generate_batch(
    lm: LoadedModel, prompts: Sequence[str], cfg: GenerationConfig | None = None, **kw
) -> BatchResult:
    """Several prompts as one padded batch (static batching): one forward pass per step serves them all."""
    if isinstance(prompts, str):
        raise InvalidParameterError("generate_batch takes a list of prompts; use generate for one")
    return _run(lm, list(prompts), cfg or GenerationConfig(), **kw)


class GenerationStream:
    """Iterate for text chunks as tokens are made; `.completion` holds the measured result afterwards.

    Errors raised inside generation (bad parameters, out of memory) are re-raised by the iterator, so a
    page's `try` around its loop catches them like any other call. `cancel()` stops at the next token.
    """

    def __init__(self, lm: LoadedModel, prompt: str, cfg: GenerationConfig, *, record: bool = True) -> None:
        from transformers import TextIteratorStreamer

        self._request_t = time.perf_counter()
        cfg = cfg.validate()
        clean_prompt(prompt)  # fail fast, in the caller's thread, before a worker starts
        self.cancel_event = threading.Event()
        # A timeout so a generation that dies before its first token cannot hang the reader forever.
        self._streamer = TextIteratorStreamer(
            lm.tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=0.5
        )
        self._error: BaseException | None = None
        self.completion: Completion | None = None

        def work() -> None:
            try:
                self.completion = _run(
                    lm,
                    [prompt],
                    cfg,
                    streamer=self._streamer,
                    cancel=self.cancel_event,
                    record=record,
                    request_t=self._request_t,
                ).completions[0]
            except BaseException as exc:  # handed to the reading thread, which re-raises it
                self._error = exc
            finally:
                self._done.set()

        self._done = threading.Event()
        self._thread = threading.Thread(target=work, name="inference-lab-generate", daemon=True)
        self._thread.start()

    def __iter__(self) -> Iterator[str]:
        import queue

        while True:
            try:
                chunk = next(self._streamer)
            except StopIteration:
                break
            except queue.Empty:
                if self._done.is_set():
                    break
                continue
            if chunk:
                yield chunk
        self._thread.join()
        if self._error is not None:
            if isinstance(self._error, EngineError | ValueError):
                raise self._error
            raise self._error

    def cancel(self) -> None:
        self.cancel_event.set()


def stream(
    lm: LoadedModel, prompt: str, cfg: GenerationConfig | None = None, *, record: bool = True
) -> GenerationStream:
    return GenerationStream(lm, prompt, cfg or GenerationConfig(), record=record)
