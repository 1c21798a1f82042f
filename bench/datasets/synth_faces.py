"""Synthetic faces: a deterministic, procedurally rendered face-identity dataset.

An identity is a fixed draw of face geometry, colouring, hair, facial hair and marks; an
image of it adds nuisances (pose with a small yaw, expression, lighting, background clutter,
glasses, occluders, sensor noise) whose sizes all scale with the ``variation`` option.
Faces are implicit shapes evaluated on a 2x supersampled grid, batched over images, then
average-pooled. Coordinates inside a face are "face units": the face half-width is 1, the
face centre is the origin, v points down.
"""

from __future__ import annotations

import contextlib
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import torch
import torch.nn.functional as F

from bench.datasets.base import DataShape, Dataset, ImageSet, Splits, SplitShape, cached_splits, fingerprint
from bench.errors import BenchError
from bench.registry import register_dataset
from bench.seeding import derive_seed, make_generator

GENERATOR_VERSION = 1

_CHUNK = 32
_FACE_SCALE = 0.55
_FACE_Y = 0.0
_UPPER, _LOWER = 1.22, 1.15

_DEFAULTS: dict[str, Any] = {
    "n_ids": 300,
    "per_id": 20,
    "size": 64,
    "split_ids": None,
    "variation": 1.0,
    "seed": 0,
}
_SPLIT_FRACTIONS = (200 / 300, 40 / 300)

ATTR_NAMES = {
    "gender": ["female", "male"],
    "age_group": ["young", "middle", "old"],
    "skin_tone": ["light", "medium-light", "medium-dark", "dark"],
    "glasses": ["no", "yes"],
}

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


