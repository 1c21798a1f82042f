"""Data shortfalls name the setting that fixes them (issue 44, items 4 and 5), and the smaller things of item 5.

The command lines (one line, exit 2, nothing written) are in tests/integration/test_bad_command_lines.py;
these check that the advice works when followed, and the per-profile epochs, the sheet's
loader options and the board's settings label; and the shortfalls seen from the shape's cameras
(Market-1501 queries without a cross-camera match) and face boxes (``face_detect``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.core.registry import scoped
from bench.data.base import SplitShape
from bench.errors import BenchError


def plan_cell(tmp_path: Path, task: str, overrides: dict, profile: str = "smoke"):
    from bench.cell.plan import RunConfig, plan

    return plan(RunConfig(task, "pixelate", profile=profile, results_dir=tmp_path / "results", overrides=overrides,
                          attacks=()))


def people(root: Path, count: int, photos: int = 10) -> Path:
    """Writes ``count`` people of ``photos`` tiny grey photos each (the same bytes: only the shape matters)."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("L", (8, 8), 100).save(buffer, format="PNG")
    for person in range(count):
        (root / f"p{person:02d}").mkdir(parents=True)
        for photo in range(photos):
            (root / f"p{person:02d}" / f"{photo}.png").write_bytes(buffer.getvalue())
    return root


def test_a_folder_whose_test_split_has_too_few_people_is_told_the_split_fractions_that_fix_it(tmp_path):
    tree = people(tmp_path / "people", 20)
    with scoped(), pytest.raises(BenchError) as caught:
        plan_cell(tmp_path, "fewshot_folder", {"task": {"data": {"root": str(tree)}}})
    message = str(caught.value)
    assert "images per class" not in message and "lower task.test_way" in message
    fractions = re.search(r"--set task\.data\.split_fractions=(\S+)", message).group(1)
    with scoped():  # followed, the advice gives the test split its 5 people and the cell plans
        planned = plan_cell(tmp_path, "fewshot_folder", {"task": {"data.root": str(tree),
                                                                  "data.split_fractions": fractions}})
    assert planned.task.config.test_way == 5


def test_synthetic_faces_are_told_the_split_ids_that_fix_a_small_test_split(tmp_path):
    data = {"n_ids": 40, "per_id": 20, "split_ids": [30, 6, 4]}
    with scoped(), pytest.raises(BenchError, match=r"split_ids=\[29,6,5\] \(train/val/test 29/6/5") as caught:
        plan_cell(tmp_path, "fewshot_synth_faces", {"task": {"data": data}})
    ids = re.search(r"split_ids=(\[[\d,]+\])", str(caught.value)).group(1)
    with scoped():
        plan_cell(tmp_path, "fewshot_synth_faces", {"task": {"data": data, "data.split_ids": ids}})  # as --set reads it


def test_too_few_classes_in_all_asks_for_more_classes_not_another_split(tmp_path):
    tree = people(tmp_path / "people", 8)
    with scoped(), pytest.raises(BenchError, match="the data has 8 classes in all and the episodes need 5/1/5"):
        plan_cell(tmp_path, "fewshot_folder", {"task": {"data": {"root": str(tree)}}})


def test_split_advice_moves_classes_from_the_split_with_most_to_spare():
    from tasks.split_advice import class_split_advice, rebalance

    assert rebalance({"train": 13, "val": 3, "test": 4}, {"train": 5, "val": 1, "test": 5}) == \
        {"train": 12, "val": 3, "test": 5}
    assert rebalance({"train": 1, "val": 4, "test": 10}, {"train": 5, "val": 1, "test": 5}) == \
        {"train": 5, "val": 3, "test": 7}
    shape = {s: SplitShape((10,) * n) for s, n in (("train", 13), ("val", 3), ("test", 4))}
    assert "split_fractions=0.6,0.15,0.25" in class_split_advice("split_fractions", shape, {"test": 5}, "test_way")
    assert class_split_advice("", shape, {"test": 5}, "test_way") == "lower task.test_way, or add classes to the data"


def reid_shape(train_ids: int, query_ids: int = 2) -> dict[str, SplitShape]:
    return {"train": SplitShape((4,) * train_ids), "query": SplitShape((1,) * query_ids),
            "gallery": SplitShape((4,) * query_ids)}


