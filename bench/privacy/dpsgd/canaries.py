"""White-box gradient canaries for the one-run audit of DP-SGD (Steinke, Nasr & Jagielski 2023, §6).

A gradient canary is a training record whose gradient the auditor chooses: a "Dirac"
vector, zero except at one coordinate in *every* parameter tensor (a coordinate of its own
in a tensor with at least ``m`` elements; in a smaller tensor -- a bias, a LayerNorm, a
class token -- a coordinate shared round-robin with other canaries), its norm the full
bound C under both flat and per-layer clipping: under per-layer bounds ``C / sqrt(L)`` in
each of the L tensors; under flat clipping 90% of the squared norm on its own coordinates
and 10% on the shared ones (:func:`_values`). Each canary is included by a seeded fair coin.

An included canary travels the path a record travels, so a fault on that path shows:

- it is a record of the dataset the training's own Poisson loader samples from (a loader
  that samples more often than its plan samples the canaries more often too);
- it has a row in the batch's per-sample gradients, where the training's per-sample
  machinery put the row of the batch position the loader gave it; the auditor fills that
  row with the canary, ten times its clipped size (:data:`OVERSIZE`), before the
  training's own clipping (a training that does not clip each row to the bound, or clips
  the summed gradient instead, lets the oversize through);
- the training adds its noise to the sum (noise left off a tensor, or smaller than the
  plan's, shows in the residuals of that tensor).

At each step the auditor computes the other records' contribution itself, clipping their
rows by the claim's rule, and observes the *residual* -- the noisy sum minus that -- at
every canary coordinate. Knowing the other records stays inside the claim: the accountant
bounds each step's pair ``N(a, s²)`` against ``(1 - q) N(a, s²) + q N(a + g, s²)`` for every
fixed sum ``a`` of the others. The residuals feed two things:

- the canaries' scores (:mod:`bench.privacy.dpsgd.canary_scores`), which use nothing else,
  for the one-run bound;
- the measured mechanism (:mod:`bench.privacy.dpsgd.observed`), which also uses which
  canaries each batch held and the batches' sizes.

Without noise (the non-private twin: shuffled batches, no per-sample gradients) an included
canary is added to the mean gradient once per epoch at a step the auditor draws, and its
score is the sum of its projections on its own (unshared) coordinates.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from bench.privacy.dpsgd.canary_scores import (
    PER_SAMPLE_TOLERANCE,
    CanaryGeometry,
    StreamingScorer,
    simulated_scores,
    step_llr,
)
from bench.privacy.dpsgd.observed import MechanismMeter
from bench.randomness.seeding import make_generator

__all__ = ["GradientCanaries", "OVERSIZE", "PER_SAMPLE_TOLERANCE", "simulated_scores", "step_llr"]

OVERSIZE = 10.0
"""A canary's per-sample gradient is this many times its clipped value: the clipping must do its job."""
CHECKED_ROWS = 4
"""Training records of the first batch whose per-sample gradients are checked against autograd."""


SHARED_SHARE = 0.1
"""Under flat clipping, the share of a canary's squared norm in the tensors where it shares coordinates."""


def _values(own: list[bool], bounds: list[float], total: float) -> list[float]:
    """A canary's value in each tensor: its norm is ``total`` and no tensor's part exceeds that tensor's bound.

    Under flat clipping (every tensor's bound is the total) the tensors where each canary has
    a coordinate of its own carry 1 - :data:`SHARED_SHARE` of the squared norm, the shared ones
    the rest: crosstalk between canaries in shared coordinates then costs the one-run scores
    little, and every tensor still carries canaries. Under per-layer bounds each tensor
    carries ``min(bound, total / sqrt(L))``.
    """
    count, mine = len(own), sum(own)
    if any(b < total for b in bounds) or mine in (0, count):
        return [float(min(b, total / math.sqrt(count))) for b in bounds]
    return [total * math.sqrt((1.0 - SHARED_SHARE) / mine) if o else total * math.sqrt(SHARED_SHARE / (count - mine))
            for o in own]


