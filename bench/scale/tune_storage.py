"""Where a tuning study lives (its Optuna storage) and which of its trials use the budget, over all workers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.errors import BenchError

if TYPE_CHECKING:
    import optuna

OVER_BUDGET = "bench.over_budget"
"""Trial attribute: the trial does not use the budget (the study was full when it started, or it was redrawn)."""
REPEAT_OF = "bench.repeat_of"
"""Trial attribute: the earlier trial whose configuration (cell) this one proposed again."""
WORKER = "bench.worker"
CELL_KEY = "cell_key"
"""Trial attribute: the key of the cell a trial evaluates (set before the cell is computed)."""

RDB_URLS = "sqlite:///F.db, postgresql://..., mysql://..."
SUPPORTED = f"use an RDB URL ({RDB_URLS}, with the database's Python driver installed) or journal:PATH"
JOURNAL_LINE_LIMIT = 1 << 16
"""Bytes of a journal's first line read to tell an Optuna journal from another file."""


def storage_text(url: str | None, results_dir: Path) -> str:
    """Returns where a study lives, for the user: the journal file, or the RDB URL (its password hidden)."""
    path = journal_path(url, results_dir)
    return f"journal {path}" if path is not None else _shown(url)


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
    raise BenchError(f"--storage {url!r}: {SUPPORTED}")


def check_storage(url: str | None, results_dir: Path) -> Path | None:
    """Checks a storage without opening or writing it; returns its journal file (None for an RDB URL).

    Raises:
        BenchError: Neither an RDB URL nor a journal; an RDB URL whose scheme SQLAlchemy
            does not know or whose Python driver is not installed; an in-memory SQLite
            database (``sqlite://``; its tables exist for one connection); a journal that is a
            folder or a file other than an Optuna journal.
    """
    path = journal_path(url, results_dir)
    if path is None:
        _check_rdb_url(url)
    else:
        _check_journal(path)
    return path


def _shown(url: str) -> str:
    """Returns an RDB URL as it may be printed: with its password hidden."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def _check_rdb_url(url: str) -> None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
        dialect = parsed.get_dialect()
    except ArgumentError:
        scheme = url.partition("://")[0]
        raise BenchError(f"--storage {_shown(url)!r}: unsupported scheme {scheme!r}; {SUPPORTED}") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise BenchError(f"--storage {_shown(url)!r}: an in-memory SQLite database is private to one connection, "
                         "so the trials' heartbeat and any other worker cannot see the study; use a file: "
                         "sqlite:///F.db")
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        raise BenchError(f"--storage {_shown(url)!r}: the Python driver of {parsed.drivername} "
                         f"({exc.name or 'its DB-API module'}) is not installed; install it, or use "
                         "journal:PATH or sqlite:///F.db") from None


def _check_journal(path: Path) -> None:
    if path.is_dir():
        raise BenchError(f"the study's journal {path} is a folder: name a file, e.g. --storage "
                         f"journal:{path / 'optuna.journal'}")
    if not path.exists():
        return
    if not path.is_file():
        raise BenchError(f"the study's journal {path} is not a regular file: name another with --storage journal:PATH")
    try:
        with path.open("rb") as f:
            first = f.readline(JOURNAL_LINE_LIMIT)
    except OSError as exc:
        raise BenchError(f"cannot read the study's journal {path}: {exc.strerror or exc}") from None
    if first and not _journal_record(first):
        raise BenchError(f"{path} is not an Optuna journal (its first line is no journal record): name a new "
                         "file or an existing journal with --storage journal:PATH")


def _journal_record(line: bytes) -> bool:
    """Whether a line is a whole journal record: a JSON object with an ``op_code``."""
    import json

    try:
        record = json.loads(line)
    except ValueError:
        return False
    return line.endswith(b"\n") and isinstance(record, dict) and "op_code" in record


def open_storage(url: str | None, results_dir: Path) -> Any:
    """Returns the Optuna storage for a URL (journal file by default), checked by :func:`check_storage` first.

    Raises:
        BenchError: The storage fails :func:`check_storage`, the database cannot be
            opened, the journal's folder cannot be created or the journal cannot be read.
    """
    path = check_storage(url, results_dir)
    return _open_rdb(url) if path is None else _open_journal(path)


def _open_rdb(url: str) -> Any:
    from optuna.storages import RDBStorage
    from sqlalchemy.exc import SQLAlchemyError

    try:
        return RDBStorage(url, heartbeat_interval=60, grace_period=180)
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        raise BenchError(f"--storage {_shown(url)!r}: cannot open the database ({reason}); {SUPPORTED}") from None


def _open_journal(path: Path) -> Any:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BenchError(f"cannot create the folder of the journal {path}: {exc}") from None
    try:
        return JournalStorage(JournalFileBackend(str(path)))  # replays the journal; writes only an empty new one
    except OSError as exc:
        raise BenchError(f"cannot open the study's journal {path}: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise BenchError(f"{path} is not a readable Optuna journal ({type(exc).__name__}: {exc}): name a new "
                         "file or an existing journal with --storage journal:PATH") from None


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
    from optuna.trial import TrialState

    count = 0
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if _dead_here(trial):
            study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
            count += 1
    return count


def resumed_seed(seed: int | None, trials: int) -> int | None:
    """Returns the sampler seed of a worker that joins a study already holding ``trials`` trials.

    A sampler seeded as before would draw the earlier trials' parameters again; the seed is
    therefore derived from the given one and the study's size (the same study state and
    seed give the same draws). A new study, or no seed, keeps the seed as given.
    """
    if seed is None or trials == 0:
        return seed
    import numpy as np

    return int(np.random.SeedSequence([seed, trials]).generate_state(1)[0])


def evaluated_trial(study: "optuna.Study", cell_key: str, number: int) -> int | None:
    """Returns another trial that evaluated this cell or is evaluating it, or None.

    It evaluated it when it is COMPLETE, or FAIL with its cell's error (a counted failure:
    the cell would fail again); it is evaluating it while it is RUNNING in a live worker
    (one on this machine whose process is gone is not, see :func:`fail_dead_trials`).
    """
    from optuna.trial import TrialState

    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL, TrialState.RUNNING)):
        if trial.number == number or trial.user_attrs.get(CELL_KEY) != cell_key:
            continue
        if trial.state == TrialState.FAIL and "error" not in trial.user_attrs:
            continue  # killed with its worker: never evaluated
        if trial.state != TrialState.RUNNING or not _dead_here(trial):
            return trial.number
    return None


def space_exhausted(study: "optuna.Study", space: dict[str, Any]) -> bool:
    """Whether the study's COMPLETE trials hold every configuration of its search space (never with a float)."""
    from optuna.distributions import CategoricalDistribution, IntDistribution
    from optuna.trial import TrialState

    size = 1
    for dist in space.values():
        if isinstance(dist, CategoricalDistribution):
            size *= len(dist.choices)
        elif isinstance(dist, IntDistribution):
            size *= (dist.high - dist.low) // dist.step + 1
        else:
            return False
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return len({tuple(sorted(t.params.items())) for t in trials}) >= size


def _dead_here(trial: Any) -> bool:
    """Whether a trial's worker ran on this machine and its process is gone."""
    import os
    import socket

    host, _, pid = str(trial.user_attrs.get(WORKER, "")).rpartition(":")
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
