"""Dataset loader for the pydoc_topics lm-eval task (see pydoc_topics.yaml): reads the JSONL beside this
file, so the task does not depend on the working directory and never contacts the Hugging Face hub."""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = Path(__file__).with_name("pydoc_topics.jsonl")


def read_documents(path: Path = CORPUS) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load(**_metadata):
    """lm-eval calls this with the task's metadata as keyword arguments; returns a DatasetDict."""
    import datasets

    docs = read_documents()
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(docs)})
