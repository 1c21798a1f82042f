"""White-box gradient canaries for the one-run audit of DP-SGD (Steinke, Nasr & Jagielski 2023, §6).

A gradient canary is a record whose clipped gradient the auditor chooses: a vector of norm
at most the clipping bound, zero except at one coordinate in each of several parameter
tensors ("Dirac" canaries, spread over the tensors large enough to give every canary a
coordinate of its own). Each canary is included in training by a seeded fair coin; an
included canary then takes part in every step exactly as a record does: sampled with the
plan's Poisson rate ``q``, its per-sample gradient (ten times the bound's size) clipped by
the training's own clipping and added to the sum before the noise.

The auditor observes each step's noisy summed gradient (what DP-SGD's accountant
covers: the final model is a function of these) and knows the other records'
contribution to it (the sum of the sampled records' clipped gradients), which it
subtracts. That knowledge stays inside the claim: the accountant bounds the subsampled
Gaussian pair ``N(a, s^2)`` against ``(1 - q) N(a, s^2) + q N(a + g, s^2)`` for every
fixed sum ``a`` of the other records, so revealing ``a`` keeps every step within its
bound and adaptive composition covers the run. What remains is the canary's
contribution and the noise, so the audit is as strong as the one-run method can be for
these canaries, and its bound can be compared with :func:`simulated_scores`, the same
audit of an exact implementation of the plan.

The score of a canary is the log-likelihood ratio of its projections under "included"
(each step a mixture: with probability ``q`` shifted by the canary's norm) against
"excluded": the Neyman-Pearson test of one step, summed over steps. Without noise (the
non-private twin: shuffled batches, no clipping) an included canary enters the mean
gradient once per epoch, and the score is the sum of its projections.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch

from bench.randomness.seeding import make_generator

__all__ = ["GradientCanaries", "simulated_scores", "step_llr"]

OVERSIZE = 10.0
"""A canary's per-sample gradient is this many times its clipped value: the clipping must do its job."""
ROW_BUDGET = 1 << 25
"""Most elements of canary per-sample gradients materialised at once (128 MiB of float32)."""


def step_llr(w: np.ndarray, mu: float, rate: float) -> np.ndarray:
    """Returns the log-likelihood ratio of one step's standardised observation ``w`` (vectorised).

    "Included": with probability ``rate`` the observation is N(mu, 1), else N(0, 1);
    "excluded": N(0, 1).
    """
    return np.logaddexp(math.log1p(-rate), math.log(rate) + mu * w - mu * mu / 2.0)


def simulated_scores(included: np.ndarray, mu: float, rate: float, steps: int, seed: int) -> np.ndarray:
    """Returns the canaries' scores under an exact implementation of the plan (the reference for an audit).

    Each step samples every included canary with probability ``rate`` and observes
    N(mu · sampled, 1); the scores are summed :func:`step_llr` values, as the real audit
    computes them.

    Args:
        included: Each canary's inclusion coin, bool [m].
        mu: The canary's norm over the noise's standard deviation (1/σ for a full-norm canary).
        rate: The Poisson sampling rate q.
        steps: Steps of the run.
        seed: Seed of the simulation (its own stream, apart from the run's).
    """
    coins = np.asarray(included, dtype=bool)
    rng = np.random.default_rng(seed)
    scores = np.zeros(coins.size)
    for _ in range(steps):
        sampled = coins & (rng.random(coins.size) < rate)
        scores += step_llr(rng.standard_normal(coins.size) + mu * sampled, mu, rate)
    return scores


