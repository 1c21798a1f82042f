"""CMC and mAP under the Market-1501 protocol, against a per-query reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tasks.reid_metrics as reid_metrics
from tasks.reid_metrics import evaluate_rank


def reference(distmat, q_pids, g_pids, q_camids, g_camids, max_rank=50):
    """torchreid's eval_market1501, plus removal of junk (pid -1) gallery images."""
    distmat, q_pids, g_pids, q_camids, g_camids = (np.asarray(a) for a in (distmat, q_pids, g_pids, q_camids, g_camids))
    num_q, num_g = distmat.shape
    max_rank = min(max_rank, num_g)
    all_cmc, all_ap = [], []
    for i in range(num_q):
        order = np.argsort(distmat[i], kind="stable")
        removed = (g_pids[order] == -1) | ((g_pids[order] == q_pids[i]) & (g_camids[order] == q_camids[i]))
        hits = (g_pids[order] == q_pids[i])[~removed]
        if not hits.any():
            continue
        cmc = np.minimum(hits.cumsum(), 1)
        cmc = np.pad(cmc, (0, max(0, max_rank - len(cmc))), mode="edge")[:max_rank]
        all_cmc.append(cmc)
        precisions = [hits[: k + 1].sum() / (k + 1) for k in range(len(hits)) if hits[k]]
        all_ap.append(np.mean(precisions))
    return np.mean(all_cmc, axis=0), float(np.mean(all_ap))


def random_case(seed, num_q=40, num_g=300, num_ids=15, num_cams=4):
    g = torch.Generator().manual_seed(seed)
    q_pids = torch.randint(1, num_ids + 3, (num_q,), generator=g)
    g_pids = torch.randint(-1, num_ids + 1, (num_g,), generator=g)
    q_cams = torch.randint(0, num_cams, (num_q,), generator=g)
    g_cams = torch.randint(0, num_cams, (num_g,), generator=g)
    dist = torch.rand(num_q, num_g, generator=g, dtype=torch.float64)
    return dist, q_pids, g_pids, q_cams, g_cams


@pytest.mark.parametrize("seed", range(8))
def test_matches_per_query_reference(seed):
    case = random_case(seed)
    assert (case[2] == -1).any() and (case[2] == 0).any()
    cmc, mAP = evaluate_rank(*case, max_rank=50)
    ref_cmc, ref_map = reference(*case, max_rank=50)
    assert cmc.shape == (50,) and cmc.dtype == torch.float32
    np.testing.assert_allclose(cmc.numpy(), ref_cmc, atol=1e-6)
    assert mAP == pytest.approx(ref_map, abs=1e-6)


def test_float32_distances_without_ties_match_reference():
    dist, q_pids, g_pids, q_cams, g_cams = random_case(11, num_q=30, num_g=500)
    g = torch.Generator().manual_seed(3)
    dist = torch.stack([torch.randperm(500, generator=g) for _ in range(30)]).float()
    cmc, mAP = evaluate_rank(dist, q_pids, g_pids, q_cams, g_cams, max_rank=20)
    ref_cmc, ref_map = reference(dist.numpy(), q_pids, g_pids, q_cams, g_cams, max_rank=20)
    np.testing.assert_allclose(cmc.numpy(), ref_cmc, atol=1e-6)
    assert mAP == pytest.approx(ref_map, abs=1e-6)


def test_blocks_of_queries_give_the_same_result(monkeypatch):
    case = random_case(5, num_q=37)
    whole = evaluate_rank(*case)
    monkeypatch.setattr(reid_metrics, "_BLOCK_ELEMENTS", 7 * case[0].shape[1])
    blocked = evaluate_rank(*case)
    assert torch.equal(whole[0], blocked[0])
    assert whole[1] == pytest.approx(blocked[1], abs=1e-12)


def test_hand_made_case():
    # Query: pid 1, camera 0. By distance: same pid and camera (removed), junk (removed),
    # a wrong identity, a correct match, a distractor (wrong), a correct match.
    dist = torch.tensor([[0.0, 0.1, 0.2, 0.05, 0.3, 0.4]])
    g_pids = torch.tensor([1, 2, 1, -1, 0, 1])
    g_cams = torch.tensor([0, 1, 1, 1, 1, 2])
    cmc, mAP = evaluate_rank(dist, [1], g_pids, [0], g_cams, max_rank=4)
    assert cmc.tolist() == [0.0, 1.0, 1.0, 1.0]
    assert mAP == pytest.approx((1 / 2 + 2 / 4) / 2)


