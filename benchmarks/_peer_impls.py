"""Peer implementations for ``benchmarks/peers.py``: per-image functions of an H x W x C uint8 image.

Each re-implements the published semantics of a peer's code (the packages are not
dependencies); every function has the signature ``fn(img, boxes, rng, **params) -> img``,
``boxes`` the image's face boxes ``[[x0, y0, x1, y1], ...]`` and ``rng`` a numpy Generator:

* ``seeds``: the papers' released code, one image at a time in numpy with a Python loop over
  cells (``benchmarks/mechanisms.py``'s references);
* ``fewshot``: Few-Shot-Privacy's ``noise.py``: ``avg_pool2d`` of one float image gives the
  cell grid (all it returns); here the grid is rounded half up and filled back to full size;
* ``SEBA``: per-image OpenCV functions (pixelation by INTER_AREA down to the b x b cell grid
  and INTER_NEAREST up, ``cv2.GaussianBlur``, ``cv2.randn`` noise added into uint8, DP-Pix
  without the channel factor C, rectangles by ``cv2.rectangle``), skipped when cv2 is not
  importable. (SEBA's own pixelation resizes to a fixed width with the default INTER_LINEAR;
  the block-wise INTER_AREA here is the closest OpenCV gets to cell means.) Its DP-Pix
  draws from ``rng`` once per cell, not from a new ``default_rng()`` per value;
* ``PIL``: Pillow (GaussianBlur, BOX down + NEAREST up, ImageDraw rectangles, the ImageNet
  authors' face blur).

:func:`peers_for` says which peers a mechanism has and whether each shares its semantics;
:func:`agreement` and :func:`noise_rows` check that against PrivBench.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch.nn.functional import avg_pool2d

from bench.core.registry import mechanisms
from bench.randomness.streams import Streams
from bench.testing.references import authors_face_blur
from mechanisms._dp import dp_pix_scale

try:
    import cv2
except ImportError:  # the optional extra ``bench`` installs it
    cv2 = None


def load_sibling(stem: str):
    """Returns ``benchmarks/<stem>.py`` as a module.

    ``benchmarks/`` is no package, and opacus installs a ``benchmarks`` package that would
    shadow it, so the file is loaded by path (once per process).
    """
    name = f"_privbench_benchmarks_{stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{stem}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


BM = load_sibling("mechanisms")
"""The older benchmark: ``make_batch``, ``timed`` and the seeds' per-image references."""

OVERLAY_MEAN = (124, 116, 104)
"""face_overlay's ``mean`` colour, (0.485, 0.456, 0.406) x 255 rounded half up."""


@dataclass
class Peer:
    """One peer implementation of a mechanism.

    Attributes:
        name: Whose code: ``seeds``, ``fewshot``, ``SEBA`` or ``PIL``; ``bound`` for a
            reference that is no peer (the least work any implementation does).
        what: The implementation in a few words.
        fn: Module-level function ``(img, boxes, rng, **params) -> img`` (picklable).
        params: Keyword arguments for ``fn``.
        kind: ``exact``: the same deterministic semantics, counted only where its outputs
            equal PrivBench's (checked); ``distribution``: the same noise distribution from
            another random stream, counted; ``different``: other semantics, shown, never counted.
        note: Why a ``different`` peer differs, or an ``exact`` one where its check fails.
    """

    name: str
    what: str
    fn: Callable[..., np.ndarray]
    params: dict = field(default_factory=dict)
    kind: str = "exact"
    note: str = ""

    def __call__(self, img: np.ndarray, boxes: list, rng: np.random.Generator) -> np.ndarray:
        return self.fn(img, boxes, rng, **self.params)


def fill_cells(cells: np.ndarray, block: int, height: int, width: int) -> np.ndarray:
    """Expands a cell grid [Hc, Wc, C] to an image [H, W, C] (one copy)."""
    hc, wc, c = cells.shape
    full = np.broadcast_to(cells[:, None, :, None, :], (hc, block, wc, block, c)).reshape(hc * block, wc * block, c)
    return np.ascontiguousarray(full[:height, :width])


# --- seeds: per-image numpy, a Python loop over cells --------------------------------------


def seeds_pixelate(img, boxes, rng, block):
    """The seeds' pixelate: a Python loop over cells, means rounded half up."""
    return BM.ref_pixelate(img, block)


def seeds_dp_pix(img, boxes, rng, epsilon, block, m):
    """The seeds' DP-Pix: loop over cells, Laplace scale 255 m C / (b^2 epsilon), clip, round."""
    return BM.ref_dp_pix(img, epsilon, block, m, rng)


