"""The faces of the ``imagenet`` loader: the count report and the optional identity table.

**Count report** (:func:`face_report`, ``info["face_counts"]``): per split, images
annotated with and without faces, images without an entry in the annotations, faces
annotated and faces stored.

**Identities** (the loader's ``face_identities`` option): ImageNet's faces have no
identities, but a user who has labelled some can supply them as a CSV::

    url,box,identity
    train/n01440764/n01440764_10026.JPEG,0,alice
    val/ILSVRC2012_val_00012978.JPEG,1,bob

``url`` is the image's key in ``face_annotations_ILSVRC.json`` (``train/<wnid>/<file>``
or ``val/<file>``; the file's extension and class folder do not matter), ``box`` the
0-based position of the face in that entry's ``bboxes`` list (degenerate boxes count:
positions are those of the file) and ``identity`` any non-empty name. :func:`read_face_identities`
checks the whole file before any work; faces without a row are left out of the table.
:func:`face_tables` builds, per split, the face table that synth_scenes has and
:mod:`bench.release.facecrops` crops: ``image`` (index in the split), ``identity`` (int64: the
position of the name in the sorted names, the same in every split) and ``box`` (float32
[F, 4], the face in stored pixels: the annotated box through the image's centre crop and
resize, exactly as ``ImageSet.boxes``). A face the crop cut away, or a degenerate box, has
no row (they are counted).
"""

from __future__ import annotations

import csv
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

import numpy as np
import torch

from bench.data import imageread
from bench.data.loaders import imagenet_annotations as ann
from bench.errors import BenchError

COLUMNS = ("url", "box", "identity")
FORMAT = (f"a CSV with columns url,box,identity (url as in {ann.FACES_FILE}, box the 0-based position of the face "
          "in its bboxes list, identity a name)")
SPLITS = ("train", "val", "test")


@dataclass
class FaceIdentities:
    """A checked identities file.

    Attributes:
        path: The CSV.
        names: The identities, sorted (an identity's id is its position).
        rows: Image key -> (position in its entry's ``bboxes``, identity id), by position.
        count: Rows in the file.
    """

    path: Path
    names: list[str] = field(default_factory=list)
    rows: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    count: int = 0

    def usable(self, keys: Sequence[str], annotations: ann.FaceAnnotations) -> int:
        """Returns the identities with 2 or more (non-degenerate) faces among the images ``keys``."""
        faces: Counter[int] = Counter()
        for key in set(keys):
            faces.update(ident for position, ident in self.rows.get(key, ())
                         if annotations.kept_index(key, position) is not None)
        return sum(n >= 2 for n in faces.values())


def check_option(value: Any) -> str | None:
    """Returns the ``face_identities`` option as a path string (None: not given).

    Raises:
        BenchError: Not a path (one line).
    """
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if value is not None and not (isinstance(value, str) and value.strip()):
        raise BenchError(f"imagenet: option face_identities expects the path of {FORMAT}, got {value!r}")
    return value.strip() if value is not None else None


def resolve_path(value: str, base: Path) -> Path:
    """Returns the identities file: ``value`` as is when absolute, else relative to the ImageNet folder ``base``.

    Raises:
        BenchError: No such file (one line).
    """
    path = Path(value).expanduser()
    path = path if path.is_absolute() else base / path
    if not path.is_file():
        raise BenchError(f"imagenet: option face_identities: no file {path} (a relative path is read from {base}); "
                         f"expected {FORMAT}")
    return path


def plan_identities(value: str, base: Path, keys: Sequence[str], annotations: ann.FaceAnnotations) -> FaceIdentities:
    """Reads and checks the ``face_identities`` file of a selection (before any image is decoded).

    Args:
        value: The option (a path, absolute or relative to the ImageNet folder ``base``).
        base: The ImageNet folder.
        keys: The selected images' annotation keys.
        annotations: The face annotations.

    Raises:
        BenchError: A bad file (see :func:`read_face_identities`), or fewer than 2
            identities with 2 or more faces among the selected images (one line).
    """
    path = resolve_path(value, base)
    identities = read_face_identities(path, annotations)
    usable = identities.usable(keys, annotations)
    if usable < 2:
        raise BenchError(f"imagenet: option face_identities: {usable} of the {len(identities.names)} identities in "
                         f"{path} have 2 or more faces among the selected images, and face re-identification needs "
                         "2; select more classes or images, or leave the option out")
    return identities


