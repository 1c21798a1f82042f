"""A registered mechanism, configured, for a user's own images: ``bench.load_mechanism(name, **params)``.

As timm's ``create_model`` / ``list_models``::

    import bench, torch

    bench.list_mechanisms("dp_*")                           # ['dp_latent', 'dp_pix']
    mech = bench.load_mechanism("dp_pix", epsilon=3, block=4)
    mech.claim                                              # its formal guarantee, or None
    out = mech.apply(images, seed=0)                        # uint8 [N, C, H, W] or [C, H, W] in, same out

:meth:`MechanismHandle.apply` draws image ``i``'s noise from its own stream of ``seed``, so
the same images and seed give the same output, on any batch split, as in a benchmark cell.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from bench.errors import BenchError

if TYPE_CHECKING:
    import torch

    from bench.core.claims import PrivacyClaim
    from bench.core.interfaces import Mechanism

__all__ = ["MechanismHandle", "list_mechanisms", "load_mechanism"]

PURPOSE = "apply"
"""What the streams of :meth:`MechanismHandle.apply` are drawn for (:meth:`bench.randomness.streams.Streams.for_images`)."""


def list_mechanisms(pattern: str = "*") -> list[str]:
    """Returns the registered mechanisms whose names match a shell-style pattern, sorted.

    Args:
        pattern: A wildcard such as ``"dp_*"`` or ``"*blur*"`` (default: every one).
    """
    from bench.core.registry import mechanisms

    return mechanisms.list(pattern)


def load_mechanism(name: str, **params: Any) -> "MechanismHandle":
    """Returns a registered mechanism configured with ``params``, ready for :meth:`MechanismHandle.apply`.

    Args:
        name: A registered mechanism (:func:`list_mechanisms`).
        **params: Its parameters (Python values or strings; ``bench list mechanisms`` lists them).

    Raises:
        BenchError: An unknown name (with the closest one), an unknown parameter or an invalid value.
    """
    from bench.core.registry import mechanisms

    return MechanismHandle(mechanisms.get(name)(**params))


class MechanismHandle:
    """One configured mechanism, applied to a user's uint8 tensors.

    Attributes:
        name: The registered name.
        params: The resolved parameters (defaults filled in).
        mechanism: The underlying :class:`~bench.core.interfaces.Mechanism`.
    """

    def __init__(self, mechanism: "Mechanism"):
        self.mechanism = mechanism
        self.name = type(mechanism).name
        self.params = dict(mechanism.config)
        self._fitted = not self.needs_fit

    @property
    def claim(self) -> "PrivacyClaim | None":
        """The formal guarantee of this configuration (epsilon, delta, unit), or None."""
        return self.mechanism.claim()

    @property
    def needs_fit(self) -> bool:
        """Whether :meth:`fit` must see public images before :meth:`apply` (``dp_latent``)."""
        from bench.core.interfaces import Mechanism

        return type(self.mechanism).fit is not Mechanism.fit

    @property
    def uses_boxes(self) -> bool:
        """Whether :meth:`apply` needs face boxes (``face_blur``, ``face_overlay``)."""
        return bool(type(self.mechanism).uses_boxes)

    def fit(self, public: "torch.Tensor", seed: int = 0, device: str = "cpu") -> "MechanismHandle":
        """Fits the mechanism on public images (never the ones to be released); returns itself.

        Args:
            public: uint8 [N, C, H, W] public images of the size the released ones will have.
            seed: Seed of the fit's own randomness.
            device: Where it fits.

        Raises:
            BenchError: Not a uint8 batch.
        """
        import tempfile
        from pathlib import Path

        import torch

        from bench.core.interfaces import ImageSet, RunContext
        from bench.release import guard as mechanism_guard

        batch, _ = _as_batch(self.name, public)
        with tempfile.TemporaryDirectory(prefix="bench-fit-") as scratch:
            ctx = RunContext(device=device, seed=seed, profile="release", data_root=None, cache_dir=Path(scratch),
                             log=lambda message: None)
            mechanism_guard.fit(self.mechanism, ImageSet(batch, torch.zeros(len(batch), dtype=torch.int64)), ctx)
        self._fitted = True
        return self

    def apply(self, images: "torch.Tensor", seed: int = 0, *,
              boxes: Sequence["torch.Tensor"] | None = None) -> "torch.Tensor":
        """Obfuscates images; the same images and seed always give the same output.

        Args:
            images: uint8 [N, C, H, W] or one image [C, H, W] (C = 1 or 3), on any device;
                never modified.
            seed: Image ``i`` draws its noise from stream ``i`` of this seed.
            boxes: For mechanisms that use face boxes (:attr:`uses_boxes`): per image a float
                tensor [k, 4] of x1, y1, x2, y2 (one tensor for a single image).

        Returns:
            uint8 tensor of the input's shape, on the input's device.

        Raises:
            BenchError: Not a uint8 image or batch, boxes missing or not wanted, or a mechanism
                that needs :meth:`fit` first.
        """
        from bench.randomness.streams import Streams
        from bench.release import guard as mechanism_guard

        batch, single = _as_batch(self.name, images)
        if not self._fitted:
            raise BenchError(f"mechanism {self.name!r} is fitted on public data: call .fit(public_images) first")
        if self.uses_boxes and boxes is None:
            raise BenchError(f"mechanism {self.name!r} needs face boxes: pass boxes=[float tensor [k, 4] per image]")
        if not self.uses_boxes and boxes is not None:
            raise BenchError(f"mechanism {self.name!r} does not use face boxes; drop boxes=")
        if boxes is not None:
            boxes = [boxes] if single and not isinstance(boxes, (list, tuple)) else list(boxes)
            if len(boxes) != len(batch):
                raise BenchError(f"boxes: {len(boxes)} entries for {len(batch)} images; give one tensor per image")
            boxes = [b.to(batch.device).float() for b in boxes]
        streams = Streams.for_images(seed, PURPOSE, len(batch), device=batch.device)
        out = mechanism_guard.apply(self.mechanism, batch, generator=streams, boxes=boxes)
        return out[0] if single else out

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"load_mechanism({self.name!r}{', ' if shown else ''}{shown})"


def _as_batch(name: str, images: Any) -> "tuple[torch.Tensor, bool]":
    """Returns ``images`` as a [N, C, H, W] batch and whether it was one [C, H, W] image.

    Raises:
        BenchError: Not a uint8 tensor of 3 or 4 dimensions with 1 or 3 channels.
    """
    import torch

    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8 or images.dim() not in (3, 4):
        got = f"a {images.dtype} tensor of shape {tuple(images.shape)}" if isinstance(images, torch.Tensor) \
            else f"a {type(images).__name__}"
        raise BenchError(f"mechanism {name!r}: expected a uint8 tensor [N, C, H, W] or [C, H, W], got {got} "
                         "(convert with (x * 255).round().to(torch.uint8) from floats in [0, 1])")
    single = images.dim() == 3
    batch = images.unsqueeze(0) if single else images
    if batch.shape[1] not in (1, 3):
        raise BenchError(f"mechanism {name!r}: expected 1 or 3 channels first (C, H, W), got shape "
                         f"{tuple(images.shape)} (from H, W, C: images.permute(2, 0, 1))")
    return batch, single
