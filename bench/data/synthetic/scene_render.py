"""Rendering of :mod:`bench.data.synthetic.synth_scenes`: backgrounds, textured objects, people and camera.

Everything works on a batch of ``n`` images at ``size`` pixels in [0, 1] floats. Coordinates
are normalised (-1 .. 1 across the image, pixel centres at ``(i + 0.5) * 2 / size - 1``)
except where a docstring says pixels. Object shapes are the signed distance functions of
:func:`bench.data.synthetic.synth_objects.shape_sdf`; heads are synth_faces' renderer
(:func:`bench.data.synthetic.synth_faces.render_heads`) on a sprite pasted at whole pixels (the
sub-pixel part of its position is rendered into the sprite), over a simple body.
"""

from __future__ import annotations

import math

import torch

from bench.data.synthetic import _exact as ex
from bench.data.synthetic import synth_faces
from bench.data.synthetic.synth_objects import CLASSES as SHAPES
from bench.data.synthetic.synth_objects import shape_sdf

TEXTURES = ("plain", "striped", "dotted", "checked", "ringed", "shaded")
BACKGROUNDS = ("outdoors", "indoors", "foliage", "water", "studio")
SHAPE_NAMES = {"stripes": "grille", "two_blobs": "twin blobs", "checker": "lattice"}
"""Display names of synth_objects' shape families where the family name reads as a texture."""
HUES = ("red", "orange", "yellow", "green", "teal", "blue", "purple", "pink")
_HUE_CENTRES = (0.0, 0.075, 0.15, 0.32, 0.47, 0.6, 0.75, 0.9)
BLOTCH_GRID = 6
"""Side of the grid of normal draws that makes each background's low-frequency blotches."""


def grid(size: int) -> torch.Tensor:
    """Normalised pixel-centre coordinates [size]."""
    return (torch.arange(size, dtype=torch.float32) + 0.5) * (2.0 / size) - 1.0


