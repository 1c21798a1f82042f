"""Fault injection, part 2: bad command lines of every subcommand end in one line, exit 2, and write nothing.

:data:`CASES` is the list of bad command lines found by probing each subcommand (paths
that cannot be written, names over 255 bytes, empty names, numbers out of range, settings
that would exhaust memory, options that contradict each other). Each runs in-process
through ``bench.cli.main`` in a fresh folder (also the current folder, so that what a
command would write "here" is seen); the test asserts exit status 2, one line on stderr
naming the phrase, no traceback, nothing on stdout and no file created, changed or removed.

Run as a script, it classifies every line of the list as clean / traceback / silent, each
in a subprocess of its own (a line that crashes the interpreter or runs for
:data:`TIMEOUT_S` seconds cannot stop the count), and prints the counts::

    .venv/bin/python tests/integration/test_bad_command_lines.py [--only ID,...]
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
from pathlib import Path

import pytest

FS = "fewshot_synth_faces"
LONG = "x" * 300
"""A path component over the 255 bytes a file system allows."""
UNWRITABLE = "/proc"
"""A folder in which no process can create anything, root included."""
RES = ["--results-dir", "{tmp}/results"]
RUN = ["run", "--mechanism", "dp_pix", "--task", FS, "--profile", "smoke", *RES]
GRID = ["grid", "--task", FS, "--mechanism", "pixelate", "--profile", "smoke", *RES]
TUNE = ["tune", "--mechanism", "pixelate", "--task", FS, "--profile", "smoke", "--trials", "2", *RES]
SHOW = ["mechanisms", "show", "pixelate", "--cache-dir", "{tmp}/cache"]
RELEASE = ["release", "--mechanism", "pixelate", "--in", "{tmp}/images"]
REPORT = ["report", *RES]
BOARD = ["leaderboard", "build", *RES]
SUBMIT = ["submit", "--suite", "smoke", "--mechanism", "pixelate", "--seeds", "0,1,2", *RES]
AUDIT = ["audit", "--mechanism", "dp_pix", "--device", "cpu"]
REID = ["run", "--mechanism", "pixelate", "--task", "reid_market1501", "--profile", "smoke", *RES]
FOLDER_RUN = ["run", "--mechanism", "pixelate", "--task", "fewshot_folder", "--profile", "smoke", *RES]

# (id, argv, a phrase the one line must contain)
CASES: list[tuple[str, list[str], str]] = [
    # a path component over 255 bytes, in every option that names something to write
    ("long-results-dir-run", ["run", "--mechanism", "dp_pix", "--task", FS, "--profile", "smoke",
                              "--results-dir", f"{{tmp}}/{LONG}"], "over 255 bytes"),
    ("long-cache-dir-run", [*RUN, "--cache-dir", f"{{tmp}}/{LONG}/cache"], "over 255 bytes"),
    ("long-results-dir-grid", ["grid", "--task", FS, "--mechanism", "pixelate", "--profile", "smoke",
                               "--results-dir", f"{{tmp}}/{LONG}"], "over 255 bytes"),
    ("long-results-dir-tune", ["tune", "--mechanism", "pixelate", "--task", FS, "--profile", "smoke",
                               "--results-dir", f"{{tmp}}/{LONG}"], "over 255 bytes"),
    ("long-storage-tune", [*TUNE, "--storage", f"journal:{{tmp}}/{LONG}.log"], "over 255 bytes"),
    ("long-out-release", [*RELEASE, "--out", f"{{tmp}}/{LONG}"], "over 255 bytes"),
    ("long-cache-release", [*RELEASE, "--out", "{tmp}/released", "--cache-dir", f"{{tmp}}/{LONG}"], "over 255 bytes"),
    ("long-out-report", [*REPORT, "--out", f"{{tmp}}/{LONG}.md"], "over 255 bytes"),
    ("long-plot-report", [*REPORT, "--plot", f"{{tmp}}/{LONG}"], "over 255 bytes"),
    ("long-out-sheet", [*SHOW, "--out", f"{{tmp}}/{LONG}.png"], "over 255 bytes"),
    ("long-cache-sheet", ["mechanisms", "show", "pixelate", "--out", "{tmp}/sheet.png",
                          "--cache-dir", f"{{tmp}}/{LONG}"], "over 255 bytes"),
    ("long-out-board", [*BOARD, "--out", f"{{tmp}}/{LONG}"], "over 255 bytes"),
    ("long-entries-submit", [*SUBMIT, "--entries", f"{{tmp}}/{LONG}"], "over 255 bytes"),
    ("long-results-dir-show", ["show", "abc", "--results-dir", f"{{tmp}}/{LONG}"], "over 255 bytes"),
    ("long-results-dir-relocate", ["relocate", "--results-dir", f"{{tmp}}/{LONG}"], "over 255 bytes"),
    ("long-cache-dir-cache", ["cache", "verify", "--cache-dir", f"{{tmp}}/{LONG}"], "over 255 bytes"),
    ("long-results-dir-ui", ["ui", "--port", "5999", "--results-dir", f"{{tmp}}/{LONG}"], "over 255 bytes"),
    ("long-results-dir-board-show", ["leaderboard", "show", "--no-entries", "--results-dir", f"{{tmp}}/{LONG}"],
     "over 255 bytes"),
    # outputs that cannot be written
    ("unwritable-out-release", [*RELEASE, "--out", f"{UNWRITABLE}/out"], "is not writable"),
    ("unwritable-out-report", [*REPORT, "--out", f"{UNWRITABLE}/report.md"], "is not writable"),
    ("unwritable-out-sheet", [*SHOW, "--out", f"{UNWRITABLE}/sheet.png"], "is not writable"),
    ("unwritable-results-run", ["run", "--mechanism", "dp_pix", "--task", FS, "--profile", "smoke",
                                "--results-dir", f"{UNWRITABLE}/results"], "is not writable"),
    ("unwritable-out-board", [*BOARD, "--out", f"{UNWRITABLE}/site"], "is not writable"),
    ("unwritable-plot-report", [*REPORT, "--plot", f"{UNWRITABLE}/plots"], "is not writable"),
    ("report-out-is-a-folder", [*REPORT, "--out", "{tmp}/images"], "is a folder"),
    ("report-out-under-a-file", [*REPORT, "--out", "{tmp}/afile/report.md"], "is a file"),
    ("release-out-under-a-file", [*RELEASE, "--out", "{tmp}/afile/out"], "is a file"),
    ("tune-storage-under-a-file", [*TUNE, "--storage", "journal:{tmp}/afile/j.log"], "is a file"),
    ("tune-storage-unwritable", [*TUNE, "--storage", f"journal:{UNWRITABLE}/j.log"], "is not writable"),
    # empty names
    ("empty-results-dir", ["run", "--mechanism", "dp_pix", "--task", FS, "--profile", "smoke", "--results-dir", ""],
     "empty path"),
    ("empty-cache-dir", [*RUN, "--cache-dir", ""], "empty path"),
    ("empty-results-dir-grid", ["grid", "--task", FS, "--mechanism", "pixelate", "--profile", "smoke",
                                "--results-dir", ""], "empty path"),
    ("empty-data-root", [*RUN, "--data-root", ""], "empty path"),
    ("empty-out-release", [*RELEASE, "--out", ""], "empty path"),
    ("empty-out-report", [*REPORT, "--out", ""], "empty path"),
    ("empty-out-board", [*BOARD, "--out", ""], "empty path"),
    ("empty-entries-submit", [*SUBMIT, "--entries", ""], "empty path"),
    ("empty-cache-dir-cache", ["cache", "clean", "--cache-dir", ""], "empty path"),
    ("empty-study", [*TUNE, "--study", ""], "--study"),
    ("blank-study", [*TUNE, "--study", "   "], "--study"),
    ("empty-storage", [*TUNE, "--storage", ""], "--storage"),
    ("empty-tracking-uri", [*RUN, "--tracking-uri", ""], "empty value"),
    # tracking URIs
    ("in-memory-sqlite", [*RUN, "--tracking-uri", "sqlite://"], "in memory"),
    ("in-memory-sqlite-memory", [*RUN, "--tracking-uri", "sqlite:///:memory:"], "in memory"),
    ("sqlite-missing-folder", [*RUN, "--tracking-uri", "sqlite:///{tmp}/nonexistent/dir/x.db"], "no folder"),
    ("sqlite-missing-folder-grid", [*GRID, "--tracking-uri", "sqlite:///{tmp}/nonexistent/dir/x.db"], "no folder"),
    ("sqlite-missing-folder-tune", [*TUNE, "--tracking-uri", "sqlite:///{tmp}/nonexistent/dir/x.db"], "no folder"),
    ("sqlite-database-is-a-folder", [*RUN, "--tracking-uri", "sqlite:///{tmp}/images"], "is a folder"),
    ("in-memory-sqlite-show", ["show", "abc", "--tracking-uri", "sqlite://", *RES], "in memory"),
    # tune numbers
    ("tune-huge-threads", [*TUNE, "--threads", "100000"], "--threads"),
    ("tune-zero-threads", [*TUNE, "--threads", "0"], "--threads"),
    ("tune-negative-threads", [*TUNE, "--threads", "-2"], "--threads"),
    ("tune-population-over-trials", [*TUNE, "--population", "1000000"], "--population"),
    ("tune-negative-trials", [*TUNE[:7], "--trials", "-3", *TUNE[9:]], "trials"),
    ("tune-zero-population", [*TUNE, "--population", "0"], "--population"),
    ("tune-negative-sampler-seed", [*TUNE, "--sampler-seed", "-1"], "--sampler-seed"),
    # settings checked and then ignored
    ("weights-unused-by-small-cnn", [*RUN, "--set", "face_reid.weights={tmp}/afile"], "read only by model"),
    ("denoise-setting-without-attacks", [*RUN, "--attacks", "none", "--set", "denoise.epochs=3"], "denoise"),
    ("attack-setting-not-run", [*RUN, "--attacks", "face_reid", "--set", "denoise.epochs=3"], "denoise"),
    # weights that are no checkpoint
    ("weights-text-file", [*RUN, "--set", "face_reid.model=inception_resnet_v1",
                           "--set", "face_reid.weights={tmp}/afile"], "checkpoint"),
    ("weights-wrong-keys", [*RUN, "--set", "face_reid.model=inception_resnet_v1",
                            "--set", "face_reid.weights={tmp}/other.pt"], "checkpoint"),
    ("weights-is-a-folder", [*RUN, "--set", "face_reid.model=inception_resnet_v1",
                             "--set", "face_reid.weights={tmp}/images"], "face_reid"),
    # settings that would exhaust memory
    ("huge-episodes-per-epoch", [*RUN, "--set", "task.episodes_per_epoch=1000000000"], "task.episodes_per_epoch"),
    ("huge-val-episodes", [*RUN, "--set", "task.val_episodes=1000000000"], "task.val_episodes"),
    ("huge-test-episodes", [*RUN, "--set", "task.test_episodes=1000000000"], "task.test_episodes"),
    ("huge-data-size", [*RUN, "--set", "task.data.size=100000"], "task.data.size"),
    ("huge-data-identities", [*RUN, "--set", "task.data.n_ids=1000000000"], "task.data.n_ids"),
    ("huge-data-per-id", [*RUN, "--set", "task.data.per_id=1000000000"], "task.data.per_id"),
    ("huge-image-size", [*RUN, "--set", "task.image_size=100000"], "task.image_size"),
    ("huge-denoiser-width", [*RUN, "--set", "task.denoiser_width=1000000"], "task.denoiser_width"),
    ("huge-train-query", [*RUN, "--set", "task.train_query=1000000000", "--set", "task.data.per_id=1000000000"],
     "memory"),
    ("huge-reid-width", [*RUN, "--set", "face_reid.width=1000000"], "face_reid.width"),
    ("huge-reid-input", [*RUN, "--set", "face_reid.input_size=100000"], "face_reid.input_size"),
    ("huge-reid-batch", [*RUN, "--set", "face_reid.batch_size=1000000000", "--set", "face_reid.input_size=4096"],
     "face_reid"),
    ("huge-denoise-width", [*RUN, "--set", "denoise.width=1000000"], "denoise.width"),
    ("huge-denoise-depth", [*RUN, "--set", "denoise.depth=10000000"], "denoise.depth"),
    ("huge-synth-objects", ["run", "--mechanism", "pixelate", "--task", "dp_vit_synth_objects", "--profile", "smoke",
                            *RES, "--set", "task.data.n_train=10000000000"], "task.data.n_train"),
    ("huge-vit-width", ["run", "--mechanism", "pixelate", "--task", "dp_vit_synth_objects", "--profile", "smoke",
                        *RES, "--set", "task.model.width=1000000"], "task.model.width"),
    ("huge-vit-mlp", ["run", "--mechanism", "pixelate", "--task", "dp_vit_synth_objects", "--profile", "smoke",
                      *RES, "--set", "task.model.mlp_dim=1000000000"], "task.model.mlp_dim"),
    ("huge-setting-in-grid", [*GRID, "--set", "task.episodes_per_epoch=1000000000"], "task.episodes_per_epoch"),
    ("huge-setting-in-tune", [*TUNE, "--set", "task.data.size=100000"], "task.data.size"),
    # contradictory options
    ("entries-and-no-entries-build", [*BOARD, "--entries", "{tmp}/entries", "--no-entries"], "--no-entries"),
    ("entries-and-no-entries-show", ["leaderboard", "show", *RES, "--entries", "{tmp}/entries", "--no-entries"],
     "--no-entries"),
    # other numbers and names
    ("grid-huge-workers", [*GRID, "--executor", "processes", "--workers", "100000"], "--workers"),
    ("grid-negative-gpus", [*GRID, "--gpus-per-cell", "-1"], "--gpus-per-cell"),
    ("audit-few-trials", [*AUDIT, "--trials", "5"], "--trials"),
    ("audit-huge-image", [*AUDIT, "--image-size", "1e6"], "--image-size"),
    ("audit-confidence-one", [*AUDIT, "--confidence", "1"], "--confidence"),
    ("audit-unknown-mechanism", ["audit", "--mechanism", "dp_pixx"], "did you mean"),
    ("ui-port-zero", ["ui", "--port", "0", *RES], "--port"),
    ("ui-port-too-high", ["ui", "--port", "70000", *RES], "--port"),
    ("serve-negative-port", ["leaderboard", "serve", "--port", "-1", *RES], "--port"),
    ("sheet-huge-scale", [*SHOW, "--out", "{tmp}/sheet.png", "--scale", "1000"], "--scale"),
    ("sheet-unknown-dataset", [*SHOW, "--out", "{tmp}/sheet.png", "--dataset", "synth_facez"], "did you mean"),
    ("release-no-images", ["release", "--mechanism", "pixelate", "--in", "{tmp}/entries", "--out", "{tmp}/out"],
     "no images"),
    ("release-missing-in", ["release", "--mechanism", "pixelate", "--in", "{tmp}/absent", "--out", "{tmp}/out"],
     "no such folder"),
    ("report-missing-cells", [*REPORT, "--cells", "{tmp}/absent.txt"], "absent.txt"),
    ("report-missing-bundle", [*REPORT, "--bundle", "{tmp}/absent.json"], "absent.json"),
    # data shortfalls, from the data's shape before any work (no MLflow run opened: nothing is written)
    ("reid-one-identity", [*REID, "--data-root", "{data}/market_1id"], "add identities"),
    ("reid-fewer-identities-than-p", [*REID, "--data-root", "{data}/market_3ids"], "lower task.p to 3"),
    ("reid-no-attribute-file", [*REID, "--data-root", "{data}/market_3ids", "--set", "task.p=3",
                                "--set", "identity_linkage.p=3", "--attacks", "attribute_inference,identity_linkage"],
     "--attacks identity_linkage"),
    ("reid-fewer-identities-than-linkage-p", [*REID, "--data-root", "{data}/market_3ids", "--set", "task.p=3"],
     "set identity_linkage.p=3"),
    ("reid-queries-matched-only-by-their-own-camera", [*REID, "--data-root", "{data}/market_one_camera"],
     "from another camera"),
    ("face-detect-without-face-boxes", ["run", "--mechanism", "pixelate", "--task", "classify_folder_obf_obf",
                                        "--profile", "smoke", *RES, "--attacks", "face_detect",
                                        "--set", "task.data.root={data}/people_8"], "boxes.csv"),
    ("fewshot-test-split-too-few-classes", [*FOLDER_RUN, "--set", "task.data.root={data}/people_20"],
     "--set task.data.split_fractions=0.6,0.15,0.25"),
    ("fewshot-too-few-classes-in-all", [*FOLDER_RUN, "--set", "task.data.root={data}/people_8"], "8 classes in all"),
    ("fewshot-too-few-images-per-class", [*FOLDER_RUN, "--set", "task.data.root={data}/people_20",
                                          "--set", "task.data.split_fractions=0.6,0.15,0.25",
                                          "--set", "task.test_query=6"], "test_shot + test_query=11"),
    ("dp-vit-empty-test-split", ["run", "--mechanism", "pixelate", "--task", "dp_vit_folder", "--profile", "smoke",
                                 *RES, "--attacks", "none", "--set", "task.data.root={data}/objects_2x2",
                                 "--set", "task.data.min_images=2"], "task.data.image_fractions"),
    ("sheet-set-not-a-loader-option", [*SHOW, "--out", "{tmp}/sheet.png", "--set", "face_reid.epochs=3"],
     "task.data.NAME=VALUE"),
    ("sheet-folder-without-tree", [*SHOW, "--out", "{tmp}/sheet.png", "--dataset", "folder"], "no image tree"),
    ("sheet-folder-missing-tree", [*SHOW, "--out", "{tmp}/sheet.png", "--dataset", "folder",
                                   "--set", "task.data.root={tmp}/absent"], "does not exist"),
]

TIMEOUT_S = 20
"""Seconds a line may run in the classifier before it counts as silently accepted (work started)."""
MEMORY_LIMIT = 6 << 30
"""Address space of a classified line: a setting that would exhaust memory fails, not the machine."""


def make_world(folder: Path) -> Path:
    """Fills ``folder`` with the fixtures the cases name: a file, images, an empty entries folder, a non-checkpoint."""
    import numpy as np
    import torch
    from PIL import Image

    (folder / "afile").write_text("not a directory, not a checkpoint\n")
    (folder / "images").mkdir()
    Image.fromarray(np.full((32, 32, 3), 128, np.uint8)).save(folder / "images" / "a.png")
    (folder / "entries").mkdir()
    torch.save({"not": torch.zeros(2)}, folder / "other.pt")
    return folder


def make_data(folder: Path) -> Path:
    """Fills ``folder`` (``{data}`` in the cases; read only, made once) with data too small for the benchmarks:
    Market-1501 trees of 1 and 3 training identities and one whose gallery shows the query people only from the
    queries' camera, folders of 8 and 20 people with 10 photos each, and 2 classes of 2 objects."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (128, 128, 128)).save(buffer, format="PNG")
    for name, classes, images in (("people_8", 8, 10), ("people_20", 20, 10), ("objects_2x2", 2, 2)):
        for c in range(classes):
            (folder / name / f"c{c:02d}").mkdir(parents=True)
            for i in range(images):
                (folder / name / f"c{c:02d}" / f"{i}.png").write_bytes(buffer.getvalue())
    for name, train_ids in (("market_1id", 1), ("market_3ids", 3)):
        make_market(folder / name, train_ids, test_ids=2)
    make_market(folder / "market_one_camera", 4, test_ids=2, same_camera=True)
    return folder