def seeds_image_dp(img, boxes, rng, epsilon, block, colours):
    """The seeds' epsilon-image DP: loop over cells, quantise, Laplace on the levels."""
    return BM.ref_image_dp(img, epsilon, block, colours, rng)


def seeds_gaussian_noise(img, boxes, rng, sigma):
    """The seeds' Gaussian noise: numpy normal, clip, round."""
    return BM.ref_gaussian_noise(img, sigma, rng)


# --- fewshot: Few-Shot-Privacy noise.py ----------------------------------------------------


def fewshot_grid(img: np.ndarray, block: int) -> np.ndarray:
    """noise.py's ``pixelate``: ``avg_pool2d`` of the float image, the cell grid [Hc, Wc, C] only.

    Raises:
        ValueError: b does not divide H and W (``avg_pool2d`` drops ragged cells).
    """
    if img.shape[0] % block or img.shape[1] % block:
        raise ValueError(f"avg_pool2d drops the ragged cells of a {img.shape[0]}x{img.shape[1]} image at b={block}")
    x = torch.from_numpy(img.astype(np.float32)).permute(2, 0, 1).unsqueeze(0)
    return avg_pool2d(x, block).squeeze(0).permute(1, 2, 0).numpy()


def fewshot_pixelate(img, boxes, rng, block):
    """noise.py's cell grid, rounded half up and filled back to the image's size."""
    cells = np.floor(fewshot_grid(img, block) + 0.5).astype(np.uint8)
    return fill_cells(cells, block, *img.shape[:2])


def fewshot_dp_pix(img, boxes, rng, epsilon, block, m):
    """noise.py's ``dp_pix`` (with C, a channel at a time), rounded half up and filled."""
    grid = fewshot_grid(img, block)
    scale = 255 * m * grid.shape[2] / (block * block * epsilon)  # noise.py includes C
    noisy = np.empty(grid.shape)
    for ch in range(grid.shape[2]):  # noise.py draws channel by channel
        noisy[..., ch] = np.clip(grid[..., ch] + rng.laplace(0.0, scale, grid.shape[:2]), 0, 255)
    return fill_cells(np.floor(noisy + 0.5).astype(np.uint8), block, *img.shape[:2])


# --- SEBA: per-image OpenCV --------------------------------------------------------------


def seba_pixelate(img, boxes, rng, block):
    """SEBA-style pixelation: ``cv2.resize`` INTER_AREA to the cell grid, INTER_NEAREST back."""
    h, w = img.shape[:2]
    small = cv2.resize(img, (math.ceil(w / block), math.ceil(h / block)), interpolation=cv2.INTER_AREA)
    return cv2.resize(small, (w, h), interpolation=cv2.INTER_NEAREST)


def seba_blur(img, boxes, rng, radius):
    """SEBA-style blur: ``cv2.GaussianBlur`` with sigma = radius (kernel size from sigma)."""
    return cv2.GaussianBlur(img, (0, 0), radius)


def seba_gaussian_noise(img, boxes, rng, sigma):
    """``cv2.randn`` into a uint8 image (negative draws saturate to 0), then ``cv2.add``."""
    noise = np.zeros(img.shape, np.uint8)
    s = int(sigma)
    cv2.randn(noise, (0,) * img.shape[2], (s,) * img.shape[2])
    return cv2.add(img, noise)


def seba_dp_pix(img, boxes, rng, epsilon, block, m):
    """SEBA's DP-Pix: Laplace scale 255 m / (b^2 epsilon) without C, clipped, truncated into uint8.

    As the original it loops over ``ceil(shape[0] / b)`` cells on both axes: on an image
    higher than wide it meets a cell with no pixels and crashes (the original indexes the
    scalar NaN that ``np.mean([])`` returns); wider than high, the right part is left as is.

    Raises:
        IndexError: An image higher than wide.
    """
    out = img.copy()
    scale = 255 * m / (block * block * epsilon)
    cells = math.ceil(img.shape[0] / block)
    for i in range(cells):
        for j in range(cells):
            cell = img[i * block : (i + 1) * block, j * block : (j + 1) * block]
            if cell.size == 0:
                raise IndexError(f"SEBA DP-Pix loops over shape[0]={img.shape[0]} on both axes: "
                                 f"no column {j * block} in a {img.shape[0]}x{img.shape[1]} image")
            colour = cell.reshape(-1, img.shape[2]).mean(axis=0) + rng.laplace(0.0, scale, img.shape[2])
            out[i * block : (i + 1) * block, j * block : (j + 1) * block] = np.clip(colour, 0, 255)
    return out


