"""What an adversary achieved, and the privacy score it leaves a mechanism."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from bench.core import scores

__all__ = ["AttackOutcome", "attack_errors", "imprecise_flags", "privacy_score", "privacy_score_se"]


@dataclass(frozen=True)
class AttackOutcome:
    """What an adversary achieved.

    An attack with several targets (one per attribute, say) reports each as a part; its
    privacy score is then the worst over the parts whose clean advantage is significant,
    and the others are flagged, never counted as protected.

    Attributes:
        metrics: All raw metrics (primary on release, on clean images, chance, extras).
        value: The primary metric on released images.
        clean: The primary metric on clean images.
        chance: The primary metric of a guess that ignores the images.
        trials: How many probes ``clean`` was measured on (for the significance test of
            its advantage over chance); None skips the test (only the sign is checked).
        pvalue: The attack's own p-value of its clean advantage (a Mann-Whitney test of
            an AUC, say), used instead of the binomial test on ``trials``.
        parts: Target name -> its own outcome; when present they define the score.
        groups: The attack per demographic group (:func:`bench.core.groups.attack_groups`);
            with parts, each part's own ``groups``.
        value_se: The standard error of ``value`` (binomial over probes, or a bootstrap);
            None: derived from ``trials`` where the metric is a fraction of them.
        clean_se: The standard error of ``clean``, as ``value_se``.
    """

    metrics: dict[str, float]
    value: float
    clean: float
    chance: float
    trials: int | None = None
    parts: Mapping[str, "AttackOutcome"] = field(default_factory=dict)
    pvalue: float | None = None
    groups: Mapping[str, Any] = field(default_factory=dict)
    value_se: float | None = None
    clean_se: float | None = None

    def scores(self) -> dict[str, float | None]:
        """Returns target -> privacy score (None: undefined); ``""`` names a single-target attack."""
        if self.parts:
            return {name: part.privacy() for name, part in self.parts.items()}
        return {"": scores.privacy_score(self.value, self.clean, self.chance, self.trials, pvalue=self.pvalue)}

    def privacy(self) -> float | None:
        """Returns the worst defined privacy score over the targets (DESIGN.md), or None."""
        return scores.worst(self.scores().values())

    def flags(self) -> dict[str, str]:
        """Returns target -> ``attack too weak`` for targets whose score is undefined."""
        return scores.undefined_flags(self.scores())

    def standard_errors(self) -> tuple[float | None, float | None]:
        """Returns the standard errors of ``value`` and ``clean`` (None: unknown).

        ``value_se`` and ``clean_se`` where the attack set them (a bootstrap, say); else the
        binomial error over ``trials``, where the metric is a fraction of them (an attack
        with its own ``pvalue``, an AUC's, is not, and must set its errors itself).
        """
        derive = self.pvalue is None
        value_se = self.value_se if self.value_se is not None else (
            scores.proportion_se(self.value, self.trials) if derive else None)
        clean_se = self.clean_se if self.clean_se is not None else (
            scores.proportion_se(self.clean, self.trials) if derive else None)
        return value_se, clean_se

    def decisive(self) -> "AttackOutcome":
        """Returns the outcome whose score is the attack's: the worst defined part, or itself."""
        defined = [(score, name) for name, score in self.scores().items() if score is not None and name]
        return self.parts[min(defined)[1]] if defined else self

    def interval(self) -> tuple[float, float] | None:
        """Returns the 95% interval of :meth:`privacy` (the decisive part's), or None where it is undefined.

        See :func:`bench.core.scores.score_interval` (the delta method; clipped scores, clipped intervals).
        """
        if self.privacy() is None:
            return None
        part = self.decisive()
        return scores.score_interval(part.value, part.clean, part.chance, *part.standard_errors())

    def privacy_se(self) -> float | None:
        """Returns the standard error of :meth:`privacy`: the decisive part's delta-method error, or None.

        See :func:`bench.core.scores.score_se`; it is the error of the unclipped score, never the
        width of the clipped interval (a score at 0 or 1 keeps its full error).
        """
        if self.privacy() is None:
            return None
        part = self.decisive()
        return scores.score_se(part.value, part.clean, part.chance, *part.standard_errors())

    def error_metrics(self, primary: str) -> dict[str, float]:
        """Returns ``<primary>_se``, ``<primary>_clean_se`` and ``privacy_se`` (and each part's), where known.

        Args:
            primary: Name of the attack's primary metric.
        """
        value_se, clean_se = self.standard_errors()
        out = {f"{primary}_se": value_se, f"{primary}_clean_se": clean_se, "privacy_se": self.privacy_se()}
        for name, part in self.parts.items():
            out[f"privacy_se.{name}"] = part.privacy_se()
        return {name: float(value) for name, value in out.items() if value is not None}


def attack_errors(outcomes: Mapping[str, AttackOutcome], primaries: Mapping[str, str]) -> dict[str, dict[str, float]]:
    """Returns attack name -> its metrics with their standard errors (:meth:`AttackOutcome.error_metrics`).

    Args:
        outcomes: Attack name -> its outcome.
        primaries: Attack name -> the name of its primary metric.
    """
    return {name: {**o.metrics, **o.error_metrics(primaries[name])} for name, o in outcomes.items()}


def privacy_score_se(outcomes: Mapping[str, AttackOutcome]) -> float | None:
    """Returns the standard error of a cell's privacy score: the worst attack's (the one that sets it), or None."""
    defined = [(o.privacy(), name) for name, o in outcomes.items() if o.privacy() is not None]
    return outcomes[min(defined)[1]].privacy_se() if defined else None


def imprecise_flags(outcomes: Mapping[str, AttackOutcome], width: float = scores.IMPRECISE_WIDTH) -> dict[str, str]:
    """Returns attack name -> ``imprecise (...)`` for each defined score whose 95% interval is wider than ``width``."""
    flags = {name: scores.imprecise_flag(o.interval(), width) for name, o in outcomes.items()}
    return {name: flag for name, flag in flags.items() if flag}


def privacy_score(value: float, clean: float, chance: float, trials: int | None = None) -> float | None:
    """Returns ``1 - clip((value - chance) / (clean - chance), 0, 1)``; None when undefined.

    See :func:`bench.core.scores.privacy_score`: the score is undefined (never 1.0) when the
    attack's advantage on clean images is not significantly above chance.
    """
    return scores.privacy_score(value, clean, chance, trials)
