"""The membership adversary at the field's strength (issue 56): the TPR's bootstrap interval, the
choice between LiRA and RMIA on the adversary's reference models only, and the per-candidate
scores artefact; on synthetic scores and on a fake task whose models are tables (no training)."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy import stats

from attacks.membership import SCORES_TABLE, Membership
from bench.core.interfaces import Release, RunContext
from bench.core.splits import Splits
from bench.data.base import ImageSet
from bench.errors import BenchError
from bench.privacy.mia import tpr_at_fpr
from bench.privacy.mia.lowfpr import bootstrap_tpr, tpr_pvalue, tpr_with_se
from bench.privacy.mia.references import (
    lira_offline_out_scores,
    paired_keep,
    reference_games,
)
from bench.privacy.mia.scores import lira_offline_scores

# ----------------------------------------------------------------- the TPR's interval


def test_the_bootstrap_interval_covers_a_known_tpr_where_the_binomial_one_does_not():
    # members N(2, 1), non-members N(0, 1): the TPR at 1% FPR is 1 - Phi(z_0.99 - 2) = 0.372. At 1% the
    # threshold's estimation dominates (the ROC's slope there is about 14), which a binomial error ignores.
    rng = np.random.default_rng(0)
    truth = stats.norm.sf(stats.norm.isf(0.01) - 2.0)
    covered = {"bootstrap": 0, "percentile": 0, "binomial": 0}
    draws = 100
    for i in range(draws):
        members, nonmembers = rng.normal(2.0, 1.0, 1000), rng.normal(0.0, 1.0, 1000)
        got = tpr_with_se(members, nonmembers, 0.01, seed=i, replicates=200)
        covered["bootstrap"] += abs(got["tpr"] - truth) <= 1.96 * got["tpr_se"]
        covered["percentile"] += got["tpr_low"] <= truth <= got["tpr_high"]
        covered["binomial"] += abs(got["tpr"] - truth) <= 1.96 * got["tpr_se_binomial"]
    assert covered["bootstrap"] / draws >= 0.88 and covered["percentile"] / draws >= 0.88
    assert covered["binomial"] / draws <= 0.75


def test_the_bootstrap_is_seeded_and_its_replicates_estimate_the_threshold_again():
    rng = np.random.default_rng(1)
    members, nonmembers = rng.normal(1.0, 1.0, 300), rng.normal(0.0, 1.0, 300)
    one = bootstrap_tpr(members, nonmembers, 0.1, replicates=300, seed=5)
    assert one == bootstrap_tpr(members, nonmembers, 0.1, replicates=300, seed=5)
    assert one != bootstrap_tpr(members, nonmembers, 0.1, replicates=300, seed=6)
    # non-members all equal: the threshold cannot move, and the error is the members' binomial one alone
    flat = bootstrap_tpr(members, np.zeros(300), 0.1, replicates=2000, seed=5)
    share = float(np.mean(members > 0))
    assert flat["tpr_se"] == pytest.approx(math.sqrt(share * (1 - share) / 300), rel=0.1)
    # a threshold estimated from varying non-members adds its own error
    assert one["tpr_se"] > 1.3 * tpr_with_se(members, nonmembers, 0.1)["tpr_se_binomial"]
    assert math.isnan(bootstrap_tpr(members, nonmembers[:5], 0.1)["tpr_se"])


@pytest.mark.parametrize("seed", range(5))
def test_each_replicate_counts_as_tpr_at_fpr_does(seed):
    from bench.privacy.mia.lowfpr import _tp_counts

    rng = np.random.default_rng(seed)
    members = rng.integers(0, 6, 40).astype(float)  # ties inside and across the two sides
    nonmembers = rng.integers(0, 6, 50).astype(float)
    for fpr in (0.02, 0.1, 0.3, 1.0):
        allowed = math.floor(fpr * 50 + 1e-9)
        assert _tp_counts(members[None], nonmembers[None], allowed)[0] / 40 == tpr_at_fpr(members, nonmembers, fpr)


def test_the_exact_p_value_holds_its_level_under_the_null_where_the_binomial_one_does_not():
    rng = np.random.default_rng(2)
    exact, binomial = [], []
    for _ in range(400):
        members, nonmembers = rng.normal(size=100), rng.normal(size=100)
        flagged = int(round(tpr_at_fpr(members, nonmembers, 0.1) * 100))
        exact.append(tpr_pvalue(flagged, 100, 100, 0.1))
        binomial.append(stats.binomtest(flagged, 100, 0.1, alternative="greater").pvalue)
    assert np.mean(np.array(exact) <= 0.05) <= 0.07
    assert np.mean(np.array(binomial) <= 0.05) > np.mean(np.array(exact) <= 0.05)


# ----------------------------------------------------------------- reference models drawn like the target


def test_paired_reference_models_each_train_on_half_and_every_example_is_in_for_half():
    keep = paired_keep(401, 6, np.random.default_rng(0))
    assert (keep.sum(axis=1) == 3).all()
    assert set(keep.sum(axis=0).tolist()) <= {200, 201}
    assert (keep[:, 0] ^ keep[:, 1]).all()  # a pair splits the pool
    with pytest.raises(ValueError):
        paired_keep(10, 3, np.random.default_rng(0))


def test_lira_with_each_candidates_out_models_is_plain_offline_lira_when_all_are_out():
    rng = np.random.default_rng(3)
    target, refs = rng.normal(size=50), rng.normal(size=(50, 4))
    everyone = lira_offline_out_scores(target, refs, np.ones((50, 4), dtype=bool))
    assert everyone == pytest.approx(lira_offline_scores(target, refs, scaled=True, log=True))
    out = np.ones((50, 4), dtype=bool)
    out[:25, 0] = False  # model 0 trained on the first 25: their fit leaves it out
    got = lira_offline_out_scores(target, refs, out)
    mean = refs[:25, 1:].mean(axis=1)
    var = np.mean(np.r_[refs[:25, 1:].var(axis=1, ddof=1), refs[25:].var(axis=1, ddof=1)])
    assert got[:25] == pytest.approx(stats.norm.logcdf((target[:25] - mean) / math.sqrt(var)))


@pytest.mark.parametrize("lira,references,ok", [("offline", 2, False), ("offline", 4, True), ("offline", 5, False),
                                                ("online", 4, False), ("online", 6, True)])
def test_too_few_or_unpaired_reference_models_are_refused_before_any_work(lira, references, ok):
    attack = Membership("smoke", {"lira": lira, "references": references})
    if ok:
        attack.check_data(None)
    else:
        with pytest.raises(BenchError, match="even number of at least"):
            attack.check_data(None)


# ----------------------------------------------------------------- a fake task whose models are tables

N_TRAIN, N_TEST, N_POP, K = 100, 100, 500, 4
IDS = {"train": np.arange(N_TRAIN), "test": N_TRAIN + np.arange(N_TEST),
       "population": N_TRAIN + N_TEST + np.arange(N_POP)}
TOTAL = N_TRAIN + N_TEST + N_POP


def _images(ids: np.ndarray) -> ImageSet:
    """Images that carry their id in two pixels (id = c0 + 256 c1); labels alternate 0 / 1."""
    images = torch.zeros(len(ids), 3, 2, 2, dtype=torch.uint8)
    images[:, 0, 0, 0] = torch.from_numpy(ids % 256).to(torch.uint8)
    images[:, 1, 0, 0] = torch.from_numpy(ids // 256).to(torch.uint8)
    return ImageSet(images=images, labels=torch.from_numpy(ids % 2))


def _ids(images: torch.Tensor) -> np.ndarray:
    return (images[:, 0, 0, 0].long() + 256 * images[:, 1, 0, 0].long()).numpy()


class _TableModel:
    """A classifier whose logit-scaled confidence of each image's label is ``phi[id]``."""

    def __init__(self, phi: np.ndarray):
        self.phi = phi

    def probs(self, images: torch.Tensor) -> torch.Tensor:
        ids = _ids(images)
        p = torch.from_numpy(1.0 / (1.0 + np.exp(-self.phi[ids])))
        label = torch.from_numpy(ids % 2)
        out = torch.stack([1.0 - p, p], dim=1)
        return torch.where(label[:, None] == 1, out, out.flip(1))

    def losses(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        p = self.probs(images).gather(1, labels.long()[:, None]).squeeze(1)
        return -torch.log(p)


class _World:
    """Reference models on which LiRA wins, and a target on which RMIA would win.

    Every image has a difficulty ``mu`` (its logit-scaled confidence when not trained on),
    spread over [-2, 9] in the population, so many are saturated (p > 0.99). A reference
    model raises its members' confidence by 1 in logit space, with noise 0.3: LiRA, which
    calibrates per image in logit space, sees that on easy and hard images alike; RMIA,
    which compares probabilities, hardly sees it on saturated ones. The target is built the
    other way round: its members are hard images (mu = 0) raised by 1.5, which both attacks
    see; its non-members are easy images (mu = 7) raised by 4 in logit space, a tiny change
    of probability that RMIA ignores and LiRA takes for the strongest members.
    """

    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.mu = rng.uniform(-2.0, 9.0, TOTAL)
        self.mu[IDS["train"]] = 0.0
        self.mu[IDS["test"]] = 7.0
        self.noise = rng.normal(0.0, 0.3, (64, TOTAL))
        target = self.mu + rng.normal(0.0, 0.3, TOTAL)
        target[IDS["train"]] += 1.5
        target[IDS["test"]] += 4.0
        self.target = _TableModel(target)
        self.trained_on: list[np.ndarray] = []


class _FakeTask:
    """The parts of dp_vit the membership adversary calls, with table models."""

    def __init__(self, world: _World):
        self.world = world
        self.config = SimpleNamespace(training=SimpleNamespace(resolved_delta=lambda n: 1e-3))

    def classifier(self, clean, released, ctx):
        return self.world.target

    def training_claim(self, clean):
        return None

    def reference_classifiers(self, images, data_key, private, subsets, classes, ctx):
        ids = _ids(images.images)
        models = []
        for k, index in enumerate(subsets):
            inside = np.zeros(TOTAL, dtype=bool)
            inside[ids[index.numpy()]] = True
            self.world.trained_on.append(ids[index.numpy()])
            models.append(_TableModel(self.world.mu + 1.0 * inside + self.world.noise[k]))
        return models


def _run(tmp_path: Path, **settings):
    world = _World()
    splits = Splits("fake", {name: _images(ids) for name, ids in IDS.items()}, fingerprint="fake")
    released = Release(splits=splits, mechanism="identity", params={}, seed=0, key="fake-release")
    ctx = RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=None, cache_dir=tmp_path,
                     task=_FakeTask(world))
    attack = Membership("smoke", {"members": N_TRAIN, "references": K, "population": 100, "canaries": 0,
                                  "bootstrap": 200, **settings})
    return attack.run(splits, released, ctx), ctx, world


