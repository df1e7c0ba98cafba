"""Plotly figures for the Memory & cost and Roofline pages. Builders take engine results, return figures;
they never compute a formula themselves (engine.calc does)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go

from engine.calc import format as fmt
from engine.calc.memory import MemoryEstimate
from engine.calc.paged import PagedComparison
from engine.calc.roofline import Roof, RooflineResult
from ui.roofline_labels import Frame, clear_note_place, markers_px, note_box, place_labels, wrap

COLORS = {"weights": "#4C78A8", "kv": "#F58518", "overhead": "#B279A2", "free": "#E6E6E6", "over": "#E45756"}
PHASE_SYMBOL = {"prefill": "circle", "decode": "diamond"}
PHASE_COLOR = {"prefill": "#1f77b4", "decode": "#d62728"}
ROOF_COLORS = ["#222222", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#bcbd22", "#7f7f7f"]
FONT = {"size": 14}
LEGEND_BELOW_BAR = dict(yanchor="top", y=-0.35, x=0, traceorder="normal")


def _style(fig: go.Figure, *, height: int, top: int = 30, legend: dict, **layout) -> go.Figure:
    """The calculator's charts' one style: narrow side margins, one font, a horizontal legend placed by the
    caller (above a chart, or below a bar)."""
    fig.update_layout(
        height=height,
        margin=dict(l=10, r=10, t=top, b=10),
        font=FONT,
        legend=dict(orientation="h", **legend),
        **layout,
    )
    return fig


def _add_gb_bar(fig: go.Figure, name: str, value: float, color: str, where: str = "per GPU") -> None:
    """One segment of a horizontal stacked bar of bytes per GPU (or in `where`), labelled in GB (10^9 B)."""
    fig.add_bar(
        y=[where],
        x=[value / 1e9],
        name=f"{name} {fmt.gb(value)}",
        orientation="h",
        marker_color=color,
        hovertemplate=f"{name}: %{{x:.2f}} GB<extra></extra>",
    )


def _stacked_gb(parts: Sequence[tuple[str, float, str]]) -> go.Figure:
    fig = go.Figure()
    for name, value, color in parts:
        _add_gb_bar(fig, name, value, color)
    return fig


def _gpu_line(fig: go.Figure, gpu_bytes: float, text: str) -> None:
    """A dashed line at the GPU's memory, its label above the plot (ending at the line), never across the bar."""
    fig.add_vline(x=gpu_bytes / 1e9, line_dash="dash", line_color="#424242")
    fig.add_annotation(
        x=gpu_bytes / 1e9, y=1, xref="x", yref="paper", yanchor="bottom", xanchor="right", text=text,
        showarrow=False, font=dict(size=12, color="#424242"),
    )  # fmt: skip


def serving_bar(sm) -> go.Figure:
    """One GPU's memory as vLLM/SGLang allocates it: weights, activations, runtime, KV cache, and the headroom it
    leaves (1 - utilisation)."""
    parts = [
        ("weights", sm.weights_bytes, COLORS["weights"]),
        ("activations", sm.activation_bytes, COLORS["overhead"]),
        ("runtime", sm.non_torch_bytes, "#9e9e9e"),
        ("KV cache", max(sm.kv_bytes, 0.0), COLORS["kv"]),
        ("kept free", sm.total_bytes - sm.budget_bytes, COLORS["free"]),
    ]
    fig = _stacked_gb(parts)
    # the axis reaches past the GPU when the parts outgrow it (a 70B on one GPU), and a line marks the GPU's end
    stacked = sum(max(0.0, v) for _, v, _ in parts[:4]) + max(0.0, parts[4][1])
    _gpu_line(fig, sm.total_bytes, f"the GPU: {fmt.gb(sm.total_bytes)}")
    return _style(
        fig,
        height=240,
        top=30,  # room for the GPU line's label
        legend=LEGEND_BELOW_BAR,
        barmode="stack",
        xaxis=dict(ticksuffix=" GB", range=[0, max(sm.total_bytes, stacked) / 1e9 * 1.02]),
    )


