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

from bench.cli.common import path_arg
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
        description="Checks that the entry follows the leaderboard protocol (docs/protocol.md: at most "
                    "16 declared configurations, at least 3 seeds, one profile), runs the conformance suite on "
                    "MECHANISM, runs (or reuses) the cells of --suite (default: standard) for it and writes one JSON "
                    "entry to leaderboard/entries/ that declares its configurations and holds the cells' metrics, "
                    "versions, git sha, dataset fingerprints and MLflow run ids. A mechanism the suite does not "
                    "list runs at its defaults unless --param NAME=V1,V2 lists are given.",
    )
    add_cell_args(p)
    p.set_defaults(suite="standard")
    p.add_argument("--name", default=None, help="entry name (default: the mechanism's name)")
    p.add_argument("--description", default="", help="one line about the entry")
    p.add_argument("--entries", type=path_arg, default=None,
                   help="where to write the entry (default leaderboard/entries or $BENCH_ENTRIES)")
    add_executor_args(p)
    p.set_defaults(func=submit)


def submit(args: argparse.Namespace) -> int:
    """Checks, runs and writes the entry; prints where and the entry's leaderboard rows."""
    from bench.cli.leaderboard_cmd import entries_dir
    from bench.core.registry import mechanisms
    from bench.scale.grid import expand
    from bench.storage.tracking import Tracker

    load_plugins(args)
    names = split_names(args.mechanism)
    if not names or len(names) != 1:
        raise BenchError("bench submit needs exactly one --mechanism NAME")
    name = names[0]
    mechanism_cls = mechanisms.get(name)
    suite = adjust_suite(submission_suite(args.suite, name, split_names(args.task)), args)
    where = placement(args)
    folder = entries_dir(args)
    check_entry_target(folder, args.name or name)
    checks = conformance(name)  # the whole suite, before planning cells runs its cheap part for plugins
    cells = expand(suite, where)
    check_protocol(suite, cells)
    audit = submission_audit(name, cells)
    print(f"[bench] submit {name}: conformance passed ({len(checks)} checks); {len(cells)} cells of suite "
          f"{suite.name!r}", file=sys.stderr, flush=True)
    summary = run_grid(cells, where, executor_config(args))
    print(summary.format(), file=sys.stderr)
    if summary.failed:
        raise BenchError(f"{len(summary.failed)} of {len(cells)} cells failed (listed above); no entry written, "
                         "rerun to retry them")
    entry = build_entry(args, EntryParts(name, mechanism_cls, suite, cells, checks, audit), summary, where)
    sheet = attach_sheet(entry, folder, [o.run_id for o in summary.outcomes],
                         Tracker(where.results_dir, where.tracking_uri))
    path = write_entry(entry, folder)
    print(f"entry written: {path} ({len(entry['cells'])} cells)" + (f"; sample sheet: {sheet}" if sheet else ""))
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


def check_protocol(suite, cells) -> None:
    """Refuses an entry the leaderboard would not rank (docs/protocol.md), before anything runs.

    Raises:
        BenchError: More than K_MAX configurations on a benchmark, or fewer than MIN_SEEDS seeds.
    """
    from leaderboard.protocol import K_MAX, MIN_SEEDS, canonical_params

    if len(suite.seeds) < MIN_SEEDS:
        shown = ",".join(map(str, suite.seeds))
        raise BenchError(f"an entry needs at least {MIN_SEEDS} seeds, suite {suite.name!r} gives {len(suite.seeds)} "
                         f"({shown}); pass --seeds 0,1,2 (docs/protocol.md)")
    for benchmark in suite.benchmarks:
        count = len({canonical_params(c.config.params) for c in cells if c.config.task == benchmark})
        if count > K_MAX:
            raise BenchError(f"an entry declares at most {K_MAX} configurations, suite {suite.name!r} gives {count} "
                             f"on {benchmark}; shorten the --param lists (docs/protocol.md)")


SUBMIT_AUDIT_MAX_TRIALS = 200_000
"""The submission audit's budget: most counted trials per input of one configuration's audit.
Below it, each audit runs the trials its claim needs to pass (:func:`bench.privacy.audit_plan.trials_needed`,
about 17,000 at epsilon 1, 10,000 at 2, 67,000 at 6); a claim that needs more (epsilon above
about 7 at 99%) is audited at the budget and recorded ``inconclusive`` unless refuted. On the
8x8 audit images a DP-Pix audit at the budget takes about a minute on a shared 2-core CPU."""
SUBMIT_AUDIT_CONFIDENCE = 0.99
"""Joint confidence of the submission audit's bounds."""
SUBMIT_AUDIT_IMAGE_SIZE = 8
"""Side of the submission audit's square images (its ragged ones are 11 x 9), as the conformance suite's."""


