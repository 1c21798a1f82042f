"""White-box gradient canaries: records of the real loader, rows of the real per-sample gradients, in every
tensor. The one-run audit reaches its ceiling without noise and stays under an honest claim; the measured
mechanism refutes a loader that samples at 2q, a clipping of the batch instead of each record, noise left off
the biases and noise at half its plan, and stays under an honest claim."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from bench.privacy.dpsgd.canaries import GradientCanaries
from bench.privacy.dpsgd.canary_scores import CanaryGeometry, simulated_scores
from bench.privacy.dpsgd.method import Schedule, TrainingMethod, plan_training
from bench.privacy.dpsgd.train import train_private
from bench.privacy.mia.one_run import one_run_audit

M = 300
DELTA = 1e-5
N = 200
SCHEDULE = Schedule(epochs=4, batch_size=50, lr=0.01)


class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(48, 64)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.hidden(x.float().flatten(1) / 255)))


def _data(n: int = N):
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 3, 4, 4), dtype=torch.uint8, generator=gen)
    return images, images[:, 0, 0, 0].long() % 10


def _coins(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).random(M) < 0.5


def _audit(method: TrainingMethod, coins: np.ndarray, epochs: int = 4) -> tuple[dict, GradientCanaries]:
    images, labels = _data()
    canaries = GradientCanaries(coins, seed=0)
    schedule = Schedule(epochs=epochs, batch_size=SCHEDULE.batch_size, lr=SCHEDULE.lr)
    train_private(_Tiny, images, labels, method, schedule, 0, "cpu", canaries=canaries)
    return one_run_audit(canaries.scores, coins, DELTA), canaries


def _observed(method: TrainingMethod, canaries: GradientCanaries) -> dict:
    plan = plan_training(method, SCHEDULE, N)
    return canaries.meter.result(plan.sample_rate, DELTA)


def test_without_noise_the_audit_reaches_its_ceiling():
    got, canaries = _audit(TrainingMethod(epsilon=math.inf), _coins())
    assert canaries.steps == 4 * 4 and canaries.support == 4 and canaries.norm == pytest.approx(1.0)
    assert got["epsilon_lower_bound"] == pytest.approx(got["epsilon_ceiling"])
    assert got["epsilon_ceiling"] > 2.5


@pytest.mark.parametrize("clipping", ["flat", "per_layer"])
def test_an_honest_training_stays_under_its_claim(clipping):
    method = TrainingMethod(epsilon=1.0, delta=DELTA, clipping=clipping)
    got, canaries = _audit(method, _coins())
    observed = _observed(method, canaries)
    assert got["epsilon_lower_bound"] <= 1.0
    assert canaries.norm == pytest.approx(1.0)  # the full bound C, per-layer too (C / sqrt(4) in each tensor)
    assert canaries.support == 4
    assert observed["observed.epsilon_low"] <= 1.0
    assert observed["observed.epsilon"] == pytest.approx(1.0, abs=0.2)
    assert observed["observed.clip_ratio"] == pytest.approx(1.0, abs=0.1)
    assert observed["observed.noise_ratio"] == pytest.approx(1.0, abs=0.05)
    assert observed["observed.sample_rate"] == pytest.approx(0.25, abs=0.03)


def _refuted(monkeypatch_cheat, monkeypatch) -> dict:
    monkeypatch_cheat(monkeypatch)
    method = TrainingMethod(epsilon=1.0, delta=DELTA)
    _, canaries = _audit(method, _coins())
    return _observed(method, canaries)


def _loader_at_twice_the_rate(monkeypatch):
    import opacus.data_loader as loaders

    class Greedy(loaders.DPDataLoader):
        def __init__(self, dataset, *, sample_rate, **kwargs):
            super().__init__(dataset, sample_rate=2 * sample_rate, **kwargs)

    monkeypatch.setattr(loaders, "DPDataLoader", Greedy)


def _clips_the_batch_not_each_record(monkeypatch):
    from opacus.optimizers.optimizer import DPOptimizer, _mark_as_processed

    def clip_the_mean(self):
        grads = [self._get_flat_grad_sample(p) for p in self.params]
        batch = max(self.expected_batch_size, 1)
        total = torch.sqrt(sum((g.sum(0) / batch).pow(2).sum() for g in grads))
        factor = min(1.0, self.max_grad_norm / (float(total) + 1e-6))
        for p, g in zip(self.params, grads):
            p.summed_grad = g.sum(0) * factor
            _mark_as_processed(p.grad_sample)

    monkeypatch.setattr(DPOptimizer, "clip_and_accumulate", clip_the_mean)


def _no_noise_on_biases(monkeypatch):
    from opacus.optimizers import optimizer as dp

    def add_noise(self):
        for p in self.params:
            noise = dp._generate_noise(std=self.noise_multiplier * self.max_grad_norm, reference=p.summed_grad,
                                       generator=self.generator, secure_mode=self.secure_mode)
            p.grad = (p.summed_grad + (noise if p.dim() > 1 else 0)).view_as(p)
            dp._mark_as_processed(p.summed_grad)

    monkeypatch.setattr(dp.DPOptimizer, "add_noise", add_noise)


def _half_the_noise(monkeypatch):
    import opacus.optimizers.optimizer as dp

    honest = dp._generate_noise
    monkeypatch.setattr(dp, "_generate_noise", lambda std, reference, generator=None, secure_mode=False:
                        honest(std * 0.5, reference, generator=generator, secure_mode=secure_mode))


@pytest.mark.parametrize("cheat", [_loader_at_twice_the_rate, _clips_the_batch_not_each_record, _no_noise_on_biases,
                                   _half_the_noise], ids=lambda f: f.__name__.strip("_"))
def test_a_cheating_training_is_refuted_by_what_its_canaries_measure(cheat, monkeypatch):
    observed = _refuted(cheat, monkeypatch)
    assert observed["observed.epsilon_low"] > 1.0, observed


def test_the_measurements_name_the_fault(monkeypatch):
    with monkeypatch.context() as patch:
        assert _refuted(_loader_at_twice_the_rate, patch)["observed.sample_rate_low"] > 0.4
    with monkeypatch.context() as patch:
        assert _refuted(_clips_the_batch_not_each_record, patch)["observed.clip_ratio_max"] > 5
    with monkeypatch.context() as patch:
        assert _refuted(_no_noise_on_biases, patch)["observed.noise_ratio_min"] < 1e-3
    with monkeypatch.context() as patch:
        assert _refuted(_half_the_noise, patch)["observed.noise_ratio_min"] == pytest.approx(0.5, abs=0.1)


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
    own = CanaryGeometry(values=np.array([1.0]), sizes=np.array([M]), slot=np.arange(M)[:, None])
    silent = CanaryGeometry(values=np.array([1e-9]), sizes=np.array([M]), slot=np.arange(M)[:, None])
    strong = one_run_audit(simulated_scores(own, coins, 0.05, 0.5, 10, seed=3), coins, DELTA)
    none = one_run_audit(simulated_scores(silent, coins, 1.0, 0.5, 10, seed=3), coins, DELTA)
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


def test_the_cell_report_states_what_the_canaries_measured():
    from bench.cell.report import _one_run_audit

    metrics = {"audit.epsilon_lower_bound": 0.2, "audit.epsilon_ceiling": 5.2, "audit.canaries": 2000.0,
               "audit.gradient_canaries": 1.0, "audit.confidence": 0.95, "audit.observed.sample_rate": 0.251,
               "audit.observed.clip_ratio": 1.02, "audit.observed.noise_ratio": 0.49, "audit.observed.epsilon": 2.9,
               "audit.observed.epsilon_low": 2.41, "audit.refutes_claim": 1.0}
    assert _one_run_audit(metrics).endswith("(ceiling 5.2); measured by its canaries: sampling rate 0.251, clipping "
                                            "x1.02, noise x0.49 of the plan, epsilon 2.9 (at least 2.41) - REFUTES "
                                            "the claim")


def test_the_board_prints_the_bound_and_the_measured_epsilon_beside_the_claim():
    from leaderboard.cells import training_audit_text

    honest = {"audit.epsilon_lower_bound": 0.21, "audit.epsilon_ceiling": 4.52, "audit.observed.epsilon": 1.01,
              "audit.observed.epsilon_low": 0.62, "audit.refutes_claim": 0.0}
    assert training_audit_text({"membership": honest}) == ("one-run audit: eps >= 0.21 (ceiling 4.52); measured eps "
                                                           "1.01 (>= 0.62)")
    refuted = {**honest, "audit.observed.epsilon_low": 2.4, "audit.refutes_claim": 1.0,
               "audit.observed_refutes_claim": 1.0}
    assert training_audit_text({"membership": refuted}) == ("REFUTED by its one-run audit: measured eps >= 2.4 "
                                                            "(one-run bound 0.21)")
    older = {"audit.epsilon_lower_bound": 2.43, "audit.epsilon_ceiling": 4.52}
    assert training_audit_text({"membership": older}) == "one-run audit: eps >= 2.43 (ceiling 4.52)"


def test_per_sample_rows_that_are_not_each_records_gradient_are_seen(monkeypatch):
    from opacus.grad_sample import GradSampleModule

    honest = GradSampleModule.GRAD_SAMPLERS[nn.Linear]

    def shifted(layer, activations, backprops):  # a batch dimension off by one: row i holds record i+1's gradient
        return {p: g.roll(1, dims=0) for p, g in honest(layer, activations, backprops).items()}

    _, clean = _audit(TrainingMethod(epsilon=1.0, delta=DELTA), _coins(), epochs=1)
    assert clean.per_sample_error < 1e-4
    monkeypatch.setitem(GradSampleModule.GRAD_SAMPLERS, nn.Linear, shifted)
    _, rolled = _audit(TrainingMethod(epsilon=1.0, delta=DELTA), _coins(), epochs=1)
    assert rolled.per_sample_error > 0.1
