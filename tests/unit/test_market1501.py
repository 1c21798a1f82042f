"""Market-1501 loader: names, protocol exclusions, relabelling, attributes, errors, caching."""

from __future__ import annotations

import pytest
import torch
from fixtures.reid_fixtures import (
    MARKET_ATTRS,
    MARKET_TEST_IDS,
    MARKET_TRAIN_IDS,
    MARKET_UNANNOTATED,
    pid_colour,
    write_market1501,
    write_market_attribute_csv,
    write_market_attribute_mat,
)

import bench.data.loaders.market1501 as market
from bench.core.registry import datasets
from bench.data.loaders.market1501 import Market1501, find_data_dir, parse_name
from bench.errors import BenchError
from tasks.reid_metrics import evaluate_rank


def load(root, cache, **options):
    return Market1501().load(root, options, cache)


def test_registered():
    assert datasets.get("market1501") is Market1501
    assert Market1501.synthetic is False


@pytest.mark.parametrize(
    "name, expected",
    [
        ("0002_c1s1_000451_03.jpg", (2, 0, 1)),
        ("1501_c6s4_001902_01.jpg", (1501, 5, 4)),
        ("-1_c3s2_064744_02.jpg", (-1, 2, 2)),
        ("0000_c5s3_015240_04.jpg", (0, 4, 3)),
    ],
)
def test_parse_name(name, expected):
    assert parse_name(name) == expected


@pytest.mark.parametrize(
    "name",
    ["0002_c7s1_000451_03.jpg", "0002_c0s1_000451_03.jpg", "abc.jpg", "0002_c1_000451.jpg", "-2_c1s1_000001_01.jpg"],
)
def test_parse_name_rejects(name):
    with pytest.raises(ValueError):
        parse_name(name)


@pytest.mark.parametrize("subdir", ["Market-1501-v15.09.15", "market1501", "market1501/Market-1501-v15.09.15", ""])
def test_layouts(tmp_path, subdir):
    write_market1501(tmp_path / "data", subdir=subdir)
    splits = load(tmp_path / "data", tmp_path / "cache")
    assert set(splits.sets) == {"train", "query", "gallery"}
    assert not splits.synthetic and splits.dataset == "market1501"


def test_splits_follow_the_protocol(tmp_path):
    write_market1501(tmp_path, train_junk=True)
    splits = load(tmp_path, tmp_path / "cache")
    train, query, gallery = splits["train"], splits["query"], splits["gallery"]

    # Train: junk and distractors dropped; pids 2, 7, 10 relabelled 0, 1, 2 in pid order.
    assert len(train) == 2 * len(MARKET_TRAIN_IDS)
    assert train.labels.tolist() == [0, 0, 1, 1, 2, 2]
    assert train.cams.tolist() == [0, 1] * 3

    # Query and gallery keep the original pids; the gallery keeps junk (-1) and distractors (0).
    assert sorted(set(query.labels.tolist())) == sorted(MARKET_TEST_IDS)
    assert gallery.labels.tolist().count(-1) == 2 and gallery.labels.tolist().count(0) == 2
    assert sorted(set(gallery.labels.tolist())) == [-1, 0, *sorted(MARKET_TEST_IDS)]
    for s in (train, query, gallery):
        assert s.labels.dtype == torch.int64 and s.cams.dtype == torch.int64
        assert s.images.dtype == torch.uint8 and s.images.shape[1:] == (3, 128, 64)
        assert s.cams.min() >= 0 and s.cams.max() <= 1


def test_hidden_files_such_as_macos_resource_forks_are_skipped(tmp_path):
    write_market1501(tmp_path / "data")
    plain = load(tmp_path / "data", tmp_path / "cache")
    query = find_data_dir(tmp_path / "data") / "query"
    for image in sorted(query.iterdir())[:2]:
        (query / f"._{image.name}").write_bytes(b"\x00\x05\x16\x07")  # AppleDouble, not a JPEG
    again = load(tmp_path / "data", tmp_path / "cache2")
    assert torch.equal(again["query"].labels, plain["query"].labels)


