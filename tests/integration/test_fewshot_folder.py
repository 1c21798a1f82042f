"""fewshot_folder end to end: a folder of people's photos through bench run, few-shot and face re-ID."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bench.cli import main
from bench.data.synthetic.synth_faces import SynthFaces

PEOPLE, PER_PERSON = 40, 10


def write_people(root: Path, cache: Path) -> None:
    """Saves 40 synthetic people x 10 photos (64 x 64) as ROOT/person_NN/MM.png."""
    faces = SynthFaces().load(None, {"n_ids": PEOPLE, "per_id": PER_PERSON, "split_ids": [PEOPLE, 0, 0], "size": 64,
                                     "variation": 2.0}, cache)
    images = faces["train"]
    counts: dict[int, int] = {}
    for image, label in zip(images.images, images.labels.tolist()):
        folder = root / f"person_{label:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        counts[label] = counts.get(label, 0) + 1
        Image.fromarray(np.ascontiguousarray(image.permute(1, 2, 0).numpy())).save(folder / f"{counts[label]:02d}.png")


@pytest.mark.slow
def test_fewshot_folder_learns_and_face_reid_identifies_people(tmp_path, capsys):
    people = tmp_path / "people"
    write_people(people, tmp_path / "faces-cache")
    results = tmp_path / "results"
    started = time.perf_counter()
    # no other setting: the benchmark's face adversaries enrol 5 of 10 photos and train 30 epochs
    code = main(["run", "--mechanism", "identity", "--task", "fewshot_folder", "--set", f"task.data.root={people}",
                 "--profile", "quick", "--attacks", "face_reid", "--results-dir", str(results)])
    elapsed = time.perf_counter() - started
    out = capsys.readouterr()
    assert code == 0, out.err
    result = json.loads(next(results.rglob("result.json")).read_text())
    acc, reid = result["utility"]["acc"], result["attacks"]["face_reid"]
    print(f"fewshot_folder quick: acc {acc:.3f}, face_reid top1 {reid['top1']:.3f} (chance {reid['chance']:.3f}), "
          f"{elapsed:.0f} s")
    assert not result["synthetic"] and result["dataset"] == "folder"
    assert acc > 0.4  # 5-way: chance is 0.2; 0.67 when written
    assert reid["top1"] > 3 * reid["chance"]  # 0.525 against 0.125 (8 people) when written
    assert result["images"]["stored"] == [64, 64] and result["images"]["upscaled"] == 0
    assert "bench: warning" not in out.err


def test_fewshot_hf_reads_a_local_hugging_face_dataset_of_people(tmp_path, capsys):
    import datasets

    faces = SynthFaces().load(None, {"n_ids": 30, "per_id": 10, "split_ids": [30, 0, 0], "size": 32}, tmp_path / "c")
    rows = {"photo": [], "person": []}
    for image, label in zip(faces["train"].images, faces["train"].labels.tolist()):
        rows["photo"].append(Image.fromarray(np.ascontiguousarray(image.permute(1, 2, 0).numpy())))
        rows["person"].append(label)
    features = datasets.Features({"photo": datasets.Image(), "person": datasets.Value("int64")})
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(str(tmp_path / "people"))
    results = tmp_path / "results"
    code = main(["run", "--mechanism", "pixelate", "--task", "fewshot_hf", "--profile", "smoke",
                 "--set", f"task.data.path={tmp_path / 'people'}", "--set", "task.data.image_column=photo",
                 "--set", "task.data.label_column=person", "--attacks", "face_reid", "--results-dir", str(results)])
    assert code == 0, capsys.readouterr().err
    result = json.loads(next(results.rglob("result.json")).read_text())
    assert result["dataset"] == "hf" and not result["synthetic"] and 0 <= result["utility"]["acc"] <= 1


def test_a_finished_cell_is_computed_again_when_its_photos_change(tmp_path, capsys):
    """A FINISHED run is returned only for the data it was computed on: real files can change under one key."""
    from bench.storage.tracking import Tracker

    people, results = tmp_path / "people", tmp_path / "results"
    write_people(people, tmp_path / "faces-cache")
    argv = ["run", "--mechanism", "identity", "--task", "fewshot_folder", "--set", f"task.data.root={people}",
            "--profile", "smoke", "--attacks", "none", "--results-dir", str(results)]

    def run() -> tuple[str, dict]:
        assert main(argv) == 0
        err = capsys.readouterr().err
        tracker = Tracker(results)
        runs = tracker.client.search_runs([tracker.experiment_id])
        return err, {r.info.run_id: (r.info.status, r.data.tags.get("bench.superseded_by", "")) for r in runs
                     if "bench.cell_key" in r.data.tags}

    _, first = run()
    err, again = run()
    assert "already has a FINISHED run" in err and again == first  # same photos: the run is shown, not redone
    assert main(["grid", *argv[1:], "--dry-run"]) == 0
    assert "1 finished (1 on real data: a run checks each against its data first), 0 to run" in capsys.readouterr().out
    photo = people / "person_03" / "02.png"
    pixels = np.asarray(Image.open(photo)).copy()
    pixels[:8] = 255 - pixels[:8]
    Image.fromarray(pixels).save(photo)
    err, changed = run()
    assert "the folder data changed since its result" in err and "already has a FINISHED run" not in err
    (old,) = first
    new = [run_id for run_id in changed if run_id != old]
    assert len(new) == 1 and changed[new[0]] == ("FINISHED", "")
    assert changed[old][1] == new[0]  # the run computed on the old photos is superseded, not counted


FITTED_MECHANISM = '''
from bench.core.interfaces import Mechanism, ParamSpace
from bench.core.registry import register_mechanism

@register_mechanism("folder_test_fitted")
class Fitted(Mechanism):
    params = ParamSpace()

    def fit(self, public, ctx):
        self.shade = int(public.images.float().mean())

    def apply(self, images, *, generator, boxes=None):
        return images.clone()
'''


def test_a_finished_cell_is_computed_again_when_the_public_photos_it_fitted_on_change(tmp_path, capsys):
    """The public set a mechanism fits on is data behind its numbers: a change is caught (where it was read)."""
    from bench.storage.tracking import Tracker

    people, results = tmp_path / "people", tmp_path / "results"
    write_people(people, tmp_path / "faces-cache")
    for person in range(36, 40):  # 9 photos each, below min_images=10: the public people
        (people / f"person_{person:02d}" / "10.png").unlink()
    (tmp_path / "fitted.py").write_text(FITTED_MECHANISM)
    common = ["--task", "fewshot_folder", "--set", f"task.data.root={people}", "--set", "task.data.min_images=10",
              "--profile", "smoke", "--attacks", "none", "--results-dir", str(results)]
    fitted = ["run", "--mechanism-file", str(tmp_path / "fitted.py"), "--mechanism", "folder_test_fitted", *common]
    plain = ["run", "--mechanism", "identity", *common]

    def run(argv) -> str:
        assert main(argv) == 0
        return capsys.readouterr().err

    run(fitted), run(plain)
    tracker = Tracker(results)
    (finished,) = [r for r in tracker.client.search_runs([tracker.experiment_id])
                   if r.data.tags.get("bench.mechanism") == "folder_test_fitted"]
    reads = tracker.load_result(finished.info.run_id).data_reads
    assert [(r["dataset"], r["part"]) for r in reads] == [("folder", "splits"), ("folder", "public")]
    assert "already has a FINISHED run" in run(fitted)
    photo = people / "person_38" / "04.png"  # a public person's
    pixels = np.asarray(Image.open(photo)).copy()
    pixels[:8] = 255 - pixels[:8]
    Image.fromarray(pixels).save(photo)
    err = run(plain)
    assert "already has a FINISHED run" in err  # identity fits nothing: it never read the public photos
    err = run(fitted)
    assert "the folder data (its public set) changed since its result" in err
    assert "already has a FINISHED run" not in err