@register_dataset("synth_faces")
class SynthFaces(Dataset):
    """Procedural faces with identity, gender, age group, skin tone and face boxes."""

    synthetic = True
    layout = "nothing: faces are generated (options n_ids, per_id, size, split_ids, variation, seed)"
    description = "synthetic faces: identity-disjoint train/val/test splits of procedurally rendered faces"

    def inspect(self, root: Path | None, options: Mapping[str, Any]) -> DataShape:
        """Returns the shape the options imply: every identity has ``per_id`` images."""
        opts = resolve_options(options)
        return {name: SplitShape((opts["per_id"],) * n) for name, n in zip(("train", "val", "test"), opts["split_ids"])}

    def load(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> Splits:
        """Generates (or reads from the cache) the train/val/test splits.

        Args:
            root: Ignored; the data is generated.
            options: n_ids, per_id, size, split_ids (train, val, test identity counts),
                variation (scale of every per-image nuisance) and seed (the dataset's own).
            cache_dir: The splits are cached under ``cache_dir/synth_faces``.

        Raises:
            BenchError: An option is unknown or out of range.
        """
        opts = resolve_options(options)
        key = fingerprint("synth_faces", GENERATOR_VERSION, sorted(opts.items()))
        data, content = cached_splits(cache_dir, "synth_faces", key, lambda: generate(**opts))
        sets = {name: _image_set(data, name) for name in ("train", "val", "test")}
        info = {
            "source": f"procedural faces (generator version {GENERATOR_VERSION})",
            "options": opts,
            "n_images": {name: len(s) for name, s in sets.items()},
            "n_ids": dict(zip(("train", "val", "test"), opts["split_ids"])),
        }
        return Splits(dataset=self.name, sets=sets, fingerprint=content, synthetic=True, info=info)


    def load_public(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> ImageSet:
        """Renders public faces: as many new identities as the train split, never released.

        They come from their own seed, so they are other people than every split's; their
        labels follow the dataset's (``n_ids``, ``n_ids + 1``, ...).
        """
        opts = resolve_options(options)
        count = opts["split_ids"][0]
        public = {**opts, "n_ids": count, "split_ids": (count, 0, 0), "seed": derive_seed(opts["seed"], "public")}
        key = fingerprint("synth_faces-public", GENERATOR_VERSION, sorted(opts.items()))
        data, _ = cached_splits(cache_dir, "synth_faces", key, lambda: generate(**public))
        images = _image_set(data, "train")
        return replace(images, labels=images.labels + opts["n_ids"])


def resolve_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Validates loader options and fills in defaults.

    ``split_ids`` defaults to 2/3, 2/15 and the rest of ``n_ids`` (200/40/60 of 300).

    Raises:
        BenchError: An option is unknown or out of range.
    """
    unknown = set(options) - set(_DEFAULTS)
    if unknown:
        raise BenchError(f"synth_faces: unknown option(s) {sorted(unknown)}; valid: {sorted(_DEFAULTS)}")
    opts = {**_DEFAULTS, **options}
    try:
        n_ids, per_id, size = int(opts["n_ids"]), int(opts["per_id"]), int(opts["size"])
        variation, seed = float(opts["variation"]), int(opts["seed"])
    except (TypeError, ValueError) as exc:
        raise BenchError(f"synth_faces: bad option value ({exc})") from None
    if n_ids < 1 or per_id < 1:
        raise BenchError("synth_faces: n_ids and per_id must be >= 1")
    if size < 32:
        raise BenchError(f"synth_faces: size must be >= 32, got {size}")
    if not 0.0 <= variation <= 4.0:
        raise BenchError(f"synth_faces: variation must be in [0, 4], got {variation}")
    return {
        "n_ids": n_ids,
        "per_id": per_id,
        "size": size,
        "split_ids": _split_ids(opts["split_ids"], n_ids),
        "variation": variation,
        "seed": seed,
    }


def _split_ids(split_ids: Any, n_ids: int) -> tuple[int, int, int]:
    if split_ids is None:
        train = round(n_ids * _SPLIT_FRACTIONS[0])
        val = min(round(n_ids * _SPLIT_FRACTIONS[1]), n_ids - train)
        return train, val, n_ids - train - val
    try:
        counts = tuple(int(c) for c in split_ids)
    except (TypeError, ValueError):
        raise BenchError(f"synth_faces: split_ids must be three integers, got {split_ids!r}") from None
    if len(counts) != 3 or min(counts) < 0 or sum(counts) != n_ids:
        raise BenchError(f"synth_faces: split_ids {counts} must be three counts >= 0 summing to n_ids={n_ids}")
    return counts  # type: ignore[return-value]


def _image_set(data: dict[str, Any], split: str) -> ImageSet:
    lo, hi = data["bounds"][split]
    return ImageSet(
        images=data["images"][lo:hi],
        labels=data["labels"][lo:hi],
        attrs={k: v[lo:hi] for k, v in data["attrs"].items()},
        attr_names={k: list(v) for k, v in ATTR_NAMES.items()},
        boxes=list(data["boxes"][lo:hi].unsqueeze(1).unbind(0)),
    )


def generate(
    n_ids: int,
    per_id: int,
    size: int,
    split_ids: tuple[int, int, int],
    variation: float,
    seed: int,
) -> dict[str, Any]:
    """Renders the whole dataset.

    Images are ordered split by split (train, val, test), identity by identity.

    Args:
        n_ids: Number of identities.
        per_id: Images per identity.
        size: Image side in pixels.
        split_ids: Identity counts of train, val and test.
        variation: Scale of every per-image nuisance (0 = identical images per identity).
        seed: Seed of the dataset.

    Returns:
        A dict with ``images`` (uint8 [N,3,size,size]), ``labels`` (int64 [N]), ``attrs``
        (name -> int64 [N]), ``boxes`` (float32 [N,4]), ``centres`` (float32 [N,2], the
        face centre in pixels) and ``bounds`` (split -> (lo, hi)).
    """
    order = torch.randperm(n_ids, generator=make_generator(seed, "synth_faces", "splits"))
    ident = sample_identities(n_ids, make_generator(seed, "synth_faces", "identities"))
    ids = order.repeat_interleave(per_id)
    nuis = sample_nuisances(ids, ident, variation, make_generator(seed, "synth_faces", "images"))
    renderer = _Renderer(size)
    images = torch.empty(len(ids), 3, size, size, dtype=torch.uint8)

    def render(start: int) -> None:
        stop = min(start + _CHUNK, len(ids))
        noise = make_generator(seed, "synth_faces", "noise", start)
        images[start:stop] = renderer.render(_gather(ident, nuis, ids, start, stop), noise)

    with _chunk_workers() as pool:
        for _ in pool.map(render, range(0, len(ids), _CHUNK)):
            pass
    bounds, lo = {}, 0
    for name, count in zip(("train", "val", "test"), split_ids):
        bounds[name] = (lo, lo + count * per_id)
        lo += count * per_id
    attrs = {
        "gender": ident["male"][ids].long(),
        "age_group": ident["age"][ids].long(),
        "skin_tone": ident["tone_group"][ids].long(),
        "glasses": nuis["glasses"].long(),
    }
    params = _gather(ident, nuis, ids, 0, len(ids))
    centres = torch.stack([params["tx"], _FACE_Y + params["ty"]], 1).add(1).mul(size / 2)
    return {
        "images": images,
        "labels": ids.long(),
        "attrs": attrs,
        "boxes": face_boxes(params, size),
        "centres": centres,
        "bounds": bounds,
    }


@contextlib.contextmanager
def _chunk_workers() -> Iterator[ThreadPoolExecutor]:
    """Threads that render whole chunks, with torch's intra-op parallelism off meanwhile.

    The renderer issues many small tensor ops; running chunks side by side scales better
    than splitting each op, and does not stall when the cores are shared (spinning
    intra-op workers slow down by an order of magnitude then). Each chunk is independent,
    so the output does not depend on the number of threads.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(threads, 8))) as pool:
            yield pool
    finally:
        torch.set_num_threads(threads)


