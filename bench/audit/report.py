"""The outcome of one audit and its printed table."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.audit.maths import trials_to_demonstrate
from bench.interfaces import PrivacyClaim


@dataclass(frozen=True)
class AuditReport:
    """What an audit of one mechanism configuration found.

    A mechanism without a claim has nothing to audit: ``claim`` is None, no trial ran
    and the numbers are None; it passes.

    Attributes:
        mechanism: Registered mechanism name.
        params: Its resolved parameters.
        claim: The audited claim, or None.
        neighbours: The two neighbouring inputs, in words.
        trials: Counted trials per input.
        selection_trials: Further trials per input that chose the test (never counted).
        confidence: Joint confidence of the lower bound.
        seed: Base seed of the trials.
        device: Where the mechanism ran.
        test: The distinguishing test chosen on the selection trials.
        false_positives: Counted trials of the first input the test called the second.
        false_negatives: Counted trials of the second input the test called the first.
        fpr_upper: Clopper-Pearson upper bound on the false-positive rate.
        fnr_upper: Clopper-Pearson upper bound on the false-negative rate.
        epsilon_lower_bound: The epsilon the counted trials show at ``confidence``.
        max_demonstrable_epsilon: The largest bound ``trials`` trials can give (no errors).
        runtime_s: Wall-clock seconds of the audit.
    """

    mechanism: str
    params: dict[str, Any]
    claim: PrivacyClaim | None
    neighbours: str = ""
    trials: int = 0
    selection_trials: int = 0
    confidence: float = 0.95
    seed: int = 0
    device: str = "cpu"
    test: str = ""
    false_positives: int | None = None
    false_negatives: int | None = None
    fpr_upper: float | None = None
    fnr_upper: float | None = None
    epsilon_lower_bound: float | None = None
    max_demonstrable_epsilon: float | None = None
    runtime_s: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        """Whether the lower bound does not exceed the claimed epsilon (True without a claim)."""
        if self.claim is None or self.epsilon_lower_bound is None:
            return True
        return self.epsilon_lower_bound <= self.claim.epsilon

    def summary(self) -> str:
        """Returns one line: the verdict with the bound and the claim."""
        if self.claim is None:
            return f"{self.mechanism} makes no formal claim: nothing to audit"
        verdict = "PASS" if self.passed else "FAIL"
        relation = "<=" if self.passed else "exceeds"
        return (f"{verdict}: epsilon lower bound {self.epsilon_lower_bound:.4g} {relation} claimed epsilon "
                f"{self.claim.epsilon:g} [{self.claim.unit}] ({self.trials} trials per input, "
                f"{self.confidence:g} confidence)")

    def reach_note(self) -> str | None:
        """Returns a warning when the claim is beyond what the trials can show, else None."""
        if self.claim is None or self.max_demonstrable_epsilon is None:
            return None
        if self.max_demonstrable_epsilon >= self.claim.epsilon:
            return None
        needed = trials_to_demonstrate(self.claim.epsilon, self.claim.delta, self.confidence)
        more = f"at least {int(needed)} trials" if math.isfinite(needed) else "more trials than any audit can run"
        return (f"{self.trials} trials can show at most epsilon {self.max_demonstrable_epsilon:.3g}, below the "
                f"claim: this audit cannot detect a violation of it (that takes {more} per input)")

    def format(self) -> str:
        """Returns the printed table."""
        params = ", ".join(f"{k}={v}" for k, v in self.params.items())
        head = f"audit of {self.mechanism}" + (f" ({params})" if params else "")
        if self.claim is None:
            return self.summary()
        n = self.trials
        rows = [
            ("claim", str(self.claim)),
            ("neighbouring inputs", self.neighbours),
            ("trials", f"{n} per input counted; {self.selection_trials} more per input chose the test"),
            ("test", f"second input when {self.test}"),
            ("false positives", f"{self.false_positives} of {n} (rate <= {self.fpr_upper:.4g})"),
            ("false negatives", f"{self.false_negatives} of {n} (rate <= {self.fnr_upper:.4g})"),
            ("epsilon lower bound", f"{self.epsilon_lower_bound:.4g} at {self.confidence:g} confidence"),
            ("largest demonstrable", f"{self.max_demonstrable_epsilon:.4g} with {n} trials per input"),
            ("runtime", f"{self.runtime_s:.2f} s on {self.device}"),
        ]
        width = max(len(name) for name, _ in rows)
        lines = [head] + [f"  {name:<{width}}  {value}" for name, value in rows]
        lines += [f"  note: {note}" for note in (*self.notes, self.reach_note()) if note]
        lines.append(f"  {self.summary()}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Returns the report as a JSON-ready dict (``passed`` included)."""
        data = asdict(self)
        data["claim"] = None if self.claim is None else self.claim.to_dict()
        data["notes"] = list(self.notes)
        data["passed"] = self.passed
        return data