def test_the_attack_that_sets_the_score_is_chosen_on_the_reference_models_not_on_the_target(tmp_path):
    outcome, _, world = _run(tmp_path)
    m = outcome.metrics
    # on the adversary's own models LiRA wins every game ...
    assert m["lira.games_tpr_clean"] > m["rmia.games_tpr_clean"] + 0.05 and m["lira.games_clean"] == K
    # ... so LiRA sets the score, although on the target's members RMIA is far stronger (choosing on them
    # would have picked RMIA and reported its TPR as the clean reference: the winner's curse)
    assert m["rmia.tpr_clean"] > m["lira.tpr_clean"] + 0.3
    assert m["lira.sets_score"] == 1.0 and m["rmia.sets_score"] == 0.0
    assert m["tpr_clean"] == m["lira.tpr_clean"] and outcome.clean == m["lira.tpr_clean"]
    assert outcome.clean_se == m["lira.tpr_se_clean"] == m["tpr_se_clean"]
    # every reference model trained on as many records as the target: half of a pool of twice its size
    assert m["reference_records"] == m["target_records"] == N_TRAIN
    assert all(len(ids) == N_TRAIN and np.isin(ids, IDS["population"]).all() for ids in world.trained_on)


def test_the_choice_does_not_move_when_the_targets_members_change(tmp_path):
    first, _, _ = _run(tmp_path)
    games = {k: v for k, v in first.metrics.items() if "games" in k or k == "rmia.a_clean"}
    # the same references, a target on which LiRA wins: the reference games and the choice stay as they were
    world2 = _World()
    world2.target.phi[IDS["test"]] = world2.mu[IDS["test"]]
    splits = Splits("fake", {name: _images(ids) for name, ids in IDS.items()}, fingerprint="fake")
    released = Release(splits=splits, mechanism="identity", params={}, seed=0, key="fake-release")
    ctx = RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=None, cache_dir=tmp_path,
                     task=_FakeTask(world2))
    attack = Membership("smoke", {"members": N_TRAIN, "references": K, "population": 100, "canaries": 0,
                                  "bootstrap": 200})
    second = attack.run(splits, released, ctx).metrics
    assert {k: second[k] for k in games} == games and second["lira.sets_score"] == 1.0


