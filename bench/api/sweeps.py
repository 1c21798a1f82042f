"""``bench.grid`` and ``bench.tune``: the CLI's sweeps from Python, with the CLI's checks and paths.

Each builds the options ``bench grid`` / ``bench tune`` would parse and runs the command's own
functions, so a notebook gets the same validation (before any work), resumption (finished
cells are skipped) and MLflow logging as the command line; the cells come back as
:func:`bench.results` rows. Without a suite the profile is ``smoke``, as :func:`bench.run`'s.
"""

from __future__ import annotations

import argparse
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from bench.api.settings import DEFAULT_PROFILE, cli_text, sections
from bench.errors import BenchError

if TYPE_CHECKING:
    import optuna
    import pandas as pd

PathLike = str | os.PathLike

__all__ = ["TuneResult", "grid", "tune"]


def grid(
    task: str | Sequence[str] | None = None,
    mechanism: str | Sequence[str] | None = None,
    params: Mapping[str, Any] | None = None,
    seeds: Sequence[int] | None = None,
    profile: str | None = None,
    *,
    suite: str | None = None,
    settings: Mapping[str, Any] | None = None,
    attacks: Sequence[str] | None = None,
    device: str = "auto",
    precision: str = "fp32",
    data_root: PathLike | None = None,
    results_dir: PathLike = "results",
    cache_dir: PathLike | None = None,
    tracking_uri: str | None = None,
    executor: str = "local",
    workers: int | None = None,
    mechanism_files: Iterable[PathLike] = (),
    quiet: bool = True,
) -> "pd.DataFrame":
    """Runs ``bench grid``: benchmarks x mechanisms x parameter lists x seeds; finished cells are reused.

    Example::

        table = bench.grid("fewshot_synth_faces", "dp_pix", {"epsilon": [1, 3], "block": 4}, seeds=[0, 1])

    Args:
        task: Benchmark(s) (with ``suite``: only these of the suite's).
        mechanism: Mechanism(s) (with ``suite``: only these of the suite's).
        params: Parameter -> a value or a list of values to cross.
        seeds: Seeds (default: the suite's, else ``[0]``).
        profile: ``smoke``, ``quick`` or ``paper`` (default: the suite's, else ``smoke``).
        suite: A shipped suite name (``smoke``, ``standard``) or a YAML file.
        settings: Overrides in every cell, as :func:`bench.run` takes them.
        attacks: Adversaries (None: the benchmark's or suite's; ``[]``: none).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        precision: ``fp32`` or ``bf16``.
        data_root: Root of real datasets (default ``$BENCH_DATA``).
        results_dir: MLflow database and artifacts.
        cache_dir: Releases and trained models (default ``results_dir/cache``).
        tracking_uri: MLflow tracking URI (default: sqlite in ``results_dir``).
        executor: ``local``, ``processes`` or ``ray``.
        workers: Worker processes (``processes``) or CPUs of a local Ray.
        mechanism_files: Python files registering mechanisms (loaded in every worker).
        quiet: No progress output (False: the grid's bars and lines on stderr).

    Returns:
        One :func:`bench.results` row per cell of the grid that has a result
        (``frame.attrs["summary"]`` is the grid's summary line).

    Raises:
        BenchError: Any option ``bench grid`` refuses, before any cell runs.
    """
    from bench.cli.grid_cmd import build_cells, executor_config, run_grid

    args = _namespace("grid", task=_joined(task), mechanism=_joined(mechanism), suite=suite,
                      param=[f"{k}={_values(k, v)}" for k, v in dict(params or {}).items()] or None,
                      seeds=",".join(str(s) for s in seeds) if seeds is not None else None,
                      profile=profile or (None if suite else DEFAULT_PROFILE), executor=executor, workers=workers,
                      **_common(settings, attacks, device, precision, data_root, results_dir, cache_dir,
                                tracking_uri, mechanism_files))
    config = executor_config(args)
    _, where, cells = build_cells(args)
    summary = run_grid(cells, where, config, quiet=quiet)
    if summary.failed:
        warnings.warn(f"bench.grid: {len(summary.failed)} cell(s) failed, e.g. {summary.failed[0].label}: "
                      f"{summary.failed[0].error}", stacklevel=2)
    frame = _cells(tracking_uri or results_dir, [c.key for c in cells])
    frame.attrs["summary"] = summary.format()
    return frame


@dataclass
class TuneResult:
    """What :func:`tune` found.

    Attributes:
        study: The Optuna study (``study.best_trials`` is the Pareto front on validation).
        selected: The selected configurations run on the test split, as :func:`bench.results`
            rows (empty while other workers still run trials).
        running: Trials still running in other workers.
    """

    study: "optuna.Study"
    selected: "pd.DataFrame"
    running: int


