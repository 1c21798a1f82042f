"""Point labels that never overlap: measured text boxes placed greedily around their points.

Each label's box is measured with the figure's renderer, then tried at candidate offsets
around its point: eight directions next to the marker first, then rings of sixteen
directions at growing radii. A candidate must lie inside the axes and clear every label
placed before it, every obstacle (the legend, the data mark) and every marker. Among
those the cheapest wins: covering or crossing a leader line costs most, crossing an error
bar or frontier line less, and each ring outwards a little, so the first candidate that
touches nothing is taken at once. A label moved off the first ring gets a thin leader line to its point; one
with no valid candidate is dropped (the caller says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Sequence

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.text import Text

__all__ = ["Box", "LabelRequest", "PlacedLabel", "Segment", "boxes_overlap", "place_labels"]

Box = tuple[float, float, float, float]
"""A rectangle in display pixels: ``(x0, y0, x1, y1)``."""

Segment = tuple[tuple[float, float], tuple[float, float]]
"""A line segment in display pixels: ``((x0, y0), (x1, y1))``."""

GAP_PX = 2.0
PAD = 0.15
LEADER_COST = 2.0
LINE_COST = 0.3
RING_COST = 0.15
FIRST_RING = (45.0, 0.0, -45.0, 90.0, 135.0, 180.0, -135.0, -90.0)
OUTER_RING = FIRST_RING + (22.5, -22.5, 67.5, 112.5, 157.5, -157.5, -112.5, -67.5)


@dataclass(frozen=True)
class LabelRequest:
    """A label wanted next to a point.

    Attributes:
        index: The point's index (the label becomes element ``label-<index>``).
        text: The label.
        x: The point's x in data coordinates.
        y: The point's y in data coordinates.
        colour: Text colour.
    """

    index: int
    text: str
    x: float
    y: float
    colour: Any


@dataclass(frozen=True)
class PlacedLabel:
    """A label that found room.

    Attributes:
        request: What was asked for.
        box: Its box (text plus background) in display pixels.
        leader: Whether a leader line joins it to its point.
        artist: The text artist.
    """

    request: LabelRequest
    box: Box
    leader: bool
    artist: Text


def boxes_overlap(a: Box, b: Box, gap: float = 0.0) -> bool:
    """Tells whether two boxes overlap or come closer than ``gap``.

    Args:
        a: A box ``(x0, y0, x1, y1)``.
        b: Another box.
        gap: The distance they must keep.
    """
    return a[0] < b[2] + gap and b[0] < a[2] + gap and a[1] < b[3] + gap and b[1] < a[3] + gap


def _segment_crosses(p: tuple[float, float], q: tuple[float, float], box: Box) -> bool:
    """Liang–Barsky: whether the segment p–q passes through the box."""
    t0, t1 = 0.0, 1.0
    dx, dy = q[0] - p[0], q[1] - p[1]
    for step, room in ((-dx, p[0] - box[0]), (dx, box[2] - p[0]), (-dy, p[1] - box[1]), (dy, box[3] - p[1])):
        if step == 0:
            if room < 0:
                return False
            continue
        t = room / step
        if step < 0:
            t0 = max(t0, t)
        else:
            t1 = min(t1, t)
        if t0 > t1:
            return False
    return True


def _segments_cross(a: Segment, b: Segment) -> bool:
    def side(p, q, r):
        return (q[0] - p[0]) * (r[1] - p[1]) - (q[1] - p[1]) * (r[0] - p[0])

    return (side(*a, b[0]) * side(*a, b[1]) < 0) and (side(*b, a[0]) * side(*b, a[1]) < 0)


def _nearest(point: tuple[float, float], box: Box) -> tuple[float, float]:
    return min(max(point[0], box[0]), box[2]), min(max(point[1], box[1]), box[3])


def _candidates(point: tuple[float, float], width: float, height: float, first: float, last: float,
                step: float) -> Iterator[tuple[int, Box]]:
    radius, ring = first, 0
    while radius <= last:
        for degrees in FIRST_RING if ring == 0 else OUTER_RING:
            ux, uy = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
            square = 1.0 / max(abs(ux), abs(uy))
            cx = point[0] + radius * ux + width / 2 * ux * square
            cy = point[1] + radius * uy + height / 2 * uy * square
            yield ring, (cx - width / 2, cy - height / 2, cx + width / 2, cy + height / 2)
        radius += step
        ring += 1


def place_labels(ax: Axes, requests: Sequence[LabelRequest], *, obstacles: Sequence[Box] = (),
                 markers: Sequence[Box] = (), lines: Sequence[Segment] = (), marker_px: float = 4.0,
                 fontsize: float = 7.0,
                 max_radius_pt: float = 60.0) -> tuple[list[PlacedLabel], list[LabelRequest]]:
    """Adds the labels to the axes, in the order given, where each fits without overlap.

    The axes' limits and the figure's layout must be final: boxes are measured in display
    pixels with the figure canvas's renderer, and texts and leader lines are positioned
    in data coordinates.

    Args:
        ax: The axes.
        requests: The labels, most important first.
        obstacles: Boxes no label may overlap (e.g. the legend).
        markers: Boxes of the markers, which no label may cover either.
        lines: Segments (error bars, frontier lines) labels avoid crossing where they can, at
            a lower cost than markers.
        marker_px: A marker's radius in display pixels (the first ring clears it).
        fontsize: Label font size in points.
        max_radius_pt: How far from its point a label may go, in points.

    Returns:
        ``(placed, dropped)``: the labels drawn and those that found no room.
    """
    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    inside = (frame.x0 + 1.0, frame.y0 + 1.0, frame.x1 - 1.0, frame.y1 - 1.0)
    pad = PAD * renderer.points_to_pixels(fontsize)
    to_data = ax.transData.inverted()
    placed: list[PlacedLabel] = []
    leaders: list[tuple[tuple[float, float], tuple[float, float]]] = []
    dropped: list[LabelRequest] = []
    for request in requests:
        point = tuple(ax.transData.transform((request.x, request.y)))
        text = ax.text(request.x, request.y, request.text, fontsize=fontsize, color=request.colour, ha="center",
                       va="center", parse_math=False, zorder=6,
                       bbox={"boxstyle": f"square,pad={PAD}", "facecolor": "white", "edgecolor": "none",
                             "alpha": 0.85})
        extent = text.get_window_extent(renderer)
        width, height = extent.width + 2 * pad, extent.height + 2 * pad
        best: tuple[float, int, Box] | None = None
        for ring, box in _candidates(point, width, height, marker_px + GAP_PX,
                                     renderer.points_to_pixels(max_radius_pt), max(0.8 * height, 3.0)):
            if not (box[0] >= inside[0] and box[1] >= inside[1] and box[2] <= inside[2] and box[3] <= inside[3]):
                continue
            if any(boxes_overlap(box, other.box, GAP_PX) for other in placed) or any(
                    boxes_overlap(box, obstacle, GAP_PX) for obstacle in obstacles) or any(
                    boxes_overlap(box, marker) for marker in markers):
                continue
            cost = LEADER_COST * sum(_segment_crosses(a, b, box) for a, b in leaders)
            cost += LINE_COST * sum(_segment_crosses(a, b, box) for a, b in lines)
            if ring:
                end = _nearest(point, box)
                cost += LEADER_COST * sum(_segment_crosses(point, end, other.box) for other in placed)
                cost += LEADER_COST * sum(_segments_cross((point, end), leader) for leader in leaders)
            total = cost + RING_COST * ring
            if best is None or total < best[0]:
                best = (total, ring, box)
            if cost == 0:
                break
        if best is None:
            text.remove()
            dropped.append(request)
            continue
        _, ring, box = best
        text.set_position(to_data.transform(((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)))
        text.set_gid(f"label-{request.index}")
        if ring:
            end = _nearest(point, box)
            leaders.append((point, end))
            xs, ys = zip(*to_data.transform([point, end]))
            ax.plot(xs, ys, color=request.colour, linewidth=0.6, alpha=0.8, zorder=3.5,
                    gid=f"leader-{request.index}")
        placed.append(PlacedLabel(request, box, bool(ring), text))
    return placed, dropped
