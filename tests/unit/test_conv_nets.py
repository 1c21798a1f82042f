"""Conv-4 and the small face net pool before their ReLU: the same numbers as ReLU then pool."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from bench.nn.conv4 import Conv4
from bench.nn.face_cnn import SmallFaceNet


def relu_then_pool(model: nn.Module) -> nn.Module:
    """Returns a copy of ``model`` with every (max-pool, ReLU) pair in the textbook order."""
    model = copy.deepcopy(model)
    swapped = 0
    for seq in model.modules():
        if isinstance(seq, nn.Sequential):
            names = list(seq._modules)
            for first, second in zip(names, names[1:]):
                if isinstance(seq._modules[first], nn.MaxPool2d) and isinstance(seq._modules[second], nn.ReLU):
                    seq._modules[first], seq._modules[second] = seq._modules[second], seq._modules[first]
                    swapped += 1
    assert swapped, "no (max-pool, ReLU) pair found"
    return model


NETS = {
    "conv4": (lambda: Conv4(3), (16, 3, 32, 32)),
    "small_face_net": (lambda: SmallFaceNet(10, width=8), (8, 3, 32, 32)),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", sorted(NETS))
def test_pool_before_relu_gives_identical_outputs_and_gradients(name, threads):
    make, shape = NETS[name]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(0)
        ours = make().to(memory_format=torch.channels_last)
        textbook = relu_then_pool(ours)
        g = torch.Generator().manual_seed(1)
        for _ in range(2):  # training mode: batch statistics, and a second step after the first's grads
            x = torch.randn(*shape, generator=g).contiguous(memory_format=torch.channels_last)
            a, b = ours(x), textbook(x)
            assert torch.equal(a, b)
            a.square().sum().backward()
            b.square().sum().backward()
            for (param, p), q in zip(ours.named_parameters(), textbook.parameters()):
                assert torch.equal(p.grad, q.grad), param
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("name", sorted(NETS))
def test_parameter_names_are_those_of_the_textbook_order(name):
    """A model cached before the reorder loads into the reordered network."""
    make, _ = NETS[name]
    model = make()
    assert list(model.state_dict()) == list(relu_then_pool(model).state_dict())
