"""Batch-hard triplet, centroid triplet, PK sampling and centroid-gallery evaluation."""

from __future__ import annotations

import pytest
import torch

from bench.nn.losses import batch_hard_triplet_loss, centroid_triplet_loss, pairwise_distances
from bench.nn.sampling import PKSampler
from tasks.reid_centroids import build_centroids, evaluate_centroids
from tasks.reid_metrics import evaluate_rank


def _brute_batch_hard(x, y, margin):
    losses = []
    for a in range(len(y)):
        pos = [torch.dist(x[a], x[p]) for p in range(len(y)) if p != a and y[p] == y[a]]
        neg = [torch.dist(x[a], x[n]) for n in range(len(y)) if y[n] != y[a]]
        if pos and neg:
            losses.append(torch.relu(max(pos) - min(neg) + margin))
    return torch.stack(losses).mean()


def _brute_ctl(x, y, margin):
    losses = []
    classes = sorted(set(y.tolist()))
    centroid = {c: x[y == c].mean(0) for c in classes}
    for a in range(len(y)):
        own = [i for i in range(len(y)) if y[i] == y[a] and i != a]
        if not own:
            continue
        c_p = x[own].mean(0)
        d_ap = (x[a] - c_p).pow(2).sum()
        d_an = min((x[a] - centroid[c]).pow(2).sum() for c in classes if c != int(y[a]))
        losses.append(torch.relu(d_ap - d_an + margin))
    return torch.stack(losses).mean()


def test_pairwise_distances_match_cdist():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(7, 5, generator=g), torch.randn(4, 5, generator=g)
    assert torch.allclose(pairwise_distances(x, y), torch.cdist(x, y), atol=1e-5)
    assert torch.allclose(pairwise_distances(x, y, squared=True), torch.cdist(x, y) ** 2, atol=1e-4)


@pytest.mark.parametrize("seed", range(3))
def test_batch_hard_triplet_matches_brute_force(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(12, 6, generator=g)
    y = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3])
    assert torch.allclose(batch_hard_triplet_loss(x, y, 0.3), _brute_batch_hard(x, y, 0.3), atol=1e-5)


def test_batch_hard_triplet_is_zero_for_separated_classes_and_positive_otherwise():
    y = torch.tensor([0, 0, 1, 1])
    far = torch.tensor([[0.0, 0.0], [0.1, 0.0], [10.0, 0.0], [10.1, 0.0]])
    assert batch_hard_triplet_loss(far, y, 0.3).item() == 0.0
    mixed = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.1, 0.0], [10.1, 0.0]])
    assert batch_hard_triplet_loss(mixed, y, 0.3).item() > 9.0


def test_batch_hard_triplet_ignores_anchors_without_positive_and_soft_margin_is_smooth():
    y = torch.tensor([0, 0, 1])
    x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0]])
    assert torch.isclose(batch_hard_triplet_loss(x, y, 0.5), torch.tensor(0.0))
    soft = batch_hard_triplet_loss(x, y, None)
    expected = torch.nn.functional.softplus(torch.tensor([1.0 - 3.0, 1.0 - 2.0])).mean()
    assert torch.isclose(soft, expected)
    assert batch_hard_triplet_loss(x, torch.zeros(3, dtype=torch.long), 0.3).item() == 0.0


@pytest.mark.parametrize("seed", range(3))
def test_centroid_triplet_matches_eq4_by_brute_force(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(12, 6, generator=g)
    y = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 3])
    assert torch.allclose(centroid_triplet_loss(x, y, 0.3), _brute_ctl(x, y, 0.3), atol=1e-4)


def test_centroid_triplet_leaves_the_anchor_out_and_skips_singletons():
    x = torch.tensor([[0.0], [2.0], [10.0], [11.0]])
    y = torch.tensor([0, 0, 1, 2])
    # only anchors 0 and 1 have a positive: c_P is the other sample (distance 2, squared 4);
    # anchor 0's nearest other centroid is 10 (100), anchor 1's is 10 (64): no violation.
    assert centroid_triplet_loss(x, y, 1.0).item() == 0.0
    y_close = torch.tensor([0, 0, 1, 1])
    x_close = torch.tensor([[0.0], [4.0], [1.0], [3.0]])
    # anchor 0: d_ap = 16, class-1 centroid 2 -> d_an = 4: loss 12 + margin.
    value = centroid_triplet_loss(x_close, y_close, 0.0)
    assert value.item() > 0
    assert centroid_triplet_loss(x, torch.zeros(4, dtype=torch.long), 0.3).item() == 0.0


def test_centroid_triplet_gradient_flows_and_plain_distances_option():
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1), requires_grad=True)
    y = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    centroid_triplet_loss(x, y, 1.0).backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    plain = centroid_triplet_loss(x.detach(), y, 0.0, squared=False)
    assert plain.item() >= 0


def test_pk_sampler_batches_hold_p_identities_with_k_images_each():
    labels = torch.tensor([0] * 9 + [1] * 4 + [2] * 2 + [3] * 5 + [4] * 7)
    sampler = PKSampler(labels, p=3, k=4, generator=torch.Generator().manual_seed(0))
    batches = list(sampler.epoch())
    assert batches and len(batches) <= len(sampler)
    for batch in batches:
        assert batch.shape == (12,)
        ids = labels[batch].view(3, 4)
        assert (ids == ids[:, :1]).all() and len(set(ids[:, 0].tolist())) == 3
    seen = torch.cat(batches).unique()
    assert len(seen) >= 0.7 * len(labels)


