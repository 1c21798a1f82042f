"""The settings of one dp_vit profile (``tasks/presets/dp_vit_*.yaml``) and the side of the ViT's input."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from bench.core.config import setting
from bench.errors import BenchError
from bench.nn.vit import MAX_SIDE
from bench.privacy.dpsgd.method import Schedule, TrainingMethod


@dataclass(frozen=True)
class VitSettings:
    """The ViT (torchvision ``VisionTransformer``, no pretrained weights).

    Attributes:
        image_size: Side of its square input: the stored images (the release) are resized to
            it once before training and testing. None: the loader's ``size`` option (32 when
            it has none), the side synthetic objects and CIFAR-10 are stored at.
        patch_size: Patch side in pixels (divides ``image_size``).
        depth: Encoder blocks.
        width: Hidden dimension (divisible by ``heads``).
        heads: Attention heads.
        mlp_dim: Hidden units of each block's MLP.
    """

    image_size: int | None = setting(None, low=8, high=MAX_SIDE)
    patch_size: int = setting(4, low=1)
    depth: int = setting(4, low=1)
    width: int = setting(64, low=4)
    heads: int = setting(4, low=1)
    mlp_dim: int = setting(128, low=1)


@dataclass(frozen=True)
class DpVitConfig:
    """Settings of one dp_vit profile (``tasks/presets/dp_vit_*.yaml``).

    Attributes:
        data: Loader options of the dataset.
        model: The ViT.
        training: The training method (DP-SGD's clipping, target epsilon, delta, fusion,
            model selection); it names the board entry.
        schedule: Epochs, expected batch size, learning rate and optimiser.
    """

    data: dict = field(default_factory=dict)
    model: VitSettings = field(default_factory=VitSettings)
    training: TrainingMethod = field(default_factory=TrainingMethod)
    schedule: Schedule = field(default_factory=lambda: Schedule(epochs=10, batch_size=256, lr=1e-3))


def model_side(config: DpVitConfig, owner: str) -> int:
    """Returns the ViT's input side: ``model.image_size``, else the loader's ``size`` option (32 when it has none).

    Args:
        config: The profile's settings.
        owner: Who owns them, for messages (``task 'dp_vit_folder'``).

    Raises:
        BenchError: No ``model.image_size`` and a ``size`` option that is not one side (the
            ViT takes square inputs).
    """
    if config.model.image_size is not None:
        return int(config.model.image_size)
    size = config.data.get("size", 32)
    if isinstance(size, str):
        size = [p for p in size.replace("x", ",").split(",") if p.strip()]
    sides = {str(v).strip() for v in size} if isinstance(size, (list, tuple)) else {str(size).strip()}
    if len(sides) != 1 or not next(iter(sides)).isdigit():
        raise BenchError(f"{owner}: the ViT takes square inputs; set task.model.image_size to their side, "
                         f"got task.data.size={size!r}")
    return int(next(iter(sides)))


def model_settings(model: VitSettings) -> dict[str, Any]:
    """Returns the ViT's settings as keyed: ``image_size`` only where set, so the keys from before it existed hold."""
    settings = asdict(model)
    if settings["image_size"] is None:
        del settings["image_size"]
    return settings
