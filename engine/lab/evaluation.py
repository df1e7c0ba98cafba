"""Evaluate a loaded model with EleutherAI's lm-evaluation-harness, and check the harness's arithmetic
with the engine's own log-likelihood (chapter 4, section 4.1.4: evaluate before you deploy).

The harness runs on the *loaded model object* (`HFLM(pretrained=lm.model, tokenizer=lm.tokenizer)`), so
the page evaluates exactly what the playground generates with. Tasks are perplexity tasks scored with
rolling log-likelihood (`output_type: loglikelihood_rolling`), as lm-eval's `wikitext` (version 2.0) is:

- word_perplexity = exp(-sum ll / words)     words: len(re.split(r"\\s+", doc)), lm-eval's count_words
- byte_perplexity = exp(-sum ll / bytes)     bytes: UTF-8 bytes of the document
- bits_per_byte   = (-sum ll / bytes) / ln 2 the tokenizer-independent one: compare models with it

`sum ll` is the natural-log likelihood of every token of every document, each document scored from a
prefix token (BOS, else EOS) in disjoint windows of the model's context length (lm-eval's
`get_rolling_token_windows(context_len=1)`). The cross-check (`engine_perplexity`) computes the same sum
with a plain forward pass and `log_softmax` in float32, without lm-eval code, and must agree within 1%.

lm-eval is imported lazily (`harness_status()` says why it is unusable, if it is). Both the harness run
and the cross-check hold `lm.lock`: the model is shared with every other session of the dashboard.
"""

from __future__ import annotations

import functools
import importlib.metadata
import math
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.calc.format import gb
from engine.core.errors import DependencyMissingError, HubUnreachableError, InvalidParameterError
from engine.core.spec import Spec, option
from engine.runtime.models import LoadedModel, hub_reachable

Progress = Callable[[float, str], None]

TASK_DIR = Path(__file__).parents[1] / "data" / "lmeval_tasks"
LOCAL_TASK = "pydoc_topics"
WIKITEXT = "wikitext"
WIKITEXT_DATASET = "EleutherAI/wikitext_document_level"
CROSSCHECK_TOLERANCE = 0.01  # relative: the "within 1%"
MAX_LIMIT = 10_000


@dataclass(frozen=True)
class TaskInfo:
    name: str
    description: str
    offline: bool
    documents: int  # in the task's split: the most a --limit can take


TASKS: dict[str, TaskInfo] = {
    LOCAL_TASK: TaskInfo(
        LOCAL_TASK,
        "Openings of the 48 Python documentation topics that ship with CPython (pydoc_data, PSF licence); "
        "shipped with the project, works offline.",
        offline=True,
        documents=48,
    ),
    WIKITEXT: TaskInfo(
        WIKITEXT,
        "lm-eval's wikitext (WikiText-2 raw, document level, test split) - the chapter's example; "
        f"needs {WIKITEXT_DATASET} from the Hugging Face hub or its local cache.",
        offline=False,
        documents=62,
    ),
}


@dataclass(frozen=True)
class EvalSpec(Spec):
    """The evaluation experiment's options: the Evaluation tab of page 4 and `run_eval` take their defaults,
    bounds and choices here (a page narrows `limit` to the chosen task's documents)."""

    task: str = option(
        LOCAL_TASK,
        f"{LOCAL_TASK} works offline; wikitext needs the hub or a cached copy",
        choices=tuple(TASKS),
    )
    limit: int | None = option(
        None,
        "lm-eval's --limit: only the first N documents (default: all)",
        kind=int,
        lo=1,
        hi=MAX_LIMIT,
        label="documents (limit)",
    )
    crosscheck: bool = option(
        True,
        "Recompute the log-likelihood with the engine's own forward passes.",
        label="cross-check",  # the help says with what; a longer label is clipped in its column at 1280 px
    )


METRIC_DEFINITIONS: dict[str, str] = {
    "word_perplexity": "exp(-total log-likelihood / number of words): how surprised the model is per word. "
    "Lower is better; depends on how words are counted.",
    "byte_perplexity": "exp(-total log-likelihood / number of UTF-8 bytes): surprise per byte of text. "
    "Lower is better; 1.0 would be perfect prediction.",
    "bits_per_byte": "(-total log-likelihood / bytes) / ln 2: the bits the model needs to encode each byte. "
    "Lower is better; independent of the tokenizer, so it compares different models fairly.",
}


