"""Membership inference against the model a task trained on the release (dp_vit's adversary).

Three attacks, each reported, on ``members`` training images against as many images of the
evaluated split (test; val when tuning), never trained on:

- ``loss``: the loss threshold (Yeom et al. 2018), a floor;
- ``lira``: LiRA (Carlini et al. 2022), online (reference models trained with and without
  each candidate, Gaussian fits of the logit-scaled confidence under IN and OUT) or
  offline (OUT models only, one-sided test), by the ``lira`` setting;
- ``rmia``: RMIA (Zarifzadeh et al. 2024) with each candidate's OUT models, its factor
  ``a`` chosen by leave-one-reference-out on the adversary's own models unless fixed by
  ``rmia_a``.

Reference models are trained like the target, on as many records: by the task's own
recipe (the cell's training method against the cell's model, the non-private one against
the non-private model), each on half of the adversary's data, in complementary pairs
(:func:`bench.privacy.mia.references.paired_keep`). Offline, that data is a pool of twice
the target's training-set size from the ``population`` split (disjoint from every training
record); online, the pool plus the candidates, each IN for half of the models. RMIA's z
samples are other population images. The non-private side's reference models depend only
on the clean data and the seed, so they are cached and shared by every cell of a seed.

Which of LiRA and RMIA sets the privacy score is decided on the adversary's own models
(:func:`bench.privacy.mia.references.reference_games`: each non-private reference model in
turn plays the target, the others its references), never on the attacked members. The
privacy score is that attack's TPR at the lowest FPR the non-member count resolves
(:func:`bench.privacy.mia.lowfpr.scoring_fpr`; chance TPR = FPR) on the cell's model against
the non-private model trained on clean images; its standard error is a seeded bootstrap
over members and non-members that estimates the threshold again in every replicate, and
the clean TPR's significance an exact test that does the same
(:func:`bench.privacy.mia.lowfpr.tpr_with_se`). Every candidate's score under each attack,
with its membership label, is the cell's ``membership_scores.csv``. AUC and the
split-threshold epsilon bound stay reported. With ``canaries`` > 0, a one-run audit
(:mod:`attacks._membership_audit`) bounds the training's epsilon from below.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from attacks._membership_audit import model_view
from bench.core.config import setting
from bench.core.interfaces import Attack, AttackOutcome, Release, RunContext
from bench.core.registry import register_attack
from bench.data.base import DataShape, ImageSet, Splits
from bench.errors import BenchError
from bench.privacy.mia import membership_metrics
from bench.privacy.mia.lowfpr import (
    MIN_FALSE_POSITIVES,
    coarse,
    scoring_fpr,
    tpr_with_se,
)
from bench.privacy.mia.references import (
    CALIBRATED,
    Games,
    lira_offline_out_scores,
    lira_online_scores,
    paired_keep,
    reference_games,
    rmia_out_scores,
)
from bench.randomness.seeding import derive_seed, make_generator
from bench.storage.cache import warn

ATTACKS = ("loss", "lira", "rmia")
SCORING = CALIBRATED
"""The calibrated attacks; the one the adversary's own models prefer sets the score."""
OFFLINE_MIN_REFERENCES = 4
"""Offline: in a leave-one-out game on 2 paired models no non-member keeps an OUT model."""
ONLINE_MIN_REFERENCES = 6
"""Online: a leave-one-out game must leave every example 2 IN and 2 OUT models for LiRA's fits."""
SCORES_TABLE = "membership_scores"
"""The cell's table (CSV artifact) of every candidate's scores and membership label."""