def memory_bar(m: MemoryEstimate, *, cpu: bool = False) -> go.Figure:
    """One stacked bar per GPU: weights, KV cache, overhead, and the free memory (or the overflow). `cpu`: this
    machine's CPU, whose memory is its RAM, named so (not a GPU's)."""
    where = "in RAM" if cpu else "per GPU"
    fig = go.Figure()
    for name, value, color in (
        ("weights", m.weights_bytes / m.n_gpus, COLORS["weights"]),
        ("KV cache", m.kv_cache_bytes / m.n_gpus, COLORS["kv"]),
        ("overhead", m.overhead_bytes / m.n_gpus, COLORS["overhead"]),
    ):
        _add_gb_bar(fig, name, value, color, where)
    spare = m.gpu_memory_bytes - m.per_gpu_bytes
    if spare >= 0:
        _add_gb_bar(fig, "free", spare, COLORS["free"], where)
    label = "this machine's RAM" if cpu else "GPU memory"
    _gpu_line(fig, m.gpu_memory_bytes, f"{label} {fmt.gb(m.gpu_memory_bytes)}")
    return _style(
        fig,
        height=230,
        top=40,
        legend=LEGEND_BELOW_BAR,
        barmode="stack",
        xaxis=dict(ticksuffix=" GB"),  # units on the ticks: no axis title for the legend to collide with
        showlegend=True,
    )


def paged_chart(p: PagedComparison) -> go.Figure:
    """Per sequence, by output length: static reservation vs paged reservation vs bytes actually used."""
    x = [str(r.output_tokens) for r in p.rows]
    fig = go.Figure()
    fig.add_bar(
        x=x,
        y=[r.static_reserved_bytes / 1e6 for r in p.rows],
        name="static: reserved",
        marker_color="#BBBBBB",
    )
    fig.add_bar(
        x=x,
        y=[r.paged_reserved_bytes / 1e6 for r in p.rows],
        name="paged: reserved (16-token blocks)",
        marker_color=COLORS["kv"],
    )
    fig.add_scatter(
        x=x,
        y=[r.used_bytes / 1e6 for r in p.rows],
        name="used",
        mode="markers+lines",
        marker=dict(color="black", size=8),
    )
    return _style(
        fig,
        height=330,
        legend=dict(y=1.15),
        barmode="group",
        xaxis_title="output tokens of the sequence",
        yaxis_title="KV cache per sequence (MB)",
    )


def _roof_xy(roof: Roof, x_min: float, x_max: float) -> tuple[list[float], list[float]]:
    xs = [x_min, roof.ridge, x_max] if x_min < roof.ridge < x_max else [x_min, x_max]
    return xs, [roof.attainable_flops_per_s(x) for x in xs]


SHORT = {
    "Q projection": "Q",
    "K projection": "K",
    "V projection": "V",
    "output projection": "out",
    "MLP gate": "gate",
    "MLP up": "up",
    "MLP down": "down",
    "lm_head": "lm_head",
    "QK^T": "QK^T",
    "softmax": "softmax",
    "attn x V": "attn×V",
}
CLUSTER_DECADES = 0.12  # operators closer than this in log10(intensity) would overlap on the chart


def _cluster(result: RooflineResult) -> list[dict]:
    """Operators at (nearly) the same intensity sit on the same spot of the roof; merge them into one
    labelled point so nothing overlaps into a blur (the hover lists each operator)."""
    ordered = sorted(result.operators, key=lambda p: p.intensity)
    groups: list[list] = []
    for p in ordered:
        if groups and math.log10(p.intensity) - math.log10(groups[-1][0].intensity) < CLUSTER_DECADES:
            groups[-1].append(p)
        else:
            groups.append([p])
    points = []
    for ops in groups:
        lead = max(ops, key=lambda p: p.share_of_time)
        hover = "<br>".join(
            f"<b>{p.name}</b>: {fmt.flops(p.flops)}, {fmt.gb(p.bytes)}, I={p.intensity:.3g} ops/B, {p.bound}-bound, "
            f"attainable {fmt.flops(p.attainable_flops_per_s, 'FLOP/s')}, {fmt.seconds(p.attainable_s)}"
            for p in ops
        )
        points.append(
            {
                "x": lead.intensity,
                "y": lead.attainable_flops_per_s,
                "label": " ".join(SHORT.get(p.name, p.name) for p in ops),
                "hover": hover,
                "share": sum(p.share_of_time for p in ops),
            }
        )
    return points