def tune(
    mechanism: str,
    task: str,
    params: Mapping[str, Any] | None = None,
    seed: int = 0,
    profile: str = DEFAULT_PROFILE,
    *,
    trials: int = 60,
    storage: str | None = None,
    study: str | None = None,
    population: int | None = None,
    sampler_seed: int | None = None,
    settings: Mapping[str, Any] | None = None,
    attacks: Sequence[str] | None = None,
    device: str = "auto",
    precision: str = "fp32",
    data_root: PathLike | None = None,
    results_dir: PathLike = "results",
    cache_dir: PathLike | None = None,
    tracking_uri: str | None = None,
    mechanism_files: Iterable[PathLike] = (),
) -> TuneResult:
    """Runs ``bench tune``: an NSGA-II search of the utility-privacy front, then its selection on test.

    Args:
        mechanism: The mechanism to tune.
        task: The benchmark.
        params: Parameters held fixed (the others are searched).
        seed: The cells' seed.
        profile: ``smoke`` (default), ``quick`` or ``paper``.
        trials: Total trials of the study over all workers.
        storage: ``sqlite:///F.db``, ``postgresql://...`` or ``journal:PATH`` (default: a journal
            file in ``results_dir``).
        study: Study name (default: derived from task, mechanism, profile, seed).
        population: NSGA-II population (default trials/4 within [4, 50]).
        sampler_seed: Seed of the sampler.
        settings: As in :func:`grid`.
        attacks: As in :func:`grid`.
        device: As in :func:`grid`.
        precision: As in :func:`grid`.
        data_root: As in :func:`grid`.
        results_dir: As in :func:`grid`.
        cache_dir: As in :func:`grid`.
        tracking_uri: As in :func:`grid`.
        mechanism_files: As in :func:`grid`.

    Raises:
        BenchError: Any option ``bench tune`` refuses, before any trial runs.
    """
    from bench.cli.common import run_config
    from bench.cli.tune_cmd import check_tune_options
    from bench.scale.tune import TuneConfig, run_selected_on_test
    from bench.scale.tune import tune as run_study
    from bench.scale.tune_storage import still_running

    fixed = [f"{k}={cli_text(v)}" for k, v in dict(params or {}).items()] or None
    args = _namespace("tune", task=task, mechanism=mechanism, param=fixed,
                      seed=seed, profile=profile, trials=trials, storage=storage, study=study, population=population,
                      sampler_seed=sampler_seed, **_common(settings, attacks, device, precision, data_root,
                                                           results_dir, cache_dir, tracking_uri, mechanism_files))
    check_tune_options(args)
    base = run_config(args, absolute=True)
    config = TuneConfig(base=base, trials=trials, storage=storage, study_name=study, population=population,
                        sampler_seed=sampler_seed, plugin_files=tuple(p.resolve() for p in args.mechanism_file))
    found = run_study(config, lambda number, outcome: None)
    running = still_running(found)
    keys = [] if running else [item.test.key for item in run_selected_on_test(config, found, lambda outcome: None)]
    return TuneResult(found, _cells(tracking_uri or results_dir, keys), running)


def _namespace(command: str, **values: Any) -> argparse.Namespace:
    """Returns the options of ``bench <command>`` at their defaults, with ``values`` set."""
    from bench.cli import build_parser

    required = ["--mechanism", "m", "--task", "t"] if command == "tune" else []
    args = build_parser().parse_args([command, *required])
    for name, value in values.items():
        if not hasattr(args, name):
            raise AssertionError(f"bench {command} has no option {name!r}")
        setattr(args, name, value)
    return args


def _common(settings: Mapping[str, Any] | None, attacks: Sequence[str] | None, device: str, precision: str,
            data_root: PathLike | None, results_dir: PathLike, cache_dir: PathLike | None, tracking_uri: str | None,
            mechanism_files: Iterable[PathLike]) -> dict[str, Any]:
    """Returns the cell options shared by grid and tune, as their parser would hold them."""
    overrides = [f"{section}.{k}={cli_text(v)}" for section, values in sections(settings).items()
                 for k, v in values.items()]
    if attacks is None:
        attack_text = None
    else:
        attack_text = ",".join(attacks) if list(attacks) else "none"
    return {"overrides": overrides or None, "attacks": attack_text, "device": device, "precision": precision,
            "data_root": Path(data_root) if data_root is not None else None, "results_dir": Path(results_dir),
            "cache_dir": Path(cache_dir) if cache_dir is not None else None, "tracking_uri": tracking_uri,
            "mechanism_file": [Path(p) for p in mechanism_files]}


def _cells(source: PathLike, keys: Sequence[str]) -> "pd.DataFrame":
    """Returns the :func:`bench.results` rows of these cells (none when the store has no result yet)."""
    from bench.api.cells import results
    from bench.storage.tracking.health import NoResults

    try:
        frame = results(source)
    except NoResults:
        import pandas as pd

        return pd.DataFrame(columns=["run_id", "cell_key"])
    return frame[frame["cell_key"].isin(list(keys))].reset_index(drop=True)


def _joined(names: str | Sequence[str] | None) -> str | None:
    return names if names is None or isinstance(names, str) else ",".join(names)


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple, set, frozenset, range)) else [value]


def _values(name: str, value: Any) -> str:
    """Returns ``bench grid --param``'s comma list of a parameter's values.

    Raises:
        BenchError: A value holding a comma (it would read as two values).
    """
    texts = [cli_text(x) for x in _listed(value)]
    if any("," in t for t in texts):
        raise BenchError(f"bench.grid: params[{name!r}]: a value holds a comma; give a list of values instead")
    return ",".join(texts)
