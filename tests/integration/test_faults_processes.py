"""Fault injection, processes: no orphan outlives a killed command, and no run stays RUNNING for good.

- ``bench grid --executor processes`` killed with ``kill -9``: its workers and the
  multiprocessing resource tracker are gone 10 s later (the workers ask the kernel to kill
  them with their parent, :mod:`bench.system.pool`), and the runs they leave RUNNING are the orphan
  handling's (:func:`bench.cell.once.sweep_orphans`); killed with SIGTERM, it kills its
  workers and marks their runs FAILED itself.
- ``bench tune`` killed in the middle of a trial: the resumed study marks the trial's run
  FAILED and evaluates no configuration it has already evaluated.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cli import main

ROOT = Path(__file__).resolve().parents[2]
TASK = "fewshot_synth_faces"
LINUX = sys.platform.startswith("linux")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def descendants(root: int) -> set[int]:
    """Every process below ``root`` now (children, their children, ...), from /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            parents[int(entry.name)] = stat[1]
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pids: set[int]) -> set[int]:
    """The processes of ``pids`` that still run (zombies have ended)."""
    return {pid for pid in pids if (stat := _stat(pid)) is not None and stat[0] not in "ZX"}


def statuses(results: Path) -> dict[str, int]:
    """Run status -> count, read with plain sqlite (never blocks on a writer for long)."""
    database = results / "mlflow.db"
    if not database.exists():
        return {}
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=1) as connection:
            return dict(connection.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall())
    except sqlite3.Error:
        return {}


def computing(results: Path) -> int:
    """How many cells are being computed: RUNNING runs that ``start_cell`` made (they name their lock)."""
    try:
        with sqlite3.connect(f"file:{results / 'mlflow.db'}?mode=ro", uri=True, timeout=1) as connection:
            return connection.execute("SELECT count(*) FROM runs JOIN tags ON tags.run_uuid = runs.run_uuid "
                                      "WHERE runs.status = 'RUNNING' AND tags.key = 'bench.lock'").fetchone()[0]
    except sqlite3.Error:
        return 0


