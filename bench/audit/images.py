"""Auditors of image neighbourhoods: images differing in m pixels, and any two images of a size.

Each auditor offers many candidate pairs, and every trial observes the WHOLE release
(every value of every channel), so a mechanism that leaks an input value anywhere in its
output, or leaves any region un-noised, is seen wherever the pair differs there:

- two image sizes: the audit size ``S x S`` (``AuditConfig.image_size``) and a ragged one,
  ``(S + 3) x (S + 1)``, which no block size above 1 divides on both sides (ragged edge
  cells, and a height unequal to the width);
- for m-pixel claims, every pixel of both sizes is changed by some candidate: the pixels
  in raster order are cut into groups of m (the last one wrapping round), and each group
  is 0 in every channel in the first image and 255 in the second, on a mid-grey
  background (a random ``MAX_PLACES`` groups per size where there are more); a few more
  groups sit on random backgrounds. Candidate 0 is the pair of the first audits: the
  smallest square at the top-left corner that holds m pixels;
- for any-image claims, the extremes (all 0 vs all 255), a random image vs its negative
  and two random images, at both sizes.

The candidates and their random contents depend only on the audit's seed.
"""

from __future__ import annotations

import abc
import functools
import math
import re
from dataclasses import dataclass
from typing import Callable

import torch

from bench.audit.config import AuditConfig
from bench.audit.units import Auditor, register_auditor, whole_image_boxes
from bench.core.interfaces import Mechanism, PrivacyClaim
from bench.errors import BenchError
from bench.randomness.seeding import make_generator
from bench.randomness.streams import Streams
from bench.release import guard as mechanism_guard

MID_GREY = 128
"""Value of the pixels both m-pixel inputs share: far from both clip bounds."""

RAGGED_EXTRA = (3, 1)
"""The second audit size is ``(S + 3) x (S + 1)``: ragged for every block size above 1."""

RANDOM_BACKGROUNDS = 4
"""m-pixel candidates on a random background, per size."""

MAX_PLACES = 1024
"""Most m-pixel groups per size that are candidates (every one up to 32 x 32 pixels for m = 1)."""

_M_PIXEL = re.compile(r"^m-pixel \(m=(\d+)\)$")


@dataclass(frozen=True)
class Pair:
    """A candidate pair of neighbouring images, built when it is released.

    Attributes:
        shape: [C, H, W] of both images.
        label: The pair in words.
        build: Returns the two images, uint8 [C, H, W] each.
    """

    shape: tuple[int, int, int]
    label: str
    build: Callable[[], tuple[torch.Tensor, torch.Tensor]]


