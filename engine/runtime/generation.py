"""Generate from a LoadedModel, one prompt or a batch, and measure every run.

The chapter's section 4.1.1 workflow (tokenize -> `generate` -> decode) with the serving metrics of
section 4.2 taken on every call: TTFT, TPOT (vLLM's definition, first token excluded), latency,
tokens/s and peak memory. Timing: a StoppingCriteria is called once per decode step, after the new
token exists; on CUDA it synchronises before reading the clock, so the step times are real.
The settings are engine.runtime.settings.GenerationConfig; the prompt is checked and tokenized by
engine.runtime.prompt; engine.runtime.streaming runs this module's `generate` on a worker thread with
transformers' TextIteratorStreamer (`stream`).

`GenerationConfig(compile=True)` decodes through the compiled path instead (gpt-fast's recipe, PyTorch's
"Accelerating generative AI" posts): the same prefill, then a static (preallocated) KV slot cache and a
torch.compile'd decode step, CUDA graphs on a GPU (engine.runtime.compiled, beside this module as gpt-fast keeps
its decode step beside `generate`), with this module's own loop choosing tokens as `generate` does
(engine.runtime.sampling). Greedy tokens equal `generate`'s; where the model or machine cannot
compile, the run decodes eagerly and its Completion says why (`decode`, `decode_note`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from engine.core.errors import (
    CancelledError,
    CompileUnavailableError,
    InvalidParameterError,
    OutOfMemoryError,
)
from engine.runtime import hardware, runlog
from engine.runtime.measurement import Measurement
from engine.runtime.metrics import PeakMemory, run_metrics, without_compile
from engine.runtime.models import LoadedModel
from engine.runtime.prompt import clean_prompt, encode_batch
from engine.runtime.sampling import eos_ids, next_tokens
from engine.runtime.settings import GenerationConfig


@dataclass(frozen=True)
class Completion:
    prompt: str
    text: str  # the completion only
    full_text: str  # what `generate` really returns decoded: the prompt followed by the completion
    token_ids: tuple[int, ...]  # generated ids only
    stop_reason: str  # "eos" | "stop" | "length" | "cancelled"
    measurement: Measurement
    decode: str = "eager"  # "compiled" when the decode steps ran the compiled step
    decode_note: str = ""  # why a run asked to compile decoded eagerly; empty otherwise
    # seconds this run spent compiling the step (first use), beyond what that step took to run: left out of the
    # measurement and of token_times (engine.runtime.metrics.without_compile); None when it paid none
    compile_s: float | None = None
    # time.perf_counter() when each generated token existed (after the device finished its step): the real
    # per-step timings, which a streamed text's chunks only approximate (a detokenizer holds tokens back)
    token_times: tuple[float, ...] = ()
    wall_s: float | None = (
        None  # with a compile: the run's real request-to-last-token seconds (compile included)
    )

    def shown(self, include_prompt: bool) -> str:
        """The chapter's point: what `generate` returns includes the prompt; show it or not."""
        return self.full_text if include_prompt else self.text


class RowsDecode:
    """`decode`, `decode_note` and `compile_s` of a result holding several `completions` (a batch, a run's report):
    its first row's, since the rows of one run decode the same way and pay one compile between them."""

    completions: tuple[Completion, ...]

    @property
    def decode(self) -> str:
        return self.completions[0].decode

    @property
    def decode_note(self) -> str:
        return self.completions[0].decode_note

    @property
    def compile_s(self) -> float | None:
        return self.completions[0].compile_s


@dataclass(frozen=True)
class BatchResult(RowsDecode):
    completions: tuple[Completion, ...]
    measurement: Measurement  # the batch as a whole: tokens/s is the batch's throughput

    @property
    def wall_s(self) -> float | None:
        """With a compile: the batch's real request-to-last-token seconds."""
        walls = [c.wall_s for c in self.completions if c.wall_s is not None]
        return max(walls) if walls else None


class Progress:
    """A run seen from another thread while it decodes: `cancel` stops it at the next token, `times` grows by one
    perf_counter time per generated token (so `tokens` is the engine's own count, never a re-tokenized text's)."""

    def __init__(self) -> None:
        self.cancel = threading.Event()
        self.times: list[float] = []

    @property
    def tokens(self) -> int:
        return len(self.times)