def hsv(h: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """HSV (each [n], hue in turns) -> RGB [n, 3]."""
    k = torch.tensor([5.0, 3.0, 1.0])
    t = torch.remainder(k + 6.0 * torch.remainder(h, 1.0).unsqueeze(1), 6.0)
    ramp = torch.minimum(torch.minimum(t, 4.0 - t), torch.ones(())).clamp(min=0.0)
    return v.unsqueeze(1) * (1.0 - s.unsqueeze(1) * ramp)


def hue_of(bin_: torch.Tensor) -> torch.Tensor:
    """Centre hue (turns) of colour bins [n]."""
    return torch.tensor(_HUE_CENTRES)[bin_]


def _b(t: torch.Tensor) -> torch.Tensor:
    return t.view(-1, 1, 1)


def _c(t: torch.Tensor) -> torch.Tensor:
    return t.view(-1, 3, 1, 1)


def background(kind: torch.Tensor, u: torch.Tensor, z: torch.Tensor, size: int) -> torch.Tensor:
    """Renders each image's backdrop of its class's kind (:data:`BACKGROUNDS`).

    Args:
        kind: int64 [n] background kinds.
        u: [n, 12] uniform draws (colours, horizon, corner, wave frequency, ...).
        z: [n, 3 * BLOTCH_GRID ** 2] normal draws of the low-frequency blotches.
        size: Image side.

    Returns:
        [n, 3, size, size].
    """
    n = len(kind)
    xs = grid(size)
    x, y = xs.view(1, 1, -1), xs.view(1, -1, 1)
    out = torch.empty(n, 3, size, size)
    blotch = ex.resize_bilinear(z.view(n, 3, BLOTCH_GRID, BLOTCH_GRID), (size, size))
    for k, name in enumerate(BACKGROUNDS):
        idx = (kind == k).nonzero().flatten()
        if not len(idx):
            continue
        v = u[idx]

        def col(h: float, dh: float, s: float, ds: float, val: float, dv: float, a: int) -> torch.Tensor:
            return hsv(h + dh * (2 * v[:, a] - 1), s + ds * (2 * v[:, a + 1] - 1), val + dv * (2 * v[:, a + 2] - 1))

        if name == "outdoors":
            sky, ground = col(0.57, 0.04, 0.35, 0.15, 0.9, 0.08, 0), col(0.2, 0.12, 0.5, 0.15, 0.45, 0.12, 3)
            horizon = _b(-0.3 + 0.6 * v[:, 6])
            t_sky = ((y + 1) / (horizon + 1)).clamp(0, 1)
            sky_img = _c(sky) * (0.8 + 0.2 * t_sky).unsqueeze(1)
            ground_img = _c(ground) * (1.0 - 0.25 * (y - horizon).clamp(min=0)).unsqueeze(1)
            edge = (0.5 + (y - horizon) * size / 2).clamp(0, 1).unsqueeze(1).expand(-1, 1, size, size)
            img = sky_img + (ground_img - sky_img) * edge + 0.12 * blotch[idx] * edge
        elif name == "indoors":
            wall, floor = col(0.1, 0.05, 0.2, 0.12, 0.75, 0.12, 0), col(0.07, 0.03, 0.55, 0.15, 0.42, 0.12, 3)
            horizon = _b(0.2 + 0.45 * v[:, 6])
            corner = _b(-0.7 + 1.4 * v[:, 7])
            side = torch.where(x < corner, 0.82 + 0.1 * _b(v[:, 8]), torch.ones(()))
            wall_img = _c(wall) * side.expand(-1, size, -1).unsqueeze(1)
            planks = 0.9 + 0.1 * torch.sign(ex.sin((y - horizon) * (18 + 10 * _b(v[:, 9])) / (y - horizon + 0.3)))
            floor_img = _c(floor) * planks.expand(-1, -1, size).unsqueeze(1)
            edge = (0.5 + (y - horizon) * size / 2).clamp(0, 1).unsqueeze(1).expand(-1, 1, size, size)
            img = wall_img + (floor_img - wall_img) * edge + 0.05 * blotch[idx]
        elif name == "foliage":
            green = col(0.3, 0.06, 0.6, 0.15, 0.45, 0.12, 0)
            leaves = ex.sin(x * (20 + 8 * _b(v[:, 6])) + 3 * ex.sin(y * 11))
            leaves = leaves * ex.sin(y * (17 + 8 * _b(v[:, 7])))
            img = _c(green) * (1 + 0.18 * leaves).unsqueeze(1) + 0.2 * blotch[idx] * _c(green)
        elif name == "water":
            blue = col(0.55, 0.05, 0.6, 0.15, 0.55, 0.15, 0)
            freq = 14 + 14 * _b(v[:, 6])
            waves = ex.sin(y * freq + 2.5 * ex.sin(x * (3 + 4 * _b(v[:, 7])) + 6.28 * _b(v[:, 8])))
            img = _c(blue) * (1 + 0.2 * waves + 0.15 * y).unsqueeze(1) + 0.06 * blotch[idx]
        else:  # studio
            grey = col(0.6, 0.5, 0.06, 0.05, 0.55, 0.3, 0)
            angle = 6.283 * _b(v[:, 6])
            sin_a, cos_a = ex.sincos(angle)
            ramp = cos_a * x + sin_a * y
            vignette = 1 - 0.25 * (x * x + y * y)
            img = _c(grey) * (vignette * (1 + 0.15 * ramp)).unsqueeze(1) + 0.03 * blotch[idx]
        out[idx] = img
    return out


def texture(kind: torch.Tensor, x: torch.Tensor, y: torch.Tensor, freq: torch.Tensor, angle: torch.Tensor,
            phase: torch.Tensor) -> torch.Tensor:
    """Returns the weight of the second colour [m, H, W] of each image's texture.

    Args:
        kind: int64 [m] texture kinds (:data:`TEXTURES`).
        x: Object-frame coordinates [m, H, W] (the object spans about -1 .. 1).
        y: Object-frame coordinates [m, H, W].
        freq: [m] spatial frequency (radians per object unit).
        angle: [m] orientation of stripes and gradients.
        phase: [m] offset in [0, 1).
    """
    out = torch.zeros_like(x)
    sharp = 3.0
    for k, name in enumerate(TEXTURES):
        rows = (kind == k).nonzero().flatten()
        if not len(rows) or name == "plain":
            continue
        xs, ys = x[rows], y[rows]  # each texture is computed on its own images only
        f, a, ph = _b(freq[rows]), _b(angle[rows]), _b(phase[rows]) * 2 * math.pi
        sin_a, cos_a = ex.sincos(a)
        along = cos_a * xs + sin_a * ys
        across = cos_a * ys - sin_a * xs
        if name == "striped":
            t = (0.5 + sharp * ex.sin(f * along + ph)).clamp(0, 1)
        elif name == "dotted":
            t = (0.5 + sharp * (ex.cos(f * along + ph) * ex.cos(f * across + ph) - 0.4) * 2).clamp(0, 1)
        elif name == "checked":
            t = (0.5 + sharp * ex.sin(f * along + ph) * ex.sin(f * across + ph)).clamp(0, 1)
        elif name == "ringed":
            t = (0.5 + sharp * ex.sin(f * ex.sqrt(xs * xs + ys * ys) + ph)).clamp(0, 1)
        else:  # shaded: a two-colour gradient across the object
            t = (0.5 + 0.6 * along).clamp(0, 1)
        out[rows] = t
    return out


def paint_objects(img: torch.Tensor, family: torch.Tensor, tex: torch.Tensor, cx: torch.Tensor, cy: torch.Tensor,
                  scale: torch.Tensor, rot: torch.Tensor, aspect: torch.Tensor, colour: torch.Tensor,
                  colour2: torch.Tensor, freq: torch.Tensor, angle: torch.Tensor,
                  phase: torch.Tensor) -> torch.Tensor:
    """Composites one textured, lit object per image over ``img`` in place; returns its coverage [n, H, W].

    Args:
        img: [n, 3, H, W] images.
        family: int64 [n] shape family (index into synth_objects' classes).
        tex: int64 [n] texture kind.
        cx: [n] centre (normalised coordinates).
        cy: [n] centre.
        scale: [n] half-extent of the object's unit square (normalised).
        rot: [n] rotation (radians).
        aspect: [n] width / height stretch.
        colour: [n, 3] main colour.
        colour2: [n, 3] texture colour.
        freq: [n] texture frequency.
        angle: [n] texture angle.
        phase: [n] texture phase.
    """
    n, size = img.shape[0], img.shape[-1]
    xs = grid(size)
    pixel = 2.0 / size
    coverage = torch.zeros(n, size, size)
    for f in range(len(SHAPES)):
        idx = (family == f).nonzero().flatten()
        if not len(idx):
            continue
        dx, dy = xs.view(1, 1, -1) - _b(cx[idx]), xs.view(1, -1, 1) - _b(cy[idx])
        s, c = (_b(t) for t in ex.sincos(rot[idx]))
        sc, a = _b(scale[idx]), _b(aspect[idx])
        x = (c * dx + s * dy) / (sc * a)
        y = (c * dy - s * dx) * a / sc
        sd, pattern = shape_sdf(f, x, y, _b(phase[idx]))
        if pattern is not None:  # synth_objects' checker: its squares cut out of the tile, a lattice
            sd = torch.maximum(sd, 0.1 * (0.5 - pattern))
        alpha = (0.5 - sd * sc / pixel).clamp(0, 1)
        t = texture(tex[idx], x, y, freq[idx], angle[idx], phase[idx]).unsqueeze(1)
        col = _c(colour[idx]) + (_c(colour2[idx]) - _c(colour[idx])) * t
        light = (1.08 - 0.18 * (dx * 0.6 + dy) / sc).clamp(0.75, 1.2)  # lit from the upper left
        col = col * light.unsqueeze(1)
        img[idx] = img[idx] + (col - img[idx]) * alpha.unsqueeze(1)
        coverage[idx] = alpha
    return coverage


def mask_box(mask: torch.Tensor) -> torch.Tensor:
    """Tight (x1, y1, x2, y2) pixel box of each boolean mask [n, H, W] (zeros when empty): float32 [n, 4]."""
    rows, cols = mask.any(2), mask.any(1)
    h, w = mask.shape[1:]

    def span(v: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        first = v.to(torch.uint8).argmax(1)
        last = length - v.flip(1).to(torch.uint8).argmax(1)
        empty = ~v.any(1)
        return torch.where(empty, 0, first), torch.where(empty, 0, last)

    x1, x2 = span(cols, w)
    y1, y2 = span(rows, h)
    return torch.stack([x1, y1, x2, y2], 1).float()


def sprite_side(size: int, max_face: float) -> int:
    """Side of the head sprites (even): room for long hair below the largest face and a bun above."""
    side = int(math.ceil(3.2 * max_face))
    return side + side % 2


def place_heads(params: dict[str, torch.Tensor], centre: torch.Tensor, width: torch.Tensor, sprite: int,
                size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sets ``tx``, ``ty`` and ``scale`` of faces so each face box is ``width`` px wide and centred near ``centre``.

    Centres are moved just enough for the whole face box to lie at least a pixel inside the image.

    Args:
        params: Face parameters (changed in place: ``tx``, ``ty``, ``scale``).
        centre: [m, 2] wanted scene pixel coordinates of the face-box centres.
        width: [m] face-box widths in pixels.
        sprite: Sprite side.
        size: Image side.

    Returns:
        Integer sprite origins [m, 2] (scene pixels of the sprite's top-left corner) and the
        face boxes [m, 4] in scene pixels.
    """
    m = len(width)
    params["tx"], params["ty"], params["scale"] = torch.zeros(m), torch.zeros(m), torch.ones(m)
    unit = synth_faces.face_boxes(params, sprite).double()
    cx0, cy0 = (unit[:, 0] + unit[:, 2]) / 2, (unit[:, 1] + unit[:, 3]) / 2
    w0, h0 = unit[:, 2] - unit[:, 0], unit[:, 3] - unit[:, 1]
    k = width.double() / w0
    half_w, half_h = width.double() / 2, k * h0 / 2
    want_x = torch.minimum(torch.maximum(centre[:, 0].double(), half_w + 1), size - 1 - half_w)
    want_y = torch.minimum(torch.maximum(centre[:, 1].double(), half_h + 1), size - 1 - half_h)
    # with scale k the box centre sits at sprite/2 + k (c0 - sprite/2) + t sprite/2: t takes the rest
    ox, oy = torch.floor(want_x - sprite / 2), torch.floor(want_y - sprite / 2)
    frac_x = want_x - ox - (sprite / 2 + k * (cx0 - sprite / 2))
    frac_y = want_y - oy - (sprite / 2 + k * (cy0 - sprite / 2))
    params["scale"] = k.float()
    params["tx"] = (frac_x / (sprite / 2)).float()
    params["ty"] = (frac_y / (sprite / 2)).float()
    origin = torch.stack([ox, oy], 1)
    boxes = synth_faces.face_boxes(params, sprite).double() + origin.repeat(1, 2)
    return origin.long(), boxes.float()


def paint_bodies(img: torch.Tensor, rows: torch.Tensor, centre: torch.Tensor, unit: torch.Tensor,
                 build: torch.Tensor, clothes: torch.Tensor) -> None:
    """Paints a torso with arms under each head, in place.

    Args:
        img: [n, 3, H, W] images.
        rows: int64 [m] the image of each person.
        centre: [m, 2] face-centre pixels.
        unit: [m] pixels per face unit (the face half-width is about 1).
        build: [m] in [0, 1]: narrow to broad.
        clothes: [m, 3] clothing colour.
    """
    size = img.shape[-1]
    px = torch.arange(size, dtype=torch.float32) + 0.5
    x = px.view(1, 1, -1) - _b(centre[:, 0])
    y = px.view(1, -1, 1) - _b(centre[:, 1])
    u = _b(unit)
    top = 1.45 * u
    half = (1.6 + 0.5 * _b(build)) * u
    radius = 0.9 * u
    depth = float(size) * 2

    def rounded_box(cx: torch.Tensor, hw: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        qx = (x - cx).abs() - (hw - r)
        qy = (y - top - depth).abs() - (depth - r)
        outside = ex.sqrt(qx.clamp(min=0) ** 2 + qy.clamp(min=0) ** 2)
        return outside + torch.maximum(qx, qy).clamp(max=0) - r

    def paint(sd: torch.Tensor, colour: torch.Tensor) -> None:
        alpha = (0.5 - sd).clamp(0, 1).unsqueeze(1)
        img[rows] = img[rows] + (colour - img[rows]) * alpha

    arm = 0.42 * u
    for side in (-1.0, 1.0):
        sd = rounded_box(side * (half - 0.15 * u), arm, arm * 0.9)
        paint(sd, _c(clothes * 0.72))
    shade = (1 - 0.22 * (x / half).abs().clamp(max=1)).unsqueeze(1)
    paint(rounded_box(torch.zeros(()), half - 0.4 * u, radius), _c(clothes) * shade)


def paste_heads(img: torch.Tensor, rows: torch.Tensor, origin: torch.Tensor, rgb: torch.Tensor,
                alpha: torch.Tensor) -> None:
    """Composites premultiplied head sprites [m, 3, s, s] at integer origins [m, 2] (x, y) onto images, in place."""
    size, side = img.shape[-1], rgb.shape[-1]
    for j in range(len(rows)):
        ox, oy = int(origin[j, 0]), int(origin[j, 1])
        x0, y0, x1, y1 = max(ox, 0), max(oy, 0), min(ox + side, size), min(oy + side, size)
        if x0 >= x1 or y0 >= y1:
            continue
        region = img[int(rows[j]), :, y0:y1, x0:x1]
        a = alpha[j, :, y0 - oy : y1 - oy, x0 - ox : x1 - ox]
        region.mul_(1 - a).add_(rgb[j, :, y0 - oy : y1 - oy, x0 - ox : x1 - ox])


def camera(img: torch.Tensor, angle: torch.Tensor, amount: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Applies a lighting gradient and adds sensor noise; returns uint8 images.

    Args:
        img: [n, 3, H, W] float images.
        angle: [n] direction of the lighting gradient.
        amount: [n] its strength.
        noise: [n, 3, H, W] standard normal noise, scaled here by 0.02.
    """
    xs = grid(img.shape[-1])
    sin_a, cos_a = ex.sincos(angle)
    along = _b(cos_a) * xs.view(1, 1, -1) + _b(sin_a) * xs.view(1, -1, 1)
    img = img * (1 + _b(amount) * along).unsqueeze(1) + 0.02 * noise
    return ex.to_uint8(img)


def union_area(boxes: torch.Tensor, present: torch.Tensor, clip: torch.Tensor) -> torch.Tensor:
    """Area of the union of up to three boxes per image inside a clip box (inclusion-exclusion).

    Args:
        boxes: [n, k, 4] (x1, y1, x2, y2), k <= 3.
        present: [n, k] bool.
        clip: [n, 4] the region counted.

    Returns:
        float64 [n].
    """
    b = boxes.double()
    c = clip.double().unsqueeze(1)
    lo = torch.maximum(b[..., :2], c[..., :2])
    hi = torch.minimum(b[..., 2:], c[..., 2:])
    hi = torch.where(present.unsqueeze(-1), hi, lo)  # an absent box is empty
    k = boxes.shape[1]
    total = torch.zeros(len(boxes), dtype=torch.float64)
    for r in range(1, k + 1):
        sign = 1.0 if r % 2 else -1.0
        for combo in _combinations(k, r):
            l = lo[:, combo].amax(1)
            h = hi[:, combo].amin(1)
            total += sign * (h - l).clamp(min=0).prod(-1)
    return total


def _combinations(k: int, r: int) -> list[list[int]]:
    from itertools import combinations

    return [list(c) for c in combinations(range(k), r)]
