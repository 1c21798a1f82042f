"""Synthetic pedestrians, part 2: the renderer that paints people from their draws."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping

import torch

from bench.data.synthetic import _exact as ex
from bench.data.synthetic._person_draw import (
    BACK,
    BACKPACK,
    BAG,
    CAM_ACCENT,
    CAM_BLUR,
    CAM_CONTRAST,
    CAM_GAIN,
    CAM_GROUND,
    CAM_LIGHT,
    CAM_NOISE,
    CAM_WALL,
    CHECKS,
    DARK,
    FRONT,
    HAIR,
    HAT,
    HEIGHT,
    LOGO,
    LOWER,
    NUM_PARTS,
    SHOES,
    SHORTS,
    SIDE,
    SKIN,
    SKIRT,
    STRIPES,
    SUPERSAMPLE,
    TROUSERS,
    UPPER,
    UPPER2,
    WIDTH,
)
from bench.randomness.seeding import make_generator

BATCH = 32
MAX_WORKERS = 8


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
    img = img + CAM_BLUR[cams].view(b, 1, 1, 1) * (_box3(img) - img)
    img = img + CAM_NOISE[cams].view(b, 1, 1, 1) * ex.normal(img.shape, gen)
    return ex.to_uint8(img)


def _box3(img: torch.Tensor) -> torch.Tensor:
    """3 x 3 box filter with replicated borders (columns summed left to right, then rows top to bottom)."""
    x = torch.cat([img[..., :1], img, img[..., -1:]], -1)
    x = x[..., :-2] + x[..., 1:-1] + x[..., 2:]
    x = torch.cat([x[..., :1, :], x, x[..., -1:, :]], -2)
    return (x[..., :-2, :] + x[..., 1:-1, :] + x[..., 2:, :]) / 9.0


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
        """Sets the part of the pixels inside ``mask`` (0 or 1: ``lerp`` then gives either end exactly)."""
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
        grey = (p[:, 4:5] + p[:, 5:6] + p[:, 6:7]) / 3.0
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


