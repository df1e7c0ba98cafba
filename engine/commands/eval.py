"""`python -m engine eval`: run an lm-evaluation-harness perplexity task on a model, with the engine's
own log-likelihood as a cross-check of the harness's bits per byte."""

from __future__ import annotations

from engine.lab import evaluation
from engine.runtime import models

HELP = "evaluate a model with lm-evaluation-harness (word/byte perplexity, bits per byte) and cross-check it"


def add_arguments(parser) -> None:
    models.ModelArgs.add_arguments(parser)
    evaluation.EvalSpec.add_arguments(parser)  # --task, --limit, --crosscheck / --no-crosscheck


def run(args) -> dict:
    spec = evaluation.EvalSpec.from_args(args)  # fail before spending seconds on loading
    ok, reason = evaluation.task_status(spec.task)
    if not ok:
        from engine.core.errors import HubUnreachableError

        raise HubUnreachableError(reason)
    lm = models.ModelArgs.from_args(args).load()
    result = evaluation.run_eval(lm, spec.task, limit=spec.limit, crosscheck=spec.crosscheck)
    row = result.summary()
    row["limit"] = result.limit
    row["max_length"] = result.max_length
    row["metric_definitions"] = evaluation.METRIC_DEFINITIONS
    if result.crosscheck is not None:
        row["crosscheck"] = {
            "engine": result.crosscheck.engine,
            "harness_bits_per_byte": result.crosscheck.harness_bits_per_byte,
            "relative_difference": result.crosscheck.relative_difference,
            "tolerance": result.crosscheck.tolerance,
            "agrees": result.crosscheck.agrees,
        }
    return row


def format_text(row: dict) -> str:
    lines = [
        f"{row['task']} v{row['task_version']} (lm-eval {row['harness_version']}) on {row['model']} "
        f"[{row['dtype']}, {row['device']}], {row['documents']} documents, {row['runtime_s']:.1f} s",
        f"  word_perplexity {row['word_perplexity']:.4g}",
        f"  byte_perplexity {row['byte_perplexity']:.4f}",
        f"  bits_per_byte   {row['bits_per_byte']:.4f}",
    ]
    check = row.get("crosscheck")
    if check:
        verdict = "agrees" if check["agrees"] else "DISAGREES"
        lines.append(
            f"  engine's own bits_per_byte {check['engine'].bits_per_byte:.4f}: {verdict} with the harness "
            f"(difference {check['relative_difference']:.2e}, tolerance {check['tolerance']:.0%})"
        )
    return "\n".join(lines)
