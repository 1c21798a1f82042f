"""Few-shot identification with prototypical networks (privacy-enhanced few-shot paper).

Three models are measured on the released test identities (paper, Sec. V-B):

- ``baseline``: trained on clean training identities, tested on released images;
- ``noisy``: trained and tested on released images (the primary metric, ``acc``);
- ``noisy + denoiser`` (Sec. IV, Algorithm 1): a DnCNN and the encoder trained jointly on
  released episodes with loss = MSE(denoised, clean) + prototypical loss, the clean
  counterparts of the episode's images coming from the training split (``acc_denoiser``;
  ``ssim_denoiser`` is the SSIM between denoised and clean test images).

The clean model on clean test images (``acc_clean``) is reported for reference. Models are
cached by the content key of their training data, so the clean model is trained once per
dataset, profile and seed.

Episodes are drawn from the evaluated split (``test``; ``val`` when tuning). Model
selection (early stopping) uses the ``val`` identities when testing; when the evaluated
split is ``val`` itself, it uses identities held out from the training split instead (as
many as ``val`` has, at most half), so a tuning cell never selects on what it reports.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, ClassVar

import torch
from torch import nn

from bench.core.groups import MIN_GROUP_SIZE, demographic_groups
from bench.core.interfaces import Release, RunContext, Task
from bench.core.keys import content_key
from bench.core.registry import datasets as dataset_registry
from bench.data.base import DataShape, ImageSet, Splits
from bench.errors import BenchError
from bench.nn.conv4 import Conv4
from bench.nn.dncnn import DnCNN, image_quality
from bench.nn.images import embed_images, prepare
from bench.randomness.seeding import derive_seed, make_generator
from bench.storage.modelcache import cached_model
from bench.system import precision
from tasks.episodes import EpisodeSampler, episode_accuracies, group_episode_accuracies, mean_ci95
from tasks.fewshot_config import FewShotConfig
from tasks.fewshot_train import CHANNELS_LAST, train_prototypical
from tasks.split_advice import class_split_advice

MODEL_VERSION = 3
"""2: trained in channels_last memory format (1.3-1.5x faster convolutions on CPU; other float rounding).
3: the denoiser few-shot model's DnCNN back in the contiguous format (its 8-filter convolutions
run 1.75x faster so on CPU; other float rounding)."""


class DenoisingEncoder(nn.Module):
    """The paper's Denoising Network: a DnCNN followed by the embedding network.

    Args:
        denoiser: The DnCNN (float images in, float images out).
        encoder: The embedding network.
    """

    def __init__(self, denoiser: nn.Module, encoder: nn.Module):
        super().__init__()
        self.denoiser, self.encoder = denoiser, encoder

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Embeds denoised images [N, C, H, W] into [N, D].

        The DnCNN runs in the contiguous format (a convolution follows its input's format):
        its few filters are slower in channels_last, which suits the encoder.
        """
        return self.encoder(self.denoiser(x.contiguous()))


