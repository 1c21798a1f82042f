"""Running an audit: a scan picks the pair, selection trials choose the test, counted trials give the bound.

Three sets of trials, each from streams of its own, so that every choice is fixed before
the counted trials are drawn and their error counts are honest binomial draws:

1. scan: every candidate pair of the auditor (:meth:`Auditor.candidate_count`) is released
   ``scan_trials`` times per input; the pair whose release separates the inputs most
   (:func:`bench.privacy.distinguish.scan_separations`) is audited if it separates them
   ``SCAN_PREFERENCE`` times as well as the canonical pair 0 does (a leak or an un-noised
   region shows as a separation of 1e9 and more: the fitted noise of an un-noised value is
   0), else the canonical pair;
2. selection: ``min(trials, MAX_SELECTION_TRIALS)`` trials of that pair; the first half
   fits the statistics over the whole release, the second half chooses the statistic and
   its threshold (judged on trials they were not fitted on);
3. counted: ``trials`` trials give the Clopper-Pearson bound.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Iterable, Mapping

import torch

from bench.audit.config import MIN_TRIALS, AuditConfig
from bench.audit.report import AuditReport
from bench.audit.units import Auditor, auditor_for
from bench.core.interfaces import Mechanism, PrivacyClaim
from bench.errors import BenchError
from bench.privacy.audit_maths import clopper_pearson_upper, epsilon_lower_bound, max_demonstrable_epsilon
from bench.privacy.audit_plan import planned_trials, trials_needed
from bench.privacy.distinguish import Rule, candidate_statistics, choose_rule, scan_separations
from bench.randomness.streams import Streams
from bench.system import kernels

Progress = Callable[..., Iterable]
"""Wraps a loop to report it: ``progress(iterable, total=None, desc=None)``."""


def _no_progress(iterable: Iterable, total: int | None = None, desc: str | None = None) -> Iterable:
    return iterable


MAX_SELECTION_TRIALS = 5_000
"""Selection trials per input are ``min(trials, this)``: they are held in memory, and more
than this barely moves the chosen threshold."""

SCAN_BUDGET = 4096
"""Scan trials per input over all candidates together (each gets ``SCAN_BUDGET // count``)."""

SCAN_MIN, SCAN_MAX = 4, 256
"""Fewest and most scan trials per candidate and input (a leak or an un-noised region
separates the inputs infinitely well on any number of trials)."""

SCAN_PREFERENCE = 10.0
"""The best-separated pair replaces the canonical one when its separation is this many
times the canonical pair's (so that noise in a short scan does not move the audit off the
canonical pair of a well-behaved mechanism)."""


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


def _streams(config: AuditConfig, which: int, start: int, count: int, stage: str = "") -> Streams:
    return Streams.for_images(config.seed, f"audit/{stage}input{which}", count, start=start, device=config.device)


def _chunks(auditor: Auditor, values: int, start: int, count: int) -> list[tuple[int, int]]:
    size = max(1, auditor.config.chunk_values // max(1, values))
    return [(s, min(size, start + count - s)) for s in range(start, start + count, size)]


def _observe(auditor: Auditor, pair: int, which: int, start: int, count: int) -> torch.Tensor:
    parts = [auditor.observe_candidate(pair, which, _streams(auditor.config, which, s, n))
             for s, n in _chunks(auditor, auditor.candidate_values(pair), start, count)]
    return torch.cat(parts)


def _count_second(auditor: Auditor, pair: int, rule: Rule, which: int, start: int, count: int,
                  progress: Progress = _no_progress) -> int:
    """Returns how many of the trials of input ``which`` the rule calls the second input.

    ``progress`` wraps the loop over chunks of trials (the counted trials are the audit's long loop).
    """
    total = 0
    chunks = _chunks(auditor, auditor.candidate_values(pair), start, count)
    for s, n in progress(chunks, total=len(chunks), desc=f"counted trials of input {which} ({count:,})"):
        observed = auditor.observe_candidate(pair, which, _streams(auditor.config, which, s, n))
        total += int(rule.says_second(observed).sum())
    return total


def scan_trials(count: int) -> int:
    """Returns the scan trials per candidate and input for ``count`` candidates (0 for one)."""
    if count <= 1:
        return 0
    return max(SCAN_MIN, min(SCAN_MAX, SCAN_BUDGET // count))


def _scan(auditor: Auditor, each: int) -> tuple[int, list[float]]:
    """Releases every candidate ``each`` times per input; returns the pair to audit and every separation."""
    count = auditor.candidate_count()
    if each == 0:
        return 0, [math.nan]
    per_call = max(1, auditor.config.chunk_values // max(1, auditor.values_per_trial() * each))
    scores: list[float] = []
    for begin in range(0, count, per_call):
        group = list(range(begin, min(count, begin + per_call)))
        start = begin * each
        first, second = (auditor.scan(group, which, _streams(auditor.config, which, start, len(group) * each, "scan/"))
                         for which in (0, 1))
        by_width: dict[int, list[int]] = {}
        for slot, observed in enumerate(first):
            by_width.setdefault(observed.shape[1], []).append(slot)
        found = [0.0] * len(group)
        for slots in by_width.values():
            values = scan_separations(torch.stack([first[s] for s in slots]), torch.stack([second[s] for s in slots]))
            for slot, value in zip(slots, values.tolist()):
                found[slot] = value
        scores += found
    best = max(range(count), key=lambda i: (scores[i], -i))
    chosen = best if scores[best] > SCAN_PREFERENCE * scores[0] or (scores[0] == 0 and scores[best] > 0) else 0
    return chosen, scores


def audit_mechanism(mechanism: Mechanism, config: AuditConfig, progress: Progress = _no_progress) -> AuditReport:
    """Audits a configured mechanism's claim.

    The scan's trials come from purposes ``audit/scan/input0`` and ``audit/scan/input1``
    (candidate i takes trials ``i*e .. (i+1)*e - 1``); trials ``0 .. s/2-1`` of ``audit/input0``
    and ``audit/input1`` (``s = min(n, MAX_SELECTION_TRIALS)``) fit the statistics, trials
    ``s/2 .. s-1`` choose the statistic and threshold; trials ``s .. s+n-1`` are counted.

    Args:
        mechanism: The configured mechanism (fitted by the auditor when it needs it).
        config: The audit settings.
        progress: Wraps the loops over counted trials (``progress(iterable, total=, desc=)``,
            as :meth:`bench.system.progress.Emitter.progress`).

    Returns:
        The report; its verdict is ``failed`` when the bound exceeds the claimed epsilon,
        ``inconclusive`` when it does not but the trials are fewer than
        :func:`bench.privacy.audit_plan.trials_needed`, else ``passed``.

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
    candidates = auditor.candidate_count()
    each = scan_trials(candidates)
    work = 2 * (selection + n + each * candidates) * auditor.values_per_trial()
    with torch.no_grad(), kernels.using(kernels.choose(config.device, work)):
        pair, scores = _scan(auditor, each)
        first, second = (_observe(auditor, pair, which, 0, selection) for which in (0, 1))
        half = selection // 2  # statistics fitted on one half are judged on the other: no in-sample optimism
        statistics_ = candidate_statistics(first[:half], second[:half])
        rule = choose_rule(statistics_, first[half:], second[half:], claim.delta, config.confidence)
        del first, second
        false_positives = _count_second(auditor, pair, rule, 0, selection, n, progress)
        false_negatives = n - _count_second(auditor, pair, rule, 1, selection, n, progress)
    each_level = 1.0 - (1.0 - config.confidence) / 2.0
    needed = trials_needed(claim.epsilon, claim.delta, config.confidence)
    return AuditReport(
        mechanism=mechanism.name,
        params=params,
        claim=claim,
        neighbours=auditor.describe_candidate(pair),
        trials=n,
        selection_trials=selection,
        confidence=config.confidence,
        seed=config.seed,
        device=str(config.device),
        test=rule.describe(),
        false_positives=false_positives,
        false_negatives=false_negatives,
        fpr_upper=float(clopper_pearson_upper(false_positives, n, each_level)),
        fnr_upper=float(clopper_pearson_upper(false_negatives, n, each_level)),
        epsilon_lower_bound=float(epsilon_lower_bound(false_positives, false_negatives, n, claim.delta,
                                                      config.confidence)),
        max_demonstrable_epsilon=max_demonstrable_epsilon(n, claim.delta, config.confidence),
        runtime_s=time.perf_counter() - began,
        candidates=candidates,
        scan_trials=each,
        pair_index=pair,
        pair_separation=None if math.isnan(scores[pair]) else scores[pair],
        trials_needed=int(needed) if math.isfinite(needed) else None,
    )


def gate_trials(mechanism: Mechanism, confidence: float, cap: int) -> int:
    """Returns the counted trials per input a gate audits a mechanism's claim with.

    :func:`bench.privacy.audit_plan.planned_trials`: the trials its claim needs to pass, within
    ``[MIN_TRIALS, cap]``; ``MIN_TRIALS`` without a claim or with one the audit refuses
    (:func:`plan_audit` then says why).

    Args:
        mechanism: The configured mechanism.
        confidence: Joint confidence of the audit's bound.
        cap: The budget: most counted trials per input.
    """
    claim = mechanism.claim()
    try:
        check_claim(mechanism.name, claim)
    except (BenchError, AttributeError, TypeError):
        return MIN_TRIALS
    return planned_trials(claim.epsilon, claim.delta, confidence, cap, floor=MIN_TRIALS)


AUTO_MAX_TRIALS = 200_000
"""The budget of an audit whose trials are planned from its claim (``trials=None``)."""


def run_audit(
    mechanism_name: str,
    params: Mapping[str, Any] | None,
    trials: int | None,
    seed: int = 0,
    device: str = "cpu",
    confidence: float = 0.95,
    image_size: int = AuditConfig.image_size,
    max_trials: int = AUTO_MAX_TRIALS,
) -> AuditReport:
    """Audits a registered mechanism at the given parameters.

    Args:
        mechanism_name: Registered mechanism name.
        params: Mechanism parameters (strings or values); defaults for those not given.
        trials: Counted trials per neighbouring input (>= 100); None plans them from the
            claim (:func:`gate_trials`, at most ``max_trials``).
        seed: Base seed of the trials.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        confidence: Joint confidence of the epsilon lower bound.
        image_size: Side of the square audit images.
        max_trials: The budget when ``trials`` is None.

    Returns:
        The report (verdict ``failed`` when the bound exceeds the claim).

    Raises:
        BenchError: An unknown name, bad parameters or settings, or a claim that cannot be
            audited; all raised before any trial runs.
    """
    from bench.core.registry import mechanisms
    from bench.system.devices import resolve_device

    config = AuditConfig(trials=MIN_TRIALS if trials is None else trials, confidence=confidence, seed=seed,
                         device=str(resolve_device(device)), image_size=image_size).validate()
    mechanism = mechanisms.get(mechanism_name)(**dict(params or {}))
    if trials is None:
        config = dataclasses.replace(config, trials=gate_trials(mechanism, confidence, max_trials)).validate()
    return audit_mechanism(mechanism, config)