def cv2_face_overlay(img, boxes, rng):
    """Face boxes filled by ``cv2.rectangle`` (as SEBA masks regions), coordinates truncated."""
    out = img.copy()
    for x0, y0, x1, y1 in boxes:
        if x0 < x1 and y0 < y1:
            cv2.rectangle(out, (int(x0), int(y0)), (int(x1), int(y1)), OVERLAY_MEAN, thickness=-1)
    return out


def copy_alone(img, boxes, rng):
    """The image copied, its boxes left as they are: what any face_overlay returning new images does at least."""
    return img.copy()


# --- PIL --------------------------------------------------------------------------------


def pil_pixelate(img, boxes, rng, block):
    """Pillow BOX resize to the cell grid, NEAREST back."""
    return BM.pil_pixelate(img, block)


def pil_blur(img, boxes, rng, radius):
    """Pillow ``ImageFilter.GaussianBlur(radius)``."""
    return BM.pil_blur(img, radius)


def pil_face_overlay(img, boxes, rng):
    """Face boxes filled by ``ImageDraw.rectangle`` in the ILSVRC mean colour."""
    return BM.pil_face_overlay(img, boxes)


def pil_face_blur(img, boxes, rng, measure):
    """The ImageNet authors' face blur (:func:`bench.testing.references.authors_face_blur`)."""
    return authors_face_blur(img, boxes, measure=measure)


def peers_for(name: str, params: dict) -> list[Peer]:
    """Returns the peers of a mechanism at its parameters (cv2 ones only when cv2 imports).

    Args:
        name: Registered mechanism name.
        params: The mechanism's parameters (all those the peers need, e.g. ``block``).
    """
    p = dict(mechanisms.get(name)(**params).config)  # with the defaults filled in
    cv = cv2 is not None
    table: dict[str, list[Peer | None]] = {
        "pixelate": [
            Peer("seeds", "numpy loop over cells", seeds_pixelate, {"block": p.get("block")}),
            Peer("fewshot", "avg_pool2d grid + fill", fewshot_pixelate, {"block": p.get("block")}),
            cv and Peer("SEBA", "cv2 INTER_AREA + NEAREST", seba_pixelate, {"block": p.get("block")}, "exact",
                        "INTER_AREA rounds half-way means to even, PrivBench half up"),
            Peer("PIL", "BOX + NEAREST", pil_pixelate, {"block": p.get("block")}, "exact",
                 "BOX resizes rows, then columns, rounding to 8 bits in between"),
        ],
        "blur": [
            Peer("PIL", "GaussianBlur", pil_blur, {"radius": p.get("radius")}),
            cv and Peer("SEBA", "cv2.GaussianBlur", seba_blur, {"radius": p.get("radius")}, "different",
                        "sampled Gaussian kernel, reflect-101 borders; PIL: 3 box passes, 8-bit rounding"),
        ],
        "gaussian_noise": [
            Peer("seeds", "numpy normal, clip, round", seeds_gaussian_noise, {"sigma": p.get("sigma")}, "distribution"),
            cv and Peer("SEBA", "cv2.randn uint8 + cv2.add", seba_gaussian_noise, {"sigma": p.get("sigma")}, "different",
                        "noise drawn into uint8: negative draws become 0, mean +sigma/sqrt(2 pi)"),
        ],
        "dp_pix": [
            Peer("seeds", "numpy loop over cells", seeds_dp_pix, dict(p), "distribution"),
            Peer("fewshot", "avg_pool2d grid + Laplace + fill", fewshot_dp_pix, dict(p), "distribution"),
            Peer("SEBA", "loop over cells, no C", seba_dp_pix, dict(p), "different",
                 "Laplace scale without the channel factor C (1/C of the noise), truncates, square images only"),
        ],
        "image_dp": [Peer("seeds", "numpy loop over cells", seeds_image_dp, dict(p), "distribution")],
        "face_blur": [Peer("PIL", "authors' face blur", pil_face_blur, {"measure": p.get("measure", "diagonal")})],
        "face_overlay": [
            Peer("PIL", "ImageDraw.rectangle", pil_face_overlay),
            cv and Peer("SEBA", "cv2.rectangle", cv2_face_overlay),
            Peer("bound", "copy alone, boxes not filled", copy_alone, {}, "different",
                 "the memory traffic of any overlay that returns new images, without its fill"),
        ],
    }
    return [peer for peer in table.get(name, []) if peer]


# --- agreement ---------------------------------------------------------------------------