@dataclass(frozen=True)
class PerplexityStats:
    """Totals and the three metrics over a set of documents, in lm-eval's definitions."""

    documents: int
    loglikelihood: float  # natural log, summed over all tokens of all documents
    tokens: int
    words: int
    bytes: int
    word_perplexity: float
    byte_perplexity: float
    bits_per_byte: float
    runtime_s: float

    @classmethod
    def from_totals(cls, ll: float, tokens: int, words: int, nbytes: int, documents: int, runtime_s: float):
        return cls(
            documents=documents,
            loglikelihood=ll,
            tokens=tokens,
            words=words,
            bytes=nbytes,
            word_perplexity=_safe_exp(-ll / words),
            byte_perplexity=_safe_exp(-ll / nbytes),
            bits_per_byte=(-ll / nbytes) / math.log(2),
            runtime_s=runtime_s,
        )


@dataclass(frozen=True)
class CrossCheck:
    """The engine's own rolling log-likelihood over the harness's documents."""

    engine: PerplexityStats
    harness_bits_per_byte: float
    relative_difference: float  # |engine - harness| / harness, on bits per byte
    tolerance: float = CROSSCHECK_TOLERANCE

    @property
    def agrees(self) -> bool:
        return self.relative_difference <= self.tolerance


@dataclass(frozen=True)
class EvalResult:
    task: str
    task_version: str
    harness_version: str
    model: str
    dtype: str
    device: str
    limit: int | None
    documents: int
    word_perplexity: float
    byte_perplexity: float
    bits_per_byte: float
    runtime_s: float  # the harness run alone
    started_at: str
    max_length: int
    crosscheck: CrossCheck | None = None
    per_document_loglikelihood: tuple[float, ...] = field(default=(), repr=False)
    wall_s: float | None = (
        None  # the whole call: importing lm-eval and loading the task, the run, the cross-check
    )

    def summary(self) -> dict[str, Any]:
        """One flat row for tables, charts and the JSON download."""
        row: dict[str, Any] = {
            "model": self.model,
            "dtype": self.dtype,
            "device": self.device,
            "task": self.task,
            "task_version": self.task_version,
            "harness_version": self.harness_version,
            "documents": self.documents,
            "word_perplexity": self.word_perplexity,
            "byte_perplexity": self.byte_perplexity,
            "bits_per_byte": self.bits_per_byte,
            "runtime_s": self.runtime_s,
            "started_at": self.started_at,
        }
        if self.crosscheck is not None:
            row["engine_bits_per_byte"] = self.crosscheck.engine.bits_per_byte
            row["crosscheck_relative_difference"] = self.crosscheck.relative_difference
            row["crosscheck_agrees"] = self.crosscheck.agrees
        return row


def _safe_exp(x: float) -> float:
    return math.exp(x) if x < 709 else math.inf  # beyond float range: a random model can get there


def count_words(text: str) -> int:
    """lm-eval's Task.count_words: pieces between runs of whitespace (edge empties included)."""
    return len(re.split(r"\s+", text))


def count_bytes(text: str) -> int:
    return len(text.encode("utf-8"))


# --- availability ------------------------------------------------------------------------------------


def harness_version() -> str | None:
    try:
        return importlib.metadata.version("lm_eval")
    except importlib.metadata.PackageNotFoundError:
        return None


def harness_status() -> tuple[bool, str]:
    """(usable, reason). Imports lm-eval once to be sure it is not broken, not just installed."""
    version = harness_version()
    if version is None:
        return False, "lm-eval is not installed: pip install lm-eval==0.4.13 (then reload the page)"
    try:
        import lm_eval  # noqa: F401
        from lm_eval.models.huggingface import HFLM  # noqa: F401
    except Exception as exc:  # a broken optional dependency must not take the page down
        return False, f"lm-eval {version} is installed but failed to import ({exc}); reinstall it"
    return True, f"lm-eval {version}"


def _wikitext_cached() -> bool:
    from huggingface_hub.constants import HF_HOME

    cache = Path(os.environ.get("HF_DATASETS_CACHE", Path(HF_HOME) / "datasets"))
    return any(cache.glob("EleutherAI___wikitext_document_level*"))