class _StepTimer:
    """StoppingCriteria that timestamps every decode step, tracks peak memory and honours cancellation.
    Called by `generate` after each new token has been appended (transformers' StoppingCriteria contract)."""

    def __init__(self, device: str, progress: Progress | None) -> None:
        self.device = device
        self.progress = progress or Progress()
        self.cancel = self.progress.cancel
        self.times = self.progress.times
        self.peak: PeakMemory | None = None  # started with the run, under the model's lock

    def start(self) -> None:
        self.peak = PeakMemory(
            self.device, every=8, reset_cuda=True
        )  # RSS sampled every 8th step: ~20 us each

    def tick(self) -> bool:
        """A token exists: timestamp it (after the device finished it) and say whether to stop (cancelled)."""
        hardware.sync(self.device)
        self.times.append(time.perf_counter())
        if self.peak is not None:
            self.peak.sample()
        return self.cancel.is_set()

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        stop = self.tick()
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)


def greedy_kwargs(lm: LoadedModel, max_new_tokens: int, *, exact: bool = False) -> dict[str, Any]:
    """`model.generate` keyword arguments for plain greedy decoding: the model's own sampling defaults unset (so
    greedy is greedy, without warnings), its pad token named. `exact`: exactly `max_new_tokens` tokens (EOS does
    not end the run early), for timings that need a known step count."""
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else lm.tokenizer.eos_token_id
    kwargs: dict[str, Any] = {
        "max_new_tokens": max_new_tokens,
        "do_sample": False,
        "temperature": None,
        "top_p": None,
        "top_k": None,
        "pad_token_id": pad,
    }
    if exact:
        kwargs["min_new_tokens"] = max_new_tokens
    return kwargs


def _generate_kwargs(lm: LoadedModel, cfg: GenerationConfig, timer: _StepTimer, streamer=None) -> dict:
    from transformers import StoppingCriteriaList

    kwargs: dict[str, Any] = {
        **greedy_kwargs(lm, cfg.max_new_tokens),
        "use_cache": cfg.use_cache,
        "repetition_penalty": cfg.repetition_penalty,
        "pad_token_id": lm.tokenizer.pad_token_id,
        "stopping_criteria": StoppingCriteriaList([timer]),
    }
    if cfg.do_sample:
        kwargs.update(do_sample=True, temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k)
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
    eos_set = eos_ids(lm)
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


@dataclass(frozen=True)
class _Decoded:
    out: Any  # [B, prompt columns + generated] token ids, what `generate` returns (pads after a finished row)
    decode: str = "eager"
    note: str = ""
    compile_s: float | None = None


def _decode_eager(lm: LoadedModel, enc: dict, cfg: GenerationConfig, timer: _StepTimer, streamer, note: str):
    return _Decoded(lm.model.generate(**enc, **_generate_kwargs(lm, cfg, timer, streamer)), note=note)


def _decode_compiled(lm: LoadedModel, enc: dict, cfg: GenerationConfig, timer: _StepTimer, streamer, decoder):
    """`generate`'s loop over the compiled step: the eager prefill (engine.runtime.kvcache.Prefill), then one
    compiled decode step per token through a static slot cache; tokens chosen, stopped and streamed as
    `generate` does (finished rows are fed the pad token until every row is done)."""
    import torch

    from engine.runtime import kvcache

    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    input_ids, mask = enc["input_ids"], enc["attention_mask"]  # [B, L]
    rows = [ids[m.bool()].tolist() for ids, m in zip(input_ids.cpu(), mask.cpu(), strict=True)]
    if (
        streamer is not None
    ):  # as `generate` does: the prompt first (a streamer that skips the prompt drops it)
        streamer.put(input_ids.cpu())
    compiled_before = dict(decoder.status.compile_s)
    job = kvcache.Prefill(lm, rows, pad)
    logits = job.run()  # [B, V] fp32
    cache = decoder.slot_cache(len(rows), job.columns + cfg.max_new_tokens + 1)
    cache.insert(job, list(range(len(rows))), cfg.max_new_tokens)
    eos = eos_ids(lm)
    generated: list[list[int]] = [[] for _ in rows]
    done = [False] * len(rows)
    positions = [len(r) for r in rows]  # the first generated token's position id, then one more each step
    while True:
        chosen = next_tokens(logits, [cfg] * len(rows), lambda i: rows[i] + generated[i])
        for i, t in enumerate(chosen):
            generated[i].append(pad if done[i] else t)
            if not done[i] and (t in eos or _stopped(lm, generated[i], cfg)):
                done[i] = True
        cancelled = timer.tick()
        if streamer is not None:
            streamer.put(torch.tensor([generated[0][-1]]))
        if cancelled or all(done) or len(generated[0]) >= cfg.max_new_tokens:
            break
        fed = torch.tensor([g[-1] for g in generated])  # [B]
        logits = cache.decode(lm, fed, torch.tensor(positions), step=decoder)  # [B, V]
        positions = [p + 1 for p in positions]
    if streamer is not None:
        streamer.end()
    out = torch.cat([input_ids.cpu(), torch.tensor(generated, dtype=torch.long)], dim=1)
    paid = sum(v for k, v in decoder.status.compile_s.items() if k not in compiled_before)
    failed = decoder.status.state == "failed"
    return _Decoded(
        out,
        decode="eager" if failed else "compiled",
        note=decoder.status.reason if failed else "",
        compile_s=paid or None,
    )