def wait_until(condition, timeout: float, what: str, proc: subprocess.Popen | None = None, log: Path | None = None):
    """Polls ``condition`` until it holds; fails after ``timeout`` s, or when ``proc`` ends first (showing ``log``)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the command ended (exit {proc.returncode}) before {what}: "
                                 f"{log.read_text()[-3000:] if log else ''}")
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.2)


def grid_argv(results: Path, cache: Path) -> list[str]:
    """A two-cell grid on two worker processes."""
    return [sys.executable, "-m", "bench", "grid", "--task", TASK, "--mechanism", "pixelate", "--param", "block=4,8",
            "--profile", "smoke", "--attacks", "face_reid", "--executor", "processes", "--workers", "2",
            "--results-dir", str(results), "--cache-dir", str(cache)]


@contextlib.contextmanager
def grid_in_the_middle(tmp_path: Path, cache: Path):
    """Starts a two-worker grid and yields (process, its descendants) once both workers compute a cell."""
    results, log = tmp_path / "results", tmp_path / "grid.log"
    with log.open("w") as out:
        proc = subprocess.Popen(grid_argv(results, cache), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    family: set[int] = set()
    try:
        wait_until(lambda: computing(results) >= 2, 600, "two cells being computed", proc, log)
        family = descendants(proc.pid)
        yield proc, family
    finally:
        for pid in alive(family | descendants(proc.pid) | {proc.pid}):  # whatever a failed test left
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=60)


@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_kill_9_of_a_grid_parent_leaves_no_process_alive_10_s_later(tmp_path, shared_cache):
    from bench.cell.once import sweep_orphans
    from bench.storage.tracking import Tracker

    with grid_in_the_middle(tmp_path, shared_cache) as (proc, family):
        assert len(family) >= 3, f"expected two workers and the resource tracker, found {family}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 10
        while alive(family) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(family), f"alive 10 s after kill -9 of their parent: {sorted(alive(family))}"
    results = tmp_path / "results"
    running = statuses(results).get("RUNNING", 0)
    assert running >= 1, statuses(results)
    assert sweep_orphans(Tracker(results, create=False)) == running  # the runs the killed workers left
    assert "RUNNING" not in statuses(results)


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_sigterm_of_a_grid_parent_kills_its_workers_and_fails_their_runs(tmp_path, shared_cache):
    with grid_in_the_middle(tmp_path, shared_cache) as (proc, family):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while alive(family) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(family), sorted(alive(family))
    results = tmp_path / "results"
    text = (tmp_path / "grid.log").read_text()
    said = re.search(r"grid terminated by a signal: 2 worker process\(es\) killed; (\d) run\(s\) they left marked "
                     "FAILED", text)
    assert said, text[-3000:]
    assert "Traceback" not in text
    assert statuses(results).get("FAILED") == int(said.group(1)) >= 1 and "RUNNING" not in statuses(results)


DIE_WITH_PARENT = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import os, time; from bench.system.pool import die_with_parent; die_with_parent(os.getppid()); time.sleep(600)"])
print(child.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_a_worker_dies_with_its_parent_or_at_once_when_its_parent_is_already_gone():
    parent = subprocess.Popen([sys.executable, "-c", DIE_WITH_PARENT], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        time.sleep(2)  # the child has made its request
        assert alive({child})
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while alive({child}) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive({child})
    late = subprocess.run([sys.executable, "-c", "from bench.system.pool import die_with_parent; die_with_parent(1)"],
                          cwd=ROOT, timeout=60)
    assert late.returncode == 1  # its parent is not pid 1: the one it expects is gone


STALL_ONCE_RUNNING = """
import os, sys, time
import bench.storage.tracking as tracking
real = tracking.Tracker.start_cell
def start_and_stall(self, *args, **kwargs):
    run_id = real(self, *args, **kwargs)
    if os.path.exists(os.environ["BENCH_TEST_STALL"]):
        print("[test] stalled with a RUNNING run", file=sys.stderr, flush=True)
        time.sleep(600)
    return run_id
tracking.Tracker.start_cell = start_and_stall
"""


def tune_argv(tmp_path: Path, cache: Path, trials: int) -> list[str]:
    """A seeded pixelate study in a journal under ``tmp_path``."""
    return ["tune", "--mechanism", "pixelate", "--task", TASK, "--profile", "smoke", "--trials", str(trials),
            "--storage", f"journal:{tmp_path / 'study.journal'}", "--study", "s", "--sampler-seed", "0",
            "--attacks", "face_reid", "--results-dir", str(tmp_path / "results"), "--cache-dir", str(cache)]


@pytest.mark.slow
def test_a_tune_killed_mid_trial_resumes_without_running_runs_or_repeated_configurations(tmp_path, shared_cache):
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    from optuna.trial import TrialState

    gate = tmp_path / "stall"
    argv = tune_argv(tmp_path, shared_cache, trials=2)
    code = f"{STALL_ONCE_RUNNING}\nfrom bench.cli import main\nsys.exit(main({argv!r}))\n"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "BENCH_TEST_STALL": str(gate)}
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if line.startswith("[bench] trial 0:"):
                gate.touch()  # the next trial stalls once its run is RUNNING
            if line.startswith("[test] stalled"):
                break
        else:
            raise AssertionError(f"the study ended before its second trial (exit {proc.wait()}): {''.join(seen)}")
    finally:
        proc.kill()
        proc.wait(timeout=60)
    results = tmp_path / "results"
    assert statuses(results) == {"FINISHED": 1, "RUNNING": 1}

    gate.unlink()
    assert main(argv) == 0
    assert "RUNNING" not in statuses(results), statuses(results)
    journal = JournalStorage(JournalFileBackend(str(tmp_path / "study.journal")))
    study = optuna.load_study(study_name="s", storage=journal)
    killed = study.trials[1]
    assert killed.state == TrialState.FAIL and "error" not in killed.user_attrs  # failed, and not counted
    counted = [t for t in study.trials if t.state == TrialState.COMPLETE and not t.user_attrs.get("bench.over_budget")]
    assert len(counted) == 2
    configurations = [tuple(sorted(t.params.items())) for t in counted]
    assert len(set(configurations)) == len(configurations), f"a configuration was evaluated twice: {configurations}"
    assert not any(t.user_attrs.get("reused") for t in counted), "a trial reused an earlier trial's cell"


# --- the study's bookkeeping, with the cells' computation stood in for ---------------------


TINY = """
from bench.core.interfaces import Param, ParamSpace
from bench.core.registry import register_mechanism
from mechanisms.pixelate import Pixelate


