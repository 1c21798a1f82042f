"""Scoring gradient canaries from a run's per-step residuals, and the same scoring of an exact run of the plan.

Pure maths (NumPy). A canary lives at one coordinate in each of the run's parameter
tensors (:class:`CanaryGeometry`): a coordinate of its own in a tensor with at least ``m``
elements, a coordinate shared round-robin with other canaries in a smaller one. At each
step the auditor observes, at every canary coordinate, the *residual*: the noisy summed
gradient minus the other records' clipped contribution. Under the plan, the residual at a
coordinate of tensor k is ``a_k`` times the number of canaries there that the step sampled,
plus N(0, (σC)²).

A canary's score is the log-likelihood ratio, summed over steps, of its weighted
projection ``w = Σ_k (a_k / v_k) R_k / sqrt(Σ_k a_k² / v_k)`` under "included" (each step,
with probability q, N(μ, 1) with ``μ = sqrt(Σ_k a_k² / v_k)``) against "excluded" (N(0, 1)),
where ``v_k`` is the running mean square of tensor k's residuals up to that step. The
weights use only what the run shows (no sampling knowledge), so the one-run bound stays
valid; with the plan's noise everywhere they are the plan's Neyman-Pearson test, and a
tensor whose residuals carry less noise (noise left off it) or more crosstalk from other
canaries weighs more or less accordingly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["PER_SAMPLE_TOLERANCE", "CanaryGeometry", "StreamingScorer", "simulated_scores", "step_llr"]

PER_SAMPLE_TOLERANCE = 1e-3
"""Largest relative difference between a per-sample gradient row and autograd's (float32 rounding is ~1e-6)."""

VARIANCE_FLOOR = 1e-12
"""Smallest mean square of a tensor's residuals, relative to the plan's noise variance (a noiseless tensor)."""


def step_llr(w: np.ndarray, mu: float, rate: float) -> np.ndarray:
    """Returns the log-likelihood ratio of one step's standardised observation ``w`` (vectorised).

    "Included": with probability ``rate`` the observation is N(mu, 1), else N(0, 1);
    "excluded": N(0, 1). A rate of 1 is the plain Gaussian shift.
    """
    if rate >= 1.0:
        return mu * w - mu * mu / 2.0
    return np.logaddexp(math.log1p(-rate), math.log(rate) + mu * w - mu * mu / 2.0)


@dataclass(frozen=True)
class CanaryGeometry:
    """Where the canaries live, as flat arrays (the parameter tensors' own indices are the trainer's business).

    Attributes:
        values: ``a_k``, each canary's clipped value in tensor k, float64 [L].
        sizes: Number of distinct canary coordinates in tensor k, int [L] (their concatenation is
            the residual vector of a step, of length ``sizes.sum()``).
        slot: For canary j and tensor k, the position of its coordinate in that concatenation,
            int64 [m, L].
    """

    values: np.ndarray
    sizes: np.ndarray
    slot: np.ndarray

    @property
    def m(self) -> int:
        """Number of canaries."""
        return int(self.slot.shape[0])

    @property
    def norm(self) -> float:
        """Each canary's clipped gradient norm."""
        return float(np.sqrt(np.sum(self.values ** 2)))

    @property
    def tensor_of(self) -> np.ndarray:
        """The tensor of each residual position, int [sizes.sum()]."""
        return np.repeat(np.arange(len(self.sizes)), self.sizes)

    def counts(self, sampled: np.ndarray) -> np.ndarray:
        """Returns how many of the ``sampled`` canaries (indices) sit at each residual position."""
        return np.bincount(self.slot[sampled].reshape(-1), minlength=int(self.sizes.sum()))


class StreamingScorer:
    """Accumulates the canaries' scores step by step (see the module's docstring).

    Args:
        geometry: The canaries' layout.
        rate: The plan's Poisson sampling rate q.
        noise_std: The plan's noise std σC (sets the variance floor).
    """

    def __init__(self, geometry: CanaryGeometry, rate: float, noise_std: float):
        self.geometry, self.rate = geometry, float(rate)
        self.floor = VARIANCE_FLOOR * max(noise_std, 1e-12) ** 2
        self.tensor_of = geometry.tensor_of
        self.square_sums = np.zeros(len(geometry.sizes))
        self.steps = 0
        self.scores = np.zeros(geometry.m)

    def update(self, residual: np.ndarray) -> None:
        """Adds one step's residuals (float [sizes.sum()]) to every canary's score."""
        residual = np.asarray(residual, dtype=np.float64)
        self.square_sums += np.bincount(self.tensor_of, weights=residual * residual,
                                        minlength=len(self.square_sums))
        self.steps += 1
        variance = np.maximum(self.square_sums / (self.steps * self.geometry.sizes), self.floor)
        weights = self.geometry.values / variance
        mu = math.sqrt(float(np.sum(self.geometry.values * weights)))
        w = residual[self.geometry.slot] @ weights / mu
        self.scores += step_llr(w, mu, self.rate)


def simulated_scores(geometry: CanaryGeometry, included: np.ndarray, noise_std: float, rate: float, steps: int,
                     seed: int) -> np.ndarray:
    """Returns the canaries' scores in an exact run of the plan (the reference for an audit's bound).

    Each step samples every included canary with probability ``rate``; the residual at each
    canary coordinate is ``a_k`` times the sampled canaries there plus N(0, noise_std²); the
    scores come from :class:`StreamingScorer`, as the real audit computes them.

    Args:
        geometry: The canaries' layout in the audited run.
        included: Each canary's inclusion coin, bool [m].
        noise_std: The plan's noise std σC.
        rate: The Poisson sampling rate q.
        steps: Steps of the run.
        seed: Seed of the simulation (its own stream, apart from the run's).
    """
    coins = np.asarray(included, dtype=bool)
    rng = np.random.default_rng(seed)
    scorer = StreamingScorer(geometry, rate, noise_std)
    signal = geometry.values[geometry.tensor_of]
    for _ in range(steps):
        sampled = np.flatnonzero(coins & (rng.random(coins.size) < rate))
        noise = rng.standard_normal(signal.size) * noise_std
        scorer.update(noise + signal * geometry.counts(sampled))
    return scorer.scores
