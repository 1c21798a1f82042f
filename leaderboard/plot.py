"""The frontier plot of one board: SVG (and PNG) with a JSON sidecar of what it shows.

Each entry gets a colour and marker. A point is one configuration's mean over seeds,
with the utility's 95% interval as a horizontal bar and the privacy's standard deviation
(over seeds and within a seed) as a vertical bar (:mod:`leaderboard.plot_points`); a
full-colour line joins the entry's frontier of those means and faint lines its frontier
in each seed, which is what the ranking scores. The legend names each entry, with its
rank or ``unranked``. Claimed configurations are labelled ``ε=3 [unit]`` where a label
fits without overlap (:mod:`leaderboard.plot_labels`). A corner mark says whether the
data is synthetic and which profile ran. Axes are fitted to the data.

SVG elements carry stable ids: ``point-<i>``, ``xerr-<i>``, ``yerr-<i>``, ``label-<i>``,
``leader-<i>``, ``frontier-<k>``, ``seed-frontier-<k>-<seed>``, ``plot-area`` (the axes),
``legend``, ``data-mark`` and ``plot-note``; the sidecar maps them to entries and configurations.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np
import pandas as pd

from leaderboard.boards import Board, Standing
from leaderboard.exports import terminal_safe
from leaderboard.plot_labels import LabelRequest, PlacedLabel, place_labels
from leaderboard.plot_points import (
    MARGIN,
    MIN_SPAN,
    PlotPoint,
    configuration_points,
    data_range,
    entry_frontier,
    fit_limits,
    privacy_bar,
    seed_frontiers,
)
from leaderboard.protocol import precision_suffix

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["data_mark", "frontier_figure", "frontier_plot", "legend_text"]

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<")
MARKER_PT = 5.5
LABEL_PT = 7.0
DPI = 110
SYNTHETIC_COLOUR = "#b00020"
REAL_COLOUR = "#333333"


def _colours() -> list:
    tab20 = matplotlib.colormaps["tab20"].colors
    return list(tab20[0::2]) + list(tab20[1::2])


def data_mark(board: Board) -> str:
    """Returns the plot's mark of data, profile and precision: ``SYNTHETIC DATA · profile smoke``.

    A board of bf16 cells adds `` · bf16 mixed precision``.

    Args:
        board: The board.
    """
    kind = "SYNTHETIC DATA" if board.key.synthetic else "real data"
    return terminal_safe(f"{kind} · profile {board.key.profile}{precision_suffix(board.key.precision)}", 60)


def _style(entry_index: int) -> tuple[Any, str]:
    colours = _colours()
    return colours[entry_index % len(colours)], MARKERS[entry_index % len(MARKERS)]


def _draw_point(ax, p: PlotPoint) -> None:
    colour, marker = _style(p.entry_index)
    if math.isfinite(p.x_ci) and p.x_ci > 0:
        bars = ax.errorbar([p.x], [p.y], xerr=[p.x_ci], fmt="none", ecolor=colour, elinewidth=0.9, capsize=2.0,
                           alpha=0.75, zorder=3)
        bars.lines[2][0].set_gid(f"xerr-{p.index}")
    if math.isfinite(p.y_sd) and p.y_sd > 0:
        low, high = privacy_bar(p)
        bars = ax.errorbar([p.x], [p.y], yerr=[[p.y - low], [high - p.y]], fmt="none", ecolor=colour, elinewidth=0.9,
                           capsize=2.0, alpha=0.75, zorder=3)
        bars.lines[2][0].set_gid(f"yerr-{p.index}")
    ax.plot([p.x], [p.y], linestyle="none", marker=marker, markersize=MARKER_PT, color=colour,
            markeredgecolor="white" if p.on_frontier else colour, markeredgewidth=0.6,
            alpha=1.0 if p.on_frontier else 0.55, zorder=4, gid=f"point-{p.index}")


def legend_text(standing: Standing, scored: bool = True) -> str:
    """Returns an entry's legend line: its name, then its rank or ``unranked`` in brackets.

    ``smoke/blur (rank 1)``, ``smoke/blur (rank 1, tied)``, ``smoke/blur (unranked)``; an
    entry without a scored point adds ``, no scored point``.

    Args:
        standing: The entry on its board.
        scored: Whether any of its configurations is a point of the plot.
    """
    if standing.rank is None:
        status = "unranked"
    else:
        status = f"rank {standing.rank}" + (", tied" if standing.tied else "")
    return f"{terminal_safe(standing.name, 40)} ({status}{'' if scored else ', no scored point'})"


def _legend(ax, board: Board, points: list[PlotPoint]):
    from matplotlib.lines import Line2D

    handles = []
    for i, standing in enumerate(board.standings):
        colour, marker = _style(i)
        text = legend_text(standing, any(p.entry_index == i for p in points))
        handles.append(Line2D([], [], color=colour, marker=marker, markersize=MARKER_PT, linewidth=1.6, label=text))
    if handles:
        handles.append(Line2D([], [], color="grey", linewidth=0.8, alpha=0.45, label="each seed's frontier"))
    legend = ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    for text in legend.get_texts():
        text.set_parse_math(False)
    legend.set_gid("legend")
    return legend


def _box(artist, renderer) -> tuple[float, float, float, float]:
    extent = artist.get_window_extent(renderer)
    return extent.x0, extent.y0, extent.x1, extent.y1


def _data_box(ax, box) -> list[float]:
    (x0, y0), (x1, y1) = ax.transData.inverted().transform([(box[0], box[1]), (box[2], box[3])])
    return [float(x0), float(y0), float(x1), float(y1)]


def _segments(ax, points: list[PlotPoint], frontiers: list[dict]) -> list:
    ends = []
    for p in points:
        if math.isfinite(p.x_ci):
            ends.append(((p.x - p.x_ci, p.y), (p.x + p.x_ci, p.y)))
        if math.isfinite(p.y_sd):
            low, high = privacy_bar(p)
            ends.append(((p.x, low), (p.x, high)))
    for front in frontiers:
        ends += list(zip(front["points"][:-1], front["points"][1:]))
    return [tuple(map(tuple, ax.transData.transform(pair))) for pair in ends]


def _label_requests(points: list[PlotPoint]) -> list[LabelRequest]:
    labelled = [p for p in points if p.label]
    labelled.sort(key=lambda p: (not p.on_frontier, p.entry_index, p.index))
    return [LabelRequest(p.index, p.label, p.x, p.y, _style(p.entry_index)[0]) for p in labelled]


def _note(dropped: int, omitted: int) -> str:
    parts = []
    if dropped:
        parts.append(f"{dropped} ε label{'s' if dropped > 1 else ''} left out for lack of room (the cells table "
                     "lists every claim)")
    if omitted:
        parts.append(f"{omitted} configuration{'s' if omitted > 1 else ''} without a privacy score not shown")
    return "; ".join(parts) + ("." if parts else "")


def frontier_figure(board: Board) -> tuple[Figure, dict[str, Any]]:
    """Draws a board's privacy against utility.

    Args:
        board: The board.

    Returns:
        ``(figure, sidecar)``: the figure (Agg canvas, laid out) and a JSON-ready
        description of it: ``xlim``, ``ylim``, ``data_range``, ``points`` (id, entry,
        configuration, x, y, ``x_ci`` half-width, ``y_sd``), ``labels`` (id, text, box in
        data coordinates), ``dropped_labels``, ``frontiers``, ``seed_frontiers``,
        ``omitted``, ``mark`` and ``note``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.0, 5.2), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    points, omitted = configuration_points(board)
    seeds = seed_frontiers(board)
    frontiers = _draw_data(ax, board, points, seeds)
    xlim, ylim = fit_limits(points, seeds)
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    obstacles = _decorate(ax, board, points)
    fig.canvas.draw()
    placed, dropped = _place_labels(ax, points, frontiers, obstacles)
    note = _note(len(dropped), len(omitted))
    if note:
        renderer = fig.canvas.get_renderer()
        below = ax.get_window_extent(renderer).y0 - ax.xaxis.label.get_window_extent(renderer).y0
        ax.annotate(note, xy=(0, 0), xycoords="axes fraction", xytext=(0, -below * 72 / fig.dpi - 6),
                    textcoords="offset points", ha="left", va="top", fontsize=7.5, color="#555555",
                    parse_math=False, gid="plot-note")
    return fig, _sidecar(board, ax, points, placed, dropped, omitted, frontiers, seeds, note)


