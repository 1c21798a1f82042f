"""ImageNet face identities (the imagenet loader's ``face_identities`` option): checks, face table, face crops, skips."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from bench.cell.attacks import skipped_face_attacks
from bench.core import registry
from bench.core.interfaces import Release
from bench.data import imageread
from bench.data.base import ImageSet, Splits
from bench.data.loaders import imagenet_annotations as ann
from bench.data.loaders.imagenet import ImageNet
from bench.errors import BenchError
from bench.release.facecrops import face_crop_view, has_face_table
from tests.fixtures import imagenet_fixture as fix

SIZE = 50
OFFICIAL = {"size": SIZE, "val_from": "official"}
HELD = {"size": SIZE, "val_fraction": 0.3}


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    fx = fix.write_imagenet(tmp_path_factory.mktemp("data"))
    fix.write_identities(fx, fx.base / "ids.csv")
    return fx


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def official(fx, cache):
    return ImageNet().load(fx.root, OFFICIAL, cache)


@pytest.fixture(scope="module")
def people(fx, cache, official):
    """The same data with identities (read from the cache the identity-free load wrote)."""
    return ImageNet().load(fx.root, {**OFFICIAL, "face_identities": "ids.csv"}, cache)


def order(fx, split):
    return [n for w in fix.WNIDS for n in (fx.train if split == "train" else fx.val)[w]]


def one_line(exc: pytest.ExceptionInfo) -> str:
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_without_the_option_there_is_no_face_table(official):
    assert "faces" not in official.info and "face_identities" not in official.info
    assert official.info["face_counts"]["with_faces"]["train"] == 2 and not has_face_table(official)


def test_face_table_has_the_scene_format_and_the_stored_boxes(fx, official, people):
    assert has_face_table(people) and people.fingerprint == official.fingerprint  # the pixels did not change
    tables = people.info["faces"]
    assert tables["val"] is tables["test"]  # val_from=official: val is test
    two, one, val = order(fx, "train").index(fix.TWO_FACES), order(fx, "train").index(fix.ONE_FACE), \
        order(fx, "test").index(fix.VAL_FACE)
    train = tables["train"]
    assert set(train) == {"image", "identity", "box"}
    assert train["image"].dtype == train["identity"].dtype == torch.int64 and train["box"].dtype == torch.float32
    assert train["image"].tolist() == sorted([two, two, one]) and train["box"].shape == (3, 4)
    alice, bob = 0, 1  # sorted names: alice, bob, carol
    rows = {(i, tuple(b.tolist())): ident for i, b, ident in zip(train["image"].tolist(), train["box"],
                                                                  train["identity"].tolist())}
    stored = people["train"].boxes
    assert rows == {(two, tuple(stored[two][0].tolist())): alice, (two, tuple(stored[two][1].tolist())): bob,
                    (one, tuple(stored[one][0].tolist())): bob}
    assert tables["test"]["image"].tolist() == [val] and tables["test"]["identity"].tolist() == [alice]
    assert torch.equal(tables["test"]["box"], people["test"].boxes[val])
    report = people.info["face_identities"]
    assert report["names"] == ["alice", "bob", "carol"] and report["rows"] == 5 and report["identities"] == 3
    assert report["usable_identities"] == 2 and report["degenerate"] == 1 and report["outside_crop"] == 0
    assert report["faces"] == {"train": 3, "val": 1, "test": 1} and report["outside_selection"] == 0
    assert people.info["face_counts"] == official.info["face_counts"]


def test_identities_do_not_decode_the_images_again(fx, cache, official, monkeypatch, capsys):
    monkeypatch.setattr(imageread, "read_image", lambda *a, **k: pytest.fail("decoded again"))
    again = ImageNet().load(fx.root, {**OFFICIAL, "face_identities": str(fx.base / "ids.csv")}, cache)
    assert again.fingerprint == official.fingerprint and has_face_table(again)
    assert "2 of the 3 identities in" in capsys.readouterr().err  # carol's only face is degenerate


def test_held_out_splits_index_faces_within_their_split(fx, tmp_path):
    splits = ImageNet().load(fx.root, {**HELD, "face_identities": "ids.csv"}, tmp_path / "cache")
    tables = splits.info["faces"]
    assert sum(len(tables[s]["image"]) for s in ("train", "val", "test")) == 4
    for split in ("train", "val", "test"):
        for i, box in zip(tables[split]["image"].tolist(), tables[split]["box"]):
            assert any(torch.equal(box, b) for b in splits[split].boxes[i]), (split, i)
            assert (splits[split].images[i][:, int(box[1] + box[3]) // 2, int(box[0] + box[2]) // 2] > 230).all()


def test_crops_of_the_identity_view_are_the_labelled_faces(people):
    released = Release(people.replace_images({s: people[s].images for s in people.sets}), "identity", {}, 0, "rk")
    view, release = face_crop_view(people, released, seed=0, size=24)
    labels = torch.cat([view[s].labels for s in ("train", "val", "test")])
    assert sorted(labels.tolist()) == [0, 0, 1, 1]  # val (the test images) is counted once
    assert {s: len(set(view[s].labels.tolist())) for s in view.sets} == {"train": 1, "val": 0, "test": 1}
    for s in view.sets:
        assert view[s].attrs == {} and view[s].attr_names == {}
        assert all(len(b) == 1 for b in view[s].boxes)
        if len(view[s]):
            assert (view[s].images[:, :, 12, 12] > 230).all()  # the face (painted white) is in the middle
            assert torch.equal(release.splits[s].images, view[s].images)
    no_ids = Splits(people.dataset, people.sets, people.fingerprint, info={**people.info,
                                                                           "faces": {"train": {}, "test": {}}})
    with pytest.raises(BenchError, match="no face table"):
        face_crop_view(no_ids, released, 0)


def test_the_view_key_follows_the_table(people):
    released = Release(people.replace_images({s: people[s].images for s in people.sets}), "identity", {}, 0, "rk")
    swapped = {s: {**t, "identity": 1 - t["identity"]} for s, t in people.info["faces"].items()}
    other = Splits(people.dataset, people.sets, people.fingerprint, info={**people.info, "faces": swapped})
    view, release = face_crop_view(people, released, 0, size=24)
    view2, release2 = face_crop_view(other, released, 0, size=24)
    assert view.fingerprint != view2.fingerprint and release.key != release2.key


@pytest.mark.parametrize("case, expected", [
    ("no-file", "option face_identities: no file"),
    ("not-a-path", "option face_identities expects the path of a CSV with columns url,box,identity"),
    ("no-column", "has no column box (its columns: url, identity)"),
    ("empty", "has no column url, box, identity (its columns: none, the file is empty)"),
    ("no-entry", "line 2: url 'train/n02102040/n02102040_2.JPEG' has no entry in"),
    ("bad-url", "line 2: url 'images/x.JPEG' is not train/<wnid>/<file>.JPEG or val/<file>.JPEG"),
    ("box-out-of-range", "lists 2 box(es) in face_annotations_ILSVRC.json, so box 2 is not one of them"),
    ("box-not-a-number", "line 2: box 'first' is not a 0-based position in the url's bboxes list"),
    ("no-identity", "line 3: the identity is empty"),
    ("twice", "line 3: box 0 of url 'train/n01440764/n01440764_10026.JPEG' is already labelled on line 2"),
    ("too-few", "1 of the 2 identities in"),
])
def test_bad_identities_are_one_line_errors_before_any_work(fx, tmp_path, case, expected, monkeypatch):
    monkeypatch.setattr(imageread, "read_image", lambda *a, **k: pytest.fail("decoded before the check"))
    path = tmp_path / "ids.csv"
    rows = {
        "no-entry": [(fix.UNANNOTATED, 0, "x")],
        "bad-url": [("images/x.JPEG", 0, "x")],
        "box-out-of-range": [(fix.TWO_FACES, 2, "x")],
        "box-not-a-number": [(fix.TWO_FACES, "first", "x")],
        "no-identity": [(fix.TWO_FACES, 0, "x"), (fix.TWO_FACES, 1, " ")],
        "twice": [(fix.TWO_FACES, 0, "x"), (fix.TWO_FACES, 0, "y")],
        "too-few": [(fix.TWO_FACES, 0, "x"), (fix.TWO_FACES, 1, "y"), (fix.ONE_FACE, 0, "y"),
                    (fix.DEGENERATE, 0, "x")],
    }.get(case, fix.IDENTITIES)
    fix.write_identities(fx, path, rows)
    if case == "no-column":
        path.write_text("url,identity\n" + "".join(f"{fx.url(n)},{i}\n" for n, _, i in rows))
    elif case == "empty":
        path.write_text("")
    value = {"no-file": str(tmp_path / "none.csv"), "not-a-path": 5}.get(case, str(path))
    with pytest.raises(BenchError) as exc:
        ImageNet().inspect(fx.root, {**OFFICIAL, "face_identities": value})
    message = one_line(exc)
    assert expected in message and message.startswith("imagenet: option face_identities"), message


def test_a_relative_path_is_read_from_the_imagenet_folder(fx, tmp_path):
    base = tmp_path / "imagenet"
    shutil.copytree(fx.base, base)
    (base / "ids.csv").unlink()
    with pytest.raises(BenchError) as exc:
        ImageNet().inspect(tmp_path, {"face_identities": "ids.csv"})
    assert f"no file {base / 'ids.csv'} (a relative path is read from {base})" in one_line(exc)
    fix.write_identities(fx, tmp_path / "elsewhere.csv")
    assert ImageNet().inspect(tmp_path, {"face_identities": "../elsewhere.csv"})["test"].images == 8


def _ctx_splits(with_table: bool) -> Splits:
    images = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    split = ImageSet(images, torch.zeros(2, dtype=torch.int64))
    table = {"image": torch.tensor([0, 1]), "identity": torch.tensor([0, 1]), "box": torch.ones(2, 4)}
    info = {"faces": {"train": table, "test": table}} if with_table else {}
    return Splits("imagenet", {"train": split, "test": split}, "f", info=info)


def test_imagenet_cells_skip_face_crop_adversaries_without_identities_and_scenes_do_not():
    imagenet = registry.tasks.get("classify_imagenet_obf_obf")
    attacks = imagenet.attacks
    pretrained = ("face_reid_pretrained", "face_reid_pretrained_adapted", "face_reid_pretrained_restored")
    assert attacks == ("face_detect", "face_reid", "face_reid_adapted", "denoise", *pretrained)
    skipped = skipped_face_attacks(_ctx_splits(False), imagenet, attacks)
    assert set(skipped) == {"face_reid", "face_reid_adapted", "denoise", *pretrained}
    assert all("task.data.face_identities" in why for why in skipped.values())
    assert skipped_face_attacks(_ctx_splits(True), imagenet, attacks) == {}
    assert skipped_face_attacks(_ctx_splits(False), imagenet, ("face_detect",)) == {}
    transfer = registry.tasks.get("transfer_imagenet_cifar10")
    assert set(skipped_face_attacks(_ctx_splits(False), transfer, transfer.attacks)) == set(skipped)
    scenes = registry.tasks.get("classify_synth_scenes_obf_obf")
    assert skipped_face_attacks(_ctx_splits(False), scenes, scenes.attacks) == {}  # face_crop_view raises there


def test_faces_the_centre_crop_cuts_away_are_counted_and_can_leave_too_few(fx, tmp_path):
    base = tmp_path / "imagenet"
    shutil.copytree(fx.base, base)
    entries = json.loads((base / ann.FACES_FILE).read_text())
    two = next(e for e in entries if e["url"] == fix.TWO_FACES)
    two["bboxes"].append({"x0": 10, "y0": 10, "x1": 40, "y1": 40})  # left of the 200 x 100 image's crop (x 50..150)
    (base / ann.FACES_FILE).write_text(json.dumps(entries))
    moved = fix.ImageNetFixture(tmp_path, base)
    rows = [(fix.TWO_FACES, 2, "x"), (fix.ONE_FACE, 0, "x"), (fix.TWO_FACES, 0, "y"), (fix.VAL_FACE, 0, "y")]
    fix.write_identities(moved, base / "cut.csv", rows)
    with pytest.raises(BenchError) as exc:
        ImageNet().load(tmp_path, {**OFFICIAL, "face_identities": "cut.csv"}, tmp_path / "cache")
    assert "1 of the 2 identities in" in one_line(exc) and "(1 cut away)" in one_line(exc)
    fix.write_identities(moved, base / "ok.csv", [*rows, (fix.TWO_FACES, 1, "x")])
    splits = ImageNet().load(tmp_path, {**OFFICIAL, "face_identities": "ok.csv"}, tmp_path / "cache")
    report = splits.info["face_identities"]
    assert report["outside_crop"] == 1 and report["usable_identities"] == 2 and report["faces"]["train"] == 3