def test_images_are_decoded_in_name_order(tmp_path):
    write_market1501(tmp_path)
    query = load(tmp_path, tmp_path / "cache")["query"]
    for image, pid, cam in zip(query.images, query.labels.tolist(), query.cams.tolist()):
        expected = torch.tensor(pid_colour(pid, cam + 1), dtype=torch.float32)
        assert (image.float().mean((1, 2)) - expected).abs().max() < 4


def test_attributes_from_mat(tmp_path):
    write_market1501(tmp_path, attributes="mat")
    splits = load(tmp_path, tmp_path / "cache")
    for s in splits.sets.values():
        assert s.attr_names == {"gender": ["male", "female"], "age": ["young", "teenager", "adult", "old"]}
    train = splits["train"]
    pids = sorted(MARKET_TRAIN_IDS)
    for label, gender, age in zip(train.labels.tolist(), train.attrs["gender"].tolist(), train.attrs["age"].tolist()):
        g, a = MARKET_ATTRS[pids[label]]
        assert (gender, age) == (g - 1, a - 1)
    gallery = splits["gallery"]
    rows = zip(gallery.labels.tolist(), gallery.attrs["gender"].tolist(), gallery.attrs["age"].tolist())
    for pid, gender, age in rows:
        if pid in (-1, 0, MARKET_UNANNOTATED):
            assert (gender, age) == (-1, -1)
        else:
            assert (gender, age) == (MARKET_ATTRS[pid][0] - 1, MARKET_ATTRS[pid][1] - 1)


def test_attributes_from_csv_match_mat(tmp_path):
    write_market1501(tmp_path / "a", attributes="mat")
    write_market1501(tmp_path / "b", attributes="csv")
    mat = load(tmp_path / "a", tmp_path / "cache")
    csv = load(tmp_path / "b", tmp_path / "cache")
    for split in ("train", "query", "gallery"):
        for name in ("gender", "age"):
            assert torch.equal(mat[split].attrs[name], csv[split].attrs[name])


def test_attribute_file_is_searched_or_given(tmp_path):
    base = write_market1501(tmp_path / "data", attributes=None)
    assert load(tmp_path / "data", tmp_path / "cache")["train"].attrs == {}
    (base / "attribute").mkdir()
    write_market_attribute_mat(base / "attribute" / "market_attribute.mat")
    assert "gender" in load(tmp_path / "data", tmp_path / "cache")["train"].attrs
    (base / "attribute" / "market_attribute.mat").unlink()
    write_market_attribute_mat(tmp_path / "data" / "market_attribute.mat")
    assert "gender" in load(tmp_path / "data", tmp_path / "cache")["train"].attrs
    write_market_attribute_csv(tmp_path / "elsewhere.csv")
    given = load(base, tmp_path / "cache", attributes=str(tmp_path / "elsewhere.csv"))
    assert given.info["attributes"] == str(tmp_path / "elsewhere.csv")
    with pytest.raises(BenchError, match="attribute file"):
        load(base, tmp_path / "cache", attributes=str(tmp_path / "nope.mat"))


def test_bad_attribute_csv(tmp_path):
    base = write_market1501(tmp_path, attributes=None)
    (base / "market_attribute.csv").write_text("pid,gender,age\n0002,robot,adult\n")
    with pytest.raises(BenchError, match="line 2"):
        load(tmp_path, tmp_path / "cache")
    (base / "market_attribute.csv").write_text("pid,sex\n0002,male\n")
    with pytest.raises(BenchError, match="lacks columns"):
        load(tmp_path, tmp_path / "cache")