def task_status(task: str) -> tuple[bool, str]:
    """(runnable now, reason). wikitext needs the hub or a cached copy; the local task always runs."""
    if task not in TASKS:
        raise InvalidParameterError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    if TASKS[task].offline:
        return True, "shipped with the project"
    if _wikitext_cached():
        return True, f"{WIKITEXT_DATASET} found in the local datasets cache"
    if hub_reachable():
        return True, f"{WIKITEXT_DATASET} will be downloaded from the Hugging Face hub"
    return False, (
        f"wikitext needs the dataset {WIKITEXT_DATASET} from the Hugging Face hub, which cannot be reached "
        f"and is not in the local cache. Run the offline task '{LOCAL_TASK}' instead (same metrics, "
        "Python documentation text), or run once with internet access to cache wikitext."
    )


def local_documents(limit: int | None = None) -> list[str]:
    """The shipped task's documents, in task order (what `--limit N` takes the first N of)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_lab_pydoc_corpus", TASK_DIR / "corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    docs = [d["text"] for d in module.read_documents()]
    return docs if limit is None else docs[:limit]


@functools.lru_cache(maxsize=16)
def scored_text(documents: int) -> str:
    """The text a bits-per-byte figure over the first `documents` documents scored, as a reader says it: "the
    first 8 of the 48 documents of the shipped Python documentation text (5.12 KB)". The race and the
    quantization lever score different counts, so their figures for one model differ by design."""
    docs = local_documents()
    n = min(documents, len(docs))
    nbytes = sum(count_bytes(d) for d in docs[:n])
    return (
        f"the first {n} of the {len(docs)} documents of the shipped Python documentation text ({gb(nbytes)})"
    )


# --- the engine's own log-likelihood ---------------------------------------------------------------


def _prefix_token_id(tokenizer) -> int:
    """The token a document is conditioned on before its first token: BOS, else EOS (lm-eval's choice)."""
    bos = tokenizer.bos_token_id
    return bos if bos is not None else tokenizer.eos_token_id


def rolling_loglikelihood(lm: LoadedModel, text: str, max_length: int | None = None) -> tuple[float, int]:
    """Sum of ln p(token | earlier tokens) over every token of `text`; returns (ll, tokens).

    The sequence [prefix] + tokens is cut into disjoint windows of `max_length` inputs; each window
    predicts its inputs shifted by one, so every token is scored exactly once and conditioned on as much
    of its own window as precedes it. Caller holds lm.lock.
    """
    import torch

    max_length = max_length or lm.context_length
    ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        return 0.0, 0
    seq = [_prefix_token_id(lm.tokenizer), *ids]
    total = 0.0
    device = lm.model.device
    with torch.inference_mode():
        for start in range(0, len(ids), max_length):
            window = torch.tensor([seq[start : start + max_length + 1]], device=device)  # [1, <=L+1]
            inputs, targets = window[:, :-1], window[:, 1:]  # [1, n], [1, n]
            logits = lm.model(input_ids=inputs).logits  # [1, n, vocab]
            logp = torch.log_softmax(logits.float(), dim=-1)  # float32: bf16 sums would drift
            total += float(logp.gather(-1, targets.unsqueeze(-1)).sum())
    return total, len(ids)


def engine_perplexity(
    lm: LoadedModel,
    documents: Sequence[str],
    max_length: int | None = None,
    progress: Progress | None = None,
) -> PerplexityStats:
    """The three metrics from the engine's own forward passes, under the model's lock."""
    if not documents:
        raise InvalidParameterError("no documents to score")
    t0 = time.perf_counter()
    ll = 0.0
    tokens = words = nbytes = 0
    with lm.lock:
        for i, doc in enumerate(documents):
            doc_ll, doc_tokens = rolling_loglikelihood(lm, doc, max_length)
            ll += doc_ll
            tokens += doc_tokens
            words += count_words(doc)
            nbytes += count_bytes(doc)
            if progress is not None:
                progress((i + 1) / len(documents), f"engine cross-check: document {i + 1}/{len(documents)}")
    return PerplexityStats.from_totals(ll, tokens, words, nbytes, len(documents), time.perf_counter() - t0)


# --- the harness ---------------------------------------------------------------------------------------


def _progress_hflm(lm: LoadedModel, batch_size: int, max_length: int | None, progress: Progress | None):
    """An HFLM on the shared model that reports progress per document and never asks the hub for a SHA."""
    from lm_eval.models.huggingface import HFLM

    class ProgressHFLM(HFLM):
        def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
            # Per request: each document's sum is independent, so this is the harness's own arithmetic.
            out = []
            for i, req in enumerate(requests):
                out.extend(super().loglikelihood_rolling([req], disable_tqdm=True))
                if progress is not None:
                    progress((i + 1) / len(requests), f"lm-eval: document {i + 1}/{len(requests)}")
            return out

        def get_model_info(self) -> dict:
            return {"model_num_parameters": lm.params, "model_dtype": lm.dtype, "model_name": lm.name}

    return ProgressHFLM(
        pretrained=lm.model,
        tokenizer=lm.tokenizer,
        batch_size=batch_size,
        max_length=max_length,
    )


def _validate_limit(limit: int | None) -> int | None:
    why = EvalSpec.problem("limit", limit)
    if why:
        raise InvalidParameterError(why)
    return limit


def run_eval(
    lm: LoadedModel,
    task: str = EvalSpec.default("task"),
    *,
    limit: int | None = EvalSpec.default("limit"),
    crosscheck: bool = EvalSpec.default("crosscheck"),
    batch_size: int = 1,
    max_length: int | None = None,
    progress: Progress | None = None,
) -> EvalResult:
    """Run one lm-eval perplexity task on the loaded model; optionally cross-check with the engine."""
    called = time.perf_counter()
    limit = _validate_limit(limit)
    if task not in TASKS:
        raise InvalidParameterError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    ok, reason = harness_status()
    if not ok:
        raise DependencyMissingError(reason)
    runnable, why = task_status(task)
    if not runnable:
        raise HubUnreachableError(why)
    if not hub_reachable():
        # Cached datasets only; without this, datasets retries the hub for ~25 s before using the cache.
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import lm_eval
    from lm_eval.tasks import TaskManager

    def report(fraction: float, message: str, lo: float, hi: float) -> None:
        if progress is not None:
            progress(lo + (hi - lo) * fraction, message)

    harness_share = 0.7 if crosscheck else 1.0
    report(0.0, "loading the task", 0.0, 1.0)
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    task_manager = TaskManager(include_path=str(TASK_DIR))
    with lm.lock:
        t0 = time.perf_counter()
        hflm = _progress_hflm(lm, batch_size, max_length, lambda f, m: report(f, m, 0.02, harness_share))
        out = lm_eval.simple_evaluate(
            model=hflm,
            tasks=[task],
            task_manager=task_manager,
            limit=limit,
            bootstrap_iters=0,  # perplexities have no stderr here; bootstrapping would only cost time
            log_samples=True,  # the per-document texts and log-likelihoods the cross-check uses
            random_seed=None,  # leave the process-wide RNGs alone: other sessions share this process
            numpy_random_seed=None,
            torch_random_seed=None,
            fewshot_random_seed=None,
        )
        runtime = time.perf_counter() - t0
        window = hflm.max_length
    if out is None:
        raise InvalidParameterError("lm-eval returned no results (not rank 0?)")
    metrics = out["results"][task]
    samples = out.get("samples", {}).get(task, [])
    texts = [
        s["arguments"][0][0] if isinstance(s["arguments"][0], list | tuple) else s["arguments"][0]
        for s in samples
    ]
    per_doc = tuple(float(_first(s["resps"])) for s in samples)
    harness_bpb = float(metrics["bits_per_byte,none"])
    check = None
    if crosscheck and texts:
        stats = engine_perplexity(lm, texts, window, lambda f, m: report(f, m, harness_share, 1.0))
        check = CrossCheck(
            engine=stats,
            harness_bits_per_byte=harness_bpb,
            relative_difference=abs(stats.bits_per_byte - harness_bpb) / abs(harness_bpb),
        )
    report(1.0, "done", 0.0, 1.0)
    return EvalResult(
        task=task,
        task_version=str(out.get("versions", {}).get(task, "unknown")),
        harness_version=harness_version() or "unknown",
        model=lm.name,
        dtype=lm.dtype,
        device=lm.device,
        limit=limit,
        documents=int(out.get("n-samples", {}).get(task, {}).get("effective", len(samples))),
        word_perplexity=float(metrics["word_perplexity,none"]),
        byte_perplexity=float(metrics["byte_perplexity,none"]),
        bits_per_byte=harness_bpb,
        runtime_s=runtime,
        started_at=started_at,
        max_length=int(window),
        crosscheck=check,
        per_document_loglikelihood=per_doc,
        wall_s=time.perf_counter() - called,
    )


def _first(value: Any) -> Any:
    """lm-eval nests responses ([[ll]] or [ll]); dig to the first scalar."""
    while isinstance(value, list | tuple):
        value = value[0]
    return value