def test_reid_needs_p_training_identities_and_names_the_setting_that_fixes_it():
    from bench.core.registry import tasks

    with scoped():
        smoke = tasks.get("reid_market1501")("smoke", {"data": {"max_classes": None}})
        smoke.check_data(reid_shape(4))  # p=4: enough
        with pytest.raises(BenchError, match=r"p=4 .* split 'train' has 3; lower task.p to 3"):
            smoke.check_data(reid_shape(3))
        with pytest.raises(BenchError, match=r"has 1; add identities to the training folder$"):
            smoke.check_data(reid_shape(1))
        with pytest.raises(BenchError, match="the 'query' split has no identified image"):
            smoke.check_data(reid_shape(4, query_ids=0))
        with pytest.raises(BenchError, match="the 'gallery' split has no image of the query identities"):
            smoke.check_data({**reid_shape(4), "gallery": SplitShape(())})
        capped = tasks.get("reid_market1501")("smoke", {"data": {"max_classes": 3}})
        with pytest.raises(BenchError, match=r"raise task.data.max_classes \(now 3\)"):
            capped.check_data(reid_shape(3))


def test_the_few_photos_epochs_follow_the_profile():
    from bench.core.config import load_preset
    from bench.core.registry import attacks, benchmarks

    with scoped():
        declared = benchmarks.get("fewshot_folder")
        epochs = {p: attacks.get("face_reid")(p, declared.settings_of("face_reid", None, p)).config.epochs
                  for p in ("smoke", "quick", "paper")}
        assert epochs == {"smoke": load_preset("attacks", "face_reid", "smoke")["epochs"], "quick": 30, "paper": 30}
        assert declared.settings_of("face_reid", None, "smoke")["enrol_per_id"] == 5  # every profile's setting
        assert declared.settings_of("face_reid", {"epochs": 7}, "quick")["epochs"] == 7  # --set wins
        assert declared.settings_of("denoise", None, "quick")["reid.epochs"] == 30


def test_the_sheet_takes_a_folder_from_set_or_data_root(tmp_path, capsys):
    from bench.cli import main
    from bench.cli.mechanisms_cmd import loader_options

    assert loader_options("folder", {"task": {"data.size": "16"}}, Path("/photos")) == {"size": 16, "root": "/photos"}
    assert loader_options("folder", {"task": {"data.root": "/a"}}, Path("/b")) == {"root": "/a"}
    assert "root" not in loader_options("synth_faces", {}, Path("/b"))
    tree = people(tmp_path / "people", 4, photos=3)
    for i, how in enumerate((["--data-root", str(tree)], ["--set", f"task.data.root={tree}"])):
        with scoped():
            code = main(["mechanisms", "show", "pixelate", "--dataset", "folder", *how, "--n", "2",
                         "--out", str(tmp_path / f"sheet{i}.png"), "--cache-dir", str(tmp_path / "cache")])
        assert code == 0, capsys.readouterr().err
        assert (tmp_path / f"sheet{i}.png").stat().st_size > 0


def test_the_settings_label_shows_a_folder_by_name_and_fingerprint_never_its_path():
    from leaderboard.protocol import canonical_settings, settings_label

    settings = canonical_settings({"task": {"data.root": "/home/alice/photos/people/", "epochs": 3},
                                   "face_reid": {"weights": "/home/alice/w.pth"}}, ["face_reid"])
    label = settings_label(settings)
    assert "/home" not in label and "task.data.root=people" in label and "face_reid.weights=w.pth" in label
    assert "task.data.root=people (data 0123456789)" in settings_label(settings, "0123456789abcdef")
    assert "task.epochs=3" in label


def test_attribute_adversaries_need_data_that_labels_their_attributes():
    from bench.cell.attribute_checks import check_attributes
    from bench.core.registry import attacks, tasks

    with scoped():
        task = tasks.get("reid_market1501")("smoke", None)
        adversaries = {name: attacks.get(name)("smoke", None) for name in ("attribute_inference", "denoise")}
        unlabelled = {s: SplitShape((4, 4), ()) for s in ("train", "query", "gallery")}
        with pytest.raises(BenchError, match=r"'attribute_inference' infers gender, .* --attacks none$"):
            check_attributes(task, adversaries, unlabelled)
        with pytest.raises(BenchError, match=r"'denoise' infers gender"):
            check_attributes(task, {"denoise": adversaries["denoise"]}, unlabelled)
        check_attributes(task, adversaries, {s: SplitShape((4, 4), ("gender", "age")) for s in unlabelled})
        check_attributes(task, adversaries, {s: SplitShape((4, 4)) for s in unlabelled})  # not known: loaded later


def plan_market(tmp_path: Path, root: Path, attacks: tuple[str, ...] = ()):
    from bench.cell.plan import RunConfig, plan

    return plan(RunConfig("reid_market1501", "pixelate", profile="smoke", results_dir=tmp_path / "results",
                          data_root=root, overrides={"task": {"p": 3}}, attacks=attacks))


