"""Issue 59: mechanisms run at the images' own size in every profile; folders are shaped by one set of option names."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from bench.core.interfaces import RunContext
from bench.core.registry import scoped
from bench.core.splits import SplitShape
from bench.data.classsplit import split_classes
from bench.data.loaders.folder import Folder
from bench.data.loaders.folder_images import FolderImages
from bench.data.loaders.labelled_folder import LabelledFolder
from bench.errors import BenchError

PROFILES = ("smoke", "quick", "paper")


def write_people(root: Path, people: int, per: int, size_hw: tuple[int, int] = (120, 100)) -> Path:
    """Writes ``people`` folders of ``per`` random RGB PNGs of ``size_hw``."""
    rng = np.random.default_rng(0)
    for p in range(people):
        for i in range(per):
            path = root / f"p{p:02d}" / f"{i:02d}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (*size_hw, 3)).astype(np.uint8)).save(path)
    return root


def images_per_class(split) -> int:
    return int(split.labels.bincount().max())


def test_every_profile_releases_a_face_folder_at_its_own_size_and_the_networks_resize(tmp_path):
    from bench.cell.data import image_chain
    from bench.cell.report import _released_at
    from bench.core.registry import mechanisms, tasks
    from bench.release.dataset import apply_to_split

    root = write_people(tmp_path / "faces", people=12, per=4)
    seen = []
    blur = mechanisms.get("blur")(radius=2.0)
    original = blur.apply

    def recording(images, **kwargs):
        seen.append(tuple(images.shape[-2:]))
        return original(images, **kwargs)

    blur.apply = recording
    ctx = RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=None, cache_dir=tmp_path / "c")
    with scoped():
        for profile in PROFILES:
            task = tasks.get("fewshot_folder")(profile, {"data.root": str(root)})
            assert "size" not in task.data_options()
            splits = Folder().load(None, task.data_options(), tmp_path / "cache")
            apply_to_split(blur, splits["test"], ctx, f"release/{profile}")
            chain = image_chain(splits, task)
            assert chain["stored"] == [120, 100] and chain["task_input"] == [task.config.image_size] * 2
            assert _released_at(chain) == "the mechanism runs here, at the images' own size"
    assert seen and set(seen) == {(120, 100)}


def test_a_size_the_user_sets_still_caps_the_stored_size(tmp_path):
    root = write_people(tmp_path / "faces", people=6, per=3)
    splits = Folder().load(None, {"root": str(root), "size": 60}, tmp_path / "cache")
    assert splits["train"].images.shape[-2:] == (60, 60) and splits.info["storage"]["target"] == [60, 60]
    native = Folder().load(None, {"root": str(root)}, tmp_path / "cache")
    assert native["train"].images.shape[-2:] == (120, 100) and native.info["storage"]["target"] is None
    assert native.fingerprint != splits.fingerprint


def test_the_plan_reads_the_stored_size_from_headers_and_refuses_what_cannot_fit(tmp_path, monkeypatch):
    from bench.system import bounds

    root = write_people(tmp_path / "faces", people=6, per=3)
    shape = Folder().inspect(None, {"root": str(root)})
    assert {s.stored for s in shape.values()} == {(120, 100)}

    class Task:
        config = None

        def data_options(self):
            return {"root": str(root)}

        def input_size(self):
            return None

    huge = {"train": SplitShape((10,) * 1000, stored=(20000, 20000))}
    monkeypatch.setattr(bounds, "available_memory", lambda: 64 * 10 ** 9)
    with pytest.raises(BenchError) as caught:
        bounds.check_cell(Task(), {}, huge, torch.device("cpu"))
    message = str(caught.value)
    assert "10,000 stored images of 20000x20000" in message and "task.data.per_class" in message and "\n" not in message
    bounds.check_cell(Task(), {}, shape, torch.device("cpu"))  # 18 photos of 120 x 100 fit


def test_per_class_caps_every_identity_with_one_name_in_every_loader(tmp_path):
    from bench.data.loaders.celeba import CelebA
    from bench.data.loaders.market1501 import Market1501
    from tests.fixtures.celeba_fixture import write_celeba
    from tests.fixtures.reid_fixtures import write_market1501

    root = write_people(tmp_path / "faces", people=8, per=6, size_hw=(24, 20))
    cache = tmp_path / "cache"
    folder = Folder().load(None, {"root": str(root), "per_class": 3}, cache)
    assert max(images_per_class(folder[s]) for s in ("train", "val", "test")) == 3
    again = Folder().load(None, {"root": str(root), "per_class": 3}, tmp_path / "other")
    assert torch.equal(again["train"].images, folder["train"].images)  # a seeded choice
    assert images_per_class(FolderImages().load(None, {"root": str(root), "per_class": 4}, cache)["train"]) <= 4
    labelled = LabelledFolder().load(None, {"root": str(root), "per_class": 4, "min_images": 1}, cache)
    assert sum(len(labelled[s]) for s in ("train", "val", "test")) == 8 * 4
    hf = write_hf(tmp_path / "hf", people=8, per=6)
    from bench.data.loaders.hf import HuggingFace

    table = HuggingFace().load(None, {"path": str(hf), "image_column": "image", "per_class": 2}, cache)
    assert max(images_per_class(table[s]) for s in ("train", "val", "test")) == 2
    celeba = write_celeba(tmp_path / "celeba", n_ids=6, per_id=4, small_ids=0)
    faces = CelebA().load(celeba.root, {"min_images": 3, "per_class": 2, "max_classes": 5}, cache)
    assert max(images_per_class(faces[s]) for s in ("train", "val", "test")) == 2
    assert sum(int(faces[s].labels.unique().numel()) for s in ("train", "val", "test")) == 5
    write_market1501(tmp_path / "market")
    market = Market1501().load(tmp_path / "market", {"per_class": 1, "max_classes": 2}, cache)
    assert images_per_class(market["train"]) == 1 and int(market["train"].labels.unique().numel()) == 2


def write_hf(root: Path, people: int, per: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def png(seed: int) -> bytes:
        buffer = io.BytesIO()
        Image.fromarray(np.random.default_rng(seed).integers(0, 256, (24, 20, 3)).astype(np.uint8)).save(buffer, "PNG")
        return buffer.getvalue()

    folder = root / "data"
    folder.mkdir(parents=True)
    names = [f"person{i}" for i in range(people) for _ in range(per)]
    pq.write_table(pa.table({"image": [png(k) for k in range(len(names))], "label": names}),
                   folder / "train-00000-of-00001.parquet")
    return root


def test_test_classes_and_the_profiles_minimum_shape_the_class_split():
    base = {"min_images": 2, "split_fractions": (0.64, 0.16, 0.20), "seed": 0, "max_classes": None}
    counts = {f"c{i}": 5 for i in range(40)}
    sizes = lambda opts: {s: len(v) for s, v in split_classes(counts, {**base, **opts}, "folder").items()}  # noqa: E731
    assert sizes({}) == {"train": 26, "val": 6, "test": 8}
    assert sizes({"min_test_classes": 20}) == {"train": 16, "val": 4, "test": 20}
    assert sizes({"test_classes": 30}) == {"train": 8, "val": 2, "test": 30}
    small = {f"c{i}": 5 for i in range(30)}  # too few to give 20 and keep as many: the fractions stand
    assert len(split_classes(small, {**base, "min_test_classes": 20}, "folder")["test"]) == 6
    groups = split_classes(counts, {**base, "min_test_classes": 20}, "folder")
    assert sorted(sum(groups.values(), [])) == sorted(counts)  # disjoint, nothing lost
    with pytest.raises(BenchError, match="test_classes=39 leaves 1 of the 40 classes for train and val, which need 2"):
        split_classes(counts, {**base, "test_classes": 39}, "folder")


def test_a_face_folder_of_40_people_has_20_test_people_in_every_profile(tmp_path):
    from bench.core.registry import tasks

    root = write_people(tmp_path / "faces", people=40, per=2, size_hw=(16, 16))
    with scoped():
        for profile in PROFILES:
            shape = Folder().inspect(None, tasks.get("fewshot_folder")(profile, {"data.root": str(root)})
                                     .data_options())
            assert len(shape["test"].counts) == 20


@pytest.mark.parametrize("dataset, given, suggested", [
    ("folder", "per_id", "per_class"), ("folder", "images_per_class", "per_class"),
    ("folder", "max_ids", "max_classes"), ("folder", "test_ids", "test_classes"), ("hf", "per_identity", "per_class"),
    ("celeba", "per_id", "per_class"), ("celeba", "max_ids", "max_classes"), ("market1501", "per_id", "per_class"),
    ("imagenet", "images_per_class", "per_class"), ("synth_faces", "per_class", "per_id"),
    ("labelled_folder", "per_id", "per_class"),
])
def test_did_you_mean_points_to_the_name_the_dataset_knows(dataset, given, suggested, tmp_path):
    from bench.core.registry import datasets

    root = write_people(tmp_path / "faces", people=6, per=3, size_hw=(16, 16))
    where = {"folder": "root", "labelled_folder": "root", "hf": "path"}
    options = {given: 3, **({where[dataset]: str(root)} if dataset in where else {})}
    with pytest.raises(BenchError) as caught:
        datasets.get(dataset)().inspect(tmp_path, options)
    message = str(caught.value)
    assert f"did you mean 'task.data.{suggested}'" in message and "\n" not in message


def test_pixel_parameters_say_so_in_bench_list():
    from bench.cli.list_cmd import describe
    from bench.core.registry import mechanisms

    for name, param in (("blur", "radius"), ("pixelate", "block"), ("dp_pix", "block"), ("image_dp", "block")):
        lines = describe("mechanisms", name, mechanisms.get(name))
        line = next(line for line in lines if line.strip().startswith(param))
        assert "in pixels of each image at the size it has in the data" in line
    line = next(line for line in describe("mechanisms", "dp_pix", mechanisms.get("dp_pix")) if "epsilon" in line)
    assert "pixels" not in line
