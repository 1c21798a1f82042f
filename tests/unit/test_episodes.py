"""Episode sampling and prototypical maths."""

from __future__ import annotations

import pytest
import torch

from tasks.episodes import EpisodeSampler, episode_accuracies, mean_ci95, prototype_logits, prototypical_loss


def _labels():
    return torch.tensor([0] * 6 + [1] * 3 + [2] * 7 + [3] * 6 + [4] * 6 + [5] * 5)


def test_episodes_pick_distinct_classes_with_enough_images():
    labels = _labels()
    index = EpisodeSampler(labels, way=3, per_class=5, generator=torch.Generator().manual_seed(0)).sample(200)
    assert index.shape == (200, 3, 5)
    picked = labels[index]
    assert bool((picked == picked[..., :1]).all()), "an episode row mixes classes"
    assert bool((picked[..., 0] != 1).all()), "class 1 has only 3 images"
    for row in index.reshape(-1, 5):
        assert len(set(row.tolist())) == 5
    classes = picked[..., 0]
    assert bool((classes[:, 0] != classes[:, 1]).all() and (classes[:, 1] != classes[:, 2]).all())


def test_episodes_are_seeded():
    make = lambda: EpisodeSampler(_labels(), 3, 5, torch.Generator().manual_seed(4)).sample(10)
    assert torch.equal(make(), make())


def test_too_few_classes_raises():
    with pytest.raises(ValueError):
        EpisodeSampler(_labels(), way=6, per_class=6, generator=torch.Generator())


def test_prototype_logits_match_a_loop():
    emb = torch.randn(3, 4, 8)
    logits = prototype_logits(emb, shot=2)
    protos = emb[:, :2].mean(1)
    for c in range(3):
        for q in range(2):
            row = c * 2 + q
            expected = -((emb[c, 2 + q][None] - protos) ** 2).sum(1)
            assert torch.allclose(logits[row], expected, atol=1e-4)
    assert prototypical_loss(emb, 2).ndim == 0


def test_separable_embeddings_give_perfect_accuracy():
    labels = torch.arange(10).repeat_interleave(20)
    emb = torch.nn.functional.one_hot(labels, 10).float() * 10 + 0.01 * torch.randn(200, 10)
    index = EpisodeSampler(labels, 5, 20, torch.Generator().manual_seed(0)).sample(50)
    acc = episode_accuracies(emb, index, shot=5)
    assert acc.shape == (50,) and bool((acc == 1).all())


def test_mean_ci95():
    mean, half = mean_ci95(torch.tensor([0.0, 1.0] * 50))
    assert mean == pytest.approx(0.5)
    assert half == pytest.approx(1.96 * torch.tensor([0.0, 1.0] * 50).std().item() / 10)
