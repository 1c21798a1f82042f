"""Fault injection, part 3 (issue 45, items 1 and 2): a mechanism cannot poison other cells; one lock per cell.

- A ``--mechanism-file`` mechanism that writes into its input is refused in one line before
  anything is written (the conformance checks run before a plugin's cells); one that does so
  only outside those checks damages nothing but its private copies, so the identity cell that
  shares its cache has the numbers of a fresh cache.
- Four ``bench run`` processes of one cell into one results directory, each with its own
  cache folder, log one FINISHED run.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from fixtures.smoke_cells import CHEAP_TASK

import bench.storage.cache as cache_module
from bench.cli import main
from bench.core.registry import scoped
from bench.data.base import ImageSet
from bench.randomness.streams import Streams
from bench.storage.tracking import Tracker
from tests.integration.test_faults import metrics, statuses

ROOT = Path(__file__).resolve().parents[2]
CELL = ["--task", "fewshot_synth_faces", "--profile", "smoke", "--attacks", "none", *CHEAP_TASK]

HEADER = """
from bench.core.interfaces import Mechanism, ParamSpace
from bench.core.registry import register_mechanism
"""

ZERO_IN_PLACE = HEADER + '''
@register_mechanism("zero_in_place")
class ZeroInPlace(Mechanism):
    """Zeroes its input in place and returns it."""
    params = ParamSpace()

    def apply(self, images, *, generator, boxes=None):
        images.zero_()
        return images
'''

# Mechanisms that behave on the conformance checks' small batches (4 images) and damage what
# they are given in a cell's batches only: the guard, not the checks, must contain them.
HIDDEN = {
    "now": '''
    def apply(self, images, *, generator, boxes=None):
        out = images.clone()
        if len(images) > 8:
            images.zero_()
        return out
''',
    "later": '''
    kept = []

    def apply(self, images, *, generator, boxes=None):
        for earlier in self.kept:
            earlier.zero_()
        if len(images) > 8:
            self.kept.append(images)
        return images.clone()
''',
    "storage": '''
    def apply(self, images, *, generator, boxes=None):
        out = images.clone()
        if len(images) > 8:  # through the memory behind the batch: a view reaches its whole split
            import torch
            torch.zeros(0, dtype=torch.uint8).set_(images.untyped_storage()).zero_()
        return out
''',
}


def hidden_mechanism(kind: str) -> str:
    body = textwrap.indent(textwrap.dedent(HIDDEN[kind]).strip("\n"), "    ")
    return HEADER + f'''
@register_mechanism("hidden_{kind}")
class Hidden(Mechanism):
    """Damages its input only in batches of more than 8 images."""
    params = ParamSpace()

{body}
'''


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    cache_module._verified.clear()  # as a new process: every entry is verified again
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), scoped():
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def run_cell(results: Path, cache: Path, *mechanism: str) -> tuple[int, str, str]:
    return run("run", *mechanism, *CELL, "--results-dir", str(results), "--cache-dir", str(cache))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> tuple[Path, dict[str, float]]:
    """The identity cell on a fresh cache: its cache and its numbers."""
    root = tmp_path_factory.mktemp("fresh")
    code, _, err = run_cell(root / "results", root / "cache", "--mechanism", "identity")
    assert code == 0, err[-3000:]
    return root / "cache", metrics(root / "results")


def data_only(fresh_cache: Path, cache: Path) -> Path:
    """A cache holding the fresh cache's generated data and nothing computed from it (no models, no releases)."""
    shutil.copytree(fresh_cache / "datasets", cache / "datasets")
    return cache


def test_a_mechanism_writing_into_its_input_is_refused_in_one_line_before_anything_is_written(tmp_path, fresh):
    plugin = tmp_path / "zero_in_place.py"
    plugin.write_text(ZERO_IN_PLACE)
    cache = data_only(fresh[0], tmp_path / "cache")
    code, out, err = run_cell(tmp_path / "results", cache, "--mechanism-file", str(plugin),
                              "--mechanism", "zero_in_place")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "'zero_in_place'" in err and "input_untouched" in err and "modified its input images" in err
    assert not (tmp_path / "results").exists()
    assert sorted(p.name for p in cache.iterdir()) == ["datasets"]
    code, _, err = run_cell(tmp_path / "results", cache, "--mechanism", "identity")
    assert code == 0, err[-3000:]
    assert metrics(tmp_path / "results") == fresh[1]


ZERO_TUNABLE = HEADER.replace("ParamSpace", "Param, ParamSpace") + '''
@register_mechanism("zero_tunable")
class ZeroTunable(Mechanism):
    """Zeroes its input in place; one tunable parameter."""
    params = ParamSpace(block=Param(int, 4, low=1, high=8, tune=(2, 6)))

    def apply(self, images, *, generator, boxes=None):
        images.zero_()
        return images
'''


