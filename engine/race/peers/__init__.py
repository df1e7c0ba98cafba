"""Peer inference engines as race lanes: OpenVINO GenAI, ONNX Runtime GenAI and CTranslate2.

Each engine is one backend module with the same four verbs (engine/race/peers/base.py): `unsupported(arch)`
(why it cannot convert a model family, or ""), `convert(source, target, precision)` (offline, from the
engine's cached safetensors copy, into the model cache; engine/race/peers/cache.py), `open(folder, ...)` and
`session.generate(prompt_ids, max_new_tokens)` with a timestamp per generated token, plus log-probabilities
where the engine exposes them. The race worker (engine/race/worker.py) drives them with the same prompts,
greedy decoding, max new tokens, warm-up and timed runs, and the same HF tokenizer as vanilla.
"""

from __future__ import annotations

from engine.race.peers.base import BACKENDS, Backend, availability, backend

__all__ = ["BACKENDS", "Backend", "availability", "backend"]
