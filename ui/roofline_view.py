"""Roofline page helpers that sit on top of the calculator's figure (ui.plots_calc.roofline_figure): the ridge
note for the chosen precision, the context cap said out loud, and measured prefill and decode drawn differently
(operator labels are placed by ui.roofline_labels)."""

from __future__ import annotations

import plotly.graph_objects as go

from engine.calc import format as fmt
from engine.calc.roofline_words import diagnose

# The page's steps along each axis of the shape (powers of two: a roofline moves in ratios)
SEQ_LENS = tuple(2**k for k in range(4, 16))  # 16 ... 32,768
BATCHES = tuple(2**k for k in range(10))  # 1 ... 512

MEASURED_STYLE = {
    # phase -> (trace name, marker): prefill a filled star, decode an open diamond, different colours, so the two
    # read apart in print and for colour-blind viewers alike
    "prefill": (
        "measured prefill (this machine, every model run here)",
        dict(symbol="star", size=16, color="#ff7f0e", line=dict(color="black", width=1)),
    ),
    "decode": (
        "measured decode (this machine, every model run here)",
        dict(symbol="diamond-open", size=14, color="#6a3d9a", line=dict(width=3)),
    ),
}


def ridge_note(datasheet, dtype: str) -> str:
    """The ridge at NVIDIA's datasheet bandwidth, for the precision analysed: peak(dtype) / 320 GB/s."""
    if datasheet is None or not datasheet.bandwidth_bytes_per_s or not datasheet.flops_for(dtype):
        return ""
    ridge = datasheet.flops_for(dtype) / datasheet.bandwidth_bytes_per_s
    return f"NVIDIA's datasheet: {datasheet.bandwidth_bytes_per_s / 1e9:.0f} GB/s → {fmt.ridge(ridge)}"


def seq_cap_note(requested: int, context: int, name: str) -> str:
    """'' when the length fits the context, else the sentence saying what was analysed instead."""
    if requested <= context:
        return ""
    return (
        f"s = {requested:,} is past {name}'s context window of {context:,} tokens: the analysis uses "
        f"s = {context:,}, the longest sequence the model accepts."
    )


def split_measured(fig: go.Figure) -> go.Figure:
    """Replace the one 'measured runs' trace by one trace per phase (its hover text names the phase)."""
    keep, measured = [], None
    for t in fig.data:
        if t.name == "measured runs (this machine)":
            measured = t
        else:
            keep.append(t)
    if measured is None:
        return fig
    fig.data = tuple(keep)
    for phase, (name, marker) in MEASURED_STYLE.items():
        idx = [i for i, h in enumerate(measured.customdata) if f"measured {phase}" in str(h)]
        if idx:
            fig.add_scatter(
                x=[measured.x[i] for i in idx],
                y=[measured.y[i] for i in idx],
                mode="markers",
                name=name,
                marker=marker,
                customdata=[measured.customdata[i] for i in idx],
                hovertemplate="%{customdata}<extra></extra>",
            )
    return fig


def reading(result) -> list[str]:
    """The calculator's reading of a roofline (engine.calc.roofline_words.diagnose): decode's weights line follows the same
    ridge comparison as the plot."""
    return diagnose(result)