def roofline_figure(
    roofs: Sequence[Roof],
    results: Sequence[RooflineResult],
    *,
    measured: Sequence[dict] = (),
    machine_roof: Roof | None = None,
    ridge_note: str = "",
) -> go.Figure:
    """Log-log roofline: each roof as a line with its ridge marked, operator points per phase (size = share
    of the phase's time) labelled where nothing else is drawn (ui.roofline_labels), and measured runs on this
    machine's roof."""
    xs = [p.intensity for r in results for p in r.operators] + [m["intensity"] for m in measured]
    x_min = 10 ** math.floor(math.log10(max(1e-3, min([*xs, 0.1])) / 2))
    x_max = 10 ** math.ceil(math.log10(max(xs + [r.ridge for r in roofs] + [1e3]) * 3))
    fig = go.Figure()
    all_roofs = list(roofs) + ([machine_roof] if machine_roof else [])
    lines = [_roof_xy(roof, x_min, x_max) for roof in all_roofs]
    for i, (roof, (x, y)) in enumerate(zip(all_roofs, lines, strict=True)):
        color = ROOF_COLORS[i % len(ROOF_COLORS)] if roof is not machine_roof else "#ff7f0e"
        fig.add_scatter(
            x=x,
            y=y,
            mode="lines",
            name=f"{roof.label}: ridge {fmt.ridge(roof.ridge)}",
            line=dict(color=color, width=3 if i == 0 else 2, dash="solid" if i == 0 else "dot"),
            hovertemplate=f"{roof.label}<br>I=%{{x:.3g}} ops/B<br>attainable %{{y:.3s}}FLOP/s<extra></extra>",
        )
    clusters = {r.phase: _cluster(r) for r in results}
    for r in results:
        pts = clusters[r.phase]
        fig.add_scatter(
            x=[p["x"] for p in pts],
            y=[p["y"] for p in pts],
            mode="markers",  # labels are annotations with leader lines, placed where nothing else is drawn
            name=f"{r.phase} operators",
            marker=dict(
                symbol=PHASE_SYMBOL[r.phase],
                color=PHASE_COLOR[r.phase],
                line=dict(color="white", width=1),
                size=[10 + 30 * math.sqrt(p["share"]) for p in pts],
                opacity=0.85,
            ),
            customdata=[p["hover"] for p in pts],
            hovertemplate=f"<b>{r.phase}</b>, s={r.seq_len}, b={r.batch}, {r.dtype}<br>%{{customdata}}<extra></extra>",
        )
    if measured:
        fig.add_scatter(
            x=[m["intensity"] for m in measured],
            y=[m["flops_per_s"] for m in measured],
            mode="markers",
            name="measured runs (this machine)",
            marker=dict(symbol="star", size=16, color="#ff7f0e", line=dict(color="black", width=1)),
            customdata=[m["hover"] for m in measured],
            hovertemplate="%{customdata}<extra></extra>",
        )
    ys = [v for _, y in lines for v in y] + [v for t in fig.data for v in t.y]
    x_range = [math.log10(x_min), math.log10(x_max)]
    # headroom above the highest roof: labels of operators on the flat roof go there
    y_range = [math.log10(min(ys)) - 0.15, math.log10(max(ys)) + 1.2]
    notes = []
    if roofs:
        roof = roofs[0]
        fig.add_vline(x=roof.ridge, line_dash="dash", line_color=ROOF_COLORS[0], opacity=0.5)
        # the datasheet line wrapped as wide as the first: a narrower note leaves room for the decode labels
        note = f"<b>ridge {fmt.ridge(roof.ridge)} ops/byte</b>" + "".join(
            f"<br>{s}" for s in (wrap(ridge_note, 22) if ridge_note else [])
        )
        plain = note.replace("<b>", "").replace("</b>", "").split("<br>")
        frame = Frame(x_range, y_range)
        # peak/3000 first: a band left of the ridge with no operator (memory-bound decode sits just under the roof);
        # then heights half a decade apart on either side, for a chart whose measured stars sit there
        floor = 10 ** (y_range[0] + 0.1 * (y_range[1] - y_range[0]))
        decades = (3.5, 4.0, 3.0, 4.5, 2.5, 5.0, 2.0, 5.5, 1.5, 6.0)
        heights = [max(roof.peak_flops_per_s / 10**d, floor) for d in decades]
        note_y, shift = clear_note_place(frame, roof.ridge, heights, plain, markers_px(fig, frame), lines)
        fig.add_annotation(
            x=math.log10(roof.ridge),
            y=math.log10(note_y),
            text=note,
            showarrow=True,
            arrowhead=2,
            ax=shift,
            ay=0,
            xanchor="right" if shift < 0 else "left",
            align="right" if shift < 0 else "left",
            font=dict(size=13),
            bgcolor="rgba(255,255,255,0.9)",
        )
        notes.append(note_box(frame, roof.ridge, note_y, plain, shift_px=shift))
    place_labels(
        fig,
        {phase: [p["label"] for p in pts] for phase, pts in clusters.items()},
        PHASE_COLOR,
        x_range=x_range,
        y_range=y_range,
        roofs=lines,
        notes=notes,
    )
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOPs per byte moved)", range=x_range)
    fig.update_yaxes(type="log", title="attainable performance (FLOP/s)", range=y_range)
    return _style(fig, height=640, legend=dict(x=0, y=-0.14, font=dict(size=12)))


