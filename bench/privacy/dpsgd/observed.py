"""The mechanism a DP-SGD run actually applied, measured by its canaries, and the ε it supports.

Pure maths (NumPy, SciPy). The one-run bound (:mod:`bench.privacy.mia.one_run`) is valid
without assumptions but loose: a run at twice its claimed ε shows a bound well below the
claim (about 0.6 for a true ε near 2, whatever the canary count). The white-box auditor
sees more than a ranking, though: every batch the loader drew, and each step's residual
(noisy sum minus the other records' clipped contribution) at every canary coordinate,
together with which canaries were in the batch. From these it estimates, by tensor k,

- ``r_k``: what one sampled canary adds at its coordinate, over its clipped value ``a_k``
  (1 when the training clips each record to its bound; 10 when it does not clip the
  canaries' tenfold gradients at all);
- ``s_k``: the residuals' noise std over the plan's σC (1 when the plan's noise is added;
  0 on a tensor the noise skips);
- ``q̂``: the rate at which the loader put records into batches (the plan's q when it
  samples as planned),

each with a one-sided confidence bound (Bonferroni over all of them). ``epsilon`` is the
accountant's ε for the pooled estimates (all tensors together: ``clip_ratio``,
``noise_ratio``) with q̂ and the steps, or ``epsilon_low`` where that is larger. ``epsilon_low`` takes the worst tensor at its
confidence bounds -- effective noise multiplier ``σ · min_k s_k / r_k``, since a record may
put all its norm where the signal-to-noise ratio is best -- and the lower bound of q̂: the
smallest ε the run is consistent with, the figure that refutes a claim. This assumes Gaussian
noise, independent across steps (what the claim's accountant assumes too); it is a
statistical test of the mechanism the run applied, reported beside the one-run bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from bench.privacy.dpsgd import accounting
from bench.privacy.dpsgd.canary_scores import CanaryGeometry

__all__ = ["MechanismMeter", "SIGMA_FLOOR"]

SIGMA_FLOOR = 0.2
"""Smallest effective noise multiplier handed to the accountant: below it ε is reported as ε(0.2), a lower value."""


@dataclass
class MechanismMeter:
    """Accumulates what a private run's steps show of its mechanism.

    Args:
        geometry: The canaries' layout.
        noise_std: The plan's noise std σC.
        noise_multiplier: The plan's σ.
        records: Records the loader samples from (training records and included canaries).
    """

    geometry: CanaryGeometry
    noise_std: float
    noise_multiplier: float
    records: int
    steps: int = 0
    drawn: int = 0
    drawn_squares: int = 0
    _nn: np.ndarray = field(init=False, repr=False)
    _nr: np.ndarray = field(init=False, repr=False)
    _rr: np.ndarray = field(init=False, repr=False)
    _count: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        size = len(self.geometry.sizes)
        self._nn, self._nr, self._rr = np.zeros(size), np.zeros(size), np.zeros(size)
        self._count = np.zeros(size)
        self._tensor_of = self.geometry.tensor_of

    def update(self, residual: np.ndarray, sampled: np.ndarray, batch: int) -> None:
        """Adds one step.

        Args:
            residual: The step's residuals at the canary coordinates, float [sizes.sum()].
            sampled: Indices of the canaries in the step's batch.
            batch: Records in the step's batch (training records and canaries).
        """
        residual = np.asarray(residual, dtype=np.float64)
        counts = self.geometry.counts(np.asarray(sampled, dtype=np.int64)).astype(np.float64)
        size = len(self._nn)
        self._nn += np.bincount(self._tensor_of, weights=counts * counts, minlength=size)
        self._nr += np.bincount(self._tensor_of, weights=counts * residual, minlength=size)
        self._rr += np.bincount(self._tensor_of, weights=residual * residual, minlength=size)
        self._count += self.geometry.sizes
        self.steps += 1
        self.drawn += int(batch)
        self.drawn_squares += int(batch) ** 2

    def result(self, rate: float, delta: float, confidence: float = 0.95) -> dict[str, float]:
        """Returns the measured mechanism and the ε it supports (``observed.*`` keys, see the module).

        Args:
            rate: The plan's sampling rate q (for the batch-size dispersion's reference).
            delta: The claim's δ.
            confidence: Joint confidence of the bounds behind ``epsilon_observed_low``.
        """
        from scipy import stats

        if self.steps == 0:
            return {}
        values = self.geometry.values
        tests = 2 * len(values) + 1
        alpha = (1.0 - confidence) / tests
        z = float(stats.norm.isf(alpha))
        trials = self.records * self.steps
        q_hat = self.drawn / trials
        q_low = float(stats.beta.ppf(alpha, self.drawn, trials - self.drawn + 1)) if self.drawn else 0.0
        seen = self._nn > 0
        slope = np.where(seen, self._nr / np.where(seen, self._nn, 1.0), 0.0)
        dof = np.maximum(self._count - 1.0, 1.0)
        sse = np.maximum(self._rr - np.where(seen, slope * self._nr, 0.0), 0.0)
        noise = np.sqrt(sse / dof)
        noise_up = noise * np.sqrt(dof / stats.chi2.ppf(alpha, dof))
        ratio = np.where(seen, slope / values, np.nan)
        ratio_low = np.where(seen, (slope - z * noise / np.sqrt(np.where(seen, self._nn, 1.0))) / values, np.nan)
        sigma = self.noise_multiplier
        pooled_ratio = float(np.sum(self._nr) / np.sum(self._nn * values)) if seen.any() else math.nan
        pooled_noise = float(math.sqrt(np.sum(sse) / np.sum(dof))) / self.noise_std
        point = _effective(sigma, np.array([pooled_noise]), np.array([pooled_ratio]))
        low = _effective(sigma, noise_up / self.noise_std, ratio_low)
        low_epsilon = _epsilon(low, q_low, self.steps, delta)
        mean_batch = self.drawn / self.steps
        variance = self.drawn_squares / self.steps - mean_batch ** 2
        expected = self.records * rate * (1.0 - rate)
        return {
            "observed.sample_rate": q_hat, "observed.sample_rate_low": q_low,
            "observed.batch_dispersion": float(variance / expected) if expected > 0 else float("nan"),
            "observed.clip_ratio": pooled_ratio, "observed.noise_ratio": pooled_noise,
            "observed.clip_ratio_max": float(np.nanmax(ratio)) if seen.any() else math.nan,
            "observed.noise_ratio_min": float(np.min(noise / self.noise_std)),
            "observed.noise_multiplier": point,
            "observed.epsilon": max(_epsilon(point, q_hat, self.steps, delta), low_epsilon),
            "observed.epsilon_low": low_epsilon,
            "observed.confidence": float(confidence),
        }


def _effective(sigma: float, noise_ratio: np.ndarray, clip_ratio: np.ndarray) -> float:
    """σ · min over tensors of noise ratio / clip ratio (tensors whose clip ratio is not positive show nothing)."""
    usable = np.isfinite(clip_ratio) & (clip_ratio > 0)
    if not usable.any():
        return math.inf
    return float(sigma * np.min(noise_ratio[usable] / clip_ratio[usable]))


def _epsilon(sigma: float, rate: float, steps: int, delta: float) -> float:
    """The PRV accountant's ε at (σ, q, steps, δ); 0 without sampling or noise bound, ε(SIGMA_FLOOR) below it."""
    if not math.isfinite(sigma) or rate <= 0.0:
        return 0.0
    return float(accounting.spent_epsilon(max(sigma, SIGMA_FLOOR), min(rate, 1.0), steps, delta))
