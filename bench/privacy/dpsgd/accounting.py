"""DP-SGD privacy accounting: pure functions over Opacus's accountants.

A training history is a list of ``(noise_multiplier, sample_rate, steps)`` triples, the
form Opacus's accountants keep: each triple is ``steps`` compositions of the Poisson
subsampled Gaussian mechanism (add/remove-one neighbours). Every function builds a fresh
accountant, so nothing here carries state between calls.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from bench.errors import BenchError

ACCOUNTANTS = ("prv", "rdp")
PRV_EPS_ERROR = 0.01
"""Opacus's default ``eps_error`` of the PRV accountant (its ε is within about twice this of the truth)."""
RDP_OVER_PRV_MAX = 6.0
"""Largest RDP/PRV ratio accepted by :func:`cross_check` (measured up to 5.56; see there)."""

History = Sequence[tuple[float, float, int]]


def other_accountant(accountant: str) -> str:
    """Returns the accountant that cross-checks ``accountant`` (``prv`` <-> ``rdp``)."""
    _check_accountant(accountant)
    return "rdp" if accountant == "prv" else "prv"


def noise_multiplier(epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str = "prv") -> float:
    """Returns a noise multiplier σ that meets (ε, δ) with at most 0.01 of ε to spare.

    Opacus's ``get_noise_multiplier`` bisects on σ until ``epsilon - 0.01 <`` ε(σ) ``≤
    epsilon`` and returns that σ, so ``spent_epsilon`` of the result never exceeds
    ``epsilon``. Results are memoised (a PRV search takes seconds).

    Args:
        epsilon: Target ε (finite, > 0).
        delta: Target δ in (0, 1).
        sample_rate: Poisson sampling rate q in (0, 1].
        steps: Number of noisy steps the accountant must cover.
        accountant: ``prv`` or ``rdp``.

    Raises:
        BenchError: Arguments out of range, or a budget no σ up to 1e6 meets.
    """
    _check_run(delta, sample_rate, steps, accountant)
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise BenchError(f"target epsilon must be finite and > 0, got {epsilon!r}")
    try:
        return _search_noise(float(epsilon), float(delta), float(sample_rate), int(steps), accountant)
    except (ValueError, RuntimeError) as exc:
        raise BenchError(f"no noise multiplier meets epsilon={epsilon:g}, delta={delta:g} over {steps} steps "
                         f"at sample rate {sample_rate:.4g} ({exc})") from None


@functools.lru_cache(maxsize=256)
def _search_noise(epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str) -> float:
    """Opacus's bisection, memoised: runs are planned more than once (claim, then training)."""
    from opacus.accountants.utils import get_noise_multiplier

    with _quiet():
        return float(get_noise_multiplier(target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate,
                                          steps=steps, accountant=accountant))


def spent_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                  accountant: str = "prv") -> float:
    """Returns the ε that ``steps`` noisy steps at (σ, q) spend at δ.

    Args:
        noise_multiplier: σ, the noise std in units of the sensitivity (0: no privacy).
        sample_rate: Poisson sampling rate q in (0, 1].
        steps: Number of noisy steps (0 spends nothing).
        delta: δ in (0, 1).
        accountant: ``prv`` or ``rdp``.
    """
    return history_epsilon([(noise_multiplier, sample_rate, steps)], delta, accountant)


def history_epsilon(history: History, delta: float, accountant: str = "prv") -> float:
    """Returns the ε of a whole training history (several runs compose by concatenation).

    Args:
        history: ``(noise_multiplier, sample_rate, steps)`` triples, as Opacus records them.
        delta: δ in (0, 1).
        accountant: ``prv`` or ``rdp``.
    """
    _check_accountant(accountant)
    history = [(float(s), float(q), int(t)) for s, q, t in history if int(t) > 0]
    if not history:
        return 0.0
    for s, q, t in history:
        _check_run(delta, q, t, accountant)
        if s <= 0:
            return math.inf
    from opacus.accountants import create_accountant

    acc = create_accountant(mechanism=accountant)
    acc.history = history
    try:
        with _quiet():
            return float(acc.get_epsilon(delta=delta))
    except (ValueError, RuntimeError) as exc:  # PRV refuses a δ too small for its float grid
        raise BenchError(f"the {accountant} accountant cannot compute epsilon at delta={delta:g}: {exc}") from None


@dataclass(frozen=True)
class CrossCheck:
    """Both accountants' ε for one history, and the tolerance they are held to.

    Attributes:
        prv: The PRV accountant's ε (an upper bound, about 2 · ``eps_error`` above the true ε at most).
        rdp: The RDP accountant's ε (an upper bound, looser than PRV).
        eps_error: PRV's discretisation error allowance.
        max_ratio: The largest RDP/PRV ratio accepted.
    """

    prv: float
    rdp: float
    eps_error: float = PRV_EPS_ERROR
    max_ratio: float = RDP_OVER_PRV_MAX

    @property
    def ratio(self) -> float:
        """RDP's ε over PRV's (1 when both are 0)."""
        return self.rdp / self.prv if self.prv > 0 else (1.0 if self.rdp == 0 else math.inf)

    @property
    def holds(self) -> bool:
        """Whether PRV ≤ RDP + 2 · eps_error (from PRV's error bounds) and RDP/PRV ≤ max_ratio (measured)."""
        return self.prv <= self.rdp + 2 * self.eps_error and self.ratio <= self.max_ratio


