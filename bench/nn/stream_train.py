"""Training classifiers with SGD on images streamed from disk, in one process or data-parallel.

The face-obfuscation paper's recipe (Sec. 4): SGD with momentum 0.9 and weight decay 1e-4,
batch 256, the learning rate divided by 10 every 30 of 90 epochs, random crops and flips
for training, the central view for evaluation. Batches are read by index from the split
(a tensor, or :class:`~bench.data.shards.ShardedImages` on disk, read by worker
processes ahead of use), so a split never has to fit in memory.

Under ``torch.distributed`` (see :mod:`bench.nn.ddp`) every rank draws the same
permutation and takes its share of each global batch; ``DistributedDataParallel``
averages the gradients, so a step sees the same images as one process would.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.nn.functional as F
import torch.utils.data

from bench.core.config import setting
from bench.core.curves import EpochValues
from bench.core.interfaces import RunContext
from bench.nn.images import _fixed_mmap_threshold, image_batches, to_input
from bench.system import precision
from bench.system.cpus import usable_cpus

AUGMENTS = ("random_resized_crop", "pad_crop", "flip", "none")
CLASSIFIER = "the classifier"
"""The trained network, as :func:`bench.system.precision.verify` names it."""


@dataclass(frozen=True)
class SgdSchedule:
    """How a classifier is trained (the paper's defaults).

    Attributes:
        epochs: Passes over the training images.
        batch_size: Images per step (over all ranks).
        lr: Initial learning rate (the paper: 0.1; 0.01 for AlexNet, SqueezeNet, VGG).
        momentum: SGD momentum.
        weight_decay: SGD weight decay.
        lr_step: Epochs between divisions of the learning rate by ``lr_factor``.
        lr_factor: The division's factor.
        augment: ``random_resized_crop`` (scale 0.08-1, aspect 3/4-4/3) and flips, as the
            paper; ``pad_crop`` (shift by up to 1/8 of the side) and flips, for small
            inputs; ``flip``; ``none``.
        label_smoothing: Cross-entropy label smoothing.
    """

    epochs: int = setting(90, low=1)
    batch_size: int = setting(256, low=1)
    lr: float = setting(0.1, low=0.0, low_open=True)
    momentum: float = setting(0.9, low=0.0, high=1.0)
    weight_decay: float = setting(1e-4, low=0.0)
    lr_step: int = setting(30, low=1)
    lr_factor: float = setting(0.1, low=0.0, high=1.0, low_open=True)
    augment: str = setting("random_resized_crop", choices=AUGMENTS)
    label_smoothing: float = setting(0.0, low=0.0, high=1.0)


def train_streamed(
    model: torch.nn.Module,
    images: Any,
    labels: torch.Tensor,
    schedule: SgdSchedule,
    input_size: int,
    ctx: RunContext,
    seed: int,
    *,
    multilabel: bool = False,
    params: list[torch.nn.Parameter] | None = None,
    desc: str = "epochs",
) -> dict[str, Any]:
    """Trains ``model`` in place on uint8 images; leaves it in eval mode.

    Forward passes run at the precision in force (:mod:`bench.system.precision`): under bfloat16
    autocast at bf16, after the model's layers are checked against float32 on this machine.

    Args:
        model: Network returning logits, on ``ctx.device`` (wrapped in DDP here when a
            process group is initialised).
        images: uint8 images [N, C, H, W]: a tensor or ``ShardedImages``.
        labels: Class index [N], or 0/1 targets [N, K] with ``multilabel`` (binary
            cross-entropy per label, as the paper's CelebA attributes).
        schedule: How to train.
        input_size: Side of the square network input.
        ctx: The run's context.
        seed: Seed of the batch order and augmentations.
        multilabel: Whether ``labels`` are multi-label targets.
        params: The parameters to train (a last-layer finetuning: the rest of the network
            stays in eval mode, so its batch-norm statistics are frozen too); None: all.
        desc: Label of the progress bar.

    Returns:
        Facts about the training (steps, final loss, seconds) and its curves.
    """
    started = time.perf_counter()
    rank, world = _rank_world()
    net = model
    if world > 1:
        net = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    trained = params if params is not None else [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.SGD(trained, lr=schedule.lr, momentum=schedule.momentum,
                                weight_decay=schedule.weight_decay)
    decay = torch.optim.lr_scheduler.StepLR(optimiser, step_size=schedule.lr_step, gamma=schedule.lr_factor)
    g = torch.Generator().manual_seed(seed)
    batch = min(schedule.batch_size, len(labels))
    steps = max(1, len(labels) // batch)
    share = max(1, batch // world)
    losses = EpochValues()
    loss = torch.tensor(math.nan)
    for _ in ctx.progress(range(schedule.epochs), total=schedule.epochs, desc=desc):
        order = torch.randperm(len(labels), generator=g)[: steps * batch].view(steps, batch)
        mine = order[:, rank * share : (rank + 1) * share]
        noise = torch.Generator().manual_seed(int(torch.randint(0, 2**62, (1,), generator=g)) + rank)
        net.train(params is None)
        for index, x in zip(mine, _read_batches(images, mine)):
            x = augment_batch(to_input(x.to(ctx.device), None, ctx.device), schedule.augment, input_size, noise)
            y = labels[index].to(ctx.device)
            precision.verify(model, x, CLASSIFIER)
            with precision.autocast(ctx.device):
                logits = net(x).float()
            if multilabel:
                loss = F.binary_cross_entropy_with_logits(logits, y.float())
            else:
                loss = F.cross_entropy(logits, y, label_smoothing=schedule.label_smoothing)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            losses.add(_mean_over_ranks(loss.detach(), world))
        decay.step()
        losses.close_epoch()
    model.eval()
    return {"steps": schedule.epochs * steps, "final_loss": float(loss.detach()), "seconds": time.perf_counter() - started,
            "processes": world, "curve": {"loss": losses.means}}


@torch.no_grad()
def predict(model: torch.nn.Module, images: Any, input_size: int, device: torch.device, batch: int = 256) -> torch.Tensor:
    """Returns the model's logits [N, K] (float32, CPU) on uint8 images streamed in order, central view.

    At bf16 (:mod:`bench.system.precision`) the forward passes run under autocast, as in training.
    """
    model.eval()
    logits = []
    for chunk in image_batches(images, batch, device):
        x = to_input(chunk, input_size, device)
        precision.verify(model, x, CLASSIFIER)
        with precision.autocast(device):
            logits.append(model(x).float().cpu())
    return torch.cat(logits)


def augment_batch(x: torch.Tensor, kind: str, size: int, generator: torch.Generator) -> torch.Tensor:
    """Augments inputs [N, C, H, W] in [-1, 1] and resizes them to ``size``, drawing from ``generator``.

    ``random_resized_crop`` samples per image an area fraction in [0.08, 1] and a log-uniform
    aspect ratio in [3/4, 4/3] (a crop that does not fit is shrunk to fit, where
    torchvision retries and falls back to the centre), then resamples it bilinearly;
    ``pad_crop`` shifts by up to an eighth of the side with zero padding.
    """
    n = x.shape[0]
    flip = torch.rand(n, generator=generator) < 0.5
    if kind == "none":
        return to_input_size(x, size)
    if kind == "random_resized_crop":
        area = torch.empty(n).uniform_(0.08, 1.0, generator=generator)
        ratio = torch.exp(torch.empty(n).uniform_(math.log(3 / 4), math.log(4 / 3), generator=generator))
        w = torch.sqrt(area * ratio).clamp(max=1.0)
        h = torch.sqrt(area / ratio).clamp(max=1.0)
        cx = (torch.rand(n, generator=generator) * 2 - 1) * (1 - w)
        cy = (torch.rand(n, generator=generator) * 2 - 1) * (1 - h)
        theta = torch.zeros(n, 2, 3)
        theta[:, 0, 0] = torch.where(flip, -w, w)
        theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = cx, h, cy
        grid = F.affine_grid(theta.to(x.device), [n, x.shape[1], size, size], align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
    x = to_input_size(x, size)
    x = torch.where(flip.to(x.device)[:, None, None, None], x.flip(3), x)
    if kind == "pad_crop":
        from bench.nn.augment import augment

        x = augment(x, generator, pad=max(1, size // 8), flip=False)
    return x


def to_input_size(x: torch.Tensor, size: int) -> torch.Tensor:
    """Resizes inputs to ``size`` x ``size`` with antialiasing (unchanged when already that size)."""
    if tuple(x.shape[-2:]) == (size, size):
        return x
    return F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)


def _rank_world() -> tuple[int, int]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _mean_over_ranks(value: torch.Tensor, world: int) -> torch.Tensor:
    if world > 1:
        value = value.clone()
        torch.distributed.all_reduce(value)
        value /= world
    return value


def _read_batches(images: Any, order: torch.Tensor) -> Iterator[torch.Tensor]:
    """Yields ``images[row]`` for every row of ``order``; images on disk are read ahead by worker processes."""
    if isinstance(images, torch.Tensor):
        for row in order:
            yield images[row]
        return
    workers = min(2, max(0, usable_cpus() - 1))
    loader = torch.utils.data.DataLoader(_Gather(images, order), batch_size=None, num_workers=workers,
                                         prefetch_factor=2 if workers else None,
                                         worker_init_fn=_fixed_mmap_threshold if workers else None)
    yield from loader


class _Gather(torch.utils.data.Dataset):
    """Row ``i`` of a batch-index table, read from a disk-backed image array."""

    def __init__(self, images: Any, order: torch.Tensor):
        self.images, self.order = images, order

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.images[self.order[i]]
