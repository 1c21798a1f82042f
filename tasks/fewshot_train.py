"""Episodic training of a prototypical network (privacy-enhanced few-shot paper, Sec. IV and V-B)."""

from __future__ import annotations

import copy
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

from bench.core.curves import EpochValues
from bench.core.interfaces import RunContext
from bench.data.base import ImageSet
from bench.nn.images import embed, embed_images, prepare, to_input
from bench.system import precision
from tasks.episodes import EpisodeSampler, episode_accuracies, prototypical_loss
from tasks.fewshot_config import FewShotConfig

CHANNELS_LAST = torch.channels_last


def episode_inputs(images: torch.Tensor, size: int, device: torch.device) -> Callable[[torch.Tensor], torch.Tensor]:
    """Returns a function from image indices to network inputs of those images.

    Resizing is done once for an in-memory split (the same values as resizing each
    episode's images: the resize acts image by image); without resizing, uint8 images are
    kept and converted per episode, so a large split costs no float copy; a split kept on
    disk is read episode by episode.
    """
    if not isinstance(images, torch.Tensor):  # kept on disk: each episode reads and converts its own images
        return lambda index: to_input(images[index.cpu()], size, device)
    if tuple(images.shape[-2:]) == (size, size):
        on_device = images.to(device)
        return lambda index: to_input(on_device[index.to(device)], None, device)
    inputs = prepare(images, size, device)
    return lambda index: inputs[index.to(device)]


def train_prototypical(
    model: torch.nn.Module, train: ImageSet, val: ImageSet, cfg: FewShotConfig, ctx: RunContext, seed: int,
    targets: ImageSet | None = None, epochs: int | None = None,
) -> dict[str, Any]:
    """Episodic training with Adam, step decay and early stopping on validation accuracy.

    Args:
        model: The embedding network (on ``ctx.device``); left holding the best weights.
            With ``targets`` a :class:`tasks.fewshot.DenoisingEncoder`.
        train: Training identities.
        val: Validation identities (model selection).
        cfg: The profile's settings.
        ctx: The run's context.
        seed: Seed of the episode draws.
        targets: Clean counterparts of ``train`` (same order): the denoiser is trained
            jointly, loss = MSE(denoised, clean) + prototypical loss (Algorithm 1).
        epochs: Most epochs (None: ``cfg.epochs``).

    Returns:
        Facts about the training (epochs run, best validation accuracy, seconds).
    """
    started = time.perf_counter()
    epochs = epochs or cfg.epochs
    g = torch.Generator().manual_seed(seed)
    sampler = EpisodeSampler(train.labels, cfg.train_way, cfg.train_shot + cfg.train_query, g)
    val_way = min(cfg.test_way, int(torch.unique(val.labels).numel()))
    val_index = EpisodeSampler(val.labels, val_way, cfg.test_shot + cfg.test_query, g).sample(cfg.val_episodes)
    val_inputs = prepare(val.images, cfg.image_size, ctx.device) if isinstance(val.images, torch.Tensor) else None
    inputs = episode_inputs(train.images, cfg.image_size, ctx.device)
    clean_inputs = None if targets is None else episode_inputs(targets.images, cfg.image_size, ctx.device)
    example = inputs(torch.arange(min(len(train), cfg.train_way * (cfg.train_shot + cfg.train_query))))
    precision.verify(model, example.contiguous(memory_format=torch.contiguous_format if targets is not None
                                               else CHANNELS_LAST), "the few-shot model")
    optimiser = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    schedule = torch.optim.lr_scheduler.StepLR(optimiser, step_size=cfg.lr_step, gamma=cfg.lr_gamma)
    best_acc, best_state, best_epoch, waited = -1.0, None, 0, 0
    epoch_loss, val_accs = EpochValues(), []
    for epoch in ctx.progress(range(epochs), total=epochs, desc="few-shot epochs"):
        model.train()
        for index in sampler.sample(cfg.episodes_per_epoch):
            flat = index.flatten()
            x = inputs(flat)
            if clean_inputs is None:
                with precision.autocast(ctx.device):
                    emb = model(x.contiguous(memory_format=CHANNELS_LAST)).float()
                loss = prototypical_loss(emb.view(*index.shape, -1), cfg.train_shot)
            else:  # the DnCNN in the contiguous format (DenoisingEncoder), the encoder in channels_last
                with precision.autocast(ctx.device):
                    denoised = model.denoiser(x.contiguous()).float()
                    emb = model.encoder(denoised).float()
                loss = F.mse_loss(denoised, clean_inputs(flat)) + prototypical_loss(
                    emb.view(*index.shape, -1), cfg.train_shot)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            epoch_loss.add(loss)
        epoch_loss.close_epoch()
        schedule.step()
        val_emb = embed(model, val_inputs) if val_inputs is not None else embed_images(model, val.images, cfg.image_size,
                                                                                         ctx.device)
        val_acc = float(episode_accuracies(val_emb, val_index, cfg.test_shot).mean())
        val_accs.append(val_acc)
        if val_acc > best_acc:
            best_acc, best_state, best_epoch, waited = val_acc, copy.deepcopy(model.state_dict()), epoch, 0
        else:
            waited += 1
            if waited >= cfg.patience:
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    return {"best_val_acc": best_acc, "best_epoch": best_epoch, "epochs_run": epoch + 1,
            "seconds": time.perf_counter() - started, "curve": {"loss": epoch_loss.means, "val_acc": val_accs}}