@dataclass(frozen=True)
class MembershipConfig:
    """Settings of the membership adversary (``attacks/presets/membership.yaml``).

    Attributes:
        members: Most member candidates (as many non-members); fewer when the data has
            fewer, reported as reduced.
        references: Reference models per attacked model, in complementary pairs (even; at
            least 4 offline, 6 online).
        lira: ``online`` or ``offline`` (see the module; recorded as ``lira_online``).
        population: Population samples z that RMIA compares each candidate with.
        rmia_a: RMIA's offline factor; None: chosen on the adversary's reference models.
        rmia_gamma: RMIA's likelihood-ratio threshold gamma.
        confidence: Confidence of the epsilon lower bounds and of the TPR's interval.
        bootstrap: Bootstrap replicates of the TPR's standard error and interval.
        canaries: Canaries of the one-run audit (0: no audit).
        canary_kind: ``gradient`` (white-box gradient canaries in the training's noisy
            steps) or ``input`` (mislabelled images, scored by the trained model's loss).
    """

    members: int = setting(1000, low=10)
    references: int = setting(4, low=2, high=64)
    lira: str = setting("offline", choices=("online", "offline"))
    population: int = setting(1000, low=10)
    rmia_a: float | None = setting(None, low=0.0, high=1.0)
    rmia_gamma: float = setting(1.0, low=0.0, low_open=True)
    confidence: float = setting(0.95, low=0.5, high=0.999)
    bootstrap: int = setting(1000, low=100, high=100000)
    canaries: int = setting(0, low=0)
    canary_kind: str = setting("gradient", choices=("gradient", "input"))


