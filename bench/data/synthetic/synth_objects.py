"""Synthetic objects: a deterministic, CIFAR-10-shaped stand-in (10 classes of procedural objects, 32 x 32).

Each class is a family of shapes (:data:`CLASSES`): disc, square, triangle, cross, ring,
stripes, star, two blobs, crescent and a checker patch. An image places one object of
its class at a random position, scale, aspect and rotation on a textured random
background (a two-colour gradient, low-frequency colour blotches and a grating), behind
which up to three small distractor shapes of any family lie, then adds a lighting
gradient and sensor noise. Colours are class-typical (each class has its own hue) but
overlap: the hue is jittered, and a fraction of objects take any hue at all, so colour
alone does not give the class. Every nuisance scales with ``variation``.

Shapes are signed distance functions evaluated on the pixel grid with a one-pixel
antialiasing ramp, vectorised over chunks of images. Image ``i`` of split ``s`` draws
all its randomness from streams keyed by (seed, s, i) (:func:`bench.randomness.seeding.image_seeds`),
and a chunk always renders the same images, so growing a split appends images without
changing the ones before, and every split is an independent sample of one distribution:
``train`` (the model's training records, the membership "members"), ``val``, ``test``
(the "non-members") and ``population`` (the adversary's data for reference models).
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from bench.core.registry import register_dataset
from bench.data.base import Dataset, DataShape, ImageSet, Splits, SplitShape, cached_splits, fingerprint
from bench.data.options import check_option_names, integer_option
from bench.data.synthetic import _exact as ex
from bench.errors import BenchError
from bench.randomness import rng
from bench.randomness.seeding import image_seeds

GENERATOR_VERSION = 2

CLASSES = ("disc", "square", "triangle", "cross", "ring", "stripes", "star", "two_blobs", "crescent", "checker")
SPLITS = ("train", "val", "test", "population")
N_CLASSES = len(CLASSES)
_CHUNK = 128
"""Images rendered together; a chunk always holds the same images, whatever the split's size."""
_DISTRACTORS = 3
_GRID = 4
_DEFAULTS: dict[str, Any] = {
    "n_train": 2000,
    "n_val": 500,
    "n_test": 1000,
    "n_population": 2000,
    "size": 32,
    "seed": 0,
    "variation": 1.0,
}

# Columns of the per-image uniform draws (the normal draws are hue jitter and the blotch grid).
_U_MAIN = dict(cx=0, cy=1, scale=2, rot=3, aspect=4, any_hue=5, hue=6, sat=7, val=8, hue2=9, val2=10, phase=11)
_U_BG = dict(h0=12, s0=13, v0=14, h1=15, s1=16, v1=17, grad=18, freq=19, angle=20, gphase=21, gamp=22, light=23,
             light_amp=24)
_U_DIS = 25  # then _DISTRACTORS x 9: present, family, cx, cy, scale, rot, hue, sat, val
_N_UNIFORM = 64
_N_NORMAL = 64