def test_queries_without_a_valid_match_are_skipped():
    dist = torch.tensor([[0.0, 0.1, 0.2, 0.05, 0.3, 0.4], [0.5, 0.1, 0.2, 0.3, 0.4, 0.0]])
    g_pids = torch.tensor([1, 2, 1, -1, 0, 1])
    g_cams = torch.tensor([0, 1, 1, 1, 1, 2])
    # The second query's identity (2) is in the gallery only under its own camera (1).
    cmc, mAP = evaluate_rank(dist, [1, 2], g_pids, [0, 1], g_cams, max_rank=4)
    assert cmc.tolist() == [0.0, 1.0, 1.0, 1.0]
    assert mAP == pytest.approx(0.5)


def test_perfect_and_worst_rankings():
    g_pids = torch.tensor([5, 5, 7, 7, 0])
    g_cams = torch.tensor([1, 2, 1, 2, 0])
    perfect = torch.tensor([[0.1, 0.2, 0.8, 0.9, 0.5]])
    cmc, mAP = evaluate_rank(perfect, [5], g_pids, [0], g_cams)
    assert mAP == 1.0 and cmc.tolist() == [1.0] * 5
    worst = torch.tensor([[0.8, 0.9, 0.1, 0.2, 0.3]])
    cmc, mAP = evaluate_rank(worst, [5], g_pids, [0], g_cams)
    assert cmc.tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]
    assert mAP == pytest.approx((1 / 4 + 2 / 5) / 2)


def test_ties_rank_wrong_matches_first():
    dist = torch.zeros(1, 4)
    cmc, mAP = evaluate_rank(dist, [1], [1, 2, 3, 0], [0], [1, 1, 1, 1])
    assert cmc.tolist() == [0.0, 0.0, 0.0, 1.0]
    assert mAP == pytest.approx(1 / 4)


def test_curve_is_cut_to_the_gallery_size_and_accepts_numpy():
    dist = np.array([[0.3, 0.1, 0.2]])
    cmc, mAP = evaluate_rank(dist, np.array([4]), np.array([4, 9, 9]), np.array([0]), np.array([1, 1, 1]))
    assert cmc.tolist() == [0.0, 0.0, 1.0]
    assert mAP == pytest.approx(1 / 3)


def test_errors():
    with pytest.raises(ValueError, match="no query"):
        evaluate_rank(torch.zeros(1, 2), [1], [1, -1], [0], [0, 1])
    with pytest.raises(ValueError, match="shape"):
        evaluate_rank(torch.zeros(2, 2), [1], [1, 2], [0], [0, 1])
    with pytest.raises(ValueError, match="shape"):
        evaluate_rank(torch.zeros(1, 2), [1], [1, 2, 3], [0], [0, 1, 1])
    with pytest.raises(ValueError, match="NaN"):
        evaluate_rank(torch.tensor([[float("nan"), 0.0]]), [1], [1, 2], [0], [1, 1])
    with pytest.raises(ValueError, match="max_rank"):
        evaluate_rank(torch.zeros(1, 2), [1], [1, 2], [0], [1, 1], max_rank=0)


def test_per_query_average_precision_averages_to_the_map():
    from tasks.reid_centroids import build_centroids, centroid_query_aps, evaluate_centroids
    from tasks.reid_metrics import query_average_precision

    g = torch.Generator().manual_seed(3)
    q_pids, g_pids = torch.randint(1, 8, (30,), generator=g), torch.randint(0, 8, (90,), generator=g)
    q_cams, g_cams = torch.randint(0, 3, (30,), generator=g), torch.randint(0, 3, (90,), generator=g)
    q_feat, g_feat = torch.randn(30, 6, generator=g), torch.randn(90, 6, generator=g)
    dist = torch.cdist(q_feat, g_feat)
    aps = query_average_precision(dist, q_pids, g_pids, q_cams, g_cams)
    assert aps.shape == (30,) and float(aps[~aps.isnan()].mean()) == pytest.approx(
        evaluate_rank(dist, q_pids, g_pids, q_cams, g_cams)[1])
    gallery = build_centroids(g_feat, g_pids, g_cams, q_pids, q_cams, False)
    per_query = centroid_query_aps(q_feat, q_pids, q_cams, gallery)
    assert float(per_query[~per_query.isnan()].mean()) == pytest.approx(
        evaluate_centroids(q_feat, q_pids, q_cams, gallery)[1])
