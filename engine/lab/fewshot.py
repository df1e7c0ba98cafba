"""Few-shot prompting and classification by label log-likelihood (chapter 4, section 4.1.2).

A GPT-style model can classify text it was never trained to classify when the prompt shows it a few
labelled examples. Two ways to read the model's answer:

1. Free text: `generate` continues the prompt; what it returns *includes the prompt* (the chapter's point),
   and the words after it may or may not be a label.
2. The evaluation harnesses' way (lm-eval's `multiple_choice` output type, metric `acc`): for each candidate
   label, the log-probability of the continuation " <label>" given the prompt, summed over its tokens;
   the prediction is the label with the highest sum. A softmax over those sums gives each label's
   probability *among the candidates*. Context/continuation are split as lm-eval's `_encode_pair` does:
   encode(context + continuation), and the continuation is what follows the context's own tokens.

`accuracy_by_k` measures zero-shot against k-shot on the same queries: each query's demonstrations are
drawn (seeded) from the other items of the set, nested so the 4 demonstrations of k=4 are also the first
4 of k=8. Labelled sets come from engine/data/fewshot/*.csv or a user's CSV (parsed, never executed).
"""

from __future__ import annotations

import csv
import io
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.core import stats
from engine.core.errors import InvalidParameterError, PromptTooLongError
from engine.core.interval import Interval
from engine.core.spec import Spec, option
from engine.runtime.models import LoadedModel

Progress = Callable[[float, str], None]

DATA_DIR = Path(__file__).parents[1] / "data" / "fewshot"
DEFAULT_SET = "sentiment"
DEFAULT_KS: tuple[int, ...] = (0, 1, 2, 4, 8)
MAX_CSV_BYTES = 1_000_000  # the page's upload limit, enforced here too
MAX_ROWS = 2_000
MAX_TEXT_CHARS = 1_000
MAX_LABELS = 20
MAX_K = 32
TEXT_COLUMNS = ("text", "sentence", "input")
LABEL_COLUMNS = ("label", "class", "category")
_BATCH_ROWS = 16  # sequences per forward pass: bounds activation memory on long k=8 prompts
SOURCES = ("Shipped set", "Upload a CSV", "Paste CSV")  # where the page's labelled examples come from
K_CHOICES: tuple[int, ...] = (0, 1, 2, 4, 8, 16)  # the sweep's menu: doublings, as the chapter compares them


@dataclass(frozen=True)
class FewShotSpec(Spec):
    """The few-shot experiment's options: the Few-shot tab of page 4 and `accuracy_by_k` take their defaults,
    bounds and choices here (engine.core.spec)."""

    source: str = option(
        SOURCES[0],
        "A CSV with a header row naming a 'text' column and a 'label' column. It is parsed as data, never run.",
        choices=SOURCES,
        label="labelled examples",
        cli=False,  # the command line takes --csv
    )
    k: int = option(
        2,
        "worked examples shown before the one text to classify (more than 8 leaves a small model's context)",
        lo=0,
        hi=8,
        label="k (examples in the prompt)",
    )
    ks: tuple[int, ...] = option(
        DEFAULT_KS, "the k values compared on the same queries", choices=K_CHOICES, label="k values"
    )
    max_queries: int | None = option(
        None,
        "only the first N items as queries (default: all). Each query costs one forward pass per k.",
        kind=int,
        lo=1,
        hi=MAX_ROWS,
        label="queries",
        flag="--queries",
    )
    seed: int = option(0, "seed for drawing the examples", lo=0)


@dataclass(frozen=True)
class Example:
    text: str
    label: str


@dataclass(frozen=True)
class LabelledSet:
    name: str
    examples: tuple[Example, ...]
    labels: tuple[str, ...]  # in order of first appearance

    def __len__(self) -> int:
        return len(self.examples)


