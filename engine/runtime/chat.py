"""A conversation as a chat model reads it: the model's chat template rendered up to the assistant's turn, then
tokenized without the tokenizer's own special tokens (the template has put them in already). One copy for the
server, the prompt path, the levers, the race's peer lanes and the benchmarks that count prompt tokens as the
server does. Only a tokenizer is needed (no torch), so the peer engines' environments import it too."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def user_turn(prompt: str) -> list[dict[str, str]]:
    """One prompt as the single user message of a conversation."""
    return [{"role": "user", "content": prompt}]


def render_chat(tokenizer: Any, messages: Sequence[dict[str, Any]]) -> str:
    """The messages in the tokenizer's chat template, ending where the assistant's answer starts."""
    return tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)


def chat_prompt_ids(tokenizer: Any, messages: Sequence[dict[str, Any]]) -> tuple[str, list[int]]:
    """(rendered text, its token ids) for the messages: what the model is fed."""
    rendered = render_chat(tokenizer, messages)
    return rendered, list(tokenizer(rendered, add_special_tokens=False)["input_ids"])
