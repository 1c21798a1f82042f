"""Training a classifier head with cross-entropy, Adam and a one-cycle schedule."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from bench.core.curves import EpochValues
from bench.core.interfaces import RunContext
from bench.nn.images import to_input


@dataclass(frozen=True)
class ClassifierTraining:
    """How a classifier is trained.

    Attributes:
        epochs: Passes over the training images.
        batch_size: Images per step (capped at the number of images).
        lr: Peak learning rate of the one-cycle schedule.
        weight_decay: Adam's weight decay.
        input_size: Network input (side, or (h, w)), or None for the images' size.
        augment: Augments a batch of network inputs, drawing from the given generator.
        label_smoothing: Cross-entropy label smoothing.
        desc: Label of the progress bar.
    """

    epochs: int
    batch_size: int
    lr: float
    weight_decay: float
    input_size: int | tuple[int, int] | None
    augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor]
    label_smoothing: float = 0.0
    desc: str = "epochs"


def train_classifier(
    model: torch.nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    spec: ClassifierTraining,
    ctx: RunContext,
    seed: int,
) -> dict[str, Any]:
    """Trains ``model`` in place on uint8 images and class labels; leaves it in eval mode.

    Args:
        model: Network returning logits (on ``ctx.device``).
        images: uint8 training images.
        labels: Class index of each image.
        spec: How to train.
        ctx: The run's context.
        seed: Seed of the batch order and augmentations.

    Returns:
        Facts about the training (steps, final loss, seconds).
    """
    started = time.perf_counter()
    g = torch.Generator().manual_seed(seed)
    batch_size = min(spec.batch_size, len(images))
    steps_per_epoch = max(1, len(images) // batch_size)
    optimiser = torch.optim.Adam(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)
    total = spec.epochs * steps_per_epoch
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=spec.lr, total_steps=total)
    model.train()
    loss = torch.tensor(float("nan"))
    epoch_loss = EpochValues()
    for _ in ctx.progress(range(spec.epochs), total=spec.epochs, desc=spec.desc):
        order = torch.randperm(len(images), generator=g)
        for step in range(steps_per_epoch):
            batch = order[step * batch_size : (step + 1) * batch_size]
            x = spec.augment(to_input(images[batch], spec.input_size, ctx.device), g)
            logits = model(x)
            loss = F.cross_entropy(logits, labels[batch].to(ctx.device), label_smoothing=spec.label_smoothing)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            schedule.step()
            epoch_loss.add(loss)
        epoch_loss.close_epoch()
    model.eval()
    return {"steps": total, "final_loss": loss.item(), "seconds": time.perf_counter() - started,
            "curve": {"loss": epoch_loss.means}}
