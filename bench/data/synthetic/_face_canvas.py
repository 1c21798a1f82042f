"""Synthetic faces, part 2: face-space geometry, implicit shapes and the supersampled canvas.

Faces are implicit shapes evaluated on a 2x supersampled grid, batched over images, then
average-pooled. Coordinates inside a face are "face units": the face half-width is 1, the
face centre is the origin, v points down.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from bench.data.synthetic import _exact as ex

_FACE_SCALE = 0.55
_FACE_Y = 0.0
_UPPER, _LOWER = 1.22, 1.15


def face_boxes(params: dict[str, torch.Tensor], size: int) -> torch.Tensor:
    """Returns the face boxes (x1, y1, x2, y2) in pixels, float32 [N, 4].

    The box is tight around the face outline (chin to the top of the forehead) after pose.
    """
    cx, cy, hw, hh = _face_extent(params)
    box = torch.stack([cx - hw, cy - hh, cx + hw, cy + hh], 1)
    return ((box + 1) * (size / 2)).clamp(0, size).float()


def _face_extent(params: dict[str, torch.Tensor]):
    """Centre and half extents of the posed face outline in normalised image coordinates."""
    k = _FACE_SCALE * params["scale"]
    s, c = ex.sincos(params["rot"])
    a = params["fw"]
    top, bottom = _UPPER * params["fh"], _LOWER * params["fh"]
    b = (top + bottom) / 2
    cu, cv = 0.06 * params["yaw"], (bottom - top) / 2
    cx = params["tx"] + k * (c * cu - s * cv)
    cy = _FACE_Y + params["ty"] + k * (s * cu + c * cv)
    hw = k * ex.sqrt((a * c) ** 2 + (b * s) ** 2)
    hh = k * ex.sqrt((a * s) ** 2 + (b * c) ** 2)
    return cx, cy, hw, hh


def _b(t: torch.Tensor) -> torch.Tensor:
    return t[:, None, None]


def _c(t: torch.Tensor) -> torch.Tensor:
    return t[:, :, None, None] if t.dim() == 2 else t.view(1, -1, 1, 1)


def _grid(n: int) -> torch.Tensor:
    return (torch.arange(n, dtype=torch.float32) + 0.5) / n * 2 - 1


def _min(a: Any, b: Any) -> Any:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return torch.minimum(a, b)
    if isinstance(a, torch.Tensor):
        return a.clamp(max=b)
    if isinstance(b, torch.Tensor):
        return b.clamp(max=a)
    return min(a, b)


def _pool(t: torch.Tensor) -> torch.Tensor:
    """2x2 average pooling of [..., H, W] (faster than avg_pool2d for this case)."""
    *lead, h, w = t.shape
    rows = t.reshape(*lead, h // 2, 2 * w)
    pairs = rows[..., :w] + rows[..., w:]
    return (pairs[..., 0::2] + pairs[..., 1::2]).mul_(0.25)


def _ellipse(du: torch.Tensor, dv: torch.Tensor, a: Any, b: Any) -> torch.Tensor:
    """Approximate signed distance to the ellipse with half-axes a, b centred at the origin."""
    x, y = du / a, dv / b
    return ex.sqrt_(x * x + y * y).sub_(1).mul_(_min(a, b))


def _thin_ellipse(du: torch.Tensor, dv: torch.Tensor, a: Any, b: Any) -> torch.Tensor:
    """Signed distance to an ellipse, first-order accurate also when it is very flat."""
    x, y = du / a, dv / b
    r = ex.sqrt_(x * x + y * y)
    gx, gy = x / a, y / b
    grad = ex.sqrt_(gx * gx + gy * gy).add_(1e-6)
    return (r - 1).mul_(r).div_(grad)


def _segment(du: torch.Tensor, dv: torch.Tensor, x0: Any, y0: Any, x1: Any, y1: Any) -> torch.Tensor:
    """Distance to the segment (x0, y0)-(x1, y1)."""
    bx, by = x1 - x0, y1 - y0
    px, py = du - x0, dv - y0
    h = ((px * bx + py * by) / (bx * bx + by * by + 1e-9)).clamp_(0, 1)
    qx, qy = px - bx * h, py - by * h
    return ex.sqrt_(qx * qx + qy * qy)


def _mirror(u: torch.Tensor, centre: torch.Tensor):
    """Folds the face at a vertical line: returns (|u - centre|, side of each pixel)."""
    d = u - centre
    return d.abs(), torch.sign(d)


def _pose(p: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Per-image (scale, cos, sin, x, y) of the face frame in normalised image coordinates."""
    k = _FACE_SCALE * p["scale"]
    s, c = ex.sincos(p["rot"])
    return k, c, s, p["tx"], _FACE_Y + p["ty"]


def _pose_coords(pose: tuple[torch.Tensor, ...], xs: torch.Tensor, ys: torch.Tensor):
    """Face coordinates (u, v) of image points on the grid xs (columns) x ys (rows)."""
    k, c, s, x0, y0 = pose
    ck, sk = _b(c / k), _b(s / k)
    x = xs.view(1, 1, -1) - _b(x0)
    y = ys.view(1, -1, 1) - _b(y0)
    return ck * x + sk * y, ck * y - sk * x


class _Rows(dict):
    """Rows ``idx`` of a parameter dictionary, indexed on first access."""

    def __init__(self, base: dict[str, torch.Tensor], idx: torch.Tensor):
        super().__init__()
        self.base, self.idx = base, idx

    def __missing__(self, key: str) -> torch.Tensor:
        value = self[key] = self.base[key][self.idx]
        return value


