"""How long ``bench audit`` will take: its releases counted in advance, timed by a short calibration.

An audit releases each of its two neighbouring inputs ``selection + trials + scan`` times
(:func:`bench.audit.run.audit_mechanism`); releasing :data:`CALIBRATION_TRIALS` of them
here, before the audit, gives the seconds a trial takes on this machine.
"""

from __future__ import annotations

import time
from typing import Any

from bench.cell.estimate import Estimate

CALIBRATION_TRIALS = 1024
"""Trials released to time one trial (about 0.03 s for a pixel mechanism on 16 x 16 images; fewer would time the
calls' overhead more than the trials), or fewer where they would release more than :data:`CALIBRATION_VALUES`."""

CALIBRATION_VALUES = 1 << 22
"""The most values the calibration releases (large audit images take fewer trials)."""

MEASURED_ON = "AMD EPYC (AVX-512, 2 threads)"
FIXED_S = 5.0
"""Seconds an audit takes besides its releases (choosing the statistic and threshold): a 2,000-trial dp_pix
audit's 5.0 s on :data:`MEASURED_ON`, nearly all of it that."""
FITTED_TRIAL_S = 2.2e-4
"""Seconds a trial of a mechanism that fits first takes: dp_latent's (d = 32), 64 trials timed on
:data:`MEASURED_ON`."""


def estimate_audit(mechanism: Any, config: Any, given: bool) -> Estimate | None:
    """Returns the expected time of an audit, None when the mechanism makes no claim.

    A mechanism that fits something first (a latent generator) is not fitted twice: its
    trials are costed at :data:`FITTED_TRIAL_S`, and its fit is left out.

    Args:
        mechanism: The configured mechanism.
        config: The :class:`~bench.audit.config.AuditConfig`.
        given: Whether the user gave ``--trials`` (it is then named when the bound refuses it).
    """
    import torch

    from bench.audit.run import MAX_SELECTION_TRIALS, _observe, plan_audit, scan_trials
    from bench.core.interfaces import Mechanism
    from bench.system import kernels

    auditor = plan_audit(mechanism, config)
    if auditor is None:
        return None
    candidates = auditor.candidate_count()
    releases = 2 * (min(config.trials, MAX_SELECTION_TRIALS) + config.trials + scan_trials(candidates) * candidates)
    if type(mechanism).fit is Mechanism.fit:
        auditor.prepare()  # nothing to fit: it makes the audit's images
        timed = max(8, min(CALIBRATION_TRIALS, CALIBRATION_VALUES // max(1, auditor.candidate_values(0))))
        with torch.no_grad(), kernels.using("eager"):
            _observe(auditor, 0, 0, 0, max(1, timed // 8))  # first calls warm caches
            started = time.perf_counter()
            _observe(auditor, 0, 0, 0, timed)
            each = (time.perf_counter() - started) / timed
        source = f"{timed} trials timed on this machine"
        if kernels.choose(config.device, releases * auditor.values_per_trial()) == "compiled":
            source += " with eager kernels; the audit compiles its own for this much work, which can be faster"
    else:
        each, source = FITTED_TRIAL_S, f"a stated {FITTED_TRIAL_S:g} s a trial, dp_latent's on {MEASURED_ON}"
    stages = {"scan and test": FIXED_S, "releases": releases * each}
    return Estimate(sum(stages.values()), stages, (f"--trials {config.trials}",) if given else (),
                    float(config.trials) if given else 1.0, source)
