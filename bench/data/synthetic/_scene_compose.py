"""Composes one chunk of synth_scenes images from its per-image draws: people, faces, object, layers and boxes."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from bench.data.synthetic import _exact as ex
from bench.data.synthetic import scene_render as sr
from bench.data.synthetic import synth_faces
from bench.data.synthetic._face_identity import sample_nuisances
from bench.data.synthetic._face_render import render_heads
from bench.randomness.seeding import make_generator

MAX_PEOPLE = 3
_FRONT = 0.35
_FACE_WIDTH = {1: (30.0, 44.0), 2: (27.0, 38.0), 3: (25.0, 33.0)}
"""Face-box widths (pixels at 128 px) by the number of people in the image."""

# Columns of each image's uniform draws; the normal draws are jitters (_Z_*) and the blotch grid.
_U = dict(on=0, count=1, near=2, cx=3, cy=4, phase=5, sat=6, val=7, light=8, light_amp=9, ids=10)
_U_SLOT = 13  # then MAX_PEOPLE x 5: width, x, y, front, build
_U_BG = _U_SLOT + 5 * MAX_PEOPLE  # 12 background draws
N_UNIFORM = _U_BG + 12
_Z = dict(hue=0, scale=1, rot=2, aspect=3, freq=4, angle=5)
_Z_BLOTCH = 6
N_NORMAL = _Z_BLOTCH + 3 * sr.BLOTCH_GRID**2


def _distinct_ids(u: torch.Tensor, n: int) -> torch.Tensor:
    """Maps uniforms [m, 3] to three distinct identities in [0, n) per row (sequential sampling without replacement)."""
    r = [(u[:, j].double() * (n - j)).floor().long().clamp(max=n - j - 1) for j in range(MAX_PEOPLE)]
    a = r[0]
    b = r[1] + (r[1] >= a).long()
    lo, hi = torch.minimum(a, b), torch.maximum(a, b)
    c = r[2] + (r[2] >= lo).long()
    c = c + (c >= hi).long()
    return torch.stack([a, b, c], 1)


def render_chunk(seed: int, split: str, index: int, labels: torch.Tensor, u: torch.Tensor, z: torch.Tensor,
                 size: int, design: Mapping[str, Any], ident: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """Renders one chunk of images (always the same images for a given chunk index)."""
    n, scale_px = len(labels), size / 128.0
    d = {k: v[labels] for k, v in design.items() if isinstance(v, torch.Tensor)}
    # --- people: how many, how big, where, in front or behind, who
    one, two = d["crowd"][:, 0], d["crowd"][:, 0] + d["crowd"][:, 1]  # cumulative probabilities of 1, 2 people
    count = 1 + (u[:, _U["count"]] > one).long() + (u[:, _U["count"]] > two).long()
    count = torch.where(u[:, _U["on"]] < d["person_rate"], count, 0)
    slots = torch.arange(MAX_PEOPLE)
    present = slots.view(1, -1) < count.view(-1, 1)
    us = u[:, _U_SLOT : _U_SLOT + 5 * MAX_PEOPLE].view(n, MAX_PEOPLE, 5)
    lo = torch.tensor([0.0] + [_FACE_WIDTH[k][0] for k in (1, 2, 3)])[count] * scale_px
    hi = torch.tensor([0.0] + [_FACE_WIDTH[k][1] for k in (1, 2, 3)])[count] * scale_px
    width = lo.view(-1, 1) + (hi - lo).view(-1, 1) * us[..., 0]
    lanes = count.clamp(min=1).float().view(-1, 1)
    spread = torch.where(lanes == 1, 0.25, 0.07 / lanes)
    cx = size * ((slots.view(1, -1) + 0.5) / lanes + spread * (2 * us[..., 1] - 1))
    cy = size * (0.3 + 0.25 * us[..., 2])
    front = us[..., 3] < _FRONT
    build = us[..., 4]
    identity = _distinct_ids(u[:, _U["ids"] : _U["ids"] + MAX_PEOPLE], len(ident["male"]))
    order = torch.argsort(torch.where(present, width, -1.0), dim=1, descending=True, stable=True)
    width, cx, cy, front, build, identity = (t.gather(1, order) for t in (width, cx, cy, front, build, identity))
    near = (u[:, _U["near"]] < d["near_face"]) & (count > 0)
    front[:, 0] &= ~near  # the face an object is held at is behind it
    # --- faces: parameters, placement and head sprites
    rows, slot = present.nonzero(as_tuple=True)
    ids = identity[rows, slot]
    nuis = sample_nuisances(ids, dict(ident), 1.0, make_generator(seed, "synth_scenes", split, "faces", index))
    params = synth_faces.gather_faces(dict(ident), nuis, ids)
    params["occluder"] = torch.zeros(len(ids))
    sprite = sr.sprite_side(size, _FACE_WIDTH[1][1] * scale_px)
    centre = torch.stack([cx[rows, slot], cy[rows, slot]], 1)
    origin, boxes = sr.place_heads(params, centre, width[rows, slot], sprite, size)
    heads_rgb, heads_alpha = render_heads(params, sprite) if len(ids) else (None, None)
    face_centre = (boxes[:, :2] + boxes[:, 2:]) / 2
    unit = params["scale"] * (0.55 * sprite / 2)
    face_boxes = torch.zeros(n, MAX_PEOPLE, 4)
    face_boxes[rows, slot] = boxes
    # --- object
    m = _U
    hue = sr.hue_of(d["hue"]) + d["hue_offset"] + 0.02 * z[:, _Z["hue"]]
    sat = (d["sat"] + 0.1 * (2 * u[:, m["sat"]] - 1)).clamp(0.3, 1)
    val = (d["val"] + 0.1 * (2 * u[:, m["val"]] - 1)).clamp(0.3, 1)
    colour = sr.hsv(hue, sat, val)
    second = d["second"]
    colour2 = torch.where((second == 0).view(-1, 1), sr.hsv(hue + 0.5, sat, val),
                          torch.where((second == 1).view(-1, 1), sr.hsv(hue, sat, 0.3 * val),
                                      sr.hsv(hue, 0.15 * sat, torch.full_like(val, 0.95))))
    ocx = 0.45 * (2 * u[:, m["cx"]] - 1)
    ocy = 0.45 * (2 * u[:, m["cy"]] - 1)
    oscale = d["scale"] * ex.exp((0.12 * z[:, _Z["scale"]]).clamp(-0.3, 0.3))
    held = near.nonzero().flatten()
    if len(held):
        first = face_boxes[held, 0]
        ocx[held] = (first[:, 0] + first[:, 2]) / size - 1
        ocy[held] = (first[:, 1] + first[:, 3]) / size - 1 + 0.35 * (first[:, 3] - first[:, 1]) * 2 / size
        oscale[held] = 1.1 * width[held, 0] / size
    rot = d["rot"] + (0.3 * z[:, _Z["rot"]]).clamp(-0.8, 0.8)
    aspect = d["aspect"] * ex.exp((0.1 * z[:, _Z["aspect"]]).clamp(-0.25, 0.25))
    freq = d["freq"] * ex.exp((0.08 * z[:, _Z["freq"]]).clamp(-0.2, 0.2))
    angle = d["angle"] + 0.15 * z[:, _Z["angle"]]
    # --- layers: background, people behind, object, people in front, camera
    img = sr.background(d["background"], u[:, _U_BG : _U_BG + 12], z[:, _Z_BLOTCH:], size)
    person_front = front[rows, slot]
    clothes = nuis["clothes"]

    def people(select: torch.Tensor) -> None:
        for j in range(MAX_PEOPLE):  # a slot at a time: an image appears at most once in an indexed write
            k = (select & (slot == j)).nonzero().flatten()
            if len(k):
                sr.paint_bodies(img, rows[k], face_centre[k], unit[k], build[rows[k], j], clothes[k])
        k = select.nonzero().flatten()
        if len(k):
            sr.paste_heads(img, rows[k], origin[k], heads_rgb[k], heads_alpha[k])

    people(~person_front)
    coverage = sr.paint_objects(img, d["family"], d["texture"], ocx, ocy, oscale, rot, aspect, colour, colour2,
                                freq, angle, u[:, m["phase"]])
    people(person_front)
    noise = ex.normal(img.shape, make_generator(seed, "synth_scenes", split, "noise", index))
    images = sr.camera(img, 6.2832 * u[:, m["light"]], 0.25 * u[:, m["light_amp"]], noise)
    # --- boxes and fractions
    object_boxes = sr.mask_box(coverage >= 0.5)
    obj_area = ((object_boxes[:, 2] - object_boxes[:, 0]) * (object_boxes[:, 3] - object_boxes[:, 1])).double()
    covered = sr.union_area(face_boxes, present, object_boxes)
    fraction = torch.where(obj_area > 0, covered / obj_area.clamp(min=1e-9), 0.0).clamp(0, 1)
    whole = torch.tensor([0.0, 0.0, size, size]).expand(n, 4)
    image_fraction = sr.union_area(face_boxes, present, whole) / (size * size)
    glasses = torch.full((n, MAX_PEOPLE), -1, dtype=torch.int64)
    glasses[rows, slot] = nuis["glasses"].long()
    return {
        "images": images,
        "present": present,
        "face_boxes": face_boxes,
        "identity": torch.where(present, identity, -1),
        "glasses": glasses,
        "object_boxes": object_boxes,
        "face_fraction": fraction.float(),
        "image_face_fraction": image_fraction.float(),
    }