@pytest.mark.parametrize("command", ["grid", "tune"])
def test_grid_and_tune_refuse_such_a_mechanism_in_one_line_before_anything_is_written(tmp_path, command):
    plugin = tmp_path / "zero_tunable.py"
    plugin.write_text(ZERO_TUNABLE)
    where = ["--mechanism-file", str(plugin), "--results-dir", str(tmp_path / "results"),
             "--cache-dir", str(tmp_path / "cache")]
    if command == "grid":
        suite = tmp_path / "suite.yaml"
        suite.write_text("benchmarks: [fewshot_synth_faces]\nmechanisms:\n  - {name: identity}\n"
                         "  - {name: zero_tunable, grid: {block: [2, 4]}}\nseeds: [0]\nprofile: smoke\nattacks: []\n")
        argv = ["grid", "--suite", str(suite), *where]
    else:
        argv = ["tune", "--mechanism", "zero_tunable", "--task", "fewshot_synth_faces", "--profile", "smoke",
                "--trials", "2", "--storage", f"journal:{tmp_path / 'study.journal'}", "--study", "s",
                "--threads", "1", "--attacks", "face_reid", *where]
    # a process of its own: tune sets torch's threads for its process, which later cells here would inherit
    proc = subprocess.run([sys.executable, "-m", "bench", *argv], cwd=ROOT, capture_output=True, text=True, timeout=600)
    err = proc.stderr
    assert proc.returncode == 2 and len(err.strip().splitlines()) == 1, err
    assert "plugin mechanism 'zero_tunable'" in err and "modified its input images" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["zero_tunable.py", *(["suite.yaml"] * (command == "grid"))])


@pytest.mark.parametrize("kind", sorted(HIDDEN))
def test_a_mechanism_damaging_its_input_outside_the_checks_cannot_change_another_cell(tmp_path, fresh, kind):
    plugin = tmp_path / f"hidden_{kind}.py"
    plugin.write_text(hidden_mechanism(kind))
    cache = data_only(fresh[0], tmp_path / "cache")
    code, _, err = run_cell(tmp_path / "own", cache, "--mechanism-file", str(plugin), "--mechanism", f"hidden_{kind}")
    assert code == 0, err[-3000:]
    code, _, err = run_cell(tmp_path / "results", cache, "--mechanism", "identity")
    assert code == 0, err[-3000:]
    assert metrics(tmp_path / "results") == fresh[1]


# --- the guard and the checks, one call at a time ---------------------------------------------


def test_every_input_of_a_call_is_a_private_copy():
    from bench.core.interfaces import Mechanism, ParamSpace
    from bench.release import guard as mechanism_guard

    class Vandal(Mechanism):
        params = ParamSpace()
        uses_boxes = True

        def apply(self, images, *, generator, boxes=None):
            out = images.clone()
            images.zero_()
            for b in boxes:
                b.zero_()
            generator.seeds.zero_()
            return out

    images = torch.randint(0, 256, (6, 3, 8, 8), dtype=torch.uint8)
    split = images.clone()
    view = split[2:5]
    boxes = [torch.tensor([[1.0, 1.0, 6.0, 6.0]]) for _ in range(3)]
    streams = Streams.for_images(3, "guard", 3)
    seeds = streams.seeds.clone()
    released = mechanism_guard.apply(Vandal(), view, generator=streams, boxes=boxes)
    assert torch.equal(released, images[2:5])
    assert torch.equal(split, images)
    assert all(torch.equal(b, torch.tensor([[1.0, 1.0, 6.0, 6.0]])) for b in boxes)
    assert torch.equal(streams.seeds, seeds)


def test_fit_gets_a_private_copy_of_its_data():
    from bench.core.interfaces import Mechanism, ParamSpace
    from bench.release import guard as mechanism_guard

    class FitVandal(Mechanism):
        params = ParamSpace()

        def fit(self, public, ctx):
            public.images.zero_()
            public.labels.zero_()
            for b in public.boxes:
                b.zero_()

        def apply(self, images, *, generator, boxes=None):
            return images.clone()

    images = torch.randint(1, 256, (4, 3, 8, 8), dtype=torch.uint8)
    data = ImageSet(images.clone(), torch.arange(4), boxes=[torch.ones(1, 4) for _ in range(4)])
    mechanism_guard.fit(FitVandal(), data, ctx=None)
    assert torch.equal(data.images, images) and torch.equal(data.labels, torch.arange(4))
    assert all(torch.equal(b, torch.ones(1, 4)) for b in data.boxes)