def cell_noise(out: np.ndarray, grey: float, block: int) -> np.ndarray:
    """Returns one sample per cell and channel of ``out - grey``: the noise a DP-Pix added.

    Args:
        out: Outputs [N, H, W, C] of a mid-grey input.
        grey: The input's constant value.
        block: Cell side b.
    """
    return out[:, ::block, ::block].astype(np.float64).ravel() - grey


def agreement(peer: Peer, name: str, params: dict, ours: np.ndarray, theirs: np.ndarray,
              inputs: np.ndarray) -> tuple[str, bool]:
    """Compares a peer's outputs with PrivBench's on the same images.

    Args:
        peer: The peer.
        name: The mechanism.
        params: The mechanism's full configuration.
        ours: PrivBench's outputs [N, H, W, C].
        theirs: The peer's outputs [N, H, W, C].
        inputs: The images [N, H, W, C] both were given.

    Returns:
        (what the check found, whether the outputs are identical). Noise is not compared
        value by value; for pixelate it says how many differences are at half-way cell means.
    """
    if peer.kind == "distribution":
        return "same distribution (see noise table)", False
    if peer.kind == "different" and name in ("gaussian_noise", "dp_pix", "image_dp"):
        return peer.note, False
    diff = np.abs(ours.astype(np.int16) - theirs.astype(np.int16))
    if not diff.any():
        return "exact", True
    text = f"{np.count_nonzero(diff) / diff.size:.2%} of values differ (max {diff.max()})"
    b = params.get("block", 0)
    if name == "pixelate" and inputs.shape[1] % b == 0 and inputs.shape[2] % b == 0:
        n, h, w, c = inputs.shape
        sums = inputs.reshape(n, h // b, b, w // b, b, c).sum(axis=(2, 4), dtype=np.int64)
        half = np.stack([fill_cells(s, b, h, w) for s in (sums % (b * b) * 2 == b * b)])
        at_half = np.count_nonzero((diff > 0) & half) / np.count_nonzero(diff)
        text += f", {at_half:.0%} of them at cell means of k+1/2"
    return f"{text}: {peer.note}" if peer.note else text, False


def noise_rows(names: list[str], dp_pix: dict, sigma: float, labels: dict[str, str], count: int = 48,
               size: int = 64) -> list[tuple]:
    """Measures the noise PrivBench and every peer add to mid-grey images (few values meet a clip).

    Args:
        names: Mechanisms selected; dp_pix and gaussian_noise are measured when among them.
        dp_pix: DP-Pix's parameters (epsilon, block, m).
        sigma: gaussian_noise's standard deviation.
        labels: Mechanism -> the name its rows get.
        count: Images; size: their side.

    Returns:
        Rows (mechanism, implementation, mean, std, expected mean, expected std, check, note):
        dp_pix one value per cell, with the expected std sqrt(2) times the Laplace scale.
    """
    grey = np.full((count, size, size, 3), 128, np.uint8)
    batch = torch.from_numpy(grey).permute(0, 3, 1, 2).contiguous()
    streams = Streams.for_images(0, "benchmark/noise", count)
    std_c, std_1 = (math.sqrt(2) * dp_pix_scale(dp_pix["epsilon"], dp_pix["block"], dp_pix["m"], c) for c in (3, 1))
    expected = {("dp_pix", "SEBA"): (-0.5, std_1, f"{std_1:.2f} without C; {std_c:.2f} due; truncates"),
                ("gaussian_noise", "SEBA"): (sigma / math.sqrt(2 * math.pi), sigma * math.sqrt(0.5 - 1 / (2 * math.pi)),
                                             "max(0, N(0, sigma^2)): mean sigma/sqrt(2 pi)")}
    rows = []
    for name, params, theory in [("dp_pix", dp_pix, (0.0, std_c)), ("gaussian_noise", {"sigma": sigma}, (0.0, sigma))]:
        if name not in names:
            continue
        outs = {"PrivBench": mechanisms.get(name)(**params).apply(batch, generator=streams).permute(0, 2, 3, 1).numpy()}
        for peer in peers_for(name, params):
            rng = np.random.default_rng(2)
            outs[peer.name] = np.stack([peer(img, [], rng) for img in grey])
        for who, out in outs.items():
            noise = cell_noise(out, 128, params["block"]) if name == "dp_pix" else out.astype(np.float64).ravel() - 128
            mean, std, note = expected.get((name, who), (*theory, ""))
            check = "ok" if abs(noise.std() / std - 1) < 0.05 and abs(noise.mean() - mean) < 0.05 * std + 0.6 else "OFF"
            rows.append((labels[name], who, f"{noise.mean():+.2f}", f"{noise.std():.2f}", f"{mean:+.2f}", f"{std:.2f}", check, note))
    return rows
