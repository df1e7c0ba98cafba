"""Where the roofline's operator labels go.

Plotly prints a marker's text at a fixed side of the marker and never avoids a collision: at batch 512 the decode
and prefill projections meet at the ridge and their labels printed over each other, and at batch 1 the eleven
decode operators' one long label ran off the plot's left edge. Here each label is an annotation with a thin
leader line to its point, placed greedily where no other label, marker, roof line or the ridge note lies, and
inside the axes (text longer than LINE_CHARS wraps onto more lines).

The geometry is in pixels of the smallest plot area the page gives the chart (PLOT_W x PLOT_H, the right-hand
column of a 1280-pixel-wide window): on a wider screen the same data positions lie further apart, so labels clear
at this size stay clear at any larger one. `label_boxes` reads the boxes back from a figure (the tests use it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

PLOT_W, PLOT_H = (
    480.0,
    410.0,
)  # px of the plot area (axes only): 486 x 418 measured at 1280 x 900, sidebar open
CHAR_W, LINE_H, PAD = 7.2, 16.0, 3.0  # a 12-px label: average glyph width, line height, box padding (px)
LINE_CHARS = 20  # a longer label wraps
LABEL_NAME = "operator label"  # the annotation's name: "operator label · decode"
# where a phase's label goes first: decode points sit on the sloped roof, with free space above-left of it;
# prefill's heavy operators sit on the flat roof, with free space below-right
PREFERRED_DEG = {"decode": 135.0, "prefill": -45.0}
DISTANCES = tuple(float(d) for d in range(14, 320, 12))  # px from the marker's edge to the label
ANGLES = tuple(float(a) for a in range(-180, 180, 10))


@dataclass(frozen=True)
class Box:
    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: Box, gap: float = 2.0) -> bool:
        return not (
            self.x1 + gap <= other.x0
            or other.x1 + gap <= self.x0
            or self.y1 + gap <= other.y0
            or other.y1 + gap <= self.y0
        )

    def contains(self, x: float, y: float, pad: float = 0.0) -> bool:
        return self.x0 - pad <= x <= self.x1 + pad and self.y0 - pad <= y <= self.y1 + pad

    def inside(self, w: float = PLOT_W, h: float = PLOT_H) -> bool:
        return self.x0 >= 0 and self.y0 >= 0 and self.x1 <= w and self.y1 <= h


class Frame:
    """log10 data coordinates <-> pixels of the plot area (y grows upwards, as on the chart)."""

    def __init__(
        self, x_range: Sequence[float], y_range: Sequence[float], w: float = PLOT_W, h: float = PLOT_H
    ):
        self.x0, self.x1 = x_range
        self.y0, self.y1 = y_range
        self.w, self.h = w, h

    def px(self, value: float) -> float:
        return (math.log10(value) - self.x0) / (self.x1 - self.x0) * self.w

    def py(self, value: float) -> float:
        return (math.log10(value) - self.y0) / (self.y1 - self.y0) * self.h

    def data_x(self, px: float) -> float:
        """log10 of the x at this pixel (annotations on a log axis take log10)."""
        return self.x0 + px / self.w * (self.x1 - self.x0)

    def data_y(self, py: float) -> float:
        return self.y0 + py / self.h * (self.y1 - self.y0)


def wrap(label: str, width: int = LINE_CHARS) -> list[str]:
    lines: list[str] = []
    for word in label.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines or [""]


def text_size(lines: Sequence[str]) -> tuple[float, float]:
    """The box a label's lines take, in pixels."""
    return max(len(s) for s in lines) * CHAR_W + 2 * PAD, len(lines) * LINE_H + 2 * PAD


def _box_at(cx: float, cy: float, w: float, h: float) -> Box:
    return Box(cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)


def _segment_points(
    ax: float, ay: float, bx: float, by: float, step: float = 4.0
) -> list[tuple[float, float]]:
    n = max(2, int(math.hypot(bx - ax, by - ay) / step))
    return [(ax + (bx - ax) * i / n, ay + (by - ay) * i / n) for i in range(n + 1)]


