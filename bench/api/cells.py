"""Cells from Python: run one as ``bench run`` does, and read results, runs, groups and boards as DataFrames."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from bench.api.settings import DEFAULT_PROFILE, sections
from bench.core.result import Result as _Result
from bench.errors import BenchError
from leaderboard.frames import results_frame

if TYPE_CHECKING:
    import pandas as pd

    from bench.core.interfaces import Result

__all__ = ["RunResult", "group_results", "leaderboard", "results", "run", "runs"]

PathLike = str | os.PathLike


@dataclass(frozen=True)
class RunResult(_Result):
    """A cell's :class:`~bench.core.interfaces.Result` with ``run_id``, the MLflow run that holds it."""

    run_id: str = ""


def run(
    mechanism: str,
    task: str,
    params: Mapping[str, Any] | None = None,
    seed: int = 0,
    profile: str = DEFAULT_PROFILE,
    *,
    settings: Mapping[str, Any] | None = None,
    attacks: Sequence[str] | None = None,
    device: str = "auto",
    precision: str = "fp32",
    data_root: PathLike | None = None,
    results_dir: PathLike = "results",
    cache_dir: PathLike | None = None,
    tracking_uri: str | None = None,
    force: bool = False,
    log: Callable[[str], None] | None = None,
    allow_long: bool = False,
) -> "Result":
    """Computes one cell (or reuses its FINISHED run), logs it to MLflow and returns its result.

    Args:
        mechanism: Registered mechanism name.
        task: Registered benchmark (task) name.
        params: Mechanism parameters (Python values or strings).
        seed: Base seed.
        profile: ``smoke`` (default: minutes on a CPU, to check a set-up; numbers not
            comparable), ``quick`` (the command line's default) or ``paper``.
        settings: Overrides as ``bench run --set`` takes them, either dotted
            (``{"task.epochs": 3, "task.training.epsilon": 8}``) or by section
            (``{"task": {"epochs": 3}, "face_reid": {"epochs": 2}}``).
        attacks: Adversaries (None: the benchmark's own; ``[]``: none).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        precision: ``fp32``, or ``bf16`` mixed precision for the task's networks (:mod:`bench.system.precision`).
        data_root: Root of real datasets (default ``$BENCH_DATA``).
        results_dir: MLflow database and artifacts.
        cache_dir: Releases and trained models (default ``results_dir/cache``).
        tracking_uri: MLflow tracking URI (default: sqlite in ``results_dir``).
        force: Compute again even when the cell has a FINISHED run (the earlier run is
            marked superseded).
        log: Progress lines (default: none).
        allow_long: Compute settings estimated beyond 24 h (``--allow-long``; :mod:`bench.cell.estimate`).

    Returns:
        The cell's result with ``run_id``, its MLflow run (``result.to_dict()`` is the row
        :func:`results` gives).

    Raises:
        BenchError: An unknown name, an invalid parameter or setting, missing data or an
            unusable tracking store, before anything is computed or written.
    """
    from bench.cell.plan import RunConfig, plan
    from bench.cell.run import execute
    from bench.storage.tracking import Tracker

    root = Path(data_root) if data_root is not None else (Path(os.environ["BENCH_DATA"]) if os.environ.get("BENCH_DATA") else None)
    config = RunConfig(
        task=task, mechanism=mechanism, params=dict(params or {}), seed=seed, profile=profile, device=device,
        data_root=root, results_dir=Path(results_dir), cache_dir=Path(cache_dir) if cache_dir is not None else None,
        attacks=None if attacks is None else tuple(attacks), overrides=sections(settings), tracking_uri=tracking_uri,
        precision=precision, allow_long=allow_long,
    )
    planned = plan(config)
    tracker = Tracker(config.results_dir, tracking_uri)
    outcome = execute(planned, tracker, force=force, log=log or (lambda message: None))
    return RunResult(**{f.name: getattr(outcome.result, f.name) for f in fields(_Result)}, run_id=outcome.run_id)


def results(source: PathLike | str = "results", **filters: Any) -> "pd.DataFrame":
    """Returns one row per FINISHED cell: identity, every metric, parameter, claim and tag as columns.

    Columns: ``run_id``, ``cell_key``, ``task``, ``dataset``, ``mechanism``, ``seed``,
    ``profile``, ``eval_split``, ``synthetic``, ``schema``, ``params`` (dict) and one
    ``param.<name>`` column each, ``utility.<metric>``, ``attack.<attack>.<metric>``,
    ``privacy.<attack>``, ``privacy_score``, ``claim.*`` and ``training_claim.*``
    (epsilon, delta, unit, backed, method), ``privacy_flags``, ``skipped_attacks`` (adversary
    -> why it did not run, as JSON), ``runtime_s`` and ``runtime.<stage>``, ``device``,
    ``precision`` (fp32 or bf16), ``git_sha``, ``created`` and ``settings`` (the ``--set``
    overrides as JSON).
    Superseded runs and results of an older schema are left out.

    Args:
        source: A results directory (its ``mlflow.db``) or an MLflow tracking URI.
        **filters: Column -> wanted value (or a list/tuple/set of values), e.g.
            ``mechanism="dp_pix"``, ``seed=[0, 1]``.

    Raises:
        BenchError: No tracking store there, or a filter on a column that does not exist.
    """
    import pandas as pd

    from leaderboard.store import runs_frame

    frame = results_frame(runs_frame(_open(source)))
    for column, wanted in filters.items():
        if column not in frame.columns:
            raise BenchError(f"bench.results: no column {column!r} to filter on (columns: {', '.join(frame.columns[:12])}, ...)")
        values = wanted if isinstance(wanted, (list, tuple, set, frozenset)) else [wanted]
        frame = frame[frame[column].isin(list(values))]
    return frame.reset_index(drop=True) if len(frame) else pd.DataFrame(columns=frame.columns)


