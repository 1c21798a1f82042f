"""Membership inference against the model a task trained on the release (dp_vit's adversary).

Three attacks, each reported, on ``members`` training images against as many images of the
evaluated split (test; val when tuning), never trained on:

- ``loss``: the loss threshold (Yeom et al. 2018), a floor;
- ``lira``: LiRA (Carlini et al. 2022), online (reference models trained with and without
  each candidate, Gaussian fits of the logit-scaled confidence under IN and OUT) or
  offline (OUT models only, one-sided test), by the ``lira`` setting: online costs
  ``references`` models on half of pool + candidates each, per target;
- ``rmia``: RMIA (Zarifzadeh et al. 2024) with each candidate's OUT models, its factor
  ``a`` chosen by leave-one-reference-out on the adversary's own models
  (:func:`bench.privacy.mia.references.choose_rmia_a`) unless fixed by ``rmia_a``.

Reference models are trained by the task's own recipe on the adversary's data: half of the
``population`` split (disjoint from every training record), plus, online, the candidates.
The privacy score is the TPR at the lowest FPR the non-member count resolves
(:func:`bench.privacy.mia.lowfpr.scoring_fpr`; chance TPR = FPR), of whichever of LiRA and RMIA has
the higher TPR on the non-private model trained on clean images (the clean reference,
cached and shared); its standard error is binomial over the members. AUC and the
split-threshold epsilon bound stay reported. With ``canaries`` > 0, a one-run audit
(:mod:`attacks._membership_audit`) bounds the training's epsilon from below.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from bench.core.config import setting
from bench.core.interfaces import Attack, AttackOutcome, Release, RunContext
from bench.core.registry import register_attack
from bench.data.base import DataShape, ImageSet, Splits
from bench.errors import BenchError
from bench.privacy.mia import lira_offline_scores, membership_metrics
from bench.privacy.mia.lowfpr import MIN_FALSE_POSITIVES, coarse, scoring_fpr, tpr_with_se
from bench.privacy.mia.references import (
    LIRA_ONLINE_MIN_MODELS,
    choose_rmia_a,
    lira_online_scores,
    reference_keep,
    rmia_out_scores,
)
from bench.randomness.seeding import derive_seed, make_generator
from bench.storage.cache import warn

ATTACKS = ("loss", "lira", "rmia")
SCORING = ("lira", "rmia")
"""The calibrated attacks; the one of higher clean TPR sets the score."""


@dataclass(frozen=True)
class MembershipConfig:
    """Settings of the membership adversary (``attacks/presets/membership.yaml``).

    Attributes:
        members: Most member candidates (as many non-members); fewer when the data has
            fewer, reported as reduced.
        references: Reference models per attacked model (online: even, at least 4).
        lira: ``online`` or ``offline`` (see the module; recorded as ``lira_online``).
        population: Population samples z that RMIA compares each candidate with.
        rmia_a: RMIA's offline factor; None: chosen on the adversary's reference models.
        rmia_gamma: RMIA's likelihood-ratio threshold gamma.
        confidence: Confidence of the epsilon lower bounds.
        canaries: Canaries of the one-run audit (0: no audit).
        canary_kind: ``gradient`` (white-box gradient canaries in the training's noisy
            steps) or ``input`` (mislabelled images, scored by the trained model's loss).
    """

    members: int = setting(1000, low=10)
    references: int = setting(2, low=2, high=64)
    lira: str = setting("offline", choices=("online", "offline"))
    population: int = setting(1000, low=10)
    rmia_a: float | None = setting(None, low=0.0, high=1.0)
    rmia_gamma: float = setting(1.0, low=0.0, low_open=True)
    confidence: float = setting(0.95, low=0.5, high=0.999)
    canaries: int = setting(0, low=0)
    canary_kind: str = setting("gradient", choices=("gradient", "input"))


@register_attack("membership")
class Membership(Attack):
    """Loss, LiRA and RMIA membership inference on the task's trained model; TPR at a low FPR."""

    metrics: ClassVar[dict[str, bool]] = {"tpr": True, "tpr_clean": True, "chance": True, "auc": True,
                                          "auc_clean": True}
    primary: ClassVar[str] = "tpr"
    description = ("membership inference on the trained model: loss threshold, LiRA and RMIA (reference models on "
                   "the adversary's own data); TPR at a low FPR with its standard error, AUC, one-run canary audit")
    validation: ClassVar[bool] = True
    requires: ClassVar[str] = "trained_classifier"
    config_class: ClassVar[type] = MembershipConfig
    version: ClassVar[int] = 3

    def config_dict(self) -> dict[str, Any]:
        """Returns the resolved settings."""
        return asdict(self.config)

    def check_data(self, shape: DataShape | None, eval_split: str = "test") -> None:
        """Checks the reference models' count and that the data can serve the attack.

        Raises:
            BenchError: Online LiRA with an odd or too small model count, no population
                split, or one too small for its two halves.
        """
        cfg = self.config
        if cfg.lira == "online" and (cfg.references < LIRA_ONLINE_MIN_MODELS or cfg.references % 2):
            raise BenchError(f"attack 'membership': online LiRA needs an even number of at least "
                             f"{LIRA_ONLINE_MIN_MODELS} reference models (each candidate IN for half), got "
                             f"references={cfg.references}; set membership.lira=offline or more references")
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
        members, nonmembers = self._candidates(len(clean["train"]), len(clean[split]), ctx)
        pool, z_index = self._population(len(clean["population"]), ctx)
        fpr = scoring_fpr(len(nonmembers))
        if coarse(len(nonmembers)):
            warn(f"attack 'membership': {len(nonmembers)} non-members resolve no FPR of at most {fpr} with "
                 f"{MIN_FALSE_POSITIVES} false positives; the TPR at {fpr} is coarse")
        classes = class_count(clean)
        claim = task.training_claim(clean)
        delta = claim.delta if claim is not None else task.config.training.resolved_delta(len(clean["train"]))
        game = Game(members, nonmembers, pool, z_index, split, fpr, delta, cfg, ctx.seed)

        ctx.log(f"membership: target model and {cfg.references} {cfg.lira} reference models")
        on_release = game.play(task, released.splits, released.key, task.classifier(clean, released, ctx), True,
                               classes, ctx)
        ctx.log("membership: non-private model on clean images (the clean reference)")
        on_clean = game.play(task, clean, clean.fingerprint, task.classifier(clean, None, ctx), False, classes, ctx)
        metrics: dict[str, float] = {"chance": fpr, "fpr": fpr, "delta": float(delta),
                                     "lira_online": float(cfg.lira == "online"), "references": float(cfg.references),
                                     "members_requested": float(cfg.members), "members": float(len(members))}
        for name in ATTACKS:
            metrics.update({f"{name}.{k}": v for k, v in on_release[name].items()})
            metrics.update({f"{name}.{k}_clean": v for k, v in on_clean[name].items() if not k.startswith("n_")})
        strongest = max(SCORING, key=lambda a: on_clean[a]["tpr"])
        for name in SCORING:
            metrics[f"{name}.sets_score"] = float(name == strongest)
        got, ref = on_release[strongest], on_clean[strongest]
        metrics.update({"tpr": got["tpr"], "tpr_se": got["tpr_se"], "tpr_clean": ref["tpr"],
                        "tpr_se_clean": ref["tpr_se"], "auc": got["auc"], "auc_clean": ref["auc"]})
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

    def _population(self, n_population: int, ctx: RunContext) -> tuple[torch.Tensor, torch.Tensor]:
        """Splits the population into the reference models' pool and RMIA's z samples (disjoint halves)."""
        order = torch.randperm(n_population, generator=make_generator(ctx.seed, "membership", "population"))
        half = n_population // 2
        return order[:half].sort().values, order[half:][: self.config.population].sort().values


@dataclass(frozen=True)
class Game:
    """One membership game: who the candidates are, and how reference models are drawn.

    Attributes:
        members: Indices of the member candidates in the train split.
        nonmembers: Indices of the non-member candidates in the evaluated split.
        pool: Indices of the adversary's pool in the population split.
        z: Indices of RMIA's population samples (the other half).
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

    def play(self, task: Any, data: Splits, data_key: str, target: Any, private: bool, classes: int,
             ctx: RunContext) -> dict[str, dict[str, float]]:
        """Trains (or reuses) the reference models on ``data`` and returns each attack's metrics."""
        cfg, online = self.cfg, self.cfg.lira == "online"
        inside, outside = data["train"].subset(self.members), data[self.split].subset(self.nonmembers)
        pool = data["population"].subset(self.pool)
        union = concat([pool, inside, outside])
        rng = np.random.default_rng(derive_seed(self.seed, "membership", "keep", cfg.lira, cfg.references))
        keep = np.zeros((len(union), cfg.references), dtype=bool)
        if online:
            keep[:] = reference_keep(len(union), cfg.references, True, rng)
        else:
            keep[: len(pool)] = reference_keep(len(pool), cfg.references, False, rng)
        trained_on = [self.pool, self.members, self.nonmembers] if online else [self.pool]
        digest = hashlib.sha256(torch.cat(trained_on).numpy().tobytes()).hexdigest()[:16]
        subsets = [torch.from_numpy(np.flatnonzero(keep[:, k])) for k in range(cfg.references)]
        refs = task.reference_classifiers(union, f"{data_key}|{cfg.lira}|{digest}", private, subsets, classes, ctx)
        z = data["population"].subset(self.z)
        cand = slice(len(pool), len(union))
        t_p, t_phi = label_outputs(target, union.subset(cand))
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
            lira = lira_offline_scores(t_phi, r_phi[cand], scaled=True, log=True)
        chosen = choose_rmia_a(r_p, keep, rz_p, self.fpr, cfg.rmia_gamma) if cfg.rmia_a is None else None
        a = cfg.rmia_a if cfg.rmia_a is not None else (chosen["a"] if chosen else 0.3)
        rmia = rmia_out_scores(t_p, r_p[cand], ~keep[cand], tz_p, rz_p, a, cfg.rmia_gamma)
        out = {}
        for name, scores in (("loss", loss), ("lira", lira), ("rmia", rmia)):
            got = membership_metrics(scores[:n], scores[n:], delta=self.delta, seed=self.seed,
                                     confidence=cfg.confidence)
            out[name] = {k: float(v) for k, v in {**got, **tpr_with_se(scores[:n], scores[n:], self.fpr)}.items()}
        out["rmia"]["a"] = float(a)
        out["rmia"]["a_chosen"] = float(chosen is not None)
        return out


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
