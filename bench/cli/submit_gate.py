"""``bench submit``'s gate at the task's own size and on the whole release, and a mechanism file's sandbox.

Beside the conformance suite and the 8 x 8 audit (:mod:`bench.cli.entry_files`), for every
benchmark of the suite a submission is ranked on:

1. the conformance checks about a batch, on one batch of the benchmark's stored image size
   and release batch size (:func:`bench.testing.sized.sized_conformance`), at the first
   declared configuration;
2. an audit of every claimed configuration on images of that size, with a small trial
   budget (:func:`bench.testing.sized.sized_audit`): a refuted claim stops the submission;
3. for every claimed configuration, the evaluation splits released through the guarded
   release path under the cells' own streams (the first seed), then again under other
   streams up to 16,384 images (:func:`bench.testing.release_checks.release_sweep`): no image
   as it came, none byte-equal to a clean image, none noised far less than the bulk.

:func:`isolate_files` starts a ``--mechanism-file``'s isolated worker (:mod:`bench.testing.isolated`):
the file is never imported here, every check above and every cell calls it there. Every
refusal is one line (a BenchError).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import BenchError

__all__ = ["GateData", "finish_isolation", "gate_data", "isolate_files", "isolated_executor", "load_files",
           "submission_gate"]

_LOADED: dict[tuple, GateData] = {}
"""Benchmark data already loaded in this process (the sandbox and the gate read the same)."""


@dataclass
class GateData:
    """One benchmark's data as its cells release it.

    Attributes:
        benchmark: Its name.
        target: The shape its release hands a mechanism.
        splits: The evaluation splits a cell releases and measures on (name -> ImageSet).
        all_splits: Every split (the train split is what a mechanism without public data fits on).
        planned: An identity cell's plan of the benchmark (its task, dataset and places).
    """

    benchmark: str
    target: Any
    splits: dict[str, Any]
    all_splits: Any
    planned: Any


def gate_data(suite, where) -> list[GateData]:
    """Loads (or reads from the cache) each benchmark's clean splits and finds its release shape.

    Raises:
        BenchError: A benchmark cannot be planned or its data loaded.
    """
    from bench.cell.data import cell_data
    from bench.cell.plan import RunConfig, plan
    from bench.testing.sized import SizedTarget, release_batch

    found = []
    for benchmark in suite.benchmarks:
        key = (benchmark, suite.profile, str(where.results_dir), str(where.cache_dir), str(where.data_root))
        if key not in _LOADED:
            config = RunConfig(task=benchmark, mechanism="identity", seed=int(suite.seeds[0]), profile=suite.profile,
                               device=where.device, data_root=where.data_root, results_dir=where.results_dir,
                               cache_dir=where.cache_dir, attacks=suite.attacks,
                               overrides=suite.cell_overrides(suite.method_settings()[0]))
            planned = plan(config)
            clean = cell_data(planned)
            evaluated = {n: s for n, s in clean.sets.items() if n == "test"} or {
                n: s for n, s in clean.sets.items() if n not in ("train", "val", "population")}
            c, h, w = next(iter(evaluated.values())).images.shape[1:]
            batch = release_batch(planned.device, int(c), int(h), int(w), max(len(s) for s in evaluated.values()))
            _LOADED[key] = GateData(benchmark, SizedTarget(benchmark, int(c), int(h), int(w), batch), evaluated,
                                    clean, planned)
        found.append(_LOADED[key])
    return found


def _configurations(cells, benchmark: str | None = None) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for cell in cells:
        if benchmark is None or cell.config.task == benchmark:
            params = dict(cell.config.params)
            seen.setdefault(repr(sorted(params.items())), params)
    return list(seen.values())


def _label(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items()) or "defaults"


def _fitted(name: str, params: dict[str, Any], data: GateData, ctx):
    """Returns the mechanism at ``params``, fitted as a cell's release fits it (public data, else train)."""
    from bench.core.registry import mechanisms
    from bench.data.base import load_public
    from bench.release import guard
    from bench.release.dataset import needs_fit
    from bench.system import precision

    mechanism = mechanisms.get(name)(**params)
    if needs_fit(mechanism):
        cfg = data.planned.config
        public = load_public(data.planned.task.dataset, cfg.data_root, data.planned.task.data_options(), cfg.cache)
        with precision.exact():
            guard.fit(mechanism, public if public is not None else data.all_splits["train"], ctx)
    return mechanism


def submission_gate(name: str, cells, suite, where) -> dict[str, Any]:
    """Runs the checks at each benchmark's size and on its release; returns what the entry records as ``gate``.

    Args:
        name: The mechanism.
        cells: The entry's validated cells.
        suite: The submission suite.
        where: Where the cells run (data root, cache, device).

    Raises:
        BenchError: A check failed (one line naming it, and the first offending image for a release check).
    """
    from bench.cell.plan import run_context
    from bench.testing.release_checks import release_sweep
    from bench.testing.sized import sized_conformance

    start = time.monotonic()
    record: dict[str, Any] = {"benchmarks": {}}
    for data in gate_data(suite, where):
        configs = _configurations(cells, data.benchmark)
        if not configs:
            continue
        claimed = [p for p in configs if _fitted_claim(name, p)]
        device = str(data.planned.device)
        failures = sized_conformance(name, (claimed or configs)[0], data.target, device)
        if failures:
            raise BenchError(f"submit {name}: conformance at the task's size fails: {' '.join(failures[0].split())}"
                             + (f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""))
        audits, released = {}, {}
        for params in claimed:
            audits[_label(params)] = _sized_audit(name, params, data, where)
            ctx = run_context(data.planned, lambda _line: None, None)
            mechanism = _fitted(name, params, data, ctx)
            for split_name, split in data.splits.items():
                where_label = f"{data.benchmark} {split_name} at {_label(params)}"
                released[f"{split_name} at {_label(params)}"] = release_sweep(
                    name, mechanism, split, ctx, purpose=f"release/{split_name}", where=where_label)
        record["benchmarks"][data.benchmark] = {"shape": list(data.target.shape), "conformance": "passed",
                                                "audits": audits, "release_checked_images": released}
    record["seconds"] = round(time.monotonic() - start, 1)
    print(f"[bench] submit {name}: checks at the task's size and on the release passed "
          f"({record['seconds']:.0f} s)", file=sys.stderr, flush=True)
    return record