def cross_check(history: History, delta: float) -> CrossCheck:
    """Computes one history's ε with both accountants.

    What is known: both are upper bounds on the true ε of the Poisson subsampled
    Gaussian mechanism. PRV (Gopi et al. 2021) is numerically tight: Opacus returns its
    upper estimate (estimate at δ - δ/1000, plus ``eps_error`` = 0.01) and the truth is
    above its lower one (at δ + δ/1000, minus 0.01), so PRV ≤ RDP + 2 · 0.01 must hold for
    any history (on q = 1, where the exact ε is known, PRV exceeded it by 0.010). RDP
    (Mironov et al. 2019, with Balle et al. 2020's conversion over Opacus's default orders
    1.1..63) is looser; by how much is not a theorem. Measured with Opacus 1.6, σ chosen by
    PRV for ε ∈ {0.5, 1, 3, 8}, q ∈ {0.004, 0.05, 0.25}, T ∈ {4, 50, 1000}, δ ∈ {1e-5,
    1e-3} (72 configs): RDP/PRV from 1.075 (large σ, many steps) to 5.56 (ε=0.5, q=0.004,
    T=4, δ=1e-3, where RDP's best order is its largest, 63); 1.08-1.24 on ten more typical
    configs (σ 0.5-5, T 20-14062), e.g. Abadi et al.'s MNIST run (σ=1.1, q=256/60000,
    60 epochs, δ=1e-5): RDP 2.597, PRV 2.392, ratio 1.086. The ratio bound
    :data:`RDP_OVER_PRV_MAX` = 6 is therefore a tripwire for gross errors, not a tight claim.

    Args:
        history: ``(noise_multiplier, sample_rate, steps)`` triples.
        delta: δ in (0, 1).
    """
    return CrossCheck(prv=history_epsilon(history, delta, "prv"), rdp=history_epsilon(history, delta, "rdp"))


def fusion_steps(steps: int, fusion_data: str) -> int:
    """Returns how many steps the accountant must cover for one fused pair of runs.

    ``disjoint``: each record is in one model's half only, so by parallel composition the
    pair costs what one run costs (``steps``). ``shared``: both models see every record,
    and the two runs compose (``2 * steps``).

    Args:
        steps: Noisy steps of one model.
        fusion_data: ``disjoint`` or ``shared``.

    Raises:
        BenchError: An unknown ``fusion_data``.
    """
    if fusion_data == "disjoint":
        return steps
    if fusion_data == "shared":
        return 2 * steps
    raise BenchError(f"task.training.fusion_data must be disjoint or shared, got {fusion_data!r}")


def noisy_max_scale(n_val: int, epsilon: float) -> float:
    """Returns the Laplace scale of report-noisy-max over validation accuracies.

    One validation record changes an accuracy (a fraction of ``n_val``) by at most
    Δ = 1/n_val; report-noisy-max with Laplace(2Δ/ε) noise on each candidate is ε-DP for
    queries of sensitivity Δ (Dwork & Roth 2014, Sec. 3.3; the factor 2 covers queries
    that are not monotone, which is the safe reading for accuracies).

    Args:
        n_val: Validation records.
        epsilon: The ε the selection spends.

    Raises:
        BenchError: No validation record, or ε not finite and > 0.
    """
    if n_val < 1:
        raise BenchError("private model selection needs at least one validation record")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise BenchError(f"task.training.selection_epsilon must be finite and > 0, got {epsilon!r}")
    return 2.0 / (n_val * epsilon)


def _check_accountant(accountant: str) -> None:
    if accountant not in ACCOUNTANTS:
        raise BenchError(f"task.training.accountant must be one of {', '.join(ACCOUNTANTS)}, got {accountant!r}")


def _check_run(delta: float, sample_rate: float, steps: int, accountant: str) -> None:
    _check_accountant(accountant)
    if not (0 < delta < 1):
        raise BenchError(f"delta must be in (0, 1), got {delta!r}")
    if not (0 < sample_rate <= 1):
        raise BenchError(f"sample rate must be in (0, 1], got {sample_rate!r}")
    if steps < 1:
        raise BenchError(f"the accountant needs at least one step, got {steps!r}")


@contextmanager
def _quiet() -> Iterator[None]:
    """Silences RDP's 'optimal order is the largest alpha' hint (the looseness is documented above) and
    PRV's log(0) at sample rate 1 (a masked branch of ``np.where``: the result is finite)."""
    import numpy as np

    with warnings.catch_warnings(), np.errstate(divide="ignore"):
        warnings.filterwarnings("ignore", message="Optimal order is the (largest|smallest) alpha")
        yield
