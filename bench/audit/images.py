"""Auditors of image neighbourhoods: images differing in m pixels, and any two images of a size.

The audit images are small squares (``AuditConfig.image_size``, 16 by default): both
units' epsilons are independent of the image size for the built-in mechanisms (DP-Pix
scales ragged cells so that its guarantee holds at any size; the sensitivity of
epsilon-image DP grows with the number of cells exactly as the change between the two
extreme images does).
"""

from __future__ import annotations

import abc
import math
import re

import torch

from bench.audit.config import AuditConfig
from bench.audit.units import Auditor, register_auditor, whole_image_boxes
from bench.errors import BenchError
from bench.interfaces import Mechanism, PrivacyClaim
from bench.streams import Streams

MID_GREY = 128
"""Value of the pixels both m-pixel inputs share: far from both clip bounds."""

_M_PIXEL = re.compile(r"^m-pixel \(m=(\d+)\)$")


class _ImageAuditor(Auditor):
    """Releases two fixed images of the audit size and observes chosen output values."""

    def __init__(self, mechanism: Mechanism, claim: PrivacyClaim, config: AuditConfig, size: int):
        super().__init__(mechanism, claim, config)
        self.size = size
        self.pair = self.images()

    def public_shape(self) -> tuple[int, int, int]:
        """Returns [C, S, S] of the audit images."""
        return (self.config.channels, self.size, self.size)

    @abc.abstractmethod
    def images(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns the two neighbouring images, uint8 [C, S, S] each."""

    def values_per_trial(self) -> int:
        """Returns C S^2."""
        return self.config.channels * self.size * self.size

    def release(self, which: int, streams: Streams) -> torch.Tensor:
        """Releases image ``which`` once per stream: uint8 [n, C, S, S]."""
        n = len(streams)
        batch = self.pair[which].to(self.device).expand(n, -1, -1, -1).contiguous()
        boxes = whole_image_boxes(n, self.size, self.size) if self.mechanism.uses_boxes else None
        return self.mechanism.apply(batch, generator=streams, boxes=boxes)


@register_auditor("m-pixel")
class MPixelAuditor(_ImageAuditor):
    """Images that differ in m pixels (unit ``"m-pixel (m=M)"``).

    Both images are mid-grey; the m audited pixels (the first m, row by row, of the
    smallest square at the top-left corner that holds m) are 0 in every channel in the
    first image and 255 in the second: the largest change m pixels can make, centred on
    the grey so that a mean over a cell stays clear of both clip bounds. The observed
    coordinates are the released values of every channel at the audited pixels; for a
    pixelating mechanism those are the values of the affected cell(s).
    """

    def __init__(self, mechanism: Mechanism, claim: PrivacyClaim, config: AuditConfig):
        match = _M_PIXEL.match(claim.unit)
        if match is None or int(match.group(1)) < 1:
            raise BenchError(f"claim unit {claim.unit!r} is not of the form 'm-pixel (m=M)' with M >= 1")
        self.m = int(match.group(1))
        self.side = math.isqrt(self.m - 1) + 1
        flat = torch.arange(self.m)
        self.rows, self.cols = flat // self.side, flat % self.side
        super().__init__(mechanism, claim, config, size=max(config.image_size, self.side))

    def images(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns mid-grey images whose m audited pixels are 0 (first) and 255 (second)."""
        shape = (self.config.channels, self.size, self.size)
        first = torch.full(shape, MID_GREY, dtype=torch.uint8)
        second = first.clone()
        first[:, self.rows, self.cols] = 0
        second[:, self.rows, self.cols] = 255
        return first, second

    def describe(self) -> str:
        """Returns the pair in words."""
        pixels = "1 pixel" if self.m == 1 else f"{self.m} pixels"
        return (f"{self.size}x{self.size}x{self.config.channels} mid-grey images, {pixels} 0 vs 255 "
                f"in all channels")

    def observe(self, which: int, streams: Streams) -> torch.Tensor:
        """Returns every channel of the audited pixels: float32 [n, C m]."""
        out = self.release(which, streams)
        return out[:, :, self.rows.to(out.device), self.cols.to(out.device)].flatten(1).to(torch.float32)


@register_auditor("any image of this size")
class AnyImageAuditor(_ImageAuditor):
    """Any two images of one size (unit ``"any image of this size"``).

    The pair is as far apart as two images can be: all 0 and all 255, every value
    changed by 255. The observed coordinates are every released value.
    """

    def __init__(self, mechanism: Mechanism, claim: PrivacyClaim, config: AuditConfig):
        super().__init__(mechanism, claim, config, size=config.image_size)

    def images(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns an all-0 and an all-255 image."""
        shape = (self.config.channels, self.size, self.size)
        return torch.zeros(shape, dtype=torch.uint8), torch.full(shape, 255, dtype=torch.uint8)

    def describe(self) -> str:
        """Returns the pair in words."""
        return f"{self.size}x{self.size}x{self.config.channels} images, all 0 vs all 255"

    def observe(self, which: int, streams: Streams) -> torch.Tensor:
        """Returns every released value: float32 [n, C S^2]."""
        return self.release(which, streams).flatten(1).to(torch.float32)
