"""One way to draw the pages' side-by-side line charts: two panels over one x, each a list of series."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go


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
    """Two panels side by side sharing `x`, legend below."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=titles)
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
    fig.update_layout(height=height, margin={"t": 40, "b": 10}, legend={"orientation": "h", "y": -0.3})
    return fig
