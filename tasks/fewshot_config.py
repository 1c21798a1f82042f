"""The settings of one few-shot profile (``tasks/presets/fewshot_*.yaml``), and the parts model weights depend on."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from bench.core.config import setting

DENOISER_SETTINGS = ("denoiser_depth", "denoiser_width", "denoiser_init", "denoiser_epochs")


@dataclass(frozen=True)
class FewShotConfig:
    """Settings of one few-shot profile (see ``tasks/presets/fewshot_*.yaml``).

    Attributes:
        data: Loader options of the dataset.
        encoder: Embedding network (Conv-4).
        image_size: Side of the network input (images are resized to it).
        train_way: Classes per training episode.
        train_shot: Support images per class in training.
        train_query: Query images per class in training.
        episodes_per_epoch: Training episodes per epoch.
        epochs: Most training epochs.
        patience: Epochs without a better validation accuracy before stopping.
        lr: Adam learning rate.
        lr_step: Epochs between learning-rate decays.
        lr_gamma: Decay factor.
        val_episodes: Model-selection episodes.
        test_way: Classes per test episode.
        test_shot: Support images per class at test.
        test_query: Query images per class at test.
        test_episodes: Test episodes (the CI is over them).
        denoiser_depth: Layers of the DnCNN of the denoiser model (8 in the paper).
        denoiser_width: Its hidden filters.
        denoiser_init: ``scratch`` (Algorithm 1) or ``noisy``: start from the noisy model's
            encoder (and an identity denoiser), a cheaper joint training for CPU profiles.
        denoiser_epochs: Most epochs of the joint training (None: ``epochs``).
        ssim_images: Test images SSIM(denoised, clean) is averaged over (100 in the paper).
    """

    data: dict = field(default_factory=dict)
    encoder: str = setting("conv4", choices=("conv4",))
    image_size: int = setting(84, low=8)
    train_way: int = setting(5, low=2)
    train_shot: int = setting(5, low=1)
    train_query: int = setting(5, low=1)
    episodes_per_epoch: int = setting(100, low=1)
    epochs: int = setting(200, low=1)
    patience: int = setting(20, low=1)
    lr: float = setting(1e-3, low=0, low_open=True)
    lr_step: int = setting(20, low=1)
    lr_gamma: float = setting(0.5, low=0, low_open=True, high=1)
    val_episodes: int = setting(600, low=1)
    test_way: int = setting(5, low=2)
    test_shot: int = setting(5, low=1)
    test_query: int = setting(15, low=1)
    test_episodes: int = setting(600, low=1)
    denoiser_depth: int = setting(8, low=2)
    denoiser_width: int = setting(64, low=1)
    denoiser_init: str = setting("scratch", choices=("scratch", "noisy"))
    denoiser_epochs: int | None = setting(None, low=1)
    ssim_images: int = setting(100, low=1)

    def training_part(self) -> dict[str, Any]:
        """Returns the settings the weights of the clean and noisy models depend on."""
        skip = {"test_way", "test_shot", "test_query", "test_episodes", "ssim_images", *DENOISER_SETTINGS}
        return {k: v for k, v in asdict(self).items() if k not in skip}

    def denoiser_part(self) -> dict[str, Any]:
        """Returns the settings the weights of the denoiser model depend on."""
        return {**self.training_part(), **{k: getattr(self, k) for k in DENOISER_SETTINGS}}
