"""The outcome of one audit and its printed table."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.core.interfaces import PrivacyClaim
from bench.privacy.audit_maths import trials_to_demonstrate
from bench.privacy.audit_plan import POWER_RATIO, verdict


@dataclass(frozen=True)
class AuditReport:
    """What an audit of one mechanism configuration found.

    A mechanism without a claim has nothing to audit: ``claim`` is None, no trial ran
    and the numbers are None; it passes.

    The verdict (:func:`bench.privacy.audit_plan.verdict`): ``failed`` when the bound exceeds the
    claim; ``inconclusive`` when it does not but fewer trials ran than ``trials_needed``
    (the audit could not have refuted a 1.25 x over-claim); ``passed`` otherwise.

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
        notes: Further remarks printed under the table.
        candidates: Neighbouring pairs the scan compared.
        scan_trials: Scan trials per pair and input (0 without a scan).
        pair_index: The audited pair's index among the candidates (0: the canonical pair).
        pair_separation: How far apart the scan found the audited pair's releases, in
            pooled standard deviations of its statistic (infinite: un-noised); None without a scan.
        trials_needed: Counted trials per input from which the audit can pass
            (:func:`bench.privacy.audit_plan.trials_needed`); None when no audit can run that many.
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
    candidates: int = 1
    scan_trials: int = 0
    pair_index: int = 0
    pair_separation: float | None = None
    trials_needed: int | None = None

    @property
    def verdict(self) -> str:
        """``"passed"``, ``"inconclusive"`` or ``"failed"`` (``"passed"`` without a claim)."""
        claimed = None if self.claim is None else self.claim.epsilon
        needed = math.inf if self.trials_needed is None else self.trials_needed
        return verdict(self.epsilon_lower_bound, claimed, self.trials, needed)

    @property
    def passed(self) -> bool:
        """Whether the verdict is ``passed`` (True without a claim)."""
        return self.verdict == "passed"

    def summary(self) -> str:
        """Returns one line: the verdict with the bound and the claim."""
        if self.claim is None:
            return f"{self.mechanism} makes no formal claim: nothing to audit"
        word = {"passed": "PASS", "inconclusive": "INCONCLUSIVE", "failed": "FAIL"}[self.verdict]
        relation = "exceeds" if self.verdict == "failed" else "<="
        return (f"{word}: epsilon lower bound {self.epsilon_lower_bound:.4g} {relation} claimed epsilon "
                f"{self.claim.epsilon:g} [{self.claim.unit}] ({self.trials} trials per input, "
                f"{self.confidence:g} confidence)")

    def reach_note(self) -> str | None:
        """Returns why an audit that did not refute the claim is inconclusive, else None."""
        if self.claim is None or self.verdict != "inconclusive":
            return None
        needed = "more trials than any audit can run" if self.trials_needed is None else \
            f"{self.trials_needed} trials per input"
        if self.max_demonstrable_epsilon is not None and self.max_demonstrable_epsilon < self.claim.epsilon:
            reach = trials_to_demonstrate(self.claim.epsilon, self.claim.delta, self.confidence)
            more = f"at least {int(reach)} trials" if math.isfinite(reach) else "more trials than any audit can run"
            return (f"{self.trials} trials can show at most epsilon {self.max_demonstrable_epsilon:.3g}, below the "
                    f"claim: this audit cannot detect a violation of it (that takes {more} per input; a pass "
                    f"takes {needed})")
        return (f"{self.trials} trials per input could not refute a {POWER_RATIO:g} x over-claim; "
                f"a pass takes {needed}")

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
            ("pair", self._pair_row()),
            ("needed to pass", "no audit can run enough trials" if self.trials_needed is None
             else f"{self.trials_needed} trials per input (to refute a {POWER_RATIO:g} x over-claim)"),
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
        lines.append(f"  verdict: {self.verdict}")
        lines.append(f"  {self.summary()}")
        return "\n".join(lines)

    def _pair_row(self) -> str:
        if self.scan_trials == 0:
            return "the auditor's only pair"
        separation = self.pair_separation
        shown = "inf" if separation is not None and math.isinf(separation) else f"{separation:.3g}"
        which = "the canonical pair" if self.pair_index == 0 else f"pair {self.pair_index}"
        return (f"{which} of {self.candidates}, each scanned on {self.scan_trials} trials per input "
                f"(separation {shown} sd)")

    def to_dict(self) -> dict[str, Any]:
        """Returns the report as a JSON-ready dict (``verdict`` and ``passed`` included)."""
        data = asdict(self)
        data["claim"] = None if self.claim is None else self.claim.to_dict()
        data["notes"] = list(self.notes)
        if self.pair_separation is not None and not math.isfinite(self.pair_separation):
            data["pair_separation"] = "inf"
        data["verdict"] = self.verdict
        data["passed"] = self.passed
        return data