def test_a_wrong_output_is_one_line_naming_the_mechanism():
    from bench.core.interfaces import Mechanism, ParamSpace
    from bench.release import guard as mechanism_guard

    class Floats(Mechanism):
        name = "floats"
        params = ParamSpace()

        def apply(self, images, *, generator, boxes=None):
            return images.float()

    images = torch.zeros(2, 3, 4, 4, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="mechanism 'floats' returned .*expected uint8 of shape"):
        mechanism_guard.apply(Floats(), images, generator=Streams.for_images(0, "x", 2))


PREFLIGHT_CASES = {
    "later": ('''
    kept = []

    def apply(self, images, *, generator, boxes=None):
        for earlier in self.kept:
            earlier.zero_()
        self.kept.append(images)
        return images.clone()
''', "a later apply() modified an earlier call's input"),
    "boxes": ('''
    uses_boxes = True

    def apply(self, images, *, generator, boxes=None):
        for b in boxes:
            b.zero_()
        return images.clone()
''', "modified its input boxes"),
    "seeds": ('''
    def apply(self, images, *, generator, boxes=None):
        generator.seeds.zero_()
        return images.clone()
''', "modified its input streams' seeds"),
    "shape": ('''
    def apply(self, images, *, generator, boxes=None):
        return images[:, :, 1:].clone()
''', "shape_device: output shape"),
    "dtype": ('''
    def apply(self, images, *, generator, boxes=None):
        return images.float()
''', "output_uint8: apply() must return a uint8 tensor"),
    "random": ('''
    def apply(self, images, *, generator, boxes=None):
        import torch
        return (images ^ torch.randint(0, 2, images.shape, dtype=torch.uint8)).clone()
''', "determinism"),
}


@pytest.mark.parametrize("kind", sorted(PREFLIGHT_CASES))
def test_the_checks_before_a_plugins_cells_refuse_it_in_one_line(tmp_path, kind):
    body, expected = PREFLIGHT_CASES[kind]
    plugin = tmp_path / f"bad_{kind}.py"
    plugin.write_text(HEADER + f'''
@register_mechanism("bad_{kind}")
class Bad(Mechanism):
    params = ParamSpace()
{textwrap.indent(textwrap.dedent(body).strip(chr(10)), "    ")}
''')
    code, out, err = run_cell(tmp_path / "results", tmp_path / "cache", "--mechanism-file", str(plugin),
                              "--mechanism", f"bad_{kind}")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"plugin mechanism 'bad_{kind}' ({plugin})" in err and expected in err, err
    assert not (tmp_path / "results").exists() and not (tmp_path / "cache").exists()


def test_the_checks_run_once_per_process_per_mechanism_and_parameters_and_never_for_built_ins(monkeypatch):
    import bench.testing.mechanisms as suite
    from bench.cell.preflight import preflight
    from bench.core.interfaces import Mechanism, Param, ParamSpace
    from bench.core.registry import mechanisms
    from bench.release import guard as mechanism_guard

    calls = []
    real = suite.run_preflight
    monkeypatch.setattr(suite, "run_preflight", lambda *a, **k: calls.append(a) or real(*a, **k))
    with scoped():
        @mechanisms.register("once_test")
        class Once(Mechanism):
            params = ParamSpace(shade=Param(int, 0, low=0, high=255))

            def apply(self, images, *, generator, boxes=None):
                return images.clone()

        assert not mechanism_guard.is_builtin(Once)
        assert mechanism_guard.is_builtin(mechanisms.get("identity"))
        for shade in (1, 1, 2, 1):
            preflight("once_test", Once(shade=shade), "cpu")
        preflight("identity", mechanisms.get("identity")(), "cpu")
    assert [c[1] for c in calls] == [{"shade": 1}, {"shade": 2}]


def test_a_plugin_that_raises_on_the_small_batch_is_left_to_its_cell(capsys):
    from bench.cell.preflight import preflight
    from bench.core.interfaces import Mechanism, ParamSpace
    from bench.core.registry import mechanisms

    with scoped():
        @mechanisms.register("raises_test")
        class Raises(Mechanism):
            params = ParamSpace()

            def apply(self, images, *, generator, boxes=None):
                raise RuntimeError("needs bigger images")

        preflight("raises_test", Raises(), "cpu")
    assert "raised in conformance check" in capsys.readouterr().err


def test_the_sample_sheet_clean_row_is_not_the_mechanisms_to_change(tmp_path):
    from bench.cli.mechanisms_cmd import show_mechanism

    plugin = tmp_path / "zero_in_place.py"
    plugin.write_text(ZERO_IN_PLACE)
    from bench.core.registry import load_file

    images = torch.randint(1, 256, (3, 3, 16, 16), dtype=torch.uint8)
    shown = ImageSet(images.clone(), torch.zeros(3, dtype=torch.int64))
    with scoped():
        load_file(plugin)
        show_mechanism("zero_in_place", images=shown, n=3, out=tmp_path / "sheet.png", cache_dir=tmp_path / "c")
    assert torch.equal(shown.images, images)