def _gather(ident: dict[str, torch.Tensor], nuis: dict[str, torch.Tensor], ids: torch.Tensor, start: int, stop: int):
    chunk = ids[start:stop]
    out = {k: v[chunk] for k, v in ident.items()}
    out.update({k: v[start:stop] for k, v in nuis.items()})
    return out


class _Draw:
    """Sequential draws of n values from one generator."""

    def __init__(self, n: int, generator: torch.Generator):
        self.n, self.g = n, generator

    def uniform(self, lo: float = 0.0, hi: float = 1.0, cols: int | None = None) -> torch.Tensor:
        shape = (self.n,) if cols is None else (self.n, cols)
        return lo + (hi - lo) * torch.rand(shape, generator=self.g)

    def normal(self, cols: int | None = None) -> torch.Tensor:
        shape = (self.n,) if cols is None else (self.n, cols)
        return torch.randn(shape, generator=self.g)

    def gauss(self, mean: float, std: float, lo: float, hi: float) -> torch.Tensor:
        return (mean + std * self.normal()).clamp(lo, hi)

    def choice(self, probs: torch.Tensor) -> torch.Tensor:
        return torch.multinomial(probs, 1, replacement=True, generator=self.g).squeeze(1)


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
    q["scale"] = torch.exp((0.06 * v * z["scale"]).clamp(-0.3, 0.3))
    q["yaw"] = (0.35 * v * z["yaw"]).clamp(-0.9, 0.9)
    q["smile"] = (ident["smile0"][ids] + 0.45 * v * z["smile"]).clamp(-1, 1)
    q["open"] = 0.07 * (0.8 * v * z["open"] - 0.3).clamp(0, 1)
    q["eye_open"] = (1 - 0.5 * (v * z["eye_open"].abs() - 0.7).clamp(0, 1.7)).clamp(0.12, 1)
    q["brow_raise"] = 0.04 * v * z["brow"]
    q["gaze_x"] = (0.3 * v * z["gaze_x"]).clamp(-0.6, 0.6)
    q["gaze_y"] = (0.2 * v * z["gaze_y"]).clamp(-0.5, 0.5)
    light = torch.stack([0.6 * v * z["light_x"], -0.3 + 0.3 * v * z["light_y"], torch.ones(len(ids))], 1)
    q["light"] = light / light.norm(dim=1, keepdim=True)
    q["ambient"] = (0.62 - 0.15 * v * z["ambient"].abs()).clamp(0.25, 0.62)
    q["grad"] = (0.22 * v * z["grad"]).clamp(-0.6, 0.6)
    q["grad_dir"] = 2 * math.pi * u["grad_dir"]
    q["intensity"] = torch.exp((0.18 * v * z["intensity"]).clamp(-0.7, 0.7))
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


