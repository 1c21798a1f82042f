"""The Python API: run cells and sweeps, read results as DataFrames, use a mechanism on one's own images.

For notebooks and scripts, as lm-evaluation-harness's ``simple_evaluate`` and timm's
``create_model``::

    import bench

    mech = bench.load_mechanism("dp_pix", epsilon=3, block=4)
    private = mech.apply(images, seed=0)                     # a user's uint8 [N, C, H, W] tensor
    result = bench.run("dp_pix", "fewshot_synth_faces", {"epsilon": 3, "block": 4}, seed=0, profile="quick")
    result.run_id                                             # its MLflow run
    table = bench.grid("fewshot_synth_faces", "dp_pix", {"epsilon": [1, 3], "block": 4}, seeds=[0, 1])
    table = bench.results("results", mechanism="dp_pix")     # one row per cell, every metric a column
    groups = bench.group_results("results")                  # one row per cell, attack and demographic group
    board = bench.leaderboard("results")                      # the boards' standings

The default profile of ``run``, ``grid`` and ``tune`` is ``smoke``: the cheapest cell
(minutes on a CPU) that checks a set-up end to end, whose numbers are not comparable;
pass ``profile="quick"`` (the command line's default) or ``"paper"`` for results.
``bench.run`` takes the same single path as ``bench run`` (validation first, the cell lock,
a FINISHED cell reused, MLflow logging) and returns the :class:`~bench.interfaces.Result`
with its ``run_id``; errors a user can cause raise :class:`~bench.errors.BenchError`
before any work. Importing ``bench`` starts nothing: no thread, no environment change.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from dataclasses import dataclass, fields

from bench import precision
from bench.api_sweeps import DEFAULT_PROFILE, TuneResult, cli_text, grid, tune
from bench.errors import BenchError
from bench.mechanism_handle import MechanismHandle, list_mechanisms, load_mechanism
from bench.result import Result as _Result

if TYPE_CHECKING:
    import pandas as pd

    from bench.interfaces import Result

__all__ = ["MechanismHandle", "RunResult", "TuneResult", "grid", "group_results", "leaderboard", "list_mechanisms",
           "load_mechanism", "results", "run", "runs", "tune"]

PathLike = str | os.PathLike


@dataclass(frozen=True)
class RunResult(_Result):
    """A cell's :class:`~bench.interfaces.Result` with ``run_id``, the MLflow run that holds it."""

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
        precision: ``fp32``, or ``bf16`` mixed precision for the task's networks (:mod:`bench.precision`).
        data_root: Root of real datasets (default ``$BENCH_DATA``).
        results_dir: MLflow database and artifacts.
        cache_dir: Releases and trained models (default ``results_dir/cache``).
        tracking_uri: MLflow tracking URI (default: sqlite in ``results_dir``).
        force: Compute again even when the cell has a FINISHED run (the earlier run is
            marked superseded).
        log: Progress lines (default: none).

    Returns:
        The cell's result with ``run_id``, its MLflow run (``result.to_dict()`` is the row
        :func:`results` gives).

    Raises:
        BenchError: An unknown name, an invalid parameter or setting, missing data or an
            unusable tracking store, before anything is computed or written.
    """
    from bench.cellrun import execute
    from bench.runner import RunConfig, plan
    from bench.tracking import Tracker

    root = Path(data_root) if data_root is not None else (Path(os.environ["BENCH_DATA"]) if os.environ.get("BENCH_DATA") else None)
    config = RunConfig(
        task=task, mechanism=mechanism, params=dict(params or {}), seed=seed, profile=profile, device=device,
        data_root=root, results_dir=Path(results_dir), cache_dir=Path(cache_dir) if cache_dir is not None else None,
        attacks=None if attacks is None else tuple(attacks), overrides=sections(settings), tracking_uri=tracking_uri,
        precision=precision,
    )
    planned = plan(config)
    tracker = Tracker(config.results_dir, tracking_uri)
    outcome = execute(planned, tracker, force=force, log=log or (lambda message: None))
    return RunResult(**{f.name: getattr(outcome.result, f.name) for f in fields(_Result)}, run_id=outcome.run_id)


def sections(settings: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Returns overrides by section from dotted (``task.epochs``) or nested (``{"task": {...}}``) settings.

    Values are spelled as ``--set`` spells them (:func:`bench.api_sweeps.cli_text`), so a
    cell run from Python is the cell the command line runs.

    Raises:
        BenchError: A dotted key without a section, or a section that is not a mapping.
    """
    out: dict[str, dict[str, Any]] = {}
    for key, value in dict(settings or {}).items():
        section, dot, name = str(key).partition(".")
        if dot and name:
            out.setdefault(section, {})[name] = cli_text(value)
        elif isinstance(value, Mapping):
            out.setdefault(section, {}).update({str(k): cli_text(v) for k, v in value.items()})
        else:
            raise BenchError(f"settings: {key!r} needs a section, e.g. 'task.{key}' (or {{'task': {{...}}}})")
    return out


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


def results_frame(rows: "pd.DataFrame") -> "pd.DataFrame":
    """Flattens :func:`leaderboard.store.runs_frame` rows (Result dicts) into one column per number."""
    import pandas as pd

    flat = []
    for _, row in rows.iterrows():
        out: dict[str, Any] = {k: row.get(k) for k in (
            "run_id", "cell_key", "task", "dataset", "mechanism", "mechanism_version", "seed", "profile", "eval_split",
            "synthetic", "schema", "runtime_s", "device", "git_sha", "created", "primary_metric", "dataset_fingerprint")}
        params = dict(row.get("params") or {})
        out["params"] = params
        out.update({f"param.{k}": v for k, v in params.items()})
        out["precision"] = precision.recorded(row.get("versions"))
        out.update({f"runtime.{k}": v for k, v in dict(row.get("stage_seconds") or {}).items()})
        out.update({f"utility.{k}": v for k, v in dict(row.get("utility") or {}).items()})
        for attack, metrics in dict(row.get("attacks") or {}).items():
            out.update({f"attack.{attack}.{k}": v for k, v in dict(metrics).items()})
        out.update({f"privacy.{k}": _number(v) for k, v in dict(row.get("privacy") or {}).items()})
        out["privacy_score"] = _number(row.get("privacy_score"))
        for name in ("claim", "training_claim"):
            claim = row.get(name) if isinstance(row.get(name), dict) else {}
            for field in ("epsilon", "delta", "unit", "backed", "method", "note"):
                out[f"{name}.{field}"] = claim.get(field) if claim else None
        worst = dict(row.get("groups") or {}).get("worst_privacy") or {}
        out["group.worst_privacy"] = _number(worst.get("privacy"))
        out["group.worst"] = worst.get("group")
        out["privacy_flags"] = json.dumps(row.get("privacy_flags") or {}, sort_keys=True)
        out["skipped_attacks"] = json.dumps(row.get("skipped_attacks") or {}, sort_keys=True)
        out["settings"] = json.dumps(row.get("overrides") or {}, sort_keys=True, default=str)
        out["groups"] = dict(row.get("groups") or {})
        flat.append(out)
    return pd.DataFrame(flat)


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

    from bench.tracking.tables import GROUP_COLUMNS, group_rows

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
    from bench.tracking.lookup import filter_string, parse_since, run_row, search

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
    from bench.tracking import Tracker

    text = str(source)
    return Tracker(Path("results"), text, create=False) if "://" in text else Tracker(Path(text), create=False)


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


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
        entries: Folder of submitted entry files (default: the package's), or None for the default.
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
