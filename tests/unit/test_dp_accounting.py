"""DP-SGD accounting against numbers computed independently of Opacus, and the method's checks."""

from __future__ import annotations

import math

import pytest

from bench.errors import BenchError
from bench.privacy.dpsgd import accounting
from bench.privacy.dpsgd.method import Schedule, TrainingMethod, accounting_facts, plan_training

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered in log")  # PRV at q = 1

MNIST_Q = 256 / 60000
MNIST_STEPS = int(60 / MNIST_Q)  # 60 epochs, as Opacus's compute_dp_sgd_privacy counts them


def log_a(q: float, sigma: float, alpha: int) -> float:
    """log A_α of the Poisson subsampled Gaussian for an integer order (Mironov et al. 2019, Sec. 3.3)."""
    terms = [math.lgamma(alpha + 1) - math.lgamma(k + 1) - math.lgamma(alpha - k + 1)
             + (alpha - k) * math.log1p(-q) + k * math.log(q) + (k * k - k) / (2 * sigma ** 2)
             for k in range(alpha + 1)]
    top = max(terms)
    return top + math.log(sum(math.exp(t - top) for t in terms))


def rdp_epsilon(q: float, sigma: float, steps: int, delta: float, orders: list[int], improved: bool) -> float:
    """ε from integer-order RDP: classic conversion (Mironov 2017) or Balle et al. 2020's."""
    best = math.inf
    for a in orders:
        rdp = steps * log_a(q, sigma, a) / (a - 1)
        if improved:
            eps = rdp + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1)
        else:
            eps = rdp + math.log(1 / delta) / (a - 1)
        best = min(best, eps)
    return best


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact ε of a Gaussian mechanism with μ = sensitivity/std (Balle & Wang 2018, Thm. 8), by bisection."""
    phi = lambda t: 0.5 * math.erfc(-t / math.sqrt(2))  # noqa: E731
    gap = lambda e: phi(-e / mu + mu / 2) - math.exp(e) * phi(-e / mu - mu / 2) - delta  # noqa: E731
    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gap(mid) > 0 else (lo, mid)
    return hi


def test_independent_rdp_reproduces_the_published_mnist_number():
    # Opacus's docs (compute_dp_sgd_privacy): N=60000, B=256, σ=1.12, 60 epochs, δ=1e-5, orders
    # 10, 20, 100 -> (2.95, 1e-5), classic RDP conversion.
    ours = rdp_epsilon(MNIST_Q, 1.12, MNIST_STEPS, 1e-5, [10, 20, 100], improved=False)
    assert ours == pytest.approx(2.95, abs=0.015)


def test_rdp_accountant_matches_independent_rdp():
    # Abadi et al.'s MNIST run, σ=1.1: ε ≈ 2.9-3.0 with the classic conversion; Opacus's
    # conversion (Balle et al. 2020) over orders 1.1..63 gives 2.597.
    ours = accounting.spent_epsilon(1.1, MNIST_Q, MNIST_STEPS, 1e-5, "rdp")
    classic = rdp_epsilon(MNIST_Q, 1.1, MNIST_STEPS, 1e-5, list(range(2, 64)), improved=False)
    assert classic == pytest.approx(3.0, abs=0.02)
    independent = rdp_epsilon(MNIST_Q, 1.1, MNIST_STEPS, 1e-5, list(range(2, 64)), improved=True)
    assert ours == pytest.approx(2.597, abs=0.01)
    assert ours <= independent <= ours + 0.03  # integer orders only: slightly looser


@pytest.mark.parametrize(("sigma", "steps", "delta"), [(2.0, 4, 1e-5), (1.0, 1, 1e-3)])
def test_both_accountants_bound_the_exact_gaussian_epsilon(sigma, steps, delta):
    exact = gaussian_epsilon(math.sqrt(steps) / sigma, delta)  # q = 1: T Gaussians compose to one
    prv = accounting.spent_epsilon(sigma, 1.0, steps, delta, "prv")
    rdp = accounting.spent_epsilon(sigma, 1.0, steps, delta, "rdp")
    assert exact <= prv <= exact + 2 * accounting.PRV_EPS_ERROR
    assert exact <= rdp


def test_noise_multiplier_round_trips_below_the_target():
    for accountant, (eps, delta, q, steps) in (("prv", (3.0, 1e-5, 0.02, 200)), ("rdp", (1.0, 1e-5, 0.01, 1000))):
        sigma = accounting.noise_multiplier(eps, delta, q, steps, accountant)
        spent = accounting.spent_epsilon(sigma, q, steps, delta, accountant)
        assert eps - 0.05 <= spent <= eps


def test_cross_check_holds_with_the_measured_tolerance():
    for history in ([(1.1, MNIST_Q, MNIST_STEPS)], [(1.04, 0.25, 8)], [(0.8, 0.02, 250), (0.8, 0.02, 250)]):
        check = accounting.cross_check(history, 1e-5)
        assert check.holds, check
        assert check.prv <= check.rdp
    mnist = accounting.cross_check([(1.1, MNIST_Q, MNIST_STEPS)], 1e-5)
    assert mnist.ratio == pytest.approx(1.086, abs=0.01)
    assert not accounting.CrossCheck(prv=3.0, rdp=2.0).holds


def test_shared_fusion_needs_more_noise_than_disjoint():
    assert accounting.fusion_steps(100, "disjoint") == 100 and accounting.fusion_steps(100, "shared") == 200
    disjoint = accounting.noise_multiplier(2.0, 1e-5, 0.05, accounting.fusion_steps(100, "disjoint"), "rdp")
    shared = accounting.noise_multiplier(2.0, 1e-5, 0.05, accounting.fusion_steps(100, "shared"), "rdp")
    assert shared > disjoint
    with pytest.raises(BenchError, match="fusion_data"):
        accounting.fusion_steps(100, "both")


def test_history_composes_runs_and_handles_edges():
    one = accounting.history_epsilon([(1.0, 0.1, 40)], 1e-5, "rdp")
    two = accounting.history_epsilon([(1.0, 0.1, 20), (1.0, 0.1, 20)], 1e-5, "rdp")
    assert one == pytest.approx(two)
    assert accounting.spent_epsilon(1.0, 0.1, 0, 1e-5) == 0.0
    assert accounting.spent_epsilon(0.0, 0.1, 10, 1e-5) == math.inf
    with pytest.raises(BenchError, match="accountant"):
        accounting.spent_epsilon(1.0, 0.1, 10, 1e-5, "gdp")


def test_noisy_max_scale():
    assert accounting.noisy_max_scale(1000, 0.1) == pytest.approx(0.02)
    with pytest.raises(BenchError):
        accounting.noisy_max_scale(0, 0.1)


def test_delta_must_be_below_one_over_n():
    TrainingMethod(delta=0.009).validate(100)
    with pytest.raises(BenchError, match=r"task.training.delta=0.01 must be below 1/N"):
        TrainingMethod(delta=0.01).validate(100)
    assert TrainingMethod().resolved_delta(100) == pytest.approx(1e-3)


@pytest.mark.parametrize(("kwargs", "setting"), [
    ({"clipping": "median"}, "clipping"), ({"accountant": "gdp"}, "accountant"),
    ({"fusion_data": "half"}, "fusion_data"),
    ({"selection": "best"}, "selection"), ({"max_grad_norm": 0.0}, "max_grad_norm"), ({"alpha": -1.0}, "alpha"),
    ({"epsilon": 0.0}, "epsilon"), ({"selection": "private_val", "selection_epsilon": 3.0}, "selection_epsilon"),
])
def test_invalid_settings_name_the_setting(kwargs, setting):
    with pytest.raises(BenchError, match=f"task.training.{setting}"):
        TrainingMethod(**kwargs).validate(1000)


def test_labels_and_properties():
    assert TrainingMethod().label() == "DP-SGD(flat, ε=3)"
    assert TrainingMethod(clipping="per_layer_median").label() == "DP-SGD(per_layer_median, ε=3, unbacked)"
    assert TrainingMethod(epsilon=math.inf).label() == "non-private"
    assert TrainingMethod(epsilon=8, fusion=True, fusion_data="shared").label() == "DP-SGD(flat, ε=8)+fusion(shared)"
    assert not TrainingMethod(clipping="per_layer_median").backed and TrainingMethod().backed
    assert not TrainingMethod().non_private().private
    assert TrainingMethod(selection="private_val", selection_epsilon=0.5).dp_epsilon == 2.5


def test_plan_and_claim():
    schedule = Schedule(epochs=3, batch_size=16, lr=1e-3)
    plan = plan_training(TrainingMethod(accountant="rdp", fusion=True), schedule, 100)
    assert (plan.steps_per_epoch, plan.sample_rate, plan.steps, plan.models) == (4, 0.25, 12, 2)  # halves of 50
    method = TrainingMethod(accountant="rdp", selection="private_val", selection_epsilon=0.5)
    facts = accounting_facts(method, schedule, 100)
    assert facts["steps"] == 21 and facts["sample_rate"] == 1 / 7 and facts["delta"] == pytest.approx(1e-3)
    assert 2.95 <= facts["epsilon"] <= 3.0  # DP-SGD at 2.5 plus 0.5 for selection
    assert "report-noisy-max" in facts["note"]
    with pytest.raises(BenchError, match="task.schedule.batch_size"):
        plan_training(method, Schedule(epochs=1, batch_size=0, lr=1e-3), 100)
