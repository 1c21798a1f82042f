"""Synthetic faces: a deterministic, procedurally rendered face-identity dataset.

An identity is a fixed draw of face geometry, colouring, hair, facial hair and marks; an
image of it adds nuisances (pose with a small yaw, expression, lighting, background clutter,
glasses, occluders, sensor noise) whose sizes all scale with the ``variation`` option.
Faces are implicit shapes evaluated on a 2x supersampled grid, batched over images, then
average-pooled. Coordinates inside a face are "face units": the face half-width is 1, the
face centre is the origin, v points down.

This module is the dataset (options, splits, the cache); the parameters are drawn in
``_face_identity``, the geometry and canvas are ``_face_canvas``, the painting ``_face_render``.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from bench.core.registry import register_dataset
from bench.data.base import Dataset, DataShape, ImageSet, Splits, SplitShape, cached_splits, fingerprint
from bench.data.options import hint
from bench.data.synthetic._face_canvas import _FACE_Y, face_boxes
from bench.data.synthetic._face_identity import sample_identities, sample_nuisances
from bench.data.synthetic._face_render import _Renderer
from bench.errors import BenchError
from bench.randomness.seeding import derive_seed, make_generator

GENERATOR_VERSION = 2

_CHUNK = 32

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


@register_dataset("synth_faces")
class SynthFaces(Dataset):
    """Procedural faces with identity, gender, age group, skin tone and face boxes."""

    synthetic = True
    layout = "nothing: faces are generated (options n_ids, per_id, size, split_ids, variation, seed)"
    version = GENERATOR_VERSION
    class_split = "split_ids"
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
        raise BenchError(f"synth_faces: unknown option(s) {sorted(unknown)}{hint(sorted(unknown)[0], _DEFAULTS)}; "
                         f"valid: {sorted(_DEFAULTS)}")
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

def gather_faces(ident: dict[str, torch.Tensor], nuis: dict[str, torch.Tensor],
                 ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Returns the parameters of faces of identities ``ids`` with their nuisances ``nuis`` (one row a face)."""
    return _gather(ident, nuis, ids, 0, len(ids))


