"""Plot builders and small helpers for the few-shot / code / evaluation lab page (Streamlit-free figures,
so tests can build them without a script run)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from engine.core.jsonsafe import from_jsonable, to_jsonable
from engine.lab.fewshot import KAccuracy, LabelledSet, LabelScores, majority_baseline


def label_probability_figure(scores: LabelScores) -> go.Figure:
    fig = go.Figure(
        go.Bar(
            x=list(scores.probabilities),
            y=list(scores.labels),
            orientation="h",
            text=[f"{p:.1%}" for p in scores.probabilities],
            textposition="auto",
            hovertemplate="%{y}: %{x:.3f}<extra></extra>",
        )
    )
    fig.update_layout(
        title="Probability of each label (softmax over label log-likelihoods)",
        xaxis={"range": [0, 1], "tickformat": ".0%"},
        height=120 + 40 * len(scores.labels),
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
    )
    return fig


def sweep_record(results: list[KAccuracy], lm: Any, dataset: LabelledSet, queries: int) -> dict:
    """What the page keeps of an accuracy-against-k run (and stores for a reload): the results and their setting."""
    return {
        "results": results,
        "baseline": majority_baseline(dataset, queries),
        "model": f"{lm.name} ({lm.dtype})",
        "dataset": dataset.name,
    }


def sweep_from_record(stored: dict) -> dict:
    """A stored sweep_record back as the page draws it (KAccuracy rows from their JSON)."""
    return {**stored, "results": [from_jsonable(KAccuracy, r) for r in stored.get("results", [])]}


def classified_from_record(stored: dict) -> dict:
    """A stored classification ({prompt, scores, free, k}) back as the page draws it (LabelScores from JSON)."""
    return {**stored, "scores": from_jsonable(LabelScores, stored["scores"])}


def classified_headline(scores: LabelScores, k: int) -> str:
    """The classification in one line for under its button (the prompt and scores land below the fold at 900 px):
    the label that won and each candidate's share, from the scores the table below shows."""
    shares = ", ".join(
        f"{label} {p:.0%}"
        for label, p in sorted(zip(scores.labels, scores.probabilities, strict=True), key=lambda lp: -lp[1])
    )
    return (
        f"Predicted label: **{scores.predicted}** ({shares} among the labels; {k}-shot). The prompt and the scores "
        "below have the rest."
    )


def accuracy_figure(results: Sequence[KAccuracy], baseline: float) -> go.Figure:
    ks = [r.k for r in results]
    fig = go.Figure(
        go.Scatter(
            x=ks,
            y=[r.accuracy for r in results],
            mode="lines+markers",
            name="label log-likelihood",
            # the 95% Wilson interval over the queries: on 16 queries one more right answer moves 6 points
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [r.interval.high - r.accuracy for r in results],
                "arrayminus": [r.accuracy - r.interval.low for r in results],
            },
            customdata=[[r.correct, r.total, r.interval.low, r.interval.high] for r in results],
            hovertemplate="k=%{x}: %{y:.1%} (%{customdata[0]}/%{customdata[1]}; 95% interval "
            "%{customdata[2]:.0%}-%{customdata[3]:.0%})<extra></extra>",
        )
    )
    # each value just above its interval's top: drawn on the point, the label sat over the error bar
    fig.add_trace(
        go.Scatter(
            x=ks,
            y=[r.interval.high for r in results],
            mode="text",
            text=[f"{r.accuracy:.0%}" for r in results],
            textposition="top center",
            showlegend=False,
            hoverinfo="skip",
        )
    )
    fig.add_hline(
        y=baseline,
        line_dash="dot",
        annotation_text=f"majority-label baseline {baseline:.0%}",
        annotation_position="bottom right",
    )
    fig.update_layout(
        title="Accuracy vs number of examples in the prompt (k), with its 95% interval",
        xaxis={"title": "k (examples in the prompt)", "tickmode": "array", "tickvals": ks},
        # room above 100% for a label over an interval that reaches it
        yaxis={"title": "accuracy", "range": [0, 1.14], "tickformat": ".0%"},
        height=380,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )
    return fig


def accuracy_sentence(results: Sequence[KAccuracy]) -> str:
    """What the sweep shows once chance is allowed for: the best k against zero-shot (or the fewest examples run),
    with whether their 95% intervals overlap."""
    if len(results) < 2:
        return ""
    first, best = results[0], max(results, key=lambda r: (r.accuracy, -r.k))
    if best is first:
        return f"No k above {first.k} scored higher than k = {first.k} ({first.accuracy:.0%})."
    a, b = first.interval, best.interval
    gap = f"k = {best.k} scored {best.accuracy:.0%} against {first.accuracy:.0%} at k = {first.k}"
    if b.low > a.high:
        return f"{gap}; their 95% intervals do not overlap, so the gain is more than chance on {best.total} queries."
    return (
        f"{gap}, but their 95% intervals overlap ({a.low:.0%}-{a.high:.0%} and {b.low:.0%}-{b.high:.0%}): on "
        f"{best.total} queries that gap can be chance; run more queries to tell."
    )


def confusion_figure(result: KAccuracy) -> go.Figure:
    labels = list(result.labels)
    z = [list(row) for row in result.confusion]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[f"pred: {label}" for label in labels],
            y=[f"true: {label}" for label in labels],
            text=z,
            texttemplate="%{text}",
            colorscale="Blues",
            showscale=False,
            hovertemplate="%{y}, %{x}: %{z}<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"Confusion matrix, k={result.k} ({result.correct}/{result.total} correct)",
        yaxis={"autorange": "reversed"},
        height=160 + 50 * len(labels),
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )
    return fig


def run_label(row: dict[str, Any]) -> str:
    return f"{row['model']} · {row['dtype']} · {row['task']} ({row['documents']} docs)"


def eval_comparison_figure(rows: Sequence[dict[str, Any]]) -> go.Figure:
    """Bits per byte per run (the tokenizer-independent metric, so different models compare fairly)."""
    labels = [f"#{i + 1} {run_label(r)}" for i, r in enumerate(rows)]
    fig = go.Figure(
        go.Bar(
            x=labels,
            y=[r["bits_per_byte"] for r in rows],
            text=[f"{r['bits_per_byte']:.3f}" for r in rows],
            # mid-bar: the cross-check's marker sits at the bar's top, where 'auto' put the number under it
            textposition="inside",
            insidetextanchor="middle",
            name="harness",
        )
    )
    if any("engine_bits_per_byte" in r for r in rows):
        fig.add_trace(
            go.Scatter(
                x=labels,
                y=[r.get("engine_bits_per_byte") for r in rows],
                mode="markers",
                marker={"symbol": "x", "size": 12, "color": "black"},
                name="engine cross-check",
            )
        )
    fig.update_layout(
        title="Bits per byte by run (lower is better)",
        yaxis={"title": "bits per byte"},
        height=380,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )
    return fig


def runs_json(rows: Sequence[dict[str, Any]]) -> str:
    """The session's runs as JSON (infinities, e.g. a random model's word perplexity, become null)."""

    return json.dumps(to_jsonable(list(rows)), indent=2)
