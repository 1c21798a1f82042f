"""Attributes on any face folder: attributes.csv and attribute columns read, age binned, and refused in the plan."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.core.registry import scoped
from bench.data.attribute_table import AGE_GROUPS, code_attribute, coding_note
from bench.errors import BenchError
from tests.fixtures.image_folders import solid

FAIRFACE_AGES = [name for _, name in AGE_GROUPS]


def write_attribute_folder(root: Path, n: int = 40, side: int = 12) -> list[tuple[str, str, int]]:
    """Writes n face-like crops at the root and in a sub-folder, listed in attributes.csv (file,gender,age)."""
    rows = []
    for i in range(n):
        gender, age = ("female", "male")[i % 2], (1, 5, 15, 25, 35, 45, 55, 65, 80, 30, 22, 18, 40)[i % 13] + i % 3
        name = f"{age}_{i % 2}_0_{i:04d}.jpg" if i % 4 else f"more/{age}_{i % 2}_0_{i:04d}.png"
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        solid((200 * (i % 2), 40 + 4 * i % 200, 90), (side, side)).save(root / name)
        rows.append((name, gender, age))
    (root / "attributes.csv").write_text("file,gender,age\n" + "".join(f"{f},{g},{a}\n" for f, g, a in rows))
    return rows


def test_age_in_years_is_binned_into_fairface_groups_and_few_values_stay_classes():
    years = list(range(0, 100, 4)) + ["", None]
    codes, names = code_attribute("age", years)
    assert names == FAIRFACE_AGES and codes[:4] == [0, 1, 1, 2] and codes[-2:] == [-1, -1]
    assert codes[years.index(68)] == 7 and codes[years.index(72)] == 8   # 60-69, more than 70
    assert code_attribute("age", ["3", "10", ""]) == ([0, 1, -1], ["3", "10"])  # few whole numbers: groups already
    assert code_attribute("age", ["20-29", "3-9"]) == ([0, 1], ["20-29", "3-9"])
    assert code_attribute("weight", [str(v) for v in range(40, 90)])[1][:2] == ["40", "41"]  # only age is binned
    assert code_attribute("gender", ["male", "female", ""]) == ([1, 0, -1], ["female", "male"])
    assert coding_note("age", FAIRFACE_AGES[2:4]) == "age: FairFace's age groups (10-19, 20-29)"
    assert coding_note("gender", ["female", "male"]) == "gender: 2 value(s) (female, male)"


def test_binned_ages_keep_only_the_groups_present():
    codes, names = code_attribute("age", [str(v) for v in (21, 22, 23, 24, 25, 26, 27, 28, 29, 31, 33, 35, 70)])
    assert names == ["20-29", "30-39", "more than 70"] and codes == [0] * 9 + [1] * 3 + [2]


def test_labelled_folder_reads_attributes_csv_and_its_shape_names_them(tmp_path):
    from bench.data.loaders.labelled_folder import LabelledFolder

    root = tmp_path / "pets"
    rows = []
    for c, cls in enumerate(("cat", "dog")):
        (root / cls).mkdir(parents=True)
        for i in range(10):
            solid((100 * c, 10 * i, 50), (12, 12)).save(root / cls / f"{i}.png")
            rows.append(f"{cls}/{i}.png,{('female', 'male')[i % 2]},{18 + 3 * (i + 10 * c)}")
    options = {"root": str(root), "size": 12}
    assert {s.attributes for s in LabelledFolder().inspect(None, options).values()} == {()}
    (root / "attributes.csv").write_text("file,gender,age\n" + "\n".join(rows) + "\n")
    shape = LabelledFolder().inspect(None, options)
    assert {s: v.attributes for s, v in shape.items()} == {s: ("gender", "age") for s in ("train", "val", "test")}
    splits = LabelledFolder().load(None, options, tmp_path / "cache")
    train = splits["train"]
    assert train.attr_names["gender"] == ["female", "male"] and set(train.attr_names["age"]) <= set(FAIRFACE_AGES)
    assert splits.info["annotations"] == ["attributes.csv"]
    (root / "attributes.csv").write_text("file,gender\ncat/0.png,female\ncat/99.png,male\n")
    with pytest.raises(BenchError, match=r"attributes.csv:3: 'cat/99.png' is not an image of the tree"):
        LabelledFolder().inspect(None, options)


def test_labelled_hf_reads_attribute_columns_with_age_binned(tmp_path):
    from datasets import Dataset, Features, Image, Value

    from bench.data.loaders.labelled_hf import LabelledHf
    from tests.fixtures.image_folders import png_bytes

    n = 30
    features = Features({"image": Image(), "label": Value("int64"), "gender": Value("string"), "age": Value("int64")})
    Dataset.from_dict({"image": [{"bytes": png_bytes((8 * i, 90, 30)), "path": None} for i in range(n)],
                       "label": [i % 2 for i in range(n)], "gender": [("female", "male")[i % 3 % 2] for i in range(n)],
                       "age": [2 + 3 * i for i in range(n)]}, features=features).save_to_disk(str(tmp_path / "ds"))
    options = {"path": str(tmp_path / "ds"), "attribute_columns": "gender,age"}
    shape = LabelledHf().inspect(None, options)
    assert all(set(s.attributes) == {"gender", "age"} for s in shape.values())
    assert {s.attributes for s in LabelledHf().inspect(None, {"path": str(tmp_path / "ds")}).values()} == {()}
    splits = LabelledHf().load(None, options, tmp_path / "cache")
    assert splits["train"].attr_names["age"] == FAIRFACE_AGES
    ages = {s: splits[s].attrs["age"].tolist() for s in ("train", "test")}
    assert min(min(a) for a in ages.values()) >= 0 and max(max(a) for a in ages.values()) == 8


def test_attribute_folder_is_the_rows_of_its_table_split_by_image_and_stratified(tmp_path):
    from bench.data.loaders.attribute_folder import AttributeFolder

    root = tmp_path / "faces"
    rows = write_attribute_folder(root)
    solid((1, 2, 3), (12, 12)).save(root / "not_listed.png")
    shape = AttributeFolder().inspect(None, {"root": str(root)})
    assert all(s.attributes == ("gender", "age") for s in shape.values())
    splits = AttributeFolder().load(None, {"root": str(root)}, tmp_path / "cache")
    sizes = {s: len(splits[s]) for s in ("train", "val", "test")}
    assert sizes == {"train": 28, "val": 4, "test": 8}  # 0.7 / 0.1 / 0.2 of each gender's 20
    assert all(splits[s].attrs["gender"].tolist().count(0) == sizes[s] // 2 for s in sizes)  # stratified
    labels = [lab for s in sizes for lab in splits[s].labels.tolist()]
    assert sorted(labels) == list(range(len(rows)))  # no identities: each image its own label
    assert splits["train"].attr_names["age"] == FAIRFACE_AGES
    assert splits.info["unlisted"]["files"] == 1 and splits.info["unlisted"]["examples"] == ["not_listed.png"]
    assert "age: FairFace's age groups (0-2, 3-9" in splits.info["attributes"][1]
    assert splits["train"].images.shape[-2:] == (12, 12)
    again = AttributeFolder().load(None, {"root": str(root)}, tmp_path / "cache")
    assert all(again[s].images.equal(splits[s].images) for s in sizes)
    sample = AttributeFolder().load(None, {"root": str(root), "max_images": 20, "stratify": "age"}, tmp_path / "c2")
    assert sum(len(sample[s]) for s in sizes) == 20


@pytest.mark.parametrize("table, message", [
    ("file,gender\nnobody.jpg,male\n", r"attributes.csv:2: 'nobody.jpg' is not an image of the tree"),
    ("gender,age\n", r"the first line must be a header file,<attribute>"),
    (None, r"no attributes.csv in .*expected ROOT/attributes.csv"),
])
def test_attribute_folder_mistakes_are_one_line(tmp_path, table, message):
    from bench.data.loaders.attribute_folder import AttributeFolder

    root = tmp_path / "faces"
    write_attribute_folder(root, n=8)
    if table is None:
        (root / "attributes.csv").unlink()
    else:
        (root / "attributes.csv").write_text(table)
    with pytest.raises(BenchError, match=message):
        AttributeFolder().inspect(None, {"root": str(root)})
    write_attribute_folder(root, n=8)
    with pytest.raises(BenchError, match="stratify='race' is not a column"):
        AttributeFolder().inspect(None, {"root": str(root), "stratify": "race"})


@pytest.mark.parametrize("argv, message", [
    (["--set", "attribute_inference.attributes=race"],
     r"'attribute_inference' infers race, which the attribute_folder data does not label \(it labels age, gender\)"
     r".*--set attribute_inference.attributes=age,gender, or leave .* --attacks none$"),
    (["--set", "attribute_inference.attributes=gender,age", "--blank-age"],
     r"infers age, which the attribute_folder data does not label \(it labels gender\)"),
])
def test_an_attribute_the_folder_does_not_label_is_refused_before_any_work(tmp_path, capsys, argv, message):
    from bench.cli import main

    root = tmp_path / "faces"
    rows = write_attribute_folder(root)
    if "--blank-age" in argv:
        argv = [a for a in argv if a != "--blank-age"]
        (root / "attributes.csv").write_text("file,gender,age\n" + "".join(f"{f},{g},\n" for f, g, _ in rows))
    with scoped():
        code = main(["run", "--mechanism", "pixelate", "--task", "attributes_folder", "--profile", "smoke",
                     "--set", f"task.data.root={root}", "--attacks", "attribute_inference", *argv,
                     "--results-dir", str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert re.search(message, err), err
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.pt"))  # nothing trained


def test_a_labelled_folder_without_attributes_is_refused_for_the_attribute_adversary(tmp_path, capsys):
    from bench.cli import main

    root = tmp_path / "pets"
    for c, cls in enumerate(("cat", "dog")):
        (root / cls).mkdir(parents=True)
        for i in range(6):
            solid((100 * c, 10 * i, 50), (12, 12)).save(root / cls / f"{i}.png")
    with scoped():
        code = main(["run", "--mechanism", "pixelate", "--task", "classify_folder_obf_obf", "--profile", "smoke",
                     "--set", f"task.data.root={root}", "--attacks", "attribute_inference",
                     "--set", "attribute_inference.attributes=gender", "--results-dir", str(tmp_path / "results")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "labels no attribute" in err, err