class GradientCanaries:
    """The canaries of one audited training run: where they live, when they are sampled, their scores.

    Args:
        included: Each canary's inclusion coin, bool [m].
        seed: The run's seed (coordinates and per-step sampling derive from it).

    Attributes:
        scores: Each canary's score so far, float64 [m] (higher: more likely included).
        steps: Steps observed.
        support: Number of parameter tensors the canaries are spread over (0 until bound).
    """

    def __init__(self, included: np.ndarray, seed: int):
        self.included = torch.as_tensor(np.asarray(included, dtype=bool))
        self.m = int(self.included.numel())
        self.seed = seed
        self.scores = np.zeros(self.m, dtype=np.float64)
        self.steps = 0
        self.support = 0
        self._coords: list[tuple[int, torch.Tensor, float]] = []
        self._norm = 0.0
        self._sampling = make_generator(seed, "dp_vit", "canary sampling")
        self._others = np.zeros(self.m, dtype=np.float64)

    # --- set-up -----------------------------------------------------------------------------

    def bind(self, params: list[torch.Tensor], per_tensor_bound: list[float] | float, total_bound: float) -> None:
        """Chooses each canary's coordinates and magnitudes in ``params``.

        Every tensor with at least ``m`` elements holds one coordinate of each canary (distinct
        per canary, seeded). A canary's value in tensor k is ``min(per_tensor_bound[k],
        total_bound / sqrt(S))`` for S such tensors, so that its whole gradient obeys both the
        flat bound and any per-layer bound.

        Args:
            params: The trained parameters, in the optimiser's order.
            per_tensor_bound: Clipping bound of each tensor (a float: the same for all).
            total_bound: Bound on a record's whole gradient (C).

        Raises:
            ValueError: No tensor is large enough for ``m`` canaries.
        """
        bounds = per_tensor_bound if isinstance(per_tensor_bound, list) else [per_tensor_bound] * len(params)
        chosen = [k for k, p in enumerate(params) if p.numel() >= self.m]
        if not chosen:
            largest = max((p.numel() for p in params), default=0)
            raise ValueError(f"{self.m} gradient canaries need a parameter tensor of at least {self.m} elements; "
                             f"the largest has {largest}")
        even = total_bound / math.sqrt(len(chosen))
        gen = make_generator(self.seed, "dp_vit", "canary coordinates")
        self._coords = []
        for k in chosen:
            index = torch.randperm(params[k].numel(), generator=gen)[:self.m].to(params[k].device)
            self._coords.append((k, index, float(min(bounds[k], even))))
        self._norm = math.sqrt(sum(a * a for _, _, a in self._coords))
        self.support = len(chosen)

    @property
    def norm(self) -> float:
        """Norm of each canary's gradient (the signal of one inclusion)."""
        return self._norm

    # --- private training (Opacus): through the clipping, around the noise -----------------

    def note_others(self, params: list[torch.Tensor]) -> None:
        """Keeps the other records' part of each canary's projection (their clipped sum, ``p.summed_grad``)."""
        self._others = self._project(params, "summed_grad")

    def sampled_rows(self, params: list[torch.Tensor], rate: float, oversize: float = OVERSIZE,
                     budget: int = ROW_BUDGET) -> Iterator[list[torch.Tensor]]:
        """Yields the per-sample gradients of the included canaries this step's Poisson draw samples.

        Each canary is ``oversize`` times its clipped value, so that only the training's own
        clipping brings it back to the bound (a training that does not clip shows as a bound
        above its claim). Rows come in chunks of at most ``budget`` elements in all, one
        tensor [n, *p.shape] per parameter.
        """
        draw = torch.rand(self.m, generator=self._sampling) < rate
        present = torch.nonzero(draw & self.included).flatten()
        if not len(present):
            return
        total = sum(p.numel() for p in params)
        step = max(1, budget // max(total, 1))
        for start in range(0, len(present), step):
            chunk = present[start:start + step]
            rows = [torch.zeros((len(chunk), *p.shape), dtype=p.dtype, device=p.device) for p in params]
            for k, index, value in self._coords:
                flat = rows[k].view(len(chunk), -1)
                flat[torch.arange(len(chunk), device=flat.device), index[chunk.to(index.device)]] = value * oversize
            yield rows

    def observe_noisy(self, params: list[torch.Tensor], noise_std: float, rate: float) -> None:
        """Adds each canary's log-likelihood ratio of this step's noisy summed gradient (``p.grad``).

        Args:
            params: The parameters, their ``grad`` the noisy sum (before the mean's scaling).
            noise_std: The noise's standard deviation per coordinate (σ·C).
            rate: The Poisson sampling rate q.
        """
        w = (self._project(params, "grad") - self._others) / noise_std  # N(0, 1) when absent, N(mu, 1) when sampled
        mu = self._norm / noise_std
        self.scores += step_llr(w, mu, rate)
        self.steps += 1

    # --- non-private training: the mean gradient of shuffled batches -----------------------

    def epoch_schedule(self, steps: int) -> torch.Tensor:
        """Returns the step (0-based) of this epoch at which each canary appears (once per epoch)."""
        return torch.randint(0, max(steps, 1), (self.m,), generator=self._sampling)

    def add_to_mean(self, params: list[torch.Tensor], batch: int, at: torch.Tensor, step: int) -> None:
        """Adds the included canaries scheduled at ``step`` to the mean gradient of a batch of ``batch``."""
        self._others = self._project(params, "grad") * batch
        present = ((at == step) & self.included).to(self._device(params))
        for k, index, value in self._coords:
            flat = params[k].grad.view(-1)
            flat.index_add_(0, index, present.to(flat.dtype) * (value / batch))

    def observe_mean(self, params: list[torch.Tensor], batch: int) -> None:
        """Adds each canary's projection of this step's summed gradient (mean times ``batch``)."""
        self.scores += (self._project(params, "grad") * batch - self._others) / self._norm
        self.steps += 1

    # --- internals -------------------------------------------------------------------------

    def _project(self, params: list[torch.Tensor], field: str) -> np.ndarray:
        """Each canary's inner product with ``field`` of the parameters, divided by the canary's norm."""
        total = None
        for k, index, value in self._coords:
            part = getattr(params[k], field).reshape(-1).index_select(0, index).double() * value
            total = part if total is None else total + part
        return (total / self._norm).cpu().numpy()

    def _device(self, params: list[torch.Tensor]) -> torch.device:
        return params[self._coords[0][0]].device