def render_heads(params: dict[str, torch.Tensor], size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Renders heads (hair, neck, ears, face) without backdrop, clothes or camera: sprites for scenes.

    Args:
        params: Identity and nuisance parameters of B faces (as :func:`generate` gathers them
            from :func:`sample_identities` and :func:`sample_nuisances`); ``tx``, ``ty`` and
            ``scale`` place the face on the size x size canvas as in :func:`face_boxes`.
            Occluders are painted but not part of the coverage: turn them off (``occluder`` 0).
        size: Canvas side in pixels.

    Returns:
        Premultiplied colour [B, 3, size, size] in [0, 1] and coverage [B, 1, size, size]:
        composite with ``under * (1 - coverage) + colour``.
    """
    with torch.no_grad():
        return _Renderer(size).render_heads(params)


def gather_faces(ident: dict[str, torch.Tensor], nuis: dict[str, torch.Tensor],
                 ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Returns the parameters of faces of identities ``ids`` with their nuisances ``nuis`` (one row a face)."""
    return _gather(ident, nuis, ids, 0, len(ids))


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
    c, s = torch.cos(params["rot"]), torch.sin(params["rot"])
    a = params["fw"]
    top, bottom = _UPPER * params["fh"], _LOWER * params["fh"]
    b = (top + bottom) / 2
    cu, cv = 0.06 * params["yaw"], (bottom - top) / 2
    cx = params["tx"] + k * (c * cu - s * cv)
    cy = _FACE_Y + params["ty"] + k * (s * cu + c * cv)
    hw = k * torch.sqrt((a * c) ** 2 + (b * s) ** 2)
    hh = k * torch.sqrt((a * s) ** 2 + (b * c) ** 2)
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
    return torch.addcmul(x * x, y, y).sqrt_().sub_(1).mul_(_min(a, b))


def _thin_ellipse(du: torch.Tensor, dv: torch.Tensor, a: Any, b: Any) -> torch.Tensor:
    """Signed distance to an ellipse, first-order accurate also when it is very flat."""
    x, y = du / a, dv / b
    r = torch.addcmul(x * x, y, y).sqrt_()
    gx, gy = x / a, y / b
    grad = torch.addcmul(gx * gx, gy, gy).sqrt_().add_(1e-6)
    return (r - 1).mul_(r).div_(grad)


def _segment(du: torch.Tensor, dv: torch.Tensor, x0: Any, y0: Any, x1: Any, y1: Any) -> torch.Tensor:
    """Distance to the segment (x0, y0)-(x1, y1)."""
    bx, by = x1 - x0, y1 - y0
    px, py = du - x0, dv - y0
    h = ((px * bx + py * by) / (bx * bx + by * by + 1e-9)).clamp_(0, 1)
    ex, ey = px - bx * h, py - by * h
    return torch.addcmul(ex * ex, ey, ey).sqrt_()


def _mirror(u: torch.Tensor, centre: torch.Tensor):
    """Folds the face at a vertical line: returns (|u - centre|, side of each pixel)."""
    d = u - centre
    return d.abs(), torch.sign(d)


def _pose(p: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Per-image (scale, cos, sin, x, y) of the face frame in normalised image coordinates."""
    k = _FACE_SCALE * p["scale"]
    return k, torch.cos(p["rot"]), torch.sin(p["rot"]), p["tx"], _FACE_Y + p["ty"]


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

    _HALF = torch.tensor(0.5)

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
            sd = F.interpolate(sd.unsqueeze(1), scale_factor=2, mode="bilinear", align_corners=False).squeeze(1)
        m = torch.addcmul(self._HALF, sd, self.scale, value=-1.0 / soft).clamp_(0, 1)
        if alpha is not None:
            m.mul_(alpha)
        self.rgb.lerp_(colour if colour.dim() == 4 else _c(colour), m.unsqueeze(1))
        if cover:
            self.fg.copy_(torch.maximum(self.fg, m))
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
        return out.mul_(255).round_().clamp_(0, 255).to(torch.uint8)

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
        t = (_b(torch.cos(p["bg_dir"])) * x + _b(torch.sin(p["bg_dir"])) * y).mul_(0.5).add_(0.5)
        rgb = _c(p["bg0"]) + t.unsqueeze(1) * _c(p["bg1"] - p["bg0"])
        rgb = rgb + F.interpolate(p["bg_tex"], size=(n, n), mode="bilinear", align_corners=False)
        for i in range(_CLUTTER):
            dx, dy = x - _b(p["clutter_xy"][:, i, 0]), y - _b(p["clutter_xy"][:, i, 1])
            rx, ry = _b(p["clutter_r"][:, i, 0]), _b(p["clutter_r"][:, i, 1])
            box = torch.maximum(dx.abs() - rx, dy.abs() - ry)
            sd = torch.where(_b(p["clutter_round"][:, i]) > 0, _ellipse(dx, dy, rx, ry), box)
            m = (0.5 - sd * (n / 2)).clamp_(0, 1).mul_(_b(0.7 * p["clutter_on"][:, i]))
            rgb = rgb.lerp(_c(p["clutter_col"][:, i]), m.unsqueeze(1))
        rgb = F.interpolate(rgb.clamp_(0, 1), size=(self.size, self.size), mode="bilinear", align_corners=False)
        return F.interpolate(rgb, scale_factor=2, mode="nearest")

    def _clothes(self, f: _Frame) -> None:
        cv = f.window(-2.4, 2.4, 1.45, 4.5, coarse=True)
        cv.paint(_ellipse(cv.u, cv.v - 2.45, 2.1, 0.95), f.p["clothes"])

    def _hair_colour(self, cv: _Canvas, p: dict[str, torch.Tensor], shade: float) -> torch.Tensor:
        u, v = cv.fine_uv() if cv.coarse else (cv.u, cv.v)
        phase = torch.add(v, u, alpha=6.0).mul_(1.4)
        strands = phase.sub_(phase.floor()).sub_(0.5).abs_().mul_(0.28).add_(0.93)
        return _c(p["hair"] * shade) * strands.unsqueeze(1)

    def _outer_hair_sd(self, cv: _Canvas, p: dict[str, torch.Tensor]) -> torch.Tensor:
        u = cv.u - 0.08 * _b(p["yaw"])
        fw, fh = _b(p["fw"]), _b(p["fh"])
        vol = _b(p["hair_vol"] + p["hair_jit"]).clamp(min=0)
        sd = _ellipse(u, cv.v + 0.12 * fh, fw * 1.06 + vol, fh * 1.16 + vol)
        curl = _b(p["hair_curl"])
        if bool((curl > 0).any()):
            sd = sd + curl * torch.sin(u * 18) * torch.sin(cv.v * 18)
        bun = _b(p["hair_bun"])
        if bool((bun > 0).any()):
            sd = torch.minimum(sd, torch.sqrt(u * u + (cv.v + 1.32 * fh) ** 2) - bun)
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
        end = _b(p["hair_len"]) + 0.04 * torch.sin(u * 25)
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
        return f / torch.addcmul(gx * gx, gy, gy).sqrt_().add_(1e-6)

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
        mole = torch.sqrt((cv.u - _b(mu)) ** 2 + (cv.v - _b(p["mole_v"])) ** 2) - _b(p["mole_r"])
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
        prof = (1 - t2).sqrt_()
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
        r = torch.addcmul(gx * gx, gy, gy).sqrt_()
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
            bangs = _b(p["hair_bang_y"]) + 0.06 * u * u + 0.02 * torch.sin(u * 30)
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
        c, s = _b(torch.cos(p["occ_rot"])), _b(torch.sin(p["occ_rot"]))
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
        r2 = torch.addcmul(nu * nu, nv, nv)
        nz = (1 - r2).clamp_(min=0).sqrt_()
        light = p["light"]
        diffuse = (_b(light[:, 0]) * nu + _b(light[:, 1]) * nv + _b(light[:, 2]) * nz).clamp_(min=0)
        amb = _b(p["ambient"])
        shade = amb + (1.05 - amb) * diffuse
        fade = ((1.6 - r2) / 0.6).clamp_(0, 1)
        return (shade - 1).mul_(fade).add_(1).unsqueeze(1)

    def _camera(self, rgb: torch.Tensor, p: dict[str, torch.Tensor], noise: torch.Generator) -> torch.Tensor:
        """Global light gradient, exposure, colour temperature and sensor noise."""
        g = self.out_grid
        ramp = _b(torch.cos(p["grad_dir"])) * g.view(1, 1, -1) + _b(torch.sin(p["grad_dir"])) * g.view(1, -1, 1)
        gain = _b(p["intensity"]) * (1 + _b(p["grad"]) * ramp)
        t, tint = p["temp"], p["tint"]
        colour = torch.stack([1 + t + tint, 1 - 2 * tint, 1 - t + tint], 1)
        rgb = rgb * gain.unsqueeze(1) * _c(colour)
        rgb.add_(torch.randn(rgb.shape, generator=noise).mul_(_c(p["noise"].unsqueeze(1))))
        return rgb.clamp_(0, 1)
