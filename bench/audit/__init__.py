"""Empirical DP audits: a Clopper-Pearson lower bound on epsilon from neighbouring inputs.

For a mechanism whose ``claim()`` is not None, :func:`run_audit` scans the pairs of
inputs that are neighbours under the claim's unit (:mod:`bench.audit.units`: every pixel,
two image sizes, several contents), picks the pair whose releases separate most, releases
it many times with independent streams, chooses a distinguishing test over the whole
release on trials that are not counted (:mod:`bench.privacy.distinguish`) and turns the
test's error counts on the counted trials into a lower bound on epsilon
(:mod:`bench.privacy.audit_maths`; Jagielski et al. 2020, Nasr et al. 2021). A bound above the
claim is a bug in the mechanism (verdict ``failed``); a bound within it from fewer trials
than :func:`bench.privacy.audit_plan.trials_needed` is ``inconclusive``, never ``passed``.
"""

from bench.audit.config import AuditConfig
from bench.audit.report import AuditReport
from bench.audit.run import audit_mechanism, plan_audit, run_audit
from bench.audit.units import Auditor, auditor_for, known_units, register_auditor, scoped_auditors

__all__ = [
    "AuditConfig",
    "AuditReport",
    "Auditor",
    "audit_mechanism",
    "auditor_for",
    "known_units",
    "plan_audit",
    "register_auditor",
    "run_audit",
    "scoped_auditors",
]
