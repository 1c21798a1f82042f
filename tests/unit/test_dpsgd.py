"""DP-SGD training core: clipping against a microbatch-of-one reference, median clipping, fusion, determinism."""

from __future__ import annotations

import copy
import math
import statistics

import pytest
import torch
import torch.nn.functional as F

from bench.errors import BenchError
from bench.nn.vit import build_vit
from bench.privacy.dpsgd import median
from bench.privacy.dpsgd.fusion import fuse, fusion_weights
from bench.privacy.dpsgd.method import TrainingMethod, accounting_facts
from bench.privacy.dpsgd.train import Schedule, per_example_loss, predict_proba, train_private

CLASSES = 4
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing")


def tiny_vit() -> torch.nn.Module:
    return build_vit(16, 8, 1, 16, 2, 32, CLASSES)


def tiny_data(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 3, 16, 16), generator=g, dtype=torch.uint8)
    return images, torch.randint(0, CLASSES, (n,), generator=g)


def per_sample_reference(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[list[torch.Tensor]]:
    """Per-sample gradients by one backward pass per example (no Opacus involved)."""
    grads = []
    for i in range(len(x)):
        model.zero_grad()
        F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        grads.append([p.grad.detach().clone() for p in model.parameters()])
    return grads


def opacus_clipped_sum(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, make_optimizer) -> list[torch.Tensor]:
    """Opacus's clipped per-sample gradient sum (``p.summed_grad``) for one batch, no noise."""
    from opacus import GradSampleModule

    gsm = GradSampleModule(model, loss_reduction="mean")
    opt = make_optimizer(torch.optim.SGD(gsm.parameters(), lr=0.1), len(list(gsm.parameters())))
    F.cross_entropy(gsm(x), y).backward()
    opt.clip_and_accumulate()
    return [p.summed_grad.detach().clone() for p in gsm.parameters()]


def assert_close_lists(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def batch():
    torch.manual_seed(3)
    model = tiny_vit()
    with torch.no_grad():  # torchvision zero-initialises the head: give every layer a gradient
        model.vit.heads.head.weight.normal_(0, 0.5)
    x, y = tiny_data(6, seed=1)
    return model, x, y, per_sample_reference(copy.deepcopy(model), x, y)


def test_build_vit_passes_opacus_strict_validation():
    from opacus.validators import ModuleValidator

    assert ModuleValidator.validate(tiny_vit(), strict=True) == []


def test_build_vit_names_the_bad_setting():
    with pytest.raises(BenchError, match="task.model.patch_size"):
        build_vit(16, 5, 1, 16, 2, 32, 4)
    with pytest.raises(BenchError, match="task.model.heads"):
        build_vit(16, 8, 1, 18, 4, 32, 4)


def test_vit_inputs_are_the_tasks_network_resize_in_uint8_and_leave_inputs_at_size_alone():
    from bench.nn.images import to_input
    from bench.nn.vit import vit_inputs

    images = torch.randint(0, 256, (5, 3, 48, 40), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    resized = vit_inputs(images, 32, batch=2)  # chunks of 2: the same as at once
    assert resized.dtype == torch.uint8 and resized.shape == (5, 3, 32, 32)
    want = to_input(images, 32, torch.device("cpu"))  # [-1, 1], what the other tasks' networks see
    assert (resized.float() / 127.5 - 1 - want).abs().max() <= 0.5 / 127.5 + 1e-6  # rounded to the nearest level
    assert torch.equal(resized, vit_inputs(images, 32, batch=512))
    assert vit_inputs(resized, 32) is resized and vit_inputs(images[:, :, :32, :32], 32).data_ptr() == images.data_ptr()


def test_greyscale_images_are_repeated_to_rgb():
    torch.manual_seed(0)
    model = tiny_vit().eval()
    grey = tiny_data(2)[0][:, :1]
    torch.testing.assert_close(model(grey), model(grey.expand(-1, 3, -1, -1).contiguous()), rtol=0, atol=0)


@pytest.mark.parametrize("clipping", ["flat", "per_layer"])
def test_opacus_clipping_matches_microbatch_reference(batch, clipping):
    from opacus.optimizers import DPOptimizer, DPPerLayerOptimizer

    model, x, y, reference = batch
    bound = 0.05  # small enough that every sample is clipped
    layers = len(reference[0])
    want = [torch.zeros_like(g) for g in reference[0]]
    for grads in reference:
        if clipping == "flat":
            norm = torch.sqrt(sum((g ** 2).sum() for g in grads))
            factors = [min(1.0, bound / float(norm))] * layers
        else:
            factors = [min(1.0, bound / math.sqrt(layers) / float(g.norm())) if g.norm() > 0 else 1.0 for g in grads]
        for acc, g, f in zip(want, grads, factors):
            acc += f * g

    def make(opt, n_params):
        if clipping == "flat":
            return DPOptimizer(opt, noise_multiplier=0.0, max_grad_norm=bound, expected_batch_size=len(x))
        return DPPerLayerOptimizer(opt, noise_multiplier=0.0, max_grad_norm=[bound / math.sqrt(n_params)] * n_params,
                                   expected_batch_size=len(x))

    assert_close_lists(opacus_clipped_sum(copy.deepcopy(model), x, y, make), want)


def test_median_threshold_worked_examples():
    torch.testing.assert_close(median.median_threshold(torch.tensor([[1.0, 2, 3, 4], [4, 3, 2, 1]])),
                               torch.tensor([2.5, 2.5]))
    torch.testing.assert_close(median.median_threshold(torch.tensor([[1.0, 5, 3]])), torch.tensor([3.0]))


def test_per_layer_clipping_bounds_every_layer():
    norms = torch.tensor([[0.5, 2.0, 3.0, 8.0], [0.0, 1.0, 1.0, 0.2]])
    z = median.median_threshold(norms)
    factors = median.clip_per_layer(norms, z)
    assert ((norms * factors) <= z[:, None] + 1e-6).all()
    assert (factors <= 1).all() and factors[1, 0] == 1  # a zero gradient stays as it is
    torch.testing.assert_close(factors[0], torch.tensor([1.0, 1.0, 2.5 / 3.0, 2.5 / 8.0]))
    assert median.sensitivity(z, 0.01) == pytest.approx(2.51)
    assert median.sensitivity(z[:0], 0.01) == 0.01


def test_median_optimizer_matches_microbatch_reference(batch):
    model, x, y, reference = batch
    want = [torch.zeros_like(g) for g in reference[0]]
    scales = []
    for grads in reference:
        norms = [float(g.norm()) for g in grads]
        z = statistics.median(norms)
        scales.append(z + 0.01)
        for acc, g, n in zip(want, grads, norms):
            acc += g / max(1.0, n / z)

    optimizers = []

    def make(opt, n_params):
        optimizers.append(median.MedianPerLayerOptimizer(opt, noise_multiplier=0.0, alpha=0.01,
                                                         expected_batch_size=len(x)))
        return optimizers[0]

    assert_close_lists(opacus_clipped_sum(copy.deepcopy(model), x, y, make), want)
    assert optimizers[0].pending_sensitivity == pytest.approx(max(scales), rel=1e-5)


def test_median_optimizer_noise_has_one_scale_per_step():
    from opacus import GradSampleModule

    torch.manual_seed(0)
    gsm = GradSampleModule(torch.nn.Linear(3, 2), loss_reduction="sum")
    opt = median.MedianPerLayerOptimizer(torch.optim.SGD(gsm.parameters(), lr=1.0), noise_multiplier=2.0, alpha=0.5,
                                         expected_batch_size=4, loss_reduction="sum",
                                         generator=torch.Generator().manual_seed(0))
    x = torch.zeros(4, 3)  # weight gradients vanish: Z = median(|w|, |b|) of each sample
    gsm(x).sum().backward()
    opt.clip_and_accumulate()
    scale = opt.pending_sensitivity
    opt.add_noise()
    assert scale == pytest.approx(math.sqrt(2) / 2 + 0.5)  # layer norms (0, sqrt 2): Z is their mean
    g = torch.Generator().manual_seed(0)
    for p in gsm.parameters():  # one draw per step, std σ · max Z̄, in Opacus's order
        want = torch.normal(0.0, 2.0 * scale, size=p.shape, generator=g)
        torch.testing.assert_close(p.grad - p.summed_grad, want, rtol=1e-5, atol=1e-6)
    assert opt.sensitivities == [scale]


def test_fusion_weights_favour_the_peaked_prediction():
    peaked = torch.tensor([[0.9, 0.05, 0.05], [1 / 3, 1 / 3, 1 / 3]])
    flat = torch.tensor([[0.4, 0.3, 0.3], [1 / 3, 1 / 3, 1 / 3]])
    q1, q2 = fusion_weights(peaked, flat)
    assert q1[0] > q2[0]
    torch.testing.assert_close(q1 + q2, torch.ones(2))
    assert q1[1] == q2[1] == 0.5  # both uniform: zero variance
    v1, v2 = (0.9 ** 2 + 2 * 0.05 ** 2) / 3 - 1 / 9, (0.4 ** 2 + 2 * 0.3 ** 2) / 3 - 1 / 9  # Eq. 15
    w1 = v1 / (v1 + v2)  # Eq. 16
    torch.testing.assert_close(fuse(peaked, flat)[0], w1 * peaked[0] + (1 - w1) * flat[0])  # Eq. 17
    assert w1 == pytest.approx(289 / 293)  # variances 289/1800 and 4/1800


SCHEDULE = Schedule(epochs=1, batch_size=8, lr=1e-2)


def flat_weights(models) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for m in models for p in m.parameters()])


def test_same_seed_same_weights_different_seed_different():
    x, y = tiny_data(32)
    method = TrainingMethod(accountant="rdp")
    a = train_private(tiny_vit, x, y, method, SCHEDULE, seed=5, device="cpu")
    b = train_private(tiny_vit, x, y, method, SCHEDULE, seed=5, device="cpu")
    c = train_private(tiny_vit, x, y, method, SCHEDULE, seed=6, device="cpu")
    assert torch.equal(flat_weights(a.models), flat_weights(b.models))
    assert not torch.equal(flat_weights(a.models), flat_weights(c.models))
    assert a.report == b.report


def test_report_matches_the_claim_computed_without_training():
    x, y = tiny_data(32)
    method = TrainingMethod(accountant="rdp", clipping="per_layer", epsilon=4.0)
    trained = train_private(tiny_vit, x, y, method, SCHEDULE, seed=0, device="cpu")
    facts = accounting_facts(method, SCHEDULE, 32)
    assert {k: trained.report[k] for k in facts} == facts
    assert trained.report["steps"] == 4 and trained.report["sample_rate"] == 0.25
    assert trained.report["epsilon"] <= 4.0 and trained.report["label"] == "DP-SGD(per_layer, ε=4)"
    assert not any(hasattr(p, "grad_sample") for p in trained.models[0].parameters())


@pytest.mark.parametrize("clipping", ["flat", "per_layer_median"])
def test_empty_poisson_batches_are_noise_only_steps(clipping):
    x, y = tiny_data(8)
    method = TrainingMethod(accountant="rdp", clipping=clipping, epsilon=8.0)
    trained = train_private(tiny_vit, x, y, method, Schedule(epochs=2, batch_size=1, lr=1e-2), seed=1, device="cpu")
    assert trained.report["steps"] == 16 and trained.report["backed"] == ("yes" if clipping == "flat" else "no")


def test_fusion_with_private_selection():
    x, y = tiny_data(32)
    val = tiny_data(12, seed=9)
    method = TrainingMethod(accountant="rdp", fusion=True, selection="private_val", selection_epsilon=0.5)
    trained = train_private(tiny_vit, x, y, method, Schedule(epochs=2, batch_size=8, lr=1e-2), seed=0, device="cpu",
                            val=val)
    assert len(trained.models) == 2 and trained.report["selected_epoch"] in (1, 2)
    assert trained.report["epsilon"] <= 3.0 and trained.report["label"].endswith("+fusion(disjoint)")
    p1, p2 = (predict_proba([m], x[:5]) for m in trained.models)
    torch.testing.assert_close(predict_proba(trained.models, x[:5]), fuse(p1, p2))
    losses = per_example_loss(trained.models, x[:5], y[:5])
    torch.testing.assert_close(losses, -fuse(p1, p2)[torch.arange(5), y[:5]].log())
    with pytest.raises(BenchError, match="private_val"):
        train_private(tiny_vit, x, y, method, SCHEDULE, seed=0, device="cpu")


def test_non_private_training_uses_plain_minibatches():
    x, y = tiny_data(32)
    trained = train_private(tiny_vit, x, y, TrainingMethod().non_private(), SCHEDULE, seed=0, device="cpu")
    assert trained.report["epsilon"] == math.inf and trained.report["noise_multiplier"] == 0.0
    assert trained.report["label"] == "non-private"
    probs = predict_proba(trained.models, x)
    torch.testing.assert_close(probs.sum(1), torch.ones(32))
    torch.testing.assert_close(per_example_loss(trained.models, x, y), -probs[torch.arange(32), y].log())
