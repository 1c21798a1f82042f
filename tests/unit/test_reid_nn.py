"""ResNet backbones and heads, local weights, augmentation and the fidelity metrics."""

from __future__ import annotations

import pytest
import torch
import torchvision

from bench.errors import BenchError
from bench.nn.augment import augment, erasing_masks
from bench.nn.resnet import AttributeNet, ReidNet, ResNetTrunk
from bench.nn.threads import cpu_threads
from tasks.fidelity import psnr, ssim


def test_reid_net_returns_features_and_logits_in_training_and_embeddings_in_eval():
    net = ReidNet("resnet18", num_classes=5, last_stride=1)
    x = torch.rand(4, 3, 64, 32) * 2 - 1
    features, logits = net(x)
    assert features.shape == (4, 512) and logits.shape == (4, 5)
    net.eval()
    assert net(x).shape == (4, 512)
    assert not net.neck.bias.requires_grad


def test_last_stride_one_doubles_the_final_map():
    x = torch.zeros(1, 3, 64, 32)
    for arch in ("resnet18", "resnet50"):
        one, two = ResNetTrunk(arch, last_stride=1).eval(), ResNetTrunk(arch, last_stride=2).eval()
        assert one.body(x).shape[-2:] == (4, 2) and two.body(x).shape[-2:] == (2, 1)


def test_local_imagenet_weights_are_loaded_without_the_classifier(tmp_path):
    source = torchvision.models.resnet18(weights=None)
    path = tmp_path / "resnet18.pth"
    torch.save(source.state_dict(), path)
    net = AttributeNet("resnet18", num_classes=3, weights=str(path))
    assert torch.equal(net.backbone.body[0].weight, source.conv1.weight)
    assert net.head.out_features == 3


def test_missing_or_mismatched_weights_are_user_errors(tmp_path):
    with pytest.raises(BenchError, match="never downloaded"):
        ResNetTrunk("resnet18", weights=str(tmp_path / "absent.pth"))
    path = tmp_path / "r50.pth"
    torch.save(torchvision.models.resnet50(weights=None).state_dict(), path)
    with pytest.raises(BenchError, match="do not fit"):
        ResNetTrunk("resnet18", weights=str(path))
    with pytest.raises(BenchError, match="unknown backbone"):
        ResNetTrunk("resnet7")


def test_augment_is_seeded_keeps_shape_and_erases_zeros():
    x = torch.rand(6, 3, 16, 8) + 1.0
    a = augment(x, torch.Generator().manual_seed(0), pad=2, erasing=1.0)
    b = augment(x, torch.Generator().manual_seed(0), pad=2, erasing=1.0)
    assert torch.equal(a, b) and a.shape == x.shape
    assert (a == 0).any()
    assert torch.equal(augment(x, torch.Generator(), pad=0, erasing=0.0, flip=False), x)
    masks = erasing_masks(50, 16, 8, 0.5, torch.Generator().manual_seed(1))
    area = masks.float().mean(dim=(1, 2))
    assert (area[area > 0] <= 0.45).all() and 0 < (area > 0).sum() < 50


def test_ssim_and_psnr_of_equal_and_noisy_images():
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (3, 3, 32, 16), dtype=torch.uint8, generator=g)
    assert torch.allclose(ssim(images, images), torch.ones(3))
    assert torch.equal(psnr(images, images), torch.full((3,), 100.0))
    noisy = (images.float() + torch.randn(images.shape, generator=g) * 40).clamp(0, 255).to(torch.uint8)
    assert (ssim(images, noisy) < 0.9).all() and (psnr(images, noisy) < 25).all()


def test_cpu_threads_restores_the_setting():
    before = torch.get_num_threads()
    with cpu_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with cpu_threads(None):
        assert torch.get_num_threads() == before
