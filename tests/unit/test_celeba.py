"""CelebA loader on a tiny fixture in the official formats: selection, splits, attributes, boxes, errors."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch
from fixtures.celeba_fixture import ATTRIBUTE_NAMES, write_celeba
from PIL import Image

import bench.data.loaders.celeba as celeba
from bench.core.registry import datasets
from bench.data.loaders.celeba import CelebA, decode, landmark_boxes, read_table
from bench.errors import BenchError

N_IDS, PER_ID = 12, 4


def load(root, cache, **options):
    return CelebA().load(root, {"min_images": 3, **options}, cache)


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    return write_celeba(tmp_path_factory.mktemp("data"), n_ids=N_IDS, per_id=PER_ID, wild=True)


@pytest.fixture(scope="module")
def splits(fx, tmp_path_factory):
    return load(fx.root, tmp_path_factory.mktemp("cache"))


def expected_files(fx, labels):
    """Files of the given identities in loader order (sorted names)."""
    wanted = set(labels.tolist())
    return sorted(name for name, identity in fx.identity.items() if identity in wanted)


def test_registered_and_real():
    assert datasets.get("celeba") is CelebA
    assert not CelebA.synthetic
    assert "img_align_celeba" in CelebA.layout and "identity_CelebA.txt" in CelebA.layout


def test_sizes_labels_and_min_images(splits, fx):
    sizes = {name: splits[name].labels.unique().numel() for name in ("train", "val", "test")}
    assert sizes == {"train": 8, "val": 2, "test": 2}
    big_ids = {i for i in fx.colour if sum(v == i for v in fx.identity.values()) >= 3}
    ids = [set(splits[name].labels.tolist()) for name in ("train", "val", "test")]
    assert set().union(*ids) == big_ids and len(big_ids) == N_IDS
    assert not ids[0] & ids[1] and not ids[0] & ids[2] and not ids[1] & ids[2]
    for name in ("train", "val", "test"):
        s = splits[name]
        assert s.images.shape == (len(s), 3, 176, 176) and s.images.dtype == torch.uint8  # the crop, not resized
        assert s.labels.dtype == torch.int64 and len(s) == sizes[name] * PER_ID


def test_images_belong_to_their_labels(splits, fx):
    for name in ("train", "val", "test"):
        s = splits[name]
        means = s.images.float().mean((2, 3))
        expected = torch.tensor([fx.colour[int(i)] for i in s.labels], dtype=torch.float32)
        assert (means - expected).abs().max() < 4


def test_attributes(splits, fx):
    s = splits["train"]
    names = [n.lower() for n in ATTRIBUTE_NAMES]
    assert set(s.attrs) == set(names) | {"gender", "age_group"}
    files = expected_files(fx, s.labels)
    assert [fx.identity[f] for f in files] == s.labels.tolist()
    table = torch.tensor([fx.attributes[f] for f in files])
    for j, name in enumerate(names):
        assert torch.equal(s.attrs[name], (table[:, j] > 0).long())
    assert torch.equal(s.attrs["gender"], s.attrs["male"])
    assert torch.equal(s.attrs["age_group"], 1 - s.attrs["young"])
    assert s.attr_names["gender"] == ["female", "male"] and s.attr_names["age_group"] == ["young", "not young"]
    assert s.attr_names["eyeglasses"] == ["no", "yes"]


def test_boxes_from_landmarks(splits, fx):
    s = splits["val"]
    files = expected_files(fx, s.labels)
    scale = 1.0  # stored at the crop's own size
    for box, name in zip(s.boxes, files):
        assert box.shape == (1, 4) and box.dtype == torch.float32
        x1, y1, x2, y2 = box[0].tolist()
        assert 0 <= x1 < x2 <= 176 and 0 <= y1 < y2 <= 176
        points = np.array(fx.landmarks[name], dtype=float).reshape(5, 2)
        px, py = (points[:, 0] - 1) * scale, (points[:, 1] - 21) * scale
        assert (x1 < px).all() and (px < x2).all() and (y1 < py).all() and (py < y2).all()
        assert x2 - x1 > 2 * (px[1] - px[0])


def test_landmark_box_geometry():
    box = landmark_boxes(np.array([[69, 109, 106, 113, 77, 142, 73, 152, 108, 154]]))[0]
    assert 40 < box[0] < 50 and 60 < box[1] < 70 and 130 < box[2] < 140 and 175 < box[3] < 185


def test_no_landmarks_means_no_boxes(tmp_path):
    fx = write_celeba(tmp_path / "data", n_ids=3, per_id=3, small_ids=0, landmarks=False)
    s = load(fx.root, tmp_path / "cache", split_fractions=(1, 0, 0))
    assert s["train"].boxes is None and len(s["train"]) == 9 and len(s["val"]) == 0


def test_wild_images_use_the_bbox_file(fx, tmp_path):
    s = load(fx.root, tmp_path, images="wild", size=64)
    t = s["test"]
    assert t.images.shape[1:] == (3, 64, 64)
    for box, name in zip(t.boxes, expected_files(fx, t.labels)):
        width, height = fx.wild_size[name]
        side = min(width, height)
        left, top = round((width - side) / 2), round((height - side) / 2)
        x, y, w, h = fx.bbox[name]
        expected = np.clip(np.array([x - left, y - top, x + w - left, y + h - top]) * 64 / side, 0, 64)
        assert np.allclose(box[0].numpy(), expected, atol=1e-4)


def test_official_partition_split(fx, tmp_path):
    s = load(fx.root, tmp_path, split_by="official")
    for part, name in enumerate(("train", "val", "test")):
        ids = set(s[name].labels.tolist())
        assert ids and all(fx.partition[i] == part for i in ids)


def test_caps_are_deterministic(fx, tmp_path):
    a = load(fx.root, tmp_path / "a", max_classes=5, per_class=2)
    b = load(fx.root, tmp_path / "b", max_classes=5, per_class=2)
    labels = torch.cat([a[n].labels for n in ("train", "val", "test")])
    assert labels.unique().numel() == 5 and len(labels) == 10
    assert a.fingerprint == b.fingerprint
    assert torch.equal(a["train"].images, b["train"].images)
    assert load(fx.root, tmp_path / "c", max_classes=5, per_class=2, seed=1).fingerprint != a.fingerprint


@pytest.mark.parametrize("layout", ["drive", "flat"])
def test_other_layouts_load_the_same(layout, splits, tmp_path):
    fx = write_celeba(tmp_path / "data", n_ids=N_IDS, per_id=PER_ID, layout=layout)
    s = load(fx.root, tmp_path / "cache")
    assert s.fingerprint == splits.fingerprint
    assert torch.equal(s["train"].images, splits["train"].images)
    assert torch.equal(s["test"].labels, splits["test"].labels)


def test_cache_is_reused(tmp_path):
    fx = write_celeba(tmp_path / "data", n_ids=4, per_id=3, small_ids=0)
    first = load(fx.root, tmp_path / "cache")
    entries = list((tmp_path / "cache" / "datasets" / "celeba").glob("*/MANIFEST.json"))
    assert len(entries) == 1
    assert load(fx.root, tmp_path / "other", size=32).fingerprint != first.fingerprint
    second = load(fx.root, tmp_path / "cache")
    assert torch.equal(first["train"].images, second["train"].images)
    assert not list((tmp_path / "cache").rglob("*.tmp"))


def test_a_changed_image_invalidates_the_decoded_cache(tmp_path):
    fx = write_celeba(tmp_path / "data", n_ids=4, per_id=3, small_ids=0)
    first = load(fx.root, tmp_path / "cache")
    image = sorted((fx.base / "img_align_celeba").iterdir())[0]
    Image.new("RGB", (178, 218), (255, 0, 0)).save(image)
    second = load(fx.root, tmp_path / "cache")
    assert second.fingerprint != first.fingerprint
    assert len(list((tmp_path / "cache" / "datasets" / "celeba").glob("*/MANIFEST.json"))) == 2


def test_verify_data_hashes_image_bytes(tmp_path, monkeypatch):
    from bench.data.base import load_dataset

    decoded = []
    real_decode = celeba.decode
    monkeypatch.setattr(celeba, "decode", lambda *a, **k: decoded.append(1) or real_decode(*a, **k))
    fx = write_celeba(tmp_path / "data", n_ids=4, per_id=3, small_ids=0)
    options = {"min_images": 3, "size": 32, "split_fractions": (0.5, 0.25, 0.25)}
    for verify in (False, True):
        load_dataset("celeba", fx.root, options, tmp_path / "cache", verify_data=verify)
    image = sorted((fx.base / "img_align_celeba").iterdir())[0]
    stat = image.stat()
    data = bytearray(image.read_bytes())
    data[len(data) // 2] ^= 0x55  # same size, mtime restored: only the bytes tell
    image.write_bytes(bytes(data))
    os.utime(image, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert len(decoded) == 2
    load_dataset("celeba", fx.root, options, tmp_path / "cache")
    assert len(decoded) == 2  # size and mtime unchanged: the stat fingerprint cannot see it
    load_dataset("celeba", fx.root, options, tmp_path / "cache", verify_data=True)
    assert len(decoded) == 3  # the bytes changed: decoded again


def test_annotation_content_changes_the_fingerprint(tmp_path):
    fx = write_celeba(tmp_path / "data", n_ids=4, per_id=3, small_ids=0)
    first = load(fx.root, tmp_path / "cache").fingerprint
    path = fx.base / "list_attr_celeba.txt"
    path.write_text(path.read_text().replace(" 1", "-1", 1))
    assert load(fx.root, tmp_path / "cache").fingerprint != first


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_missing_root_names_the_layout(tmp_path):
    with pytest.raises(BenchError) as exc:
        load(tmp_path / "nowhere", tmp_path)
    assert "img_align_celeba" in one_line(exc) and "identity_CelebA.txt" in one_line(exc)
    with pytest.raises(BenchError) as exc:
        load(None, tmp_path)
    assert "expected" in one_line(exc)


@pytest.mark.parametrize("missing", ["list_attr_celeba.txt", "identity_CelebA.txt", "list_eval_partition.txt"])
def test_missing_file_is_named(missing, tmp_path):
    fx = write_celeba(tmp_path / "data", n_ids=3, per_id=3, small_ids=0)
    (fx.base / missing).unlink()
    with pytest.raises(BenchError) as exc:
        load(fx.root, tmp_path / "cache")
    assert one_line(exc).startswith(f"celeba: {missing} not found") and "expected" in one_line(exc)


def test_missing_image_folder_and_wild_files(tmp_path):
    fx = write_celeba(tmp_path / "data", n_ids=3, per_id=3, small_ids=0)
    with pytest.raises(BenchError, match="img_celeba/ not found"):
        load(fx.root, tmp_path / "cache", images="wild")
    shutil.rmtree(fx.base / "img_align_celeba")
    with pytest.raises(BenchError, match="img_align_celeba/ not found"):
        load(fx.root, tmp_path / "cache")


def test_missing_image_file(tmp_path):
    fx = write_celeba(tmp_path / "data", n_ids=3, per_id=3, small_ids=0)
    (fx.base / "img_align_celeba" / "000002.jpg").unlink()
    with pytest.raises(BenchError, match="000002.jpg"):
        load(fx.root, tmp_path / "cache")


def test_malformed_tables(tmp_path):
    fx = write_celeba(tmp_path / "data", n_ids=3, per_id=3, small_ids=0)
    path = fx.base / "list_attr_celeba.txt"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(["99"] + lines[1:]) + "\n")
    with pytest.raises(BenchError, match="count line"):
        load(fx.root, tmp_path / "cache")
    path.write_text("\n".join(lines[:2] + [lines[2] + " 1"] + lines[3:]) + "\n")
    with pytest.raises(BenchError, match="40 integers"):
        load(fx.root, tmp_path / "cache")
    ident = fx.base / "identity_CelebA.txt"
    ident.write_text(ident.read_text() + "000099.jpg x\n")
    with pytest.raises(BenchError, match="identity_CelebA.txt:"):
        load(fx.root, tmp_path / "cache")


@pytest.mark.parametrize("images, table", [("aligned", "list_landmarks_align_celeba.txt"),
                                            ("wild", "list_bbox_celeba.txt")])
def test_a_malformed_box_table_fails_before_any_image_is_decoded(images, table, tmp_path, monkeypatch):
    fx = write_celeba(tmp_path / "data", n_ids=3, per_id=3, small_ids=0, wild=True)
    path = fx.base / table
    path.write_text("\n".join(path.read_text().splitlines()[:-2]) + "\n")  # truncated
    monkeypatch.setattr(celeba, "decode", lambda *a, **k: pytest.fail("an image was decoded"))
    with pytest.raises(BenchError, match=table):
        load(fx.root, tmp_path / "cache", images=images)


def test_public_images_are_of_identities_in_no_split(tmp_path):
    fx = write_celeba(tmp_path / "data", n_ids=4, per_id=3, small_ids=2)
    s = load(fx.root, tmp_path / "cache")
    public = CelebA().load_public(fx.root, {"min_images": 3}, tmp_path / "cache")
    used = {int(i) for t in s.sets.values() for i in t.labels}
    assert public is not None and len(public) and not set(public.labels.tolist()) & used


def test_read_table_irregular_spacing(tmp_path):
    path = tmp_path / "table.txt"
    path.write_text("2\nimage_id a b\n000001.jpg    5  -7\n000002.jpg 1 2  \n")
    header, values = read_table(path, ["000002.jpg", "000001.jpg"])
    assert header == ["a", "b"] and values.tolist() == [[1, 2], [5, -7]]


def test_decode_centre_crops_then_resizes(tmp_path):
    rng = np.random.default_rng(0)
    array = rng.integers(0, 256, (218, 178, 3), dtype=np.uint8)
    Image.fromarray(array).save(tmp_path / "a.png")
    images, sizes = decode(tmp_path, ["a.png"], 176, 84)
    reference = Image.fromarray(array).crop((1, 21, 177, 197)).resize((84, 84), Image.BILINEAR)
    assert torch.equal(images[0], torch.from_numpy(np.array(reference)).permute(2, 0, 1))
    assert sizes.tolist() == [[178, 218]]


@pytest.mark.parametrize(
    "options",
    [{"colour": 1}, {"min_images": 0}, {"split_fractions": (0.5, 0.5, 0.5)}, {"images": "raw"}, {"split_by": "x"}],
)
def test_bad_options(options):
    with pytest.raises(BenchError):
        celeba.resolve_options(options)


def test_too_few_images_per_identity_names_the_setting_to_lower(tmp_path):
    fx = write_celeba(tmp_path / "data", n_ids=4, per_id=3, small_ids=0)
    with pytest.raises(BenchError) as exc:
        CelebA().load(fx.root, {"min_images": 30}, tmp_path / "cache")
    message = one_line(exc)
    assert "min_images=30" in message and "the most any identity has is 3" in message
    assert "--set task.data.min_images=N" in message
