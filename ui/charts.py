"""One way to draw the pages' side-by-side line charts: two panels over one x, each a list of series."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

# A horizontal legend above the plot, anchored at its bottom: plotly grows the top margin to fit it, however many
# rows it wraps to. Below the plot in its own units (y=-0.3, which plotly anchors at the legend's bottom) a legend
# that wrapped grew upwards, over the axis title and the lines (the Serving page's charts at 1280 px).
LEGEND_ABOVE = {"orientation": "h", "x": 0, "xanchor": "left", "y": 1.02, "yanchor": "bottom"}


@dataclass(frozen=True)
class Series:
    """One line: its values over the chart's x, its legend name and colour, its panel (1 or 2)."""

    y: Sequence[float]
    name: str
    color: str
    col: int = 1
    dash: str = "solid"
    markers: bool = True


def two_panels(
    x: Sequence[float], titles: tuple[str, str], series: Sequence[Series], *, height: int = 340
) -> go.Figure:
    """Two panels side by side sharing `x`, legend above them (LEGEND_ABOVE). Each panel's title is its y axis's:
    subplot titles sit where the legend goes."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12)
    for s in series:
        fig.add_scatter(
            x=list(x),
            y=list(s.y),
            name=s.name,
            mode="lines+markers" if s.markers else "lines",
            line={"dash": s.dash, "color": s.color},
            row=1,
            col=s.col,
        )
    for col, title in enumerate(titles, start=1):
        fig.update_yaxes(title=title, row=1, col=col)
    fig.update_layout(height=height, margin={"t": 10, "b": 10}, legend=LEGEND_ABOVE)
    return fig


def log_ticks(values: Sequence[float]) -> tuple[list[float], list[str]]:
    """Ticks for a log axis at 1, 2 and 5 of every decade the values span, each written as its full number
    ("2,000", "0.5"): plotly's own minor labels read "...8 9 1000 2 3", where the "2" means 2,000."""
    finite = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not finite:
        return [], []
    lo, hi = min(finite), max(finite)
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    for steps in ((1, 2, 5), tuple(range(1, 10))):  # every digit when the data span less than a decade or so
        vals = [m * 10.0**e for e in decades for m in steps]
        # keep one tick either side of the data, so the axis ends on a labelled value
        first = max(v for v in vals if v <= lo)
        last = min(v for v in vals if v >= hi)
        vals = [v for v in vals if first <= v <= last]
        if len(vals) >= 4:
            break
    return vals, [f"{v:,.10g}" for v in vals]
