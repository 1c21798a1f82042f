"""Synthetic pedestrians, part 1: who the people are and how each camera shoots them.

Identities are draws of clothing, build, hair and accessories (:func:`draw_people`);
every shot adds a camera's viewpoint, scale and framing (:func:`draw_shots`,
:func:`junk_framing`). The part indices and palettes here are what the renderer paints.
"""

from __future__ import annotations

import torch

from bench.data.synthetic import _exact as ex

HEIGHT, WIDTH = 128, 64
SUPERSAMPLE = 2

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
    return ex.categorical(probs, gen, n)


def _bernoulli(p: torch.Tensor | float, n: int, gen: torch.Generator) -> torch.Tensor:
    return torch.rand(n, generator=gen, dtype=torch.float64) < torch.as_tensor(p, dtype=torch.float64)


def _uniform(lo: float, hi: float, n: int, gen: torch.Generator) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(n, generator=gen)


def _jitter(colours: torch.Tensor, amount: float, gen: torch.Generator) -> torch.Tensor:
    return (colours + amount * ex.normal(colours.shape, gen)).clamp(0.0, 1.0)


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

    build = torch.where(female, 0.90, 1.0) + 0.07 * ex.normal(n, gen)
    build = torch.where(child, build * 0.92, build).clamp(0.75, 1.25)
    head = torch.where(child, 0.082, torch.where(teen, 0.069, 0.064)) * (1 + 0.05 * ex.normal(n, gen))
    torso = torch.where(child, 0.27, 0.31) + 0.015 * ex.normal(n, gen)

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
        "cx": 0.25 + 0.012 * ex.normal(n, gen),
        "swing": _uniform(-0.07, 0.07, n, gen),
        "stride": _uniform(0.0, 0.085, n, gen),
        "present": torch.ones(n, dtype=torch.bool),
        "bg_offset": torch.rand(n, generator=gen),
        "bg_period": _uniform(3.0, 7.0, n, gen),
        "horizon": CAM_HORIZON[cams] + 0.04 * ex.normal(n, gen),
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