@dataclass
class _Scene:
    """What a new label must keep clear of: markers (circles), lines (sampled points), boxes (labels, notes)."""

    markers: list[tuple[float, float, float]]
    line_points: list[tuple[float, float]]
    boxes: list[Box]
    leaders: list[list[tuple[float, float]]]

    def clear(self, box: Box, leader: list[tuple[float, float]], own: int, *, lines: bool) -> bool:
        if not box.inside():
            return False
        if any(box.overlaps(b) for b in self.boxes):
            return False
        ox, oy, orad = self.markers[own]
        for mx, my, r in self.markers:
            # the box keeps off every marker; its leader keeps off every marker but its own and those its own
            # marker overlaps (a leader cannot leave a marker that sits on another without crossing it)
            if _circle_meets_box(mx, my, r, box):
                return False
            if math.hypot(mx - ox, my - oy) < r + orad:
                continue
            if any(math.hypot(x - mx, y - my) < r for x, y in leader[1:-1]):
                return False
        if any(b.contains(x, y) for b in self.boxes for x, y in leader):
            return False
        if any(box.contains(x, y, 1.0) for pts in self.leaders for x, y in pts):
            return False
        return not lines or not any(box.contains(x, y, 1.0) for x, y in self.line_points)


def _circle_meets_box(cx: float, cy: float, r: float, box: Box) -> bool:
    nx, ny = min(max(cx, box.x0), box.x1), min(max(cy, box.y0), box.y1)
    return math.hypot(cx - nx, cy - ny) < r + 1.0


def _candidates(px: float, py: float, r: float, w: float, h: float, phase: str):
    """Label centres around a point, best first: near, and towards the phase's free side."""
    pref = PREFERRED_DEG.get(phase, 90.0)
    out = []
    for d in DISTANCES:
        for a in ANGLES:
            turn = abs((a - pref + 180) % 360 - 180)
            rad = math.radians(a)
            dx, dy = math.cos(rad), math.sin(rad)
            # the box's nearest edge sits d px beyond the marker's edge, in direction a
            cx = px + dx * (r + d + w / 2 * abs(dx))
            cy = py + dy * (r + d + h / 2 * abs(dy))
            out.append((d + 0.7 * turn, cx, cy))
    out.sort(key=lambda c: c[0])
    return [(cx, cy) for _, cx, cy in out]


def _marker_sizes(trace) -> list[float]:
    size = trace.marker.size if trace.marker is not None else None
    if size is None:
        return [6.0] * len(trace.x)
    if isinstance(size, (int, float)):
        return [float(size)] * len(trace.x)
    return [float(s) for s in size]


def place_labels(
    fig: go.Figure,
    labels: dict[str, Sequence[str]],
    colors: dict[str, str],
    *,
    x_range: Sequence[float],
    y_range: Sequence[float],
    roofs: Iterable[tuple[list[float], list[float]]],
    notes: Iterable[Box] = (),
) -> go.Figure:
    """Add one annotation per operator point of the traces '<phase> operators' (labels[phase][i] is point i's
    text), each with a leader line to its point, where nothing else is drawn."""
    frame = Frame(x_range, y_range)
    markers, points = markers_px(fig, frame), []
    k = 0  # the index of each trace's first marker in `markers`
    for t in _marker_traces(fig):
        phase = str(t.name).removesuffix(" operators")
        if phase in labels:
            points += [(k + i, phase, labels[phase][i]) for i in range(len(t.x))]
        k += len(t.x)
    line_points = _line_points(frame, roofs)
    labels_to_place = _merge_touching(points, markers)
    # greedy placement depends on who chooses first: the biggest markers (a phase's heavy operators), then left
    # to right, then right to left; the first order that places every label in free space wins
    orders = (
        lambda p: -markers[p[0]][2],
        lambda p: markers[p[0]][0],
        lambda p: -markers[p[0]][0],
    )
    best: tuple[int, list] | None = None
    for order in orders:
        scene = _Scene(markers, line_points, list(notes), [])
        forced, placed = 0, []
        for own, phase, text in sorted(labels_to_place, key=order):
            spot, ok = _spot(scene, own, phase, wrap(text))
            forced += not ok
            placed.append((own, phase, wrap(text), spot))
        if best is None or forced < best[0]:
            best = (forced, placed)
        if forced == 0:
            break
    assert best is not None
    for own, phase, lines, (cx, cy) in best[1]:
        mx, my, r = markers[own]
        fig.add_annotation(
            name=f"{LABEL_NAME} · {phase}",
            text="<br>".join(lines),
            x=frame.data_x(mx),
            y=frame.data_y(my),
            ax=frame.data_x(cx),
            ay=frame.data_y(cy),
            axref="x",
            ayref="y",
            showarrow=True,
            arrowhead=0,
            arrowwidth=1,
            arrowcolor=colors[phase],
            standoff=r - 1.0,
            font=dict(size=12, color=colors[phase]),
            bgcolor="rgba(255,255,255,0.85)",
            borderpad=1,
        )
    return fig


