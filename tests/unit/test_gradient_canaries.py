"""White-box gradient canaries: the one-run audit reaches its ceiling without noise, stays under an
honest claim, and refutes a training that adds less noise than its plan."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from bench.privacy.dpsgd.canaries import GradientCanaries, simulated_scores
from bench.privacy.dpsgd.method import Schedule, TrainingMethod
from bench.privacy.dpsgd.train import train_private
from bench.privacy.mia.one_run import one_run_audit

M = 300
DELTA = 1e-5


class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(48, 10)

    def forward(self, x):
        return self.fc(x.float().flatten(1) / 255)


def _data(n: int = 200):
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 3, 4, 4), dtype=torch.uint8, generator=gen)
    return images, images[:, 0, 0, 0].long() % 10


def _coins(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).random(M) < 0.5


def _audit(method: TrainingMethod, coins: np.ndarray, epochs: int = 4) -> tuple[dict, GradientCanaries]:
    images, labels = _data()
    canaries = GradientCanaries(coins, seed=0)
    train_private(_Tiny, images, labels, method, Schedule(epochs=epochs, batch_size=50, lr=0.01), 0, "cpu",
                  canaries=canaries)
    return one_run_audit(canaries.scores, coins, DELTA), canaries


def test_without_noise_the_audit_reaches_its_ceiling():
    got, canaries = _audit(TrainingMethod(epsilon=math.inf), _coins())
    assert canaries.steps == 4 * 4 and canaries.support == 1 and canaries.norm == pytest.approx(1.0)
    assert got["epsilon_lower_bound"] == pytest.approx(got["epsilon_ceiling"])
    assert got["epsilon_ceiling"] > 2.5


@pytest.mark.parametrize("clipping", ["flat", "per_layer"])
def test_an_honest_training_stays_under_its_claim_near_the_exact_plan(clipping):
    coins = _coins()
    got, canaries = _audit(TrainingMethod(epsilon=1.0, delta=DELTA, clipping=clipping), coins)
    assert got["epsilon_lower_bound"] <= 1.0
    assert canaries.norm == pytest.approx(1.0 if clipping == "flat" else 1 / math.sqrt(2))  # C / sqrt(2 tensors)


def test_a_training_with_a_tenth_of_its_planned_noise_is_refuted(monkeypatch):
    import opacus.optimizers.optimizer as dp_optimizer

    honest = dp_optimizer._generate_noise
    monkeypatch.setattr(dp_optimizer, "_generate_noise",
                        lambda std, reference, generator=None, secure_mode=False:
                        honest(std * 0.1, reference, generator=generator, secure_mode=secure_mode))
    got, _ = _audit(TrainingMethod(epsilon=1.0, delta=DELTA), _coins())
    assert got["epsilon_lower_bound"] > 1.0


def test_a_training_that_does_not_clip_is_refuted(monkeypatch):
    from opacus.optimizers.optimizer import DPOptimizer, _mark_as_processed

    def unclipped(self):
        for p in self.params:
            grad = self._get_flat_grad_sample(p).to(p.dtype).sum(0)
            p.summed_grad = grad if p.summed_grad is None else p.summed_grad + grad
            _mark_as_processed(p.grad_sample)

    monkeypatch.setattr(DPOptimizer, "clip_and_accumulate", unclipped)
    got, _ = _audit(TrainingMethod(epsilon=1.0, delta=DELTA), _coins())
    assert got["epsilon_lower_bound"] > 1.0


def test_the_exact_plan_simulation_separates_only_with_signal():
    coins = _coins()
    strong = one_run_audit(simulated_scores(coins, 20.0, 0.5, 10, seed=3), coins, DELTA)
    none = one_run_audit(simulated_scores(coins, 0.0, 0.5, 10, seed=3), coins, DELTA)
    assert strong["epsilon_lower_bound"] == pytest.approx(strong["epsilon_ceiling"])
    assert none["epsilon_lower_bound"] < 0.5


def test_canaries_need_a_large_enough_tensor():
    canaries = GradientCanaries(np.ones(1000, dtype=bool), seed=0)
    with pytest.raises(ValueError, match="1000 gradient canaries need a parameter tensor"):
        canaries.bind([torch.zeros(10, 10)], 1.0, 1.0)


def test_same_seed_same_scores():
    coins = _coins()
    a, _ = _audit(TrainingMethod(epsilon=2.0, delta=DELTA), coins, epochs=1)
    b, _ = _audit(TrainingMethod(epsilon=2.0, delta=DELTA), coins, epochs=1)
    assert a == b


def test_the_cell_report_states_the_audit_its_reference_and_a_refutation():
    from bench.cell.report import _one_run_audit

    metrics = {"audit.epsilon_lower_bound": 1.42, "audit.epsilon_ceiling": 5.2, "audit.canaries": 2000.0,
               "audit.gradient_canaries": 1.0, "audit.confidence": 0.95, "audit.epsilon_exact": 1.3,
               "audit.epsilon_exact_p05": 1.1, "audit.epsilon_exact_p95": 1.5,
               "audit.epsilon_lower_bound_clean": 5.2, "audit.refutes_claim": 0.0}
    line = _one_run_audit(metrics)
    assert line == ("one-run audit with 2,000 gradient canaries: epsilon >= 1.42 at 95% confidence (ceiling 5.2; "
                    "an exact implementation of the plan: 1.3 (1.1-1.5); non-private twin: 5.2)")
    assert _one_run_audit({**metrics, "audit.refutes_claim": 1.0}).endswith("REFUTES the claim")
    assert _one_run_audit({}) == ""
