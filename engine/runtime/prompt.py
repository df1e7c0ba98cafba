"""A prompt as the model reads it, one copy for every generation path (`generate`, the shared scheduler, the server,
the levers): the text checked and cleaned (`clean_prompt`), wrapped in the model's chat template where the config
asks, tokenized (`encode_prompt` for one prompt, `encode_batch` for a left-padded batch), and checked against the
model's context window (`check_context`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.core.errors import InvalidParameterError, PromptTooLongError
from engine.runtime.chat import render_chat, user_turn
from engine.runtime.models import LoadedModel
from engine.runtime.settings import GenerationConfig

MAX_PROMPT_CHARS = 200_000  # far beyond any context window; guards the tokenizer against pathological input


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


def _render(lm: LoadedModel, prompt: str, cfg: GenerationConfig) -> str:
    """The prompt as sent: itself, or a user turn of the model's chat template when the config asks for one."""
    if not cfg.chat_template:
        return prompt
    if not lm.has_chat_template:
        raise InvalidParameterError(
            f"{lm.name} has no chat template; turn 'use chat template' off to send the raw prompt"
        )
    return render_chat(lm.tokenizer, user_turn(prompt))


def encode_batch(lm: LoadedModel, prompts: Sequence[str], cfg: GenerationConfig):
    """(encoding, rendered prompts, each prompt's token count) as `generate` tokenizes a padded batch: padded on
    the left, so every row's last column is a real token; the longest row checked against the context window."""
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


def encode_prompt(lm: LoadedModel, prompt: str, cfg: GenerationConfig) -> tuple[str, list[int]]:
    """(rendered prompt, token ids) exactly as `generate` tokenizes a single prompt."""
    rendered = _render(lm, prompt, cfg)
    ids = lm.tokenizer(rendered, add_special_tokens=not cfg.chat_template)["input_ids"]
    check_context(lm, len(ids), cfg.max_new_tokens)
    return rendered, list(ids)