def comparison_chart(rows: Sequence[dict]) -> go.Figure:
    """Measured versus predicted TPOT per shape (datasheet and calibrated, the calibrated bar with its interval),
    one group per shape, on a log axis: one slow shape (a run while the machine was busy) left the others' bars
    flat on a linear one. A shape not compared (busy, or no load recorded) is drawn grey and named in the legend."""
    x = [r["label"] for r in rows]
    fig = go.Figure()
    for compared, name, color in ((True, "measured", "black"), (False, "measured, not compared", "#bdbdbd")):
        if any(r.get("comparable", True) == compared for r in rows):
            fig.add_bar(
                x=x,
                y=[r["measured"] * 1e3 if r.get("comparable", True) == compared else None for r in rows],
                name=name,
                marker_color=color,
                offsetgroup="measured",  # one slot per shape, whichever colour its bar is
            )
    fig.add_bar(
        x=x,
        y=[r["datasheet"] * 1e3 for r in rows],
        name="the measured roofs' bound (no per-step cost)",
        marker_color="#9ecae1",
        offsetgroup="datasheet",
    )
    if any(r["calibrated"] is not None for r in rows):
        has = [r["calibrated"] is not None and r.get("interval") is not None for r in rows]
        fig.add_bar(
            x=x,
            y=[r["calibrated"] * 1e3 if r["calibrated"] is not None else None for r in rows],
            name="predicted (calibrated), with its interval",
            marker_color="#3182bd",
            offsetgroup="calibrated",
            error_y=dict(
                type="data",
                symmetric=False,
                array=[
                    (r["interval"][1] - r["calibrated"]) * 1e3 if h else 0
                    for r, h in zip(rows, has, strict=True)
                ],
                arrayminus=[
                    (r["calibrated"] - r["interval"][0]) * 1e3 if h else 0
                    for r, h in zip(rows, has, strict=True)
                ],
                color="#08306b",
            ),
        )
    return _style(
        fig,
        height=320,
        legend=dict(y=1.15),
        barmode="group",
        yaxis=dict(type="log", title="ms per output token (log)", tickvals=_log_ticks(rows)),
    )