def test_size_and_caps(tmp_path):
    write_market1501(tmp_path, cams=3)
    full = load(tmp_path, tmp_path / "cache")
    assert len(full["gallery"]) == 3 * 3 * 2 + 4
    small = load(tmp_path, tmp_path / "cache", size=[64, 32], max_classes=2, per_class=2)
    assert small["train"].images.shape[1:] == (3, 64, 32)
    assert load(tmp_path, tmp_path / "cache", size=32)["query"].images.shape[1:] == (3, 32, 16)
    assert sorted(set(small["train"].labels.tolist())) == [0, 1]
    assert small["train"].labels.tolist().count(0) == 2
    assert sorted(set(small["query"].labels.tolist())) == sorted(MARKET_TEST_IDS)[:2]
    people = [p for p in small["gallery"].labels.tolist() if p > 0]
    assert sorted(set(people)) == sorted(MARKET_TEST_IDS)[:2] and len(people) == 4
    # 4 of 18 identity images kept: junk and distractors shrink in proportion (2 * 4/18 -> 0).
    assert small.info["images"]["gallery"] == len(small["gallery"])
    assert small.fingerprint != full.fingerprint


def test_bad_options(tmp_path):
    write_market1501(tmp_path)
    with pytest.raises(BenchError, match="unknown option"):
        load(tmp_path, tmp_path / "cache", sise=3)
    with pytest.raises(BenchError, match="max_classes"):
        load(tmp_path, tmp_path / "cache", max_classes=0)
    with pytest.raises(BenchError, match="size"):
        load(tmp_path, tmp_path / "cache", size=[1, 2, 3])


def one_line_layout_error(exc_info):
    message = str(exc_info.value)
    assert "\n" not in message
    assert message.startswith("market1501:")
    assert "bounding_box_train/, query/, bounding_box_test/" in message
    return message


def test_missing_data(tmp_path):
    with pytest.raises(BenchError) as exc:
        load(None, tmp_path / "cache")
    assert "no --data-root" in one_line_layout_error(exc)
    with pytest.raises(BenchError) as exc:
        load(tmp_path / "empty", tmp_path / "cache")
    assert str(tmp_path / "empty") in one_line_layout_error(exc)
    base = write_market1501(tmp_path / "partial")
    for p in (base / "query").iterdir():
        p.unlink()
    with pytest.raises(BenchError) as exc:
        load(tmp_path / "partial", tmp_path / "cache")
    assert "query" in one_line_layout_error(exc)
    (base / "query").rmdir()
    with pytest.raises(BenchError) as exc:
        load(tmp_path / "partial", tmp_path / "cache")
    one_line_layout_error(exc)


def test_malformed_name(tmp_path):
    base = write_market1501(tmp_path)
    (base / "query" / "0001_c1s1_x.jpg").write_bytes(b"")
    with pytest.raises(BenchError, match="0001_c1s1_x.jpg"):
        load(tmp_path, tmp_path / "cache")


def test_unreadable_image(tmp_path):
    base = write_market1501(tmp_path)
    (base / "query" / "0001_c1s1_999999_01.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(BenchError, match="cannot decode"):
        load(tmp_path, tmp_path / "cache")


def test_cache_is_used_and_keyed_by_content(tmp_path, monkeypatch):
    base = write_market1501(tmp_path)
    first = load(tmp_path, tmp_path / "cache")
    assert len(list((tmp_path / "cache" / "datasets" / "market1501").glob("*/MANIFEST.json"))) == 1

    def boom(*args, **kwargs):
        raise AssertionError("decoded again")

    monkeypatch.setattr(market, "decode_images", boom)
    again = load(tmp_path, tmp_path / "cache")
    assert again.fingerprint == first.fingerprint
    for split in first.sets:
        assert torch.equal(again[split].images, first[split].images)
        assert torch.equal(again[split].labels, first[split].labels)
        assert torch.equal(again[split].cams, first[split].cams)
        assert again[split].attr_names == first[split].attr_names
    (base / "market_attribute.mat").unlink()
    with pytest.raises(AssertionError, match="decoded again"):
        load(tmp_path, tmp_path / "cache")


def test_oracle_distances_score_perfectly(tmp_path):
    write_market1501(tmp_path, cams=3)
    splits = load(tmp_path, tmp_path / "cache")
    q, g = splits["query"], splits["gallery"]
    dist = (q.labels[:, None] != g.labels[None, :]).float()
    cmc, mAP = evaluate_rank(dist, q.labels, g.labels, q.cams, g.cams, max_rank=5)
    assert mAP == 1.0 and cmc[0] == 1.0