@register_attack("membership")
class Membership(Attack):
    """Loss, LiRA and RMIA membership inference on the task's trained model; TPR at a low FPR."""

    metrics: ClassVar[dict[str, bool]] = {"tpr": True, "tpr_clean": True, "chance": True, "auc": True,
                                          "auc_clean": True}
    primary: ClassVar[str] = "tpr"
    description = ("membership inference on the trained model: loss threshold, LiRA and RMIA (reference models "
                   "trained like the target on the adversary's own data); TPR at a low FPR with a bootstrap "
                   "interval, AUC, per-candidate scores, one-run canary audit")
    validation: ClassVar[bool] = True
    requires: ClassVar[str] = "trained_classifier"
    config_class: ClassVar[type] = MembershipConfig
    version: ClassVar[int] = 4

    def config_dict(self) -> dict[str, Any]:
        """Returns the resolved settings."""
        return asdict(self.config)

    def check_data(self, shape: DataShape | None, eval_split: str = "test") -> None:
        """Checks the reference models' count and that the data can serve the attack.

        Raises:
            BenchError: An odd or too small model count, no population split, or one too
                small for its two halves.
        """
        cfg = self.config
        least = ONLINE_MIN_REFERENCES if cfg.lira == "online" else OFFLINE_MIN_REFERENCES
        if cfg.references < least or cfg.references % 2:
            why = ("each candidate IN for half, and 2 IN and 2 OUT left when one model plays the target"
                   if cfg.lira == "online" else
                   "complementary pairs, and OUT models left for both sides when one model plays the target")
            raise BenchError(f"attack 'membership': {cfg.lira} LiRA needs an even number of at least {least} "
                             f"reference models ({why}), got references={cfg.references}"
                             + ("; set membership.lira=offline or more references" if cfg.lira == "online" else ""))
        if shape is None:
            return
        if "population" not in shape:
            raise BenchError("attack 'membership': the dataset has no 'population' split (data disjoint from "
                             "the training records, for the reference models)")
        if shape["population"].images < 20:
            raise BenchError(f"attack 'membership': the population split has {shape['population'].images} images; "
                             "it needs at least 20 (half for reference models, half for RMIA's z samples)")

    def run(self, clean: Splits, released: Release, ctx: RunContext) -> AttackOutcome:
        """Attacks the model trained on the release, and the non-private one on clean images."""
        from attacks._membership_audit import audit_metrics, gradient_audit_metrics
        from tasks.class_metrics import class_count

        task = ctx.task
        if task is None or not hasattr(task, "classifier"):
            raise BenchError("attack 'membership' needs the cell's task to provide its trained classifier")
        cfg = self.config
        split = ctx.eval_split
        n_train = len(clean["train"])
        members, nonmembers = self._candidates(n_train, len(clean[split]), ctx)
        pool, z_index = self._population(len(clean["population"]), n_train, len(members), ctx)
        fpr = scoring_fpr(len(nonmembers))
        if coarse(len(nonmembers)):
            warn(f"attack 'membership': {len(nonmembers)} non-members resolve no FPR of at most {fpr} with "
                 f"{MIN_FALSE_POSITIVES} false positives; the TPR at {fpr} is coarse")
        classes = class_count(clean)
        claim = task.training_claim(clean)
        delta = claim.delta if claim is not None else task.config.training.resolved_delta(n_train)
        game = Game(members, nonmembers, pool, z_index, split, fpr, delta, cfg, ctx.seed)

        ctx.log(f"membership: target model and {cfg.references} {cfg.lira} reference models")
        on_release = game.play(task, released.splits, released.key, task.classifier(clean, released, ctx), True,
                               classes, ctx)
        ctx.log("membership: non-private model on clean images (the clean reference) and its reference models "
                "(shared by every cell of the seed)")
        on_clean = game.play(task, clean, clean.fingerprint, task.classifier(clean, None, ctx), False, classes, ctx)
        metrics: dict[str, float] = {"chance": fpr, "fpr": fpr, "delta": float(delta),
                                     "lira_online": float(cfg.lira == "online"), "references": float(cfg.references),
                                     "members_requested": float(cfg.members), "members": float(len(members)),
                                     "target_records": float(n_train),
                                     "reference_records": on_release.reference_records,
                                     "reference_records_clean": on_clean.reference_records,
                                     "bootstrap": float(cfg.bootstrap)}
        for name in ATTACKS:
            metrics.update({f"{name}.{k}": v for k, v in on_release.metrics[name].items()})
            metrics.update({f"{name}.{k}_clean": v for k, v in on_clean.metrics[name].items()
                            if not k.startswith("n_")})
        # the choice is made on the non-private reference models alone (the target's members are never looked at)
        strongest = on_clean.games.chosen
        for name in SCORING:
            metrics[f"{name}.sets_score"] = float(name == strongest)
        got, ref = on_release.metrics[strongest], on_clean.metrics[strongest]
        metrics.update({"tpr": got["tpr"], "tpr_se": got["tpr_se"], "tpr_low": got["tpr_low"],
                        "tpr_high": got["tpr_high"], "tpr_clean": ref["tpr"], "tpr_se_clean": ref["tpr_se"],
                        "tpr_low_clean": ref["tpr_low"], "tpr_high_clean": ref["tpr_high"], "auc": got["auc"],
                        "auc_clean": ref["auc"]})
        ctx.tables[SCORES_TABLE] = game.rows("release", on_release.scores) + game.rows("clean", on_clean.scores)
        kind = cfg.canary_kind
        if kind == "gradient" and claim is not None and task.config.training.clipping == "per_layer_median":
            warn("attack 'membership': gradient canaries cannot audit per_layer_median clipping (its noise scale "
                 "depends on the data); the one-run audit uses input canaries")
            kind = "input"
        if cfg.canaries and kind == "gradient":
            metrics.update(gradient_audit_metrics(task, clean, released, claim, delta, classes, cfg, ctx))
        elif cfg.canaries:
            metrics.update(audit_metrics(task, clean, released, claim is not None, classes, delta, cfg, ctx))
        return AttackOutcome(metrics, value=got["tpr"], clean=ref["tpr"], chance=fpr, trials=None,
                             pvalue=ref["tpr_pvalue"], value_se=got["tpr_se"], clean_se=ref["tpr_se"])

    def _candidates(self, n_train: int, n_eval: int, ctx: RunContext) -> tuple[torch.Tensor, torch.Tensor]:
        """Draws the members and non-members; warns when the data cannot meet ``members``."""
        count = min(self.config.members, n_train, n_eval)
        if count < self.config.members:
            warn(f"attack 'membership': {self.config.members} members asked, the data has {count} "
                 f"(train {n_train}, {ctx.eval_split} {n_eval}); reduced to {count} members and {count} non-members")
        members = torch.randperm(n_train, generator=make_generator(ctx.seed, "membership", "members"))[:count]
        nonmembers = torch.randperm(n_eval, generator=make_generator(ctx.seed, "membership", "nonmembers"))[:count]
        return members.sort().values, nonmembers.sort().values

    def _population(self, n_population: int, n_train: int, n_members: int,
                    ctx: RunContext) -> tuple[torch.Tensor, torch.Tensor]:
        """Splits the population into the reference models' pool and RMIA's z samples (disjoint).

        Each reference model trains on half of its data, which should be as many records as
        the target's: offline the pool needs ``2 n_train`` images, online ``2 (n_train -
        members)`` (the candidates make up the rest). z keeps at least
        ``min(population, n_population // 4)`` images; the pool takes what it needs of the
        rest, and anything left goes to z up to ``population``. A pool short of its need is
        reported (the reference models then train on fewer records than the target).
        """
        cfg = self.config
        online = cfg.lira == "online"
        need = 2 * max(n_train - n_members, 0) if online else 2 * n_train
        z_least = min(cfg.population, n_population // 4)
        take = min(need, n_population - z_least)
        z_count = min(cfg.population, n_population - take)
        if take < need:
            size = (take + 2 * n_members) // 2 if online else take // 2
            warn(f"attack 'membership': the population split has {n_population} images; reference models as large "
                 f"as the target ({n_train} records) need {need + z_least} ({need} for the "
                 f"{'pool' if not online else 'pool beside the candidates'} and {z_least} for RMIA's z samples); "
                 f"they train on about {size} records (give the population split more images: "
                 "task.data.n_population, or task.data.image_fractions for class folders)")
        order = torch.randperm(n_population, generator=make_generator(ctx.seed, "membership", "population"))
        return order[:take].sort().values, order[take: take + z_count].sort().values


@dataclass
class Played:
    """What one membership game gave on one model (the cell's, or the non-private one).

    Attributes:
        metrics: Attack -> its metrics.
        scores: Attack -> the candidates' scores, members first (as ``Game.members`` and
            ``Game.nonmembers``).
        games: LiRA and RMIA on the reference models alone, and the choice between them.
        reference_records: Mean training-set size of the reference models.
    """

    metrics: dict[str, dict[str, float]]
    scores: dict[str, np.ndarray]
    games: Games
    reference_records: float


@dataclass(frozen=True)
class Game:
    """One membership game: who the candidates are, and how reference models are drawn.

    Attributes:
        members: Indices of the member candidates in the train split.
        nonmembers: Indices of the non-member candidates in the evaluated split.
        pool: Indices of the adversary's pool in the population split.
        z: Indices of RMIA's population samples (disjoint from the pool).
        split: The evaluated split.
        fpr: The scoring FPR.
        delta: The delta of the epsilon bounds.
        cfg: The adversary's settings.
        seed: The run's seed.
    """

    members: torch.Tensor
    nonmembers: torch.Tensor
    pool: torch.Tensor
    z: torch.Tensor
    split: str
    fpr: float
    delta: float
    cfg: MembershipConfig
    seed: int

    def keep(self, pool_size: int) -> np.ndarray:
        """Who trains on what: bool [pool + candidates, references], complementary pairs (see the module)."""
        cfg, online = self.cfg, self.cfg.lira == "online"
        n = pool_size + 2 * len(self.members)
        rng = np.random.default_rng(derive_seed(self.seed, "membership", "paired-keep", cfg.lira, cfg.references))
        keep = np.zeros((n, cfg.references), dtype=bool)
        if online:
            keep[:] = paired_keep(n, cfg.references, rng)
        else:
            keep[:pool_size] = paired_keep(pool_size, cfg.references, rng)
        return keep

    def play(self, task: Any, data: Splits, data_key: str, target: Any, private: bool, classes: int,
             ctx: RunContext) -> Played:
        """Trains (or reuses) the reference models on ``data`` and returns each attack's metrics and scores."""
        cfg, online = self.cfg, self.cfg.lira == "online"
        inside, outside = data["train"].subset(self.members), data[self.split].subset(self.nonmembers)
        pool = data["population"].subset(self.pool)
        view = model_view(task)
        union = view(concat([pool, inside, outside]))  # resized once: every model sees the target's inputs
        inside = union.subset(torch.arange(len(pool), len(pool) + len(inside)))
        outside = union.subset(torch.arange(len(pool) + len(inside), len(union)))
        keep = self.keep(len(pool))
        trained_on = [self.pool, self.members, self.nonmembers] if online else [self.pool]
        digest = hashlib.sha256(torch.cat(trained_on).numpy().tobytes()).hexdigest()[:16]
        subsets = [torch.from_numpy(np.flatnonzero(keep[:, k])) for k in range(cfg.references)]
        refs = task.reference_classifiers(union, f"{data_key}|{cfg.lira}|paired|{digest}", private, subsets,
                                          classes, ctx)
        z = view(data["population"].subset(self.z))
        cand = slice(len(pool), len(union))
        t_p, t_phi = label_outputs(target, union.subset(torch.arange(len(pool), len(union))))
        tz_p, _ = label_outputs(target, z)
        outputs = [label_outputs(r, union) for r in refs]
        r_p, r_phi = (np.stack([o[i] for o in outputs], axis=1) for i in (0, 1))
        rz_p = np.stack([label_outputs(r, z)[0] for r in refs], axis=1)
        n = len(self.members)
        loss = -torch.cat([target.losses(inside.images, inside.labels),
                           target.losses(outside.images, outside.labels)]).cpu().numpy()
        if online:
            lira = lira_online_scores(t_phi, r_phi[cand], keep[cand])
        else:
            lira = lira_offline_out_scores(t_phi, r_phi[cand], ~keep[cand])
        # the games are played where the reference models' membership is known: the pool (and, online, the candidates)
        played = slice(0, len(union)) if online else slice(0, len(pool))
        games = reference_games(r_phi[played], r_p[played], keep[played], rz_p, self.fpr, online, cfg.rmia_gamma,
                                cfg.rmia_a)
        rmia = rmia_out_scores(t_p, r_p[cand], ~keep[cand], tz_p, rz_p, games.a, cfg.rmia_gamma)
        metrics, scores = {}, {}
        for name, values in (("loss", loss), ("lira", lira), ("rmia", rmia)):
            got = membership_metrics(values[:n], values[n:], delta=self.delta, seed=self.seed,
                                     confidence=cfg.confidence)
            interval = tpr_with_se(values[:n], values[n:], self.fpr,
                                   seed=derive_seed(self.seed, "membership", "bootstrap", name),
                                   replicates=cfg.bootstrap, confidence=cfg.confidence)
            metrics[name] = {k: float(v) for k, v in {**got, **interval}.items()}
            scores[name] = np.asarray(values, dtype=np.float64)
        for name in SCORING:
            metrics[name].update({"games_tpr": games.tpr[name], "games_auc": games.auc[name],
                                  "games": float(games.games[name])})
        metrics["rmia"]["a"] = float(games.a)
        metrics["rmia"]["a_chosen"] = float(games.a_chosen)
        records = float(keep[: len(union)].sum(axis=0).mean())
        return Played(metrics, scores, games, records)

    def rows(self, model: str, scores: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        """The scores table's rows of one model: one per candidate, members first.

        Columns: ``model`` (``release``: the cell's; ``clean``: the non-private one),
        ``split`` and ``index`` (the candidate's position in that split), ``member`` (1 or 0),
        then each attack's score (higher: member).
        """
        n = len(self.members)
        where = [("train", int(i)) for i in self.members.tolist()] + [(self.split, int(i))
                                                                     for i in self.nonmembers.tolist()]
        return [{"model": model, "split": split, "index": index, "member": int(k < n),
                 **{name: float(scores[name][k]) for name in ATTACKS}}
                for k, (split, index) in enumerate(where)]


def concat(sets: list[ImageSet]) -> ImageSet:
    """Returns the images and labels of several sets as one (attributes are not carried)."""
    return ImageSet(images=torch.cat([torch.as_tensor(s.images[:]) for s in sets]),
                    labels=torch.cat([s.labels for s in sets]))


def label_outputs(model: Any, images: ImageSet) -> tuple[np.ndarray, np.ndarray]:
    """Returns each image's probability of its label and LiRA's ``log(p / (1 - p))``, float64 [N] each.

    ``1 - p`` is the sum of the other classes' probabilities, so a float32 ``p`` that
    rounds to 1 still gives a finite, ordered value.
    """
    probs = model.probs(images.images).detach().cpu().double()
    labels = images.labels.long().cpu()[:, None]
    p = probs.gather(1, labels).squeeze(1)
    rest = probs.scatter(1, labels, 0.0).sum(dim=1)
    tiny = torch.finfo(torch.float64).tiny
    return p.numpy(), (torch.log(p.clamp_min(tiny)) - torch.log(rest.clamp_min(tiny))).numpy()