class _Canvas:
    """A window of a batch of supersampled images with the face coordinates of its pixels."""

    def __init__(
        self,
        rgb: torch.Tensor,
        fg: torch.Tensor,
        uv: tuple[torch.Tensor, torch.Tensor],
        scale: torch.Tensor,
        fine_uv: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    ):
        self.rgb, self.fg, self.scale, self.fine_uv = rgb, fg, scale, fine_uv
        self.u, self.v = uv
        self.coarse = self.u.shape[-1] != rgb.shape[-1] or self.u.shape[-2] != rgb.shape[-2]

    def paint(
        self, sd: torch.Tensor, colour: torch.Tensor, alpha: Any = None, soft: float = 1.0, cover: bool = False
    ) -> torch.Tensor:
        """Blends ``colour`` where the signed distance ``sd`` is negative; returns the mask.

        Args:
            sd: Signed distance in face units, antialiased over ``soft`` supersampled pixels.
            colour: [3], [B, 3] or a colour field [B, 3, h, w].
            alpha: Opacity, a float or a tensor broadcastable to [B, h, w].
            soft: Width of the edge ramp in supersampled pixels.
            cover: Whether the shape belongs to the head (it is then lit by the head shading).
        """
        if self.coarse:
            sd = ex.resize_bilinear(sd, (2 * sd.shape[-2], 2 * sd.shape[-1]))
        m = (sd * (self.scale * (-1.0 / soft))).add_(0.5).clamp_(0, 1)
        if alpha is not None:
            m.mul_(alpha)
        w = m.unsqueeze(1)
        if colour.dim() == 4:  # rgb + (colour - rgb) w
            self.rgb.add_((colour - self.rgb).mul_(w))
        else:  # the same, in place: (rgb - colour) (1 - w) + colour
            target = _c(colour)
            self.rgb.sub_(target).mul_(1 - w).add_(target)
        if cover:
            torch.maximum(self.fg, m, out=self.fg)
        return m


class _Frame:
    """A batch of supersampled images (or some rows of one), their head coverage and parameters.

    A frame over some rows paints on copies of its windows and writes each back when the
    next window is opened or when it is flushed.
    """

    def __init__(
        self, rgb: torch.Tensor, fg: torch.Tensor, p: dict[str, torch.Tensor], rows: torch.Tensor | None = None
    ):
        self.rgb, self.fg, self.p, self.rows = rgb, fg, p, rows
        self.n = rgb.shape[-1]
        self.grid, self.coarse_grid = _grid(self.n), _grid(self.n // 2)
        self.pose = _pose(p)
        self._pending: tuple | None = None

    def window(self, u0: Any, u1: Any, v0: Any, v1: Any, coarse: bool = False) -> _Canvas:
        """The smallest window holding the face-unit rectangle [u0, u1] x [v0, v1] of every image.

        With ``coarse``, the window's coordinates are on the half-resolution grid and the
        signed distances painted on it are interpolated to full resolution (for large,
        smooth shapes).
        """
        k, c, s, x0, y0 = self.pose
        corners = [(u0, v0), (u1, v0), (u0, v1), (u1, v1)]
        xs = torch.stack([x0 + k * (c * u - s * v) for u, v in corners])
        ys = torch.stack([y0 + k * (s * u + c * v) for u, v in corners])
        c0, c1 = _pixels(xs, self.n, coarse)
        r0, r1 = _pixels(ys, self.n, coarse)
        grid, q = (self.coarse_grid, 2) if coarse else (self.grid, 1)
        uv = _pose_coords(self.pose, grid[c0 // q : c1 // q], grid[r0 // q : r1 // q])
        if self.rows is None:
            rgb, fg = self.rgb[:, :, r0:r1, c0:c1], self.fg[:, r0:r1, c0:c1]
        else:
            self.flush()
            rgb, fg = self.rgb[self.rows, :, r0:r1, c0:c1], self.fg[self.rows, r0:r1, c0:c1]
            self._pending = (rgb, fg, slice(r0, r1), slice(c0, c1))
        fine_uv = lambda: _pose_coords(self.pose, self.grid[c0:c1], self.grid[r0:r1])  # noqa: E731
        return _Canvas(rgb, fg, uv, _b(k * (self.n / 2)), fine_uv)

    def flush(self) -> None:
        """Writes the open window of a frame over some rows back into the batch."""
        if self._pending is not None:
            rgb, fg, ys, xs = self._pending
            self.rgb[self.rows, :, ys, xs] = rgb
            self.fg[self.rows, ys, xs] = fg
            self._pending = None

    def draw_where(self, on: torch.Tensor, draw) -> None:
        """Calls ``draw(frame)`` on the images where ``on`` holds only."""
        rows = on.nonzero().flatten()
        if rows.numel() == 0:
            return
        if rows.numel() == len(on):
            draw(self)
            return
        sub = _Frame(self.rgb, self.fg, _Rows(self.p, rows), rows)
        draw(sub)
        sub.flush()


def _pixels(coords: torch.Tensor, n: int, even: bool) -> tuple[int, int]:
    lo, hi = torch.aminmax(coords)
    lo = math.floor((float(lo) + 1) * (n / 2)) - 2
    hi = math.ceil((float(hi) + 1) * (n / 2)) + 2
    if even:
        lo, hi = lo - lo % 2, hi + hi % 2
    lo, hi = min(max(lo, 0), n), min(max(hi, 0), n)
    return lo, max(lo, hi)