@register_dataset("synth_objects")
class SynthObjects(Dataset):
    """Procedural objects of 10 shape classes at 32 x 32: a CIFAR-10 stand-in (train / val / test / population).

    Options:
        n_train: Training images (default 2,000).
        n_val: Validation images (default 500).
        n_test: Test images (default 1,000).
        n_population: Images of the adversary's population split (default 2,000).
        size: Image side in pixels (default 32).
        seed: Seed of the dataset (default 0).
        variation: Scale of every nuisance, 0 to 4 (default 1; 0 renders one image per class: the
            class's shape, upright and centred in its hue, on a flat grey background).
    """

    synthetic = True
    layout = "nothing: objects are generated (options n_train, n_val, n_test, n_population, size, seed, variation)"
    version = GENERATOR_VERSION
    description = "synthetic objects: 10 shape classes on textured backgrounds, 32 x 32 (a CIFAR-10 stand-in)"

    def inspect(self, root: Path | None, options: Mapping[str, Any]) -> DataShape:
        """Returns the shapes the options imply: classes balanced within every block of ten images."""
        opts = resolve_options(options)
        return {s: SplitShape(_balanced_counts(opts[f"n_{s}"])) for s in SPLITS}

    def load(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> Splits:
        """Generates (or reads from the cache) the train / val / test / population splits.

        Args:
            root: Ignored; the data is generated.
            options: See the class docstring.
            cache_dir: The splits are cached under ``cache_dir/datasets/synth_objects``.

        Raises:
            BenchError: An option is unknown or out of range.
        """
        opts = resolve_options(options)
        key = fingerprint(self.name, GENERATOR_VERSION, sorted(opts.items()))
        data, content = cached_splits(cache_dir, self.name, key, lambda: generate(**opts))
        sets = {s: ImageSet(images=data[s]["images"], labels=data[s]["labels"]) for s in SPLITS}
        info = {
            "source": f"procedural objects (generator version {GENERATOR_VERSION})",
            "options": dict(opts),
            "classes": list(CLASSES),
            "n_images": {s: len(sets[s]) for s in SPLITS},
        }
        return Splits(dataset=self.name, sets=sets, fingerprint=content, synthetic=True, info=info)


def resolve_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Validates options and fills in defaults.

    Raises:
        BenchError: An unknown option (naming the valid ones) or a value out of range.
    """
    check_option_names("synth_objects", options, _DEFAULTS)
    opts = {**_DEFAULTS, **options}
    for key in ("n_train", "n_val", "n_test", "n_population", "size", "seed"):
        value = opts[key]
        opts[key] = integer_option("synth_objects", key, value, {"seed": 0, "size": 8}.get(key, 1),
                                   256 if key == "size" else None)
    variation = opts["variation"]
    if isinstance(variation, bool) or not isinstance(variation, (int, float)) or not 0.0 <= variation <= 4.0:
        raise BenchError(f"synth_objects: task.data.variation must be a number in [0, 4], got {variation!r}")
    opts["variation"] = float(variation)
    return opts


def generate(n_train: int, n_val: int, n_test: int, n_population: int, size: int, seed: int,
             variation: float) -> dict[str, dict[str, torch.Tensor]]:
    """Renders every split.

    Args:
        n_train: Training images.
        n_val: Validation images.
        n_test: Test images.
        n_population: Population images.
        size: Image side in pixels.
        seed: Seed of the dataset.
        variation: Scale of every nuisance.

    Returns:
        Split -> ``images`` (uint8 [N, 3, size, size]) and ``labels`` (int64 [N], class ids).
    """
    counts = {"train": n_train, "val": n_val, "test": n_test, "population": n_population}
    return {s: render_split(seed, s, counts[s], size, variation) for s in SPLITS}


def render_split(seed: int, split: str, count: int, size: int, variation: float) -> dict[str, torch.Tensor]:
    """Renders images ``0 .. count-1`` of one split (each a function of (seed, split, index) only).

    Returns:
        ``images`` uint8 [count, 3, size, size] and ``labels`` int64 [count].
    """
    with _one_thread():
        return _render_split(seed, split, count, size, variation)


def _render_split(seed: int, split: str, count: int, size: int, variation: float) -> dict[str, torch.Tensor]:
    padded = -(-count // _CHUNK) * _CHUNK
    labels = split_labels(seed, split, padded)
    words = rng.words(image_seeds(seed, f"synth_objects/{split}/params", padded),
                      rng.counters((_N_UNIFORM + _N_NORMAL,), "cpu"))
    u, z = rng.uniform(words[:, :_N_UNIFORM]), ex.normal_from_words(words[:, _N_UNIFORM:])
    noise_seeds = image_seeds(seed, f"synth_objects/{split}/noise", padded).tolist()
    images = torch.empty(count, 3, size, size, dtype=torch.uint8)
    for start in range(0, count, _CHUNK):
        part = slice(start, start + _CHUNK)
        chunk = render(labels[part], u[part], z[part], noise_seeds[part], size, variation)
        images[start : start + _CHUNK] = chunk[: count - start]
    return {"images": images, "labels": labels[:count].clone()}


def split_labels(seed: int, split: str, count: int) -> torch.Tensor:
    """Returns the class of images ``0 .. count-1``: every block of ten images holds each class once, shuffled."""
    blocks = -(-count // N_CLASSES)
    keys = rng.words(image_seeds(seed, f"synth_objects/{split}/labels", blocks), rng.counters((N_CLASSES,), "cpu"))
    return torch.argsort(keys, dim=1, stable=True).reshape(-1)[:count].long()


def _balanced_counts(n: int) -> tuple[int, ...]:
    q, r = divmod(n, N_CLASSES)
    return tuple([q + 1] * r + [q] * (N_CLASSES - r)) if n else ()


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Runs torch on one thread meanwhile, so results do not depend on how work is split between threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _hsv(h: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """HSV (each [n], hue in turns) -> RGB [n, 3]."""
    k = torch.tensor([5.0, 3.0, 1.0])
    t = torch.remainder(k + 6.0 * torch.remainder(h, 1.0).unsqueeze(1), 6.0)
    ramp = torch.minimum(torch.minimum(t, 4.0 - t), torch.ones(())).clamp(min=0.0)
    return v.unsqueeze(1) * (1.0 - s.unsqueeze(1) * ramp)


def _box(x: torch.Tensor, y: torch.Tensor, bx: float, by: float) -> torch.Tensor:
    qx, qy = x.abs() - bx, y.abs() - by
    outside = ex.sqrt(qx.clamp(min=0) ** 2 + qy.clamp(min=0) ** 2)
    return outside + torch.maximum(qx, qy).clamp(max=0)


def _triangle(x: torch.Tensor, y: torch.Tensor, r: float) -> torch.Tensor:
    """Signed distance to an equilateral triangle of half-side ``r`` centred at its centroid (Quilez)."""
    k = math.sqrt(3.0)
    px, py = x.abs() - r, -y + r / k
    fold = px + k * py > 0
    px, py = torch.where(fold, (px - k * py) / 2, px), torch.where(fold, (-k * px - py) / 2, py)
    px = px - px.clamp(-2 * r, 0)
    return -ex.sqrt(px * px + py * py) * torch.sign(py)


def shape_sdf(family: int, x: torch.Tensor, y: torch.Tensor,
              phase: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Returns a family's signed distance (object units, radius about 1) and its two-colour pattern (or None).

    Args:
        family: Index into :data:`CLASSES`.
        x: Object-frame coordinates [m, H, W].
        y: Object-frame coordinates [m, H, W].
        phase: [m, 1, 1] in [0, 1): where a pattern's stripes or squares start.
    """
    r = ex.sqrt(x * x + y * y)
    name = CLASSES[family]
    if name == "disc":
        return r - 0.8, None
    if name == "square":
        return _box(x, y, 0.68, 0.68), None
    if name == "triangle":
        return _triangle(x, y + 0.12, 0.95), None
    if name == "cross":
        return torch.minimum(_box(x, y, 0.9, 0.27), _box(x, y, 0.27, 0.9)), None
    if name == "ring":
        return (r - 0.66).abs() - 0.2, None
    if name == "stripes":
        period = 0.5
        t = torch.remainder(y + phase * period, period) - period / 2
        return torch.maximum(_box(x, y, 0.8, 0.8), t.abs() - 0.12), None
    if name == "star":
        c = torch.where(r > 0, x / r, 1.0).clamp_(-1, 1)  # cos(theta), theta = atan2(y, x)
        c2 = c * c
        cos5 = c * (5 + c2 * (16 * c2 - 20))  # cos(5 theta): the Chebyshev polynomial T5
        lobe = (0.5 + 0.5 * cos5) ** 2
        return 0.7 * (r - (0.42 + 0.5 * lobe)), None
    if name == "two_blobs":
        return torch.minimum(ex.sqrt((x - 0.45) ** 2 + y * y), ex.sqrt((x + 0.45) ** 2 + y * y)) - 0.42, None
    if name == "crescent":
        return torch.maximum(r - 0.8, 0.62 - ex.sqrt((x - 0.38) ** 2 + y * y)), None
    if name == "checker":
        w = 2 * math.pi / 0.7
        shift = 2 * math.pi * phase
        pattern = (0.5 + 4.0 * ex.sin(w * x + shift) * ex.sin(w * y + shift)).clamp(0, 1)
        return _box(x, y, 0.72, 0.72), pattern
    raise ValueError(f"unknown family {family}")


class _Objects:
    """One object per image of a chunk (some images may have none): pose, family and colours."""

    def __init__(self, present: torch.Tensor, family: torch.Tensor, cx: torch.Tensor, cy: torch.Tensor,
                 scale: torch.Tensor, rot: torch.Tensor, aspect: torch.Tensor, colour: torch.Tensor,
                 colour2: torch.Tensor, phase: torch.Tensor):
        self.present, self.family = present, family
        self.cx, self.cy, self.scale, self.aspect = cx, cy, scale, aspect
        self.sin, self.cos = ex.sincos(rot)
        self.colour, self.colour2, self.phase = colour, colour2, phase

    def paint(self, img: torch.Tensor, xs: torch.Tensor, pixel: float) -> None:
        """Composites the objects over ``img`` [n, 3, H, W] in place, family by family."""
        for f in range(N_CLASSES):
            idx = (self.present & (self.family == f)).nonzero().flatten()
            if not len(idx):
                continue

            def col(t: torch.Tensor) -> torch.Tensor:
                return t[idx].view(-1, 1, 1)

            dx, dy = xs.view(1, 1, -1) - col(self.cx), xs.view(1, -1, 1) - col(self.cy)
            s, a = col(self.scale), col(self.aspect)
            x = (col(self.cos) * dx + col(self.sin) * dy) / (s * a)
            y = (col(self.cos) * dy - col(self.sin) * dx) * a / s
            sd, pattern = shape_sdf(f, x, y, col(self.phase))
            alpha = (0.5 - sd * s / pixel).clamp(0, 1).unsqueeze(1)
            colour = self.colour[idx].view(-1, 3, 1, 1)
            if pattern is not None:
                colour = colour + (self.colour2[idx].view(-1, 3, 1, 1) - colour) * pattern.unsqueeze(1)
            img[idx] = img[idx] + (colour - img[idx]) * alpha


def render(labels: torch.Tensor, u: torch.Tensor, z: torch.Tensor, noise_seeds: list[int], size: int,
           variation: float) -> torch.Tensor:
    """Renders a chunk of images from their classes and per-image draws.

    Args:
        labels: int64 [n] classes.
        u: [n, 64] uniform draws of each image.
        z: [n, 64] normal draws of each image.
        noise_seeds: Seed of each image's pixel noise.
        size: Image side.
        variation: Scale of every nuisance.

    Returns:
        uint8 [n, 3, size, size].
    """
    n, v = len(labels), float(variation)
    xs = (torch.arange(size, dtype=torch.float32) + 0.5) * (2.0 / size) - 1.0
    pixel = 2.0 / size
    img = _background(u, z, xs, v)
    for d in range(_DISTRACTORS):
        c = _U_DIS + 9 * d
        present = u[:, c] < min(1.0, 0.25 * v)
        colour = _hsv(u[:, c + 6], 0.2 + 0.7 * u[:, c + 7], 0.25 + 0.7 * u[:, c + 8])
        _Objects(present, (u[:, c + 1] * N_CLASSES).long().clamp(max=N_CLASSES - 1),
                 1.7 * u[:, c + 2] - 0.85, 1.7 * u[:, c + 3] - 0.85, 0.16 + 0.14 * u[:, c + 4],
                 math.pi * (2 * u[:, c + 5] - 1), torch.ones(n), colour, 1 - colour, u[:, c + 4]).paint(img, xs, pixel)
    m = _U_MAIN
    hue = labels.float() / N_CLASSES + 0.04 * v * z[:, 0]
    hue = torch.where(u[:, m["any_hue"]] < min(1.0, 0.2 * v), u[:, m["hue"]], hue)
    w = min(v, 1.0)

    def spread(key: str, mid: float, half: float) -> torch.Tensor:
        return mid + half * w * (2 * u[:, m[key]] - 1)

    colour = _hsv(hue, spread("sat", 0.75, 0.25), spread("val", 0.725, 0.275))
    colour2 = _hsv(hue + spread("hue2", 0.5, 0.15), spread("sat", 0.6, 0.3), spread("val2", 0.55, 0.4))
    main = _Objects(
        torch.ones(n, dtype=torch.bool), labels,
        (0.32 * v * (2 * u[:, m["cx"]] - 1)).clamp(-0.55, 0.55),
        (0.32 * v * (2 * u[:, m["cy"]] - 1)).clamp(-0.55, 0.55),
        0.56 * (1 + 0.3 * v * (2 * u[:, m["scale"]] - 1)).clamp(0.45, 1.5),
        math.pi * min(v, 1.0) * (2 * u[:, m["rot"]] - 1),
        ex.exp((0.18 * v * (2 * u[:, m["aspect"]] - 1)).clamp(-0.4, 0.4)),
        colour, colour2, spread("phase", 0.5, 0.5),
    )
    main.paint(img, xs, pixel)
    b = _U_BG
    angle = 2 * math.pi * u[:, b["light"]]
    light = 0.3 * v * u[:, b["light_amp"]]
    img = img * (1 + light.view(-1, 1, 1) * _along(angle, xs)).unsqueeze(1)
    sigma = 0.035 * v
    if sigma > 0:
        bits = torch.empty(n, 3, size, size, dtype=torch.int64)
        g = torch.Generator()
        for i in range(n):
            g.manual_seed(int(noise_seeds[i]))
            bits[i] = ex.random_bits((3, size, size), g)
        img = img + sigma * ex.normal_from_bits(bits)
    return ex.to_uint8(img)


def _background(u: torch.Tensor, z: torch.Tensor, xs: torch.Tensor, v: float) -> torch.Tensor:
    """Two-colour gradient, low-frequency colour blotches and a grating: [n, 3, H, W] in [0, 1]-ish."""
    b, n, size = _U_BG, len(u), len(xs)
    c0 = _hsv(u[:, b["h0"]], 0.45 * u[:, b["s0"]], 0.15 + 0.75 * u[:, b["v0"]])
    c1 = _hsv(u[:, b["h1"]], 0.45 * u[:, b["s1"]], 0.15 + 0.75 * u[:, b["v1"]])
    c0, c1 = 0.5 + min(v, 1.0) * (c0 - 0.5), 0.5 + min(v, 1.0) * (c1 - 0.5)
    angle = 2 * math.pi * u[:, b["grad"]]
    t = 0.5 + 0.5 * _along(angle, xs)
    img = c0.view(-1, 3, 1, 1) + (c1 - c0).view(-1, 3, 1, 1) * t.unsqueeze(1)
    grid = z[:, 1 : 1 + 3 * _GRID * _GRID].reshape(n, 3, _GRID, _GRID)
    img = img + 0.08 * v * ex.resize_bilinear(grid, (size, size))
    freq = math.pi * (2 + 8 * u[:, b["freq"]])
    ga = math.pi * u[:, b["angle"]]
    wave = ex.sin(freq.view(-1, 1, 1) * _along(ga, xs) + 2 * math.pi * u[:, b["gphase"]].view(-1, 1, 1))
    return img + (0.06 * v * u[:, b["gamp"]]).view(-1, 1, 1, 1) * wave.unsqueeze(1)


def _along(angle: torch.Tensor, xs: torch.Tensor) -> torch.Tensor:
    """Returns each pixel's coordinate along a direction per image: [n, H, W] for angles [n] and pixel centres xs."""
    s, c = ex.sincos(angle)
    return c.view(-1, 1, 1) * xs.view(1, 1, -1) + s.view(-1, 1, 1) * xs.view(1, -1, 1)