def read_face_identities(path: Path, annotations: ann.FaceAnnotations) -> FaceIdentities:
    """Reads and checks an identities CSV against the face annotations.

    Raises:
        BenchError: The file cannot be read, lacks a column, or a row names a url without
            an entry, a box its entry does not list, an empty identity or a face listed
            twice; one line naming the line of the file.
    """
    where = f"imagenet: option face_identities: {path}"
    seen: dict[tuple[str, int], int] = {}
    named: list[tuple[str, int, str]] = []
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f, skipinitialspace=True)
            columns = [c.strip() for c in reader.fieldnames or []]
            missing = [c for c in COLUMNS if c not in columns]
            if missing:
                raise BenchError(f"{where} has no column {', '.join(missing)} (its columns: "
                                 f"{', '.join(columns) or 'none, the file is empty'}); expected {FORMAT}")
            reader.fieldnames = columns
            for row in reader:
                line = reader.line_num
                key = _row_key(row, line, annotations, where)
                position = _row_box(row, line, key, annotations, where)
                identity = (row.get("identity") or "").strip()
                if not identity:
                    raise BenchError(f"{where}: line {line}: the identity is empty; expected {FORMAT}")
                if (key, position) in seen:
                    raise BenchError(f"{where}: line {line}: box {position} of url {row['url'].strip()!r} is "
                                     f"already labelled on line {seen[key, position]}; label each face once")
                seen[key, position] = line
                named.append((key, position, identity))
    except OSError as exc:
        raise BenchError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise BenchError(f"{where} is not a UTF-8 CSV ({' '.join(str(exc).split())}); expected {FORMAT}") from None
    names = sorted({identity for _, _, identity in named})
    ids = {name: i for i, name in enumerate(names)}
    out = FaceIdentities(path, names, count=len(named))
    for key, position, identity in sorted(named):
        out.rows.setdefault(key, []).append((position, ids[identity]))
    return out


def _row_key(row: Mapping[str, Any], line: int, annotations: ann.FaceAnnotations, where: str) -> str:
    url = (row.get("url") or "").strip()
    found = ann.url_key(url)
    if found is None or found[1] == "test":
        raise BenchError(f"{where}: line {line}: url {url!r} is not train/<wnid>/<file>.JPEG or val/<file>.JPEG; "
                         f"expected {FORMAT}")
    if found[0] not in annotations.boxes:
        raise BenchError(f"{where}: line {line}: url {url!r} has no entry in {annotations.path}")
    return found[0]


def _row_box(row: Mapping[str, Any], line: int, key: str, annotations: ann.FaceAnnotations, where: str) -> int:
    text = (row.get("box") or "").strip()
    listed = annotations.listed(key)
    if not (text.isascii() and text.isdigit()):
        raise BenchError(f"{where}: line {line}: box {text!r} is not a 0-based position in the url's bboxes list; "
                         f"expected {FORMAT}")
    if int(text) >= listed:
        raise BenchError(f"{where}: line {line}: url {row['url'].strip()!r} lists {listed} box(es) in "
                         f"{annotations.path.name}, so box {int(text)} is not one of them (positions start at 0)")
    return int(text)


class FacePlan(Protocol):
    """What the face tables read of the loader's plan (:class:`bench.data.loaders.imagenet.Plan`)."""

    opts: dict[str, Any]
    layout: Any
    names: list[str]
    keys: list[str]
    split_of: list[str]
    faces: list[np.ndarray | None]
    annotations: ann.FaceAnnotations

    def face_counts(self) -> list[int]:
        """Faces annotated on each image (-1: no entry)."""


