"""``bench tune``: two worker processes share one journal-file study; every trial is a validation cell.

Trials are evaluated on the validation split; once the study is full, its Pareto set is
run on the test split as ordinary cells (by the worker that finishes last).

The fast study tunes a pixelation whose search range holds two block sizes, so that 20
trials compute two cells and reuse them (and both workers contend for the same cells);
the slow one is a real NSGA-II search over pixelate's full range.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli import main

ROOT = Path(__file__).resolve().parents[2]
TASK = "fewshot_synth_faces"


@pytest.fixture(scope="module")
def warm_cache(shared_cache, tmp_path_factory):
    """Trains the smoke baseline and the adversary's clean network once."""
    results = tmp_path_factory.mktemp("warm")
    assert main(["run", "--task", TASK, "--mechanism", "identity", "--profile", "smoke", "-q", "--attacks", "face_reid",
                 "--results-dir", str(results), "--cache-dir", str(shared_cache)]) == 0
    return shared_cache


TINY = """
from bench.core.interfaces import Param, ParamSpace
from bench.core.registry import register_mechanism
from mechanisms.pixelate import Pixelate


@register_mechanism("tiny_pixelate")
class TinyPixelate(Pixelate):
    params = ParamSpace(block=Param(int, 4, low=1, tune=(4, 5)))
"""


def tune_argv(results: Path, cache: Path, journal: Path, trials: int, mechanism: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "bench", "tune", "--mechanism", mechanism, "--task", TASK, "--profile", "smoke",
            "--trials", str(trials), "--storage", f"journal:{journal}", "--study", "shared", "--threads", "1",
            "--attacks", "face_reid",
            "--results-dir", str(results), "--cache-dir", str(cache), *extra]


def run_workers(tmp_path: Path, cache: Path, trials: int, mechanism: str, *extra: str):
    results, journal = tmp_path / "results", tmp_path / "study.journal"
    argv = tune_argv(results, cache, journal, trials, mechanism, *extra)
    procs = [subprocess.Popen([*argv, "--sampler-seed", str(i)], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=1200)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    for worker in done:
        assert worker.returncode == 0, worker.stderr[-3000:]
    return journal, done


def check_study(tmp_path: Path, journal: Path, workers: list[subprocess.CompletedProcess], trials: int) -> None:
    import optuna
    from mlflow.tracking import MlflowClient
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    from optuna.trial import TrialState

    study = optuna.load_study(study_name="shared", storage=JournalStorage(JournalFileBackend(str(journal))))
    counted = [t for t in study.trials if not t.user_attrs.get("bench.over_budget")]
    assert len(counted) == trials
    assert all(t.state == TrialState.COMPLETE for t in counted)
    assert all(sum(line.startswith("[bench] trial ") for line in w.stderr.splitlines()) >= 1 for w in workers), \
        "one worker ran no trial"

    client = MlflowClient(tracking_uri=f"sqlite:///{(tmp_path / 'results' / 'mlflow.db').resolve()}")
    experiment = client.get_experiment_by_name("privbench").experiment_id
    finished = client.search_runs([experiment], filter_string="attributes.status = 'FINISHED'")
    keys = [r.data.tags["bench.cell_key"] for r in finished]
    assert len(keys) == len(set(keys)), "a cell was logged twice"
    by_id = {r.info.run_id: r for r in finished}
    for trial in counted:
        run = by_id[trial.user_attrs["run_id"]]
        assert run.data.tags["bench.eval_split"] == "val", "a trial was evaluated on the test split"
        assert run.data.params["param.block"] == str(trial.params["block"])
        assert trial.values[0] == pytest.approx(run.data.metrics["utility.acc"])
        assert trial.values[1] == pytest.approx(run.data.metrics["privacy_score"])
    pareto = {t.number for t in study.best_trials}
    first_of_setting = {min(t.number for t in study.best_trials if t.params == trial.params) for trial in study.best_trials}
    outputs = [w.stdout for w in workers]
    assert all("Pareto trials (maximising utility and privacy on the validation split):" in out for out in outputs)
    assert f"{trials} complete" in "\n".join(outputs)
    for out in outputs:
        shown = {int(n) for n in re.findall(r"^\s*(\d+)\s+\d\.\d{4}\s+\d\.\d{4}\s+\w{32}\s", out, re.M)}
        assert shown <= {t.number for t in counted} and len(shown) == len(first_of_setting)
    assert all(by_id[study.trials[n].user_attrs["run_id"]].data.tags.get("bench.pareto") == "shared" for n in pareto)

    selected = {str(t.params["block"]) for t in study.best_trials}
    tested = [r for r in finished if r.data.tags["bench.eval_split"] == "test"]
    assert {r.data.params["param.block"] for r in tested} == selected and len(tested) == len(selected)
    assert any(r.data.tags.get("bench.selected_by") == "shared" for r in tested)
    reporting = [out for out in outputs if "Selected configurations run on the test split" in out]
    assert reporting, "no worker ran the selected configurations on test"
    for out in outputs:
        assert out in reporting or "still running in other workers" in out
    rows = reporting[-1].split("Selected configurations run on the test split", 1)[1].splitlines()[2:]
    assert {row.split()[-1] for row in rows if row.strip()} == {f"block={b}" for b in selected}
    assert {row.split()[4] for row in rows if row.strip()} == {r.info.run_id for r in tested}


@pytest.mark.slow
def test_two_workers_finish_a_20_trial_study_of_a_cheap_mechanism(tmp_path, warm_cache):
    plugin = tmp_path / "tiny.py"
    plugin.write_text(TINY)
    journal, workers = run_workers(tmp_path, warm_cache, 20, "tiny_pixelate", "--mechanism-file", str(plugin))
    check_study(tmp_path, journal, workers, trials=20)
    reused = sum("(reused)" in w.stderr for w in workers)
    assert reused >= 1


@pytest.mark.slow
def test_two_workers_finish_a_20_trial_pixelate_study(tmp_path, warm_cache):
    journal, workers = run_workers(tmp_path, warm_cache, 20, "pixelate")
    check_study(tmp_path, journal, workers, trials=20)


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--attacks", "none"], "need at least one attack"),
        (["--param", "block=4"], "no parameter left to tune"),
        (["--storage", "nonsense"], "use an RDB URL"),
        (["--trials", "0"], "--trials must be at least 1"),
    ],
)
def test_tune_user_errors(capsys, tmp_path, extra, fragment):
    code = main(["tune", "--mechanism", "pixelate", "--task", TASK, "--profile", "smoke",
                 "--results-dir", str(tmp_path / "r"), *extra])
    err = capsys.readouterr().err
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_trials_of_dead_workers_are_failed_and_leave_the_budget(tmp_path):
    import socket

    import optuna
    from optuna.trial import TrialState

    from bench.scale.tune_storage import WORKER, counted_trials, fail_dead_trials, open_storage

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    study = optuna.create_study(storage=open_storage(f"journal:{tmp_path / 's.journal'}", tmp_path),
                                directions=["maximize", "maximize"])
    orphan, alive, elsewhere = study.ask(), study.ask(), study.ask()
    orphan.set_user_attr(WORKER, f"{socket.gethostname()}:{dead.pid}")
    alive.set_user_attr(WORKER, f"{socket.gethostname()}:{os.getpid()}")
    elsewhere.set_user_attr(WORKER, f"other-host:{dead.pid}")
    assert counted_trials(study) == 3
    assert fail_dead_trials(study) == 1
    states = {t.number: t.state for t in study.trials}
    assert states == {0: TrialState.FAIL, 1: TrialState.RUNNING, 2: TrialState.RUNNING}
    assert counted_trials(study) == 2