def _draw_data(ax, board: Board, points: list[PlotPoint], seeds) -> list[dict[str, Any]]:
    """Draws the per-seed frontiers, the frontiers of the means and the points; returns the latter frontiers."""
    for s in seeds:
        ax.plot(s.points[:, 0], s.points[:, 1], color=_style(s.entry_index)[0], linewidth=0.8, alpha=0.3, marker=".",
                markersize=2.5, zorder=1, gid=f"seed-frontier-{s.entry_index}-{s.seed}")
    frontiers = []
    for i, standing in enumerate(board.standings):
        front = entry_frontier(points, i)
        if len(front):
            ax.plot(front[:, 0], front[:, 1], color=_style(i)[0], linewidth=1.6, alpha=0.9, zorder=2,
                    gid=f"frontier-{i}")
            frontiers.append({"id": f"frontier-{i}", "entry": standing.name, "points": front.tolist()})
    for p in points:
        _draw_point(ax, p)
    return frontiers


def _decorate(ax, board: Board, points: list[PlotPoint]) -> list:
    """Adds axis labels, title, data mark and legend; returns the artists labels must keep clear of."""
    ax.patch.set_gid("plot-area")
    ax.grid(alpha=0.3)
    metrics = ", ".join(sorted({m for m in board.cells["metric"] if m})) or "primary metric"
    ax.set_xlabel(terminal_safe(f"utility ({metrics}), mean over seeds ± 95% CI", 80), parse_math=False)
    ax.set_ylabel("privacy (1 − retained attack advantage) ± sd (seeds and within-seed noise)")
    ax.set_title(terminal_safe(f"{board.key.benchmark} · {board.key.data_label}", 70), loc="left", pad=22,
                 parse_math=False)
    synthetic = board.key.synthetic
    mark = ax.annotate(data_mark(board), xy=(0, 1), xycoords="axes fraction", xytext=(0, 5),
                       textcoords="offset points", ha="left", va="bottom", fontsize=8,
                       fontweight="bold" if synthetic else "normal",
                       color=SYNTHETIC_COLOUR if synthetic else REAL_COLOUR, parse_math=False, gid="data-mark")
    return [_legend(ax, board, points), mark]


