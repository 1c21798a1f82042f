"""Fault injection, part 1: bad command lines end in one line, exit 2, and write nothing.

Every row of :data:`CASES` is a command a user could type. Each runs in-process through
the CLI's ``main(argv)`` in a fresh folder holding only the fixtures it needs; the test
asserts exit status 2, one line on stderr (no traceback), nothing on stdout, and that no
file in the folder was created, changed or removed.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import sqlite3
from pathlib import Path

import pytest

from bench.cli import main

FS = "fewshot_synth_faces"
RUN = ["run", "--mechanism", "dp_pix", "--task", FS, "--profile", "smoke", "--results-dir", "{tmp}/results"]
GRID = ["grid", "--task", FS, "--mechanism", "pixelate", "--profile", "smoke", "--results-dir", "{tmp}/results"]
SHOW = ["mechanisms", "show", "pixelate", "--out", "{tmp}/sheet.png", "--cache-dir", "{tmp}/cache"]
TUNE = ["tune", "--mechanism", "pixelate", "--task", FS, "--profile", "smoke", "--results-dir", "{tmp}/results"]

# (id, argv, a phrase the one line must contain)
CASES: list[tuple[str, list[str], str]] = [
    # names
    ("unknown-mechanism", ["run", "--mechanism", "dp_pixx", "--task", FS, "--results-dir", "{tmp}/results"], "did you mean 'dp_pix'"),
    ("unknown-task", ["run", "--mechanism", "dp_pix", "--task", "fewshot_synth", "--results-dir", "{tmp}/results"], "unknown task"),
    ("unknown-profile", [*RUN[:5], "--profile", "fast", *RUN[7:]], "unknown profile"),
    ("mistyped-profile", [*RUN[:5], "--profile", "smok", *RUN[7:]], "unknown profile 'smok'; did you mean 'smoke'?"),
    ("profile-twice", [*RUN, "--profile", "paper"], "--profile: given twice"),
    ("unknown-attack", [*RUN, "--attacks", "face_reidd"], "unknown attack"),
    ("empty-attacks", [*RUN, "--attacks", ""], "--attacks needs"),
    ("only-commas-attacks", [*RUN, "--attacks", ",,"], "--attacks needs"),
    ("none-and-attack", [*RUN, "--attacks", "none,face_reid"], "cannot be combined"),
    ("missing-task", ["run", "--mechanism", "dp_pix"], "required"),
    # mechanism parameters
    ("negative-epsilon", [*RUN, "--param", "epsilon=-1"], "epsilon"),
    ("zero-epsilon", [*RUN, "--param", "epsilon=0"], "epsilon"),
    ("text-epsilon", [*RUN, "--param", "epsilon=abc"], "expects float"),
    ("nan-epsilon", [*RUN, "--param", "epsilon=nan"], "finite"),
    ("inf-epsilon", [*RUN, "--param", "epsilon=inf"], "finite"),
    ("subnormal-epsilon", [*RUN, "--param", "epsilon=5e-324"], "normal float"),
    ("zero-block", [*RUN, "--param", "block=0"], "block"),
    ("huge-block", [*RUN, "--param", "block=1e20"], "block"),
    ("fractional-block", [*RUN, "--param", "block=2.5"], "integer"),
    ("unknown-parameter", [*RUN, "--param", "epsilonn=3"], "did you mean 'epsilon'"),
    ("parameter-without-value", [*RUN, "--param", "epsilon"], "expected"),
    ("parameter-twice", [*RUN, "--param", "epsilon=1", "--param", "epsilon=2"], "given twice"),
    # settings
    ("set-without-section", [*RUN, "--set", "epochs=3"], "SECTION.NAME=VALUE"),
    ("set-unknown-section", [*RUN, "--set", "nowhere.epochs=3"], "no section"),
    ("set-unknown-setting", [*RUN, "--set", "task.epoch=3"], "did you mean 'epochs'"),
    ("zero-epochs", [*RUN, "--set", "task.epochs=0"], "epochs"),
    ("text-epochs", [*RUN, "--set", "task.epochs=many"], "epochs"),
    ("nan-lr", [*RUN, "--set", "task.lr=nan"], "lr"),
    ("negative-lr", [*RUN, "--set", "task.lr=-0.1"], "lr"),
    ("inf-lr", [*RUN, "--set", "task.lr=inf"], "lr"),
    ("way-beyond-classes", [*RUN, "--set", "task.test_way=1000"], "test_way"),
    ("negative-episodes", [*RUN, "--set", "task.test_episodes=-5"], "test_episodes"),
    ("zero-shot", [*RUN, "--set", "task.test_shot=0"], "test_shot"),
    ("episode-larger-than-class", [*RUN, "--set", "task.test_query=100"], "test_query"),
    ("mapping-set-to-text", [*RUN, "--set", "task.data=foo"], "mapping"),
    ("unknown-loader-option", [*RUN, "--set", "task.data.n_idz=5"], "n_idz"),
    ("bad-loader-option", [*RUN, "--set", "task.data.variation=9"], "variation"),
    ("missing-weights", [*RUN, "--set", "face_reid.weights={tmp}/absent.pt"], "no such file"),
    ("enrolment-beyond-images", [*RUN, "--set", "face_reid.enrol_per_id=100"], "enrol_per_id"),
    ("zero-attack-epochs", [*RUN, "--set", "face_reid.epochs=0"], "epochs"),
    ("unknown-box-source", [*RUN, "--set", "release.boxes=guess"], "release.boxes"),
    ("unknown-release-setting", [*RUN, "--set", "release.speed=2"], "release"),
    # seeds, devices, places
    ("negative-seed", [*RUN, "--seed", "-1"], "seed"),
    ("seed-2-64", [*RUN, "--seed", str(2**64)], "seed"),
    ("text-seed", [*RUN, "--seed", "abc"], "invalid int"),
    ("unknown-device", [*RUN, "--device", "tpu"], "unknown device"),
    ("missing-celeba", ["run", "--mechanism", "dp_pix", "--task", "fewshot_celeba", "--data-root", "{tmp}/nodata",
                        "--results-dir", "{tmp}/results"], "img_align_celeba"),
    ("results-dir-is-a-file", ["run", "--mechanism", "dp_pix", "--task", FS, "--profile", "smoke",
                               "--results-dir", "{tmp}/afile"], "is a file"),
    ("cache-dir-is-a-file", [*RUN, "--cache-dir", "{tmp}/afile"], "is a file"),
    ("unsupported-tracking-uri", [*RUN, "--tracking-uri", "foo://bar"], "unsupported scheme 'foo'"),
    ("unreachable-tracking-server", [*RUN, "--tracking-uri", "http://127.0.0.1:9"], "tracking store"),
    ("corrupt-mlflow-db", ["run", "--mechanism", "dp_pix", "--task", FS, "--profile", "smoke",
                           "--results-dir", "{tmp}/corrupt"], "tracking store"),
    ("foreign-mlflow-db", ["run", "--mechanism", "dp_pix", "--task", FS, "--profile", "smoke",
                           "--results-dir", "{tmp}/foreign"], "tracking store"),
    # plugins
    ("missing-plugin-file", [*RUN, "--mechanism-file", "{tmp}/absent.py"], "no such file"),
    ("plugin-syntax-error", [*RUN, "--mechanism-file", "{tmp}/broken.py"], "SyntaxError"),
    ("plugin-reuses-a-name", [*RUN, "--mechanism-file", "{tmp}/dup.py"], "already registered"),
    ("plugin-raises", [*RUN, "--mechanism-file", "{tmp}/raises.py"], "RuntimeError"),
    # grid
    ("zero-workers", [*GRID, "--executor", "processes", "--workers", "0"], "--workers"),
    ("negative-workers", [*GRID, "--executor", "processes", "--workers", "-5"], "--workers"),
    ("unknown-executor", [*GRID, "--executor", "slurm"], "invalid choice"),
    ("unknown-suite", ["grid", "--suite", "smoky", "--results-dir", "{tmp}/results"], "unknown suite"),
    ("mistyped-suite", ["grid", "--suite", "smok", "--results-dir", "{tmp}/results"], "did you mean 'smoke'"),
    ("submit-mistyped-suite", ["submit", "--suite", "smok", "--mechanism", "pixelate",
                               "--results-dir", "{tmp}/results"], "did you mean 'smoke'"),
    ("report-mistyped-suite", ["report", "--suite", "smok", "--plot", "{tmp}/plots", "--results-dir", "{tmp}/results"],
     "did you mean 'smoke'"),
    ("board-mistyped-suite", ["leaderboard", "show", "--suite", "smok", "--results-dir", "{tmp}/results"],
     "did you mean 'smoke'"),
    ("mistyped-executor", [*GRID, "--executor", "proceses"], "did you mean 'processes'"),
    ("empty-grid-seeds", [*GRID, "--seeds", ""], "--seeds needs at least one"),
    ("only-commas-grid-seeds", [*GRID, "--seeds", ",,"], "--seeds needs at least one"),
    ("non-utf8-suite", ["grid", "--suite", "{tmp}/latin1.yaml", "--results-dir", "{tmp}/results"], "UTF-8"),
    ("invalid-yaml-suite", ["grid", "--suite", "{tmp}/invalid.yaml", "--results-dir", "{tmp}/results"], "not valid YAML"),
    ("unknown-suite-key", ["grid", "--suite", "{tmp}/unknown_key.yaml", "--results-dir", "{tmp}/results"], "unknown key"),
    ("suite-without-seeds", ["grid", "--suite", "{tmp}/no_seeds.yaml", "--results-dir", "{tmp}/results"], "seeds"),
    ("suite-bad-parameter", ["grid", "--suite", "{tmp}/bad_param.yaml", "--results-dir", "{tmp}/results"], "epsilon"),
    ("text-seeds", [*GRID, "--seeds", "a,b"], "integers"),
    ("negative-grid-seed", [*GRID, "--seeds", "-1"], "seed"),
    ("grid-without-cells", ["grid", "--results-dir", "{tmp}/results"], "give --suite"),
    ("empty-parameter-value", [*GRID, "--param", "block="], "empty value"),
    # tune
    ("zero-trials", [*TUNE, "--trials", "0"], "trials"),
    ("tune-unknown-mechanism", ["tune", "--mechanism", "pixelat", "--task", FS, "--results-dir", "{tmp}/results"], "unknown mechanism"),
    # mechanisms show
    ("sheet-empty-sweep", [*SHOW, "--sweep", "block="], "needs at least one value"),
    ("sheet-bad-sweep-value", [*SHOW, "--sweep", "block=0,4"], "block"),
    ("sheet-zero-images", [*SHOW, "--n", "0"], "--n"),
    ("sheet-zero-scale", [*SHOW, "--scale", "0"], "--scale"),
    ("sheet-missing-folder", ["mechanisms", "show", "pixelate", "--out", "{tmp}/absent/sheet.png",
                              "--cache-dir", "{tmp}/cache"], "no folder"),
    ("sheet-unknown-device", [*SHOW, "--device", "gpu"], "unknown device 'gpu'"),
    ("sheet-negative-seed", [*SHOW, "--seed", "-1"], "--seed must be an integer in [0, 2^63)"),
    ("sheet-without-extension", [*SHOW[:3], "--out", "{tmp}/sheet", *SHOW[5:]], "ending in .png"),
    ("sheet-unknown-extension", [*SHOW[:3], "--out", "{tmp}/sheet.xyz", *SHOW[5:]], "ending in .png"),
    # mistyped subcommands and choices
    ("mistyped-command", ["rnu"], "did you mean 'run'"),
    ("mistyped-list-kind", ["list", "mechanism"], "did you mean 'mechanisms'"),
    ("mistyped-cache-action", ["cache", "verfy"], "did you mean 'verify'"),
    ("mistyped-board-action", ["leaderboard", "biuld"], "did you mean 'build'"),
    ("mistyped-report-format", ["report", "--format", "markdwn", "--results-dir", "{tmp}/results"],
     "did you mean 'markdown'"),
    # reading results
    ("show-without-database", ["show", "abc", "--results-dir", "{tmp}/results"], "no results database"),
    ("board-without-database", ["leaderboard", "show", "--results-dir", "{tmp}/results", "--no-entries"], "results"),
    ("cache-dir-file-verify", ["cache", "verify", "--cache-dir", "{tmp}/afile"], "is a file"),
]

PLUGINS = {
    "broken.py": "def oops(:\n",
    "dup.py": (
        "from bench.core.interfaces import Mechanism\n"
        "from bench.core.registry import register_mechanism\n\n"
        "@register_mechanism('dp_pix')\n"
        "class Mine(Mechanism):\n"
        "    def apply(self, images, *, generator, boxes=None):\n"
        "        return images\n"
    ),
    "raises.py": "raise RuntimeError('plugin failed on import')\n",
}
SUITES = {
    "latin1.yaml": "description: caf\xe9\nprofile: smoke\n".encode("latin-1"),
    "invalid.yaml": b"profile: [smoke\n",
    "unknown_key.yaml": b"profile: smoke\nseeds: [0]\nbenchmarks: [fewshot_synth_faces]\nmechanisms: [identity]\nseed: 1\n",
    "no_seeds.yaml": b"profile: smoke\nseeds: []\nbenchmarks: [fewshot_synth_faces]\nmechanisms: [identity]\n",
    "bad_param.yaml": (b"profile: smoke\nseeds: [0]\nbenchmarks: [fewshot_synth_faces]\n"
                       b"mechanisms:\n  - name: dp_pix\n    grid: {epsilon: [1, -1]}\n"),
}


@pytest.fixture(scope="module")
def foreign_db(tmp_path_factory) -> Path:
    """An MLflow database whose schema revision this MLflow does not know (another version wrote it)."""
    from bench.storage.tracking import Tracker

    folder = tmp_path_factory.mktemp("foreign")
    Tracker(folder)
    with sqlite3.connect(folder / "mlflow.db") as db:
        db.execute("UPDATE alembic_version SET version_num = 'ffffffffffff'")
    return folder / "mlflow.db"


@pytest.fixture
def world(tmp_path, foreign_db) -> Path:
    (tmp_path / "afile").write_text("not a directory\n")
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "mlflow.db").write_bytes(b"this is not an sqlite database" * 100)
    (tmp_path / "foreign").mkdir()
    shutil.copy(foreign_db, tmp_path / "foreign" / "mlflow.db")
    for name, text in PLUGINS.items():
        (tmp_path / name).write_text(text)
    for name, data in SUITES.items():
        (tmp_path / name).write_bytes(data)
    return tmp_path


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*")}


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own usage errors
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def test_the_table_covers_every_kind_of_mistake_probed():
    assert len(CASES) >= 72
    assert len({case[0] for case in CASES}) == len(CASES)


@pytest.mark.parametrize("name, argv, phrase", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(world, name, argv, phrase):
    check_bad_input(world, name, argv, phrase)


def test_sheet_on_cuda_without_cuda_is_one_line_before_the_dataset_loads(world):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    check_bad_input(world, "sheet-cuda", [*SHOW, "--device", "cuda"], "CUDA is not available")


def check_bad_input(world: Path, name: str, argv: list[str], phrase: str) -> None:
    """Runs ``argv`` in ``world``; asserts exit 2, one line with ``phrase``, nothing on stdout and no file touched."""
    from bench.core.registry import scoped

    before = snapshot(world)
    with scoped():
        code, out, err = run_cli([a.replace("{tmp}", str(world)) for a in argv])
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, f"{name}: exit {code}\n{err[-2000:]}"
    assert len(lines) == 1, f"{name}: {len(lines)} lines on stderr:\n{err[-2000:]}"
    assert "Traceback" not in err and out == ""
    assert phrase in lines[0], f"{name}: {lines[0]!r} lacks {phrase!r}"
    assert snapshot(world) == before, f"{name}: files written or changed before the error"