def submission_audit(name: str, cells) -> dict[str, Any] | None:
    """Audits every declared configuration that makes a formal claim; returns what the entry records.

    Each configuration's claim is checked by :func:`bench.audit.run_audit` (neighbouring
    inputs per the claim's unit, every value of the release read, a Clopper-Pearson lower
    bound on epsilon at 99%) with the trials its claim needs, at most
    ``SUBMIT_AUDIT_MAX_TRIALS``. Each report records its ``verdict``: ``passed``,
    ``inconclusive`` (the budget could not refute a 1.25 x over-claim: recorded, and the
    submission goes on) or ``failed`` (the submission stops).

    Args:
        name: The mechanism.
        cells: The entry's validated cells (their configurations carry the claims).

    Returns:
        Parameter label -> the audit report as a dict (``verdict``, and ``passed`` =
        verdict is ``passed``); None when no configuration makes a claim.

    Raises:
        BenchError: A lower bound exceeds its claim (nothing is run or written).
    """
    from bench.audit import run_audit
    from bench.core.registry import mechanisms

    reports: dict[str, Any] = {}
    for cell in cells:
        params = dict(cell.config.params)
        label = ", ".join(f"{k}={v}" for k, v in params.items()) or "defaults"
        if label in reports or mechanisms.get(name)(**params).claim() is None:
            continue
        report = run_audit(name, params, None, confidence=SUBMIT_AUDIT_CONFIDENCE,
                           image_size=SUBMIT_AUDIT_IMAGE_SIZE, max_trials=SUBMIT_AUDIT_MAX_TRIALS)
        if report.verdict == "failed":
            raise BenchError(f"submit {name}: the audit refutes the claim at {label}: {report.summary()}")
        if report.verdict == "inconclusive":
            print(f"[bench] submit {name}: audit at {label} recorded inconclusive: {report.reach_note()}",
                  file=sys.stderr, flush=True)
        reports[label] = report.to_dict()
    return reports or None


def submission_suite(ref: str, name: str, tasks: list[str] | None):
    """Returns the suite limited to one mechanism (its own settings, or the defaults if unlisted)."""
    from bench.scale.grid import MechanismSpec, load_suite

    suite = load_suite(ref)
    if any(spec.name == name for spec in suite.mechanisms):
        return suite.restrict([name], tasks)
    return dataclasses.replace(suite, mechanisms=(MechanismSpec(name),)).restrict(None, tasks)


@dataclasses.dataclass(frozen=True)
class EntryParts:
    """What an entry is made of besides its results.

    Attributes:
        name: The mechanism.
        mechanism_cls: Its class.
        suite: The submission suite (adjusted by the options).
        cells: Its validated cells (the declaration).
        checks: Conformance checks passed.
        audit: The audit reports per claimed configuration, or None (see :func:`submission_audit`).
    """

    name: str
    mechanism_cls: Any
    suite: Any
    cells: list
    checks: list[str]
    audit: dict[str, Any] | None


def build_entry(args, parts: EntryParts, summary, where) -> dict[str, Any]:
    """Returns the entry: provenance, the declaration, and every cell's result, MLflow run id and result digest.

    Each cell's ``result_sha256`` is the SHA-256 of its result.json (the digest its run
    logged), so the board verifies what the entry states without the MLflow store
    (:mod:`leaderboard.verification`); with its ``overrides``, the suite's ``attacks`` and
    the result's own fields (task, params, seed, profile, split, precision, data
    fingerprints) it is what ``bench leaderboard verify`` recomputes a cell from.
    """
    from bench.cell.provenance import git_sha, versions
    from bench.storage.tracking import Tracker
    from bench.storage.tracking.verify import result_digest
    from leaderboard.declare import declaration_block
    from leaderboard.store import ENTRY_SCHEMA
    from leaderboard.verification import DIGEST_FIELD

    suite = parts.suite
    overrides = {k: dict(v) for k, v in suite.overrides.items()}
    tracker = Tracker(where.results_dir, where.tracking_uri)
    cells = []
    for outcome in summary.outcomes:
        result = outcome.result or tracker.load_result(outcome.run_id)
        # The digest its run logged: the board checks what the entry states against it without the store.
        cell = {**result.to_dict(), "run_id": outcome.run_id, "overrides": overrides,
                DIGEST_FIELD: result_digest(result.to_json().encode())}
        cells.append({**cell, **_tuning_cost(tracker, outcome.run_id)})
    fingerprints = {c["dataset"]: c["dataset_fingerprint"] for c in cells}
    return {
        "schema": ENTRY_SCHEMA,
        "name": args.name or parts.name,
        "mechanism": parts.name,
        "mechanism_version": parts.mechanism_cls.version,
        "mechanism_module": getattr(parts.mechanism_cls, "__module__", ""),
        "description": args.description,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "suite": {"name": suite.name, "profile": suite.profile, "seeds": list(suite.seeds),
                  "benchmarks": list(suite.benchmarks), "sha256": _suite_digest(suite), "overrides": overrides,
                  "attacks": None if suite.attacks is None else list(suite.attacks)},
        "declaration": declaration_block(suite.name, suite.profile, suite.seeds, parts.cells),
        "conformance": {"passed": True, "checks": parts.checks},
        "audit": parts.audit,
        "git_sha": git_sha(),
        "versions": versions(),
        "dataset_fingerprints": fingerprints,
        "tracking_uri": where.tracking_uri,
        "cells": sorted(cells, key=lambda c: (c["task"], c["seed"], json.dumps(c["params"], sort_keys=True, default=str))),
    }


