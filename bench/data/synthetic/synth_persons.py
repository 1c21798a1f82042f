"""Synthetic pedestrians: a deterministic, Market-1501-shaped stand-in for person reID.

Every image is rendered in torch, vectorised over a batch: body parts are implicit shapes
(ellipses, boxes and tapered bands) evaluated on a 2x supersampled coordinate grid into
a part map, coloured from a per-image palette, shaded, and average-pooled to 128 x 64.

Identity is carried by clothing colours (upper, lower), the upper-body pattern (plain,
stripes, checks, logo), build and head size, hair (colour, length), and accessories
(backpack, shoulder bag, hat). Each of 6 cameras has its own scene, colour cast,
brightness, contrast, blur, noise, person scale and mix of viewpoints; the viewpoint
(front, back, side) changes what is visible: a backpack is a box from the back and from
the side but only straps from the front, a chest logo shows only from the front, the
face only from the front and side. Gender (male, female) and age (young, teenager,
adult, old) shape appearance the way they plausibly do, without determining it: hair
length, build, skirts, palette, head size, grey hair.

Splits mirror Market-1501 (see :mod:`bench.data.loaders.market1501`): half the identities
train (labels relabelled 0..K-1), the other half test; each test identity gives one
query image for each camera of a random non-empty subset of its cameras, and its other
images go to the gallery, together with junk images (pid -1: badly cropped, partial or
tiny renders) and distractors (pid 0: background only or people outside the identity
set). Pids are 1..n_ids; every identity is seen by at least 2 cameras and keeps at least
one gallery image in each, so every query has a cross-camera match.

This module is the dataset (options, splits, the cache); people and shots are drawn in
``_person_draw`` and painted by ``_person_render``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

import torch

from bench.core.registry import register_dataset
from bench.data.base import Dataset, ImageSet, Splits, cached_splits, fingerprint
from bench.data.loaders._loaders import check_options, from_payload, person_size, to_payload
from bench.data.loaders.market1501 import AGES, GENDERS
from bench.data.synthetic import _exact as ex
from bench.data.synthetic._person_draw import HEIGHT, WIDTH, _bernoulli, draw_people, draw_shots, junk_framing
from bench.data.synthetic._person_render import render_all
from bench.errors import BenchError
from bench.randomness.seeding import make_generator

#: Bump whenever the rendered images or the splits change for the same options.
GENERATOR_VERSION = 2

NUM_CAMS = 6
JUNK_PID = -1
DISTRACTOR_PID = 0

DEFAULTS: dict[str, Any] = {
    "n_ids": 500,
    "per_id": 16,
    "seed": 0,
    "junk_frac": 0.2,
    "distractor_frac": 0.15,
    "size": None,
}
MIN_IDS = 4
MIN_PER_ID = 4


def plan(
    n_ids: int, per_id: int, junk_frac: float, distractor_frac: float, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    """Assigns identities to splits and images to cameras, queries, junk and distractors.

    Returns:
        ``pid`` [N] (1..n_ids, -1 junk, 0 distractor), ``cam`` [N], ``split`` [N]
        (0 train, 1 query, 2 gallery), ``kind`` [N] (0 identity, 1 junk, 2 distractor
        person, 3 background only).
    """
    order = torch.randperm(n_ids, generator=gen) + 1
    train_ids = set(order[: (n_ids + 1) // 2].tolist())
    pids, cams, splits = [], [], []
    for pid in range(1, n_ids + 1):
        k = int(torch.randint(2, min(NUM_CAMS, per_id // 2) + 1, (1,), generator=gen))
        id_cams = torch.randperm(NUM_CAMS, generator=gen)[:k]
        counts = torch.full((k,), 2) + torch.bincount(
            torch.randint(0, k, (per_id - 2 * k,), generator=gen), minlength=k
        )
        n_query = int(torch.randint(1, k + 1, (1,), generator=gen))
        for j in range(k):
            for i in range(int(counts[j])):
                pids.append(pid)
                cams.append(int(id_cams[j]))
                if pid in train_ids:
                    splits.append(0)
                else:
                    splits.append(1 if (j < n_query and i == 0) else 2)
    pid = torch.tensor(pids, dtype=torch.int64)
    cam = torch.tensor(cams, dtype=torch.int64)
    split = torch.tensor(splits, dtype=torch.int64)
    kind = torch.zeros_like(pid)

    n_gallery = int((split == 2).sum())
    n_junk = round(junk_frac * n_gallery)
    n_distractor = round(distractor_frac * n_gallery)
    extra_cam = torch.randint(0, NUM_CAMS, (n_junk + n_distractor,), generator=gen)
    extra_kind = torch.cat([
        torch.ones(n_junk, dtype=torch.int64),
        torch.where(_bernoulli(0.5, n_distractor, gen), 2, 3),
    ])
    extra_pid = torch.cat([torch.full((n_junk,), JUNK_PID), torch.full((n_distractor,), DISTRACTOR_PID)])
    return {
        "pid": torch.cat([pid, extra_pid]),
        "cam": torch.cat([cam, extra_cam]),
        "split": torch.cat([split, torch.full((n_junk + n_distractor,), 2)]),
        "kind": torch.cat([kind, extra_kind]),
    }


def generate(options: Mapping[str, Any]) -> tuple[dict[str, ImageSet], dict[str, Any]]:
    """Generates the three splits for resolved options (see :class:`SynthPersons`)."""
    seed = options["seed"]
    started = time.perf_counter()
    layout = plan(options["n_ids"], options["per_id"], options["junk_frac"], options["distractor_frac"],
                  make_generator(seed, "synth_persons", "plan"))
    n = layout["pid"].numel()
    identities = draw_people(options["n_ids"], make_generator(seed, "synth_persons", "identities"))
    strangers = draw_people(n, make_generator(seed, "synth_persons", "strangers"))
    kind = layout["kind"]
    is_identity = kind == 0
    id_index = (layout["pid"] - 1).clamp(min=0)
    people = {k: torch.where(_per_row(is_identity, v), v[id_index], strangers[k]) for k, v in identities.items()}
    shots = draw_shots(layout["cam"], make_generator(seed, "synth_persons", "shots"))
    junk = kind == 1
    if junk.any():
        junk_shots = {k: v[junk] for k, v in shots.items()}
        junk_framing(junk_shots, make_generator(seed, "synth_persons", "junk"))
        for k, v in junk_shots.items():
            shots[k][junk] = v
    shots["present"] = kind != 3

    images = render_all(people, shots, seed)
    size = options["size"]
    if size is not None and tuple(size) != (HEIGHT, WIDTH):
        images = _resize(images, tuple(size))

    attrs = {"gender": torch.where(is_identity, people["female"].long(), -1),
             "age": torch.where(is_identity, people["age"].long(), -1)}
    sets = {}
    for index, name in enumerate(("train", "query", "gallery")):
        sel = (layout["split"] == index).nonzero().flatten()
        sel = sel[torch.argsort(layout["pid"][sel] * NUM_CAMS + layout["cam"][sel], stable=True)]
        pids = layout["pid"][sel]
        labels = torch.searchsorted(torch.unique(pids), pids) if name == "train" else pids
        sets[name] = ImageSet(
            images=images[sel].contiguous(),
            labels=labels,
            attrs={k: v[sel] for k, v in attrs.items()},
            attr_names={"gender": list(GENDERS), "age": list(AGES)},
            cams=layout["cam"][sel],
        )
    info = {
        "generator_version": GENERATOR_VERSION,
        "options": dict(options),
        "images": {name: len(s) for name, s in sets.items()},
        "identities": {"train": (options["n_ids"] + 1) // 2, "test": options["n_ids"] // 2},
        "junk": int(junk.sum()),
        "distractors": int((kind >= 2).sum()),
        "seconds": round(time.perf_counter() - started, 2),
    }
    return sets, info


def _per_row(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return mask.view(-1, *([1] * (like.dim() - 1)))


def _resize(images: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    out = []
    for start in range(0, len(images), 1024):
        x = images[start:start + 1024].float()
        out.append(ex.resize_antialias(x, size).round_().clamp_(0, 255).to(torch.uint8))
    return torch.cat(out)


def resolve_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Validates options and fills in defaults.

    Raises:
        BenchError: An unknown option or an invalid value.
    """
    check_options("synth_persons", options, tuple(DEFAULTS))
    out = {**DEFAULTS, **options}
    for key, low in (("n_ids", MIN_IDS), ("per_id", MIN_PER_ID), ("seed", 0)):
        value = out[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise BenchError(f"synth_persons: option {key} must be an int >= {low}, got {value!r}")
    for key in ("junk_frac", "distractor_frac"):
        value = out[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise BenchError(f"synth_persons: option {key} must be a number in [0, 1], got {value!r}")
        out[key] = float(value)
    if out["size"] is not None:
        out["size"] = list(person_size(out["size"], (HEIGHT, WIDTH)))
    return out


@register_dataset("synth_persons")
class SynthPersons(Dataset):
    """Procedural pedestrians seen by 6 cameras, split like Market-1501 (synthetic).

    Options:
        n_ids: Number of identities (default 500; at least 4); half train, half test.
        per_id: Images per identity (default 16; at least 4), spread over 2 to 6 cameras.
        seed: Generator seed (default 0).
        junk_frac: Junk images (pid -1) per gallery image of an identity (default 0.2).
        distractor_frac: Distractors (pid 0) per gallery image of an identity (default 0.15).
        size: Output (h, w) (default the rendered 128 x 64).
    """

    synthetic = True
    layout = "nothing: generated on the fly (synthetic pedestrians, no files needed)"
    version = GENERATOR_VERSION
    description = "Synthetic pedestrians for reID: clothes, accessories, 6 cameras, gender/age attributes"

    def inspect(self, root: Path | None, options: Mapping[str, Any]) -> None:
        """Checks the options (the data is generated)."""
        resolve_options(options)

    def load(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> Splits:
        resolved = resolve_options(options)
        fp = fingerprint(self.name, GENERATOR_VERSION, sorted(resolved.items()))

        def build() -> dict[str, Any]:
            sets, info = generate(resolved)
            return to_payload(sets, info)

        payload, content = cached_splits(cache_dir, self.name, fp, build)
        return Splits(self.name, from_payload(payload), content, synthetic=True, info=payload["info"])