class _ImageAuditor(Auditor):
    """Releases candidate pairs of images and observes every released value."""

    def __init__(self, mechanism: Mechanism, claim: PrivacyClaim, config: AuditConfig, size: int):
        super().__init__(mechanism, claim, config)
        self.size = size
        self.sizes = [(size, size), (size + RAGGED_EXTRA[0], size + RAGGED_EXTRA[1])]
        self.pairs = self.candidates()
        self.pair = self.pairs[0].build()

    def public_shape(self) -> tuple[int, int, int]:
        """Returns [C, S, S] of the audit images."""
        return (self.config.channels, self.size, self.size)

    @abc.abstractmethod
    def candidates(self) -> list[Pair]:
        """Returns the candidate pairs; the first is the canonical one."""

    def _random(self, what: str, shape: tuple[int, ...]) -> torch.Tensor:
        generator = make_generator(self.config.seed, "audit", "pairs", what)
        return torch.randint(0, 256, shape, generator=generator, dtype=torch.uint8)

    def pair_images(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns the two images of candidate ``index``, uint8 [C, H, W] each."""
        return self.pair if index == 0 else self.pairs[index].build()

    def candidate_count(self) -> int:
        """Returns the number of candidate pairs."""
        return len(self.pairs)

    def describe_candidate(self, index: int) -> str:
        """Returns candidate ``index`` in words."""
        return self.pairs[index].label

    def describe(self) -> str:
        """Returns the canonical pair in words."""
        return self.pairs[0].label

    def candidate_values(self, index: int) -> int:
        """Returns C H W of candidate ``index``."""
        return math.prod(self.pairs[index].shape)

    def values_per_trial(self) -> int:
        """Returns the largest C H W of the candidates."""
        return max(math.prod(p.shape) for p in self.pairs)

    def _release(self, batch: torch.Tensor, streams: Streams) -> torch.Tensor:
        n, _, height, width = batch.shape
        boxes = whole_image_boxes(n, height, width) if self.mechanism.uses_boxes else None
        return mechanism_guard.apply(self.mechanism, batch, generator=streams, boxes=boxes)

    def observe_candidate(self, index: int, which: int, streams: Streams) -> torch.Tensor:
        """Returns every released value of input ``which`` of pair ``index``: float32 [n, C H W]."""
        image = self.pair_images(index)[which]
        batch = image.to(self.device).expand(len(streams), -1, -1, -1).contiguous()
        return self._release(batch, streams).flatten(1).to(torch.float32)

    def observe(self, which: int, streams: Streams) -> torch.Tensor:
        """Returns every released value of input ``which`` of the canonical pair."""
        return self.observe_candidate(0, which, streams)

    def scan(self, indices: list[int], which: int, streams: Streams) -> list[torch.Tensor]:
        """Releases the candidates of each image shape in one call; equal slices of ``streams`` each."""
        each = len(streams) // len(indices)
        out: list[torch.Tensor | None] = [None] * len(indices)
        by_shape: dict[tuple[int, ...], list[int]] = {}
        for slot, index in enumerate(indices):
            by_shape.setdefault(self.pairs[index].shape, []).append(slot)
        for slots in by_shape.values():
            images = torch.stack([self.pair_images(indices[s])[which] for s in slots])
            batch = images.to(self.device).repeat_interleave(each, 0)
            picks = torch.cat([torch.arange(s * each, (s + 1) * each) for s in slots])
            released = self._release(batch, streams[picks]).flatten(1).to(torch.float32)
            for j, slot in enumerate(slots):
                out[slot] = released[j * each:(j + 1) * each]
        return out  # type: ignore[return-value]


@register_auditor("m-pixel")
class MPixelAuditor(_ImageAuditor):
    """Images that differ in m pixels (unit ``"m-pixel (m=M)"``).

    The changed pixels are 0 in every channel in the first image and 255 in the second: the
    largest change m pixels can make, centred on the mid-grey background so that a mean
    over a cell stays clear of both clip bounds. The candidates (module docstring) change
    every pixel of both audit sizes; the canonical one changes the first m pixels, row by
    row, of the smallest square at the top-left corner that holds m.
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

    @staticmethod
    def _changed(background: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        first, second = background.clone(), background.clone()
        first[:, rows, cols] = 0
        second[:, rows, cols] = 255
        return first, second

    def _group(self, start: int, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        flat = (start + torch.arange(self.m)) % (height * width)
        return flat // width, flat % width

    def candidates(self) -> list[Pair]:
        """Returns the canonical pair, then a group of m pixels at every place of both sizes.

        Where a size has more than ``MAX_PLACES`` groups, a random ``MAX_PLACES`` of them
        (chosen by the seed) are candidates.
        """
        channels, pixels = self.config.channels, "1 pixel" if self.m == 1 else f"{self.m} pixels"
        height, width = self.sizes[0]
        grey = torch.full((channels, height, width), MID_GREY, dtype=torch.uint8)
        pairs = [Pair((channels, height, width),
                      f"{height}x{width}x{channels} mid-grey images, {pixels} 0 vs 255 in all channels (top-left)",
                      functools.partial(self._changed, grey, self.rows, self.cols))]
        for height, width in self.sizes:
            shape = (channels, height, width)
            grey = torch.full(shape, MID_GREY, dtype=torch.uint8)
            backgrounds = self._random(f"m-pixel/{height}x{width}", (RANDOM_BACKGROUNDS, *shape))
            starts = list(range(0, height * width, self.m))
            order = torch.randperm(len(starts), generator=make_generator(self.config.seed, "audit", "pairs",
                                                                         f"m-pixel/{height}x{width}/places")).tolist()
            if len(starts) > MAX_PLACES:
                starts = sorted(starts[i] for i in order[:MAX_PLACES])
            for start in starts:
                rows, cols = self._group(start, height, width)
                pairs.append(Pair(shape, f"{height}x{width}x{channels} mid-grey images, {pixels} from pixel "
                                         f"(row {int(rows[0])}, column {int(cols[0])}) 0 vs 255 in all channels",
                                  functools.partial(self._changed, grey, rows, cols)))
            for k in range(RANDOM_BACKGROUNDS):
                rows, cols = self._group(order[k % len(order)] * self.m, height, width)
                pairs.append(Pair(shape, f"{height}x{width}x{channels} random images, {pixels} from pixel "
                                         f"(row {int(rows[0])}, column {int(cols[0])}) 0 vs 255 in all channels",
                                  functools.partial(self._changed, backgrounds[k], rows, cols)))
        return pairs


@register_auditor("any image of this size")
class AnyImageAuditor(_ImageAuditor):
    """Any two images of one size (unit ``"any image of this size"``).

    The canonical pair is as far apart as two images can be: all 0 and all 255, every
    value changed by 255. The candidates add a random image against its negative and two
    random images, and the ragged size.
    """

    def __init__(self, mechanism: Mechanism, claim: PrivacyClaim, config: AuditConfig):
        super().__init__(mechanism, claim, config, size=config.image_size)

    def candidates(self) -> list[Pair]:
        """Returns the extremes, a random image vs its negative and two random images, at both sizes."""
        channels, pairs = self.config.channels, []
        for height, width in self.sizes:
            shape = (channels, height, width)
            name = f"{height}x{width}x{channels} images"
            one, two = self._random(f"any/{height}x{width}", (2, *shape))
            black, white = torch.zeros(shape, dtype=torch.uint8), torch.full(shape, 255, dtype=torch.uint8)
            pairs += [
                Pair(shape, f"{name}, all 0 vs all 255", functools.partial(tuple, (black, white))),
                Pair(shape, f"{name}, a random image vs its negative", functools.partial(tuple, (one, 255 - one))),
                Pair(shape, f"{name}, two random images", functools.partial(tuple, (one, two))),
            ]
        return pairs