def _spot(scene: _Scene, own: int, phase: str, lines: list[str]) -> tuple[tuple[float, float], bool]:
    """The best free centre for a label of these lines (and True), else the nearest inside the axes (False).
    Free: first keeping off the roof lines too, then crossing them if it must."""
    mx, my, r = scene.markers[own]
    w, h = text_size(lines)
    for avoid_lines in (True, False):
        for cx, cy in _candidates(mx, my, r, w, h, phase):
            box = _box_at(cx, cy, w, h)
            leader = _segment_points(mx, my, *_edge_towards(box, mx, my))
            if scene.clear(box, leader, own, lines=avoid_lines):
                scene.boxes.append(box)
                scene.leaders.append(leader)
                return (cx, cy), True
    cx, cy = next((c for c in _candidates(mx, my, r, w, h, phase) if _box_at(*c, w, h).inside()), (mx, my))
    scene.boxes.append(_box_at(cx, cy, w, h))
    return (cx, cy), False


def _merge_touching(points: list[tuple[int, str, str]], markers: list[tuple[float, float, float]]):
    """One label for a phase's markers that touch on screen (at batch 512 the projections' clusters sit a few
    pixels apart on the flat roof): its text joins theirs, its leader goes to the biggest."""
    groups: list[list[tuple[int, str, str]]] = []
    for p in sorted(points, key=lambda p: (p[1], markers[p[0]][0])):
        last = groups[-1][-1] if groups else None
        if last and last[1] == p[1] and _touch(markers[last[0]], markers[p[0]]):
            groups[-1].append(p)
        else:
            groups.append([p])
    return [(max(g, key=lambda p: markers[p[0]][2])[0], g[0][1], " ".join(p[2] for p in g)) for g in groups]


def _touch(a: tuple[float, float, float], b: tuple[float, float, float]) -> bool:
    return math.hypot(a[0] - b[0], a[1] - b[1]) < a[2] + b[2]


def _edge_towards(box: Box, x: float, y: float) -> tuple[float, float]:
    """Where a leader from (x, y) meets the box (its nearest point)."""
    return min(max(x, box.x0), box.x1), min(max(y, box.y0), box.y1)


def note_box(
    frame: Frame, x: float, y: float, lines: Sequence[str], *, shift_px: float, size: int = 13
) -> Box:
    """The box of a note at data (x, y) whose text ends shift_px left of that point (shift_px < 0: the text's right
    edge, the ridge note on the left) or starts shift_px right of it (shift_px > 0), arrow included, so labels keep
    off it."""
    w = max(len(s) for s in lines) * CHAR_W * size / 12 + 2 * PAD
    h = len(lines) * LINE_H * size / 12 + 2 * PAD
    px, cy = frame.px(x), frame.py(y)
    if shift_px < 0:
        return Box(px + shift_px - w, cy - h / 2, px, cy + h / 2)
    return Box(px, cy - h / 2, px + shift_px + w, cy + h / 2)


def _marker_traces(fig: go.Figure) -> list:
    """The traces that draw markers, in the figure's order."""
    return [
        t for t in fig.data if t.x is not None and t.y is not None and (not t.mode or "markers" in t.mode)
    ]


def markers_px(fig: go.Figure, frame: Frame) -> list[tuple[float, float, float]]:
    """Every marker of the figure as a circle (x, y, radius) in pixels of the plot area."""
    out = []
    for t in _marker_traces(fig):
        out += [
            (frame.px(x), frame.py(y), s / 2 + 1.0)
            for x, y, s in zip(t.x, t.y, _marker_sizes(t), strict=True)
        ]
    return out


