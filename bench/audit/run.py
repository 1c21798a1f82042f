"""Running an audit: selection trials choose the test, counted trials give the bound."""

from __future__ import annotations

import math
import time
from typing import Any, Mapping

import torch

from bench import kernels

from bench.audit.config import AuditConfig
from bench.audit.distinguish import Rule, choose_rule, fit_statistics
from bench.audit.maths import clopper_pearson_upper, epsilon_lower_bound, max_demonstrable_epsilon
from bench.audit.report import AuditReport
from bench.audit.units import Auditor, auditor_for
from bench.errors import BenchError
from bench.interfaces import Mechanism, PrivacyClaim
from bench.streams import Streams

MAX_SELECTION_TRIALS = 20_000
"""Selection trials per input are ``min(trials, this)``: they are held in memory, and more
than this barely moves the chosen threshold."""


def check_claim(name: str, claim: PrivacyClaim) -> None:
    """Validates a claim before it is audited.

    Raises:
        BenchError: Epsilon not finite and positive, or delta outside [0, 1).
    """
    if not (isinstance(claim.epsilon, (int, float)) and claim.epsilon > 0 and math.isfinite(claim.epsilon)):
        raise BenchError(f"mechanism {name!r} claims epsilon={claim.epsilon!r}; an audit needs a finite epsilon > 0")
    if not 0 <= claim.delta < 1:
        raise BenchError(f"mechanism {name!r} claims delta={claim.delta!r}; an audit needs 0 <= delta < 1")


def plan_audit(mechanism: Mechanism, config: AuditConfig) -> Auditor | None:
    """Validates everything an audit needs without running anything.

    Returns:
        The auditor of the mechanism's claim, or None when it makes no claim.

    Raises:
        BenchError: A bad setting, a malformed claim or a unit without an auditor.
    """
    config.validate()
    claim = mechanism.claim()
    if claim is None:
        return None
    if not isinstance(claim, PrivacyClaim):
        raise BenchError(f"mechanism {mechanism.name!r}: claim() must return a PrivacyClaim or None, "
                         f"got {type(claim).__name__}")
    check_claim(mechanism.name, claim)
    return auditor_for(claim.unit)(mechanism, claim, config)


def _streams(config: AuditConfig, which: int, start: int, count: int) -> Streams:
    return Streams.for_images(config.seed, f"audit/input{which}", count, start=start, device=config.device)


def _chunks(auditor: Auditor, start: int, count: int) -> list[tuple[int, int]]:
    size = max(1, auditor.config.chunk_values // max(1, auditor.values_per_trial()))
    return [(s, min(size, start + count - s)) for s in range(start, start + count, size)]


def _observe(auditor: Auditor, which: int, start: int, count: int) -> torch.Tensor:
    parts = [auditor.observe(which, _streams(auditor.config, which, s, n)) for s, n in _chunks(auditor, start, count)]
    return torch.cat(parts)


def _count_second(auditor: Auditor, rule: Rule, which: int, start: int, count: int) -> int:
    """Returns how many of the trials of input ``which`` the rule calls the second input."""
    total = 0
    for s, n in _chunks(auditor, start, count):
        total += int(rule.says_second(auditor.observe(which, _streams(auditor.config, which, s, n))).sum())
    return total


def audit_mechanism(mechanism: Mechanism, config: AuditConfig) -> AuditReport:
    """Audits a configured mechanism's claim.

    Trials ``0 .. s-1`` of each input (its own streams, purpose ``audit/input0`` or
    ``audit/input1``; ``s = min(n, MAX_SELECTION_TRIALS)``) fit the statistics and choose
    the threshold; trials ``s .. s+n-1`` are counted.

    Args:
        mechanism: The configured mechanism (fitted by the auditor when it needs it).
        config: The audit settings.

    Returns:
        The report; ``passed`` is False when the bound exceeds the claimed epsilon.

    Raises:
        BenchError: See :func:`plan_audit`.
    """
    auditor = plan_audit(mechanism, config)
    params = dict(mechanism.config)
    if auditor is None:
        return AuditReport(mechanism.name, params, None, device=config.device, seed=config.seed)
    claim, n = auditor.claim, config.trials
    selection = min(n, MAX_SELECTION_TRIALS)
    began = time.perf_counter()
    auditor.prepare()
    work = 2 * (selection + n) * config.channels * config.image_size**2
    with torch.no_grad(), kernels.using(kernels.choose(config.device, work)):
        first, second = (_observe(auditor, which, 0, selection) for which in (0, 1))
        rule = choose_rule(fit_statistics(first, second), first, second, claim.delta, config.confidence)
        del first, second
        false_positives = _count_second(auditor, rule, 0, selection, n)
        false_negatives = n - _count_second(auditor, rule, 1, selection, n)
    each = 1.0 - (1.0 - config.confidence) / 2.0
    return AuditReport(
        mechanism=mechanism.name,
        params=params,
        claim=claim,
        neighbours=auditor.describe(),
        trials=n,
        selection_trials=selection,
        confidence=config.confidence,
        seed=config.seed,
        device=str(config.device),
        test=rule.describe(),
        false_positives=false_positives,
        false_negatives=false_negatives,
        fpr_upper=float(clopper_pearson_upper(false_positives, n, each)),
        fnr_upper=float(clopper_pearson_upper(false_negatives, n, each)),
        epsilon_lower_bound=float(epsilon_lower_bound(false_positives, false_negatives, n, claim.delta,
                                                      config.confidence)),
        max_demonstrable_epsilon=max_demonstrable_epsilon(n, claim.delta, config.confidence),
        runtime_s=time.perf_counter() - began,
    )


def run_audit(
    mechanism_name: str,
    params: Mapping[str, Any] | None,
    trials: int,
    seed: int = 0,
    device: str = "cpu",
    confidence: float = 0.95,
) -> AuditReport:
    """Audits a registered mechanism at the given parameters.

    Args:
        mechanism_name: Registered mechanism name.
        params: Mechanism parameters (strings or values); defaults for those not given.
        trials: Counted trials per neighbouring input (>= 100).
        seed: Base seed of the trials.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        confidence: Joint confidence of the epsilon lower bound.

    Returns:
        The report (``passed`` False when the bound exceeds the claim).

    Raises:
        BenchError: An unknown name, bad parameters or settings, or a claim that cannot be
            audited; all raised before any trial runs.
    """
    from bench.registry import mechanisms
    from bench.runner import resolve_device

    config = AuditConfig(trials=trials, confidence=confidence, seed=seed, device=str(resolve_device(device)))
    config.validate()
    mechanism = mechanisms.get(mechanism_name)(**dict(params or {}))
    return audit_mechanism(mechanism, config)
