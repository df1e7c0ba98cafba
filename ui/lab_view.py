"""What the few-shot / code / evaluation page draws of a finished run, and its one HTML report, read from what the
page shows: this session's live run, or the run kept across a reload (ui.pace.shown_result), so a reload loses
neither the result nor its report."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from engine.core.jsonsafe import from_jsonable
from engine.lab import codegen, evaluation
from engine.runtime import runlog
from ui import export, lab_widgets
from ui.common import browser_session, fmt_seconds


def code_from_record(stored: dict) -> codegen.CodeResult:
    """A stored CodeResult back as the page draws it."""
    return from_jsonable(codegen.CodeResult, stored)


def session_eval_runs(experiment: str) -> list[dict[str, Any]]:
    """This browser session's stored evaluation runs, oldest first, as the runs table's rows (after a reload)."""
    rows = []
    for stored in reversed(runlog.results(experiment, session=browser_session())):
        try:
            rows.append(from_jsonable(evaluation.EvalResult, stored.payload).summary())
        except (KeyError, TypeError, ValueError):  # a result stored by an older version: passed over
            continue
    return rows


def kept_in_other_tabs(*, code: tuple[str, Any], evaluation_run: tuple[str, Any]) -> str:
    """A page reload opens on the Few-shot tab, so a code-generation or evaluation run kept across it looked lost:
    a sentence naming the tab that holds each kept run; "" when none is kept or this session's run is live. Each
    argument is (the run log's experiment, this session's live result or None)."""
    tabs = (
        (code, "a code-generation result in the **Code generation** tab"),
        (evaluation_run, "an evaluation result in the **Evaluation** tab"),
    )
    kept = [
        where
        for (experiment, live), where in tabs
        if live is None and runlog.last_result(experiment, session=browser_session()) is not None
    ]
    if not kept:
        return ""
    return f"Kept from before the page was reloaded: {' and '.join(kept)}."


def code_outcome(result: codegen.CodeResult) -> tuple[str, str]:
    """The draft's verdict, from the checks that ran: ("error", ...) when it does not parse, ("warning", ...) when
    lint found something or could not run, else ("neutral", ...): the code is never run or tested here, so passing
    the parser and the linter is never shown as a success (a wrong program passes both)."""
    unchecked = "It was never run or tested: whether it does what was asked was **not checked**."
    if not result.syntax.ok:
        where = f" at line {result.syntax.line}, column {result.syntax.column}" if result.syntax.line else ""
        return (
            "error",
            f"**Does not parse**: `ast.parse` rejects it ({result.syntax.message}{where}), so it cannot run.",
        )
    lint = result.lint
    if not lint.available:
        return "warning", f"**Parses; lint not run** ({lint.reason}). {unchecked}"
    if lint.findings:
        return "warning", f"**Parses, but lint found {len(lint.findings)} finding(s)** (below). {unchecked}"
    return "neutral", f"**Parses, and lint found nothing.** {unchecked}"


def show_code_result(result: codegen.CodeResult) -> None:
    """The draft, its verdict (coloured by the outcome of the checks that ran, code_outcome), why it stopped, its
    syntax and lint details, and the model's raw output."""
    m = result.completion.measurement
    st.markdown(
        f"**Generated code** ({result.mode} mode, {m.output_tokens} tokens; generation took "
        f"{fmt_seconds(m.latency_s)} from the request to its last token, the review after it not counted):"
    )
    st.code(result.code, language="python", line_numbers=True)
    kind, verdict = code_outcome(result)
    box = {"error": st.error, "warning": st.warning, "neutral": st.info}[kind]
    box(
        verdict,
        icon={"error": ":material/error:", "warning": ":material/warning:"}.get(kind, ":material/help:"),
    )
    st.markdown(f"**Why it stopped:** `{result.stop_reason}`: {result.stop_explanation}")
    if result.syntax.ok:
        st.caption(
            "Syntax: `ast.parse` accepts it (parsing only: correct syntax says nothing about correct behaviour)."
        )
    lint = result.lint
    if lint.available and not lint.findings:
        st.caption(f"{lint.ruff_version} (rules {', '.join(lint.rules)}): no findings.")
    elif lint.findings:
        rows = codegen.collapse_findings(lint.findings)
        collapsed = len(rows) < len(lint.findings)
        st.markdown(
            f"**{lint.ruff_version}** (rules {', '.join(lint.rules)}): {len(lint.findings)} finding(s)"
            + (
                f", {len(rows)} distinct (repeats collapsed into one row with their lines)"
                if collapsed
                else ""
            )
        )
        st.dataframe(pd.DataFrame(rows), hide_index=True)
    with st.expander("The model's raw output"):
        st.code(
            result.completion.full_text if result.mode == "complete" else result.completion.text,
            language=None,
        )


def report_sections(*, classified, sweep, code, eval_runs: list[dict[str, Any]]) -> list:
    """The page's report from what it shows (each a ui.pace.Shown or None): the text classified, the accuracy
    against k, the generated code and the evaluation runs."""
    report: list = []
    if classified is not None:
        done = classified.result
        scores = done["scores"]
        report += [
            export.Heading(f"One text classified with {done['k']} examples: {scores.predicted}"),
            export.Text(done["prompt"]),
            export.Table(
                [
                    {"label": lb, "probability": p}
                    for lb, p in zip(scores.labels, scores.probabilities, strict=True)
                ]
            ),
        ]
    if sweep is not None and sweep.result["results"]:
        sw = sweep.result
        report += [
            export.Heading(f"Few-shot accuracy against k: {sw['model']} on '{sw['dataset']}'"),
            export.Figure(lab_widgets.accuracy_figure(sw["results"], sw["baseline"])),
            export.Table(
                [
                    {"k": r.k, "accuracy": r.accuracy, "correct": f"{r.correct}/{r.total}"}
                    for r in sw["results"]
                ]
            ),
        ]
    if code is not None:
        result = code.result
        syntax = "accepted by `ast.parse`" if result.syntax.ok else f"rejected: {result.syntax.message}"
        report += [
            export.Heading(f"Generated code ({result.mode} mode, stopped by {result.stop_reason})"),
            export.Table([{"code": result.code}]),
            export.Text(f"Syntax: {syntax}"),
            export.Text(code_outcome(result)[1]),
        ]
        if result.lint.findings:
            report += [export.Table(codegen.collapse_findings(result.lint.findings), "ruff findings")]
    if eval_runs:
        report += [export.Heading("Evaluation runs"), export.Table(eval_runs)]
    return report
