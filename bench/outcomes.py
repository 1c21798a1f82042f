"""What an adversary achieved, and the privacy score it leaves a mechanism."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from bench import scores

__all__ = ["AttackOutcome", "privacy_score"]


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
        groups: The attack per demographic group (:func:`bench.groups.attack_groups`);
            with parts, each part's own ``groups``.
    """

    metrics: dict[str, float]
    value: float
    clean: float
    chance: float
    trials: int | None = None
    parts: Mapping[str, "AttackOutcome"] = field(default_factory=dict)
    pvalue: float | None = None
    groups: Mapping[str, Any] = field(default_factory=dict)

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


def privacy_score(value: float, clean: float, chance: float, trials: int | None = None) -> float | None:
    """Returns ``1 - clip((value - chance) / (clean - chance), 0, 1)``; None when undefined.

    See :func:`bench.scores.privacy_score`: the score is undefined (never 1.0) when the
    attack's advantage on clean images is not significantly above chance.
    """
    return scores.privacy_score(value, clean, chance, trials)
