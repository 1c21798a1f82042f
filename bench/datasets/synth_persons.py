"""Synthetic pedestrians: a deterministic, Market-1501-shaped stand-in for person reID.

Every image is rendered in torch, vectorised over a batch: body parts are implicit shapes
(ellipses, boxes and tapered bands) evaluated on a 2x supersampled coordinate grid into
a part map, coloured from a per-image palette, shaded, and average-pooled to 128 x 64.

Identity is carried by clothing colours (upper, lower), the upper-body pattern (plain,
stripes, checks, logo), build and head size, hair (colour, length), and accessories
(backpack, shoulder bag, hat). Each of 6 cameras has its own scene, colour cast,
brightness, contrast, blur, noise, person scale and mix of viewpoints; the viewpoint
(front, back, side) changes what is visible: a backpack is a box from the back and from
the side but only straps from the front, a chest logo shows only from the front, the
face only from the front and side. Gender (male, female) and age (young, teenager,
adult, old) shape appearance the way they plausibly do, without determining it: hair
length, build, skirts, palette, head size, grey hair.

Splits mirror Market-1501 (see :mod:`bench.datasets.market1501`): half the identities
train (labels relabelled 0..K-1), the other half test; each test identity gives one
query image for each camera of a random non-empty subset of its cameras, and its other
images go to the gallery, together with junk images (pid -1: badly cropped, partial or
tiny renders) and distractors (pid 0: background only or people outside the identity
set). Pids are 1..n_ids; every identity is seen by at least 2 cameras and keeps at least
one gallery image in each, so every query has a cross-camera match.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping

import torch
import torch.nn.functional as F

from bench.datasets.base import Dataset, ImageSet, Splits, cached_splits, fingerprint
from bench.datasets.market1501 import AGES, GENDERS, check_options, from_payload, person_size, to_payload
from bench.errors import BenchError
from bench.registry import register_dataset
from bench.seeding import make_generator

#: Bump whenever the rendered images or the splits change for the same options.
GENERATOR_VERSION = 1

HEIGHT, WIDTH = 128, 64
SUPERSAMPLE = 2
NUM_CAMS = 6
BATCH = 32
MAX_WORKERS = 8
JUNK_PID = -1
DISTRACTOR_PID = 0

DEFAULTS: dict[str, Any] = {
    "n_ids": 500,
    "per_id": 16,
    "seed": 0,
    "junk_frac": 0.2,
    "distractor_frac": 0.15,
    "size": None,
}
MIN_IDS = 4
MIN_PER_ID = 4

# Part indices of the part map; 0 is the background.
BG, SKIN, HAIR, UPPER, UPPER2, LOWER, SHOES, BACKPACK, BAG, HAT, DARK = range(11)
NUM_PARTS = 11

FRONT, BACK, SIDE = 0, 1, 2
PLAIN, STRIPES, CHECKS, LOGO = 0, 1, 2, 3
TROUSERS, SHORTS, SKIRT = 0, 1, 2
YOUNG, TEEN, ADULT, OLD = 0, 1, 2, 3

# Clothing colours (RGB in [0, 1]) and their frequencies by gender (male row, female row).
CLOTH = torch.tensor([
    [0.10, 0.10, 0.11],  # black
    [0.88, 0.88, 0.85],  # white
    [0.50, 0.50, 0.52],  # gray
    [0.74, 0.12, 0.13],  # red
    [0.93, 0.56, 0.66],  # pink
    [0.45, 0.22, 0.56],  # purple
    [0.90, 0.80, 0.22],  # yellow
    [0.16, 0.32, 0.68],  # blue
    [0.10, 0.15, 0.36],  # navy
    [0.20, 0.50, 0.26],  # green
    [0.46, 0.30, 0.18],  # brown
    [0.92, 0.50, 0.15],  # orange
    [0.80, 0.72, 0.55],  # beige
    [0.30, 0.42, 0.62],  # denim
])
UPPER_FREQ = torch.tensor([
    [22, 16, 14, 6, 1, 2, 3, 12, 8, 6, 4, 3, 3, 0],
    [14, 18, 7, 12, 12, 8, 6, 8, 2, 4, 2, 3, 4, 0],
], dtype=torch.float64)
LOWER_FREQ = torch.tensor([
    [35, 3, 15, 0, 0, 0, 0, 3, 10, 3, 6, 0, 8, 20],
    [30, 8, 10, 2, 6, 2, 1, 3, 4, 1, 6, 0, 8, 18],
], dtype=torch.float64)
SHOE_COLOURS = torch.tensor([[0.08, 0.08, 0.08], [0.85, 0.85, 0.85], [0.4, 0.4, 0.42], [0.35, 0.22, 0.12]])
SKIN_TONES = torch.tensor([[0.93, 0.78, 0.67], [0.86, 0.67, 0.53], [0.76, 0.57, 0.43], [0.60, 0.42, 0.30]])
HAIR_COLOURS = torch.tensor([[0.06, 0.05, 0.05], [0.20, 0.13, 0.08], [0.38, 0.25, 0.14], [0.75, 0.62, 0.38]])
GREY_HAIR = torch.tensor([0.72, 0.72, 0.70])

# Cameras: scene colours, horizon, colour cast, brightness, contrast, noise, blur, person
# scale, horizontal light gradient and the probabilities of (front, back, side) views.
CAM_WALL = torch.tensor([[0.58, 0.33, 0.27], [0.55, 0.57, 0.60], [0.28, 0.42, 0.24],
                         [0.70, 0.67, 0.58], [0.36, 0.40, 0.47], [0.78, 0.77, 0.73]])
CAM_ACCENT = torch.tensor([[0.45, 0.26, 0.22], [0.35, 0.38, 0.42], [0.18, 0.30, 0.16],
                           [0.52, 0.48, 0.40], [0.20, 0.24, 0.30], [0.60, 0.62, 0.66]])
CAM_GROUND = torch.tensor([[0.50, 0.50, 0.50], [0.44, 0.42, 0.39], [0.55, 0.52, 0.45],
                           [0.37, 0.37, 0.40], [0.60, 0.58, 0.55], [0.46, 0.50, 0.45]])
CAM_HORIZON = torch.tensor([0.45, 0.56, 0.40, 0.62, 0.50, 0.36])
CAM_GAIN = torch.tensor([[1.07, 1.00, 0.89], [0.91, 0.98, 1.10], [0.97, 1.07, 0.93],
                         [1.10, 0.96, 0.95], [0.95, 0.96, 1.05], [1.00, 1.00, 1.00]])
CAM_BRIGHT = torch.tensor([1.00, 0.88, 1.10, 0.82, 1.00, 1.14])
CAM_CONTRAST = torch.tensor([1.00, 0.90, 1.06, 0.94, 1.10, 0.84])
CAM_NOISE = torch.tensor([3.0, 5.0, 2.0, 6.0, 3.0, 4.0]) / 255.0
CAM_BLUR = torch.tensor([0.2, 0.5, 0.0, 0.7, 0.3, 0.1])
CAM_SCALE = torch.tensor([0.91, 0.87, 0.89, 0.84, 0.92, 0.88])
CAM_LIGHT = torch.tensor([0.12, -0.10, 0.05, -0.15, 0.0, 0.08])
CAM_VIEWS = torch.tensor([[0.60, 0.20, 0.20], [0.20, 0.60, 0.20], [0.25, 0.25, 0.50],
                          [0.40, 0.40, 0.20], [0.20, 0.30, 0.50], [0.45, 0.35, 0.20]])


def _categorical(probs: torch.Tensor, n: int, gen: torch.Generator) -> torch.Tensor:
    """Draws n indices with probabilities ``probs`` [K] or per-row ``probs`` [n, K]."""
    if probs.dim() == 1:
        return torch.multinomial(probs.double(), n, replacement=True, generator=gen)
    return torch.multinomial(probs.double(), 1, generator=gen).flatten()


def _bernoulli(p: torch.Tensor | float, n: int, gen: torch.Generator) -> torch.Tensor:
    return torch.rand(n, generator=gen, dtype=torch.float64) < torch.as_tensor(p, dtype=torch.float64)


def _uniform(lo: float, hi: float, n: int, gen: torch.Generator) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(n, generator=gen)


def _jitter(colours: torch.Tensor, amount: float, gen: torch.Generator) -> torch.Tensor:
    return (colours + amount * torch.randn(colours.shape, generator=gen)).clamp(0.0, 1.0)


def draw_people(n: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Draws the appearance of n people: attributes, body, clothes, accessories.

    Args:
        n: Number of people.
        gen: Generator the draws come from.

    Returns:
        Field name -> tensor [n] or [n, 3] (colours).
    """
    female = _bernoulli(0.43, n, gen)
    g = female.long()
    age = _categorical(torch.tensor([0.06, 0.22, 0.62, 0.10]), n, gen)
    child, teen, old = age == YOUNG, age == TEEN, age == OLD

    hair_long = _bernoulli(torch.where(female, 0.75, 0.06) * torch.where(old, 0.6, 1.0), n, gen)
    hair_colour = HAIR_COLOURS[_categorical(torch.tensor([0.55, 0.28, 0.12, 0.05]), n, gen)]
    grey = _bernoulli(torch.where(old, 0.75, 0.0), n, gen)
    hair_colour = torch.where(grey[:, None], GREY_HAIR.expand(n, 3), hair_colour)

    build = torch.where(female, 0.90, 1.0) + 0.07 * torch.randn(n, generator=gen)
    build = torch.where(child, build * 0.92, build).clamp(0.75, 1.25)
    head = torch.where(child, 0.082, torch.where(teen, 0.069, 0.064)) * (1 + 0.05 * torch.randn(n, generator=gen))
    torso = torch.where(child, 0.27, 0.31) + 0.015 * torch.randn(n, generator=gen)

    lower_type = _categorical(torch.stack([
        torch.where(female, 0.45, 0.80), torch.where(female, 0.18, 0.20), torch.where(female, 0.37, 0.0)
    ], 1), n, gen)
    pattern = _categorical(torch.tensor([0.55, 0.17, 0.12, 0.16]), n, gen)
    upper_idx = _categorical(UPPER_FREQ[g], n, gen)
    upper2_idx = (upper_idx + torch.randint(1, len(CLOTH), (n,), generator=gen)) % len(CLOTH)
    return {
        "female": female,
        "age": age,
        "hair_long": hair_long,
        "hair_colour": _jitter(hair_colour, 0.03, gen),
        "skin": _jitter(SKIN_TONES[_categorical(torch.tensor([0.35, 0.35, 0.2, 0.1]), n, gen)], 0.03, gen),
        "build": build,
        "head": head,
        "torso": torso,
        "upper": _jitter(CLOTH[upper_idx], 0.05, gen),
        "upper2": _jitter(CLOTH[upper2_idx], 0.05, gen),
        "pattern": pattern,
        "stripe_freq": _uniform(16.0, 30.0, n, gen),
        "stripe_phase": torch.rand(n, generator=gen),
        "logo_round": _bernoulli(0.5, n, gen),
        "short_sleeve": _bernoulli(0.5, n, gen),
        "lower_type": lower_type,
        "lower": _jitter(CLOTH[_categorical(LOWER_FREQ[g], n, gen)], 0.05, gen),
        "shoes": _jitter(SHOE_COLOURS[_categorical(torch.tensor([0.5, 0.25, 0.15, 0.1]), n, gen)], 0.03, gen),
        "backpack": _bernoulli(torch.where(child | teen, 0.45, 0.22), n, gen),
        "backpack_colour": _jitter(CLOTH[_categorical(torch.ones(len(CLOTH)), n, gen)], 0.05, gen),
        "bag": _bernoulli(torch.where(female, 0.45, 0.15), n, gen),
        "bag_colour": _jitter(CLOTH[_categorical(torch.ones(len(CLOTH)), n, gen)], 0.05, gen),
        "bag_side": torch.where(_bernoulli(0.5, n, gen), 1.0, -1.0),
        "hat": _bernoulli(torch.where(old, 0.25, 0.09), n, gen),
        "hat_colour": _jitter(CLOTH[_categorical(torch.ones(len(CLOTH)), n, gen)], 0.05, gen),
    }