class FewShot(Task):
    """N-way K-shot identification on identities disjoint from the training ones."""

    metrics: ClassVar[dict[str, bool]] = {
        "acc": True,
        "acc_ci95": False,
        "acc_baseline": True,
        "acc_baseline_ci95": False,
        "acc_denoiser": True,
        "acc_denoiser_ci95": False,
        "acc_clean": True,
        "ssim_denoiser": True,
        "ssim_released": True,
    }
    primary: ClassVar[str] = "acc"
    validation: ClassVar[bool] = True

    config_class: ClassVar[type] = FewShotConfig
    version: ClassVar[int] = MODEL_VERSION
    precisions: ClassVar[tuple[str, ...]] = ("fp32", "bf16")
    config: FewShotConfig

    def data_options(self) -> dict[str, Any]:
        """Returns the loader options of this profile."""
        return dict(self.config.data)

    def input_size(self) -> tuple[int, int]:
        """Returns the encoder's input side, square."""
        return (self.config.image_size, self.config.image_size)

    def check_data(self, shape: DataShape | None, eval_split: str = "test") -> None:
        """Checks that every episode the profile draws can be served by the data.

        Raises:
            BenchError: Too few classes with enough images for the training, selection or
                test episodes; the message names the settings to change.
        """
        if shape is None:
            return
        cfg, owner = self.config, f"task {self.name!r}"
        per_test = cfg.test_shot + cfg.test_query
        needs = [("train", cfg.train_way, cfg.train_shot + cfg.train_query, "train_way", "train_shot + train_query"),
                 (eval_split, cfg.test_way, per_test, "test_way", "test_shot + test_query")]
        if eval_split == "test" and "val" in shape:
            needs.append(("val", min(cfg.test_way, len(shape["val"].counts)), per_test, "test_way",
                          "test_shot + test_query"))
        minimums = {split: way for split, way, *_ in needs[:2]}
        setting = dataset_registry.get(self.dataset).class_split if self.dataset in dataset_registry else ""
        for split, way, per_class, way_name, size_name in needs:
            if split not in shape:
                raise BenchError(f"{owner}: the dataset has no {split!r} split")
            if len(shape[split].counts) < way:
                advice = class_split_advice(setting, shape, minimums, way_name)
                raise BenchError(f"{owner}: {way_name}={way} episodes need {way} classes in {split!r}, but the "
                                 f"class split gives it {len(shape[split].counts)}; {advice}")
            have = shape[split].classes_with(per_class)
            if have < way:
                most = max(shape[split].counts, default=0)
                raise BenchError(
                    f"{owner}: {way_name}={way} episodes need {way} classes with {size_name}={per_class} images in "
                    f"{split!r}, but {have} of its {len(shape[split].counts)} classes have that many (the most any has "
                    f"is {most}); lower task.{way_name}, the shot/query settings, or raise the data's images per class"
                )

    def config_dict(self) -> dict[str, Any]:
        """Returns the resolved profile settings."""
        return asdict(self.config)

    def evaluate(self, clean: Splits, released: Release, ctx: RunContext) -> dict[str, float]:
        """Trains (or reuses) the three models and tests them on released images of the evaluated split."""
        split = ctx.eval_split
        test_released = released.splits[split]
        index = self._test_episodes(test_released.labels, ctx.seed)
        clean_fit = self._fit_sets(clean, ctx)
        clean_model = self._model(*clean_fit, ("clean", clean.fingerprint), ctx, "clean")
        acc_clean, _, emb_clean = self._accuracy(clean_model, clean[split], index, ctx)
        acc_base, ci_base, emb_base = self._accuracy(clean_model, test_released, index, ctx)
        out = {"acc_baseline": acc_base, "acc_baseline_ci95": ci_base, "acc_clean": acc_clean}
        if released.is_clean:
            self._group_accuracy(test_released, emb_base, emb_clean, ctx)
            # Nothing to learn from or to undo: the noisy and denoiser models are the clean one.
            return {"acc": acc_base, "acc_ci95": ci_base, **out, "acc_denoiser": acc_base,
                    "acc_denoiser_ci95": ci_base, "ssim_denoiser": 1.0, "ssim_released": 1.0}
        released_fit = self._fit_sets(released.splits, ctx)
        data_key = ("release", released.key)
        noisy_model = self._model(*released_fit, data_key, ctx, "noisy")
        acc, ci, emb = self._accuracy(noisy_model, test_released, index, ctx)
        self._group_accuracy(test_released, emb, emb_clean, ctx)
        denoising = self._denoiser_model(released_fit, clean_fit[0], data_key, noisy_model, ctx)
        acc_den, ci_den, _ = self._accuracy(denoising, test_released, index, ctx)
        ssim_den = image_quality(*self._ssim_pair(denoising.denoiser, test_released, clean[split], ctx))["ssim"]
        ssim_raw = image_quality(*self._ssim_pair(None, test_released, clean[split], ctx))["ssim"]
        return {"acc": acc, "acc_ci95": ci, **out, "acc_denoiser": acc_den, "acc_denoiser_ci95": ci_den,
                "ssim_denoiser": ssim_den, "ssim_released": ssim_raw}

    def _fit_sets(self, splits: Splits, ctx: RunContext) -> tuple[ImageSet, ImageSet, tuple]:
        """Returns (training, model-selection) images and a key naming the division.

        Selection uses ``val`` when the evaluated split is ``test``; when it is ``val``,
        identities held out of ``train`` (the same ones for clean and released splits).
        """
        train = splits["train"]
        if ctx.eval_split != "val":
            return train, splits["val"], ()
        ids = torch.unique(train.labels)
        held = min(int(torch.unique(splits["val"].labels).numel()), len(ids) // 2)
        order = torch.randperm(len(ids), generator=make_generator(ctx.seed, self.name, "selection-ids"))
        chosen = torch.isin(train.labels, ids[order[:held]])
        return train.subset(~chosen), train.subset(chosen), ("selection", "train-holdout", held)

    def _test_episodes(self, labels: torch.Tensor, seed: int) -> torch.Tensor:
        cfg = self.config
        sampler = EpisodeSampler(
            labels, cfg.test_way, cfg.test_shot + cfg.test_query, make_generator(seed, self.name, "test-episodes")
        )
        return sampler.sample(cfg.test_episodes)

    def _accuracy(
        self, model: torch.nn.Module, split: ImageSet, index: torch.Tensor, ctx: RunContext
    ) -> tuple[float, float, torch.Tensor]:
        """Returns the mean episode accuracy, its 95% half-width and the embeddings of ``split``."""
        emb = embed_images(model, split.images, self.config.image_size, ctx.device)
        return (*mean_ci95(episode_accuracies(emb, index, self.config.test_shot)), emb)

    def _group_accuracy(self, test: ImageSet, emb: torch.Tensor, emb_clean: torch.Tensor, ctx: RunContext) -> None:
        """Reports ``acc`` (the utility model on released images) and ``acc_clean`` per demographic group."""
        groups = demographic_groups(test.attrs, test.attr_names)
        if not groups:
            return
        cfg = self.config
        table = group_episode_accuracies(
            {"acc": emb, "acc_clean": emb_clean}, test.labels, groups,
            (cfg.test_way, cfg.test_shot + cfg.test_query, cfg.test_shot), cfg.test_episodes,
            lambda attr, value: make_generator(ctx.seed, self.name, "group-episodes", attr, value), MIN_GROUP_SIZE)
        ctx.groups["utility"] = (table, f"{cfg.test_way}-way {cfg.test_shot}-shot episodes drawn within each group "
                                        "(not a slice of mixed episodes)")

    def _ssim_pair(self, denoiser: nn.Module | None, released: ImageSet, clean: ImageSet,
                   ctx: RunContext) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (denoised or released, clean) network inputs of ``ssim_images`` fixed test images."""
        g = make_generator(ctx.seed, self.name, "ssim-images")
        pick = torch.randperm(len(clean), generator=g)[: self.config.ssim_images]
        size, device = self.config.image_size, ctx.device
        x = prepare(released.images[pick], size, device)
        if denoiser is not None:
            with torch.no_grad(), precision.autocast(device):
                denoiser.eval()
                x = torch.cat([denoiser(x[i : i + 256].contiguous()).float() for i in range(0, len(x), 256)])
        return x, prepare(clean.images[pick], size, device)

    def _model(self, train: ImageSet, val: ImageSet, selection: tuple, data_key: tuple, ctx: RunContext,
               label: str) -> torch.nn.Module:
        cfg = self.config
        key = ("fewshot-model", MODEL_VERSION, data_key, *selection, cfg.training_part(), ctx.seed,
               str(ctx.device.type))

        def build() -> torch.nn.Module:
            torch.manual_seed(derive_seed(ctx.seed, self.name, "init"))
            return Conv4(in_channels=train.images.shape[1]).to(ctx.device, memory_format=CHANNELS_LAST)

        def train_fn(model: torch.nn.Module) -> dict[str, Any]:
            ctx.log(f"training the {label} few-shot model ({content_key(*key)[:8]})")
            return train_prototypical(model, train, val, cfg, ctx, seed=derive_seed(ctx.seed, self.name, label))

        model, _ = cached_model(ctx.cache_dir, key, build, train_fn, ctx.log, name=f"fewshot.{label}")
        return model.to(ctx.device)

    def _denoiser_model(self, released_fit: tuple[ImageSet, ImageSet, tuple], clean_train: ImageSet,
                        data_key: tuple, noisy_model: nn.Module, ctx: RunContext) -> DenoisingEncoder:
        """Returns the jointly trained DnCNN + encoder (Algorithm 1), cached like the other models."""
        cfg = self.config
        train, val, selection = released_fit
        key = ("fewshot-denoiser-model", MODEL_VERSION, data_key, *selection, cfg.denoiser_part(), ctx.seed,
               str(ctx.device.type))

        def build() -> DenoisingEncoder:
            torch.manual_seed(derive_seed(ctx.seed, self.name, "denoiser", "init"))
            channels = train.images.shape[1]
            denoiser = DnCNN(channels, cfg.denoiser_depth, cfg.denoiser_width)
            model = DenoisingEncoder(denoiser, Conv4(in_channels=channels))
            if cfg.denoiser_init == "noisy":
                model.encoder.load_state_dict(noisy_model.state_dict())
            model.encoder.to(memory_format=CHANNELS_LAST)
            return model.to(ctx.device)

        def train_fn(model: DenoisingEncoder) -> dict[str, Any]:
            ctx.log(f"training the denoiser few-shot model ({content_key(*key)[:8]})")
            seed = derive_seed(ctx.seed, self.name, "denoiser")
            return train_prototypical(model, train, val, cfg, ctx, seed, targets=clean_train,
                                      epochs=cfg.denoiser_epochs)

        model, _ = cached_model(ctx.cache_dir, key, build, train_fn, ctx.log, name="fewshot.denoiser")
        return model.to(ctx.device)