def test_market_queries_seen_only_by_their_own_camera_in_the_gallery_are_refused_in_the_plan(tmp_path):
    from tests.fixtures.reid_fixtures import write_market1501

    write_market1501(tmp_path / "one_camera", cams=1)  # every query's gallery images share its camera
    with scoped(), pytest.raises(BenchError) as caught:
        plan_market(tmp_path, tmp_path / "one_camera")
    message = str(caught.value)
    assert "none of the 3 queries has a gallery image of its identity from another camera" in message
    assert "raise task.data.per_class (now 16" in message and "\n" not in message
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("*"))
    write_market1501(tmp_path / "two_cameras", cams=2)
    with scoped():
        assert plan_market(tmp_path, tmp_path / "two_cameras").key


def test_market_queries_without_a_cross_camera_match_are_counted_as_the_protocol_skips_them(tmp_path):
    from bench.core.registry import datasets
    from tasks.reid_metrics import matched_queries
    from tests.fixtures.reid_fixtures import write_market1501

    base = write_market1501(tmp_path / "market", cams=2)
    for path in (base / "bounding_box_test").glob("0001_c2*.jpg"):  # pid 1 left only in camera 1
        path.unlink()
    with scoped():
        shape = datasets.get("market1501")().inspect(tmp_path / "market", {})
        assert matched_queries(shape["query"], shape["gallery"]) == 5  # pid 1's camera-1 query has no match
        plan_market(tmp_path, tmp_path / "market")  # some queries match: the protocol skips the others
    assert shape["query"].camera_images()[1] == {0: 1, 1: 1} and shape["gallery"].camera_images()[1] == {0: 2}
    assert matched_queries(SplitShape((1,)), shape["gallery"]) is None  # cameras not known: nothing to check


def test_the_skipped_query_count_agrees_with_the_metric_that_skips_them():
    import torch

    from tasks.reid_metrics import matched_queries, query_average_precision

    g = torch.Generator().manual_seed(0)
    q_pids, q_cams = torch.randint(1, 6, (40,), generator=g), torch.randint(0, 3, (40,), generator=g)
    g_pids, g_cams = torch.randint(-1, 6, (30,), generator=g), torch.randint(0, 3, (30,), generator=g)
    aps = query_average_precision(torch.rand(40, 30, generator=g), q_pids, g_pids, q_cams, g_cams)
    shapes = [SplitShape.of_labels(p.tolist(), cameras=c.tolist()) for p, c in ((q_pids, q_cams), (g_pids, g_cams))]
    assert matched_queries(*shapes) == int((~aps.isnan()).sum()) < 40


def test_the_reid_task_reports_the_queries_it_skips(capsys):
    import torch

    from bench.core.interfaces import RunContext
    from bench.core.registry import tasks
    from bench.data.base import ImageSet

    def images(pids, cams):
        return ImageSet(torch.zeros(len(pids), 3, 4, 2, dtype=torch.uint8), torch.tensor(pids), cams=torch.tensor(cams))

    with scoped():
        task = tasks.get("reid_market1501")("smoke", None)
    ctx = RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=None, cache_dir=Path("."))
    counts = task._query_counts(images([1, 1, 2], [0, 1, 0]), images([1, 2, 0, -1], [0, 0, 1, 1]), ctx)
    assert counts == {"queries": 1.0, "skipped_queries": 2.0}
    assert "2 of 3 queries have no gallery image of their identity from another camera" in capsys.readouterr().err


def test_face_detect_on_a_folder_without_boxes_is_refused_in_the_plan(tmp_path):
    from bench.cell.plan import RunConfig, plan

    tree = people(tmp_path / "objects", 3, photos=6)

    def plan_with(attacks):
        return plan(RunConfig("classify_folder_obf_obf", "pixelate", profile="smoke", results_dir=tmp_path / "results",
                              overrides={"task": {"data.root": str(tree)}}, attacks=attacks))

    with scoped(), pytest.raises(BenchError, match=r"no image of the 'test' split has a face box: .*boxes\.csv .* "
                                                   r"--attacks none$"):
        plan_with(("face_detect",))
    with scoped():
        plan_with(())  # utility only: no boxes needed
    rows = [f"{p.relative_to(tree).as_posix()},0,0,4,4" for p in sorted(tree.rglob("*.png"))]
    (tree / "boxes.csv").write_text("\n".join(rows) + "\n")
    with scoped():
        plan_with(("face_detect",))
    (tree / "boxes.csv").write_text("\n".join(r.split(",")[0] for r in rows) + "\n")  # listed, no face anywhere
    with scoped(), pytest.raises(BenchError, match="has a face box"):
        plan_with(("face_detect",))