def make_market(root: Path, train_ids: int, test_ids: int, per_id: int = 4, same_camera: bool = False) -> None:
    """Writes a Market-1501 tree (``PPPP_cCsS_FFFFFF_NN.jpg`` names) of tiny grey images, no attribute file;
    ``same_camera``: the gallery sees the query identities only with the queries' camera."""
    from PIL import Image

    image = Image.new("RGB", (8, 16), (128, 128, 128))
    frame = 0
    gallery_cams = (1,) if same_camera else range(2, per_id + 2)
    for folder, pids, cams in (("bounding_box_train", range(1, train_ids + 1), range(1, per_id + 1)),
                               ("query", range(100, 100 + test_ids), (1,)),
                               ("bounding_box_test", range(100, 100 + test_ids), gallery_cams)):
        (root / folder).mkdir(parents=True)
        for pid in pids:
            for cam in cams:
                frame += 1
                image.save(root / folder / f"{pid:04d}_c{cam}s1_{frame:06d}_01.jpg")


@pytest.fixture
def world(tmp_path, monkeypatch) -> Path:
    """A fresh folder with the fixtures, made the current folder."""
    monkeypatch.chdir(make_world(tmp_path))
    return tmp_path


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """The too-small datasets, made once for the module (the cases only read them)."""
    return make_data(tmp_path_factory.mktemp("data"))


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Returns relative path -> (size, mtime) of everything under ``folder``."""
    return {str(p.relative_to(folder)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in folder.rglob("*")}


def argv_in(world: Path, argv: list[str], data: Path | None = None) -> list[str]:
    """Returns ``argv`` with ``{tmp}`` replaced by the world folder and ``{data}`` by the data folder."""
    return [a.replace("{tmp}", str(world)).replace("{data}", str(data or world / "data")) for a in argv]


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """Runs ``bench`` in-process; returns (exit status, stdout, stderr)."""
    from bench.cli import main
    from bench.core.registry import scoped

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), scoped():
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own usage errors
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def test_the_list_covers_the_issue_and_names_each_line_once():
    assert len(CASES) >= 90
    assert len({case[0] for case in CASES}) == len(CASES)


@pytest.mark.parametrize("name, argv, phrase", CASES, ids=[c[0] for c in CASES])
def test_bad_command_line_is_one_line_exit_2_and_writes_nothing(world, data, name, argv, phrase):
    before, data_before = snapshot(world), snapshot(data)
    code, out, err = run_cli(argv_in(world, argv, data))
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, f"{name}: exit {code}\n{err[-2000:]}"
    assert "Traceback" not in err and out == "", err[-2000:]
    assert len(lines) == 1, f"{name}: {len(lines)} lines on stderr:\n{err[-2000:]}"
    assert phrase in lines[0], f"{name}: {lines[0]!r} lacks {phrase!r}"
    assert snapshot(world) == before, f"{name}: files written or changed before the error"
    assert snapshot(data) == data_before, f"{name}: files written into the data"


def test_audit_reports_progress_over_its_counted_trials():
    from bench.audit import AuditConfig, audit_mechanism
    from bench.core.registry import mechanisms

    loops: list[tuple[str, int, int]] = []

    def progress(iterable, total=None, desc=None):
        items = list(iterable)
        loops.append((desc, total, len(items)))
        return items

    config = AuditConfig(trials=200, image_size=4, chunk_values=4 * 4 * 3 * 50)
    report = audit_mechanism(mechanisms.get("dp_pix")(epsilon=1.0, block=2), config, progress)
    assert report.trials == 200
    assert [desc.split(" (")[0] for desc, _, _ in loops] == ["counted trials of input 0", "counted trials of input 1"]
    assert all(total == steps > 1 for _, total, steps in loops)  # several chunks, each one step


@pytest.mark.parametrize("task", ["fewshot_synth_faces", "dp_vit_synth_objects"])
@pytest.mark.parametrize("profile", ["smoke", "quick", "paper"])
def test_the_shipped_profiles_fit_a_small_machine(task, profile):
    """The memory estimates refuse only what cannot fit: every shipped profile of these needs under 16 GB."""
    from bench.core.registry import attacks as attack_registry
    from bench.core.registry import datasets, tasks
    from bench.system import bounds

    cls = tasks.get(task)
    planned = cls(profile, None)
    declared = getattr(cls, "benchmark", None)
    attacks = {name: attack_registry.get(name)(profile, declared.settings_of(name, None, profile) if declared else None)
               for name in cls.attacks}
    shape = datasets.get(planned.dataset)().inspect(None, planned.data_options())
    needs = bounds.cell_needs(planned, attacks, shape)
    assert needs and all(need.size < 16e9 for need in needs), [(n.what, n.size) for n in needs if n.size >= 16e9]


def test_a_setting_that_cannot_fit_is_refused_naming_it(monkeypatch):
    from bench.core.registry import tasks
    from bench.errors import BenchError
    from bench.system import bounds

    planned = tasks.get("fewshot_synth_faces")("smoke", {"episodes_per_epoch": 100_000_000})
    monkeypatch.setattr(bounds, "available_memory", lambda: 1 << 30)
    with pytest.raises(BenchError, match=r"task.episodes_per_epoch=100000000: the index batch of 100,000,000 episodes"):
        bounds.check_cell(planned, {}, None, "cpu", {"task": {"episodes_per_epoch": "100000000"}})
    bounds.check_cell(tasks.get("fewshot_synth_faces")("smoke", None), {}, None, "cpu", {})


# --- the classifier: clean / traceback / silent, one forked process per line ---


def classify(name: str, argv: list[str], template: Path, scratch: Path, data: Path) -> tuple[str, str]:
    """Runs one line in a forked child, in a copy of ``template``; returns (class, why).

    clean: exit 2, one line on stderr, no traceback, nothing written. traceback: a
    traceback, or killed by a signal (a segfault). silent: anything else (accepted, still
    running after :data:`TIMEOUT_S`, or files written). The child's address space is
    limited, so a setting that would exhaust memory fails in it, not on the machine.
    """
    import resource
    import signal
    import time

    world = scratch / name
    shutil.copytree(template, world, symlinks=True)
    before = snapshot(world)
    out_file, err_file = scratch / f"{name}.out", scratch / f"{name}.err"
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 70
        try:
            os.setsid()
            with open(out_file, "w") as out, open(err_file, "w") as err:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                sys.stdout, sys.stderr = os.fdopen(1, "w", buffering=1), os.fdopen(2, "w", buffering=1)
                used = _address_space()
                resource.setrlimit(resource.RLIMIT_AS, (used + MEMORY_LIMIT, used + MEMORY_LIMIT))
                os.chdir(world)
                try:
                    code = main_cli(argv_in(world, argv, data))
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
                except BaseException:
                    import traceback

                    traceback.print_exc()
                    code = 1
                sys.stdout.flush()
                sys.stderr.flush()
        finally:
            os._exit(code)
    deadline, status = time.monotonic() + TIMEOUT_S, None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        err = err_file.read_text(errors="replace")
        return ("traceback", "timed out after a traceback") if "Traceback" in err else (
            "silent", f"still running after {TIMEOUT_S} s")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)  # workers it left behind
    err = err_file.read_text(errors="replace")
    lines = [line for line in err.splitlines() if line.strip()]
    last = lines[-1][:150] if lines else ""
    if os.WIFSIGNALED(status):
        return "traceback", f"killed by signal {os.WTERMSIG(status)}: {last}"
    code = os.WEXITSTATUS(status)
    if "Traceback" in err:
        return "traceback", f"exit {code}: {last}"
    changed = snapshot(world) != before
    if code == 2 and len(lines) == 1 and not changed:
        return "clean", last
    why = "files written; " if changed else ""
    return "silent", f"{why}exit {code}, {len(lines)} stderr line(s): {last}"


def main_cli(argv: list[str]) -> int:
    """``bench.cli.main`` with the mechanisms registered by plugins forgotten afterwards."""
    from bench.cli import main as bench_main

    return bench_main(argv)


def _address_space() -> int:
    """Returns this process's virtual memory size in bytes (0 where /proc is missing)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def main(args: list[str]) -> int:
    """Classifies the lines (all, or ``--only ID,...``) and prints one row each and the counts."""
    import tempfile

    import mlflow  # noqa: F401

    import bench.cell.run  # noqa: F401  (torch, the registries: imported once, before the forks)
    import bench.cli
    import bench.storage.tracking  # noqa: F401

    bench.cli.build_parser()  # imports every subcommand
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("CI", "1")
    only = set(args[args.index("--only") + 1].split(",")) if "--only" in args else None
    counts = {"clean": 0, "traceback": 0, "silent": 0}
    with tempfile.TemporaryDirectory(prefix="bad-lines-") as tmp:
        template = Path(tmp) / "template"
        template.mkdir()
        make_world(template)
        data = make_data(Path(tmp) / "data")
        for name, argv, _ in CASES:
            if only is not None and name not in only:
                continue
            kind, why = classify(name, argv, template, Path(tmp), data)
            counts[kind] += 1
            print(f"{kind:<9} {name:<36} {why}", flush=True)
    total = sum(counts.values())
    print(f"{total} bad command lines: {counts['clean']} clean, {counts['traceback']} traceback, "
          f"{counts['silent']} silent")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