def clear_note_place(
    frame: Frame,
    x: float,
    ys: Sequence[float],
    lines: Sequence[str],
    markers: Sequence[tuple[float, float, float]],
    roofs: Iterable[tuple[list[float], list[float]]] = (),
    *,
    shifts: Sequence[float] = (-60.0, 60.0),
    step_px: float = 8.0,
) -> tuple[float, float]:
    """(height, shift_px) of the note at x: the first of the preferred heights `ys` (data, best first), then every
    height of the plot `step_px` apart, on each side in `shifts` (left first), whose box and arrow cover no marker
    and no roof line; where none is clear, the fewest markers (each hidden marker a run the chart loses), then the
    least line. The preferred heights alone left the note across the sloped roof on the presenter's 1280-pixel
    screen (every one of them either crossed the roof or hid measured stars); the ridge note once sat on this
    machine's measured stars."""
    points = _line_points(frame, roofs)
    grid = [10 ** frame.data_y(py) for py in _frange(0.0, frame.h, step_px)]
    candidates = [(y, s) for s in shifts for y in ys] + [(y, s) for s in shifts for y in grid]

    def covered(place: tuple[float, float]) -> tuple[int, int]:
        box = note_box(frame, x, place[0], lines, shift_px=place[1])
        if not box.inside(frame.w, frame.h):
            return (len(markers) + 1, 0)
        hidden = sum(_circle_meets_box(mx, my, r, box) for mx, my, r in markers)
        return hidden, sum(box.contains(px, py, 1.0) for px, py in points)

    return min(candidates, key=covered)  # min keeps the first of equals: the preferred place


def _frange(start: float, stop: float, step: float) -> list[float]:
    return [start + i * step for i in range(int((stop - start) / step) + 1)]


def _line_points(frame: Frame, roofs: Iterable[tuple[list[float], list[float]]]) -> list[tuple[float, float]]:
    """The roof lines sampled every few pixels."""
    return [
        p
        for xs, ys in roofs
        for a, b in zip(zip(xs, ys, strict=True), list(zip(xs, ys, strict=True))[1:], strict=False)
        for p in _segment_points(frame.px(a[0]), frame.py(a[1]), frame.px(b[0]), frame.py(b[1]))
    ]


def label_boxes(fig: go.Figure | dict) -> list[tuple[str, Box, tuple[float, float]]]:
    """(name, box, point) of every operator label in a figure (a plotly figure or its JSON), in PLOT_W x
    PLOT_H pixels; plus, as a box each, any text a trace prints beside its markers (the old layout)."""
    spec = fig.to_plotly_json() if isinstance(fig, go.Figure) else fig
    layout = spec["layout"]
    frame = Frame(*(_axis_range(spec, axis) for axis in ("x", "y")))
    out = []
    for a in layout.get("annotations", []):
        if not str(a.get("name", "")).startswith(LABEL_NAME):
            continue
        w, h = text_size(str(a["text"]).split("<br>"))
        cx = (a["ax"] - frame.x0) / (frame.x1 - frame.x0) * frame.w
        cy = (a["ay"] - frame.y0) / (frame.y1 - frame.y0) * frame.h
        point = (
            (a["x"] - frame.x0) / (frame.x1 - frame.x0) * frame.w,
            (a["y"] - frame.y0) / (frame.y1 - frame.y0) * frame.h,
        )
        out.append((a["name"], _box_at(cx, cy, w, h), point))
    for t in spec["data"]:
        if "text" not in str(t.get("mode", "")) or not t.get("text"):
            continue
        for x, y, text in zip(t["x"], t["y"], t["text"], strict=True):
            w, h = text_size([str(text)])
            px, py = frame.px(x), frame.py(y)
            # plotly centres a 'top center'/'bottom center' text on its marker; the box is as wide as the text
            out.append((str(t.get("name")), _box_at(px, py + h, w, h), (px, py)))
    return out


def _axis_range(spec: dict, axis: str) -> list[float]:
    """The axis' log10 range as set, else the span of the data (what plotly's autorange shows, nearly)."""
    set_range = spec["layout"].get(f"{axis}axis", {}).get("range")
    if set_range:
        return list(set_range)
    values = [math.log10(v) for t in spec["data"] for v in t.get(axis) or () if v and v > 0]
    return [min(values), max(values)]
