"""Synthetic scenes: a deterministic ImageNet stand-in of object classes with incidental people and faces.

The data layer of the ``classify_*`` benchmark that reproduces the ImageNet face-obfuscation
paper (Yang et al. 2022). Every class is a distinct combination of an object shape (the
ten families of :mod:`bench.data.synthetic.synth_objects`), a texture, a colour and a background
kind (:func:`design_classes`; two classes differ in at least two of the four whenever the
class count allows). An image shows one object of its class and, depending on the class,
0 to 3 people: a simple body under a head with a face drawn by the synth_faces renderer
(``render_heads`` in ``bench.data.synthetic._face_render``), so every face has an identity and that
identity's gender, age group and skin tone.

How often people appear is a property of the class, as in ImageNet (bridegroom 97.5% of
images with faces, rock beauty 0.1%; 17% overall; 10.6% of classes above 50%): the class
rates are the quantiles ``0.95 q^4`` (q evenly spaced in [0, 1]) dealt to the classes by
the seed, so they span 0 to 0.95 exactly with a mean of 0.19. In some classes
(``near_face``, about one in eight) the object is usually held at a face (a mask, a
harmonica, a snorkel) and covers part of it; elsewhere people stand anywhere, in front of
the object (35%) or behind it. Faces are 25 to 44 pixels wide at 128 px (fewer people,
bigger faces; scaled with ``size``), never cut by the border: MTCNN's reliable range.

Where things are (``N`` images of a split, ``F`` faces):

* ``ImageSet.labels``: the class; ``ImageSet.boxes``: the face boxes of each image,
  float32 [k, 4] (x1, y1, x2, y2) pixels, k = 0 .. 3, largest face first (what face_blur
  and face_overlay read);
* ``ImageSet.attrs``: ``n_faces`` and the attributes of the image's largest face,
  ``identity``, ``gender``, ``age_group``, ``skin_tone``, ``glasses`` (-1 without a face;
  names in ``attr_names``, from :data:`bench.data.synthetic.synth_faces.ATTR_NAMES`);
* ``Splits.info["faces"][split]``: every face, one row each, in image order and within an
  image largest first: ``image`` (index in the split), ``identity``, ``gender``,
  ``age_group``, ``skin_tone``, ``glasses`` (int64 [F]) and ``box`` (float32 [F, 4]);
* ``Splits.info["object_boxes"][split]``: float32 [N, 4], the tight box of the object's
  silhouette (before people in front of it are drawn);
* ``Splits.info["face_fraction"][split]``: float32 [N], the fraction of the object box
  covered by the union of face boxes (the paper's Fig. 4 measure; 0 without people), and
  ``info["image_face_fraction"][split]``, the fraction of the image covered by faces;
* ``Splits.info["person_rate"]``, ``["near_face"]``: the design of each class.

Identities come from one pool of ``identities`` people shared by all splits: a person
may appear in train and test, which is harmless for classification (a face adversary
that needs disjoint people splits the face table by identity itself).

Image ``i`` of a split draws its scene from a counter-based stream keyed by (seed, split,
i); faces' per-image nuisances and the sensor noise come from generators keyed by the
chunk of 64 images, and a chunk always renders the same images, so the data is
bit-identical for the same options, and a larger ``images_per_class`` appends images.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch

from bench.core.registry import register_dataset
from bench.data.base import Dataset, DataShape, ImageSet, Splits, SplitShape, cached_splits, fingerprint
from bench.data.options import check_option_names, integer_option
from bench.data.synthetic import _exact as ex
from bench.data.synthetic import scene_render as sr
from bench.data.synthetic import synth_faces
from bench.data.synthetic._face_identity import sample_identities
from bench.data.synthetic._scene_compose import MAX_PEOPLE, N_NORMAL, N_UNIFORM, render_chunk
from bench.data.synthetic.synth_objects import CLASSES as SHAPES
from bench.errors import BenchError
from bench.randomness import rng
from bench.randomness.seeding import image_seeds, make_generator

GENERATOR_VERSION = 2

SPLITS = ("train", "val", "test")
MAX_CLASSES = 1000
_CHUNK = 64
_DEFAULTS: dict[str, Any] = {
    "classes": 100,
    "images_per_class": 50,
    "val_per_class": None,
    "test_per_class": None,
    "size": 128,
    "identities": 200,
    "seed": 0,
    "class_offset": 0,
}
_MAX_RATE = 0.95


@register_dataset("synth_scenes")
class SynthScenes(Dataset):
    """Procedural object classes with incidental people whose faces have identities (train / val / test).

    Options:
        classes: Object classes (default 100, at most 1000).
        images_per_class: Training images per class (default 50).
        val_per_class: Validation images per class (default images_per_class // 5, at least 1).
        test_per_class: Test images per class (default images_per_class // 5, at least 1).
        size: Image side in pixels (default 128; 64 to 256; faces scale with it).
        identities: People in the pool that faces are drawn from (default 200, at least 3).
        seed: Seed of the dataset (default 0).
        class_offset: Skip the first classes of the seed's design (default 0): classes
            ``class_offset .. class_offset + classes - 1`` differ from every one of a
            dataset with ``classes <= class_offset`` in at least two of shape, texture,
            colour and background (a transfer target disjoint from its source); their
            images draw from streams of their own.
    """

    synthetic = True
    layout = ("nothing: scenes are generated (options classes, images_per_class, val_per_class, test_per_class, "
              "size, identities, seed)")
    version = GENERATOR_VERSION
    description = ("synthetic scenes: 100 object classes with incidental people and face boxes, 128 x 128 "
                   "(an ImageNet stand-in)")

    def inspect(self, root: Path | None, options: Mapping[str, Any]) -> DataShape:
        """Returns the shapes the options imply (every class has the same count in a split); renders nothing."""
        opts = resolve_options(options)
        return {s: SplitShape((_per_class(opts, s),) * opts["classes"]) for s in SPLITS}

    def load(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> Splits:
        """Generates (or reads from the cache) the train / val / test splits.

        Args:
            root: Ignored; the data is generated.
            options: See the class docstring.
            cache_dir: The splits are cached under ``cache_dir/datasets/synth_scenes``.

        Raises:
            BenchError: An option is unknown or out of range.
        """
        opts = resolve_options(options)
        key = fingerprint(self.name, GENERATOR_VERSION,
                          sorted((k, v) for k, v in opts.items() if k != "class_offset" or v))
        data, content = cached_splits(cache_dir, self.name, key, lambda: generate(**opts))
        names = {k: list(v) for k, v in synth_faces.ATTR_NAMES.items()}
        sets = {}
        for s in SPLITS:
            d = data[s]
            sets[s] = ImageSet(images=d["images"], labels=d["labels"], attrs=dict(d["attrs"]), attr_names=names,
                               boxes=list(d["boxes"]))
        info = {
            "source": f"procedural scenes with synth_faces people (generator version {GENERATOR_VERSION})",
            "options": dict(opts),
            "classes": list(data["design"]["names"]),
            "person_rate": data["design"]["person_rate"].tolist(),
            "near_face": data["design"]["near_face"].tolist(),
            "n_images": {s: len(sets[s]) for s in SPLITS},
            "n_faces": {s: int(len(data[s]["faces"]["image"])) for s in SPLITS},
            "faces": {s: dict(data[s]["faces"]) for s in SPLITS},
            "object_boxes": {s: data[s]["object_boxes"] for s in SPLITS},
            "face_fraction": {s: data[s]["face_fraction"] for s in SPLITS},
            "image_face_fraction": {s: data[s]["image_face_fraction"] for s in SPLITS},
        }
        return Splits(dataset=self.name, sets=sets, fingerprint=content, synthetic=True, info=info)


def resolve_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Validates options and fills in defaults.

    Raises:
        BenchError: An unknown option (naming the valid ones) or a value out of range.
    """
    check_option_names("synth_scenes", options, _DEFAULTS)
    opts = {**_DEFAULTS, **options}
    lows = {"classes": 2, "images_per_class": 1, "val_per_class": 1, "test_per_class": 1, "size": 64,
            "identities": MAX_PEOPLE, "seed": 0, "class_offset": 0}
    highs = {"classes": MAX_CLASSES, "size": 256}
    for key, low in lows.items():
        value = opts[key]
        if value is None and key in ("val_per_class", "test_per_class"):
            value = max(1, opts["images_per_class"] // 5) if isinstance(opts["images_per_class"], int) else 1
        opts[key] = integer_option("synth_scenes", key, value, low, highs.get(key))
    if opts["class_offset"] + opts["classes"] > MAX_CLASSES:
        raise BenchError(f"synth_scenes: options class_offset + classes must be at most {MAX_CLASSES}, got "
                         f"{opts['class_offset']} + {opts['classes']}")
    return opts


def _per_class(opts: Mapping[str, Any], split: str) -> int:
    return opts["images_per_class" if split == "train" else f"{split}_per_class"]


def design_classes(seed: int, classes: int) -> dict[str, Any]:
    """Draws every class's design: shape, texture, colour and background, with its people statistics.

    The (shape, texture, colour, background) combinations are taken in a seeded order,
    keeping those that differ from every class kept so far in at least two of the four;
    when those run out, any unused combination.

    Returns:
        ``names`` (list), and tensors [classes]: ``family``, ``texture``, ``hue``,
        ``background`` (int64), ``hue_offset``, ``sat``, ``val``, ``second`` (0: complementary
        hue, 1: dark, 2: pale), ``scale``, ``aspect``, ``rot``, ``freq``, ``angle``,
        ``person_rate``, ``near_face`` (float32) and ``crowd`` (float32 [classes, 3]: the
        probabilities of 1, 2, 3 people in an image with people).
    """
    sizes = (len(SHAPES), len(sr.TEXTURES), len(sr.HUES), len(sr.BACKGROUNDS))
    g = make_generator(seed, "synth_scenes", "classes")
    total = sizes[0] * sizes[1] * sizes[2] * sizes[3]
    order = torch.randperm(total, generator=g)
    combos = torch.stack(torch.unravel_index(order, sizes), 1)
    kept: list[int] = []
    for i in range(total):
        if len(kept) == classes:
            break
        if not kept or int(((combos[kept] != combos[i]).sum(1) < 2).sum()) == 0:
            kept.append(i)
    if len(kept) < classes:
        chosen = set(kept)
        kept += [i for i in range(total) if i not in chosen][: classes - len(kept)]
    c = combos[kept]
    n = classes

    def uniform(lo: float, hi: float) -> torch.Tensor:
        return lo + (hi - lo) * torch.rand(n, generator=g)

    design: dict[str, Any] = {"family": c[:, 0], "texture": c[:, 1], "hue": c[:, 2], "background": c[:, 3]}
    design["hue_offset"] = uniform(-0.02, 0.02)
    design["sat"] = uniform(0.55, 0.95)
    design["val"] = uniform(0.55, 0.95)
    design["second"] = torch.randint(0, 3, (n,), generator=g)
    design["scale"] = uniform(0.3, 0.46)
    design["aspect"] = ex.exp(uniform(-0.3, 0.3))
    design["rot"] = uniform(-0.6, 0.6)
    design["freq"] = uniform(7.0, 16.0)
    design["angle"] = uniform(0.0, 3.1416)
    quantiles = torch.arange(n, dtype=torch.float64) / (n - 1)
    squares = quantiles * quantiles
    rates = (_MAX_RATE * (squares * squares)).float()  # 0.95 q^4 as products (pow's last bits vary by CPU)
    design["person_rate"] = rates[torch.randperm(n, generator=g)]
    crowd = torch.rand(n, generator=g)
    design["crowd"] = torch.stack([0.65 - 0.35 * crowd, 0.25 + 0.1 * crowd, 0.1 + 0.25 * crowd], 1)
    design["near_face"] = torch.where(torch.rand(n, generator=g) < 0.125, 0.85, 0.05) * (design["person_rate"] > 0)
    design["names"] = [
        f"{sr.HUES[h]} {sr.TEXTURES[t]} {sr.SHAPE_NAMES.get(SHAPES[f], SHAPES[f])} ({sr.BACKGROUNDS[b]})"
        for f, t, h, b in c.tolist()
    ]
    return design


def split_labels(seed: int, split: str, classes: int, count: int) -> torch.Tensor:
    """Returns the classes of images ``0 .. count-1``: every block of ``classes`` images holds each class once."""
    blocks = -(-count // classes)
    keys = rng.words(image_seeds(seed, f"synth_scenes/{split}/labels", blocks), rng.counters((classes,), "cpu"))
    return torch.argsort(keys, dim=1, stable=True).reshape(-1)[:count].long()


def generate(classes: int, images_per_class: int, val_per_class: int, test_per_class: int, size: int,
             identities: int, seed: int, class_offset: int = 0) -> dict[str, Any]:
    """Renders every split.

    Returns:
        ``design`` (see :func:`design_classes`) and split -> ``images`` (uint8 [N, 3, size,
        size]), ``labels``, ``attrs``, ``boxes`` (list of float32 [k, 4]), ``faces`` (the face
        table), ``object_boxes``, ``face_fraction`` and ``image_face_fraction``.
    """
    design = design_classes(seed, class_offset + classes)
    if class_offset:
        design = {k: v[class_offset:] for k, v in design.items()}
    ident = sample_identities(identities, make_generator(seed, "synth_scenes", "identities"))
    counts = {"train": images_per_class, "val": val_per_class, "test": test_per_class}
    out: dict[str, Any] = {"design": design}
    for s in SPLITS:
        streams = f"{s}@{class_offset}" if class_offset else s
        out[s] = render_split(seed, streams, classes * counts[s], size, design, ident)
    return out


def render_split(seed: int, split: str, count: int, size: int, design: Mapping[str, Any],
                 ident: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """Renders images ``0 .. count-1`` of one split (chunks of 64 images, rendered side by side on threads)."""
    classes = len(design["names"])
    padded = -(-count // _CHUNK) * _CHUNK
    labels = split_labels(seed, split, classes, padded)
    words = rng.words(image_seeds(seed, f"synth_scenes/{split}/params", padded),
                      rng.counters((N_UNIFORM + N_NORMAL,), "cpu"))
    u, z = rng.uniform(words[:, :N_UNIFORM]), ex.normal_from_words(words[:, N_UNIFORM:])
    starts = list(range(0, count, _CHUNK))

    def chunk(start: int) -> dict[str, Any]:
        part = slice(start, start + _CHUNK)
        return render_chunk(seed, split, start // _CHUNK, labels[part], u[part], z[part], size, design, ident)

    with synth_faces._chunk_workers() as pool:  # private helper reused: one torch thread per chunk
        parts = list(pool.map(chunk, starts))
    return _assemble(parts, labels, count, ident)


def _assemble(parts: list[dict[str, Any]], labels: torch.Tensor, count: int,
              ident: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """Joins the chunks, keeps the first ``count`` images and builds the face table and attributes."""
    def cat(key: str) -> torch.Tensor:
        return torch.cat([p[key] for p in parts])[:count]

    present, face_boxes, identity, glasses = cat("present"), cat("face_boxes"), cat("identity"), cat("glasses")
    n_faces = present.sum(1)
    image, slot = present.nonzero(as_tuple=True)
    ids = identity[image, slot]
    faces = {"image": image, "identity": ids, **_face_attrs(ident, ids), "glasses": glasses[image, slot],
             "box": face_boxes[image, slot].contiguous()}
    first = n_faces > 0
    attrs = {"n_faces": n_faces, "identity": identity[:, 0], **_face_attrs(ident, identity[:, 0].clamp(min=0)),
             "glasses": glasses[:, 0]}
    attrs = {k: v if k == "n_faces" else torch.where(first, v, torch.full_like(v, -1)) for k, v in attrs.items()}
    return {
        "images": cat("images"),
        "labels": labels[:count].clone(),
        "attrs": attrs,
        "boxes": [face_boxes[i, : int(n_faces[i])].contiguous() for i in range(count)],
        "faces": faces,
        "object_boxes": cat("object_boxes"),
        "face_fraction": cat("face_fraction"),
        "image_face_fraction": cat("image_face_fraction"),
    }


def _face_attrs(ident: Mapping[str, torch.Tensor], ids: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"gender": ident["male"][ids].long(), "age_group": ident["age"][ids].long(),
            "skin_tone": ident["tone_group"][ids].long()}