def _sized_audit(name: str, params: dict[str, Any], data: GateData, where) -> dict[str, Any]:
    """Audits one claimed configuration at the benchmark's size where its claim is within reach; returns the record."""
    from bench.core.registry import mechanisms
    from bench.testing.sized import sized_audit, within_reach

    if not within_reach(mechanisms.get(name)(**params).claim()):
        return {"verdict": "skipped", "why": "claim beyond what the sized audit's trials can refute"}
    report = sized_audit(name, params, data.target, where.device)
    if report.verdict == "failed":
        raise BenchError(f"submit {name}: the audit at {data.target.describe()} refutes the claim at "
                         f"{_label(params)}: {report.summary()}")
    return {"verdict": report.verdict, "trials": report.trials, "epsilon_lower_bound": report.epsilon_lower_bound}


def _fitted_claim(name: str, params: dict[str, Any]) -> bool:
    from bench.core.registry import mechanisms

    return mechanisms.get(name)(**params).claim() is not None


def isolate_files(args, suite_of) -> dict[str, Any] | None:
    """Registers a ``--mechanism-file``'s mechanisms as proxies of an isolated worker, before anything else runs.

    The file is never imported into this process: its import and every later call into its
    code (the conformance checks, the audits, the checks below, the cells) run in one worker
    process, in a bubblewrap sandbox where the machine allows it (:mod:`bench.testing.isolated`).

    Args:
        args: ``bench submit``'s command line (``mechanism_file``, ``mechanism``).
        suite_of: Returns the submission suite for the mechanism's name (needs no registered mechanism);
            called first, so that a bad option is refused before the worker starts.

    Returns:
        What the entry records as ``isolation`` (:func:`load_files`), or None without mechanism files.

    Raises:
        BenchError: The file cannot be loaded in its worker, or was refused there (one line).
    """
    if not args.mechanism_file:
        return None
    name = (args.mechanism or "").split(",")[0].strip()
    suite_of(name)  # a bad suite or option is refused before the worker starts
    return load_files(args, f"submit {name}")


def load_files(args, who: str = "submit") -> dict[str, Any] | None:
    """Loads the ``--mechanism-file`` files isolated (``$BENCH_ISOLATION``, :mod:`bench.testing.isolated`).

    Returns:
        What an entry records as ``isolation``: ``kind`` ``bwrap`` or ``process`` (a worker process), or
        ``none`` where ``$BENCH_ISOLATION=none`` has the files imported here; None without files.

    Raises:
        BenchError: A file cannot be loaded, or was refused by its sandbox (one line).
    """
    from bench.core.registry import load_mechanism_file
    from bench.testing.isolated import isolation_mode, load_isolated

    files = [Path(p) for p in args.mechanism_file]
    if not files:
        return None
    shown = ", ".join(p.name for p in files)
    mode = isolation_mode()
    if mode == "none":
        print(f"[bench] {who}: warning: BENCH_ISOLATION=none: {shown} runs in PrivBench's own process "
              "(isolation: none)", file=sys.stderr, flush=True)
        for path in files:
            load_mechanism_file(path)
        return {"kind": "none", "reason": "BENCH_ISOLATION=none"}
    for path in files:  # what needs no import is refused here, naming the file as given
        if not path.is_file():
            raise BenchError(f"--mechanism-file {path}: no such file")
        if path.suffix != ".py":
            raise BenchError(f"cannot import {path}: not a Python file")
    with contextlib.redirect_stderr(io.StringIO()) as notes:  # a file that fails to load is the one line said
        isolation = load_isolated(files, mode)
    print(f"[bench] {who}: {shown} runs in an isolated worker process (no network, read-only files, home watched)",
          file=sys.stderr, flush=True)
    sys.stderr.write(notes.getvalue())
    return isolation


def isolated_executor(config, isolation: dict[str, Any] | None):
    """Returns the executor configuration whose workers load the files as ``isolation`` says."""
    if isolation is None or isolation.get("kind") == "none":
        return config
    return dataclasses.replace(config, isolation=isolation["kind"])


def finish_isolation(isolation: dict[str, Any] | None) -> None:
    """Ends the isolated workers once the cells are done, before an entry is written.

    Raises:
        IsolationBreach: A worker did or left what refuses its mechanism (one line).
    """
    from bench.testing.isolated import finish, raise_breach

    if isolation is not None and isolation.get("kind") != "none":
        finish()
    raise_breach()
