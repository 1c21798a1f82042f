"""The audit the conformance suite runs on every claimed mechanism.

The suite audits each claimed mechanism at ``CONFORMANCE_CONFIDENCE`` (0.99) with the
counted trials its claim needs (:func:`bench.privacy.audit_plan.trials_needed`: enough to refute
a 1.25 x over-claim), at most ``CONFORMANCE_MAX_TRIALS`` per input, on audit images of
``CONFORMANCE_IMAGE_SIZE`` (and the ragged ``(S+3) x (S+1)``): every pixel is a candidate
and every value of the release is read. Large claims need more trials than that budget
(50,000 trials per input reach claims up to about 5.5), so a mechanism is audited at
parameters where its claim is within reach: those registered with
:func:`register_audit_params` (a subclass inherits its parent's), else its
``conformance_params``, else its defaults. An audit beyond the budget is
``inconclusive``; the conformance check fails only on ``failed``.

At claim 1 the plan gives 17,155 trials per input (10,020 at claim 2). DP-Pix at
epsilon=1, b=4 audited there (seed 0, 8x8 images, 2-9 s on a shared 2-core CPU) bounds at
0.83 (passed); with 0.8 x its noise at 1.02 (1.02 to 1.12 over seeds 0-5: the over-claim
the plan is sized for, caught by a small margin), without the channel factor C at 2.62,
and leaking an input pixel elsewhere or leaving a row of cells un-noised at 8.08, the
most 17,155 trials can show (all failed).
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from bench.audit.config import AuditConfig
from bench.audit.report import AuditReport
from bench.audit.run import audit_mechanism, gate_trials
from bench.core.interfaces import Mechanism

CONFORMANCE_CONFIDENCE = 0.99
"""Joint confidence of the conformance audit's bound."""

CONFORMANCE_MAX_TRIALS = 50_000
"""The conformance audit's budget: most counted trials per input."""

CONFORMANCE_IMAGE_SIZE = 8
"""Side of the conformance audit's square images (its ragged ones are 11 x 9)."""

_AUDIT_PARAMS: dict[str, dict[str, Any]] = {
    "dp_pix": {"epsilon": 1.0, "block": 4, "m": 1},
    "image_dp": {"epsilon": 0.5, "block": 16, "colours": 128},
    "dp_latent": {"epsilon": 2.0, "latent_dim": 2, "steps": 25},
}


def register_audit_params(name: str, params: Mapping[str, Any]) -> None:
    """Declares the parameters the conformance audit runs mechanism ``name`` (and subclasses) at.

    Choose a configuration whose claimed epsilon is small (about 1-3): the audit's
    budget cannot refute much more, and a claim beyond it is only ``inconclusive``.
    """
    _AUDIT_PARAMS[name] = dict(params)


def audit_params_for(cls: type[Mechanism]) -> dict[str, Any] | None:
    """Returns the registered audit parameters of a mechanism class, looked up along its bases.

    A class run in another process (:mod:`bench.testing.isolated`) names its real bases' registered
    names in ``lineage``; they are looked up after its own bases.
    """
    names = [klass.__dict__.get("name") for klass in cls.__mro__] + list(getattr(cls, "lineage", ()) or ())
    for name in names:
        if name and name in _AUDIT_PARAMS:
            return dict(_AUDIT_PARAMS[name])
    return None


def conformance_audit(
    cls: type[Mechanism], params: Mapping[str, Any] | None, device: torch.device, seed: int
) -> AuditReport:
    """Audits a mechanism class as the conformance suite does.

    Args:
        cls: The registered mechanism class.
        params: Parameters to audit at; None picks the registered audit parameters, else
            ``conformance_params``, else the defaults.
        device: Where the mechanism runs.
        seed: Base seed of the trials.
    """
    if params is None:
        params = audit_params_for(cls)
    if params is None:
        params = getattr(cls, "conformance_params", None) or {}
    mechanism = cls(**dict(params))
    trials = gate_trials(mechanism, CONFORMANCE_CONFIDENCE, CONFORMANCE_MAX_TRIALS)
    config = AuditConfig(trials=trials, confidence=CONFORMANCE_CONFIDENCE, seed=seed, device=str(device),
                         image_size=CONFORMANCE_IMAGE_SIZE)
    return audit_mechanism(mechanism, config)
