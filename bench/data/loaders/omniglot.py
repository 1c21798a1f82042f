"""Omniglot (Lake et al., 2015) read from its official layout, for few-shot classification.

1623 handwritten characters of 50 alphabets, 20 drawings each (105 x 105 binary PNGs), in
``images_background/`` (30 alphabets) and ``images_evaluation/`` (20). As in the
privacy-enhanced few-shot paper (Sec. V, following Vinyals et al. and Prototypical
Networks): characters are split character-disjointly into 1028 / 172 / 423 train / val /
test characters (the same fractions of however many there are), images are stored as
28 x 28 grey (one channel, strokes dark on white as drawn), and every character becomes
four classes, its drawings rotated by 0, 90, 180 and 270 degrees (label ``4 c + r``).

The split is a seeded permutation of the characters, unless split lists are given: the
Prototypical Networks files ``splits/vinyals/{train,val,test}.txt`` (lines
``Alphabet/characterNN[/rotDDD]``) next to the image folders are used when present, or
any folder holding such files with ``--set task.data.splits=DIR``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import torch

from bench.core.registry import register_dataset
from bench.data import imageread
from bench.data.base import (
    Dataset,
    DataShape,
    ImageSet,
    Splits,
    SplitShape,
    cached_sharded_splits,
    fingerprint,
    source_fingerprint,
)
from bench.data.classsplit import SPLITS, cap_groups, parse_options, split_classes
from bench.errors import BenchError
from bench.randomness.seeding import make_generator

LOADER_VERSION = 1
PARTS = ("images_background", "images_evaluation")
BASES = ("omniglot", "Omniglot", "omniglot/python", "omniglot-master/python", "")
PAPER_SPLIT = (1028, 172, 423)
DEFAULTS: dict[str, Any] = {"size": 28, "rotations": True, "split_fractions": tuple(n / 1623 for n in PAPER_SPLIT),
                            "seed": 0, "max_classes": None, "splits": None}


def find_base(root: Path) -> Path | None:
    """Returns the folder holding ``images_background/`` and ``images_evaluation/``, or None."""
    for sub in BASES:
        base = root / sub if sub else root
        if all((base / part).is_dir() for part in PARTS):
            return base
    return None


def list_characters(base: Path) -> dict[str, list[str]]:
    """Returns ``Alphabet/characterNN`` -> its drawings (paths relative to ``base``), both sorted.

    Raises:
        BenchError: An alphabet in both parts, or no drawing at all.
    """
    suffixes = imageread.image_suffixes()
    out: dict[str, list[str]] = {}
    for part in PARTS:
        for alphabet in sorted(d for d in os.listdir(base / part) if not d.startswith(".")):
            folder = base / part / alphabet
            if not folder.is_dir():
                continue
            for char in sorted(d for d in os.listdir(folder) if not d.startswith(".") and (folder / d).is_dir()):
                key = f"{alphabet}/{char}"
                if key in out:
                    raise BenchError(f"omniglot: {key} is in both {PARTS[0]}/ and {PARTS[1]}/ under {base}")
                files = sorted(f"{part}/{key}/{f}" for f in os.listdir(folder / char)
                               if not f.startswith(".") and Path(f).suffix.lower() in suffixes)
                if files:
                    out[key] = files
    return dict(sorted(out.items()))


def read_split_lists(folder: Path, characters: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """Reads ``train.txt``, ``val.txt`` and ``test.txt`` of character names (a ``/rotDDD`` suffix is ignored).

    Raises:
        BenchError: A file is missing, a character is unknown or in two splits.
    """
    out: dict[str, list[str]] = {}
    seen: dict[str, str] = {}
    for split in SPLITS:
        path = folder / f"{split}.txt"
        if not path.is_file():
            raise BenchError(f"omniglot: split list {path} not found (the folder needs train.txt, val.txt and "
                             "test.txt)")
        names = []
        for line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            key = "/".join(text.strip().split("/")[:2])
            if not key:
                continue
            if key not in characters:
                raise BenchError(f"omniglot: {path}:{line}: no character {key} under the image folders")
            if seen.setdefault(key, split) != split:
                raise BenchError(f"omniglot: {path}:{line}: {key} is also in {seen[key]}.txt")
            if key not in names:
                names.append(key)
        out[split] = sorted(names)
    return out


@register_dataset("omniglot")
class Omniglot(Dataset):
    """Omniglot characters, character-disjoint splits, 28 x 28 grey, rotations as new classes.

    Options:
        size: Stored side (default 28, as the paper).
        rotations: Add the 90/180/270-degree rotations of every character as classes (default true).
        split_fractions: Train / val / test fractions of the characters (default 1028/172/423 of 1623).
        seed: Seed of the character permutation.
        max_classes: Use at most this many characters (before rotations); with split lists,
            a seeded choice from each list in proportion to its size.
        splits: A folder of train.txt / val.txt / test.txt character lists (default:
            ``splits/vinyals/`` next to the image folders when it exists).
    """

    layout = ("<root>/omniglot/ (or <root>/) holding images_background/<Alphabet>/character<NN>/<id>_<nn>.png and "
              "images_evaluation/... (the official zips unpacked), optionally splits/vinyals/{train,val,test}.txt")
    version = LOADER_VERSION
    class_split = "split_fractions"
    description = "Omniglot characters (28 x 28 grey, x4 rotations), 1028/172/423 character-disjoint splits"

    def inspect(self, root: Path | None, options: Mapping[str, Any]) -> DataShape:
        """Lists the characters (no image is opened); returns the splits' shapes after rotation."""
        opts, _, characters, groups = self._index(root, options)
        k = 4 if opts["rotations"] else 1
        return {s: SplitShape.of_labels([(c, r) for c in groups[s] for r in range(k) for _ in characters[c]])
                for s in SPLITS}

    def load(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> Splits:
        """Decodes the characters' drawings into the cache once (or reads them from it).

        Raises:
            BenchError: The layout is missing, an option or split list is bad, or an image
                cannot be read.
        """
        opts, base, characters, groups = self._index(root, options)
        sets, content, built = self._decode(opts, base, characters, groups, cache_dir, "splits")
        k = 4 if opts["rotations"] else 1
        info = {
            "source": str(base),
            "options": {key: (list(v) if isinstance(v, tuple) else v) for key, v in opts.items()},
            "split": "split lists" if opts["splits"] else "seeded character permutation (Vinyals et al. sizes)",
            "characters": {s: len(groups[s]) for s in SPLITS},
            "classes": {s: k * len(groups[s]) for s in SPLITS},
            "n_images": {s: len(sets[s]) for s in SPLITS},
            **built,
        }
        imageread.warn_about(self.name, info)
        return Splits(self.name, sets, content, synthetic=False, info=info)

    def load_public(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> ImageSet | None:
        """Decodes characters in no split (beyond max_classes, or not in the split lists); None when there are none."""
        opts, base, characters, groups = self._index(root, options)
        used = {c for cs in groups.values() for c in cs}
        pool = [c for c in characters if c not in used]
        if not pool:
            return None
        g = make_generator(opts["seed"], self.name, "public")
        picked = sorted(pool[i] for i in torch.randperm(len(pool), generator=g)[: len(groups["train"])].tolist())
        sets, _, _ = self._decode(opts, base, characters, {"train": picked}, cache_dir, "public")
        return sets["train"]

    def _decode(self, opts, base, characters, groups, cache_dir: Path, purpose: str):
        split_of = {c: s for s, cs in groups.items() for c in cs}
        label = {c: i for i, c in enumerate(characters)}
        names = [f for c in characters if c in split_of for f in characters[c]]
        chars = [n.split("/", 1)[1].rsplit("/", 1)[0] for n in names]
        sel = imageread.Selection(tuple(groups), names, [split_of[c] for c in chars], [label[c] for c in chars])
        files = [base / n for n in names]
        opts_key = sorted((k, str(v)) for k, v in opts.items() if k != "splits")
        key = fingerprint(self.name, LOADER_VERSION, purpose, opts_key, sorted(groups.items()), names,
                          source_fingerprint(files))

        def build(sink) -> dict[str, Any]:
            return imageread.write_selection(sink, sel, files, opts["size"], grey=True,
                                             rotations=4 if opts["rotations"] else 1)

        return cached_sharded_splits(cache_dir, self.name, key, build)

    def _index(self, root: Path | None, options: Mapping[str, Any]):
        opts = parse_options(self.name, options, DEFAULTS)
        if opts["size"][0] != opts["size"][1]:
            raise BenchError(f"omniglot: size must be square (rotations), got {opts['size']}")
        if root is None or not Path(root).is_dir():
            raise self.missing(root, "the Omniglot folder")
        base = find_base(Path(root))
        if base is None:
            raise self.missing(root, f"{PARTS[0]}/ and {PARTS[1]}/")
        characters = list_characters(base)
        if not characters:
            raise self.missing(root, f"character folders of images in {base / PARTS[0]}")
        lists = Path(str(opts["splits"])).expanduser() if opts["splits"] else base / "splits" / "vinyals"
        if opts["splits"] and not lists.is_dir():
            raise BenchError(f"omniglot: splits={lists} is not a folder of train.txt, val.txt and test.txt")
        if lists.is_dir():
            opts["splits"] = str(lists)
            groups = cap_groups(read_split_lists(lists, characters), opts["max_classes"], opts["seed"], self.name)
        else:
            groups = split_classes({c: len(f) for c, f in characters.items()}, {**opts, "min_images": 1}, self.name)
        return opts, base, characters, groups

