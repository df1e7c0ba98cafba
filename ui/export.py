"""One page's results as one self-contained HTML file, for sharing after a demo: headings, sentences, tables and
plotly figures with plotly.js inlined once, so the file opens offline in any browser and nothing is fetched.

Build a list of sections (`Text`, `Table`, `Figure`) beside the page's own output, then call `download_button`.
"""

from __future__ import annotations

import datetime as dt
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
import streamlit as st


@dataclass(frozen=True)
class Text:
    markdown: str  # the page's own sentence(s): **bold**, `code`, "- " list lines are kept


@dataclass(frozen=True)
class Table:
    rows: Any  # a pandas DataFrame or a list of dicts
    caption: str = ""


@dataclass(frozen=True)
class Figure:
    figure: go.Figure
    caption: str = ""


@dataclass(frozen=True)
class Heading:
    text: str


Section = Text | Table | Figure | Heading

STYLE = """body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}table{border-collapse:collapse;font-size:13px;margin:.5em 0 1.5em}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f4f4f4}td:first-child,th:first-child
{text-align:left}code{background:#f4f4f4;padding:0 3px}.cap{color:#666;font-size:13px}footer{color:#888;
font-size:12px;margin-top:3em}"""


def _inline(text: str) -> str:
    out = html.escape(text)
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    out = re.sub(r"\*(.+?)\*", r"<i>\1</i>", out)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", out)


def _markdown(md: str) -> str:
    parts, items = [], []
    for line in md.splitlines():
        if line.lstrip().startswith("- "):
            items.append(f"<li>{_inline(line.lstrip()[2:])}</li>")
            continue
        if items:
            parts.append("<ul>" + "".join(items) + "</ul>")
            items = []
        if line.strip():
            parts.append(f"<p>{_inline(line)}</p>")
    if items:
        parts.append("<ul>" + "".join(items) + "</ul>")
    return "\n".join(parts)


def _table(rows: Any) -> str:
    records = rows.to_dict("records") if hasattr(rows, "to_dict") else list(rows)
    if not records:
        return "<p class=cap>(no rows)</p>"
    cols = list(dict.fromkeys(k for r in records for k in r))
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape('' if r.get(c) is None else str(r.get(c)))}</td>" for c in cols)
        + "</tr>"
        for r in records
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def build_html(title: str, sections: Sequence[Section], *, subtitle: str = "") -> str:
    """The report as one HTML string: plotly.js is inlined with the first figure and reused by the others."""
    parts, plotly_js = [], True
    for s in sections:
        if isinstance(s, Heading):
            parts.append(f"<h2>{html.escape(s.text)}</h2>")
        elif isinstance(s, Text):
            parts.append(_markdown(s.markdown))
        elif isinstance(s, Table):
            parts.append(_table(s.rows) + (f"<p class=cap>{_inline(s.caption)}</p>" if s.caption else ""))
        elif isinstance(s, Figure):
            parts.append(s.figure.to_html(full_html=False, include_plotlyjs="inline" if plotly_js else False))
            plotly_js = False
            if s.caption:
                parts.append(f"<p class=cap>{_inline(s.caption)}</p>")
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)} · Inference Lab</title>"
        f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        + (f"<p class=cap>{_inline(subtitle)}</p>" if subtitle else "")
        + "\n".join(parts)
        + f"<footer>Exported from Inference Lab on {when}. Every figure was measured on the machine that served "
        "the page, or computed from a formula; the page says which.</footer></body></html>"
    )


NOTHING_YET = "Nothing to export yet: run something on this page first."


def download_button(title: str, sections: Sequence[Section], key: str, *, subtitle: str = "") -> None:
    """A 'Download report (HTML)' button for this page's results; disabled with a reason when there are none."""
    has_results = any(not isinstance(s, Heading) for s in sections)
    name = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") + "-report.html"
    sections = list(sections)

    def make() -> (
        bytes
    ):  # built on click only: plotly.js inlined is ~4 MB, too much to rebuild on every rerun
        return build_html(title, sections, subtitle=subtitle).encode("utf-8")

    st.download_button(
        "Download report (HTML)",
        make if has_results else b"",
        file_name=name,
        mime="text/html",
        key=key,
        icon=":material/download:",
        disabled=not has_results,
        help="One self-contained file (plots included, works offline) to share after a demo."
        if has_results
        else NOTHING_YET,
    )
    if not has_results:  # a disabled button says why beside it, not only in a tooltip
        st.caption(f"Download report (HTML): {NOTHING_YET[0].lower()}{NOTHING_YET[1:]}")