class GradientCanaries:
    """The canaries of one audited training run: where they live, what each step shows, their scores.

    Args:
        included: Each canary's inclusion coin, bool [m].
        seed: The run's seed (coordinates and the non-private schedule derive from it).

    Attributes:
        scores: Each canary's score so far, float64 [m] (higher: more likely included).
        steps: Steps observed.
        support: Number of parameter tensors the canaries live in (0 until bound).
        geometry: The layout (:class:`~bench.privacy.dpsgd.canary_scores.CanaryGeometry`), once bound.
        meter: The measured mechanism of a private run (None otherwise).
    """

    def __init__(self, included: np.ndarray, seed: int):
        self.included = torch.as_tensor(np.asarray(included, dtype=bool))
        self.m = int(self.included.numel())
        self.seed = seed
        self.steps = 0
        self.support = 0
        self.geometry: CanaryGeometry | None = None
        self.meter: MechanismMeter | None = None
        self._scores = np.zeros(self.m, dtype=np.float64)
        self._scorer: StreamingScorer | None = None
        self._index: list[torch.Tensor] = []
        self._coords: list[torch.Tensor] = []
        self._values: list[float] = []
        self._sampling = make_generator(seed, "dp_vit", "canary sampling")
        self._others: list[torch.Tensor] = []
        self._batch = (torch.zeros(0, dtype=torch.long), 0)
        self.per_sample_error = 0.0

    @property
    def ids(self) -> torch.Tensor:
        """The included canaries' indices: the records the training adds to its dataset, in order."""
        return torch.nonzero(self.included).flatten()

    @property
    def scores(self) -> np.ndarray:
        """Each canary's score so far."""
        return self._scorer.scores if self._scorer is not None else self._scores

    @property
    def norm(self) -> float:
        """Norm of each canary's clipped gradient (the signal of one inclusion)."""
        return 0.0 if self.geometry is None else self.geometry.norm

    # --- set-up -----------------------------------------------------------------------------

    def bind(self, params: list[torch.Tensor], per_tensor_bound: list[float] | float, total_bound: float) -> None:
        """Chooses each canary's coordinate and value in every tensor of ``params`` (see the module).

        Args:
            params: The trained parameters, in the optimiser's order.
            per_tensor_bound: Clipping bound of each tensor (a float: the same for all).
            total_bound: Bound on a record's whole gradient (C).

        Raises:
            ValueError: No tensor has ``m`` elements (the canaries need coordinates of their own somewhere).
        """
        bounds = per_tensor_bound if isinstance(per_tensor_bound, list) else [per_tensor_bound] * len(params)
        if not any(p.numel() >= self.m for p in params):
            largest = max((p.numel() for p in params), default=0)
            raise ValueError(f"{self.m} gradient canaries need a parameter tensor of at least {self.m} elements; "
                             f"the largest has {largest}")
        values = _values([p.numel() >= self.m for p in params], bounds, total_bound)
        gen = make_generator(self.seed, "dp_vit", "canary coordinates")
        self._index, self._coords, self._values, slots, sizes, offset = [], [], [], [], [], 0
        for p, value in zip(params, values):
            order = torch.randperm(p.numel(), generator=gen)
            index = order[:self.m] if p.numel() >= self.m else order[torch.arange(self.m) % p.numel()]
            coords, inverse = torch.unique(index, return_inverse=True)
            self._index.append(index.to(p.device))
            self._coords.append(coords.to(p.device))
            self._values.append(value)
            slots.append(inverse.numpy() + offset)
            sizes.append(len(coords))
            offset += len(coords)
        self.geometry = CanaryGeometry(values=np.asarray(self._values), sizes=np.asarray(sizes),
                                       slot=np.stack(slots, axis=1))
        self.support = len(params)

    def start_private(self, noise_std: float, noise_multiplier: float, rate: float, records: int) -> None:
        """Prepares the scoring and the measurement of a private run (after :meth:`bind`).

        Args:
            noise_std: The plan's noise std σC.
            noise_multiplier: The plan's σ.
            rate: The plan's Poisson rate q.
            records: Records the loader samples from (training records and included canaries).
        """
        self._scorer = StreamingScorer(self.geometry, rate, noise_std)
        self.meter = MechanismMeter(self.geometry, noise_std, noise_multiplier, records)

    # --- private training: canaries are rows of the batch's per-sample gradients -------------

    def fill_rows(self, params: list[torch.Tensor], slots: torch.Tensor, bounds: list[float], flat: bool) -> None:
        """Puts the batch's canaries into their per-sample gradient rows, after noting the other records' clipped sum.

        Args:
            params: The trained parameters, ``grad_sample`` [B, *shape] set by the per-sample machinery.
            slots: The batch's canary index per row (-1: a training record), int64 [B], in the
                loader's order.
            bounds: The claim's clipping bound of each tensor.
            flat: The claim clips each row's whole gradient to ``bounds[0]`` (else tensor by tensor).
        """
        slots = slots.to(params[0].device)
        rows = torch.nonzero(slots >= 0).flatten()
        record = (slots < 0).to(params[0].dtype)
        ids = slots[rows]
        samples = [p.grad_sample for p in params]
        if any(s.shape[0] != len(slots) for s in samples):
            raise RuntimeError(f"per-sample gradients have {[s.shape[0] for s in samples]} rows for a batch of "
                               f"{len(slots)} records")
        flats = [s.reshape(len(slots), p.numel()) for s, p in zip(samples, params)]
        norms = torch.stack([f.norm(2, dim=1) for f in flats], dim=1)
        self._others = []
        for k, f in enumerate(flats):
            bound = bounds[0] if flat else bounds[k]
            size = norms.norm(2, dim=1) if flat else norms[:, k]
            factor = (bound / (size + 1e-6)).clamp(max=1.0) * record  # the claim's clipping; canary rows count 0
            self._others.append((factor[:, None] * f[:, self._coords[k]]).sum(0).double())
        for s, p, index, value in zip(samples, params, self._index, self._values):
            flat_rows = s.view(len(slots), p.numel())
            flat_rows[rows] = 0
            flat_rows[rows, index[ids]] = value * OVERSIZE
        self._batch = (ids.cpu(), len(slots))

    def observe_noisy(self, params: list[torch.Tensor]) -> None:
        """Scores this step from the noisy summed gradient (``p.grad``, before the mean's scaling)."""
        residual = torch.cat([p.grad.reshape(-1)[coords].double() - others
                              for p, coords, others in zip(params, self._coords, self._others)]).cpu().numpy()
        self._scorer.update(residual)
        ids, batch = self._batch
        self.meter.update(residual, ids.numpy(), batch)
        self.steps += 1

    def check_rows(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, slots: torch.Tensor,
                   params: list[torch.Tensor], rows: int = CHECKED_ROWS) -> None:
        """Compares the per-sample machinery's rows of a few training records with autograd's gradients of each alone.

        The canaries' rows are written by the auditor, so a per-sample gradient formula that is
        wrong for real records (a wrong batch dimension, rows mixed up) would not show in their
        scores; this check sees it. Call after the backward pass, before :meth:`fill_rows`.
        The largest relative difference goes to ``per_sample_error``.
        """
        records = torch.nonzero(slots.to(x.device) < 0).flatten()[:rows]
        if not len(records):
            return
        toggle = getattr(model, "disable_hooks", None)
        if toggle is not None:
            model.disable_hooks()
        worst = 0.0
        try:
            for i in records.tolist():
                loss = torch.nn.functional.cross_entropy(model(x[i:i + 1]), y[i:i + 1])
                exact = torch.autograd.grad(loss, params, allow_unused=True)
                for p, g in zip(params, exact):
                    g = torch.zeros_like(p) if g is None else g
                    row = p.grad_sample[i]
                    worst = max(worst, float((row - g).norm() / max(float(g.norm()), 1e-6)))
        finally:
            if toggle is not None:
                model.enable_hooks()
        self.per_sample_error = max(self.per_sample_error, worst)

    # --- non-private training: the mean gradient of shuffled batches -----------------------

    def epoch_schedule(self, steps: int) -> torch.Tensor:
        """Returns the step (0-based) of this epoch at which each canary appears (once per epoch)."""
        return torch.randint(0, max(steps, 1), (self.m,), generator=self._sampling)

    def add_to_mean(self, params: list[torch.Tensor], batch: int, at: torch.Tensor, step: int) -> None:
        """Adds the included canaries scheduled at ``step`` to the mean gradient of a batch of ``batch``."""
        self._others = [p.grad.reshape(-1)[c].double() * batch for p, c in zip(params, self._coords)]
        present = ((at == step) & self.included).to(params[0].device)
        for p, index, value in zip(params, self._index, self._values):
            flat = p.grad.view(-1)
            flat.index_add_(0, index, present.to(flat.dtype) * (value / batch))

    def observe_mean(self, params: list[torch.Tensor], batch: int) -> None:
        """Adds each canary's projection, on its own coordinates, of this step's summed gradient (mean × batch)."""
        own = [k for k, size in enumerate(self.geometry.sizes) if size == self.m]
        total = np.zeros(self.m)
        for k in own:
            got = params[k].grad.reshape(-1)[self._index[k]].double() * batch
            at = torch.searchsorted(self._coords[k], self._index[k])
            total += ((got - self._others[k][at]) * self._values[k]).cpu().numpy()
        weight = math.sqrt(sum(self._values[k] ** 2 for k in own)) or 1.0
        self._scores += total / weight
        self.steps += 1