def test_pk_sampler_is_deterministic_and_rejects_too_few_identities():
    labels = torch.arange(6).repeat_interleave(5)
    a = list(PKSampler(labels, 2, 3, torch.Generator().manual_seed(4)).epoch())
    b = list(PKSampler(labels, 2, 3, torch.Generator().manual_seed(4)).epoch())
    assert all(torch.equal(x, y) for x, y in zip(a, b)) and len(a) == len(b)
    with pytest.raises(ValueError):
        PKSampler(labels, 7, 2, torch.Generator())


def _toy_reid():
    """Three identities over three cameras, plus a distractor and a junk image."""
    g_pids = torch.tensor([1, 1, 1, 2, 2, 3, 3, 0, -1])
    g_cams = torch.tensor([0, 1, 2, 0, 1, 1, 2, 0, 1])
    g_feat = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.8, 0.3], [0.0, 1.0], [0.1, 0.9],
                           [-1.0, 0.0], [-0.9, -0.1], [0.7, 0.7], [0.2, 0.2]])
    q_pids = torch.tensor([1, 1, 2, 3])
    q_cams = torch.tensor([0, 2, 1, 1])
    return g_feat, g_pids, g_cams, q_pids, q_cams


def test_centroids_exclude_the_query_camera_and_skip_junk_and_distractors():
    g_feat, g_pids, g_cams, q_pids, q_cams = _toy_reid()
    gallery = build_centroids(g_feat, g_pids, g_cams, q_pids, q_cams)
    rows = {(int(p), tuple(c.nonzero().flatten().tolist())) for p, c in zip(gallery.pids, gallery.cams)}
    assert rows == {(1, (1, 2)), (1, (0, 1)), (2, (0,)), (3, (2,))}
    index = [i for i, (p, c) in enumerate(zip(gallery.pids, gallery.cams)) if p == 1 and c[1] and c[2]][0]
    assert torch.allclose(gallery.features[index], g_feat[[1, 2]].mean(0))
    kept = build_centroids(g_feat, g_pids, g_cams, q_pids, q_cams, keep_distractors=True)
    assert (kept.pids == 0).sum() == 1 and (kept.pids == -1).sum() == 0


def test_centroid_evaluation_equals_brute_force_per_query():
    g = torch.Generator().manual_seed(0)
    n_ids, cams = 6, 3
    g_pids = torch.arange(1, n_ids + 1).repeat_interleave(4)
    g_cams = torch.arange(len(g_pids)) % cams
    q_pids = torch.arange(1, n_ids + 1).repeat_interleave(2)
    q_cams = torch.arange(len(q_pids)) % cams
    g_feat = torch.randn(len(g_pids), 5, generator=g) + g_pids[:, None].float().sin()
    q_feat = torch.randn(len(q_pids), 5, generator=g)
    gallery = build_centroids(g_feat, g_pids, g_cams, q_pids, q_cams)
    cmc, mean_ap = evaluate_centroids(q_feat, q_pids, q_cams, gallery)
    norm = torch.nn.functional.normalize
    aps, firsts = [], []
    for q in range(len(q_pids)):
        keep = ~((gallery.pids == q_pids[q]) & gallery.cams[:, q_cams[q]])
        d = torch.cdist(norm(q_feat[q : q + 1], dim=1), norm(gallery.features[keep], dim=1))[0]
        correct = (gallery.pids[keep] == q_pids[q])[torch.argsort(d)]
        hits = correct.nonzero().flatten() + 1
        aps.append(float((torch.arange(1, len(hits) + 1) / hits).mean()))
        firsts.append(int(hits[0]))
    assert mean_ap == pytest.approx(sum(aps) / len(aps), abs=1e-6)
    assert cmc[0].item() == pytest.approx(sum(f == 1 for f in firsts) / len(firsts), abs=1e-6)


def test_perfect_embeddings_give_perfect_centroid_and_image_retrieval():
    ids = torch.arange(1, 5)
    g_pids = ids.repeat_interleave(3)
    g_cams = torch.tensor([0, 1, 2] * 4)
    q_pids, q_cams = ids, torch.tensor([0, 1, 2, 0])
    basis = torch.eye(4)
    g_feat, q_feat = basis[g_pids - 1], basis[q_pids - 1]
    _, image_map = evaluate_rank(torch.cdist(q_feat, g_feat), q_pids, g_pids, q_cams, g_cams)
    cmc, centroid_map = evaluate_centroids(q_feat, q_pids, q_cams, build_centroids(g_feat, g_pids, g_cams, q_pids, q_cams))
    assert image_map == 1.0 and centroid_map == 1.0 and cmc[0].item() == 1.0


def test_queries_without_a_cross_camera_centroid_are_skipped():
    g_feat = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.9]])
    g_pids = torch.tensor([1, 2, 2])
    g_cams = torch.tensor([0, 0, 1])
    q_pids, q_cams = torch.tensor([1, 2]), torch.tensor([0, 0])
    gallery = build_centroids(g_feat, g_pids, g_cams, q_pids, q_cams)
    assert gallery.pids.tolist() == [2]
    cmc, mean_ap = evaluate_centroids(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), q_pids, q_cams, gallery)
    assert mean_ap == 1.0
    with pytest.raises(ValueError):
        evaluate_centroids(torch.tensor([[1.0, 0.0]]), torch.tensor([1]), torch.tensor([0]), gallery)


def test_loss_functions_are_permutation_invariant():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(8, 3, generator=g)
    y = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    perm = torch.tensor([7, 2, 5, 0, 3, 6, 1, 4])
    for fn in (batch_hard_triplet_loss, centroid_triplet_loss):
        assert torch.allclose(fn(x, y, 0.3), fn(x[perm], y[perm], 0.3), atol=1e-5)
