"""Synthetic faces, part 3: the renderer that paints faces from their parameters."""

from __future__ import annotations

import torch

from bench.data.synthetic import _exact as ex
from bench.data.synthetic._face_canvas import (
    _FACE_SCALE,
    _LOWER,
    _UPPER,
    _b,
    _c,
    _Canvas,
    _ellipse,
    _Frame,
    _grid,
    _mirror,
    _pool,
    _pose,
    _pose_coords,
    _segment,
    _thin_ellipse,
)
from bench.data.synthetic._face_identity import _CLUTTER


def render_heads(params: dict[str, torch.Tensor], size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Renders heads (hair, neck, ears, face) without backdrop, clothes or camera: sprites for scenes.

    Args:
        params: Identity and nuisance parameters of B faces (as
            :func:`bench.data.synthetic.synth_faces.generate` gathers them from ``sample_identities``
            and ``sample_nuisances``); ``tx``, ``ty`` and ``scale`` place the face on the
            size x size canvas as in ``face_boxes``.
            Occluders are painted but not part of the coverage: turn them off (``occluder`` 0).
        size: Canvas side in pixels.

    Returns:
        Premultiplied colour [B, 3, size, size] in [0, 1] and coverage [B, 1, size, size]:
        composite with ``under * (1 - coverage) + colour``.
    """
    with torch.no_grad():
        return _Renderer(size).render_heads(params)


class _Renderer:
    """Renders batches of faces at ``size`` pixels from parameter dictionaries."""

    def __init__(self, size: int):
        self.size, self.n = size, 2 * size
        self.out_grid = _grid(size)

    def render(self, p: dict[str, torch.Tensor], noise: torch.Generator) -> torch.Tensor:
        """Returns uint8 images [B, 3, size, size]."""
        rgb = self._background(p)
        f = _Frame(rgb, torch.zeros(rgb.shape[0], self.n, self.n), p)
        self._clothes(f)
        self._head(f)
        out = _pool(f.rgb)
        fg = _pool(f.fg).unsqueeze(1)
        out.mul_(self._shading(p).sub_(1).mul_(fg).add_(1))
        out = self._camera(out, p, noise)
        return ex.to_uint8(out)

    def render_heads(self, p: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns the shaded heads alone: premultiplied colour [B, 3, H, W] in [0, 1] and coverage [B, 1, H, W]."""
        n = len(p["tx"])
        f = _Frame(torch.zeros(n, 3, self.n, self.n), torch.zeros(n, self.n, self.n), p)
        self._head(f)
        out = _pool(f.rgb)
        fg = _pool(f.fg).unsqueeze(1)
        out.mul_(self._shading(p).sub_(1).mul_(fg).add_(1))
        return out, fg

    def _head(self, f: _Frame) -> None:
        """Paints hair, neck, ears, face, features, glasses and occluders (in this order)."""
        p = f.p
        f.draw_where(p["hair_len"] > 0, self._back_hair)
        self._neck(f)
        self._ears(f)
        self._face(f)
        f.draw_where(p["blush"] > 0, self._blush)
        f.draw_where(p["wrinkle"] > 0, self._wrinkles)
        f.draw_where(p["mole"] > 0, self._mole)
        f.draw_where(p["beard"].amax(1) > 0, self._beard)
        self._nose(f)
        self._mouth(f)
        self._eyes(f)
        self._front_hair(f)
        f.draw_where(p["glasses"] > 0, self._glasses)
        f.draw_where(p["occluder"] > 0, self._occluder)

    def _background(self, p: dict[str, torch.Tensor]) -> torch.Tensor:
        """A blurred backdrop: two-colour gradient, low-frequency texture and clutter shapes.

        It is rendered at half the image size, interpolated to the image size and repeated
        onto the supersampled grid, so that pooling gives back the interpolated backdrop.
        """
        n = max(8, self.size // 2)
        g = _grid(n)
        x, y = g.view(1, 1, -1), g.view(1, -1, 1)
        sin_dir, cos_dir = ex.sincos(p["bg_dir"])
        t = (_b(cos_dir) * x + _b(sin_dir) * y).mul_(0.5).add_(0.5)
        rgb = _c(p["bg0"]) + t.unsqueeze(1) * _c(p["bg1"] - p["bg0"])
        rgb = rgb + ex.resize_bilinear(p["bg_tex"], (n, n))
        for i in range(_CLUTTER):
            dx, dy = x - _b(p["clutter_xy"][:, i, 0]), y - _b(p["clutter_xy"][:, i, 1])
            rx, ry = _b(p["clutter_r"][:, i, 0]), _b(p["clutter_r"][:, i, 1])
            box = torch.maximum(dx.abs() - rx, dy.abs() - ry)
            sd = torch.where(_b(p["clutter_round"][:, i]) > 0, _ellipse(dx, dy, rx, ry), box)
            m = (0.5 - sd * (n / 2)).clamp_(0, 1).mul_(_b(0.7 * p["clutter_on"][:, i]))
            rgb = rgb + (_c(p["clutter_col"][:, i]) - rgb) * m.unsqueeze(1)
        rgb = ex.resize_bilinear(rgb.clamp_(0, 1), (self.size, self.size))
        return rgb.repeat_interleave(2, dim=-2).repeat_interleave(2, dim=-1)

    def _clothes(self, f: _Frame) -> None:
        cv = f.window(-2.4, 2.4, 1.45, 4.5, coarse=True)
        cv.paint(_ellipse(cv.u, cv.v - 2.45, 2.1, 0.95), f.p["clothes"])

    def _hair_colour(self, cv: _Canvas, p: dict[str, torch.Tensor], shade: float) -> torch.Tensor:
        u, v = cv.fine_uv() if cv.coarse else (cv.u, cv.v)
        phase = (u * 6.0).add_(v).mul_(1.4)
        strands = phase.sub_(phase.floor()).sub_(0.5).abs_().mul_(0.28).add_(0.93)
        return _c(p["hair"] * shade) * strands.unsqueeze(1)

    def _outer_hair_sd(self, cv: _Canvas, p: dict[str, torch.Tensor]) -> torch.Tensor:
        u = cv.u - 0.08 * _b(p["yaw"])
        fw, fh = _b(p["fw"]), _b(p["fh"])
        vol = _b(p["hair_vol"] + p["hair_jit"]).clamp(min=0)
        sd = _ellipse(u, cv.v + 0.12 * fh, fw * 1.06 + vol, fh * 1.16 + vol)
        curl = _b(p["hair_curl"])
        if bool((curl > 0).any()):
            sd = sd + curl * ex.sin(u * 18) * ex.sin(cv.v * 18)
        bun = _b(p["hair_bun"])
        if bool((bun > 0).any()):
            sd = torch.minimum(sd, ex.sqrt(u * u + (cv.v + 1.32 * fh) ** 2) - bun)
        return sd

    def _hair_top(self, p: dict[str, torch.Tensor]) -> torch.Tensor:
        vol = p["hair_vol"] + p["hair_jit"].clamp(min=0) + p["hair_curl"]
        return torch.minimum(-1.28 * p["fh"] - vol, -1.32 * p["fh"] - p["hair_bun"]) - 0.1

    def _back_hair(self, f: _Frame) -> None:
        p = f.p
        half = p["fw"] * 1.06 + p["hair_vol"] + p["hair_flare"] * (p["hair_len"] + 0.2) + 0.15
        cv = f.window(-half - 0.1, half + 0.1, self._hair_top(p), p["hair_len"] + 0.1, coarse=True)
        u = cv.u + 0.05 * _b(p["yaw"])
        top = -0.12 * _b(p["fh"])
        width = _b(p["fw"]) * 1.06 + _b(p["hair_vol"]) + _b(p["hair_flare"]) * (cv.v - top).clamp(min=0)
        end = _b(p["hair_len"]) + 0.04 * ex.sin(u * 25)
        drape = torch.maximum(torch.maximum(u.abs() - width, cv.v - end), top - cv.v)
        sd = torch.minimum(self._outer_hair_sd(cv, p), drape)
        cv.paint(sd, self._hair_colour(cv, p, 0.78), cover=True)

    def _neck(self, f: _Frame) -> None:
        p = f.p
        cv = f.window(-0.8, 0.8, 0.25, 1.85, coarse=True)
        u = cv.u - 0.03 * _b(p["yaw"])
        w = _b(p["neck_w"])
        neck = torch.maximum(torch.maximum(u.abs() - w, 0.3 - cv.v), cv.v - 1.55)
        neck = torch.minimum(neck, _ellipse(u, cv.v - 1.52, w + 0.12, 0.25))
        cv.paint(neck, p["skin"] * 0.8, cover=True)

    def _ears(self, f: _Frame) -> None:
        p = f.p
        ear_h = _b(p["ear_h"])
        for side in (-1.0, 1.0):
            centre = side * 0.97 * p["fw"] - 0.15 * p["yaw"]
            cv = f.window(centre - 0.2, centre + 0.2, -0.45, 0.42)
            du = (cv.u - _b(centre)) * side
            cv.paint(_ellipse(du, cv.v + 0.02, 0.14, ear_h), p["skin"] * 0.93, cover=True)
            cv.paint(_ellipse(du + 0.02, cv.v + 0.02, 0.07, ear_h * 0.6), p["skin"] * 0.7, 0.5, 2.0)

    def _face(self, f: _Frame) -> None:
        p = f.p
        half = p["fw"] + 0.15
        cv = f.window(-half, half, -_UPPER * p["fh"] - 0.1, _LOWER * p["fh"] + 0.1, coarse=True)
        cv.paint(self._face_sd(cv, p), p["skin"], cover=True)

    def _face_sd(self, cv: _Canvas, p: dict[str, torch.Tensor]) -> torch.Tensor:
        u = cv.u - 0.06 * _b(p["yaw"])
        v = cv.v
        fw, fh = _b(p["fw"]), _b(p["fh"])
        upper = v < 0
        top, bottom = _UPPER * fh, _LOWER * fh
        t_up = (-v / top).clamp_(0, 1)
        t_lo = (v / bottom).clamp_(0, 1)
        a = fw * torch.where(upper, 1 - (1 - _b(p["fore"])) * t_up * t_up, 1 - _b(p["taper"]) * t_lo * t_lo)
        b = torch.where(upper, top, bottom)
        j = torch.where(upper, 0.15, _b(p["jaw"]))
        x, y = u / a, v / b
        x2, y2 = x * x, y * y
        f = (1 - j) * (x2 + y2) + j * (x2 * x2 + y2 * y2) - 1
        gx = ((1 - j) * 2 + j * 4 * x2) * x / a
        gy = ((1 - j) * 2 + j * 4 * y2) * y / b
        return f / ex.sqrt_(gx * gx + gy * gy).add_(1e-6)

    def _blush(self, f: _Frame) -> None:
        p = f.p
        yaw = _b(p["yaw"])
        cv = f.window(-0.95 + 0.2 * p["yaw"], 0.95 + 0.2 * p["yaw"], 0.0, 0.56)
        u, _ = _mirror(cv.u, 0.2 * yaw)
        cv.paint(_ellipse(u - 0.55, cv.v - 0.28, 0.2, 0.13), torch.tensor([0.85, 0.4, 0.42]), _b(p["blush"]), 6.0)

    def _wrinkles(self, f: _Frame) -> None:
        p = f.p
        yaw, skin, wr = _b(p["yaw"]), p["skin"], _b(p["wrinkle"])
        brow = p["eye_y"] - p["brow_gap"]
        cv = f.window(-0.6 + 0.2 * p["yaw"], 0.6 + 0.2 * p["yaw"], brow - 0.42, brow - 0.08)
        u = cv.u - 0.2 * yaw
        for i in range(3):
            y = _b(brow) - 0.13 - 0.08 * i - 0.04 * u * u
            sd = torch.maximum((cv.v - y).abs() - 0.012, u.abs() - 0.42 + 0.08 * i)
            cv.paint(sd, skin * 0.62, wr * 0.45, 1.5)
        reach = torch.maximum(p["mouth_w"] + 0.15, p["eye_x"] + 0.2)
        cv = f.window(-reach + 0.3 * p["yaw"], reach + 0.3 * p["yaw"], p["eye_y"], p["mouth_y"] + 0.12)
        u, _ = _mirror(cv.u, 0.32 * yaw)
        top, bottom = _b(p["nose_y"]) - 0.02, _b(p["mouth_y"]) + 0.05
        fold = _segment(u, cv.v, _b(p["nose_w"] + 0.08), top, _b(p["mouth_w"] + 0.07), bottom)
        cv.paint(fold - 0.013, skin * 0.65, wr * 0.5 + 0.12 * _b(p["smile"]).clamp(min=0), 1.5)
        bag = _ellipse(u - _b(p["eye_x"]), cv.v - _b(p["eye_y"]) - 0.1, 0.13, 0.05)
        cv.paint(bag, skin * 0.7, wr * 0.3, 2.0)

    def _mole(self, f: _Frame) -> None:
        p = f.p
        mu = p["mole_u"] + 0.3 * p["yaw"]
        cv = f.window(mu - 0.08, mu + 0.08, p["mole_v"] - 0.08, p["mole_v"] + 0.08)
        mole = ex.sqrt((cv.u - _b(mu)) ** 2 + (cv.v - _b(p["mole_v"])) ** 2) - _b(p["mole_r"])
        cv.paint(mole, p["skin"] * 0.4, 0.85)

    def _beard(self, f: _Frame) -> None:
        p = f.p
        half = p["fw"] + 0.12
        shift = 0.3 * p["yaw"]
        cv = f.window(-half + shift, half + shift, p["nose_y"] - 0.25, _LOWER * p["fh"] + 0.15)
        u, v = cv.u - _b(shift), cv.v
        beard, colour = p["beard"], p["hair"] * 0.7
        jaw = self._face_sd(cv, p).sub_(0.03)
        mouth_y, mouth_w, nose_y = _b(p["mouth_y"]), _b(p["mouth_w"]), _b(p["nose_y"])
        low = nose_y + 0.1 + 0.25 * (u.abs() - 0.3).clamp(min=0)
        cv.paint(torch.maximum(jaw, low - v), colour, _b(beard[:, 0]), 6.0)
        full_top = mouth_y - 0.1 - 0.5 * (u.abs() - 0.45).clamp(min=0)
        cv.paint(torch.maximum(jaw - 0.03, full_top - v), colour, _b(beard[:, 1]), 1.5)
        moustache_y = mouth_y - _b(p["lip_up"]) - 0.045
        moustache = torch.maximum((v - moustache_y).abs() - 0.04, u.abs() - mouth_w - 0.03)
        cv.paint(moustache, colour, _b(beard[:, 2]))
        goatee = _ellipse(u, v - mouth_y - 0.22, mouth_w * 0.75, 0.2)
        cv.paint(torch.maximum(goatee, jaw), colour, _b(beard[:, 3]))

    def _nose(self, f: _Frame) -> None:
        p = f.p
        shift = 0.42 * p["yaw"]
        cv = f.window(-0.36 + shift, 0.36 + shift, p["eye_y"] - 0.05, p["nose_y"] + 0.1)
        u, v, yaw, skin = cv.u, cv.v, _b(p["yaw"]), p["skin"]
        ny, nw, top = _b(p["nose_y"]), _b(p["nose_w"]), _b(p["eye_y"])
        lx = _b(p["light"][:, 0])
        for side in (-1.0, 1.0):
            bridge = _segment(u, v, side * 0.09 + 0.3 * yaw, top, side * 0.1 + 0.42 * yaw, ny - 0.06)
            cv.paint(bridge.sub_(0.02), skin * 0.6, 0.1 + 0.35 * (-side * lx).clamp(min=0), 3.0)
        cv.paint(_ellipse(u - 0.42 * yaw, v - ny + 0.015, nw * 1.15, 0.07), skin * 0.72, 0.35, 3.0)
        cv.paint(_ellipse(u - 0.47 * yaw, v - ny + 0.06, 0.05, 0.04), skin * 1.12, 0.35, 2.5)
        un, _ = _mirror(u, 0.4 * yaw)
        cv.paint(_ellipse(un - nw * 0.5, v - ny - 0.012, 0.04, 0.02), skin * 0.35, 0.75, 1.3)

    def _mouth(self, f: _Frame) -> None:
        p = f.p
        shift = 0.3 * p["yaw"]
        half = p["mouth_w"] + 0.06
        lo = p["mouth_y"] - 0.07 * p["smile"].clamp(min=0) - p["lip_up"] - 0.05
        hi = p["mouth_y"] + 0.07 * (-p["smile"]).clamp(min=0) + p["open"] + p["lip_lo"] + 0.05
        cv = f.window(-half + shift, half + shift, lo, hi)
        u, v = cv.u - _b(shift), cv.v
        w = _b(p["mouth_w"]) * (1 - 0.15 * _b(p["yaw"]).abs())
        t = (u / w).clamp_(-1, 1)
        t2 = t * t
        prof = ex.sqrt_(1 - t2)
        centre = _b(p["mouth_y"]) - 0.07 * _b(p["smile"]) * t2
        gap = _b(p["open"]) * prof
        ends = u.abs() - w
        lips = p["lips"]
        upper = torch.maximum(torch.maximum(v - centre, centre - _b(p["lip_up"]) * prof - v), ends)
        cv.paint(upper, lips * 0.88)
        below = v - centre - gap
        lower = torch.maximum(torch.maximum(-below, below - _b(p["lip_lo"]) * prof), ends)
        cv.paint(lower, lips)
        if bool((p["open"] > 0).any()):
            opened = _b((p["open"] > 0).float())
            cv.paint(torch.maximum(torch.maximum(centre - v, below), ends), torch.tensor([0.22, 0.05, 0.06]), opened)
            teeth = torch.maximum(torch.maximum(centre - v, below + 0.5 * gap), ends + 0.25 * w)
            cv.paint(teeth, torch.tensor([0.9, 0.87, 0.8]), _b((p["open"] > 0.02).float()))
        cv.paint(torch.maximum((v - centre).abs() - 0.01, ends), lips * 0.45, 0.7)

    def _eye_coords(self, cv: _Canvas, p: dict[str, torch.Tensor]):
        """Mirrored coordinates around each eye (du > 0 points outwards) and the side of each pixel."""
        yaw = _b(p["yaw"])
        u, side = _mirror(cv.u, 0.3 * yaw)
        du = u - _b(p["eye_x"]) * (1 - 0.2 * yaw.abs())
        return du, cv.v - _b(p["eye_y"]), side

    def _eyes(self, f: _Frame) -> None:
        """Eye sockets, eyes and eyebrows."""
        p = f.p
        shift = 0.3 * p["yaw"]
        half = p["eye_x"] + torch.maximum(p["eye_w"] * 1.4, p["brow_len"] + 0.02) + 0.12
        top = p["eye_y"] - p["brow_gap"] - p["brow_raise"].clamp(min=0) - p["brow_arch"].clamp(min=0) - 0.2
        cv = f.window(-half + shift, half + shift, top, p["eye_y"] + p["eye_h"] * 2.4 + 0.12)
        du, dv, side = self._eye_coords(cv, p)
        skin, yaw = p["skin"], _b(p["yaw"])
        w = _b(p["eye_w"]) * (1 - 0.3 * side * yaw).clamp_(min=0.4)
        dv_eye = dv + _b(p["eye_tilt"]) * du
        eh, openness = _b(p["eye_h"]), _b(p["eye_open"])
        cv.paint(_ellipse(du, dv_eye + 0.02, w * 1.4, eh * 2.4), skin * 0.75, 0.22, 4.0)
        h = torch.where(dv_eye < 0, eh * openness, eh * 0.55 * (0.6 + 0.4 * openness))
        eye = _thin_ellipse(du, dv_eye, w, h)
        cv.paint(eye, torch.tensor([0.93, 0.9, 0.87]))
        gx = du - side * _b(p["gaze_x"]) * w * 0.35
        gy = dv_eye - _b(p["gaze_y"]) * eh * 0.3
        r = ex.sqrt_(gx * gx + gy * gy)
        cv.paint(torch.maximum(r - eh * 0.95, eye), p["iris"])
        cv.paint(torch.maximum(r - eh * 0.42, eye), torch.tensor([0.03, 0.03, 0.03]))
        lid = torch.maximum(eye.abs() - 0.014 - 0.008 * (1 - _b(p["male"])), dv_eye - 0.2 * eh)
        cv.paint(lid, torch.tensor([0.08, 0.06, 0.06]))
        crease = torch.maximum(_thin_ellipse(du, dv_eye, w * 1.05, eh * openness + 0.05).abs_() - 0.008, dv_eye)
        cv.paint(crease, skin * 0.65, 0.35)
        self._brows(cv, p, du, dv)

    def _brows(self, cv: _Canvas, p: dict[str, torch.Tensor], du: torch.Tensor, dv: torch.Tensor) -> None:
        length = _b(p["brow_len"])
        du = du - 0.02
        t = du / length
        arch = _b(p["brow_arch"]) * (1 - t * t) + _b(p["brow_tilt"]) * t * length
        centre = -_b(p["brow_gap"] + p["brow_raise"]) - arch
        thick = _b(p["brow_th"]) * (1 - 0.5 * t.clamp(0, 1))
        sd = torch.maximum((dv - centre).abs() - thick / 2, du.abs() - length)
        cv.paint(sd, p["brow"], 0.92)

    def _front_hair(self, f: _Frame) -> None:
        """The hair in front of the face: cap, hairline, bangs, side locks and parting."""
        p = f.p
        shift = 0.08 * p["yaw"]
        half = p["fw"] * 1.06 + p["hair_vol"] + p["hair_jit"].clamp(min=0) + p["hair_curl"] + 0.15
        bottom = 1.1 * p["fh"] + p["hair_vol"] + p["hair_curl"] + 0.1
        cv = f.window(-half + shift, half + shift, self._hair_top(p), bottom, coarse=True)
        u, v = cv.u - _b(shift), cv.v
        h0, side = _b(p["hair_h0"] + p["hair_jit"]), _b(p["hair_side"])
        part = _b(p["hair_part"])
        line = h0 + (side - h0) * (u * u).clamp_(max=1.5) + 0.12 * part * u
        if bool((p["hair_bang"] > 0).any()):
            bangs = _b(p["hair_bang_y"]) + 0.06 * u * u + 0.02 * ex.sin(u * 30)
            line = line + _b(p["hair_bang"]) * (bangs - line)
        line = line + 8 * _b(p["hair_lock"]) * (u.abs() - 0.72).clamp_(min=0)
        sd = torch.maximum(self._outer_hair_sd(cv, p), v - line)
        sd = torch.maximum(sd, _b(p["hair_horse"]) - u.abs())
        cv.paint(sd, self._hair_colour(cv, p, 1.0), _b(p["hair_alpha"]), cover=True)
        if bool((part != 0).any()):
            parting = torch.maximum((u - part).abs() - 0.015, sd + 0.03)
            cv.paint(parting, p["hair"] * 0.55, (part != 0).float() * 0.6)

    def _glasses(self, f: _Frame) -> None:
        p = f.p
        shift = 0.3 * p["yaw"]
        half = p["fw"] + 0.1
        cv = f.window(-half + shift, half + shift, p["eye_y"] - p["glass_h"] - 0.1, p["eye_y"] + p["glass_h"] + 0.1)
        du, dv, side = self._eye_coords(cv, p)
        gh = _b(p["glass_h"])
        gw = 0.22 * (1 - 0.3 * side * _b(p["yaw"])).clamp_(min=0.4)
        lens = _ellipse(du, dv - 0.01, gw, gh)
        cv.paint(lens, torch.tensor([0.75, 0.82, 0.9]), 0.15)
        cv.paint(lens.abs_().sub_(0.018), p["frame"])
        inner = -_b(p["eye_x"]) * (1 - 0.2 * _b(p["yaw"]).abs())
        arm = _segment(du, dv, gw, -0.02, _b(p["fw"]) + inner, -0.04)
        cv.paint(arm.sub_(0.015), p["frame"])
        bridge = _segment(du, dv, inner, -0.04, -0.22, -0.04)
        cv.paint(bridge.sub_(0.015), p["frame"])

    def _occluder(self, f: _Frame) -> None:
        p = f.p
        centre = p["occ_xy"] / _FACE_SCALE
        reach = p["occ_r"].amax(1) / _FACE_SCALE + 0.05
        cv = f.window(centre[:, 0] - reach, centre[:, 0] + reach, centre[:, 1] - reach, centre[:, 1] + reach)
        s, c = (_b(t) for t in ex.sincos(p["occ_rot"]))
        du, dv = cv.u - _b(centre[:, 0]), cv.v - _b(centre[:, 1])
        a, b = _b(p["occ_r"][:, 0]) / _FACE_SCALE, _b(p["occ_r"][:, 1]) / _FACE_SCALE
        m = cv.paint(_ellipse(c * du + s * dv, c * dv - s * du, a, b), p["occ_col"])
        cv.fg.mul_(1 - m)

    def _shading(self, p: dict[str, torch.Tensor]) -> torch.Tensor:
        """Diffuse shading of the head as an ellipsoid lit from the image's light direction.

        Returns a [B, 1, size, size] multiplier that fades to 1 away from the head.
        """
        u, v = _pose_coords(_pose(p), self.out_grid, self.out_grid)
        nu = (u - 0.05 * _b(p["yaw"])) / (1.15 * _b(p["fw"]))
        nv = (v + 0.1) / (1.45 * _b(p["fh"]))
        r2 = nu * nu + nv * nv
        nz = ex.sqrt_((1 - r2).clamp_(min=0))
        light = p["light"]
        diffuse = (_b(light[:, 0]) * nu + _b(light[:, 1]) * nv + _b(light[:, 2]) * nz).clamp_(min=0)
        amb = _b(p["ambient"])
        shade = amb + (1.05 - amb) * diffuse
        fade = ((1.6 - r2) / 0.6).clamp_(0, 1)
        return (shade - 1).mul_(fade).add_(1).unsqueeze(1)

    def _camera(self, rgb: torch.Tensor, p: dict[str, torch.Tensor], noise: torch.Generator) -> torch.Tensor:
        """Global light gradient, exposure, colour temperature and sensor noise."""
        g = self.out_grid
        sin_dir, cos_dir = ex.sincos(p["grad_dir"])
        ramp = _b(cos_dir) * g.view(1, 1, -1) + _b(sin_dir) * g.view(1, -1, 1)
        gain = _b(p["intensity"]) * (1 + _b(p["grad"]) * ramp)
        t, tint = p["temp"], p["tint"]
        colour = torch.stack([1 + t + tint, 1 - 2 * tint, 1 - t + tint], 1)
        rgb = rgb * gain.unsqueeze(1) * _c(colour)
        rgb.add_(ex.normal(rgb.shape, noise).mul_(_c(p["noise"].unsqueeze(1))))
        return rgb.clamp_(0, 1)
