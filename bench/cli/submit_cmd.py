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

from bench.cli.common import add_entries_option, check_locations
from bench.cli.entry_files import (  # noqa: F401 (their home before entry_files; tests and plugins import them here)
    SUBMIT_AUDIT_CONFIDENCE,
    SUBMIT_AUDIT_IMAGE_SIZE,
    SUBMIT_AUDIT_MAX_TRIALS,
    _tuning_cost,
    attach_sheet,
    cell_record,
    conformance,
    entry_path,
    submission_audit,
    write_entry,
)
from bench.cli.grid_cmd import (
    add_executor_args,
    adjust_suite,
    executor_config,
    placement,
    run_grid,
    split_names,
)
from bench.errors import BenchError
from bench.storage.folders import check_writable_folder


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench submit``."""
    from bench.cli.grid_cmd import add_cell_args

    p = subparsers.add_parser(
        "submit", help="check a mechanism, run the submission suite on it and write a leaderboard entry",
        description="Checks that the entry follows the leaderboard protocol (docs/protocol.md: at most "
                    "16 declared configurations, at least 3 seeds, one profile), runs the conformance suite on "
                    "MECHANISM, runs (or reuses) the cells of --suite (default: standard) for it and writes one JSON "
                    "entry to ./leaderboard/entries of the current folder (or --entries DIR; never into the "
                    "installed package) that declares its configurations and holds the cells' metrics, "
                    "versions, git sha, dataset fingerprints and MLflow run ids (on a suite with training methods, "
                    "one entry per method, named 'NAME + METHOD'). A mechanism the suite does not "
                    "list runs at its defaults unless --param NAME=V1,V2 lists are given.",
    )
    add_cell_args(p)
    p.add_argument("--name", type=entry_name_arg, default=None,
                   help="entry name (default: the mechanism's name); no '/', '\\' or control characters")
    p.add_argument("--description", type=description_arg, default="", help="one line about the entry")
    add_entries_option(p, "where to write the entry (default: ./leaderboard/entries of the current folder, or "
                          "$BENCH_ENTRIES); the package's shipped baselines are written only when this names "
                          "their folder")
    p.add_argument("--refresh", action="store_true",
                   help="recompute exactly the stale cells (computed by older code: a version bump changed their "
                        "keys) of the entries in --entries, those --name or --mechanism names or else every stale "
                        "one, and rewrite those entries; their other cells are kept as they are")
    add_executor_args(p)
    p.set_defaults(func=submit)


def entry_name_arg(text: str) -> str:
    """An argparse ``type`` for ``--name``: a name shown on the boards, never a path.

    Raises:
        argparse.ArgumentTypeError: The name is empty or blank, '.' or '..', or holds a
            path separator or a control character.
    """
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty entry name; leave --name out for the mechanism's name")
    if text.strip() in {".", ".."} or "/" in text or "\\" in text:
        raise argparse.ArgumentTypeError(f"an entry name is not a path: {text!r} (no '/', '\\', '.' or '..')")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise argparse.ArgumentTypeError(f"an entry name is one line of printable text, got {text!r}")
    return text


def description_arg(text: str) -> str:
    """An argparse ``type`` for ``--description``: one line of printable text (boards and tables show it as one).

    Raises:
        argparse.ArgumentTypeError: The text holds a line break or another control character.
    """
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise argparse.ArgumentTypeError(f"a description is one line of printable text, got {text!r}")
    return text


def submit(args: argparse.Namespace) -> int:
    """Checks, runs and writes the entry; prints where and the entry's leaderboard rows.

    A ``--mechanism-file`` runs isolated (:func:`bench.cli.submit_gate.isolate_files`): a refusal by
    its sandbox is the one error, whatever check or cell met it first.
    """
    from bench.testing.isolated import refuse_on_breach

    with refuse_on_breach():
        return _submit(args)


def _submit(args: argparse.Namespace) -> int:
    from bench.cli.leaderboard_cmd import entry_folders
    from bench.cli.submit_plan import planned_cells_text
    from bench.core.registry import mechanisms
    from bench.scale.grid import expand
    from bench.storage.tracking import Tracker
    from leaderboard.locations import PROJECT_ENTRIES, SHIPPED_DIR

    if args.refresh:
        from bench.cli.submit_refresh import refresh

        return refresh(args)
    from bench.cli.submit_gate import finish_isolation, isolate_files, isolated_executor, submission_gate  # issue 62

    check_locations(args)  # the places and the executor are refused before a worker starts or a check runs
    executor_config(args)
    isolation = isolate_files(args, lambda n: adjust_suite(submission_suite(args.suite or "standard", n,
                                                                            split_names(args.task)), args))
    names = split_names(args.mechanism)
    if not names or len(names) != 1:
        raise BenchError("bench submit needs exactly one --mechanism NAME")
    name = names[0]
    mechanism_cls = mechanisms.get(name)
    suite = adjust_suite(submission_suite(args.suite or "standard", name, split_names(args.task)), args)
    where = placement(args)
    folders = entry_folders(args)
    folders.check_writable()
    folder = folders.folder
    for entry_name in entry_names(args.name or name, suite_labels(suite)).values():
        folders.check_name(entry_name)
        check_entry_target(folder, entry_name, folders.named_by or str(PROJECT_ENTRIES))
    checks = conformance(name)  # the whole suite, before planning cells runs its cheap part for plugins
    cells = expand(suite, where)
    check_protocol(suite, cells)
    for line in planned_cells_text(name, suite, cells, SHIPPED_DIR):
        print(line, file=sys.stderr, flush=True)
    entries = entry_cells(args.name or name, cells)
    audit = submission_audit(name, cells)
    gate = submission_gate(name, cells, suite, where)
    print(f"[bench] submit {name}: conformance passed ({len(checks)} checks); {len(cells)} cells of suite "
          f"{suite.name!r}" + (f", {len(entries)} entries (one per training method)" if len(entries) > 1 else ""),
          file=sys.stderr, flush=True)
    summary = run_grid(cells, where, isolated_executor(executor_config(args), isolation))
    print(summary.format(), file=sys.stderr)
    finish_isolation(isolation)  # the file's worker ends here: what it did refuses it before an entry is written
    if summary.failed:
        raise BenchError(f"{len(summary.failed)} of {len(cells)} cells failed (listed above); no entry written, "
                         "rerun to retry them")
    outcomes = {o.key: o for o in summary.outcomes}
    tracker = Tracker(where.results_dir, where.tracking_uri)
    for entry_name, own in entries.items():
        mine = [outcomes[c.key] for c in own]
        entry = build_entry(args, EntryParts(name, mechanism_cls, suite, own, checks, audit), mine, where, entry_name)
        entry.update(gate=gate, isolation=isolation or {"kind": "none", "reason": "no --mechanism-file"})
        sheet = attach_sheet(entry, folder, [o.run_id for o in mine], tracker)
        path = write_entry(entry, folder)
        print(f"entry written: {path} ({len(entry['cells'])} cells)" + (f"; sample sheet: {sheet}" if sheet else ""))
        _print_rows(entry, path)
    return 0


def entry_cells(name: str, cells: list) -> dict[str, list]:
    """Returns the submission's entries: entry name -> its cells.

    Cells trained by different methods (a task's ``entry_settings``, such as dp_vit's
    DP-SGD method) are different rows of one board, so each method is its own entry,
    named ``NAME + METHOD`` (``identity + DP-SGD(flat, ε=3)``); a submission with one
    method (or a task without methods) is the one entry ``NAME``.
    """
    from leaderboard.declare import entry_label

    by_label: dict[str, list] = {}
    for cell in cells:
        by_label.setdefault(entry_label(cell.config), []).append(cell)
    named = entry_names(name, list(by_label))
    return {named[label]: own for label, own in by_label.items()}


def entry_names(name: str, labels: list[str]) -> dict[str, str]:
    """Returns method label -> entry name: ``NAME + METHOD`` when there are several methods, else ``NAME``."""
    if len(set(labels)) == 1:
        return {labels[0]: name}
    return {label: f"{name} + {label}" if label else name for label in labels}


def suite_labels(suite) -> list[str]:
    """Returns the method labels of a suite's cells without planning them (for checks before any work).

    Raises:
        BenchError: A benchmark is unknown or a method's settings are invalid.
    """
    from bench.cell.plan import RunConfig
    from leaderboard.declare import entry_label

    labels = []
    for benchmark in suite.benchmarks:
        for method in suite.method_settings():
            config = RunConfig(task=benchmark, mechanism="", profile=suite.profile,
                               overrides=suite.cell_overrides(method))
            labels.append(entry_label(config))
    return list(dict.fromkeys(labels))


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


def build_entry(args, parts: EntryParts, outcomes: list, where, name: str) -> dict[str, Any]:
    """Returns the entry: provenance, the declaration, and every cell's result, MLflow run id and result digest.

    Each cell's ``result_sha256`` is the SHA-256 of its result.json (the digest its run
    logged), so the board verifies what the entry states without the MLflow store
    (:mod:`leaderboard.verification`); with its ``overrides``, the suite's ``attacks`` and
    the result's own fields (task, params, seed, profile, split, precision, data
    fingerprints) it is what ``bench leaderboard verify`` recomputes a cell from. A cell's
    ``overrides`` are its own: the suite's ``--set`` sections with its training method.

    Args:
        args: The command line.
        parts: What the entry is made of besides its results (``parts.cells``: its own cells).
        outcomes: The grid's outcomes of those cells.
        where: Where they ran.
        name: The entry's name.
    """
    from bench.cell.provenance import git_sha, versions
    from bench.storage.tracking import Tracker
    from leaderboard.declare import declaration_block
    from leaderboard.locations import portable_uri
    from leaderboard.store import ENTRY_SCHEMA

    suite = parts.suite
    overrides = {k: dict(v) for k, v in suite.overrides.items()}
    tracker = Tracker(where.results_dir, where.tracking_uri)
    own = {c.key: {k: dict(v) for k, v in c.config.overrides.items()} for c in parts.cells}
    cells = [cell_record(outcome, own[outcome.key], tracker) for outcome in outcomes]
    fingerprints = {c["dataset"]: c["dataset_fingerprint"] for c in cells}
    return {
        "schema": ENTRY_SCHEMA,
        "name": name,
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
        "tracking_uri": portable_uri(where.tracking_uri),  # relative to the submitter's folder, or a label
        **mechanism_source(parts.mechanism_cls),
        "cells": sorted(cells, key=lambda c: (c["task"], c["seed"], json.dumps(c["params"], sort_keys=True, default=str))),
    }


def mechanism_source(mechanism_cls: Any) -> dict[str, Any]:
    """Returns ``{"mechanism_source": ...}`` for a mechanism a ``--mechanism-file`` declared, else {}.

    The entry then carries the file (its text and SHA-256), so that the board, ``show`` and
    ``verify`` load it without a package or entry point (:mod:`leaderboard.entry_code`).
    """
    from bench.core.registry import is_file_module
    from leaderboard.entry_code import SOURCE_FIELD, source_record

    isolated = getattr(mechanism_cls, "isolated_source", None)  # a file run in an isolated worker
    if isolated is not None:
        return {SOURCE_FIELD: source_record(isolated)}
    module = sys.modules.get(getattr(mechanism_cls, "__module__", ""))
    path = getattr(module, "__file__", None)
    if module is None or not path or not is_file_module(module.__name__):
        return {}
    return {SOURCE_FIELD: source_record(path)}


def check_entry_target(folder: Path, name: str, flag: str = "--entries") -> None:
    """Checks, before anything runs, that the entry can be written and would replace only its own earlier version.

    An earlier entry of the same name is replaced (a resubmission); this says so on stderr.

    Args:
        folder: The entries folder.
        name: The entry's name.
        flag: What named the folder, for messages (``--entries``, ``$BENCH_ENTRIES``, ``leaderboard/entries``).

    Raises:
        BenchError: The folder is not one and cannot be created, or the entry's file is a
            folder or holds something other than an entry of this name.
    """
    check_writable_folder(flag, folder)
    path = entry_path(folder, name)
    if not path.exists():
        return
    if path.is_file() and _entry_name(path) == name:
        print(f"[bench] submit: {path} holds an earlier entry named {name!r}; it is replaced once the cells are done",
              file=sys.stderr, flush=True)
        return
    raise BenchError(f"{flag}: {path} exists and is not an entry named {name!r}; move it away, or pass "
                     "another --entries folder or --name")


def _entry_name(path: Path) -> str | None:
    """Returns the name of the entry in a file, or None when the file holds no entry."""
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return str(entry.get("name")) if isinstance(entry, dict) and "name" in entry else None


def _suite_digest(suite) -> str:
    text = json.dumps(dataclasses.asdict(suite), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _print_rows(entry: dict[str, Any], path: Path) -> None:
    """Prints the entry as the leaderboard will show it (on its own): self-reported until it is reproduced."""
    import pandas as pd

    from leaderboard.boards import build_leaderboard
    from leaderboard.declare import declaration_from_entry
    from leaderboard.exports import render_terminal
    from leaderboard.reproduced import reproduction_of
    from leaderboard.verification import check_entry

    audits = check_entry(entry).audits  # the verdicts just recorded, as the board will read them
    rows = [{**cell, "source": f"entry:{entry['name']}", "audit": audits.get(cell["cell_key"], "")}
            for cell in entry["cells"]]
    reproduction = reproduction_of(path)
    declaration = dataclasses.replace(declaration_from_entry(entry), reproduction=reproduction.text,
                                      self_reported="" if reproduction.reproduced else reproduction.text)
    print(render_terminal(build_leaderboard(pd.DataFrame(rows), [declaration])), end="")
    if not reproduction.reproduced:
        print(f"self-reported until reproduced: the board ranks it once 'bench leaderboard verify {path.name} "
              "--sample K' has recomputed a sample of its cells on the machine that publishes the board and they "
              "matched (docs/submitting.md)")