def group_results(source: PathLike | str = "results", **filters: Any) -> "pd.DataFrame":
    """Returns results by demographic group: one row per cell, source, attribute and group.

    Columns: the cell's ``run_id``, ``cell_key``, ``task``, ``mechanism``, ``params``,
    ``seed``, ``profile``; ``source`` (``utility`` or the attack, ``attack.part`` for an
    attack's part), ``attribute``, ``group``, ``n``, ``metric``, ``value``, ``ci95``,
    ``clean`` and ``chance`` (attacks), ``privacy`` and ``flag`` (``group too small``:
    no number; ``attack too weak``: no privacy score).

    Args:
        source: A results directory or an MLflow tracking URI.
        **filters: As :func:`results` (on the cell columns).
    """
    import pandas as pd

    from bench.storage.tracking.tables import GROUP_COLUMNS, group_rows

    cells = results(source, **filters)
    keys = ["run_id", "cell_key", "task", "mechanism", "params", "seed", "profile"]
    rows = [{**{k: cell[k] for k in keys}, **row} for _, cell in cells.iterrows() for row in group_rows(cell["groups"])]
    return pd.DataFrame(rows, columns=keys + GROUP_COLUMNS)


def runs(source: PathLike | str = "results", *, benchmark: str | None = None, mechanism: str | None = None,
         status: str | None = None, since: str | None = None) -> "pd.DataFrame":
    """Returns the runs ``bench runs`` lists, newest first: every status, superseded ones included.

    Columns: ``run_id``, ``status`` (``SUPERSEDED`` for a FINISHED run a re-run replaced),
    ``started``, ``name``, ``benchmark``, ``mechanism``, ``seed``, ``profile``, ``utility``,
    ``privacy_score``, ``runtime_s``, ``cell_key`` and ``error``.

    Args:
        source: A results directory or an MLflow tracking URI.
        benchmark: Only this benchmark's runs.
        mechanism: Only this mechanism's runs.
        status: ``running``, ``finished``, ``failed`` or ``killed``.
        since: Started since ``30m``, ``12h``, ``3d``, ``2w`` ago, or an ISO date/time.

    Raises:
        BenchError: No tracking store there, an unknown status or an unreadable ``since``.
    """
    import pandas as pd

    from bench.cli.runs_cmd import STATUSES
    from bench.storage.tracking.lookup import filter_string, parse_since, run_row, search

    if status is not None and status.lower() not in STATUSES:
        raise BenchError(f"bench.runs: status {status!r} is not one of {', '.join(STATUSES)}")
    since_ms = parse_since(since) if since is not None else None
    tracker = _open(source)
    rows = [run_row(r) for r in search(tracker, filter_string(benchmark, mechanism, status, since_ms))]
    columns = ["run_id", "status", "started", "name", "benchmark", "mechanism", "seed", "profile", "utility",
               "privacy_score", "runtime_s", "cell_key", "error"]
    return pd.DataFrame(rows, columns=columns)


def _open(source: PathLike | str) -> Any:
    """Opens a results directory's store, or a tracking URI's, for reading."""
    from bench.storage.tracking import Tracker

    text = str(source)
    return Tracker(Path("results"), text, create=False) if "://" in text else Tracker(Path(text), create=False)


def leaderboard(
    results_dir: PathLike = "results",
    *,
    suites: Sequence[str] | None = None,
    entries: PathLike | None = None,
    profile: str | None = None,
    tracking_uri: str | None = None,
) -> "pd.DataFrame":
    """Returns the leaderboard as ``bench leaderboard show`` ranks it: one row per entry per board.

    Args:
        results_dir: Where the local runs are.
        suites: Suites whose local cells form declared entries (default: every shipped suite).
        entries: Folder of entry files, read alone; None (the default) reads ./leaderboard/entries of the
            current folder (or $BENCH_ENTRIES) with the package's shipped baselines beside it.
        profile: Only cells of this profile.
        tracking_uri: MLflow tracking URI overriding the results directory's database.

    Raises:
        BenchError: No results at all, or a malformed entry or named suite.
    """
    import argparse
    import contextlib
    import io

    from bench.cli.leaderboard_cmd import collect
    from leaderboard.table import leaderboard_table

    args = argparse.Namespace(suite=list(suites) if suites else None, data_root=None, results_dir=Path(results_dir),
                              tracking_uri=tracking_uri, no_entries=False,
                              entries=Path(entries) if entries is not None else None, profile=profile)
    with contextlib.redirect_stderr(io.StringIO()):
        board, _, _ = collect(args)
    return leaderboard_table(board)
