"""Few-shot identification with prototypical networks (privacy-enhanced few-shot paper).

Two models are measured on the released test identities:

- ``baseline``: trained on clean training identities, tested on released images;
- ``noisy``: trained and tested on released images (the primary metric, ``acc``).

The clean model on clean test images (``acc_clean``) is reported for reference. Models are
cached by the content key of their training data, so the clean model is trained once per
dataset, profile and seed.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import torch

from bench.cells import content_key
from bench.config import build_config
from bench.datasets.base import ImageSet, Splits
from bench.interfaces import Release, RunContext, Task
from bench.modelcache import cached_model
from bench.nn.conv4 import Conv4
from bench.nn.images import embed, prepare, to_input
from bench.registry import register_task
from bench.seeding import derive_seed, make_generator
from tasks.episodes import EpisodeSampler, episode_accuracies, mean_ci95, prototypical_loss

MODEL_VERSION = 1


@dataclass(frozen=True)
class FewShotConfig:
    """Settings of one few-shot profile (see ``tasks/presets/fewshot_*.yaml``)."""

    data: dict = field(default_factory=dict)
    encoder: str = "conv4"
    image_size: int = 84
    train_way: int = 5
    train_shot: int = 5
    train_query: int = 5
    episodes_per_epoch: int = 100
    epochs: int = 200
    patience: int = 20
    lr: float = 1e-3
    lr_step: int = 20
    lr_gamma: float = 0.5
    val_episodes: int = 600
    test_way: int = 5
    test_shot: int = 5
    test_query: int = 15
    test_episodes: int = 600

    def training_part(self) -> dict[str, Any]:
        """Returns the settings the trained weights depend on."""
        skip = {"test_way", "test_shot", "test_query", "test_episodes"}
        return {k: v for k, v in asdict(self).items() if k not in skip}


class FewShot(Task):
    """N-way K-shot identification on identities disjoint from the training ones."""

    metrics: ClassVar[dict[str, bool]] = {
        "acc": True,
        "acc_ci95": False,
        "acc_baseline": True,
        "acc_baseline_ci95": False,
        "acc_clean": True,
    }
    primary: ClassVar[str] = "acc"
    attacks: ClassVar[tuple[str, ...]] = ("face_reid",)

    def __init__(self, profile: str = "quick", overrides: dict[str, Any] | None = None):
        super().__init__(profile, overrides)
        values = self.settings()
        self.config: FewShotConfig = build_config(FewShotConfig, values, f"task {self.name!r}")
        if self.config.encoder != "conv4":
            from bench.errors import BenchError

            raise BenchError(f"task {self.name!r}: unknown encoder {self.config.encoder!r} (available: conv4)")

    def data_options(self) -> dict[str, Any]:
        """Returns the loader options of this profile."""
        return dict(self.config.data)

    def config_dict(self) -> dict[str, Any]:
        """Returns the resolved profile settings."""
        return asdict(self.config)

    def evaluate(self, clean: Splits, released: Release, ctx: RunContext) -> dict[str, float]:
        """Trains (or reuses) the baseline and noisy models and tests them on released images."""
        test_released = released.splits["test"]
        index = self._test_episodes(test_released.labels, ctx.seed)
        clean_model = self._model(clean["train"], clean["val"], ("clean", clean.fingerprint), ctx, "clean")
        acc_clean, _ = self._accuracy(clean_model, clean["test"], index, ctx)
        acc_base, ci_base = self._accuracy(clean_model, test_released, index, ctx)
        if released.is_clean:
            acc_noisy, ci_noisy = acc_base, ci_base
        else:
            noisy_model = self._model(
                released.splits["train"], released.splits["val"], ("release", released.key), ctx, "noisy"
            )
            acc_noisy, ci_noisy = self._accuracy(noisy_model, test_released, index, ctx)
        return {
            "acc": acc_noisy,
            "acc_ci95": ci_noisy,
            "acc_baseline": acc_base,
            "acc_baseline_ci95": ci_base,
            "acc_clean": acc_clean,
        }

    def _test_episodes(self, labels: torch.Tensor, seed: int) -> torch.Tensor:
        cfg = self.config
        sampler = EpisodeSampler(
            labels, cfg.test_way, cfg.test_shot + cfg.test_query, make_generator(seed, self.name, "test-episodes")
        )
        return sampler.sample(cfg.test_episodes)

    def _accuracy(self, model: torch.nn.Module, split: ImageSet, index: torch.Tensor, ctx: RunContext) -> tuple[float, float]:
        emb = embed(model, prepare(split.images, self.config.image_size, ctx.device))
        return mean_ci95(episode_accuracies(emb, index, self.config.test_shot))

    def _model(self, train: ImageSet, val: ImageSet, data_key: tuple, ctx: RunContext, label: str) -> torch.nn.Module:
        cfg = self.config
        key = ("fewshot-model", MODEL_VERSION, data_key, cfg.training_part(), ctx.seed, str(ctx.device.type))

        def build() -> torch.nn.Module:
            torch.manual_seed(derive_seed(ctx.seed, self.name, "init"))
            return Conv4(in_channels=train.images.shape[1]).to(ctx.device)

        def train_fn(model: torch.nn.Module) -> dict[str, Any]:
            ctx.log(f"training the {label} few-shot model ({content_key(*key)[:8]})")
            return train_prototypical(model, train, val, cfg, ctx, seed=derive_seed(ctx.seed, self.name, label))

        model, _ = cached_model(ctx.cache_dir, key, build, train_fn, ctx.log)
        return model.to(ctx.device)


def train_prototypical(
    model: torch.nn.Module, train: ImageSet, val: ImageSet, cfg: FewShotConfig, ctx: RunContext, seed: int
) -> dict[str, Any]:
    """Episodic training with Adam, step decay and early stopping on validation accuracy.

    Args:
        model: The embedding network (on ``ctx.device``); left holding the best weights.
        train: Training identities.
        val: Validation identities (model selection).
        cfg: The profile's settings.
        ctx: The run's context.
        seed: Seed of the episode draws.

    Returns:
        Facts about the training (epochs run, best validation accuracy, seconds).
    """
    started = time.perf_counter()
    g = torch.Generator().manual_seed(seed)
    sampler = EpisodeSampler(train.labels, cfg.train_way, cfg.train_shot + cfg.train_query, g)
    val_way = min(cfg.test_way, int(torch.unique(val.labels).numel()))
    val_index = EpisodeSampler(val.labels, val_way, cfg.test_shot + cfg.test_query, g).sample(cfg.val_episodes)
    val_inputs = prepare(val.images, cfg.image_size, ctx.device)
    images = train.images.to(ctx.device)
    optimiser = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    schedule = torch.optim.lr_scheduler.StepLR(optimiser, step_size=cfg.lr_step, gamma=cfg.lr_gamma)
    best_acc, best_state, best_epoch, waited = -1.0, None, 0, 0
    for epoch in ctx.progress(range(cfg.epochs), total=cfg.epochs, desc="few-shot epochs"):
        model.train()
        for index in sampler.sample(cfg.episodes_per_epoch):
            x = to_input(images[index.flatten().to(ctx.device)], cfg.image_size, ctx.device)
            loss = prototypical_loss(model(x).view(*index.shape, -1), cfg.train_shot)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
        schedule.step()
        val_acc = float(episode_accuracies(embed(model, val_inputs), val_index, cfg.test_shot).mean())
        if val_acc > best_acc:
            best_acc, best_state, best_epoch, waited = val_acc, copy.deepcopy(model.state_dict()), epoch, 0
        else:
            waited += 1
            if waited >= cfg.patience:
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    return {"best_val_acc": best_acc, "best_epoch": best_epoch, "epochs_run": epoch + 1,
            "seconds": time.perf_counter() - started}


@register_task("fewshot_synth_faces")
class FewShotSynthFaces(FewShot):
    """Few-shot identification on the synthetic faces (a stand-in for CelebA)."""

    dataset = "synth_faces"
    description = "5-way 5-shot prototypical network (Conv-4) on synthetic face identities"


@register_task("fewshot_celeba")
class FewShotCelebA(FewShot):
    """Few-shot identification on CelebA identities with at least 30 images."""

    dataset = "celeba"
    description = "5-way 5-shot prototypical network (Conv-4) on CelebA identities (>= 30 images)"
