"""Build engine/data/lmeval_tasks/pydoc_topics.jsonl, the offline perplexity corpus, from CPython's own
`pydoc_data.topics.topics` (the text `help("assert")` shows; part of CPython, PSF licence, redistributable).

Each document is the opening of one topic, cut at a paragraph boundary to between MIN_CHARS and MAX_CHARS
characters, so every document fits one context window of every preset (a single rolling window keeps the
engine's own cross-check simple to read). Topics are taken in sorted order; the first N_DOCS that are long
enough are kept. Run from the repository root:

    .venv/bin/python scripts/build_pydoc_corpus.py

The output depends on the Python minor version's pydoc_data; the committed file was built with the
version printed in its header comment in the YAML. Commit the JSONL after rebuilding.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from pydoc_data.topics import topics

MIN_CHARS = 300
MAX_CHARS = 800
N_DOCS = 48
OUT = Path(__file__).resolve().parents[1] / "engine" / "data" / "lmeval_tasks" / "pydoc_topics.jsonl"


def opening(text: str) -> str:
    """Whole paragraphs from the start of `text` while they fit in MAX_CHARS (at least one)."""
    kept: list[str] = []
    for para in text.strip().split("\n\n"):
        candidate = "\n\n".join([*kept, para])
        if kept and len(candidate) > MAX_CHARS:
            break
        kept.append(para)
    return "\n\n".join(kept)[: MAX_CHARS * 2]


def main() -> None:
    docs = []
    for name in sorted(topics):
        text = opening(topics[name])
        if len(text) >= MIN_CHARS:
            docs.append({"topic": name, "text": text})
        if len(docs) == N_DOCS:
            break
    with OUT.open("w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    chars = sum(len(d["text"]) for d in docs)
    print(f"wrote {len(docs)} documents, {chars} characters, to {OUT} (Python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