def _stopped(lm: LoadedModel, ids: list[int], cfg: GenerationConfig) -> bool:
    if not cfg.stop:
        return False
    text = lm.tokenizer.decode(ids, skip_special_tokens=True)
    return any(s in text for s in cfg.stop)


def compiled_decoder(lm: LoadedModel):
    """The model's compiled decode step (engine.runtime.compiled.compiled_decode); raises CompileUnavailableError
    with the reason where this model or machine cannot compile it."""
    try:
        from engine.runtime import compiled
    except (
        ImportError
    ) as exc:  # an older transformers (the race's pinned side environment) lacks its cache API
        raise CompileUnavailableError(f"compiled decode needs transformers 5: {exc}") from exc
    return compiled.compiled_decode(lm)


def compile_status(lm: LoadedModel) -> dict | None:
    """The compiled step's status for `lm` (state, mode, compile seconds per shape, failure reason), or None
    when nothing asked to compile it yet: what the playground shows while a first run compiles."""
    try:
        from engine.runtime import compiled
    except ImportError:
        return None
    status = compiled.compile_status(lm)
    return None if status is None else status.to_dict()


def _run(
    lm: LoadedModel,
    prompts: Sequence[str],
    cfg: GenerationConfig,
    *,
    streamer=None,
    progress: Progress | None = None,
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
    enc, rendered, lengths = encode_batch(lm, prompts, cfg)
    enc = {k: v.to(lm.model.device) for k, v in enc.items()}
    decoder, note = None, ""
    if cfg.compile:
        try:
            decoder = compiled_decoder(lm)
        except CompileUnavailableError as exc:  # decode eagerly, and say so in the result
            note = f"compiled decode unavailable: {exc}; decoded eagerly"
    timer = _StepTimer(lm.device, progress)
    with lm.lock:  # one generation at a time per model: seeds and peak-memory counters are per process
        queue_s = time.perf_counter() - request_t
        started_at = datetime.now(UTC).isoformat(timespec="seconds")
        if cfg.do_sample and cfg.seed is not None:
            torch.manual_seed(cfg.seed)
        timer.start()
        try:
            with torch.inference_mode():
                decoded = (
                    _decode_compiled(lm, enc, cfg, timer, streamer, decoder)
                    if decoder is not None
                    else _decode_eager(lm, enc, cfg, timer, streamer, note)
                )
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
    out = decoded.out
    cancelled = timer.cancel.is_set()
    if cancelled and not timer.times:
        raise CancelledError("the request was cancelled before its first token")
    prompt_len = enc["input_ids"].shape[1]
    rows = [_split(lm, out[i], prompt_len, cfg, cancelled) for i in range(len(prompts))]
    out_lengths = [max(1, len(ids)) for ids, _, _ in rows]
    assert timer.peak is not None
    timer.peak.sample(force=True)
    # A compiled run's first decode step compiled the step: its figures leave that out (reported once, as
    # compile_s, beside the run's real wall time), so a one-off compiled run reads at its decode speed
    times, compile_s = without_compile(timer.times, [1]) if decoded.compile_s else (list(timer.times), None)
    common = dict(
        request_t=request_t,
        first_token_t=times[0],
        peak=timer.peak,
        started_at=started_at,
        queue_s=queue_s,
        use_cache=cfg.use_cache,
        max_new_tokens=cfg.max_new_tokens,
    )
    batch_m = run_metrics(
        lm,
        last_token_t=times[-1],
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
            last_token_t=times[min(n, len(times)) - 1],
            output_tokens=[n],
            prompt_tokens=n_prompt,
            batch_size=len(out_lengths),
            **common,
        )
        completions.append(
            Completion(
                prompt,
                text,
                shown + text,
                tuple(ids),
                reason,
                own,
                decode=decoded.decode,
                decode_note=decoded.note,
                compile_s=compile_s,
                token_times=tuple(times[:n]),
                wall_s=timer.times[min(n, len(timer.times)) - 1] - request_t if compile_s else None,
            )
        )
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
