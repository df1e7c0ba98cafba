"""The Serving page's sweep results: its table and CSV, the latency, throughput and per-user charts, the TTFT
breakdown, failed requests in words, and the knee-versus-calculator sentence (built from the numbers it sits
beside)."""

from __future__ import annotations

import csv
import io

import plotly.graph_objects as go

from engine.calc.capacity import CapacityPrediction
from engine.loadgen.sweep import SweepResult, at_level
from ui.charts import LEGEND_ABOVE, Series, two_panels


def level_unit(mode: str) -> str:
    return "requests/s" if mode == "poisson" else "users"


def table_rows(sweep: SweepResult) -> list[dict]:
    unit = level_unit(sweep.spec.mode)
    rows = []
    for p in sweep.points:
        rows.append(
            {  # what the answer rests on first (the SLO's verdict and its percentiles): in view at 1280 px
                unit: p.level,
                "meets SLO": p.meets_slo,
                "SLO attainment": round(p.slo_attainment, 3),
                **{f"TTFT p{q} (s)": round(getattr(p.ttft_s, f"p{q}"), 3) for q in (50, 90)},
                **{f"TPOT p{q} (ms)": round(getattr(p.tpot_s, f"p{q}") * 1e3, 1) for q in (50, 90)},
                "output tok/s": round(p.output_tokens_per_s, 1),
                "goodput (req/s)": round(p.goodput_rps, 3),
                "tok/s per user": round(p.per_user_tokens_per_s, 1),
                "TTFT p99 (s)": round(p.ttft_s.p99, 3),
                "TPOT p99 (ms)": round(p.tpot_s.p99 * 1e3, 1),
                "ITL p50 (ms)": round(p.itl_s.p50 * 1e3, 1),
                **{f"E2E p{q} (s)": round(getattr(p.e2e_s, f"p{q}"), 3) for q in (50, 90, 99)},
                "req/s": round(p.request_throughput, 3),
                "completed": p.completed,
                "errors": sum(p.errors.values()),
            }
        )
    return rows


