"""ILSVRC-2012 with the face-obfuscation paper's face boxes: layout, boxes, annotations, streaming, errors."""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np
import pytest
import torch

from bench.core.registry import datasets
from bench.data import imageread, shards
from bench.data.loaders import imagenet_annotations as ann
from bench.data.loaders.imagenet import ImageNet
from bench.data.shards import ShardedImages
from bench.errors import BenchError
from tests.fixtures import imagenet_fixture as fix

SIZE = 50
OFFICIAL = {"size": SIZE, "val_from": "official"}


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    return fix.write_imagenet(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def official(fx, cache):
    """Loaded with val_from=official: train holds every training image in (class, file) order."""
    return ImageNet().load(fx.root, OFFICIAL, cache)


@pytest.fixture(scope="module")
def held(fx, cache):
    return ImageNet().load(fx.root, {"size": SIZE, "val_fraction": 0.3}, cache)


def order(fx, split):
    """The relative files of an official split, in the loader's order (wnid, then file)."""
    return [n for w in fix.WNIDS for n in (fx.train if split == "train" else fx.val)[w]]


def one_line(exc: pytest.ExceptionInfo) -> str:
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_registered_and_real():
    assert datasets.get("imagenet") is ImageNet and not ImageNet.synthetic


def test_splits_hold_the_official_sets_in_order(fx, official):
    assert list(official.sets) == ["train", "val", "test"] and official.info["classes"] == list(fix.WNIDS)
    assert official.info["n_images"] == {"train": 15, "val": 8, "test": 8} and official.info["val_is_test"]
    assert official["val"] is official["test"]
    for split in ("train", "test"):
        names = order(fx, split)
        images = official[split].images
        assert images.shape == (len(names), 3, SIZE, SIZE)
        assert official[split].labels.tolist() == [fix.WNIDS.index(n.split("/")[1]) for n in names]
        for i, name in enumerate(names):  # a corner far from any face has the image's colour
            assert np.abs(images[i][:, SIZE - 2, SIZE - 2].numpy().astype(int) - fx.colour[name]).max() <= 6, name


def test_face_boxes_are_rescaled_with_the_crop_and_land_on_their_images(fx, official):
    train = official["train"]
    i = order(fx, "train").index(fix.TWO_FACES)  # 200 x 100: crop x 50..150, scale 0.5
    assert torch.allclose(train.boxes[i], torch.tensor([[5.0, 5.0, 25.0, 25.0], [35.0, 10.0, 45.0, 30.0]]))
    pixels = train.images[i].int()
    assert (pixels[:, 15, 15] > 230).all() and (pixels[:, 20, 40] > 230).all() and (pixels[:, 40, 15] < 200).all()
    for split in ("train", "test"):
        for name, boxes in zip(order(fx, split), official[split].boxes):
            w, h = fx.size[name]
            want = imageread.fit_boxes(np.array(fx.faces.get(name, []), dtype=np.float64).reshape(-1, 4),
                                       imageread.crop_box(h, w, (SIZE, SIZE)), (SIZE, SIZE))
            assert boxes.dtype == torch.float32 and torch.allclose(boxes, want), name
    for split, name in (("train", fix.ONE_FACE), ("test", fix.VAL_FACE)):
        assert len(official[split].boxes[order(fx, split).index(name)]) == 1


def test_val_urls_name_the_file_without_its_class_folder(fx, official):
    i = order(fx, "test").index(fix.VAL_FACE)  # url val/ILSVRC2012_val_00012978.JPEG, file in val/n01440764/
    assert torch.allclose(official["test"].boxes[i], torch.tensor([[5.0, 5.0, 15.0, 15.0]]))
    assert official["test"].attrs["faces"][i] == 1
    assert ann.image_key("val", "val/n01440764/ILSVRC2012_val_00012978.JPEG") == ann.image_key(
        "val", "ILSVRC2012_val_00012978.jpg") == "val/ILSVRC2012_val_00012978"


def test_unannotated_images_are_told_apart_from_images_without_faces(fx, official, cache, capsys):
    faces = official["train"].attrs["faces"].tolist()
    names = order(fx, "train")
    assert faces[names.index(fix.UNANNOTATED)] == -1
    assert faces[names.index(fix.DEGENERATE)] == 0 and faces[names.index(fix.TWO_FACES)] == 2
    assert sum(f == 0 for f in faces) == 12 and official["train"].attr_names["faces"] == ["0", "1", "2"]
    report = official.info["face_counts"]  # info["faces"] is the identity table, only with face_identities
    assert "faces" not in official.info and "face_identities" not in official.info
    assert report["unannotated"] == {"train": 1, "val": 0, "test": 0}
    assert report["unannotated_examples"] == [fix.UNANNOTATED]
    assert report["annotated"] == {"train": 14, "val": 8, "test": 8}
    assert report["with_faces"] == {"train": 2, "val": 1, "test": 1} and report["faces"]["train"] == 3
    assert report["without_faces"]["train"] == 12 and report["dropped_degenerate_boxes"] == 1
    assert report["file_entries"] == {"train": 14, "val": 8, "test": 1}
    assert len(official["train"].boxes[names.index(fix.UNANNOTATED)]) == 0
    ImageNet().load(fx.root, OFFICIAL, cache)
    err = capsys.readouterr().err
    assert "1 selected image(s) have no entry in face_annotations_ILSVRC.json" in err and fix.UNANNOTATED in err


def test_object_area_covered_by_faces(fx, official):
    train, test = official.info["object_face_fraction"]["train"], official.info["object_face_fraction"]["test"]
    assert train.shape == (15,) and test.shape == (8,)
    i, j = order(fx, "train").index(fix.TWO_FACES), order(fx, "test").index(fix.VAL_FACE)
    assert train[i].item() == pytest.approx(fix.TWO_FACES_FRACTION) and test[j].item() == pytest.approx(0.16)
    assert int((~torch.isnan(train)).sum()) == 1 and int((~torch.isnan(test)).sum()) == 1
    assert official.info["object_face_fraction_by_class"]["train"] == {fix.WNIDS[0]: pytest.approx(0.2)}
    assert official.info["object_boxes"]["images"] == {"train": 1, "test": 1}
    assert ann.covered_fraction(np.array([[0, 0, 10, 10], [5, 0, 15, 10]]), np.array([[0, 0, 5, 5], [3, 3, 8, 8]])) \
        == pytest.approx((25 + 25 - 4) / 150)
    assert math.isnan(ann.covered_fraction(np.zeros((0, 4)), np.array([[0, 0, 1, 1]])))


def test_val_is_held_out_of_train_and_test_is_the_official_val(fx, held, official):
    assert held.info["n_images"] == {"train": 11, "val": 4, "test": 8} and not held.info["val_is_test"]
    assert held["val"].labels.tolist() == [0, 1, 2, 3]  # round(4 * 0.3) = 1 per class, 3 * 0.3 -> 1
    train_rows = {tuple(x.flatten()[:30].tolist()) for x in held["train"].images}
    val_rows = {tuple(x.flatten()[:30].tolist()) for x in held["val"].images}
    assert not train_rows & val_rows
    assert torch.equal(held["test"].images[:], official["test"].images[:])
    for split in ("train", "val"):
        assert held.info["object_face_fraction"][split].shape == (len(held[split]),)


def test_inspect_counts_match_load_and_decode_nothing(fx, held, official, monkeypatch):
    monkeypatch.setattr(imageread, "read_image", lambda *a, **k: pytest.fail("inspect decoded an image"))
    monkeypatch.setattr(ann, "read_object_boxes", lambda *a, **k: pytest.fail("inspect read object boxes"))
    for loaded, opts in ((held, {"size": SIZE, "val_fraction": 0.3}), (official, OFFICIAL)):
        shape = ImageNet().inspect(fx.root, opts)
        for split in ("train", "val", "test"):
            assert shape[split].counts == tuple(sorted(torch.bincount(loaded[split].labels).tolist(), reverse=True))
    shape = ImageNet().inspect(fx.root, {"classes": 2, "per_class": 2, "val_from": "official"})
    assert {s: v.counts for s, v in shape.items()} == {"train": (2, 2), "val": (2, 2), "test": (2, 2)}
    shape = ImageNet().inspect(fx.base, {"classes": "n04596742,n02102040"})
    assert shape["train"].counts == (3, 2) and shape["val"].counts == (1, 1) and shape["test"].counts == (2, 2)


def test_splits_are_streamed_into_shards_a_chunk_at_a_time(fx, tmp_path, monkeypatch):
    monkeypatch.setattr(shards, "SHARD_BYTES", 4 * 3 * SIZE * SIZE)  # 4 images per shard
    monkeypatch.setattr(shards, "MATERIALIZE_BYTES", 0)  # keep every split on disk
    real = imageread.decode_stream
    seen: dict[str, list[int]] = {"chunks": [], "ahead": []}

    def counting(items, size, grey=False, chunk=imageread.CHUNK, oriented=True):
        pulled = [0]

        def lazy():
            for item in items:
                pulled[0] += 1
                yield item

        done = 0
        for decoded in real(lazy(), size, grey, chunk=3, oriented=oriented):
            done += len(decoded.digests)
            seen["chunks"].append(len(decoded.digests))
            seen["ahead"].append(pulled[0] - done)
            yield decoded

    monkeypatch.setattr(imageread, "decode_stream", counting)
    splits = ImageNet().load(fx.root, OFFICIAL, tmp_path / "cache")
    assert sum(seen["chunks"]) == 23 and max(seen["chunks"]) == 3 and max(seen["ahead"]) <= 1
    train = splits["train"].images
    assert isinstance(train, ShardedImages) and len(train.files) == 4 and train.shape == (15, 3, SIZE, SIZE)
    monkeypatch.setattr(imageread, "decode_stream", real)
    monkeypatch.setattr(shards, "MATERIALIZE_BYTES", 1 << 30)
    again = ImageNet().load(fx.root, OFFICIAL, tmp_path / "cache2")
    assert again.fingerprint == splits.fingerprint and torch.equal(again["train"].images, train[:])


def test_root_given_directly_and_fingerprint_follows_the_files(fx, official, tmp_path):
    copy = tmp_path / "ILSVRC2012"
    shutil.copytree(fx.base, copy)
    direct = ImageNet().load(copy, OFFICIAL, tmp_path / "cache")
    assert direct.fingerprint == official.fingerprint
    again = ImageNet().load(copy, OFFICIAL, tmp_path / "cache")
    assert again.fingerprint == direct.fingerprint
    from PIL import Image

    image = copy / order(fx, "train")[5]
    Image.new("RGB", fx.size[order(fx, "train")[5]], (200, 10, 10)).save(image, "JPEG", quality=95)
    st = image.stat()
    os.utime(image, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    changed = ImageNet().load(copy, OFFICIAL, tmp_path / "cache")
    assert changed.fingerprint != direct.fingerprint
    assert changed["train"].images[5][0, 25, 25] > 180


def test_options_pick_classes_and_cap_images(fx, cache):
    splits = ImageNet().load(fx.root, {"size": 32, "classes": ["n03888257"], "per_class": 2,
                                       "val_from": "official"}, cache)
    assert splits.info["classes"] == ["n03888257"] and splits.info["n_images"] == {"train": 2, "val": 2, "test": 2}
    assert splits["train"].images.shape == (2, 3, 32, 32) and splits["train"].labels.tolist() == [0, 0]
    for bad, words in (({"classes": ["n09999999"]}, "n09999999"), ({"val_from": "test"}, "val_from"),
                       ({"val_fraction": 1.5}, "val_fraction"), ({"per_class": 0}, "per_class"),
                       ({"classs": 2}, "did you mean 'task.data.classes'")):
        with pytest.raises(BenchError) as exc:
            ImageNet().inspect(fx.root, bad)
        assert words in one_line(exc)


def test_exif_orientation_is_not_applied_so_faces_stay_in_their_boxes(fx, official, tmp_path):
    """The released boxes are pixels of the stored image, as PIL opens it without the EXIF orientation."""
    from PIL import Image

    copy = tmp_path / "imagenet"
    shutil.copytree(fx.base, copy)
    path = copy / fix.TWO_FACES
    with Image.open(path) as image:
        image.load()
        exif = image.getexif()
        exif[0x0112] = 6  # "rotate 90 degrees clockwise to display"
        image.save(path, "JPEG", quality=95, exif=exif.tobytes())
    splits = ImageNet().load(tmp_path, OFFICIAL, tmp_path / "cache")
    i = order(fx, "train").index(fix.TWO_FACES)
    assert torch.equal(splits["train"].boxes[i], official["train"].boxes[i])
    assert (splits["train"].images[i].float() - official["train"].images[i].float()).abs().mean() < 1  # re-encoded
    x1, y1, x2, y2 = splits["train"].boxes[i][0].int().tolist()
    assert splits["train"].images[i][:, y1:y2, x1:x2].float().mean() > 225  # white face (rotated: dark)


def test_a_malformed_localisation_file_fails_before_any_image_is_decoded(fx, tmp_path, monkeypatch):
    base = tmp_path / "imagenet"
    shutil.copytree(fx.base, base)
    next((base / "bbox" / "train").rglob("*.xml")).write_text("<annotation><object>")

    def decode(*args, **kwargs):
        raise AssertionError("an image was decoded")

    monkeypatch.setattr(imageread, "decode_stream", decode)
    with pytest.raises(BenchError, match="is not ILSVRC localisation XML"):
        ImageNet().load(tmp_path, OFFICIAL, tmp_path / "cache")


def write_entries(base, entries):
    (base / ann.FACES_FILE).write_text(json.dumps(entries))
    ann._read_cached.cache_clear()


@pytest.mark.parametrize("case, expected", [
    ("no-root", "the ImageNet folder not found"),
    ("no-train", "train/<wnid>/ (the ILSVRC-2012 training images) not found"),
    ("no-val", "val/<wnid>/ next to"),
    ("flat-val", "holds 1 image(s) directly; sort the validation images into class folders"),
    ("no-annotations", "face_annotations_ILSVRC.json in"),
    ("not-json", "is not JSON"),
    ("not-a-list", "holds a JSON object, not a list"),
    ("bad-url", "entry 1 is malformed (url 'images/x.JPEG' is not train/<wnid>/<file>"),
    ("bad-box", "entry 2 is malformed (bbox 0 is not"),
    ("no-bboxes", "entry 0 is malformed (no \"url\" or no \"bboxes\")"),
    ("bad-xml", "is not ILSVRC localisation XML"),
])
def test_missing_pieces_are_one_line_errors_naming_the_layout(fx, tmp_path, case, expected):
    base = tmp_path / "imagenet"
    if case != "no-root":
        shutil.copytree(fx.base, base)
    good = json.loads((fx.base / ann.FACES_FILE).read_text())
    if case == "no-train":
        shutil.rmtree(base / "train")
    elif case == "no-val":
        shutil.rmtree(base / "val")
    elif case == "flat-val":
        shutil.rmtree(base / "val")
        (base / "val").mkdir()
        shutil.copy(fx.base / fix.VAL_FACE, base / "val")
    elif case == "no-annotations":
        (base / ann.FACES_FILE).unlink()
    elif case == "not-json":
        (base / ann.FACES_FILE).write_text('[{"url": "train/')
    elif case == "not-a-list":
        write_entries(base, {"url": "train/n01440764/n01440764_1.JPEG", "bboxes": []})
    elif case == "bad-url":
        write_entries(base, [good[0], {"url": "images/x.JPEG", "bboxes": []}, *good[2:]])
    elif case == "bad-box":
        write_entries(base, [*good[:2], {"url": good[2]["url"], "bboxes": [{"x0": 1, "y0": "2", "x1": 3, "y1": 4}]}])
    elif case == "no-bboxes":
        write_entries(base, [{"url": good[0]["url"]}, *good[1:]])
    elif case == "bad-xml":
        next((base / "bbox" / "val").glob("*.xml")).write_text("<annotation><object>")
    root = tmp_path / "empty" if case == "no-root" else tmp_path
    with pytest.raises(BenchError) as exc:
        if case == "bad-xml":
            ImageNet().load(root, OFFICIAL, tmp_path / "cache")
        else:
            ImageNet().inspect(root, {})
    message = one_line(exc)
    assert expected in message, message
    if case.startswith("no-") and case != "no-bboxes" or case == "flat-val":
        assert "train/<wnid>/*.JPEG, val/<wnid>/*.JPEG" in message and ann.FACES_FILE in message
    if case in ("bad-url", "bad-box", "no-bboxes", "not-a-list", "not-json"):
        assert '"val/<file>.JPEG"' in message
