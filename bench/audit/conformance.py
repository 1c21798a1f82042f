"""The small audit the conformance suite runs on every claimed mechanism.

The suite audits each claimed mechanism at ``CONFORMANCE_TRIALS`` counted trials per
input and ``CONFORMANCE_CONFIDENCE``. At small N an audit can only show a small epsilon
(:func:`bench.audit.maths.max_demonstrable_epsilon`: 5.9 at 2000 trials and 0.99), so a
mechanism is audited at parameters where its claim is within reach: the parameters
registered here with :func:`register_audit_params` (a subclass inherits its parent's),
else its ``conformance_params``, else its defaults.

Why 2000 trials at 0.99: DP-Pix at epsilon=1, b=4 without the channel factor C is
3-DP, not 1-DP. Over seeds 0-299, 2000 trials at 0.99 gave that broken variant bounds
from 1.78 to about 3 (never below its claim of 1), and the correct DP-Pix bounds of at
most 0.88; 1000 trials still caught it (lowest 1.25) and 500 trials at 0.95 came within
0.03 of missing it. 0.99 rather than 0.95 keeps the chance that a correct plugin fails
below 1%. A DP-Pix audit at 2000 trials takes about 0.1 s on one CPU core.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from bench.audit.config import AuditConfig
from bench.audit.report import AuditReport
from bench.audit.run import audit_mechanism
from bench.interfaces import Mechanism

CONFORMANCE_TRIALS = 2000
"""Counted trials per input of the conformance audit."""

CONFORMANCE_CONFIDENCE = 0.99
"""Joint confidence of the conformance audit's bound."""

_AUDIT_PARAMS: dict[str, dict[str, Any]] = {
    "dp_pix": {"epsilon": 1.0, "block": 4, "m": 1},
    "image_dp": {"epsilon": 0.5, "block": 16, "colours": 128},
    "dp_latent": {"epsilon": 2.0, "latent_dim": 2, "steps": 25},
}


def register_audit_params(name: str, params: Mapping[str, Any]) -> None:
    """Declares the parameters the conformance audit runs mechanism ``name`` (and subclasses) at.

    Choose a configuration whose claimed epsilon is small (about 1-3): the audit's
    trials cannot show much more, and a claim beyond them cannot fail.
    """
    _AUDIT_PARAMS[name] = dict(params)


def audit_params_for(cls: type[Mechanism]) -> dict[str, Any] | None:
    """Returns the registered audit parameters of a mechanism class, looked up along its bases."""
    for klass in cls.__mro__:
        name = klass.__dict__.get("name")
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
    config = AuditConfig(trials=CONFORMANCE_TRIALS, confidence=CONFORMANCE_CONFIDENCE, seed=seed, device=str(device))
    return audit_mechanism(cls(**dict(params)), config)