def table_parts(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """The sweep's table as three narrower ones, each led by the level column, so each fits the page's column at
    1280 px (the twenty columns of one table scrolled sideways past the eighth); every column is in one of them and
    the CSV keeps the whole table. (caption, rows) each."""
    if not rows:
        return []
    level, *rest = list(rows[0])
    verdict = [
        c for c in rest if "SLO" in c or (c.startswith(("TTFT", "TPOT")) and (" p50" in c or " p90" in c))
    ]
    volume = [c for c in rest if c not in verdict and ("/s" in c or c in ("completed", "errors"))]
    tails = [c for c in rest if c not in verdict + volume]
    return [
        (caption, [{level: r[level], **{c: r[c] for c in cols}} for r in rows])
        for caption, cols in (
            ("The SLO's verdict and the percentiles it rests on", verdict),
            ("Throughput and counts", volume),
            ("Tails, inter-token latency and end to end", tails),
        )
    ]


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return buf.getvalue()


def latency_figure(sweep: SweepResult) -> go.Figure:
    pts = sweep.points
    series = []
    for q, dash in ((50, "solid"), (90, "dash"), (99, "dot")):
        series.append(Series([getattr(p.ttft_s, f"p{q}") for p in pts], f"TTFT p{q}", "#3a7ca5", dash=dash))
        series.append(
            Series([getattr(p.tpot_s, f"p{q}") * 1e3 for p in pts], f"TPOT p{q}", "#e4572e", col=2, dash=dash)
        )
    fig = two_panels([p.level for p in pts], ("TTFT (s)", "TPOT (ms)"), series, height=360)
    if sweep.slo.ttft_s:
        fig.add_hline(
            y=sweep.slo.ttft_s, line_color="grey", line_dash="dot", annotation_text="SLO", row=1, col=1
        )
    if sweep.slo.tpot_s:
        fig.add_hline(
            y=sweep.slo.tpot_s * 1e3, line_color="grey", line_dash="dot", annotation_text="SLO", row=1, col=2
        )
    fig.update_xaxes(title=level_unit(sweep.spec.mode))
    return fig


def throughput_figure(sweep: SweepResult) -> go.Figure:
    pts = sweep.points
    fig = two_panels(
        [p.level for p in pts],
        ("Output tokens/s (all users)", "Requests/s: completed and good"),
        [
            Series([p.output_tokens_per_s for p in pts], "output tok/s", "#3a7ca5"),
            Series([p.request_throughput for p in pts], "completed req/s", "#888", col=2),
            Series([p.goodput_rps for p in pts], "goodput (within SLOs)", "#2a9d8f", col=2),
        ],
    )
    fig.update_xaxes(title=level_unit(sweep.spec.mode))
    return fig


def per_user_figure(sweep: SweepResult) -> go.Figure:
    """The serving trade-off curve: what one user sees against what the deployment makes."""
    unit = level_unit(sweep.spec.mode)
    fig = go.Figure()
    fig.add_scatter(
        x=[p.output_tokens_per_s for p in sweep.points],
        y=[p.per_user_tokens_per_s for p in sweep.points],
        text=[at_level(p.level, unit) for p in sweep.points],
        mode="lines+markers+text",
        textposition="top center",
        line={"color": "#3a7ca5"},
        name=f"measured: one point per sweep level ({'concurrent users' if unit == 'users' else unit})",
    )
    if sweep.slo.tpot_s:
        fig.add_hline(
            y=1 / sweep.slo.tpot_s, line_color="grey", line_dash="dot", annotation_text="1 / TPOT SLO"
        )
    fig.update_layout(
        height=340,
        margin={"t": 30, "b": 10},
        xaxis_title="total output tokens/s",
        yaxis_title="tokens/s per user (median 1 / TPOT)",
        showlegend=True,
        legend=LEGEND_ABOVE,
    )
    return fig


def answer_sentence(
    sweep: SweepResult, tail: str = "Details, charts and the calculator's prediction below.", busy: str = ""
) -> str:
    """The page's question answered first, from the sweep's knee: how many users (or what rate) met the SLOs.
    `busy`: the sweep's load note (ui.pace.load_note), non-empty when it was measured on a busy machine; the
    headline then says so too (it sat in the results section alone, under a headline with no caveat)."""
    unit = level_unit(sweep.spec.mode)
    objectives = sweep.slo.words() or "no objectives set"
    share = f"{sweep.slo.min_attainment:.0%} of requests"
    measured = (
        "measured on a busy machine, where other programs took CPU from the server: a quiet machine may hold more"
        if busy
        else "measured"
    )
    if sweep.knee is None:
        return (
            f"**Answer ({measured}): no level of this sweep held {objectives} for {share}.** Lower the load or "
            "relax the objectives to find how much it holds."
        )
    levels = sorted(p.level for p in sweep.points)
    above = [x for x in levels if x > sweep.knee]
    beyond = (
        f"; at {at_level(above[0], unit)} it missed them"
        if above
        else "; the sweep went no higher, so it may hold more"
    )
    return (
        f"**Answer ({measured}): this deployment held {at_level(sweep.knee, unit)} within {objectives} for "
        f"{share}**{beyond}. {tail}"
    )


def knee_sentence(
    knee: float | None, unit: str, predicted: CapacityPrediction | None, stopped_early: bool
) -> str:
    """Words from the numbers beside them: the measured knee, and the calculator's prediction against it."""
    if knee is None:
        measured = "No level of this sweep met the SLOs: lower the load (or relax the SLOs) to find the knee."
    else:
        more = " (the sweep stopped at the first level that missed them)" if stopped_early else ""
        measured = f"Measured knee: **{at_level(knee, unit)}** is the highest level that met the SLOs{more}."
    if predicted is None:
        return measured
    p = predicted.max_users
    if knee is None:
        verdict = f"The calculator predicts {p} users within the TPOT objective."
    elif p > knee:
        verdict = (
            f"The calculator predicts **{p} users** (limited by {predicted.limited_by}): more than measured, "
            "so the memory-bound rule is optimistic here (compute, prefill interference or the TTFT objective "
            "bind first)."
        )
    elif p < knee:
        verdict = (
            f"The calculator predicts **{p} users** (limited by {predicted.limited_by}): fewer than measured, "
            "so the rule is pessimistic here."
        )
    else:
        verdict = f"The calculator predicts **{p} users** (limited by {predicted.limited_by}), the same as measured."
    return f"{measured} {verdict}"


PARTS = (
    ("queue_s", "queue", "#e4a72e"),
    ("prefill_s", "prefill", "#7b4ea3"),
    ("transport_s", "transport", "#3a7ca5"),
)


BREAKDOWN_CAPTION = (
    "Means over each level's requests, in ms: the client's TTFT and its queue, prefill and transport (joined: the "
    "requests matched to the server's timings by id), then the server's own means from its /metrics."
)


def breakdown_rows(sweep: SweepResult) -> list[dict]:
    """Per level: mean client TTFT split into the server's queue and prefill and the transport, how many requests
    were joined by id, and the server's own run means from its /metrics where it exports them. All in ms, said by
    BREAKDOWN_CAPTION, not in each header: nine headers with units scrolled sideways at 1280 px (945 px)."""
    unit = level_unit(sweep.spec.mode)
    rows = []
    for p in sweep.points:
        b, s = p.ttft_breakdown, p.server
        row: dict = {unit: p.level}
        if b is not None:
            row["joined"] = f"{b.joined}/{b.completed}"
            row["TTFT"] = round(b.ttft_s * 1e3, 1)
            for key, name, _ in PARTS:
                row[name] = round(getattr(b, key) * 1e3, 1)
        if s is not None:
            for key, name in (
                ("ttft_s", "server TTFT"),
                ("queue_s", "server queue"),
                ("decode_s", "server decode"),
            ):
                if key in s.means:
                    row[name] = round(s.means[key] * 1e3, 1)
        rows.append(row)
    return rows


def breakdown_figure(sweep: SweepResult) -> go.Figure | None:
    """Stacked bars per level: queue + prefill + transport = mean client TTFT (None when nothing was joined)."""
    pts = [p for p in sweep.points if p.ttft_breakdown is not None]
    if not pts:
        return None
    fig = go.Figure()
    x = [f"{p.level:g}" for p in pts]
    for key, name, color in PARTS:
        fig.add_bar(x=x, y=[getattr(p.ttft_breakdown, key) * 1e3 for p in pts], name=name, marker_color=color)
    fig.update_layout(
        barmode="stack",
        height=320,
        margin={"t": 30, "b": 10},
        xaxis_title=level_unit(sweep.spec.mode),
        # one bar per level measured: as categories, or plotly reads "1", "4", "8" as numbers and ticks 1, 4, 7
        xaxis_type="category",
        yaxis_title="mean TTFT (ms)",
        legend=LEGEND_ABOVE,
    )
    return fig


def breakdown_sentence(sweep: SweepResult) -> str:
    """Which part of the TTFT grew most from the lowest level to the highest, from the numbers above."""
    pts = [p for p in sweep.points if p.ttft_breakdown is not None]
    if not pts:
        return ""
    hi = pts[-1].ttft_breakdown
    assert hi is not None
    share = {name: getattr(hi, key) / hi.ttft_s for key, name, _ in PARTS if hi.ttft_s > 0}
    if not share:
        return ""
    top = max(share, key=lambda k: share[k])
    unit = level_unit(sweep.spec.mode)
    return (
        f"At {at_level(pts[-1].level, unit)} the largest part of the mean TTFT ({hi.ttft_s * 1e3:.1f} ms) is "
        f"**{top}**: {share[top]:.0%} of it."
    )


FAILURE_WORDS = {
    "connect": "could not connect",
    "timeout": "timed out",
    "http_429": "refused as too busy (HTTP 429)",
    "http_4xx": "rejected (HTTP 4xx)",
    "http_5xx": "failed on the server (HTTP 5xx)",
    "stream_error": "broke off mid-stream",
    "empty": "ended without any content",
}


def failed_requests(errors: dict[str, int]) -> str:
    """Failed requests by kind, in words ("8 could not connect, 1 timed out")."""
    return ", ".join(
        f"{n} {FAILURE_WORDS.get(kind, kind.replace('_', ' '))}" for kind, n in sorted(errors.items())
    )