@register_mechanism("two_block_pixelate")
class TwoBlockPixelate(Pixelate):
    params = ParamSpace(block=Param(int, 4, low=1, tune=(4, 5)))
"""


@pytest.fixture
def stand_in_cells(monkeypatch):
    """Replaces the computation of a trial's cell by a pure function of its key; records the keys asked for."""
    import hashlib
    from types import SimpleNamespace

    import bench.scale.executors
    from bench.scale.grid import CellOutcome

    asked: list[str] = []

    def execute_cell(cell, plugin_files=(), log=None, progress=None):
        asked.append(cell.key)
        digest = hashlib.sha256(cell.key.encode()).digest()
        result = SimpleNamespace(utility_value=digest[0] / 255, privacy_score=digest[1] / 255)
        return CellOutcome(cell.key, cell.label, "skipped", None, result=result)

    monkeypatch.setattr(bench.scale.executors, "execute_cell", execute_cell)
    return asked


def _study_config(tmp_path: Path, mechanism: str, trials: int, plugins=()):
    from bench.cell.plan import RunConfig
    from bench.scale.tune import TuneConfig

    base = RunConfig(task=TASK, mechanism=mechanism, profile="smoke", device="cpu", results_dir=tmp_path / "results",
                     cache_dir=tmp_path / "cache", attacks=("face_reid",))
    return TuneConfig(base=base, trials=trials, storage=f"journal:{tmp_path / 'study.journal'}", study_name="s",
                      sampler_seed=0, plugin_files=tuple(plugins))


def test_a_resumed_seeded_study_draws_new_configurations(tmp_path, stand_in_cells):
    from bench.scale.tune import tune

    first = tune(_study_config(tmp_path, "pixelate", 4))
    assert len(stand_in_cells) == 4
    second = tune(_study_config(tmp_path, "pixelate", 8))  # same seed, same study: resumed
    assert len(stand_in_cells) == 8 and len(set(stand_in_cells)) == 8, stand_in_cells
    assert first.study_name == second.study_name
    counted = [t for t in second.trials if not t.user_attrs.get("bench.over_budget")]
    assert len(counted) == 8 and not any("bench.repeat_of" in t.user_attrs for t in counted)


def test_a_space_with_no_configuration_left_repeats_one_and_says_so(tmp_path, stand_in_cells, capsys):
    from optuna.trial import TrialState

    from bench.core.registry import scoped
    from bench.scale.tune import tune

    plugin = tmp_path / "two.py"
    plugin.write_text(TINY)
    with scoped():
        study = tune(_study_config(tmp_path, "two_block_pixelate", 5, [plugin]))
    counted = [t for t in study.trials if not t.user_attrs.get("bench.over_budget")]
    assert len(counted) == 5 and all(t.state == TrialState.COMPLETE for t in counted)
    firsts = [t for t in counted if "bench.repeat_of" not in t.user_attrs]
    assert sorted(t.params["block"] for t in firsts) == [4, 5]  # each configuration evaluated before any repeat
    repeats = [t for t in counted if "bench.repeat_of" in t.user_attrs]
    assert len(repeats) == 3 and all(t.number > max(f.number for f in firsts) for t in repeats)
    redrawn = [t for t in study.trials if t.user_attrs.get("bench.over_budget")]
    assert all(t.state == TrialState.PRUNED and "bench.repeat_of" in t.user_attrs for t in redrawn)
    assert capsys.readouterr().err.count("the search space has no other): its result is reused") == 3
