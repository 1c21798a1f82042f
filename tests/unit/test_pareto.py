"""Pareto sets and hypervolume against brute-force references."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leaderboard.pareto import frontier, hypervolume_2d, non_dominated

# A coarse grid forces ties and duplicates; halves keep float arithmetic exact.
coord = st.integers(-4, 8).map(lambda v: v / 2)
fine = st.floats(-10, 10, allow_nan=False, allow_infinity=False, width=32)


def point_sets(dims=2, elements=coord, max_size=25):
    return st.lists(st.tuples(*[elements] * dims), min_size=0, max_size=max_size)


maximize_2d = st.tuples(st.booleans(), st.booleans())


def brute_non_dominated(points, maximize):
    signs = np.where(np.asarray(maximize), 1.0, -1.0)
    pts = [np.asarray(p, dtype=float) * signs for p in points]
    keep = []
    for i, p in enumerate(pts):
        dominated = any(
            np.all(q >= p) and np.any(q > p) for j, q in enumerate(pts) if j != i
        )
        if not dominated:
            keep.append(i)
    return keep


def brute_hypervolume(points, reference, maximize):
    """Area of the union of boxes [ref, p], by coordinate compression over a grid."""
    signs = np.where(np.asarray(maximize), 1.0, -1.0)
    ref = np.asarray(reference, dtype=float) * signs
    pts = [np.asarray(p, dtype=float) * signs for p in points]
    xs = sorted({ref[0], *(p[0] for p in pts)})
    ys = sorted({ref[1], *(p[1] for p in pts)})
    area = 0.0
    for x0, x1 in itertools.pairwise(xs):
        if x0 < ref[0]:
            continue
        for y0, y1 in itertools.pairwise(ys):
            if y0 < ref[1]:
                continue
            if any(p[0] >= x1 and p[1] >= y1 for p in pts):
                area += (x1 - x0) * (y1 - y0)
    return area


@settings(max_examples=300, deadline=None)
@given(point_sets(), maximize_2d)
def test_non_dominated_2d_matches_pairwise(points, maximize):
    got = non_dominated(points, maximize).tolist()
    assert got == brute_non_dominated(points, maximize)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 4).flatmap(lambda d: st.tuples(st.just(d), point_sets(d, max_size=15))))
def test_non_dominated_nd_matches_pairwise(case):
    dims, points = case
    got = non_dominated(points, True).tolist()
    assert got == brute_non_dominated(points, [True] * dims)


@settings(max_examples=100, deadline=None)
@given(point_sets(elements=fine), maximize_2d)
def test_non_dominated_2d_matches_pairwise_on_floats(points, maximize):
    assert non_dominated(points, maximize).tolist() == brute_non_dominated(points, maximize)


@settings(max_examples=200, deadline=None)
@given(point_sets(), maximize_2d)
def test_frontier_is_sorted_distinct_non_dominated_points(points, maximize):
    front = frontier(points, maximize)
    expected = {tuple(map(float, points[i])) for i in brute_non_dominated(points, maximize)}
    assert {tuple(p) for p in front.tolist()} == expected
    assert len(front) == len(expected)
    assert np.all(np.diff(front[:, 0]) >= 0) if len(front) else True
    if len(front) > 1 and maximize == (True, True):
        assert np.all(np.diff(front[:, 0]) > 0)
        assert np.all(np.diff(front[:, 1]) < 0)


@settings(max_examples=300, deadline=None)
@given(point_sets(), st.tuples(coord, coord), maximize_2d)
def test_hypervolume_matches_rectangle_union(points, reference, maximize):
    got = hypervolume_2d(points, reference, maximize)
    assert got == pytest.approx(brute_hypervolume(points, reference, maximize), abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(point_sets(elements=fine, max_size=12), st.tuples(fine, fine))
def test_hypervolume_matches_rectangle_union_on_floats(points, reference):
    got = hypervolume_2d(points, reference)
    expected = brute_hypervolume(points, reference, (True, True))
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-9)


@settings(max_examples=150, deadline=None)
@given(point_sets(), coord, coord, st.randoms(use_true_random=False))
def test_hypervolume_invariants(points, x, y, rnd):
    base = hypervolume_2d(points)
    shuffled = list(points)
    rnd.shuffle(shuffled)
    assert hypervolume_2d(shuffled) == pytest.approx(base)
    assert hypervolume_2d(points + points) == pytest.approx(base)
    front = [points[i] for i in non_dominated(points)]
    assert hypervolume_2d(front) == pytest.approx(base)
    assert hypervolume_2d(points + [(x, y)]) >= base - 1e-12
    assert base >= 0.0


def test_empty_input():
    assert non_dominated([]).shape == (0,)
    assert non_dominated(np.empty((0, 3)), True).dtype == np.intp
    assert frontier([]).shape[0] == 0
    assert hypervolume_2d([]) == 0.0
    assert hypervolume_2d(np.empty((0, 2))) == 0.0


def test_single_point():
    assert non_dominated([(0.3, 0.7)]).tolist() == [0]
    assert frontier([(0.3, 0.7)]).tolist() == [[0.3, 0.7]]
    assert hypervolume_2d([(0.5, 0.4)]) == pytest.approx(0.2)


def test_duplicates_and_ties():
    pts = [(0.5, 0.5), (0.5, 0.5), (0.5, 0.4), (0.4, 0.5), (0.2, 0.9)]
    assert non_dominated(pts).tolist() == [0, 1, 4]
    assert frontier(pts).tolist() == [[0.2, 0.9], [0.5, 0.5]]
    assert hypervolume_2d(pts) == pytest.approx(0.5 * 0.5 + 0.2 * 0.4)


def test_points_not_dominating_reference_contribute_nothing():
    assert hypervolume_2d([(0.0, 0.9), (0.9, 0.0), (-1, 2)]) == 0.0
    assert hypervolume_2d([(0.5, 0.5), (0.9, -0.1)]) == pytest.approx(0.25)
    assert hypervolume_2d([(1.0, 1.0)], reference=(0.5, 0.5)) == pytest.approx(0.25)


def test_minimised_axes():
    assert hypervolume_2d([(0.2, 0.3)], reference=(1, 1), maximize=(False, False)) == pytest.approx(0.56)
    assert non_dominated([(1, 1), (2, 2)], maximize=(False, False)).tolist() == [0]
    assert non_dominated([(1, 1), (2, 2)], maximize=False).tolist() == [0]


def test_bad_input():
    with pytest.raises(ValueError):
        non_dominated([(1.0, float("nan"))])
    with pytest.raises(ValueError):
        non_dominated([1.0, 2.0])
    with pytest.raises(ValueError):
        non_dominated([(1, 2, 3)], maximize=(True, True))
    with pytest.raises(ValueError):
        hypervolume_2d([(1, 2, 3)])
    with pytest.raises(ValueError):
        hypervolume_2d([(1, 2)], reference=(0, float("nan")))


@settings(max_examples=150, deadline=None)
@given(st.lists(point_sets(elements=fine, max_size=10).filter(bool), min_size=1, max_size=6), st.integers(1, 10))
def test_batch_hypervolume_matches_one_at_a_time(sets, width):
    from leaderboard.pareto import hypervolume_2d_batch

    batch = np.full((len(sets), width, 2), np.nan)
    for i, points in enumerate(sets):
        points = points[:width]
        batch[i, : len(points)] = points
        sets[i] = points
    got = hypervolume_2d_batch(batch)
    assert got == pytest.approx([hypervolume_2d(p) for p in sets], rel=1e-9, abs=1e-9)


def test_batch_hypervolume_shapes():
    from leaderboard.pareto import hypervolume_2d_batch

    assert hypervolume_2d_batch(np.empty((3, 0, 2))).tolist() == [0.0, 0.0, 0.0]
    assert hypervolume_2d_batch([[(0.5, 0.4), (0.2, 0.9)]]) == pytest.approx([0.5 * 0.4 + 0.2 * 0.5])
    with pytest.raises(ValueError):
        hypervolume_2d_batch([(0.5, 0.4)])
