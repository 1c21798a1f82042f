"""The membership adversary's settings, checks and reductions, without training a model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attacks._membership_audit import canary_set
from attacks.membership import Membership, label_outputs
from bench.core.interfaces import RunContext
from bench.data.base import ImageSet
from bench.errors import BenchError


def _ctx(tmp_path: Path) -> RunContext:
    return RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=None, cache_dir=tmp_path)


def test_each_profile_states_its_lira_mode_and_reference_count():
    modes = {p: (Membership(p).config.lira, Membership(p).config.references) for p in ("smoke", "quick", "paper")}
    assert modes == {"smoke": ("offline", 4), "quick": ("offline", 4), "paper": ("online", 8)}
    assert Membership("quick").config.rmia_a is None  # chosen on the adversary's own models


@pytest.mark.parametrize("references", [4, 5])
def test_online_lira_without_enough_paired_models_is_refused_before_any_work(references):
    attack = Membership("smoke", {"lira": "online", "references": references})
    with pytest.raises(BenchError, match="online LiRA needs an even number"):
        attack.check_data(None)
    Membership("smoke", {"lira": "online", "references": 6}).check_data(None)


def test_members_the_data_cannot_meet_are_reported_as_reduced(tmp_path, capsys):
    attack = Membership("smoke", {"members": 1000})
    members, nonmembers = attack._candidates(300, 200, _ctx(tmp_path))
    assert len(members) == len(nonmembers) == 200
    err = capsys.readouterr().err
    assert "1000 members asked" in err and "reduced to 200" in err and err.count("\n") == 1
    Membership("smoke", {"members": 100})._candidates(300, 200, _ctx(tmp_path))
    assert capsys.readouterr().err == ""


def test_canaries_are_mislabelled_and_their_coins_are_seeded():
    index = torch.arange(50, dtype=torch.uint8)
    population = ImageSet(images=index[:, None, None, None].expand(50, 3, 8, 8).contiguous(), labels=torch.arange(50) % 10)
    canaries, coins = canary_set(population, 40, 10, seed=3)
    again, coins_again = canary_set(population, 40, 10, seed=3)
    assert len(canaries) == 40 and coins.dtype == bool and 5 < coins.sum() < 35
    assert torch.equal(canaries.labels, again.labels) and (coins == coins_again).all()
    source = canaries.images[:, 0, 0, 0].long()
    assert len(set(source.tolist())) == 40
    assert (canaries.labels != population.labels[source]).all()  # every canary carries a wrong label
    assert ((canaries.labels >= 0) & (canaries.labels < 10)).all()
    assert not torch.equal(canary_set(population, 40, 10, seed=4)[0].labels, canaries.labels)


class _Fixed:
    """A classifier whose probabilities are given."""

    def __init__(self, probs: torch.Tensor):
        self._probs = probs

    def probs(self, images: torch.Tensor) -> torch.Tensor:
        return self._probs


def test_the_logit_scaled_confidence_stays_finite_and_ordered_where_p_rounds_to_one():
    logits = torch.tensor([[30.0, 0.0, 0.0], [20.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    probs = torch.softmax(logits, dim=1)  # float32: the first two round to p = 1
    images = ImageSet(images=torch.zeros(3, 1, 2, 2, dtype=torch.uint8), labels=torch.zeros(3, dtype=torch.long))
    p, phi = label_outputs(_Fixed(probs), images)
    assert p[0] == p[1] == 1.0
    assert phi[0] > phi[1] > phi[2] and np.isfinite(phi).all()
    assert phi[2] == pytest.approx(1.0 - np.log(2.0), rel=1e-5)
