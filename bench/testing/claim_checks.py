"""Conformance checks of a mechanism's privacy claim: the noise it adds and a small empirical audit."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch
from scipy import stats

from bench.audit.conformance import conformance_audit
from bench.randomness.streams import Streams
from bench.testing._mechanism_cases import (
    SEED,
    build_mechanism,
    check_devices,
    checked_in_worker,
    failure,
    fitted_mechanism,
    public_set,
)
from bench.testing.noise_probes import noise_probe_for, rounded_cdf

KS_ALPHA = 1e-4
"""A claimed-noise check fails when the KS test's p-value is below this."""


def check_claimed_noise(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """The noise a claimed mechanism adds has the distribution and scale its claim implies (KS test)."""
    if checked_in_worker("claimed_noise", name, params, device):
        return
    cls, mech = build_mechanism(name, params)
    probe = noise_probe_for(cls)
    if probe is None:
        if mech.claim() is None:
            return
        raise failure(
            name,
            "claim() is not None but no NoiseProbe is registered: call "
            "bench.testing.register_noise_probe(name, NoiseProbe(...)) so the claim can be checked",
        )
    dev = check_devices(device)[0]
    c, h, w = probe.shape
    probed = fitted_mechanism(cls, probe.params, public_set(c, h, w, n=32), dev)
    if probed.claim() is None:
        raise failure(name, f"the noise probe's configuration {dict(probe.params)} makes no claim")
    streams = Streams.for_images(SEED, "conformance/noise", probe.images, device=dev)
    samples = np.asarray(probe.observe(probed, streams), dtype=np.float64).ravel()
    dist = probe.expected(probed)
    if probe.rounded:
        samples = samples + np.random.default_rng(0).uniform(-0.5, 0.5, samples.shape)
        cdf: Any = rounded_cdf(dist)
    else:
        cdf = dist.cdf
    result = stats.kstest(samples, cdf)
    if result.pvalue < KS_ALPHA:
        raise failure(
            name,
            f"the noise added does not follow the claimed distribution (KS D={result.statistic:.3f}, "
            f"p={result.pvalue:.1e}, {samples.size} samples): mean |noise| {np.abs(samples).mean():.4g}, "
            f"claimed {dist.dist.name} with mean |noise| {dist.expect(abs):.4g}",
        )


def check_audit(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """A claimed mechanism passes a small empirical DP audit: the lower bound on epsilon is within its claim.

    Runs :func:`bench.audit.conformance.conformance_audit` (the counted trials the claim
    needs, within the suite's budget, at 0.99 confidence, reading the whole release) at
    ``params``, else at the registered audit parameters, else at ``conformance_params`` or
    the defaults. Only a refuted claim (verdict ``failed``) fails the check; an
    ``inconclusive`` audit does not.
    """
    cls, mech = build_mechanism(name, params)
    if mech.claim() is None:
        return
    report = conformance_audit(cls, params, check_devices(device)[0], SEED)
    if report.verdict == "failed":
        raise failure(
            name,
            f"{report.summary()}: the claim is violated ({report.neighbours}; test {report.test}; "
            f"{report.false_positives} false positives, {report.false_negatives} false negatives)",
        )