def _log_ticks(rows: Sequence[dict]) -> list[float]:
    """1, 2, 5 x 10^k ms ticks over the chart's values (plotly's own log ticks read '2, 5, 100, 2, 5')."""
    vals = [
        v * 1e3
        for r in rows
        for v in (r["measured"], r["datasheet"], r["calibrated"], *(r.get("interval") or ()))
        if v is not None and math.isfinite(v) and v > 0
    ]
    if not vals:
        return []
    lo, hi = math.floor(math.log10(min(vals))), math.ceil(math.log10(max(vals)))
    return [m * 10.0**k for k in range(lo, hi + 1) for m in (1, 2, 5)]


def batch_curve(points: Sequence, fit_limit: int, *, priced: bool) -> go.Figure:
    """$/M output tokens (top) and time per output token (bottom) against batch size, log-2 x axis; points
    past the memory limit are hollow and grey, and the limit itself is a dashed line."""
    from plotly.subplots import make_subplots

    rows = 2 if priced else 1
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    fits = [p for p in points if p.fits]
    over = [p for p in points if not p.fits]
    series = [("decode step (ms)", lambda p: p.decode_s_per_token * 1e3, rows)]
    if priced:
        series.insert(0, ("$ per million output tokens", lambda p: p.usd_per_million_tokens, 1))
    for title, y, row in series:
        for group, name, color, symbol in (
            (fits, "fits", "#4C78A8", "circle"),
            (over, "does not fit", "#AAAAAA", "circle-open"),
        ):
            if group:
                fig.add_scatter(
                    x=[p.batch for p in group],
                    y=[y(p) for p in group],
                    mode="lines+markers",
                    marker=dict(color=color, symbol=symbol, size=9),
                    line=dict(color=color, dash="solid" if group is fits else "dot"),
                    name=f"{title}: {name}",
                    showlegend=row == 1,
                    row=row,
                    col=1,
                )
        fig.update_yaxes(title_text=title, row=row, col=1)
    if 1 <= fit_limit < max((p.batch for p in points), default=0):
        # the limit inside the points drawn (past the last one it would stretch the axis beyond the sentence's);
        # a shape on a log axis takes the data value; an annotation takes its log10
        for row in range(1, rows + 1):
            fig.add_vline(x=fit_limit, line_dash="dash", line_color="#E45756", row=row, col=1)
        fig.add_annotation(
            x=math.log10(fit_limit),
            y=1,
            xref="x",
            yref="paper",
            text=f"fit limit: batch {fit_limit}",
            showarrow=False,
            xanchor="left",
            yanchor="bottom",
            font=dict(color="#E45756"),
        )
    fig.update_xaxes(type="log", dtick=math.log10(2))
    fig.update_xaxes(title_text="batch (concurrent sequences)", row=rows, col=1)
    return _style(fig, height=460 if priced else 300, top=60, legend=dict(y=1.12, x=0))


def batch_sentence(points: Sequence, fit_limit: int, where: str, priced: bool) -> str:
    """The sentence under the cost curve, from the same points the chart draws: what batching buys while the
    cache fits, and which points are hollow (priced as if they fitted)."""
    fitting = [p for p in points if p.fits]
    over = [p for p in points if not p.fits]
    if not fitting:
        return f"Not even batch 1 fits on {where}: every point is priced as if it did (hollow)."
    cheapest = min(
        fitting, key=lambda p: p.usd_per_million_tokens if priced else p.decode_s_per_token / p.batch
    )
    first = fitting[0]
    text = (
        f"On {where}, batch {first.batch} → {cheapest.batch}: the decode step (a token's time with every user "
        f"decoding, the other users' prompts not counted) goes from {fmt.seconds(first.decode_s_per_token)} to "
        f"{fmt.seconds(cheapest.decode_s_per_token)}"
    )
    if priced:
        text += (
            f", and the price of a million output tokens from {fmt.usd(first.usd_per_million_tokens)} to "
            f"{fmt.usd(cheapest.usd_per_million_tokens)}"
        )
    if over:
        return text + (
            f". Past batch {fit_limit:,} the KV cache no longer fits: the hollow points (batch {over[0].batch:,} and "
            "up) are priced as if it did."
        )
    return text + f". Every batch drawn, up to {points[-1].batch:,}, fits (the limit is batch {fit_limit:,})."
