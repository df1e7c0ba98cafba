"""Shared chart helpers: a log axis writes every tick as its full number."""

from __future__ import annotations

from ui.charts import log_ticks
from ui.playground_widgets import latency_figure


def test_log_axis_ticks_are_full_numbers():
    """The Playground's per-token chart read "...9 1000 2" (plotly's minor labels: the "2" meant 2,000)."""
    fig = latency_figure(
        {"KV cache on": [1.5, 0.04, 0.041], "KV cache off": [1.5, 0.2, 0.3]}
    ).to_plotly_json()
    axis = fig["layout"]["yaxis"]
    assert list(axis["ticktext"]) == ["20", "50", "100", "200", "500", "1,000", "2,000"]
    assert [float(t.replace(",", "")) for t in axis["ticktext"]] == list(axis["tickvals"])
    assert log_ticks([30, 45]) == ([30.0, 40.0, 50.0], ["30", "40", "50"])  # within a decade: every digit
    assert log_ticks([]) == ([], [])