def _place_labels(ax, points: list[PlotPoint], frontiers: list[dict], obstacles: list):
    renderer = ax.figure.canvas.get_renderer()
    radius = renderer.points_to_pixels(MARKER_PT) / 2
    markers = []
    for p in points:
        px, py = ax.transData.transform((p.x, p.y))
        markers.append((px - radius, py - radius, px + radius, py + radius))
    return place_labels(ax, _label_requests(points), obstacles=[_box(a, renderer) for a in obstacles],
                        markers=markers, lines=_segments(ax, points, frontiers), marker_px=radius, fontsize=LABEL_PT)


def _number(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _sidecar(board, ax, points, placed: list[PlacedLabel], dropped, omitted, frontiers, seeds, note) -> dict:
    labels = {label.request.index: label for label in placed}
    extent = data_range(points, seeds) or (None, None)
    return {
        "board": board.key.id, "benchmark": board.key.benchmark, "profile": board.key.profile,
        "synthetic": bool(board.key.synthetic), "mark": data_mark(board), "note": note,
        "xlim": [float(v) for v in ax.get_xlim()], "ylim": [float(v) for v in ax.get_ylim()],
        "margin": MARGIN, "min_span": MIN_SPAN,
        "data_range": {"x": extent[0], "y": extent[1]},
        "points": [{
            "id": f"point-{p.index}", "entry": p.entry, "configuration": p.configuration, "params": p.params,
            "x": p.x, "y": p.y, "x_ci": _number(p.x_ci), "y_sd": _number(p.y_sd), "seeds": p.seeds,
            "on_frontier": p.on_frontier, "label": f"label-{p.index}" if p.index in labels else None,
        } for p in points],
        "labels": [{"id": f"label-{index}", "point": f"point-{index}", "text": label.request.text,
                    "box": _data_box(ax, label.box), "leader": label.leader}
                   for index, label in sorted(labels.items())],
        "dropped_labels": [{"point": f"point-{r.index}", "text": r.text} for r in dropped],
        "frontiers": frontiers,
        "seed_frontiers": [{"id": f"seed-frontier-{s.entry_index}-{s.seed}", "entry": s.entry, "seed": s.seed,
                            "points": s.points.tolist()} for s in seeds],
        "omitted": omitted,
    }


def frontier_plot(board: Board, path: Path, png: bool = True) -> dict[str, Any]:
    """Writes a board's frontier plot: ``<stem>.svg``, ``<stem>.json`` and, with ``png``, ``<stem>.png``.

    Under the ``bench`` command the files drawn for a board are kept for this code, this
    board and this matplotlib setup (:func:`_plot_inputs`) and written again from there,
    byte for byte, without drawing (:mod:`bench.storage.derived`); the sidecar is then
    the one its JSON file holds.

    Args:
        board: The board.
        path: Where to write the SVG (any suffix is replaced); the sidecar and PNG sit beside it.
        png: Whether to write the PNG too.

    Returns:
        The sidecar (see :func:`frontier_figure`).
    """
    import base64

    from bench.storage import derived

    path = Path(path)
    files = [path.with_suffix(suffix) for suffix in (".svg", ".png", ".json") if png or suffix != ".png"]
    inputs = _plot_inputs(board, png)
    kept = derived.recall("plot", inputs) if inputs is not None else None
    if isinstance(kept, dict) and all(isinstance(kept.get(f.suffix), str) for f in files):
        try:
            data = {f: base64.b64decode(kept[f.suffix], validate=True) for f in files}
            sidecar = json.loads(data[path.with_suffix(".json")].decode("utf-8"))
        except ValueError:  # binascii.Error and JSONDecodeError are ValueErrors: draw it
            pass
        else:
            for file, content in data.items():
                file.write_bytes(content)
            return sidecar
    fig, sidecar = frontier_figure(board)
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": f"privbench-{board.key.id}"}):
        fig.savefig(path.with_suffix(".svg"), format="svg", bbox_inches="tight", metadata={"Date": None})
    if png:
        fig.savefig(path.with_suffix(".png"), format="png", bbox_inches="tight", metadata={"Software": None})
    path.with_suffix(".json").write_text(json.dumps(sidecar, ensure_ascii=False, indent=1, allow_nan=False),
                                         encoding="utf-8")
    if inputs is not None:
        derived.keep("plot", inputs, {f.suffix: base64.b64encode(f.read_bytes()).decode("ascii") for f in files})
    return sidecar


def _plot_inputs(board: Board, png: bool) -> dict[str, Any] | None:
    """Returns what a board's plot files depend on besides the code and the installed libraries, or None.

    The board (everything it holds, :func:`_content_digest`), matplotlib's settings (its rc
    files are read on import) and the fonts it found (its font list); None where the answers
    are not kept (outside the ``bench`` command), or before matplotlib has listed the fonts.
    """
    import hashlib

    from bench.storage import derived

    if not derived.is_enabled():
        return None
    fonts = sorted(Path(matplotlib.get_cachedir()).glob("fontlist-v*.json"))
    if not fonts:
        return None
    try:
        drawn = _content_digest(board)
        listed = hashlib.sha256(b"".join(f.name.encode() + b"\0" + f.read_bytes() for f in fonts)).hexdigest()
    except (OSError, _NotContent):
        return None
    # The backend draws nothing here (the figure has its own Agg canvas; savefig names the format).
    settings = repr([(name, dict.__getitem__(matplotlib.rcParams, name)) for name in sorted(matplotlib.rcParams)
                     if name != "backend"])
    if " at 0x" in settings:  # a setting whose repr names an object, not a value: no key can stand for it
        return None
    return {"board": drawn, "png": png, "rc": hashlib.sha256(settings.encode()).hexdigest(), "fonts": listed}


class _NotContent(Exception):
    """A value :func:`_content_digest` does not know how to write down exactly."""


def _content_digest(value: Any) -> str:
    """Returns the SHA-256 of everything a value holds, its types included (two values with one digest are equal).

    Dataclasses, dicts (in order), lists, tuples, strings, numbers (floats by ``repr``),
    booleans, None, numpy scalars and arrays of fixed-size types, and DataFrames with a
    range index whose columns are of those types. Each part is written with its type and
    length, so no two different values write the same bytes.

    Raises:
        _NotContent: Something else is inside (a board holding it is drawn every time).
    """
    import dataclasses
    import hashlib

    digest = hashlib.sha256()
    update = digest.update

    def text(tag: bytes, value: str) -> None:
        data = value.encode("utf-8", "surrogatepass")
        update(b"%s%d:" % (tag, len(data)))
        update(data)

    def feed(value: Any) -> None:
        kind = type(value)
        if kind is str:
            text(b"s", value)
        elif kind is bool:
            update(b"b1" if value else b"b0")
        elif kind is int:
            text(b"i", str(value))
        elif kind is float:
            text(b"f", repr(value))
        elif value is None:
            update(b"n")
        elif kind is dict:
            update(b"d%d{" % len(value))
            for k, v in value.items():
                feed(k)
                feed(v)
        elif kind is list or kind is tuple:
            update(b"%s%d[" % (b"l" if kind is list else b"t", len(value)))
            for v in value:
                feed(v)
        elif getattr(kind, "__dataclass_fields__", None) is not None:
            text(b"D", f"{kind.__module__}.{kind.__qualname__}")
            for f in dataclasses.fields(value):
                text(b"F", f.name)
                feed(getattr(value, f.name))
        elif (kind is np.ndarray or isinstance(value, np.generic)) and value.dtype.kind in "biufcmM":
            text(b"a" if kind is np.ndarray else b"g", f"{value.dtype.str}{value.shape}")
            data = np.ascontiguousarray(value).tobytes()
            update(b"%d:" % len(data))
            update(data)
        elif kind is pd.DataFrame and type(value.index) is pd.RangeIndex:
            index = value.index
            text(b"P", f"{index.start},{index.stop},{index.step}")
            feed(index.name)
            feed(value.columns.name)
            feed(dict(value.attrs))
            update(b"%d(" % len(value.columns))
            for name in value.columns:
                column = value[name]
                feed(name)
                text(b"T", str(column.dtype))
                if column.dtype.kind in "biufcmM" and isinstance(column.dtype, np.dtype):
                    feed(column.to_numpy())
                elif column.dtype == object or str(column.dtype) == "str":
                    feed(column.tolist())
                else:
                    raise _NotContent(str(column.dtype))
        else:
            raise _NotContent(kind.__name__)

    feed(value)
    return digest.hexdigest()