def _tuning_cost(tracker, run_id: str) -> dict[str, str]:
    """Returns ``{"tuning_cost": note}`` for a run 'bench tune' selected on private records (its tag), else {}."""
    from bench.scale.tune_cost import TUNING_COST_TAG

    try:
        note = tracker.client.get_run(run_id).data.tags.get(TUNING_COST_TAG, "")
    except Exception:  # a run the store no longer has carries no tag to copy
        note = ""
    return {"tuning_cost": note} if note else {}


def attach_sheet(entry: dict[str, Any], folder: Path, run_ids: list[str], tracker) -> Path | None:
    """Writes the sample sheet of one of the entry's runs beside its file and records it in the entry.

    The board shows it on the mechanism's page once it hashes to the recorded digest
    (:mod:`leaderboard.sheets`).

    Args:
        entry: The entry (gains ``sample_sheet``: its file name and SHA-256).
        folder: The entries folder.
        run_ids: The entry's runs, in order of preference.
        tracker: The store they are in.

    Returns:
        The sheet's path, or None when no run logged one.
    """
    from leaderboard.sheets import SHEET_FIELD, run_sheet, write_entry_sheet

    data = run_sheet(tracker, run_ids)
    if data is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    target = entry_path(folder, str(entry["name"]))
    entry[SHEET_FIELD] = write_entry_sheet(data, target)
    return target.with_suffix(".png")


def entry_path(folder: Path, name: str) -> Path:
    """Returns the file an entry of this name is written to: ``folder/<slug of the name>.json``."""
    from leaderboard.render import slug

    return folder / f"{slug(name)}.json"


def check_entry_target(folder: Path, name: str) -> None:
    """Checks, before anything runs, that the entry can be written and would replace only its own earlier version.

    An earlier entry of the same name is replaced (a resubmission); this says so on stderr.

    Raises:
        BenchError: --entries is not a folder and cannot be created, or the entry's file
            is a folder or holds something other than an entry of this name.
    """
    from bench.storage.folders import check_writable_folder

    check_writable_folder("--entries", folder)
    path = entry_path(folder, name)
    if not path.exists():
        return
    if path.is_file() and _entry_name(path) == name:
        print(f"[bench] submit: {path} holds an earlier entry named {name!r}; it is replaced once the cells are done",
              file=sys.stderr, flush=True)
        return
    raise BenchError(f"--entries: {path} exists and is not an entry named {name!r}; move it away, or pass "
                     "another --entries folder or --name")


def _entry_name(path: Path) -> str | None:
    """Returns the name of the entry in a file, or None when the file holds no entry."""
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return str(entry.get("name")) if isinstance(entry, dict) and "name" in entry else None


def write_entry(entry: dict[str, Any], folder: Path) -> Path:
    """Writes :func:`entry_path` (replacing an entry of the same name)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = entry_path(folder, str(entry["name"]))
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(entry, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def _suite_digest(suite) -> str:
    text = json.dumps(dataclasses.asdict(suite), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _print_rows(entry: dict[str, Any]) -> None:
    """Prints the entry as the leaderboard will rank it (on its own)."""
    import pandas as pd

    from leaderboard.boards import build_leaderboard
    from leaderboard.declare import declaration_from_entry
    from leaderboard.exports import render_terminal

    rows = [{**cell, "source": f"entry:{entry['name']}"} for cell in entry["cells"]]
    print(render_terminal(build_leaderboard(pd.DataFrame(rows), [declaration_from_entry(entry)])), end="")