@dataclass(frozen=True)
class PromptTemplate:
    """How examples are laid out. Defaults are the one source for the page's widgets and the CLI."""

    instruction: str = "Classify the sentiment of each text as positive or negative."
    input_prefix: str = "Text: "
    output_prefix: str = "Sentiment:"
    separator: str = "\n\n"
    target_delimiter: str = " "  # between the output prefix and the label, as lm-eval's default

    def validate(self) -> PromptTemplate:
        for name in ("instruction", "input_prefix", "output_prefix", "separator", "target_delimiter"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise InvalidParameterError(f"{name} must be text, got {type(value).__name__}")
            if len(value) > 2_000:
                raise InvalidParameterError(f"{name} is {len(value)} characters; keep it under 2,000")
        if not self.output_prefix.strip():
            raise InvalidParameterError(
                "the output prefix (e.g. 'Sentiment:') must not be empty: the label follows it"
            )
        return self


@dataclass(frozen=True)
class LabelScores:
    labels: tuple[str, ...]
    logprobs: tuple[float, ...]  # summed natural-log probability of each label's continuation tokens
    probabilities: tuple[float, ...]  # softmax over `logprobs`: shares among the candidates, sum to 1
    token_counts: tuple[int, ...]

    @property
    def predicted(self) -> str:
        return self.labels[max(range(len(self.labels)), key=self.logprobs.__getitem__)]


@dataclass(frozen=True)
class KAccuracy:
    k: int
    accuracy: float
    correct: int
    total: int
    labels: tuple[str, ...]
    confusion: tuple[tuple[int, ...], ...]  # rows: true label, columns: predicted label
    mean_prompt_tokens: float
    runtime_s: float
    predictions: tuple[str, ...]

    @property
    def interval(self) -> Interval:
        """The accuracy with its 95% Wilson interval over the queries (engine.core.stats.proportion)."""
        return stats.proportion(self.correct, self.total)


# --- data ---------------------------------------------------------------------------------------------


def shipped_sets() -> list[str]:
    return sorted(p.stem for p in DATA_DIR.glob("*.csv"))


def load_shipped(name: str = DEFAULT_SET) -> LabelledSet:
    if name not in shipped_sets():
        raise InvalidParameterError(
            f"no shipped set named {name!r}; choose one of {', '.join(shipped_sets())}"
        )
    return parse_csv((DATA_DIR / f"{name}.csv").read_bytes(), name=name)


def _pick_column(fields: Sequence[str], wanted: Sequence[str]) -> str | None:
    lowered = {f.strip().lower(): f for f in fields if f is not None}
    return next((lowered[w] for w in wanted if w in lowered), None)


def parse_csv(data: bytes | str, *, name: str = "uploaded") -> LabelledSet:
    """A labelled set from CSV text with a header row naming a text column and a label column.

    Read with the csv module only: nothing in the file is evaluated. Raises InvalidParameterError saying
    what to fix for an empty, oversized, undecodable or malformed file.
    """
    if isinstance(data, bytes):
        if len(data) > MAX_CSV_BYTES:
            raise InvalidParameterError(
                f"the CSV is {len(data):,} bytes; the limit is {MAX_CSV_BYTES:,} (1 MB). Use fewer rows."
            )
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise InvalidParameterError(
                f"the CSV is not UTF-8 text (byte {exc.start} cannot be decoded); save it as UTF-8 CSV"
            ) from None
    if not isinstance(data, str):
        raise InvalidParameterError(f"expected CSV text, got {type(data).__name__}")
    if len(data.encode("utf-8")) > MAX_CSV_BYTES:
        raise InvalidParameterError(f"the CSV is larger than {MAX_CSV_BYTES:,} bytes (1 MB); use fewer rows")
    data = data.replace("\x00", "")
    if not data.strip():
        raise InvalidParameterError("the CSV is empty: it needs a header row (text,label) and labelled rows")
    try:
        reader = csv.DictReader(io.StringIO(data))
        fields = reader.fieldnames or []
    except csv.Error as exc:
        raise InvalidParameterError(f"the CSV could not be read ({exc}); check its quoting") from None
    text_col = _pick_column(fields, TEXT_COLUMNS)
    label_col = _pick_column(fields, LABEL_COLUMNS)
    if text_col is None or label_col is None:
        missing = [n for n, c in (("text", text_col), ("label", label_col)) if c is None]
        raise InvalidParameterError(
            f"the CSV is missing the column(s) {', '.join(missing)}; its header has: "
            f"{', '.join(f for f in fields if f) or '(nothing)'}. The first row must name a 'text' column and "
            "a 'label' column, e.g. text,label"
        )
    examples: list[Example] = []
    try:
        for line_no, row in enumerate(reader, start=2):
            text = (row.get(text_col) or "").strip()
            label = (row.get(label_col) or "").strip()
            if not text and not label:
                continue  # blank line
            if not text or not label:
                raise InvalidParameterError(
                    f"row {line_no} has an empty {'text' if not text else 'label'}; fill it in or delete the row"
                )
            if len(text) > MAX_TEXT_CHARS:
                raise InvalidParameterError(
                    f"row {line_no}'s text has {len(text):,} characters; keep each under {MAX_TEXT_CHARS:,}"
                )
            examples.append(Example(" ".join(text.split()), label))
            if len(examples) > MAX_ROWS:
                raise InvalidParameterError(f"the CSV has more than {MAX_ROWS:,} rows; use a smaller set")
    except csv.Error as exc:
        raise InvalidParameterError(f"the CSV could not be read ({exc}); check its quoting") from None
    if not examples:
        raise InvalidParameterError("the CSV has a header but no labelled rows")
    labels = tuple(dict.fromkeys(e.label for e in examples))
    if len(labels) < 2:
        raise InvalidParameterError(
            f"the CSV has only the label {labels[0]!r}; classification needs at least two labels"
        )
    if len(labels) > MAX_LABELS:
        raise InvalidParameterError(
            f"the CSV has {len(labels)} distinct labels; at most {MAX_LABELS} are supported"
        )
    return LabelledSet(name=name, examples=tuple(examples), labels=labels)


# --- prompts ---------------------------------------------------------------------------------------------


def build_prompt(
    demonstrations: Sequence[Example], query: str, template: PromptTemplate | None = None
) -> str:
    """The exact text sent to the model: instruction, k worked examples, then the query awaiting its label."""
    t = (template or PromptTemplate()).validate()
    if not isinstance(query, str) or not query.strip():
        raise InvalidParameterError("the query is empty: type a text to classify")
    blocks = [t.instruction.strip()] if t.instruction.strip() else []
    for ex in demonstrations:
        blocks.append(f"{t.input_prefix}{ex.text}\n{t.output_prefix}{t.target_delimiter}{ex.label}")
    blocks.append(f"{t.input_prefix}{query.strip()}\n{t.output_prefix}")
    return t.separator.join(blocks)


def select_demonstrations(
    pool: Sequence[Example], k: int, *, seed: int = FewShotSpec.default("seed"), exclude: int | None = None
) -> list[Example]:
    """k examples from `pool`, seeded, never the query itself; a prefix of the k+1 choice (nested)."""
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= MAX_K:
        raise InvalidParameterError(f"k must be a whole number from 0 to {MAX_K}, got {k!r}")
    candidates = [i for i in range(len(pool)) if i != exclude]
    if k > len(candidates):
        raise InvalidParameterError(
            f"k={k} needs {k} examples besides the query; the set has {len(candidates)}"
        )
    random.Random(f"{seed}:{exclude}").shuffle(candidates)
    return [pool[i] for i in candidates[:k]]


# --- scoring -------------------------------------------------------------------------------------------


def _encode_pair(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-eval's split: trailing spaces of the context move to the continuation, then encode the whole
    string and take what follows the context's tokens as the continuation."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = tokenizer(context + continuation, add_special_tokens=False)["input_ids"]
    ctx = tokenizer(context, add_special_tokens=False)["input_ids"]
    return ctx, whole[len(ctx) :]


def _softmax(xs: Sequence[float]) -> tuple[float, ...]:
    m = max(xs)
    exps = [math.exp(x - m) for x in xs]
    s = sum(exps)
    return tuple(e / s for e in exps)


def score_labels_batch(
    lm: LoadedModel, prompts: Sequence[str], labels: Sequence[str], *, delimiter: str = " "
) -> list[LabelScores]:
    """Label log-likelihoods for many prompts. When every label is one token that tokenizes the same
    after the prompt, one forward pass per prompt scores all labels (identical numbers, 1/len(labels) the work)."""
    if len(labels) < 2:
        raise InvalidParameterError("give at least two candidate labels")
    prefix = lm.tokenizer.bos_token_id if lm.tokenizer.bos_token_id is not None else lm.tokenizer.eos_token_id
    plans = []
    for prompt in prompts:
        pairs = [_encode_pair(lm.tokenizer, prompt, delimiter + label) for label in labels]
        longest = max(len(c) + len(t) for c, t in pairs) + 1
        if longest > lm.context_length:
            raise PromptTooLongError(
                f"the few-shot prompt is {longest} tokens, more than {lm.name}'s context of {lm.context_length}; "
                "use a smaller k or shorter examples"
            )
        if any(not t for _, t in pairs):
            raise InvalidParameterError("a label tokenizes to nothing after the prompt; use non-empty labels")
        plans.append(pairs)
    results: list[LabelScores] = []
    for start in range(0, len(plans), _BATCH_ROWS):
        chunk = plans[start : start + _BATCH_ROWS]
        rows: list[list[int]] = []
        spans: list[list[tuple[int, list[int]]]] = []  # per row: (first target index, target ids)
        where: list[list[tuple[int, int]]] = []  # per prompt, per label: (row, span within the row)
        for pairs in chunk:
            ctx0 = pairs[0][0]
            if all(len(t) == 1 and c == ctx0 for c, t in pairs):
                # One row, the prompt plus any label token; every label is read at the prompt's last position.
                rows.append([prefix, *ctx0, pairs[0][1][0]])
                spans.append([(len(ctx0) + 1, t) for _, t in pairs])
                where.append([(len(rows) - 1, j) for j in range(len(pairs))])
            else:
                here = []
                for c, t in pairs:
                    rows.append([prefix, *c, *t])
                    spans.append([(len(c) + 1, t)])
                    here.append((len(rows) - 1, 0))
                where.append(here)
        sums = _forward_multi(lm, rows, spans)
        for pairs, places in zip(chunk, where, strict=True):
            lps = tuple(sums[r][j] for r, j in places)
            results.append(LabelScores(tuple(labels), lps, _softmax(lps), tuple(len(t) for _, t in pairs)))
    return results


def _forward_multi(
    lm: LoadedModel, rows: list[list[int]], spans_per_row: list[list[tuple[int, list[int]]]]
) -> list[list[float]]:
    """One padded forward over `rows`; for each row, the summed log-prob of each of its target spans."""
    import torch

    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)  # [B, T], right-padded
    mask = torch.zeros((len(rows), width), dtype=torch.long)  # [B, T]
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    device = lm.model.device
    # Only the positions that predict a label token need the vocabulary projection (the widest matmul and
    # the largest tensor here): pass them as logits_to_keep, so logits are [B, P, V] instead of [B, T, V].
    needed = sorted({start - 1 + j for spans in spans_per_row for start, t in spans for j in range(len(t))})
    column = {p: i for i, p in enumerate(needed)}
    out: list[list[float]] = []
    with lm.lock, torch.inference_mode():
        inputs = {"input_ids": ids.to(device), "attention_mask": mask.to(device)}
        try:
            logits = lm.model(
                **inputs, logits_to_keep=torch.tensor(needed, device=device)
            ).logits  # [B, P, V]
        except TypeError:  # a model class without logits_to_keep: project every position
            logits = lm.model(**inputs).logits  # [B, T, V]
            column = {p: p for p in needed}
        for i, spans in enumerate(spans_per_row):
            values = []
            for start, targets in spans:
                # logits at position p predict token p+1, so targets at [start, start+n) are read at start-1...
                cols = torch.tensor([column[start - 1 + j] for j in range(len(targets))], device=device)
                logp = torch.log_softmax(logits[i, cols].float(), dim=-1)  # [n, V]
                idx = torch.tensor(targets, device=device).unsqueeze(-1)  # [n, 1]
                values.append(float(logp.gather(-1, idx).sum()))
            out.append(values)
    return out


def score_labels(lm: LoadedModel, prompt: str, labels: Sequence[str], *, delimiter: str = " ") -> LabelScores:
    return score_labels_batch(lm, [prompt], labels, delimiter=delimiter)[0]


# --- accuracy ------------------------------------------------------------------------------------------


def confusion_matrix(
    true: Sequence[str], predicted: Sequence[str], labels: Sequence[str]
) -> tuple[tuple[int, ...], ...]:
    """Counts with rows = true label, columns = predicted label, in `labels` order."""
    if len(true) != len(predicted):
        raise InvalidParameterError("true and predicted labels differ in number")
    index = {label: i for i, label in enumerate(labels)}
    grid = [[0] * len(labels) for _ in labels]
    for t, p in zip(true, predicted, strict=True):
        grid[index[t]][index[p]] += 1
    return tuple(tuple(row) for row in grid)


def accuracy_by_k(
    lm: LoadedModel,
    dataset: LabelledSet,
    ks: Sequence[int] = FewShotSpec.default("ks"),
    *,
    template: PromptTemplate | None = None,
    seed: int = FewShotSpec.default("seed"),
    max_queries: int | None = FewShotSpec.default("max_queries"),
    progress: Progress | None = None,
) -> list[KAccuracy]:
    """Accuracy of label-likelihood classification for each k on the same queries (leave-one-out demos)."""
    t = (template or PromptTemplate()).validate()
    if not ks:
        raise InvalidParameterError("choose at least one k")
    n = len(dataset) if max_queries is None else max_queries
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(dataset):
        raise InvalidParameterError(
            f"the number of queries must be from 1 to {len(dataset)}, got {max_queries!r}"
        )
    queries = list(range(n))
    out = []
    for j, k in enumerate(ks):
        t0 = time.perf_counter()
        prompts = [
            build_prompt(
                select_demonstrations(dataset.examples, k, seed=seed, exclude=i), dataset.examples[i].text, t
            )
            for i in queries
        ]
        scores: list[LabelScores] = []
        for s in range(0, len(prompts), _BATCH_ROWS):
            scores += score_labels_batch(
                lm, prompts[s : s + _BATCH_ROWS], dataset.labels, delimiter=t.target_delimiter
            )
            if progress is not None:
                done = (j + min(1.0, (s + _BATCH_ROWS) / len(prompts))) / len(ks)
                progress(done, f"k={k}: {min(s + _BATCH_ROWS, len(prompts))}/{len(prompts)} queries")
        predictions = tuple(sc.predicted for sc in scores)
        truth = [dataset.examples[i].label for i in queries]
        correct = sum(p == y for p, y in zip(predictions, truth, strict=True))
        tokens = [len(lm.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
        out.append(
            KAccuracy(
                k=k,
                accuracy=correct / len(queries),
                correct=correct,
                total=len(queries),
                labels=dataset.labels,
                confusion=confusion_matrix(truth, predictions, dataset.labels),
                mean_prompt_tokens=sum(tokens) / len(tokens),
                runtime_s=time.perf_counter() - t0,
                predictions=predictions,
            )
        )
    return out


def majority_baseline(dataset: LabelledSet, max_queries: int | None = None) -> float:
    """Accuracy of always answering the most common label: what 'no better than chance' means here."""
    items = dataset.examples[: max_queries or len(dataset)]
    counts: dict[str, int] = {}
    for e in items:
        counts[e.label] = counts.get(e.label, 0) + 1
    return max(counts.values()) / len(items)
