"""The HTML report: one self-contained file (plotly.js inlined once, nothing fetched), and a download button on
each results page."""

from __future__ import annotations

import re
from pathlib import Path

import plotly.graph_objects as go
from streamlit.testing.v1 import AppTest

from ui import export

ROOT = Path(__file__).resolve().parents[1]


def test_report_is_self_contained():
    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    page = export.build_html(
        "Demo <page>",
        [
            export.Heading("Results"),
            export.Text("In-flight made **1.40×** static's throughput.\n- p95 `2.0 s`"),
            export.Table([{"policy": "static", "tok/s": 100}, {"policy": "inflight", "tok/s": 140}]),
            export.Figure(fig, "one"),
            export.Figure(fig, "two"),
        ],
    )
    assert page.startswith("<!doctype html>") and "Demo &lt;page&gt;" in page
    assert "<b>1.40×</b>" in page and "<li>p95 <code>2.0 s</code></li>" in page
    assert "<td>inflight</td><td>140</td>" in page
    assert page.count("plotly.js v") == 1  # the library inlined once, both figures use it
    assert page.count("Plotly.newPlot") == 2
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=\"http", page)  # nothing fetched when opened


def test_results_pages_offer_the_report():
    at = AppTest.from_file(str(ROOT / "pages/3_Roofline.py"), default_timeout=120).run()
    button = at.get("download_button")
    assert any(b.proto.id and "roof.html" in b.proto.id for b in button)
    assert any("Download report (HTML)" in b.proto.label and not b.proto.disabled for b in button)
