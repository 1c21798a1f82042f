"""``bench submit``: conformance, then the suite's cells, then one leaderboard entry (JSON)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from bench.cli.grid_cmd import (
    add_executor_args,
    adjust_suite,
    executor_config,
    load_plugins,
    placement,
    run_grid,
    split_names,
)
from bench.errors import BenchError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench submit``."""
    from bench.cli.grid_cmd import add_cell_args

    p = subparsers.add_parser(
        "submit", help="check a mechanism, run the submission suite on it and write a leaderboard entry",
        description="Runs the conformance suite on MECHANISM, runs (or reuses) the cells of --suite (default: "
                    "standard) for it and writes "
                    "one JSON entry to leaderboard/entries/ with the cells' metrics, versions, git sha, dataset "
                    "fingerprints and MLflow run ids. A mechanism the suite does not list runs at its defaults "
                    "unless --param NAME=V1,V2 lists are given.",
    )
    add_cell_args(p)
    p.set_defaults(suite="standard")
    p.add_argument("--name", default=None, help="entry name (default: the mechanism's name)")
    p.add_argument("--description", default="", help="one line about the entry")
    p.add_argument("--entries", type=Path, default=None,
                   help="where to write the entry (default leaderboard/entries or $BENCH_ENTRIES)")
    add_executor_args(p)
    p.set_defaults(func=submit)


def submit(args: argparse.Namespace) -> int:
    """Checks, runs and writes the entry; prints where and the entry's leaderboard rows."""
    from bench.cli.leaderboard_cmd import entries_dir
    from bench.grid import expand
    from bench.registry import mechanisms

    load_plugins(args)
    names = split_names(args.mechanism)
    if not names or len(names) != 1:
        raise BenchError("bench submit needs exactly one --mechanism NAME")
    name = names[0]
    mechanism_cls = mechanisms.get(name)
    suite = adjust_suite(submission_suite(args.suite, name, split_names(args.task)), args)
    where = placement(args)
    cells = expand(suite, where)
    checks = conformance(name)
    print(f"[bench] submit {name}: conformance passed ({len(checks)} checks); {len(cells)} cells of suite "
          f"{suite.name!r}", file=sys.stderr, flush=True)
    summary = run_grid(cells, where, executor_config(args))
    print(summary.format(), file=sys.stderr)
    if summary.failed:
        raise BenchError(f"{len(summary.failed)} of {len(cells)} cells failed (listed above); no entry written, "
                         "rerun to retry them")
    entry = build_entry(args, name, mechanism_cls, suite, checks, summary, where)
    folder = entries_dir(args)
    path = write_entry(entry, folder)
    print(f"entry written: {path} ({len(entry['cells'])} cells)")
    _print_rows(entry)
    return 0


def conformance(name: str) -> list[str]:
    """Runs the conformance suite and returns the names of the checks that ran.

    Raises:
        BenchError: A check failed (each failure is printed on stderr first).
    """
    from bench.testing.mechanisms import CHECKS, run_conformance

    failures = run_conformance(name)
    if failures:
        for failure in failures:
            print(f"[bench] conformance: {' '.join(failure.split())}", file=sys.stderr)
        raise BenchError(f"mechanism {name!r} fails {len(failures)} conformance check(s) (listed above); "
                         "no cells run, no entry written")
    return sorted(CHECKS)


def submission_suite(ref: str, name: str, tasks: list[str] | None):
    """Returns the suite limited to one mechanism (its own settings, or the defaults if unlisted)."""
    from bench.grid import MechanismSpec, load_suite

    suite = load_suite(ref)
    if any(spec.name == name for spec in suite.mechanisms):
        return suite.restrict([name], tasks)
    return dataclasses.replace(suite, mechanisms=(MechanismSpec(name),)).restrict(None, tasks)


def build_entry(args, name: str, mechanism_cls, suite, checks: list[str], summary, where) -> dict[str, Any]:
    """Returns the entry: provenance plus every cell's result and MLflow run id."""
    from bench.runner import git_sha, versions
    from bench.tracking import Tracker

    tracker = Tracker(where.results_dir, where.tracking_uri)
    cells = []
    for outcome in summary.outcomes:
        result = outcome.result or tracker.load_result(outcome.run_id)
        cells.append({**result.to_dict(), "run_id": outcome.run_id})
    fingerprints = {c["dataset"]: c["dataset_fingerprint"] for c in cells}
    return {
        "schema": 1,
        "name": args.name or name,
        "mechanism": name,
        "mechanism_version": mechanism_cls.version,
        "mechanism_module": getattr(mechanism_cls, "__module__", ""),
        "description": args.description,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "suite": {"name": suite.name, "profile": suite.profile, "seeds": list(suite.seeds),
                  "benchmarks": list(suite.benchmarks), "sha256": _suite_digest(suite)},
        "conformance": {"passed": True, "checks": checks},
        "git_sha": git_sha(),
        "versions": versions(),
        "dataset_fingerprints": fingerprints,
        "tracking_uri": where.tracking_uri,
        "cells": sorted(cells, key=lambda c: (c["task"], c["seed"], json.dumps(c["params"], sort_keys=True, default=str))),
    }


def write_entry(entry: dict[str, Any], folder: Path) -> Path:
    """Writes ``folder/<slug of the name>.json`` (replacing an entry of the same name)."""
    from leaderboard.render import slug

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{slug(str(entry['name']))}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(entry, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def _suite_digest(suite) -> str:
    text = json.dumps(dataclasses.asdict(suite), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _print_rows(entry: dict[str, Any]) -> None:
    import pandas as pd

    from leaderboard.render import render_terminal
    from leaderboard.table import leaderboard_table

    rows = [{**cell, "source": f"entry:{entry['name']}"} for cell in entry["cells"]]
    print(render_terminal(leaderboard_table(pd.DataFrame(rows))), end="")
