"""Synthetic faces, part 1: who a face is and how one photo of it varies.

Identities are fixed draws of geometry, colouring, hair, facial hair and marks
(:func:`sample_identities`); every image adds nuisances whose sizes scale with the
dataset's ``variation`` (:func:`sample_nuisances`). Geometry is in face units (see
:mod:`bench.data.synthetic.synth_faces`).
"""

from __future__ import annotations

import math

import torch

from bench.data.synthetic import _exact as ex

_SKIN = torch.tensor([[0.97, 0.84, 0.75], [0.88, 0.69, 0.56], [0.68, 0.47, 0.33], [0.40, 0.26, 0.18]])
_IRIS = torch.tensor(
    [
        [0.17, 0.09, 0.05], [0.33, 0.19, 0.09], [0.45, 0.35, 0.15],
        [0.30, 0.45, 0.25], [0.30, 0.47, 0.68], [0.47, 0.52, 0.56],
    ]
)
_IRIS_LIGHT = [0.18, 0.2, 0.15, 0.12, 0.25, 0.1]
_IRIS_DARK = [0.75, 0.22, 0.03, 0.0, 0.0, 0.0]
_HAIR = torch.tensor(
    [
        [0.06, 0.05, 0.05], [0.17, 0.10, 0.06], [0.32, 0.20, 0.11], [0.50, 0.36, 0.22],
        [0.66, 0.52, 0.32], [0.86, 0.73, 0.49], [0.50, 0.20, 0.09], [0.72, 0.36, 0.14],
    ]
)
_HAIR_LIGHT = [0.08, 0.18, 0.2, 0.14, 0.12, 0.13, 0.08, 0.07]
_HAIR_DARK = [0.78, 0.18, 0.04, 0.0, 0.0, 0.0, 0.0, 0.0]
_FRAMES = torch.tensor([[0.05, 0.05, 0.06], [0.35, 0.2, 0.1], [0.75, 0.65, 0.4], [0.55, 0.1, 0.12], [0.6, 0.62, 0.66]])

# Hair styles: vol, alpha, horseshoe edge, bangs, side locks, back length, flare, curl, bun radius, side part.
_STYLES = torch.tensor(
    [
        [0.03, 1.00, 0.70, 0, 0, 0.0, 0.00, 0.00, -1.00, 0],  # bald (side fringe)
        [0.00, 0.55, -9.0, 0, 0, 0.0, 0.00, 0.00, -1.00, 0],  # buzz cut
        [0.05, 1.00, -9.0, 0, 0, 0.0, 0.00, 0.00, -1.00, 0],  # short
        [0.07, 1.00, -9.0, 0, 0, 0.0, 0.00, 0.00, -1.00, 1],  # side parting
        [0.15, 1.00, -9.0, 0, 0, 0.0, 0.00, 0.00, -1.00, 1],  # volume / quiff
        [0.09, 1.00, -9.0, 0, 1, 0.95, 0.10, 0.00, -1.00, 0],  # bob
        [0.06, 1.00, -9.0, 0, 1, 2.0, 0.18, 0.00, -1.00, 1],  # long
        [0.06, 1.00, -9.0, 1, 1, 2.0, 0.18, 0.00, -1.00, 0],  # long with bangs
        [0.06, 1.00, -9.0, 1, 0, 0.0, 0.00, 0.00, -1.00, 0],  # short with bangs
        [0.20, 1.00, -9.0, 0, 0, 0.0, 0.00, 0.05, -1.00, 0],  # curly
        [0.02, 1.00, -9.0, 0, 0, 0.0, 0.00, 0.00, 0.30, 0],  # bun
    ]
)
_STYLE_MALE = [0.08, 0.18, 0.24, 0.2, 0.1, 0.02, 0.04, 0.0, 0.05, 0.08, 0.01]
_STYLE_FEMALE = [0.0, 0.01, 0.04, 0.06, 0.02, 0.18, 0.3, 0.14, 0.06, 0.09, 0.1]
# Facial hair (men): stubble, full beard, moustache, goatee alphas for none/stubble/moustache/goatee/full.
_BEARDS = torch.tensor(
    [[0, 0, 0, 0], [0.2, 0, 0, 0], [0.08, 0, 0.9, 0], [0.08, 0, 0.9, 0.9], [0.15, 0.9, 0.9, 0]], dtype=torch.float32
)
_BEARD_MALE = [0.5, 0.25, 0.08, 0.07, 0.1]


