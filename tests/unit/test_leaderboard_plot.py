"""The frontier plot: axes fitted to the data, labels that never overlap, error bars, frontiers, data mark."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from leaderboard.boards import build_leaderboard
from leaderboard.declare import Declaration, DeclaredCell
from leaderboard.plot import frontier_figure, frontier_plot
from leaderboard.plot_labels import boxes_overlap
from leaderboard.plot_points import MARGIN, MIN_SPAN
from leaderboard.protocol import canonical_params

TASK = "fewshot_synth_faces"


def make_board(points, *, claims=None, ci95=0.01, synthetic=True, profile="smoke"):
    """One board from ``points``: entry -> level -> seed -> (utility, privacy or None)."""
    rows, declarations = [], []
    for entry, levels in points.items():
        cells, seeds = {}, set()
        for level, by_seed in levels.items():
            for seed, (utility, privacy) in by_seed.items():
                key = f"{entry}|{level}|{seed}"
                seeds.add(seed)
                cells[key] = DeclaredCell(TASK, canonical_params({"level": level}), seed)
                claim = (claims or {}).get(entry)
                rows.append({
                    "task": TASK, "mechanism": entry, "mechanism_version": 1, "params": {"level": level},
                    "seed": seed, "profile": profile, "utility": {"acc": utility, "acc_ci95": ci95},
                    "primary_metric": "acc", "attacks": {"face_reid": {}}, "privacy_score": privacy,
                    "privacy_flags": {} if privacy is not None else {"face_reid": "attack too weak"},
                    "claim": None if claim is None else {"epsilon": 8.0 / (level + 1), "delta": 0.0, "unit": claim},
                    "synthetic": synthetic, "dataset_fingerprint": "fp", "eval_split": "test", "cell_key": key,
                    "source": "local", "run_id": f"run-{key}",
                })
        declarations.append(Declaration(entry, "local", entry, "suite", profile, tuple(sorted(seeds)), cells))
    return build_leaderboard(pd.DataFrame(rows), declarations).boards[0]


def crowded_board():
    """12 configurations of 3 entries, all claimed, packed in utility 0.37–0.51 and privacy 0.40–0.50."""
    points = {}
    for e, entry in enumerate(("dp_pix", "blur", "pixelate")):
        points[entry] = {level: {seed: (0.37 + 0.14 * level / 11 + 0.003 * seed + 0.002 * e,
                                        0.50 - 0.10 * level / 11 + 0.004 * e + 0.002 * seed)
                                 for seed in (0, 1, 2)} for level in range(12)}
    return make_board(points, claims={name: "m-pixel" for name in points})


@pytest.fixture(scope="module")
def crowded():
    fig, sidecar = frontier_figure(crowded_board())
    fig.canvas.draw()
    return fig, sidecar


def _artists(fig, prefix):
    return {a.get_gid(): a for a in fig.findobj(lambda a: (a.get_gid() or "").startswith(prefix))}


def _box(extent):
    return extent.x0, extent.y0, extent.x1, extent.y1


def test_axes_fit_the_data_not_the_unit_square():
    board = make_board({"a": {level: {seed: (0.37 + 0.14 * level / 4 + 0.002 * seed, 0.9 - 0.1 * level)
                                      for seed in (0, 1, 2)} for level in range(5)}}, ci95=0.0)
    _, sidecar = frontier_figure(board)
    (x_lo, x_hi), (y_lo, y_hi) = sidecar["data_range"]["x"], sidecar["data_range"]["y"]
    assert x_lo == pytest.approx(min(p["x"] - p["x_ci"] for p in sidecar["points"]))
    assert x_hi == pytest.approx(max(p["x"] + p["x_ci"] for p in sidecar["points"]))
    assert 0.36 < x_lo < 0.372 and 0.512 < x_hi < 0.52
    margin = MARGIN * (x_hi - x_lo)
    assert sidecar["xlim"] == pytest.approx([x_lo - margin, x_hi + margin])
    assert 0.35 < sidecar["xlim"][0] < 0.37 and 0.512 < sidecar["xlim"][1] < 0.53
    assert sidecar["ylim"][0] < y_lo and sidecar["ylim"][1] > y_hi
    assert sidecar["ylim"][1] - sidecar["ylim"][0] < (1 + 2.5 * MARGIN) * (y_hi - y_lo)
    for p in sidecar["points"]:
        assert sidecar["xlim"][0] < p["x"] - (p["x_ci"] or 0) and p["x"] + (p["x_ci"] or 0) < sidecar["xlim"][1]


def test_crowded_labels_never_overlap_each_other_markers_or_the_legend(crowded):
    fig, sidecar = crowded
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    labels = _artists(fig, "label-")
    assert len(labels) == len(sidecar["labels"]) >= 20
    assert len(labels) + len(sidecar["dropped_labels"]) == 36
    boxes = {gid: _box(text.get_bbox_patch().get_window_extent(renderer)) for gid, text in labels.items()}
    for (a, box_a), (b, box_b) in itertools.combinations(boxes.items(), 2):
        assert not boxes_overlap(box_a, box_b), (a, b)
    frame = _box(ax.get_window_extent(renderer))
    legend = _box(_artists(fig, "legend")["legend"].get_window_extent(renderer))
    markers = [_box(line.get_window_extent(renderer)) for line in _artists(fig, "point-").values()]
    for gid, box in boxes.items():
        assert frame[0] <= box[0] and box[2] <= frame[2] and frame[1] <= box[1] and box[3] <= frame[3], gid
        assert not boxes_overlap(box, legend), gid
        assert not any(boxes_overlap(box, marker) for marker in markers), gid
    for a, b in itertools.combinations(sidecar["labels"], 2):
        assert not boxes_overlap(a["box"], b["box"]), (a["id"], b["id"])
    texts = {f"ε={8 / (level + 1):.4g} [m-pixel]" for level in range(12)}
    assert {label["text"] for label in sidecar["labels"]} <= texts


def test_labels_that_do_not_fit_are_dropped_and_said_so():
    points = {f"e{i}": {level: {0: (0.40 + 0.0005 * level, 0.50 + 0.0005 * i)} for level in range(12)}
              for i in range(3)}
    _, sidecar = frontier_figure(make_board(points, claims={name: "m-pixel" for name in points}))
    assert sidecar["dropped_labels"], "36 labels around points 0.006 apart cannot all fit"
    assert f"{len(sidecar['dropped_labels'])} ε labels left out for lack of room" in sidecar["note"]
    for a, b in itertools.combinations(sidecar["labels"], 2):
        assert not boxes_overlap(a["box"], b["box"])


def test_error_bars_are_the_utility_ci_over_seeds_and_the_privacy_sd():
    utilities, privacies = [0.40, 0.43, 0.45], [0.70, 0.74, 0.69]
    board = make_board({"a": {0: {s: (u, p) for s, (u, p) in enumerate(zip(utilities, privacies))},
                              1: {0: (0.6, 0.3), 1: (0.61, 0.31), 2: (0.62, 0.29)}}})
    fig, sidecar = frontier_figure(board)
    point = next(p for p in sidecar["points"] if p["params"] == "level=0")
    half = stats.t.ppf(0.975, 2) * np.std(utilities, ddof=1) / math.sqrt(3)
    assert point["x"] == pytest.approx(np.mean(utilities)) and point["x_ci"] == pytest.approx(half)
    assert point["y"] == pytest.approx(np.mean(privacies)) and point["y_sd"] == pytest.approx(np.std(privacies, ddof=1))
    index = point["id"].removeprefix("point-")
    bars = _artists(fig, "xerr-") | _artists(fig, "yerr-")
    (x0, y0), (x1, y1) = bars[f"xerr-{index}"].get_segments()[0]
    assert (x1 - x0) / 2 == pytest.approx(half) and y0 == y1 == pytest.approx(point["y"])
    (x0, y0), (x1, y1) = bars[f"yerr-{index}"].get_segments()[0]
    assert (y1 - y0) / 2 == pytest.approx(point["y_sd"]) and x0 == x1


def test_the_privacy_bar_stays_inside_the_scores_range():
    board = make_board({"a": {0: {0: (0.40, 0.0), 1: (0.42, 0.3), 2: (0.41, 0.0)},
                              1: {0: (0.60, 1.0), 1: (0.62, 0.6), 2: (0.61, 1.0)}}})
    fig, sidecar = frontier_figure(board)
    bars = _artists(fig, "yerr-")
    ends = sorted(y for bar in bars.values() for (_, y) in bar.get_segments()[0])
    assert ends[0] == 0.0 and ends[-1] == 1.0  # mean ± sd would reach -0.07 and 1.07
    low, high = sidecar["ylim"]
    assert low >= -MARGIN * 1.0 - 1e-9 and high <= 1.0 + MARGIN * 1.0 + 1e-9


def test_one_seed_uses_the_cell_ci_and_has_no_privacy_bar():
    fig, sidecar = frontier_figure(make_board({"a": {0: {0: (0.5, 0.6)}, 1: {0: (0.55, 0.4)}}}, ci95=0.02))
    assert [p["x_ci"] for p in sidecar["points"]] == pytest.approx([0.02, 0.02])
    assert [p["y_sd"] for p in sidecar["points"]] == [None, None]
    assert len(_artists(fig, "xerr-")) == 2 and not _artists(fig, "yerr-")


def test_frontiers_join_frontier_points_only():
    seeds = {0: 0.0, 1: 0.01, 2: -0.01}
    curve = [(0.3, 0.9), (0.5, 0.6), (0.45, 0.5), (0.7, 0.4)]
    board = make_board({"a": {level: {s: (u + d, p) for s, d in seeds.items()} for level, (u, p) in enumerate(curve)}})
    fig, sidecar = frontier_figure(board)
    (front,) = sidecar["frontiers"]
    assert np.asarray(front["points"]) == pytest.approx(np.array([[0.3, 0.9], [0.5, 0.6], [0.7, 0.4]]))
    dominated = next(p for p in sidecar["points"] if p["params"] == "level=2")
    assert not dominated["on_frontier"] and sum(p["on_frontier"] for p in sidecar["points"]) == 3
    lines = _artists(fig, "frontier-") | _artists(fig, "seed-frontier-")
    assert len(lines) == 1 + 3 and len(sidecar["seed_frontiers"]) == 3
    for gid, line in lines.items():
        xs, ys = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
        assert xs.min() > 0.2 and ys.min() > 0.3, gid
        assert np.all(np.diff(xs) > 0) and np.all(np.diff(ys) < 0), gid
    assert np.asarray(lines["frontier-0"].get_xdata(), float) == pytest.approx([0.3, 0.5, 0.7])


@pytest.mark.parametrize(("synthetic", "profile", "mark"), [(True, "smoke", "SYNTHETIC DATA · profile smoke"),
                                                             (False, "paper", "real data · profile paper")])
def test_data_and_profile_are_marked(synthetic, profile, mark, tmp_path):
    board = make_board({"a": {0: {0: (0.5, 0.6)}}}, synthetic=synthetic, profile=profile)
    fig, sidecar = frontier_figure(board)
    assert sidecar["mark"] == mark and _artists(fig, "data-mark")["data-mark"].get_text() == mark
    frontier_plot(board, tmp_path / "plot.svg")
    svg = (tmp_path / "plot.svg").read_text(encoding="utf-8")
    assert 'id="data-mark"' in svg and mark in svg


def test_single_point_board_has_a_window_around_it(tmp_path):
    board = make_board({"a": {0: {0: (0.5, 0.6)}}}, ci95=0.0)
    sidecar = frontier_plot(board, tmp_path / "one.svg")
    assert {p.name for p in tmp_path.iterdir()} == {"one.svg", "one.png", "one.json"}
    assert json.loads((tmp_path / "one.json").read_text(encoding="utf-8")) == sidecar
    (x_lo, x_hi), (y_lo, y_hi) = sidecar["xlim"], sidecar["ylim"]
    assert x_hi - x_lo == pytest.approx(MIN_SPAN * (1 + 2 * MARGIN))
    assert x_lo < 0.5 < x_hi and y_lo < 0.6 < y_hi and (x_lo + x_hi) / 2 == pytest.approx(0.5)
    assert [(p["x"], p["y"]) for p in sidecar["points"]] == [(0.5, 0.6)]
    assert sidecar["frontiers"][0]["points"] == [[0.5, 0.6]]
    svg = (tmp_path / "one.svg").read_text(encoding="utf-8")
    assert 'id="point-0"' in svg and 'id="frontier-0"' in svg and 'id="legend"' in svg


def test_configurations_without_a_privacy_score_are_not_points():
    board = make_board({"a": {0: {0: (0.5, None), 1: (0.52, None)}, 1: {0: (0.6, 0.4), 1: (0.62, None)},
                              2: {0: (0.4, 0.7), 1: (0.41, 0.72)}}})
    fig, sidecar = frontier_figure(board)
    assert [p["params"] for p in sidecar["points"]] == ["level=1", "level=2"]
    assert sidecar["omitted"] == [{"entry": "a", "configuration": canonical_params({"level": 0}), "params": "level=0",
                                   "reason": "no privacy score in any seed"}]
    partial = sidecar["points"][0]
    assert partial["seeds"] == 1 and partial["y"] == 0.4 and partial["x"] == pytest.approx(0.61)
    assert "1 configuration without a privacy score not shown" in sidecar["note"]
    assert len(_artists(fig, "point-")) == 2


def test_empty_board_keeps_the_unit_square():
    board = make_board({"a": {0: {0: (0.5, None)}}})
    _, sidecar = frontier_figure(board)
    assert sidecar["points"] == [] and sidecar["xlim"] == [0.0, 1.0] and sidecar["ylim"] == [0.0, 1.0]