def face_tables(plan: "FacePlan", identities: FaceIdentities, crops: torch.Tensor,
                written: Sequence[str]) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, Any]]:
    """Builds the face table of every split from the identities and the crops the images were stored from.

    Args:
        plan: The loader's plan (image keys, splits and face boxes in original pixels).
        identities: The checked identities file.
        crops: int [N, 4] (left, top, width, height) of each image's stored region, in
            reading order.
        written: The splits stored (``val`` is ``test`` when it is not among them).

    Returns:
        Split -> ``{"image", "identity", "box"}`` (int64 [F], int64 [F], float32 [F, 4]), and
        the report for ``info["face_identities"]``.

    Raises:
        BenchError: Fewer than 2 identities keep 2 faces once the crop has cut some away.
    """
    size = plan.opts["size"]
    columns: dict[str, dict[str, list[Any]]] = {s: {"image": [], "identity": [], "box": []} for s in written}
    local = {s: 0 for s in written}
    lost = {"degenerate": 0, "outside_crop": 0}
    matched = 0
    for i, (key, split) in enumerate(zip(plan.keys, plan.split_of)):
        for position, ident in identities.rows.get(key, ()):
            matched += 1
            kept = plan.annotations.kept_index(key, position)
            if kept is None:
                lost["degenerate"] += 1
                continue
            box = imageread.fit_boxes(plan.faces[i][kept], crops[i].tolist(), size)
            if not len(box):
                lost["outside_crop"] += 1
                continue
            table = columns[split]
            table["image"].append(local[split])
            table["identity"].append(ident)
            table["box"].append(box)
        local[split] += 1
    tables = {s: {"image": torch.tensor(c["image"], dtype=torch.int64),
                  "identity": torch.tensor(c["identity"], dtype=torch.int64),
                  "box": torch.cat(c["box"]) if c["box"] else torch.zeros(0, 4)} for s, c in columns.items()}
    tables.setdefault("val", tables["test"])
    everyone = torch.cat([t["identity"] for t in (tables[s] for s in written)])
    report = {
        "file": str(identities.path),
        "format": "url,box,identity; box: 0-based position in the url's bboxes list",
        "rows": identities.count,
        "identities": len(identities.names),
        "names": list(identities.names),
        "faces": {s: len(tables[s]["image"]) for s in SPLITS},
        "usable_identities": int((torch.bincount(everyone) >= 2).sum()) if len(everyone) else 0,
        "outside_selection": identities.count - matched,
        **lost,
    }
    if report["usable_identities"] < 2:  # the plan counted 2, but the centre crop cut faces away
        raise BenchError(f"imagenet: option face_identities: {report['usable_identities']} of the "
                         f"{report['identities']} identities in {identities.path} keep 2 or more faces after the "
                         f"centre crop ({lost['outside_crop']} cut away), and face re-identification needs 2")
    return tables, report


def face_report(plan: "FacePlan", sets: Mapping[str, Any]) -> dict[str, Any]:
    """Counts, per split, images annotated (with and without faces) and unannotated, and faces."""
    source = {s: ("test" if s == "val" and plan.opts["val_from"] == "official" else s) for s in SPLITS}
    counts = plan.face_counts()

    def tally(test) -> dict[str, int]:
        return {s: sum(1 for c, sp in zip(counts, plan.split_of) if sp == source[s] and test(c)) for s in SPLITS}

    unannotated = [n for n, c in zip(plan.names, counts) if c < 0]
    return {
        "annotations": str(plan.layout.faces),
        "convention": "x0, y0, x1, y1 in pixels of the original image (PIL), fitted with the centre crop and resize",
        "annotated": tally(lambda c: c >= 0),
        "with_faces": tally(lambda c: c > 0),
        "without_faces": tally(lambda c: c == 0),
        "unannotated": tally(lambda c: c < 0),
        "unannotated_examples": unannotated[:5],
        "faces": {s: sum(c for c, sp in zip(counts, plan.split_of) if sp == source[s] and c > 0) for s in SPLITS},
        "faces_stored": {s: sum(len(b) for b in sets[s].boxes) for s in SPLITS},
        "dropped_degenerate_boxes": plan.annotations.dropped,
        "file_entries": dict(plan.annotations.per_split),
    }


def warn_about(info: Mapping[str, Any]) -> None:
    """Warns about selected images without an annotation entry and about identities too rare to use."""
    from bench.storage.cache import warn

    counts = info["face_counts"]
    if sum(counts["unannotated"].values()):
        warn(f"imagenet: {sum(counts['unannotated'].values())} selected image(s) have no entry in {ann.FACES_FILE} "
             f"(e.g. {counts['unannotated_examples'][0]}): they get no face box and attrs['faces'] = -1")
    people = info.get("face_identities")
    if people and people["usable_identities"] < people["identities"]:
        warn(f"imagenet: {people['usable_identities']} of the {people['identities']} identities in {people['file']} "
             "have 2 or more stored faces among the selected images; only those can be enrolled and probed")
