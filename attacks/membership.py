"""Membership inference against the model a task trained on the release (dp_vit's adversary).

Two attacks, reported side by side as parts of one adversary, the privacy score being the
worse of the two (the strongest attack sets privacy):

- ``loss``: the loss-threshold attack (Yeom et al. 2018), a floor;
- ``rmia``: RMIA offline (Zarifzadeh et al. 2024) with reference models trained by the
  task's own recipe on the adversary's population data, which is disjoint from every
  training record; the candidates' and the population samples' likelihood ratios are
  compared (:func:`bench.mia.rmia_scores`).

Candidates are ``members`` images of the training split and as many of the evaluated split
(test; val when tuning), never trained on. The score's chance is AUC 0.5 and its clean
reference is the same attack on the non-private model trained on clean images with
non-private reference models (cached, shared by every mechanism and method); an advantage
is significant by a one-sided Mann-Whitney test. Reported per attack: AUC, TPR at 0.1% and
1% FPR (Carlini et al. 2022) and the epsilon lower bound the attack demonstrates at the
run's delta (threshold chosen on one half of the candidates, bounded on the other).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch

from bench.config import setting
from bench.datasets.base import DataShape, ImageSet, Splits
from bench.errors import BenchError
from bench.interfaces import Attack, AttackOutcome, Release, RunContext
from bench.mia import membership_metrics, rmia_scores
from bench.registry import register_attack
from bench.seeding import make_generator

ATTACKS = ("loss", "rmia")


@dataclass(frozen=True)
class MembershipConfig:
    """Settings of the membership adversary (``attacks/presets/membership.yaml``).

    Attributes:
        members: Most member candidates (as many non-members are drawn).
        references: Reference models of RMIA (1 or 2: the offline setting).
        reference_size: Images each reference model trains on (None: as many as the
            target's training set, at most the population's half).
        population: Population samples z that RMIA compares each candidate with.
        rmia_a: RMIA's offline approximation factor ``a`` (the paper tunes it on
            reference models; 0.2-0.3 on CIFAR-10).
        rmia_gamma: RMIA's likelihood-ratio threshold gamma.
        confidence: Confidence of the epsilon lower bound.
    """

    members: int = setting(1000, low=10)
    references: int = setting(2, low=1, high=8)
    reference_size: int | None = setting(None, low=10)
    population: int = setting(1000, low=10)
    rmia_a: float = setting(0.3, low=0.0, high=1.0)
    rmia_gamma: float = setting(1.0, low=0.0, low_open=True)
    confidence: float = setting(0.95, low=0.5, high=0.999)


@register_attack("membership")
class Membership(Attack):
    """Loss-threshold and RMIA membership inference on the task's trained model; AUC, TPR at low FPR."""

    metrics: ClassVar[dict[str, bool]] = {"auc": True, "auc_clean": True, "chance": True}
    primary: ClassVar[str] = "auc"
    description = ("membership inference on the trained model: loss threshold and RMIA (reference models on "
                   "disjoint population data); AUC, TPR at 0.1%/1% FPR, epsilon lower bound")
    validation: ClassVar[bool] = True
    requires: ClassVar[str] = "trained_classifier"
    config_class: ClassVar[type] = MembershipConfig

    def config_dict(self) -> dict[str, Any]:
        """Returns the resolved settings."""
        return asdict(self.config)

    def check_data(self, shape: DataShape | None, eval_split: str = "test") -> None:
        """Checks that the population can serve the reference models and the z samples.

        Raises:
            BenchError: No population split, or one too small for its two halves.
        """
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
        from tasks.class_metrics import class_count

        task = ctx.task
        if task is None or not hasattr(task, "classifier"):
            raise BenchError("attack 'membership' needs the cell's task to provide its trained classifier")
        cfg = self.config
        split = ctx.eval_split
        members, nonmembers = self._candidates(len(clean["train"]), len(clean[split]), ctx)
        ref_index, z_index = self._population(len(clean["population"]), len(clean["train"]), ctx)
        classes = class_count(clean)
        claim = task.training_claim(clean)
        delta = claim.delta if claim is not None else task.config.training.resolved_delta(len(clean["train"]))

        def measure(data: Splits, data_key: str, target: Any, private: bool) -> dict[str, dict[str, float]]:
            refs = task.reference_classifiers(data["population"], data_key, private, ref_index, classes, ctx)
            inside, outside = data["train"].subset(members), data[split].subset(nonmembers)
            z = data["population"].subset(z_index)
            return attack_scores(target, refs, inside, outside, z, cfg, delta, ctx.seed)

        ctx.log("membership: target model and its reference models")
        on_release = measure(released.splits, released.key, task.classifier(clean, released, ctx), True)
        ctx.log("membership: non-private model on clean images (the clean reference)")
        on_clean = measure(clean, clean.fingerprint, task.classifier(clean, None, ctx), False)
        parts, metrics = {}, {"chance": 0.5, "delta": float(delta)}
        for name in ATTACKS:
            got, ref = on_release[name], on_clean[name]
            part_metrics = {**{f"{name}.{k}": v for k, v in got.items()},
                            **{f"{name}.{k}_clean": v for k, v in ref.items() if not k.startswith("n_")}}
            metrics.update(part_metrics)
            parts[name] = AttackOutcome(part_metrics, value=got["auc"], clean=ref["auc"], chance=0.5,
                                        trials=None, pvalue=ref["auc_pvalue"])
        strongest = max(ATTACKS, key=lambda a: on_release[a]["auc"])
        metrics.update({"auc": on_release[strongest]["auc"], "auc_clean": on_clean[strongest]["auc"]})
        return AttackOutcome(metrics, value=metrics["auc"], clean=metrics["auc_clean"], chance=0.5, parts=parts)

    def _candidates(self, n_train: int, n_eval: int, ctx: RunContext) -> tuple[torch.Tensor, torch.Tensor]:
        count = min(self.config.members, n_train, n_eval)
        members = torch.randperm(n_train, generator=make_generator(ctx.seed, "membership", "members"))[:count]
        nonmembers = torch.randperm(n_eval, generator=make_generator(ctx.seed, "membership", "nonmembers"))[:count]
        return members.sort().values, nonmembers.sort().values

    def _population(self, n_population: int, n_train: int, ctx: RunContext) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Splits the population into the reference models' half and RMIA's z samples (disjoint)."""
        order = torch.randperm(n_population, generator=make_generator(ctx.seed, "membership", "population"))
        half = n_population // 2
        pool, z = order[:half], order[half:][: self.config.population]
        size = min(self.config.reference_size or n_train, len(pool))
        subsets = []
        for r in range(self.config.references):
            pick = torch.randperm(len(pool), generator=make_generator(ctx.seed, "membership", "reference", r))[:size]
            subsets.append(pool[pick].sort().values)
        return subsets, z.sort().values


def attack_scores(target: Any, refs: list[Any], inside: ImageSet, outside: ImageSet, z: ImageSet,
                  cfg: MembershipConfig, delta: float, seed: int) -> dict[str, dict[str, float]]:
    """Returns attack name -> its membership metrics (:func:`bench.mia.membership_metrics`).

    Args:
        target: The attacked classifier (``probs``, ``losses``).
        refs: Reference classifiers trained on population data.
        inside: Member candidates (training records of ``target``).
        outside: Non-member candidates.
        z: Population samples for RMIA.
        cfg: The adversary's settings.
        delta: The delta of the epsilon lower bound.
        seed: Seeds the split of candidates that chooses the bound's threshold.
    """
    loss = (-target.losses(inside.images, inside.labels), -target.losses(outside.images, outside.labels))

    def label_probs(model: Any, images: ImageSet) -> torch.Tensor:
        probs = model.probs(images.images)
        return probs.gather(1, images.labels.to(probs.device)[:, None]).squeeze(1).cpu()

    candidates = [inside, outside]
    p_target = [label_probs(target, c) for c in candidates]
    p_refs = [torch.stack([label_probs(r, c) for r in refs], dim=1) for c in candidates]
    p_target_z, p_refs_z = label_probs(target, z), torch.stack([label_probs(r, z) for r in refs], dim=1)
    rmia = [rmia_scores(p_target[i], p_refs[i], p_target_z, p_refs_z, a=cfg.rmia_a, gamma=cfg.rmia_gamma)
            for i in range(2)]
    out = {}
    for name, (s_in, s_out) in (("loss", loss), ("rmia", rmia)):
        out[name] = {k: float(v) for k, v in membership_metrics(
            torch.as_tensor(s_in).cpu().numpy(), torch.as_tensor(s_out).cpu().numpy(), delta=delta, seed=seed,
        ).items()}
    return out