@pytest.mark.slow
def test_a_tune_killed_mid_trial_resumes_to_the_same_completed_study(tmp_path, warm_cache):
    """kill -9 of a worker while its trial computes: the resumed study fails that trial and its MLflow run,
    completes its budget, and computes no cell twice (issue 57)."""
    import signal
    import time

    import optuna
    from mlflow.tracking import MlflowClient
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    from optuna.trial import TrialState

    plugin = tmp_path / "tiny.py"
    plugin.write_text(TINY)
    results, journal = tmp_path / "results", tmp_path / "study.journal"
    argv = tune_argv(results, warm_cache, journal, 2, "tiny_pixelate", "--mechanism-file", str(plugin))
    victim = subprocess.Popen([*argv, "--sampler-seed", "0"], cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)

    def study() -> optuna.Study:
        return optuna.load_study(study_name="shared", storage=JournalStorage(JournalFileBackend(str(journal))))

    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and victim.poll() is None:
        if journal.exists() and any(t.state == TrialState.RUNNING and "cell_key" in t.user_attrs
                                    for t in study().trials):
            break
        time.sleep(0.5)
    assert victim.poll() is None, "the worker finished before it could be killed"
    time.sleep(3)  # into the trial's cell
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    killed = [t.number for t in study().trials if t.state == TrialState.RUNNING]
    assert killed, "the kill left no RUNNING trial to recover"

    resumed = subprocess.run([*argv, "--sampler-seed", "1"], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "left by killed processes marked FAILED" in resumed.stderr
    trials = study().trials
    assert not [t.number for t in trials if t.state == TrialState.RUNNING]
    assert all(trials[n].state == TrialState.FAIL for n in killed)
    counted = [t for t in trials if t.state == TrialState.COMPLETE and not t.user_attrs.get("bench.over_budget")]
    assert len(counted) == 2
    client = MlflowClient(tracking_uri=f"sqlite:///{(results / 'mlflow.db').resolve()}")
    experiment = client.get_experiment_by_name("privbench").experiment_id
    runs = client.search_runs([experiment])
    assert not [r.info.run_id for r in runs if r.info.status == "RUNNING"]
    finished = [r.data.tags["bench.cell_key"] for r in runs if r.info.status == "FINISHED"]
    assert len(finished) == len(set(finished)), "a cell was computed twice"