# --- one lock per cell wherever it is computed ------------------------------------------------

BARRIER = """
import os, sys, time
import bench.cell.plan as cell_plan
import bench.cell.run as cell_run
planned = cell_plan.plan
def plan_then_wait(config):
    out = planned(config)
    folder = {folder!r}
    open(os.path.join(folder, str(os.getpid())), "w").close()
    deadline = time.monotonic() + 300
    while len(os.listdir(folder)) < {count} and time.monotonic() < deadline:
        time.sleep(0.1)
    return out
cell_plan.plan = plan_then_wait
computing = cell_run.run_cell
def slow_cell(*args, **kwargs):
    print("[test] computing", file=sys.stderr, flush=True)
    time.sleep(3)  # every other process has reached the cell's lock by now
    return computing(*args, **kwargs)
cell_run.run_cell = slow_cell
"""


@pytest.mark.slow
def test_four_runs_of_one_cell_with_four_cache_folders_log_one_finished_run(tmp_path, fresh):
    results, barrier = tmp_path / "results", tmp_path / "barrier"
    barrier.mkdir()
    prelude = BARRIER.format(folder=str(barrier), count=4)
    procs = []
    for i in range(4):
        cache = data_only(fresh[0], tmp_path / f"cache{i}")
        argv = ["run", "--mechanism", "identity", *CELL, "--results-dir", str(results), "--cache-dir", str(cache)]
        code = f"{prelude}\nfrom bench.cli import main\nsys.exit(main({argv!r}))\n"
        procs.append(subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=900) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err[-2000:] for _, err in outs]
    assert sum("[test] computing" in err for _, err in outs) == 1
    assert sum("already has a FINISHED run" in err for _, err in outs) == 3
    assert statuses(results) == ["FINISHED"]
    assert metrics(results) == fresh[1]
    assert len(list((results / "locks").glob("*.lock"))) == 1
    assert not any((tmp_path / f"cache{i}" / "locks").exists() for i in range(4))


def test_the_lock_of_a_store_is_the_same_whatever_path_or_uri_names_it(tmp_path):
    from bench.cell.once import cell_locks
    from bench.storage.locks import store_lock_folder

    (tmp_path / "r").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "r")
    default = Tracker(tmp_path / "r")
    explicit = Tracker(tmp_path / "elsewhere", uri=f"sqlite:///{tmp_path / 'link' / 'mlflow.db'}")
    assert cell_locks(default, tmp_path / "c1", "k") == cell_locks(explicit, tmp_path / "c2", "k") == \
        [tmp_path.resolve() / "r" / "locks" / "k.lock"]
    other_db = store_lock_folder(f"sqlite:///{tmp_path / 'r' / 'other.db'}")
    assert other_db == tmp_path.resolve() / "r" / "locks" / "other.db"
    server = store_lock_folder("http://Host.example:5000/")
    assert server == store_lock_folder("http://user@host.example:5000") != store_lock_folder("http://host.example:5001")
    assert store_lock_folder(f"file://{tmp_path}/mlruns") == store_lock_folder(f"{tmp_path}/x/../mlruns")
    remote = SimpleNamespace(uri="http://host.example:5000")  # a server: one lock per machine, then the cache's
    assert cell_locks(remote, tmp_path / "c1", "k") == [tmp_path / "c1" / "locks" / "k.lock", server / "k.lock"]


def test_a_run_of_an_older_version_holding_a_lock_in_its_cache_is_an_orphan_once_that_lock_is_free(tmp_path):
    from bench.cell.once import _orphaned

    tracker = Tracker(tmp_path / "results")
    old_lock = tmp_path / "cache" / "locks" / "k.lock"
    old_lock.parent.mkdir(parents=True)
    old_lock.touch()
    run = tracker.client.create_run(tracker.experiment_id, tags={
        "bench.cell_key": "k", "bench.host": "another-node", "bench.pid": "1", "bench.lock": str(old_lock)})
    held = tmp_path / "results" / "locks" / "k.lock"
    assert _orphaned(tracker.client.get_run(run.info.run_id), held)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, time\n"
        f"f = open({str(old_lock)!r}, 'a'); fcntl.flock(f, fcntl.LOCK_EX)\n"
        "print('held', flush=True); time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert not _orphaned(tracker.client.get_run(run.info.run_id), held)
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_folder_that_is_a_file_is_one_line_before_the_cell_starts(tmp_path, fresh):
    results = tmp_path / "results"
    results.mkdir()
    (results / "locks").write_text("not a folder")
    code, out, err = run_cell(results, data_only(fresh[0], tmp_path / "cache"), "--mechanism", "identity", "-q")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "cannot take the lock" in err, err
    assert statuses(results) == []