def test_the_scores_artefact_lists_every_candidate_with_its_label(tmp_path):
    outcome, ctx, _ = _run(tmp_path)
    rows = ctx.tables[SCORES_TABLE]
    assert len(rows) == 2 * (N_TRAIN + N_TEST)
    for model in ("release", "clean"):
        mine = [r for r in rows if r["model"] == model]
        members = [r for r in mine if r["member"] == 1]
        assert sorted(r["index"] for r in members) == list(range(N_TRAIN)) and {r["split"] for r in members} == {"train"}
        others = [r for r in mine if r["member"] == 0]
        assert sorted(r["index"] for r in others) == list(range(N_TEST)) and {r["split"] for r in others} == {"test"}
        assert all(set(r) == {"model", "split", "index", "member", "loss", "lira", "rmia"} for r in mine)
    # the scores recompute the reported TPRs
    clean = [r for r in rows if r["model"] == "clean"]
    for attack in ("loss", "lira", "rmia"):
        s = np.array([r[attack] for r in clean])
        label = np.array([r["member"] for r in clean]) == 1
        assert tpr_at_fpr(s[label], s[~label], 0.1) == outcome.metrics[f"{attack}.tpr_clean"]


def test_the_reference_games_choose_rmia_a_on_games_it_is_not_scored_on():
    rng = np.random.default_rng(4)
    n, k = 400, 4
    keep = paired_keep(n, k, rng)
    base = rng.beta(2, 2, n)
    probs = np.clip(base[:, None] + np.where(keep, 0.25, 0.0) + rng.normal(0, 0.05, (n, k)), 1e-6, 1 - 1e-6)
    phi = np.log(probs) - np.log1p(-probs)
    probs_z = np.clip(rng.beta(2, 2, 200)[:, None] + rng.normal(0, 0.05, (200, k)), 1e-6, 1 - 1e-6)
    games = reference_games(phi, probs, keep, probs_z, 0.1, online=False)
    assert games.games == {"lira": k, "rmia": k} and games.a_chosen and games.chosen in ("lira", "rmia")
    fixed = reference_games(phi, probs, keep, probs_z, 0.1, online=False, a=0.3)
    assert fixed.a == 0.3 and not fixed.a_chosen and fixed.tpr["lira"] == games.tpr["lira"]
    # RMIA's mean game TPR with a nested choice is at most the best a's mean on the same games
    best = reference_games(phi, probs, keep, probs_z, 0.1, online=False, a=games.a)
    assert games.tpr["rmia"] <= best.tpr["rmia"] + 1e-12


def test_the_pool_gives_each_reference_model_as_many_records_as_the_target_or_says_why_not(tmp_path, capsys):
    ctx = RunContext(device=torch.device("cpu"), seed=0, profile="quick", data_root=None, cache_dir=tmp_path)
    offline = Membership("quick", {"population": 1000})
    pool, z = offline._population(3000, 1000, 1000, ctx)
    assert (len(pool), len(z)) == (2000, 1000) and not set(pool.tolist()) & set(z.tolist())
    assert capsys.readouterr().err == ""
    # the shipped quick profile before issue 56: 2,000 population images for a target of 2,000 records
    pool, z = offline._population(2000, 2000, 1000, ctx)
    assert (len(pool), len(z)) == (1500, 500)
    err = capsys.readouterr().err
    assert "need 4500" in err and "about 750 records" in err and "task.data.n_population" in err
    online = Membership("paper", {"members": 5000, "population": 5000})
    pool, z = online._population(45000, 25000, 5000, ctx)  # online: the candidates are half the models' records
    assert (len(pool), len(z)) == (40000, 5000) and capsys.readouterr().err == ""
