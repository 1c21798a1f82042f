"""Throughput of the batched mechanisms against per-image references, PIL and a plain copy.

    python benchmarks/mechanisms.py                       # 1,000 images of 3x128x64 and 3x224x224
    python benchmarks/mechanisms.py --sizes 128x64 --threads 1 --repeats 9
    python benchmarks/mechanisms.py --device cuda --n 10000   # batches on a GPU

For every mechanism and image size it prints images per second of

* ``torch``: the registered mechanism on one batch of ``--n`` images (median of
  ``--repeats`` runs, after a warm-up run);
* ``ref``: a per-image numpy implementation in the style of the papers' released code (one
  image at a time, a Python loop over cells), timed on ``--ref-images`` images;
* ``PIL``: Pillow, one image at a time, where Pillow has the operation;
* ``copy``: ``images.clone()`` of the batch, the memory-bandwidth ceiling;

(``torch`` and ``copy`` run on ``--device``; the per-image baselines always on the CPU)

and the ratios ``torch/ref``, ``torch/PIL`` and ``time/copy`` (how many plain copies of
the batch one mechanism call costs). Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# Run as a script, this file's folder comes first on sys.path and its name would shadow
# the ``mechanisms`` package.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFilter

from bench.core.registry import mechanisms
from bench.randomness.streams import Streams
from bench.system import kernels
from bench.testing.mechanisms import synthetic_boxes
from bench.testing.references import authors_face_blur
from mechanisms._dp import dp_pix_scale, image_dp_scale

SETTINGS: dict[str, dict] = {
    "identity": {},
    "pixelate": {"block": 4},
    "blur": {"radius": 2.0},
    "gaussian_noise": {"sigma": 40.0},
    "dp_pix": {"epsilon": 3.0, "block": 4, "m": 1},
    "image_dp": {"epsilon": 1e6, "block": 2, "colours": 32},
    "face_blur": {},
    "face_overlay": {"colour": "mean"},
}
"""Mechanism -> the parameters benchmarked (the papers' settings)."""


# --- per-image references in the style of the released code ----------------------------


def ref_pixelate(img: np.ndarray, b: int) -> np.ndarray:
    """Per-cell loop over an HxWxC image (as dp_pixel.py's ``pixelate``), then fill."""
    h, w, _ = img.shape
    out = np.empty_like(img)
    for top in range(0, h, b):
        for left in range(0, w, b):
            cell = img[top : top + b, left : left + b]
            out[top : top + b, left : left + b] = np.floor(cell.mean(axis=(0, 1)) + 0.5)
    return out


def ref_dp_pix(img: np.ndarray, epsilon: float, b: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """Per-cell pixelation, Laplace noise on the cell means, clip, round, fill."""
    h, w, c = img.shape
    scale = dp_pix_scale(epsilon, b, m, c)
    px = np.zeros((math.ceil(h / b), math.ceil(w / b), c))
    for i in range(px.shape[0]):
        for j in range(px.shape[1]):
            px[i, j] = img[i * b : (i + 1) * b, j * b : (j + 1) * b].mean(axis=(0, 1))
    noisy = np.clip(px + rng.laplace(0.0, scale, px.shape), 0, 255)
    cells = np.floor(noisy + 0.5).astype(np.uint8)
    return cells.repeat(b, 0).repeat(b, 1)[:h, :w]


def ref_image_dp(img: np.ndarray, epsilon: float, b: int, c: int, rng: np.random.Generator) -> np.ndarray:
    """Per-cell pixelation, quantisation, Laplace noise on the levels, clip, map back."""
    h, w, ch = img.shape
    levels = 256 // c
    px = np.zeros((math.ceil(h / b), math.ceil(w / b), ch))
    for i in range(px.shape[0]):
        for j in range(px.shape[1]):
            px[i, j] = np.floor(img[i * b : (i + 1) * b, j * b : (j + 1) * b].mean(axis=(0, 1)) + 0.5) // c
    noisy = px + rng.laplace(0.0, image_dp_scale(epsilon, w, h, b, c), px.shape)
    level = np.clip(np.floor(noisy + 0.5), 0, levels - 1)
    cells = np.minimum(level * c + c // 2, 255).astype(np.uint8)
    return cells.repeat(b, 0).repeat(b, 1)[:h, :w]


def ref_gaussian_noise(img: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """One image: add N(0, sigma^2) to every value, clip, round."""
    return np.floor(np.clip(img + rng.normal(0.0, sigma, img.shape), 0, 255) + 0.5).astype(np.uint8)


def pil_image(img: np.ndarray) -> Image.Image:
    return Image.fromarray(img)


def pil_blur(img: np.ndarray, radius: float) -> np.ndarray:
    return np.asarray(pil_image(img).filter(ImageFilter.GaussianBlur(radius)))


def pil_pixelate(img: np.ndarray, b: int) -> np.ndarray:
    """Box-downsample then nearest-upsample (edge cells differ from exact cell means)."""
    pil = pil_image(img)
    w, h = pil.size
    small = pil.resize((math.ceil(w / b), math.ceil(h / b)), Image.Resampling.BOX)
    return np.asarray(small.resize((w, h), Image.Resampling.NEAREST))


def pil_face_overlay(img: np.ndarray, boxes: list[list[float]]) -> np.ndarray:
    pil = pil_image(img)
    for x0, y0, x1, y1 in boxes:
        if x0 < x1 and y0 < y1:
            ImageDraw.Draw(pil).rectangle([x0, y0, x1, y1], fill=(124, 116, 104))
    return np.asarray(pil)


@dataclass
class Baselines:
    """Per-image implementations of one mechanism (None where there is none)."""

    ref: Callable[[np.ndarray, list[list[float]], np.random.Generator], np.ndarray] | None
    pil: Callable[[np.ndarray, list[list[float]]], np.ndarray] | None


def baselines(name: str, p: dict) -> Baselines:
    """Returns the reference and PIL implementations of a benchmarked mechanism."""
    table = {
        "identity": Baselines(lambda x, bx, rng: x.copy(), None),
        "pixelate": Baselines(lambda x, bx, rng: ref_pixelate(x, p.get("block", 4)), lambda x, bx: pil_pixelate(x, p.get("block", 4))),
        "blur": Baselines(None, lambda x, bx: pil_blur(x, p.get("radius", 2.0))),
        "gaussian_noise": Baselines(lambda x, bx, rng: ref_gaussian_noise(x, p.get("sigma", 40.0), rng), None),
        "dp_pix": Baselines(lambda x, bx, rng: ref_dp_pix(x, p["epsilon"], p["block"], p["m"], rng), None),
        "image_dp": Baselines(lambda x, bx, rng: ref_image_dp(x, p["epsilon"], p["block"], p["colours"], rng), None),
        "face_blur": Baselines(None, authors_face_blur),
        "face_overlay": Baselines(None, pil_face_overlay),
    }
    return table.get(name, Baselines(None, None))


# --- timing -----------------------------------------------------------------------------


def timed(fn: Callable[[], object], repeats: int, device: torch.device = torch.device("cpu")) -> float:
    """Returns the median wall time of ``repeats`` calls after one warm-up call.

    On CUDA every call is timed up to the end of its kernels.
    """
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def per_image_rate(fn: Callable[[np.ndarray, list[list[float]]], np.ndarray], images: np.ndarray, boxes: list) -> float:
    """Returns images per second of a per-image function over a list of HxWxC images."""
    fn(images[0], boxes[0])
    start = time.perf_counter()
    for img, bx in zip(images, boxes):
        fn(img, bx)
    return len(images) / (time.perf_counter() - start)


def make_batch(n: int, c: int, h: int, w: int) -> torch.Tensor:
    """Smooth random images: noise low-passed so that cells and blurs see structure."""
    g = torch.Generator().manual_seed(0)
    small = torch.randint(0, 256, (n, c, max(1, h // 8), max(1, w // 8)), generator=g, dtype=torch.uint8)
    big = torch.nn.functional.interpolate(small.float(), size=(h, w), mode="bilinear", align_corners=False)
    noise = torch.randint(-8, 9, (n, c, h, w), generator=g)
    return (big + noise).clamp(0, 255).to(torch.uint8)


@dataclass
class Row:
    name: str
    size: str
    torch_rate: float
    ref_rate: float | None
    pil_rate: float | None
    copies: float


def bench_size(
    names: list[str], n: int, c: int, h: int, w: int, repeats: int, ref_images: int, device: torch.device
) -> list[Row]:
    """Benchmarks every mechanism on one batch size."""
    cpu_images = make_batch(n, c, h, w)
    images = cpu_images.to(device)
    boxes = synthetic_boxes(n, h, w)
    streams = Streams.for_images(0, "benchmark", n, device=device)
    copy_time = timed(lambda: images.clone(), max(repeats, 9), device)
    subset = cpu_images[:ref_images].permute(0, 2, 3, 1).numpy()
    sub_boxes = [b.tolist() for b in boxes[:ref_images]]
    rows, path = [], kernels.choose(device, images.numel())
    for name in names:
        params = SETTINGS.get(name, {})
        mech = mechanisms.get(name)(**params)
        use = boxes if mech.uses_boxes else None
        seconds = timed(lambda: mech.apply(images, generator=streams, boxes=use), repeats, device)
        base = baselines(name, params)
        rng = np.random.default_rng(0)
        ref = per_image_rate(lambda x, bx: base.ref(x, bx, rng), subset, sub_boxes) if base.ref else None
        pil = per_image_rate(base.pil, subset, sub_boxes) if base.pil else None
        rows.append(Row(name, f"{c}x{h}x{w} ({path})", n / seconds, ref, pil, seconds / copy_time))
        print(f"  {c}x{h}x{w} {name:15s} {n / seconds:,.0f} img/s ({path} kernels)", file=sys.stderr, flush=True)
    return rows


def _fmt_rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:,.0f}"


def _fmt_ratio(a: float, b: float | None) -> str:
    return "-" if b is None else f"{a / b:,.1f}x"


def format_table(rows: list[Row]) -> str:
    """Returns the results as an aligned text table."""
    header = ("mechanism", "size", "torch img/s", "ref img/s", "torch/ref", "PIL img/s", "torch/PIL", "time/copy")
    body = [
        (r.name, r.size, _fmt_rate(r.torch_rate), _fmt_rate(r.ref_rate), _fmt_ratio(r.torch_rate, r.ref_rate),
         _fmt_rate(r.pil_rate), _fmt_ratio(r.torch_rate, r.pil_rate), f"{r.copies:,.1f}x")
        for r in rows
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    lines = ["  ".join(str(x).rjust(wd) if i > 1 else str(x).ljust(wd) for i, (x, wd) in enumerate(zip(line, widths))) for line in [header, *body]]
    lines.insert(1, "  ".join("-" * wd for wd in widths))
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=["128x64", "224x224"], help="HxW sizes (3 channels)")
    p.add_argument("--n", type=int, default=1000, help="images per batch")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per mechanism (median)")
    p.add_argument("--ref-images", type=int, default=20, help="images the per-image baselines are timed on")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--mechanisms", nargs="+", default=list(SETTINGS), help="mechanisms to run")
    p.add_argument("--device", default="cpu", help="device the batches run on (cpu, cuda, cuda:N)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}; batch {args.n} on {where} (kernels compiled from "
          f"{kernels.PAYBACK_VALUES:,} values where {device.type} compiles, BENCH_COMPILE); "
          f"per-image baselines on {args.ref_images} images")
    rows = []
    for size in args.sizes:
        h, w = (int(v) for v in size.lower().split("x"))
        rows += bench_size(args.mechanisms, args.n, 3, h, w, args.repeats, args.ref_images, device)
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
