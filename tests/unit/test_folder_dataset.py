"""The folder dataset and the shared image reader on folders as real photo collections come."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from bench.core.registry import datasets
from bench.data import imageread
from bench.data.loaders.folder import Folder, scan_tree
from bench.data.loaders.folder_images import FolderImages
from bench.errors import BenchError
from tests.fixtures.image_folders import solid, write_messy_tree

SIZE = 32


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return write_messy_tree(tmp_path_factory.mktemp("data") / "people")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def loaded(tree, cache):
    return Folder().load(None, {"root": str(tree.root), "size": SIZE}, cache)


def opts(root: Path, **kw):
    return {"root": str(root), "size": SIZE, **kw}


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_registered_and_real():
    assert datasets.get("folder") is Folder and not Folder.synthetic


def test_every_image_is_listed_in_sorted_order_and_junk_is_skipped(tree):
    classes, skipped = scan_tree(tree.root)
    assert classes == tree.images  # hidden files and folders, .txt and .db left out; nested folders kept
    assert skipped == tree.skipped
    assert classes["alice"][-1] == "alice/holiday/005.png"


def test_images_are_decoded_to_their_class(tree, loaded):
    names = sorted(tree.images)
    for split, images in loaded.sets.items():
        files = sorted(f for c in loaded.info["class_names"][split] for f in tree.images[c])
        assert [names[i] for i in images.labels.tolist()] == [f.split("/")[0] for f in files]
        assert images.images.shape[1:] == (3, 24, 20)  # the smallest common size (frank's 24 x 24, the EXIF 20 wide)
        for f, image in zip(files, images.images):
            if f != "erin/001.jpg":  # the EXIF image is two colours
                mean = image.float().mean((1, 2))
                assert torch.allclose(mean, torch.tensor(tree.colour[f.split("/")[0]]).float(), atol=3), f
    assert loaded.info["skipped"]["files"] == len(tree.skipped)


@pytest.mark.parametrize("mode, value, expected", [
    ("RGBA", (10, 20, 30, 0), (255, 255, 255)),       # transparent: white
    ("RGBA", (10, 20, 30, 255), (10, 20, 30)),
    ("LA", (0, 0), (255, 255, 255)),
    ("L", 77, (77, 77, 77)),
    ("1", 1, (255, 255, 255)),
    ("I;16", 257 * 100, (100, 100, 100)),              # 16-bit scaled by 1/257
    ("I", 65535, (255, 255, 255)),
    ("CMYK", (0, 0, 0, 0), (255, 255, 255)),
    ("CMYK", (255, 0, 0, 0), (0, 255, 255)),
])
def test_every_mode_becomes_8_bit_rgb(mode, value, expected):
    image = Image.new(mode, (8, 8), value)
    buffer = io.BytesIO()
    image.save(buffer, "TIFF" if mode in ("CMYK", "I") else "PNG")
    fitted = imageread.read_image(buffer.getvalue(), (4, 4), name="x")
    assert fitted.pixels.dtype == np.uint8 and fitted.pixels.shape == (3, 4, 4)
    assert fitted.pixels[:, 0, 0].tolist() == list(expected)


def test_palette_transparency_and_grey_output():
    image = Image.new("P", (8, 8), 0)
    image.putpalette([200, 0, 0] + [0, 0, 0] * 255)
    buffer = io.BytesIO()
    image.save(buffer, "PNG", transparency=0)
    assert imageread.read_image(buffer.getvalue(), (4, 4)).pixels[:, 0, 0].tolist() == [255, 255, 255]
    grey = imageread.read_image(buffer.getvalue(), (4, 4), grey=True)
    assert grey.pixels.shape == (1, 4, 4) and grey.pixels[0, 0, 0] == 255


def test_exif_orientation_is_applied(tree):
    fitted = imageread.read_image(tree.root / "erin" / "001.jpg", (40, 20))
    assert fitted.native == (40, 20)  # stored 40 wide and 20 high, displayed 20 x 40
    top, bottom = fitted.pixels[:, 2, 10].astype(int), fitted.pixels[:, 37, 10].astype(int)
    assert top[0] > 200 and top[2] < 40 and bottom[2] > 200 and bottom[0] < 40


def test_centre_crop_to_the_aspect_then_resize():
    pixels = np.zeros((20, 60, 3), np.uint8)
    pixels[:, 20:40] = 255  # the centre square is white, the sides black
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    fitted = imageread.read_image(buffer.getvalue(), (10, 10))
    assert fitted.crop == (20, 0, 20, 20) and fitted.pixels.min() == 255
    assert imageread.crop_box(100, 50, (20, 40)) == (0, 37, 50, 25)  # height 100, width 50 -> 50 x 25


def test_large_jpeg_decoded_at_a_reduced_scale_matches_a_full_decode():
    image = Image.new("RGB", (800, 600), (30, 90, 150))
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=95)
    fitted = imageread.read_image(buffer.getvalue(), (32, 32))
    assert fitted.native == (600, 800) and fitted.crop == (100, 0, 600, 600)
    assert np.abs(fitted.pixels.astype(int) - np.array([30, 90, 150])[:, None, None]).max() <= 3


def test_splits_are_class_disjoint_and_reproducible(tree, loaded, cache):
    names = loaded.info["class_names"]
    assert sum(len(v) for v in names.values()) == len(tree.images)
    assert not (set(names["train"]) & set(names["val"]) or set(names["train"]) & set(names["test"])
                or set(names["val"]) & set(names["test"]))
    assert [len(names[s]) for s in ("train", "val", "test")] == [6, 1, 2]
    assert Folder().inspect(None, opts(tree.root)) == Folder().inspect(None, opts(tree.root))
    again = Folder().load(None, opts(tree.root), cache)
    assert again.fingerprint == loaded.fingerprint and again.info["class_names"] == names
    other = [Folder().load(None, opts(tree.root, seed=s), cache).info["class_names"] for s in (1, 2, 3)]
    assert any(o != names for o in other)


def test_upscaling_is_counted_and_recorded(tree, loaded, cache):
    report = loaded.info["images"]
    assert report["stored"] == [24, 20]  # images smaller than size are stored at their own size, not upscaled
    assert report["upscaled"] == 0
    assert report["native"]["min"] == [24, 20] and report["native"]["max"] == [40, 40]
    assert Folder().load(None, opts(tree.root), cache).info["images"] == report  # from the cache: the same
    assert Folder().load(None, opts(tree.root, size=16), cache).info["images"]["upscaled"] == 0
    by_image = FolderImages().load(None, opts(tree.root), cache).info["images"]  # the DP ViT resizes after the release
    assert by_image["stored"] == [24, 20] and by_image["upscaled"] == 0


def test_byte_identical_images_across_splits_are_reported(tree, loaded, tmp_path, capsys):
    root = tmp_path / "people"
    shutil.copytree(tree.root, root)
    names = loaded.info["class_names"]
    source = tree.images[names["train"][0]][0]
    target = f"{names['test'][0]}/copy{Path(source).suffix}"
    shutil.copy(root / source, root / target)
    splits = Folder().load(None, opts(root), tmp_path / "cache")
    dup = splits.info["duplicates"]
    assert dup["across_splits"] == 1 and dup["examples"] == [f"{source} (train) = {target} (test)"]
    assert "bench: warning: folder: 1 image(s) are byte-identical" in capsys.readouterr().err
    assert loaded.info["duplicates"]["across_splits"] == 0


def test_attributes_and_boxes_follow_the_images(tmp_path):
    root = tmp_path / "people"
    for person in ("ann", "ben", "cat", "dan"):
        (root / person).mkdir(parents=True)
        for i in range(2):
            solid((10, 20, 30), (64, 32)).save(root / person / f"{i}.png")
    (root / "attributes.csv").write_text("file,glasses,age\nann/0.png,yes,3\nann/1.png,no,10\nben/0.png,,3\n")
    rows = ["file,x1,y1,x2,y2"] + [f"{p}/{i}.png" for p in ("ben", "cat", "dan") for i in range(2)]
    rows += ["ann/0.png,16,0,48,32", "ann/0.png,20,4,30,12", "ann/0.png,0,0,10,10", "ann/1.png"]
    (root / "boxes.csv").write_text("\n".join(rows) + "\n")
    splits = Folder().load(None, opts(root, size=16, split_fractions=[0.5, 0.25, 0.25]), tmp_path / "cache")
    everything = {}
    for s in splits.sets.values():
        for i, label in enumerate(s.labels.tolist()):
            everything.setdefault(label, []).append((s.attrs["glasses"][i].item(), s.attrs["age"][i].item(),
                                                     s.boxes[i].tolist()))
    assert splits[next(iter(splits.sets))].attr_names == {"glasses": ["no", "yes"], "age": ["3", "10"]}
    assert everything[0] == [(1, 0, [[0.0, 0.0, 16.0, 16.0], [2.0, 2.0, 7.0, 6.0]]), (0, 1, [])]  # the third box
    assert everything[1] == [(-1, 0, []), (-1, -1, [])]                      # lies outside the centre crop
    assert splits.info["annotations"] == ["attributes.csv", "boxes.csv"]


def test_file_names_that_are_not_utf8_are_read(tmp_path):
    """A zip made on Windows and unpacked on Linux leaves names of bytes that are not UTF-8."""
    import os

    root = tmp_path / "people"
    for c, person in enumerate(("ann", "bob", "cy")):
        (root / person).mkdir(parents=True)
        for i in range(2):
            name = os.fsdecode(f"{person}-Ren".encode() + b"\xe9" + f"e_{i}.png".encode())
            solid((30 * c + 10 * i, 90, 200)).save(root / person / name)
    splits = Folder().load(None, opts(root, min_images=2, split_fractions=(1, 0, 0)), tmp_path / "cache")
    assert len(splits["train"]) == 6 and splits["train"].labels.unique().numel() == 3


def test_a_class_below_min_images_is_left_out(tree, cache):
    splits = Folder().load(None, opts(tree.root, min_images=5, split_fractions=[0.5, 0, 0.5]), cache)
    assert sorted(splits.info["class_names"]["train"] + splits.info["class_names"]["test"]) == ["alice", "bob"]
    assert splits.info["left_out"]["classes"] == len(tree.images) - 2  # the others have 4 images
    assert len(splits["val"]) == 0
    with pytest.raises(BenchError) as exc:
        Folder().inspect(None, opts(tree.root, min_images=5))
    assert "min_images=5" in one_line(exc) and "task.data.min_images" in str(exc.value)


@pytest.mark.parametrize("options, words", [
    ({}, ["task.data.root=DIR"]),
    ({"root": "/nonexistent/people"}, ["/nonexistent/people does not exist", "ROOT/<label>/<image>"]),
    ({"root": "{tree}", "sise": 3}, ["unknown option 'sise'", "did you mean 'task.data.size'"]),
    ({"root": "{tree}", "size": 0}, ["option size"]),
    ({"root": "{tree}", "split_fractions": [0.5, 0.5, 0.5]}, ["split_fractions"]),
])
def test_bad_settings_are_one_line_errors(tree, options, words):
    options = {k: (v.format(tree=tree.root) if isinstance(v, str) else v) for k, v in options.items()}
    with pytest.raises(BenchError) as exc:
        Folder().inspect(None, options)
    assert all(w in one_line(exc) for w in words)


def test_an_empty_tree_and_bad_annotations_are_one_line_errors(tmp_path):
    root = tmp_path / "empty"
    (root / "ann").mkdir(parents=True)
    (root / "ann" / "notes.txt").write_text("x")
    with pytest.raises(BenchError) as exc:
        Folder().inspect(None, opts(root))
    assert "no images in class folders" in one_line(exc) and "ROOT/<label>/<image>" in str(exc.value)
    for person in ("ann", "ben", "cat"):
        for i in range(2):
            (root / person).mkdir(exist_ok=True)
            solid((1, 2, 3)).save(root / person / f"{i}.png")
    (root / "attributes.csv").write_text("file,glasses\nann/0.png,yes\nann/9.png,no\n")
    with pytest.raises(BenchError) as exc:
        Folder().inspect(None, opts(root))
    assert "attributes.csv:3" in one_line(exc) and "ann/9.png" in str(exc.value)
    (root / "attributes.csv").unlink()
    (root / "boxes.csv").write_text("ann/0.png,1,2,3,4\n")
    with pytest.raises(BenchError) as exc:
        Folder().inspect(None, opts(root))
    assert "not listed" in one_line(exc)


def test_a_corrupt_image_is_named_when_planned_and_when_decoded(tree, tmp_path):
    root = tmp_path / "people"
    shutil.copytree(tree.root, root)
    (root / "grace" / "002.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    for step in (lambda: Folder().inspect(None, opts(root)),  # the plan reads headers for the stored size
                 lambda: Folder().load(None, opts(root), tmp_path / "cache")):
        with pytest.raises(BenchError) as exc:
            step()
        assert "grace/002.png" in one_line(exc)


def test_inspect_decodes_nothing_and_matches_load(tree, loaded, monkeypatch, tmp_path):
    def fail(*args, **kwargs):
        raise AssertionError("inspect decoded an image")

    monkeypatch.setattr(imageread, "read_image", fail)
    shape = Folder().inspect(None, opts(tree.root))
    assert {s: sorted(v.labels.bincount()[v.labels.unique()].tolist(), reverse=True) for s, v in loaded.sets.items()} \
        == {s: list(v.counts) for s, v in shape.items()}
    assert not list(tmp_path.iterdir())


def test_the_cache_is_reused_and_a_changed_file_invalidates_it(tree, tmp_path, monkeypatch):
    root = tmp_path / "people"
    shutil.copytree(tree.root, root)
    first = Folder().load(None, opts(root), tmp_path / "cache")
    real = imageread.read_image

    def fail(*args, **kwargs):
        raise AssertionError("decoded again")

    monkeypatch.setattr(imageread, "read_image", fail)
    second = Folder().load(None, opts(root), tmp_path / "cache")
    assert second.fingerprint == first.fingerprint
    assert torch.equal(second["train"].images, first["train"].images)
    solid((1, 2, 3)).save(root / "grace" / "001.png")
    with pytest.raises(AssertionError, match="decoded again"):
        Folder().load(None, opts(root), tmp_path / "cache")
    monkeypatch.setattr(imageread, "read_image", real)
    assert Folder().load(None, opts(root), tmp_path / "cache").fingerprint != first.fingerprint


def test_grey_option_and_public_classes(tree, cache):
    grey = Folder().load(None, opts(tree.root, grey=True, min_images=5, split_fractions=[0.5, 0, 0.5]), cache)
    assert grey["train"].images.shape[1] == 1
    public = Folder().load_public(None, opts(tree.root, min_images=5, split_fractions=[0.5, 0, 0.5]), cache)
    in_splits = {lab for s in grey.sets.values() for lab in s.labels.tolist()}
    assert len(public) == len(grey["train"]) and not set(public.labels.tolist()) & in_splits
    assert Folder().load_public(None, opts(tree.root), cache) is None


def test_loads_inside_a_cell_are_recorded_with_what_loads_them_again(tree, cache, monkeypatch):
    from bench.data import caching
    from bench.data.base import image_set_digest, load_dataset, load_public, recording_reads
    from bench.data.loaders import folder

    options = opts(tree.root, min_images=5, split_fractions=[0.5, 0, 0.5])
    assert load_dataset("folder", None, options, cache) is not None  # outside a cell: nothing recorded
    seen = []
    real = folder.source_fingerprint
    monkeypatch.setattr(folder, "source_fingerprint",
                        lambda paths: seen.append(caching.VERIFY_BYTES.get()) or real(paths))
    with recording_reads(verify_data=True) as reads:
        splits = load_dataset("folder", None, options, cache)
        public = load_public("folder", None, options, cache)
        load_dataset("folder", None, options, cache)  # read twice, recorded once
        assert load_public("folder", None, opts(tree.root), cache) is None  # no public set: nothing read
    assert seen and all(seen)  # the cell's --verify-data holds for every load inside it
    assert reads == [
        {"dataset": "folder", "part": "splits", "options": options, "fingerprint": splits.fingerprint,
         "synthetic": False},
        {"dataset": "folder", "part": "public", "options": options, "fingerprint": image_set_digest(public),
         "synthetic": False},
    ]
    assert image_set_digest(public) != image_set_digest(public.with_images(255 - public.images))