def draw_shots(cams: torch.Tensor, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Draws how each image is taken: viewpoint, framing, pose, scene and light.

    Args:
        cams: int64 [n] camera of each image (0-based).
        gen: Generator the draws come from.

    Returns:
        Field name -> tensor [n] (or [n, k]).
    """
    n = cams.numel()
    view = _categorical(CAM_VIEWS[cams], n, gen)
    return {
        "cam": cams.clone(),
        "view": view,
        "facing": torch.where(_bernoulli(0.5, n, gen), 1.0, -1.0),
        "height": CAM_SCALE[cams] * _uniform(0.95, 1.05, n, gen),
        "feet": _uniform(0.955, 0.99, n, gen),
        "cx": 0.25 + 0.012 * torch.randn(n, generator=gen),
        "swing": _uniform(-0.07, 0.07, n, gen),
        "stride": _uniform(0.0, 0.085, n, gen),
        "present": torch.ones(n, dtype=torch.bool),
        "bg_offset": torch.rand(n, generator=gen),
        "bg_period": _uniform(3.0, 7.0, n, gen),
        "horizon": CAM_HORIZON[cams] + 0.04 * torch.randn(n, generator=gen),
        "clutter": torch.rand(n, 2, 7, generator=gen),
        "bright": CAM_BRIGHT[cams] * _uniform(0.92, 1.08, n, gen),
    }


def junk_framing(shots: dict[str, torch.Tensor], gen: torch.Generator) -> None:
    """Turns shots into bad detections: zoomed-in parts, half-out-of-frame or tiny people."""
    n = shots["cam"].numel()
    kind = torch.randint(0, 3, (n,), generator=gen)
    zoom = kind == 0
    factor = _uniform(1.7, 2.8, n, gen)
    shots["height"] = torch.where(zoom, shots["height"] * factor, shots["height"])
    shots["feet"] = torch.where(zoom, shots["feet"] + (factor - 1) * _uniform(0.0, 0.9, n, gen), shots["feet"])
    side = torch.where(_bernoulli(0.5, n, gen), 1.0, -1.0)
    shots["cx"] = torch.where(kind == 1, 0.25 + side * _uniform(0.17, 0.27, n, gen), shots["cx"])
    tiny = kind == 2
    shots["height"] = torch.where(tiny, shots["height"] * _uniform(0.3, 0.5, n, gen), shots["height"])
    shots["feet"] = torch.where(tiny, _uniform(0.5, 0.95, n, gen), shots["feet"])
    shots["cx"] = torch.where(tiny, _uniform(0.08, 0.42, n, gen), shots["cx"])


def render(people: Mapping[str, torch.Tensor], shots: Mapping[str, torch.Tensor], gen: torch.Generator) -> torch.Tensor:
    """Renders a batch of pedestrians.

    Args:
        people: Appearance of the person of each image (fields of :func:`draw_people`).
        shots: How each image is taken (fields of :func:`draw_shots`).
        gen: Generator of the sensor noise.

    Returns:
        uint8 images [B, 3, 128, 64].
    """
    b = shots["cam"].numel()
    h2, w2 = HEIGHT * SUPERSAMPLE, WIDTH * SUPERSAMPLE
    y = ((torch.arange(h2) + 0.5) / h2).view(1, h2, 1)
    x = ((torch.arange(w2) + 0.5) / h2).view(1, 1, w2)

    def col(t: torch.Tensor) -> torch.Tensor:
        return t.float().view(b, 1, 1)

    height = col(shots["height"])
    u = (x - col(shots["cx"])) / height
    v = (y - (col(shots["feet"]) - height)) / height
    canvas = _Canvas(u, v, shots["present"].view(b, 1, 1))
    _draw_person(canvas, {k: col(t) for k, t in people.items() if t.dim() == 1},
                 {k: col(t) for k, t in shots.items() if t.dim() == 1})
    part = canvas.part

    palette = torch.zeros((b, NUM_PARTS, 3))
    for index, key in ((SKIN, "skin"), (HAIR, "hair_colour"), (UPPER, "upper"), (UPPER2, "upper2"),
                       (LOWER, "lower"), (SHOES, "shoes"), (BACKPACK, "backpack_colour"),
                       (BAG, "bag_colour"), (HAT, "hat_colour")):
        palette[:, index] = people[key].float()
    palette[:, DARK] = torch.tensor([0.07, 0.06, 0.06])
    index = part.to(torch.int64).view(b, 1, -1).expand(-1, 3, -1)
    person = palette.transpose(1, 2).gather(2, index).view(b, 3, h2, w2)
    shade = (1.0 - 0.28 * (u.abs() / 0.16).clamp(max=1.0) ** 2) * (1.0 - 0.08 * v.clamp(0, 1))
    cover = part.clamp(max=1.0)
    person = _pool(person * (shade * cover)[:, None])
    cover = _pool(cover[:, None])

    x_lo = ((torch.arange(WIDTH) + 0.5) / HEIGHT).view(1, 1, 1, WIDTH)
    y_lo = ((torch.arange(HEIGHT) + 0.5) / HEIGHT).view(1, 1, HEIGHT, 1)
    img = person + (1.0 - cover) * _background(x_lo, y_lo, shots)

    cams = shots["cam"]
    light = 1.0 + CAM_LIGHT[cams].view(b, 1, 1, 1) * (x_lo - 0.25) / 0.25
    gain = CAM_GAIN[cams].view(b, 3, 1, 1) * shots["bright"].view(b, 1, 1, 1)
    img = img * (light * gain)
    img = (img - 0.45) * CAM_CONTRAST[cams].view(b, 1, 1, 1) + 0.45
    smooth = F.avg_pool2d(F.pad(img, (1, 1, 1, 1), mode="replicate"), 3, stride=1)
    img = img + CAM_BLUR[cams].view(b, 1, 1, 1) * (smooth - img)
    img = img + CAM_NOISE[cams].view(b, 1, 1, 1) * torch.randn(img.shape, generator=gen)
    return (img.clamp(0.0, 1.0) * 255.0).round().to(torch.uint8)


def _pool(x: torch.Tensor) -> torch.Tensor:
    """Averages SUPERSAMPLE x SUPERSAMPLE cells (strided adds: faster than avg_pool2d on CPU)."""
    k = SUPERSAMPLE
    x = sum(x[..., i::k] for i in range(k))
    return sum(x[..., i::k, :] for i in range(k)) / (k * k)


class _Canvas:
    """The part map of a batch and the implicit shapes drawn on it.

    ``u`` [B, 1, W] and ``v`` [B, H, 1] are body coordinates in units of the person's
    height (v = 0 at the top of the head, 1 at the soles; u = 0 on the body axis). Shapes
    are float 0/1 masks [B, H, W]; per-image conditions (``when``) and row limits (``lo``,
    ``hi``) are folded into the [B, H, 1] factor, so each shape costs a few full-size ops.
    """

    def __init__(self, u: torch.Tensor, v: torch.Tensor, present: torch.Tensor):
        self.u, self.v, self.present = u, v, present
        self.part = torch.zeros((u.shape[0], v.shape[1], u.shape[2]))

    def _rows(self, when: Any, lo: Any, hi: Any) -> torch.Tensor:
        rows = self.present & (self.v >= lo if lo is not None else True)
        if hi is not None:
            rows = rows & (self.v <= hi)
        return rows & when if when is not None else rows

    def ellipse(self, cu: Any, cv: Any, ru: Any, rv: Any, when: Any = None, lo: Any = None, hi: Any = None,
                cols: torch.Tensor | None = None) -> torch.Tensor:
        """Inside of the ellipse centred at (cu, cv) with radii (ru, rv)."""
        a = torch.where(self._rows(when, lo, hi), 1.0 - ((self.v - cv) / rv) ** 2, -1.0)
        d = ((self.u - cu) / ru) ** 2
        if cols is not None:
            d = torch.where(cols, d, 2.0)
        return (a - d).sign_().clamp_(min=0.0)

    def box(self, u0: Any, u1: Any, v0: Any, v1: Any, when: Any = None,
            coord: torch.Tensor | None = None) -> torch.Tensor:
        """Inside of the box u0 <= coord <= u1, v0 <= v <= v1 (coord defaults to u)."""
        coord = self.u if coord is None else coord
        return self._rows(when, v0, v1).float() * ((coord >= u0) & (coord <= u1)).float()

    def band(self, v0: Any, v1: Any, u0: Any, u1: Any, r0: Any, r1: Any, when: Any = None,
             lo: Any = None, hi: Any = None) -> torch.Tensor:
        """A limb: from row v0 to v1 its axis goes from u0 to u1 and its half-width from r0 to r1.

        ``lo`` and ``hi`` cut it to a range of rows without changing its geometry.
        """
        t = ((self.v - v0) / (v1 - v0)).clamp(0.0, 1.0)
        lo = v0 if lo is None else torch.maximum(torch.as_tensor(v0), torch.as_tensor(lo))
        hi = v1 if hi is None else torch.minimum(torch.as_tensor(v1), torch.as_tensor(hi))
        radius = torch.where(self._rows(when, lo, hi), r0 + (r1 - r0) * t, -1.0)
        centre = u0 + (u1 - u0) * t
        return (radius - (self.u - centre).abs_()).sign_().clamp_(min=0.0)

    def paint(self, mask: torch.Tensor, index: int) -> None:
        """Sets the part of the pixels inside ``mask``."""
        self.part.lerp_(_PART_VALUES[index], mask)

    def is_part(self, index: int) -> torch.Tensor:
        """Mask of the pixels currently showing ``index``."""
        return (1.0 - (self.part - index).abs_()).clamp_(min=0.0)


_PART_VALUES = [torch.tensor(float(i)) for i in range(NUM_PARTS)]


def _background(x: torch.Tensor, y: torch.Tensor, shots: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Returns the scene behind the person, with its shadow: float [B, 3, h, w].

    Args:
        x: [1, 1, 1, w] pixel-centre columns in units of the image height.
        y: [1, 1, h, 1] pixel-centre rows in units of the image height.
        shots: How each image is taken (fields of :func:`draw_shots`).
    """
    b = shots["cam"].numel()
    cam = shots["cam"]

    def col(t: torch.Tensor) -> torch.Tensor:
        return t.float().view(b, 1, 1, 1)

    phase = (x * col(shots["bg_period"]) + col(shots["bg_offset"])) % 1.0
    wall = CAM_WALL[cam].view(b, 3, 1, 1).lerp(CAM_ACCENT[cam].view(b, 3, 1, 1), (phase < 0.35).float())
    below = y - col(shots["horizon"])
    lines = (12.0 * below / (below + 0.15).clamp(min=0.05)) % 1.0
    ground = CAM_GROUND[cam].view(b, 3, 1, 1) * (1.0 - 0.15 * (lines < 0.08).float())
    img = wall.expand(b, 3, y.shape[2], x.shape[3]).lerp(ground.expand(b, 3, -1, x.shape[3]), (below > 0).float())

    for k in range(shots["clutter"].shape[1]):
        p = shots["clutter"][:, k]
        x0 = p[:, 0] * 0.5
        x1 = x0 + 0.04 + 0.18 * p[:, 1]
        y1 = shots["horizon"] + 0.1 * p[:, 2]
        y0 = y1 - 0.08 - 0.3 * p[:, 3]
        grey = p[:, 4:7].mean(1, keepdim=True)
        colour = (0.35 * p[:, 4:7] + 0.65 * grey) * 0.75 + 0.08
        rows = ((y >= col(y0)) & (y <= col(y1))).float()
        cols = ((x >= col(x0)) & (x <= col(x1))).float()
        img = img.lerp_(colour.view(b, 3, 1, 1).expand_as(img), rows * cols)

    height = col(shots["height"])
    su = (x - col(shots["cx"])) / (0.2 * height)
    sv = (y - col(shots["feet"])) / (0.03 * height)
    shadow = ((su**2 + sv**2) <= 1.0).float() * col(shots["present"])
    return img * (1.0 - 0.3 * shadow)


def _draw_person(cv: _Canvas, p: dict[str, torch.Tensor], s: dict[str, torch.Tensor]) -> None:
    """Paints the parts of one batch of people, back to front.

    ``p`` and ``s`` hold per-image [B, 1, 1] person and shot parameters.
    """
    u, v = cv.u, cv.v
    front, back, side = s["view"] == FRONT, s["view"] == BACK, s["view"] == SIDE
    f = s["facing"]
    uf = u * f
    female = p["female"] > 0.5
    hv = p["head"]
    hu = hv * 0.8
    hc = hv + 0.004
    build = p["build"]
    side_w = torch.where(side, 0.6, 1.0)
    sh_v = 2 * hv + 0.03
    hip_v = sh_v + p["torso"]
    ankle = torch.full_like(hv, 0.955)
    knee = (hip_v + ankle) / 2
    sh_w = torch.where(female, 0.124, 0.142) * build * side_w
    hip_w = torch.where(female, 0.114, 0.108) * build * side_w
    leg_r = 0.048 * build
    arm_r = 0.033 * build
    head_u = torch.where(side, 0.01 * f, 0.0)
    long_hair = p["hair_long"] > 0.5
    lower_type = p["lower_type"]
    backpack = p["backpack"] > 0.5

    # Behind the body: long hair seen from the front, the far arm and a backpack from the side.
    cv.paint(cv.box(-hu * 1.15, hu * 1.15, hc, sh_v + 0.08, when=long_hair & front), HAIR)
    cv.paint(cv.band(sh_v + 0.02, hip_v + 0.03, 0.0, -s["swing"] * f, arm_r, arm_r * 0.85, when=side), UPPER)
    pack = cv.box(-(sh_w + 0.075), -(sh_w - 0.02), sh_v + 0.02, sh_v + 0.21, when=backpack & side, coord=uf)
    cv.paint(pack, BACKPACK)

    # Legs: trousers to the ankle, shorts to the knee, bare legs under a skirt.
    stride = torch.where(side, s["stride"], 0.0)
    spread = torch.where(side, 0.014, 0.056 * build)
    cut = torch.where(lower_type == TROUSERS, ankle, torch.where(lower_type == SHORTS, knee - 0.02, hip_v))
    for sign in (-1.0, 1.0):
        top_u, bottom_u = sign * spread * f, sign * (spread * 1.05 + stride) * f
        leg = (hip_v - 0.01, ankle, top_u, bottom_u, leg_r * 1.2, leg_r * 0.75)
        cv.paint(cv.band(*leg, hi=cut), LOWER)
        cv.paint(cv.band(*leg, lo=cut), SKIN)
        foot_u = bottom_u + torch.where(side, 0.022 * f, 0.0)
        cv.paint(cv.ellipse(foot_u, ankle + 0.02, torch.where(side, 0.058, 0.04), 0.026), SHOES)
    crotch = spread + leg_r * 0.5
    cv.paint(cv.box(-crotch, crotch, hip_v - 0.02, hip_v + 0.07, when=lower_type != SKIRT), LOWER)
    cv.paint(cv.band(hip_v - 0.03, knee + 0.03, 0.0, 0.0, hip_w * 1.02, hip_w * 1.5, when=lower_type == SKIRT), LOWER)

    # Torso with rounded shoulders.
    t = ((v - sh_v) / (hip_v - sh_v)).clamp(0.0, 1.0)
    roundness = ((v - sh_v + 0.02) / 0.05).clamp(0.0, 1.0).sqrt()
    inside = cv.present & (v >= sh_v - 0.02) & (v <= hip_v + 0.02)
    half = torch.where(inside, (sh_w + (hip_w - sh_w) * t) * roundness, -1.0)
    cv.paint((half - u.abs()).sign_().clamp_(min=0.0), UPPER)

    # Arms: sleeves to the elbow or the wrist, then skin and a hand.
    sleeve_end = torch.where(p["short_sleeve"] > 0.5, sh_v + 0.13, hip_v + 0.02)
    swing = s["swing"]
    for sign in (-1.0, 1.0):
        top = torch.where(side, 0.0, sign * (sh_w - arm_r * 0.6))
        bottom = torch.where(side, swing * f, sign * (sh_w + 0.018 + swing.abs() * 0.3))
        shown = ~side if sign < 0 else None
        arm = (sh_v + 0.02, hip_v + 0.03, top, bottom, arm_r * 1.05, arm_r * 0.8)
        cv.paint(cv.band(*arm, when=shown, hi=sleeve_end), UPPER)
        cv.paint(cv.band(*arm, when=shown, lo=sleeve_end), SKIN)
        cv.paint(cv.ellipse(bottom, hip_v + 0.045, arm_r * 0.95, 0.022, when=shown), SKIN)

    # Upper-body pattern (stripes or checks on every visible upper-body pixel), chest logo.
    pattern = p["pattern"]
    stripes = (v * p["stripe_freq"] + p["stripe_phase"]) % 1.0 < 0.5
    checks = (u * p["stripe_freq"]) % 1.0 < 0.5
    rows = (stripes & ((pattern == STRIPES) | (pattern == CHECKS))).float()
    cols = (checks & (pattern == CHECKS)).float()
    cv.paint(cv.is_part(UPPER) * (rows - cols).abs_(), UPPER2)
    logo = front & (pattern == LOGO)
    r = 0.036
    cv.paint(cv.ellipse(0.0, sh_v + 0.1, r, r, when=logo & (p["logo_round"] > 0.5)), UPPER2)
    cv.paint(cv.box(-r, r, sh_v + 0.07, sh_v + 0.13, when=logo & (p["logo_round"] < 0.5)), UPPER2)

    # Accessories over the torso: backpack (box from the back, straps from the front), bag.
    cv.paint(cv.box(-0.085 * build, 0.085 * build, sh_v + 0.02, sh_v + 0.22, when=backpack & back), BACKPACK)
    for sign in (-1.0, 1.0):
        strap = cv.box(sign * 0.06 - 0.012, sign * 0.06 + 0.012, sh_v - 0.01, sh_v + 0.14, when=backpack & front)
        cv.paint(strap, BACKPACK)
    bag = p["bag"] > 0.5
    bag_side = torch.where(back, -p["bag_side"], p["bag_side"])
    cv.paint(cv.band(sh_v - 0.005, hip_v - 0.05, -bag_side * sh_w * 0.6, bag_side * hip_w, 0.009, 0.009,
                     when=bag & ~side), BAG)
    bag_u0 = torch.where(side, -0.05, hip_w + 0.005)
    bag_coord = torch.where(side, uf, u * bag_side)
    cv.paint(cv.box(bag_u0, bag_u0 + 0.08, hip_v - 0.07, hip_v + 0.06, when=bag, coord=bag_coord), BAG)

    # Neck, head, face, hair and hat.
    cv.paint(cv.box(-hu * 0.45, hu * 0.45, hc, sh_v + 0.01), SKIN)
    cv.paint(cv.ellipse(head_u, hc, hu, hv), SKIN)
    eye_v = hc - 0.05 * hv
    for eye_u in (-0.36 * hu, 0.36 * hu):
        cv.paint(cv.ellipse(eye_u, eye_v, 0.01, 0.008, when=front), DARK)
    cv.paint(cv.ellipse(head_u + 0.55 * hu * f, eye_v, 0.01, 0.008, when=side), DARK)
    cv.paint(cv.ellipse(head_u, hc - 0.06 * hv, hu * 1.1, hv * 1.04, hi=hc - 0.38 * hv), HAIR)
    cv.paint(cv.ellipse(head_u, hc, hu * 1.02, hv * 1.02, when=back, hi=hc + 0.55 * hv), HAIR)
    back_half = (uf - head_u * f) < 0.2 * hu
    cv.paint(cv.ellipse(head_u, hc, hu * 1.08, hv * 1.04, when=side, hi=hc + 0.6 * hv, cols=back_half), HAIR)
    cv.paint(cv.box(-hu * 1.1, hu * 1.1, hc, sh_v + 0.11, when=long_hair & back), HAIR)
    cv.paint(cv.box(-hu * 1.08, -hu * 0.1, hc, sh_v + 0.09, when=long_hair & side, coord=uf), HAIR)
    hat = p["hat"] > 0.5
    cv.paint(cv.ellipse(head_u, hc - 0.3 * hv, hu * 1.14, hv * 0.8, when=hat, hi=hc - 0.25 * hv), HAT)
    cv.paint(cv.box(-hu * 1.22, hu * 1.22, hc - 0.36 * hv, hc - 0.22 * hv, when=hat & ~side), HAT)
    cv.paint(cv.box(-hu * 0.9, hu * 1.65, hc - 0.36 * hv, hc - 0.24 * hv, when=hat & side, coord=uf), HAT)


def plan(
    n_ids: int, per_id: int, junk_frac: float, distractor_frac: float, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    """Assigns identities to splits and images to cameras, queries, junk and distractors.

    Returns:
        ``pid`` [N] (1..n_ids, -1 junk, 0 distractor), ``cam`` [N], ``split`` [N]
        (0 train, 1 query, 2 gallery), ``kind`` [N] (0 identity, 1 junk, 2 distractor
        person, 3 background only).
    """
    order = torch.randperm(n_ids, generator=gen) + 1
    train_ids = set(order[: (n_ids + 1) // 2].tolist())
    pids, cams, splits = [], [], []
    for pid in range(1, n_ids + 1):
        k = int(torch.randint(2, min(NUM_CAMS, per_id // 2) + 1, (1,), generator=gen))
        id_cams = torch.randperm(NUM_CAMS, generator=gen)[:k]
        counts = torch.full((k,), 2) + torch.bincount(
            torch.randint(0, k, (per_id - 2 * k,), generator=gen), minlength=k
        )
        n_query = int(torch.randint(1, k + 1, (1,), generator=gen))
        for j in range(k):
            for i in range(int(counts[j])):
                pids.append(pid)
                cams.append(int(id_cams[j]))
                if pid in train_ids:
                    splits.append(0)
                else:
                    splits.append(1 if (j < n_query and i == 0) else 2)
    pid = torch.tensor(pids, dtype=torch.int64)
    cam = torch.tensor(cams, dtype=torch.int64)
    split = torch.tensor(splits, dtype=torch.int64)
    kind = torch.zeros_like(pid)

    n_gallery = int((split == 2).sum())
    n_junk = round(junk_frac * n_gallery)
    n_distractor = round(distractor_frac * n_gallery)
    extra_cam = torch.randint(0, NUM_CAMS, (n_junk + n_distractor,), generator=gen)
    extra_kind = torch.cat([
        torch.ones(n_junk, dtype=torch.int64),
        torch.where(_bernoulli(0.5, n_distractor, gen), 2, 3),
    ])
    extra_pid = torch.cat([torch.full((n_junk,), JUNK_PID), torch.full((n_distractor,), DISTRACTOR_PID)])
    return {
        "pid": torch.cat([pid, extra_pid]),
        "cam": torch.cat([cam, extra_cam]),
        "split": torch.cat([split, torch.full((n_junk + n_distractor,), 2)]),
        "kind": torch.cat([kind, extra_kind]),
    }


def generate(options: Mapping[str, Any]) -> tuple[dict[str, ImageSet], dict[str, Any]]:
    """Generates the three splits for resolved options (see :class:`SynthPersons`)."""
    seed = options["seed"]
    started = time.perf_counter()
    layout = plan(options["n_ids"], options["per_id"], options["junk_frac"], options["distractor_frac"],
                  make_generator(seed, "synth_persons", "plan"))
    n = layout["pid"].numel()
    identities = draw_people(options["n_ids"], make_generator(seed, "synth_persons", "identities"))
    strangers = draw_people(n, make_generator(seed, "synth_persons", "strangers"))
    kind = layout["kind"]
    is_identity = kind == 0
    id_index = (layout["pid"] - 1).clamp(min=0)
    people = {k: torch.where(_per_row(is_identity, v), v[id_index], strangers[k]) for k, v in identities.items()}
    shots = draw_shots(layout["cam"], make_generator(seed, "synth_persons", "shots"))
    junk = kind == 1
    if junk.any():
        junk_shots = {k: v[junk] for k, v in shots.items()}
        junk_framing(junk_shots, make_generator(seed, "synth_persons", "junk"))
        for k, v in junk_shots.items():
            shots[k][junk] = v
    shots["present"] = kind != 3

    images = render_all(people, shots, seed)
    size = options["size"]
    if size is not None and tuple(size) != (HEIGHT, WIDTH):
        images = _resize(images, tuple(size))

    attrs = {"gender": torch.where(is_identity, people["female"].long(), -1),
             "age": torch.where(is_identity, people["age"].long(), -1)}
    sets = {}
    for index, name in enumerate(("train", "query", "gallery")):
        sel = (layout["split"] == index).nonzero().flatten()
        sel = sel[torch.argsort(layout["pid"][sel] * NUM_CAMS + layout["cam"][sel], stable=True)]
        pids = layout["pid"][sel]
        labels = torch.searchsorted(torch.unique(pids), pids) if name == "train" else pids
        sets[name] = ImageSet(
            images=images[sel].contiguous(),
            labels=labels,
            attrs={k: v[sel] for k, v in attrs.items()},
            attr_names={"gender": list(GENDERS), "age": list(AGES)},
            cams=layout["cam"][sel],
        )
    info = {
        "generator_version": GENERATOR_VERSION,
        "options": dict(options),
        "images": {name: len(s) for name, s in sets.items()},
        "identities": {"train": (options["n_ids"] + 1) // 2, "test": options["n_ids"] // 2},
        "junk": int(junk.sum()),
        "distractors": int((kind >= 2).sum()),
        "seconds": round(time.perf_counter() - started, 2),
    }
    return sets, info


def render_all(people: Mapping[str, torch.Tensor], shots: Mapping[str, torch.Tensor], seed: int) -> torch.Tensor:
    """Renders every image, in batches of BATCH spread over worker threads.

    Each batch draws its noise from its own generator and every op runs single-threaded
    (the intra-op thread count is restored afterwards): the output does not depend on
    the number of threads, and small ops never wait on each other's thread barriers,
    which made multi-threaded rendering many times slower on a busy machine.

    Args:
        people: Appearance of the person of each image (fields of :func:`draw_people`).
        shots: How each image is taken (fields of :func:`draw_shots`).
        seed: Seed of the per-batch noise generators.

    Returns:
        uint8 images [N, 3, 128, 64].
    """
    n = shots["cam"].numel()
    images = torch.empty((n, 3, HEIGHT, WIDTH), dtype=torch.uint8)

    def work(start: int) -> None:
        stop = min(start + BATCH, n)
        noise = make_generator(seed, "synth_persons", "noise", start)
        images[start:stop] = render({k: v[start:stop] for k, v in people.items()},
                                    {k: v[start:stop] for k, v in shots.items()}, noise)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(max_workers=min(threads, MAX_WORKERS)) as pool:
            list(pool.map(work, range(0, n, BATCH)))
    finally:
        torch.set_num_threads(threads)
    return images


def _per_row(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return mask.view(-1, *([1] * (like.dim() - 1)))


def _resize(images: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    out = []
    for start in range(0, len(images), 1024):
        x = images[start:start + 1024].float()
        x = F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=False)
        out.append(x.round().clamp(0, 255).to(torch.uint8))
    return torch.cat(out)


def resolve_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Validates options and fills in defaults.

    Raises:
        BenchError: An unknown option or an invalid value.
    """
    check_options("synth_persons", options, tuple(DEFAULTS))
    out = {**DEFAULTS, **options}
    for key, low in (("n_ids", MIN_IDS), ("per_id", MIN_PER_ID), ("seed", 0)):
        value = out[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise BenchError(f"synth_persons: option {key} must be an int >= {low}, got {value!r}")
    for key in ("junk_frac", "distractor_frac"):
        value = out[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise BenchError(f"synth_persons: option {key} must be a number in [0, 1], got {value!r}")
        out[key] = float(value)
    if out["size"] is not None:
        out["size"] = list(person_size(out["size"], (HEIGHT, WIDTH)))
    return out


@register_dataset("synth_persons")
class SynthPersons(Dataset):
    """Procedural pedestrians seen by 6 cameras, split like Market-1501 (synthetic).

    Options:
        n_ids: Number of identities (default 500; at least 4); half train, half test.
        per_id: Images per identity (default 16; at least 4), spread over 2 to 6 cameras.
        seed: Generator seed (default 0).
        junk_frac: Junk images (pid -1) per gallery image of an identity (default 0.2).
        distractor_frac: Distractors (pid 0) per gallery image of an identity (default 0.15).
        size: Output (h, w) (default the rendered 128 x 64).
    """

    synthetic = True
    layout = "nothing: generated on the fly (synthetic pedestrians, no files needed)"
    description = "Synthetic pedestrians for reID: clothes, accessories, 6 cameras, gender/age attributes"

    def inspect(self, root: Path | None, options: Mapping[str, Any]) -> None:
        """Checks the options (the data is generated)."""
        resolve_options(options)

    def load(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> Splits:
        resolved = resolve_options(options)
        fp = fingerprint(self.name, GENERATOR_VERSION, sorted(resolved.items()))

        def build() -> dict[str, Any]:
            sets, info = generate(resolved)
            return to_payload(sets, info)

        payload, content = cached_splits(cache_dir, self.name, fp, build)
        return Splits(self.name, from_payload(payload), content, synthetic=True, info=payload["info"])