class _Draw:
    """Sequential draws of n values from one generator."""

    def __init__(self, n: int, generator: torch.Generator):
        self.n, self.g = n, generator

    def uniform(self, lo: float = 0.0, hi: float = 1.0, cols: int | None = None) -> torch.Tensor:
        shape = (self.n,) if cols is None else (self.n, cols)
        return lo + (hi - lo) * torch.rand(shape, generator=self.g)

    def normal(self, cols: int | None = None) -> torch.Tensor:
        shape = (self.n,) if cols is None else (self.n, cols)
        return ex.normal(shape, self.g)

    def gauss(self, mean: float, std: float, lo: float, hi: float) -> torch.Tensor:
        return (mean + std * self.normal()).clamp(lo, hi)

    def choice(self, probs: torch.Tensor) -> torch.Tensor:
        return ex.categorical(probs, self.g)


def _mix_probs(light: list[float], dark: list[float], tone: torch.Tensor) -> torch.Tensor:
    t = tone.clamp(0, 1).unsqueeze(1)
    return (1 - t) * torch.tensor(light) + t * torch.tensor(dark) + 1e-6


def _palette(colours: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    pos = t.clamp(0, 1) * (len(colours) - 1)
    i = pos.floor().long().clamp(max=len(colours) - 2)
    frac = (pos - i).unsqueeze(1)
    return colours[i] * (1 - frac) + colours[i + 1] * frac


def sample_identities(n: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Draws the fixed parameters of ``n`` identities (geometry in face units).

    Returns:
        Name -> tensor [n] (scalars) or [n, 3] (colours).
    """
    d = _Draw(n, generator)
    male = (d.uniform() < 0.5).float()
    age = d.choice(torch.tensor([0.45, 0.35, 0.20]).expand(n, 3)).float()
    tone = d.uniform()
    p: dict[str, torch.Tensor] = {"male": male, "age": age, "tone": tone}
    p["tone_group"] = (tone * 4).floor().clamp(max=3)
    p["skin"] = (_palette(_SKIN, tone) + 0.025 * d.normal(3)).clamp(0.05, 1)
    p["fw"] = d.gauss(1.0, 0.06, 0.86, 1.14) + 0.03 * male
    p["fh"] = d.gauss(1.0, 0.05, 0.88, 1.12) + 0.02 * male
    p["jaw"] = d.uniform(0.0, 0.45) + 0.35 * male
    p["taper"] = d.uniform(0.08, 0.35) - 0.08 * male
    p["fore"] = d.uniform(0.86, 1.0)
    p["eye_x"] = d.gauss(0.40, 0.035, 0.32, 0.48)
    p["eye_y"] = d.gauss(-0.10, 0.045, -0.22, 0.02)
    p["eye_w"] = d.gauss(0.16, 0.018, 0.11, 0.21)
    p["eye_h"] = d.gauss(0.07, 0.012, 0.045, 0.1)
    p["eye_tilt"] = d.gauss(0.05, 0.08, -0.15, 0.25)
    p["iris"] = _IRIS[d.choice(_mix_probs(_IRIS_LIGHT, _IRIS_DARK, tone))]
    p["brow_gap"] = d.gauss(0.17, 0.03, 0.1, 0.26)
    p["brow_th"] = d.gauss(0.045, 0.012, 0.025, 0.075) + 0.012 * male
    p["brow_len"] = d.gauss(0.2, 0.025, 0.14, 0.27)
    p["brow_arch"] = d.gauss(0.035, 0.022, -0.015, 0.09)
    p["brow_tilt"] = d.gauss(0.0, 0.08, -0.2, 0.2)
    p["nose_y"] = d.gauss(0.30, 0.05, 0.18, 0.42)
    p["nose_w"] = d.gauss(0.12, 0.022, 0.08, 0.17) + 0.015 * male
    p["mouth_y"] = p["nose_y"] + d.gauss(0.30, 0.04, 0.2, 0.4)
    p["mouth_w"] = d.gauss(0.25, 0.035, 0.17, 0.33)
    p["lip_up"] = d.gauss(0.05, 0.01, 0.03, 0.075) - 0.008 * male
    p["lip_lo"] = d.gauss(0.068, 0.012, 0.04, 0.095) - 0.01 * male
    p["smile0"] = d.gauss(0.0, 0.25, -0.6, 0.6)
    rose = torch.tensor([0.78, 0.33, 0.36])
    lips = p["skin"] * 0.82 + (rose - p["skin"] * 0.82) * d.uniform(0.3, 0.55).unsqueeze(1)
    lipstick = ((d.uniform() < 0.3).float() * (1 - male)).unsqueeze(1)
    p["lips"] = lips + lipstick * (torch.tensor([0.62, 0.1, 0.18]) - lips) * 0.8
    p["ear_h"] = d.gauss(0.22, 0.03, 0.15, 0.3)
    p["neck_w"] = d.gauss(0.42, 0.04, 0.34, 0.5) + 0.05 * male
    _sample_hair(d, p)
    beard = d.choice(torch.tensor(_BEARD_MALE).expand(n, 5)) * male.long()
    p["beard"] = _BEARDS[beard]
    p["mole"] = (d.uniform() < 0.3).float()
    p["mole_u"], p["mole_v"] = d.uniform(-0.7, 0.7), d.uniform(-0.25, 0.9)
    p["mole_r"] = d.uniform(0.018, 0.032)
    p["glasses_wearer"] = (d.uniform() < 0.12).float()
    p["frame"] = _FRAMES[d.choice(torch.full((n, len(_FRAMES)), 1.0))]
    p["glass_h"] = d.uniform(0.13, 0.19)
    p["blush"] = d.uniform(0.0, 0.14) * (1 - male)
    wrinkle = torch.stack([torch.zeros(n), d.uniform(0.25, 0.5), d.uniform(0.6, 1.0)], 1)
    p["wrinkle"] = wrinkle.gather(1, age.long().unsqueeze(1)).squeeze(1)
    return p


def _sample_hair(d: _Draw, p: dict[str, torch.Tensor]) -> None:
    male, age, tone = p["male"], p["age"], p["tone"]
    probs = torch.where(male.bool().unsqueeze(1), torch.tensor(_STYLE_MALE), torch.tensor(_STYLE_FEMALE))
    style = d.choice(probs)
    style = torch.where((male > 0) & (age == 2) & (d.uniform() < 0.35), torch.zeros_like(style), style)
    s = _STYLES[style]
    p["hair_style"] = style.float()
    p["hair_vol"] = s[:, 0] * d.uniform(0.7, 1.3)
    p["hair_alpha"], p["hair_horse"], p["hair_bang"], p["hair_lock"] = s[:, 1], s[:, 2], s[:, 3], s[:, 4]
    p["hair_len"] = s[:, 5] * d.uniform(0.8, 1.25)
    p["hair_flare"], p["hair_curl"], p["hair_bun"] = s[:, 6], s[:, 7], s[:, 8]
    side = torch.where(d.uniform() < 0.5, -1.0, 1.0)
    p["hair_part"] = s[:, 9] * side * d.uniform(0.25, 0.5)
    p["hair_h0"] = d.gauss(-0.66, 0.06, -0.8, -0.5) - 0.08 * male * (age == 2).float()
    p["hair_side"] = d.uniform(-0.12, 0.05)
    p["hair_bang_y"] = d.uniform(-0.5, -0.36)
    base = _HAIR[d.choice(_mix_probs(_HAIR_LIGHT, _HAIR_DARK, tone))]
    grey_hi = torch.stack([torch.zeros_like(age), 0.4 * torch.ones_like(age), torch.ones_like(age)], 1)
    grey_lo = torch.stack([torch.zeros_like(age), torch.zeros_like(age), 0.45 * torch.ones_like(age)], 1)
    a = age.long().unsqueeze(1)
    lo, hi = grey_lo.gather(1, a).squeeze(1), grey_hi.gather(1, a).squeeze(1)
    grey = (lo + (hi - lo) * d.uniform()).unsqueeze(1)
    p["hair"] = base + grey * (torch.tensor([0.72, 0.71, 0.7]) - base)
    p["brow"] = (p["hair"] * 0.75).clamp(max=0.55)


def sample_nuisances(
    ids: torch.Tensor, ident: dict[str, torch.Tensor], variation: float, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """Draws the per-image nuisances, each scaled by ``variation``.

    The underlying random numbers do not depend on ``variation``, so with one seed every
    nuisance grows monotonically with it and ``variation=0`` repeats one image per identity.

    Returns:
        Name -> tensor [N] or [N, k].
    """
    d, v = _Draw(len(ids), generator), float(variation)
    z = {name: d.normal() for name in _NORMALS}
    u = {name: d.uniform() for name in _UNIFORMS}
    q: dict[str, torch.Tensor] = {}
    q["tx"] = (0.05 * v * z["tx"]).clamp(-0.25, 0.25)
    q["ty"] = (0.05 * v * z["ty"]).clamp(-0.25, 0.25)
    q["rot"] = (0.10 * v * z["rot"]).clamp(-0.6, 0.6)
    q["scale"] = ex.exp((0.06 * v * z["scale"]).clamp(-0.3, 0.3))
    q["yaw"] = (0.35 * v * z["yaw"]).clamp(-0.9, 0.9)
    q["smile"] = (ident["smile0"][ids] + 0.45 * v * z["smile"]).clamp(-1, 1)
    q["open"] = 0.07 * (0.8 * v * z["open"] - 0.3).clamp(0, 1)
    q["eye_open"] = (1 - 0.5 * (v * z["eye_open"].abs() - 0.7).clamp(0, 1.7)).clamp(0.12, 1)
    q["brow_raise"] = 0.04 * v * z["brow"]
    q["gaze_x"] = (0.3 * v * z["gaze_x"]).clamp(-0.6, 0.6)
    q["gaze_y"] = (0.2 * v * z["gaze_y"]).clamp(-0.5, 0.5)
    light = torch.stack([0.6 * v * z["light_x"], -0.3 + 0.3 * v * z["light_y"], torch.ones(len(ids))], 1)
    q["light"] = light / ex.sqrt(light[:, :1] ** 2 + light[:, 1:2] ** 2 + light[:, 2:] ** 2)
    q["ambient"] = (0.62 - 0.15 * v * z["ambient"].abs()).clamp(0.25, 0.62)
    q["grad"] = (0.22 * v * z["grad"]).clamp(-0.6, 0.6)
    q["grad_dir"] = 2 * math.pi * u["grad_dir"]
    q["intensity"] = ex.exp((0.18 * v * z["intensity"]).clamp(-0.7, 0.7))
    q["temp"] = (0.05 * v * z["temp"]).clamp(-0.15, 0.15)
    q["tint"] = (0.012 * v * z["tint"]).clamp(-0.04, 0.04)
    q["noise"] = torch.full((len(ids),), 0.012 * v)
    grey = torch.tensor([0.52, 0.54, 0.57])
    q["bg0"] = (grey + v * (0.2 * d.normal(1) + 0.07 * d.normal(3))).clamp(0.02, 0.98)
    q["bg1"] = (q["bg0"] + v * (0.12 * d.normal(1) + 0.04 * d.normal(3))).clamp(0.02, 0.98)
    q["bg_dir"] = 2 * math.pi * d.uniform()
    q["bg_tex"] = 0.05 * v * d.normal(3 * 36).view(-1, 3, 6, 6)
    q["clutter_on"] = (d.uniform(cols=_CLUTTER) < min(1.0, 0.4 * v)).float()
    q["clutter_round"] = (d.uniform(cols=_CLUTTER) < 0.5).float()
    q["clutter_xy"] = d.uniform(-1, 1, cols=2 * _CLUTTER).view(-1, _CLUTTER, 2)
    q["clutter_r"] = d.uniform(0.1, 0.55, cols=2 * _CLUTTER).view(-1, _CLUTTER, 2)
    clutter = d.uniform(cols=3 * _CLUTTER).view(-1, _CLUTTER, 3)
    q["clutter_col"] = 0.5 * clutter + 0.5 * q["bg0"].unsqueeze(1)
    clothes = torch.tensor([0.25, 0.27, 0.31]) + v * (0.15 * d.normal(1) + 0.12 * d.normal(3))
    q["clothes"] = clothes.clamp(0.02, 0.95)
    wearer = ident["glasses_wearer"][ids] > 0
    q["glasses"] = torch.where(wearer, u["glasses"] >= 0.3 * min(v, 1.0), u["glasses"] < 0.05 * v).float()
    q["occluder"] = (u["occluder"] < min(0.5, 0.1 * v)).float()
    q["occ_xy"] = torch.stack([d.uniform(-0.35, 0.35), d.uniform(0.0, 0.5)], 1)
    q["occ_r"] = torch.stack([d.uniform(0.08, 0.22), d.uniform(0.08, 0.3)], 1)
    q["occ_rot"] = d.uniform(-1.5, 1.5)
    q["occ_col"] = d.uniform(cols=3)
    q["hair_jit"] = (0.02 * v * z["hair"]).clamp(-0.06, 0.06)
    return q


_NORMALS = (
    "tx", "ty", "rot", "scale", "yaw", "smile", "open", "eye_open", "brow", "gaze_x", "gaze_y",
    "light_x", "light_y", "ambient", "grad", "intensity", "temp", "tint", "hair",
)
_UNIFORMS = ("grad_dir", "glasses", "occluder")
_CLUTTER = 4

