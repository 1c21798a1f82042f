"""Where a tuning study lives (its Optuna storage) and which of its trials use the budget, over all workers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.errors import BenchError

if TYPE_CHECKING:
    import optuna

OVER_BUDGET = "bench.over_budget"
WORKER = "bench.worker"


def storage_text(url: str | None, results_dir: Path) -> str:
    """Returns where a study lives, for the user: the journal file, or the RDB URL."""
    path = journal_path(url, results_dir)
    return f"journal {path}" if path is not None else str(url)


def journal_path(url: str | None, results_dir: Path) -> Path | None:
    """Returns the journal file a storage URL names, or None for an RDB URL; writes nothing.

    Raises:
        BenchError: Neither an RDB URL nor a journal.
    """
    if url and "://" in url and not url.startswith("journal:"):
        return None
    if url is None:
        return Path(results_dir) / "optuna.journal"
    if url.startswith("journal:"):
        return Path(url[len("journal:"):].removeprefix("//"))
    if url.endswith((".journal", ".log")):
        return Path(url)
    raise BenchError(f"--storage {url!r}: use an RDB URL (sqlite:///f.db, postgresql://...) or journal:PATH")


def open_storage(url: str | None, results_dir: Path) -> Any:
    """Returns the Optuna storage for a URL (journal file by default).

    Raises:
        BenchError: A URL that is neither, or the journal file's folder cannot be created.
    """
    path = journal_path(url, results_dir)
    if path is None:
        from optuna.storages import RDBStorage

        return RDBStorage(url, heartbeat_interval=60, grace_period=180)
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BenchError(f"cannot create the folder of the journal {path}: {exc}") from None
    return JournalStorage(JournalFileBackend(str(path)))


def still_running(study: "optuna.Study") -> int:
    """Returns how many counted trials of the study are still running (in other workers)."""
    from optuna.trial import TrialState

    return sum(1 for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)) if uses_budget(t))


def uses_budget(trial: Any) -> bool:
    """Whether a trial uses the budget: not over it, and not a FAIL left by a dead worker."""
    from optuna.trial import TrialState

    if trial.user_attrs.get(OVER_BUDGET):
        return False
    return not (trial.state == TrialState.FAIL and "error" not in trial.user_attrs)


def counted_trials(study: "optuna.Study") -> int:
    """Returns how many of the study's trials use the budget (:func:`uses_budget`)."""
    return sum(map(uses_budget, study.get_trials(deepcopy=False)))


def worker_id() -> str:
    """Returns this process's worker name, ``host:pid`` (recorded on its trials)."""
    import os
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


def fail_dead_trials(study: "optuna.Study") -> int:
    """Marks FAIL the RUNNING trials of workers on this machine that no longer exist; returns how many.

    Their trials then no longer use the budget. (RDB storages also fail the stale trials of
    other machines, by heartbeat.)
    """
    import os
    import socket

    from optuna.trial import TrialState

    host, count = socket.gethostname(), 0
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker_host, _, pid = str(trial.user_attrs.get(WORKER, "")).rpartition(":")
        if worker_host != host or not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
            count += 1
        except PermissionError:
            continue
    return count
