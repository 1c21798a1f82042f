"""A sweep of wrong command lines over every subcommand: each is one line on stderr, exit 2, and writes nothing.

The cases are generated, not listed: :data:`BASES` holds one valid command line per
subcommand (accepted, it would start work), and each wrong line is a base with one mistake:

- generic, from the parser itself (so an option added later is swept too): an unknown
  option, a stray argument, every option that takes a value given without it or twice, an
  ``int`` option given text or a fraction, a ``choices`` option a value outside them, an empty
  path or name, a required option or argument left out;
- semantic, from a table per subcommand (:data:`SEMANTIC`): numbers out of range, names
  that are not registered, paths that cannot be read or written, malformed values, options
  that contradict each other, and hostile names (:data:`HOSTILE`: paths, control characters,
  shell and SQL text, 300 characters) in every option that names a registered thing.

Every case runs in-process through ``bench.cli.main`` in one project folder (also the current
folder), which holds a tracking store with two FINISHED runs, a file, a folder of images and
other fixtures. Work is never started: the places where a command would start it (a cell's
run, a grid's executor, a study, an audit, a release, a server) raise :class:`WorkStarted`,
and a case still running after :data:`LIMIT_S` seconds is stopped. A case is *clean* when it
exits 2 with one line on stderr (holding the kind's phrase), nothing on stdout, no traceback
and no file created, changed or removed. Run as a script, it prints the counts::

    .venv/bin/python tests/integration/test_wrong_command_lines.py
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

FS = "fewshot_synth_faces"
LONG = "x" * 300
"""A name over the 255 bytes a file system allows in one path component."""
LIMIT_S = 30
"""Seconds a case may run before it counts as accepted (work started)."""

BASES: dict[str, list[str]] = {
    "run": ["run", "--mechanism", "pixelate", "--task", FS, "--profile", "smoke"],
    "grid": ["grid", "--task", FS, "--mechanism", "pixelate", "--profile", "smoke"],
    "tune": ["tune", "--mechanism", "pixelate", "--task", FS, "--profile", "smoke", "--trials", "2"],
    "submit": ["submit", "--suite", "smoke", "--mechanism", "pixelate", "--seeds", "0,1,2", "--entries", "entries"],
    "audit": ["audit", "--mechanism", "dp_pix", "--device", "cpu"],
    "release": ["release", "--mechanism", "pixelate", "--in", "images", "--out", "released"],
    "show": ["show", "{run}"],
    "runs": ["runs"],
    "report": ["report"],
    "list": ["list"],
    "cache": ["cache", "verify"],
    "relocate": ["relocate"],
    "ui": ["ui", "--port", "{port}"],
    "mechanisms show": ["mechanisms", "show", "pixelate", "--out", "sheet.png"],
    "leaderboard build": ["leaderboard", "build", "--no-entries", "--out", "site"],
    "leaderboard serve": ["leaderboard", "serve", "--no-entries", "--port", "{port}"],
    "leaderboard show": ["leaderboard", "show", "--no-entries"],
    "leaderboard verify": ["leaderboard", "verify", "entry.json"],
}
"""One valid command line per subcommand (``bench --help`` lists them), run in the project folder: ``{run}`` is
its store's first run, ``{port}`` a free port, ``entry.json`` a copy of a shipped baseline entry."""

HOSTILE = ["../../../etc/passwd", "a/b", LONG, "two\nlines", "tab\there", "esc\x1b[31mred", "$(touch pwned)",
           "; rm -rf ~", "'; DROP TABLE runs; --", "naïve", "-", "with space", "*", "\u202egpj.exe"]
"""Names no registry holds: paths, control characters, shell and SQL text, a long one, look-alikes."""

NAMED = {  # options that name a registered thing, per subcommand: each gets every hostile name
    "run": ["--mechanism", "--task", "--profile", "--device", "--precision", "--attacks"],
    "grid": ["--mechanism", "--task", "--profile", "--suite", "--attacks", "--device"],
    "tune": ["--mechanism", "--task", "--profile", "--precision"],
    "submit": ["--mechanism", "--suite"],
    "audit": ["--mechanism", "--device"],
    "release": ["--mechanism", "--boxes", "--device"],
    "show": ["#1"],
    "mechanisms show": ["#2", "--dataset"],
    "leaderboard verify": ["#2"],
}
"""``#N``: the positional argument at index N of the base (the run id, the mechanism, the entry)."""

CELL = [  # options every cell command (run, tune, grid, submit) takes: (option, value, phrase)
    ("--param", "block=0", "block"), ("--param", "block=-3", "block"), ("--param", "block=abc", "block"),
    ("--param", "nosuch=1", "nosuch"), ("--param", "block", "NAME=V"), ("--param", "=4", "="),
    ("--param", "block=1e99", "block"), ("--param", "block=nan", "block"),
    ("--set", "task.epochs=0", "epochs"), ("--set", "task.epochs=-1", "epochs"), ("--set", "task.epochs=abc", "epochs"),
    ("--set", "task.nosuch=1", "nosuch"), ("--set", "epochs=3", "SECTION"), ("--set", "nosuch.x=1", "nosuch"),
    ("--set", "task.epochs", "="), ("--attacks", "nosuch", "nosuch"), ("--attacks", "none,face_reid", "none"),
    ("--attacks", ",", "--attacks"), ("--device", "cuda:abc", "cuda:abc"), ("--device", "cuda:-1", "cuda:-1"),
    ("--precision", "fp8", "fp8"), ("--profile", "huge", "huge"), ("--mechanism-file", "missing.py", "missing.py"),
    ("--mechanism-file", "afile", "afile"), ("--mechanism-file", "images", "images"),
    ("--mechanism-file", "nothing.py", "registers no mechanism"), ("--mechanism-file", "broken.py", "broken.py"),
    ("--results-dir", LONG, "over 255 bytes"), ("--results-dir", "afile", "afile"),
    ("--results-dir", "afile/sub", "afile"), ("--results-dir", "/proc/results", "not writable"),
    ("--cache-dir", LONG, "over 255 bytes"), ("--cache-dir", "afile", "afile"),
    ("--cache-dir", "/proc/cache", "not writable"), ("--data-root", LONG, "over 255 bytes"),
    ("--tracking-uri", "sqlite://", "in memory"), ("--tracking-uri", "sqlite:///:memory:", "in memory"),
    ("--tracking-uri", "sqlite:///{tmp}/missing/dir/x.db", "no folder"), ("--tracking-uri", "nosuch://x", "nosuch"),
]
SINGLE = [("--seed", "-1", "--seed"), ("--seed", str(2 ** 63), "--seed")]
MANY = [("--seeds", "a", "--seeds"), ("--seeds", "-1", "-1"), ("--seeds", "1,,2", "--seeds"),
        ("--seeds", ",", "--seeds"), ("--workers", "0", "--workers"), ("--workers", "-1", "--workers"),
        ("--gpus-per-cell", "0", "--gpus-per-cell"), ("--gpus-per-cell", "2", "--gpus-per-cell"),
        ("--suite", "afile", "afile"), ("--suite", "bad.yaml", "suite 'bad'"), ("--ray-address", "nosuch:1", "ray")]
SERVE = [("--port", "-1", "--port"), ("--port", "70000", "--port"), ("--entries", "missing", "missing"),
         ("--entries", "afile", "afile"), ("--suite", "nosuch", "nosuch"), ("--out", "afile", "afile"),
         ("--out", LONG, "over 255 bytes"), ("--out", "/proc/site", "not writable"), ("--profile", "nosuch", "nosuch")]
BOARD = [("--entries", "missing", "missing"), ("--entries", "afile", "afile"), ("--suite", "nosuch", "nosuch"),
         ("--suite", "bad.yaml", "suite 'bad'"), ("--profile", "nosuch", "nosuch"), ("--results-dir", "missing", "missing"),
         ("--data-root", LONG, "over 255 bytes"), ("--results-dir", LONG, "over 255 bytes")]

SEMANTIC: dict[str, list[tuple[str, str, str]]] = {
    "run": CELL + SINGLE,
    "tune": CELL + SINGLE + [("--trials", "0", "--trials"), ("--trials", "-1", "--trials"),
                             ("--population", "0", "--population"), ("--population", "1", "--population"),
                             ("--threads", "0", "--threads"), ("--threads", "-1", "--threads"),
                             ("--sampler-seed", "-1", "--sampler-seed"), ("--storage", "nosuch://x", "--storage"),
                             ("--storage", "journal:", "--storage"), ("--storage", "journal:afile/j.log", "afile"),
                             ("--study", "two\nlines", "--study")],
    "grid": CELL + MANY,
    "submit": CELL + MANY + [("--seeds", "0", "seeds"), ("--mechanism", "pixelate,blur", "one --mechanism"),
                             ("--entries", "afile", "afile"), ("--entries", LONG, "over 255 bytes"),
                             ("--description", "two\nlines", "--description")],
    "audit": [("--trials", "0", "--trials"), ("--trials", "-1", "--trials"), ("--trials", "abc", "--trials"),
              ("--trials", "1e99", "--trials"), ("--seed", "-1", "--seed"), ("--seed", "abc", "--seed"),
              ("--confidence", "0", "--confidence"), ("--confidence", "1", "--confidence"),
              ("--confidence", "1.5", "--confidence"), ("--confidence", "abc", "--confidence"),
              ("--confidence", "nan", "--confidence"), ("--image-size", "0", "--image-size"),
              ("--image-size", "100000", "--image-size"), ("--image-size", "abc", "--image-size"),
              ("--param", "block=0", "block"), ("--param", "nosuch=1", "nosuch"),
              ("--mechanism-file", "missing.py", "missing.py"), ("--mechanism-file", "nothing.py", "registers no")],
    "release": [("--in", "missing", "missing"), ("--in", "afile", "afile"), ("--in", "empty", "empty"),
                ("--out", "afile", "afile"), ("--out", "/proc/out", "not writable"), ("--out", LONG, "over 255"),
                ("--out", "images", "images"), ("--boxes", "missing.csv", "--boxes"),
                ("--fit-on", "missing", "--fit-on"), ("--param", "block=0", "block"), ("--param", "nosuch=1", "nosuch"),
                ("--mechanism-file", "missing.py", "missing.py"), ("--cache-dir", "afile", "afile")],
    "show": [("--results-dir", "missing", "no results database"), ("--results-dir", LONG, "over 255 bytes"),
             ("--results-dir", "afile", "afile"), ("--tracking-uri", "sqlite://", "in memory")],
    "runs": [("--limit", "-1", "--limit"), ("--since", "yesterday", "--since"), ("--since", "99x", "--since"),
             ("--since", "2026-13-45", "--since"), ("--results-dir", "missing", "no results database"),
             ("--results-dir", "afile", "afile"), ("--results-dir", LONG, "over 255 bytes")],
    "report": [("--columns", "nosuch", "nosuch"), ("--columns", "utility.", "utility."), ("--cells", "x.txt", "x.txt"),
               ("--out", "images", "is a folder"), ("--out", "/proc/r.md", "not writable"),
               ("--out", "afile/r.md", "afile"), ("--bundle", "missing.json", "missing.json"),
               ("--bundle", "afile", "afile"), ("--benchmark", "nosuch", "nosuch"), ("--profile", "nosuch", "nosuch"),
               ("--entries", "missing", "missing"), ("--plot", "afile", "afile"), ("--cells", "images", "images"),
               ("--results-dir", "afile", "afile"), ("--results-dir", LONG, "over 255 bytes")],
    "cache": [("--cache-dir", "missing", "missing"), ("--cache-dir", "afile", "afile"),
              ("--cache-dir", LONG, "over 255 bytes")],
    "relocate": [("--results-dir", "missing", "missing"), ("--results-dir", "afile", "afile"),
                 ("--results-dir", LONG, "over 255 bytes"), ("--results-dir", "images", "images")],
    "ui": [("--port", "0", "--port"), ("--port", "-1", "--port"), ("--port", "70000", "--port"),
           ("--results-dir", "missing", "missing"), ("--results-dir", LONG, "over 255 bytes"),
           ("--tracking-uri", "sqlite://", "in memory")],
    "mechanisms show": [("--n", "0", "--n"), ("--n", "-1", "--n"), ("--scale", "0", "--scale"),
                        ("--scale", "100000", "--scale"), ("--seed", "-1", "--seed"), ("--dataset", "nosuch", "nosuch"),
                        ("--sweep", "block=", "block"), ("--sweep", "block=0,1", "block"),
                        ("--param", "block=0", "block"), ("--out", "images", "images"), ("--out", "afile/s.png", "afile"),
                        ("--out", "/proc/s.png", "not writable"), ("--set", "task.data.nosuch=1", "nosuch")],
    "leaderboard build": BOARD + [("--out", "afile", "afile"), ("--out", "/proc/site", "not writable")],
    "leaderboard serve": SERVE,
    "leaderboard show": BOARD + [("--benchmark", "nosuch", "nosuch")],
    "leaderboard verify": [("--sample", "0", "--sample"), ("--sample", "-1", "--sample"), ("--sample", "abc", "--sample"),
                           ("--seed", "abc", "--seed"), ("--seed", "-1", "--seed"), ("--entries", "missing", "missing"),
                           ("--results-dir", "afile", "afile"), ("--cache-dir", "/proc/c", "not writable")],
}
"""Subcommand -> (option, a wrong value, a phrase the one line must hold); the value replaces the base's or is added."""

WHOLE = [  # whole command lines that are wrong as a whole: (id, argv, phrase)
    ("no-command", [], "required"), ("unknown-command", ["rnu"], "invalid choice"),
    ("leaderboard-no-action", ["leaderboard"], "required"), ("leaderboard-unknown-action", ["leaderboard", "bild"],
                                                             "invalid choice"),
    ("mechanisms-no-action", ["mechanisms"], "required"), ("mechanisms-unknown-action", ["mechanisms", "sho"],
                                                           "invalid choice"),
    ("list-unknown-kind", ["list", "mechanismz"], "invalid choice"), ("cache-unknown-action", ["cache", "purge"],
                                                                      "invalid choice"),
    ("show-no-such-run", ["show", "ffffffffffff"], "no run"), ("show-not-hex", ["show", "zzz"], "no run"),
    ("show-empty", ["show", ""], "no run"), ("verify-missing-entry", ["leaderboard", "verify", "missing.json"],
                                             "missing.json"),
    ("verify-not-json", ["leaderboard", "verify", "afile"], "afile"),
    ("verify-a-folder", ["leaderboard", "verify", "images"], "images"),
    ("verify-malformed-entry", ["leaderboard", "verify", "bad_entry.json"], "bad_entry.json"),
    ("verify-no-such-entry-name", ["leaderboard", "verify", "nosuch-entry"], "nosuch-entry"),
    ("board-entries-and-no-entries", ["leaderboard", "show", "--no-entries", "--entries", "entries"], "contradict"),
    ("report-bundle-and-plot", ["report", "--bundle", "b.json", "--plot", "plots"], "--plot"),
    ("grid-neither-suite-nor-lists", ["grid", "--profile", "smoke"], "--suite"),
    ("submit-refresh-missing-entries", ["submit", "--refresh", "--entries", "missing"], "missing"),
]


class WorkStarted(BaseException):
    """Raised where an accepted command line would start its work (a cell, a study, a server...)."""


def _stop(what: str):
    def started(*args, **kwargs):
        raise WorkStarted(what)
    return started


def _option_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction,
                                                             argparse._VersionAction))]


def _subparser(parser: argparse.ArgumentParser, words: list[str]) -> argparse.ArgumentParser:
    for word in words:
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = sub.choices[word]
    return parser


def with_option(base: list[str], option: str, value: str | None) -> list[str]:
    """Returns ``base`` with ``option``'s value replaced by ``value`` (added when absent; ``#N``: positional N)."""
    if option.startswith("#"):
        index = int(option[1:])
        return [*base[:index], value, *base[index + 1:]]
    if option in base and value is not None:
        at = base.index(option)
        return [*base[:at + 1], value, *base[at + 2:]]
    return [*base, option] + ([value] if value is not None else [])


def without(base: list[str], option: str) -> list[str]:
    """Returns ``base`` without ``option`` and its value."""
    at = base.index(option)
    return [*base[:at], *base[at + 2:]]


def generic_cases(name: str, base: list[str]) -> list[tuple[str, list[str], str]]:
    """The wrong lines the parser itself defines for one subcommand (see the module docstring)."""
    from bench.cli import build_parser
    from bench.cli.common import path_arg, text_arg
    from bench.cli.submit_cmd import entry_name_arg

    parser = _subparser(build_parser(), name.split())
    optional = any(a.nargs == "?" for a in _option_actions(parser) if not a.option_strings)  # `bench list KIND`
    cases = [("unknown-option", [*base, "--no-such-option"], "unrecognized arguments"),
             ("unknown-option-value", [*base, "--no-such-option=1"], "unrecognized arguments"),
             ("unknown-short", [*base, "-Z"], "unrecognized arguments"),
             ("stray-argument", [*base, "stray"], "invalid choice" if optional else "unrecognized arguments")]
    for action in _option_actions(parser):
        if not action.option_strings:
            if action.required and action.choices:
                cases.append((f"{action.dest}-not-a-choice", with_option(base, f"#{len(name.split())}", "nosuch"),
                              "invalid choice"))
            continue
        option = max(action.option_strings, key=len)
        if action.required:
            cases.append((f"missing{option}", without(base, option), "required"))
        if action.nargs == 0:
            cases.append((f"{option}=value", [*base, f"{option}=1"], "ignored explicit argument"))
            continue
        cases.append((f"{option}-without-value", [*base, option], "expected one argument"))
        typed = "1" if action.type is int else (sorted(action.choices)[0] if action.choices else "p")
        if not isinstance(action, argparse._AppendAction):
            cases.append((f"{option}-twice", with_option(base, option, typed) + [option, typed], "given twice"))
        if action.type is int:
            cases += [(f"{option}-{v}", with_option(base, option, v), "invalid int value") for v in ("abc", "1.5", "")]
        if action.choices:
            cases.append((f"{option}-not-a-choice", with_option(base, option, "nosuch"), "invalid choice"))
        if action.type in (path_arg, text_arg, entry_name_arg):
            cases += [(f"{option}-{kind}", with_option(base, option, v), "empty") for kind, v in (("empty", ""),
                                                                                                 ("blank", "  "))]
    return cases


def all_cases() -> list[tuple[str, list[str], str]]:
    """Every case: (id, argv, phrase), ids unique."""
    cases = [(f"whole:{i}", argv, phrase) for i, argv, phrase in WHOLE]
    for name, base in BASES.items():
        tag = name.replace(" ", "-")
        cases += [(f"{tag}:{i}", argv, phrase) for i, argv, phrase in generic_cases(name, base)]
        cases += [(f"{tag}:{option}={value[:24]!r}", with_option(base, option, value), phrase)
                  for option, value, phrase in SEMANTIC.get(name, [])]
        for option in NAMED.get(name, []):
            cases += [(f"{tag}:{option}-hostile-{i}", with_option(base, option, value), "")
                      for i, value in enumerate(HOSTILE)]
    return cases


CASES = all_cases()


def make_project(folder: Path) -> dict[str, str]:
    """Fills ``folder`` with a store of two FINISHED runs and the files the cases name; returns ``{run}``."""
    import json

    from PIL import Image

    from bench.core.result import Result
    from bench.storage.tracking import Tracker

    tracker = Tracker(folder / "results")
    runs = []
    for seed in (0, 1):
        result = Result(cell_key=f"{seed}abc", task=FS, dataset="synth_faces", mechanism="pixelate",
                        mechanism_version=1, params={"block": 8}, seed=seed, profile="smoke",
                        utility={"acc": 0.5, "acc_ci95": 0.02}, primary_metric="acc", attacks={"face_reid": {"top1": 0.2}},
                        privacy={"face_reid": 0.6}, privacy_score=0.6, claim=None, runtime_s=1.0, versions={},
                        git_sha="x", dataset_fingerprint="fp", synthetic=True, device="cpu",
                        created="2026-01-01T00:00:00+00:00")
        runs.append(tracker.log_cell(result, {"run": {"overrides": {}}}, {}))
    (folder / "afile").write_text("not a folder, not JSON, not Python\n")
    (folder / "images").mkdir()
    Image.new("RGB", (32, 32), (128, 128, 128)).save(folder / "images" / "a.png")
    (folder / "empty").mkdir()
    (folder / "entries").mkdir()
    (folder / "bad_entry.json").write_text(json.dumps({"schema": 2, "name": "team", "mechanism": "pixelate",
                                                      "cells": "not a list"}))
    shipped = sorted((Path(__file__).resolve().parents[2] / "leaderboard" / "entries").glob("*.json"))[0]
    (folder / "entry.json").write_bytes(shipped.read_bytes())  # verify records its verdict beside it: here
    (folder / "nothing.py").write_text("X = 1\n")
    (folder / "broken.py").write_text("def broken(:\n")
    (folder / "bad.yaml").write_text("- not\n- a suite\n")
    return {"run": runs[0], "tmp": str(folder)}


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Returns relative path -> (size, mtime) of everything under ``folder``."""
    return {str(p.relative_to(folder)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in folder.rglob("*")}


@contextlib.contextmanager
def no_work(monkeypatch: pytest.MonkeyPatch):
    """Makes every place that starts work raise :class:`WorkStarted`, and a case longer than :data:`LIMIT_S` stop."""
    import bench.audit
    import bench.cell.run
    import bench.cli.leaderboard_cmd
    import bench.cli.ui_cmd
    import bench.release.folder
    import bench.scale.executors
    from bench.storage.tracking import Tracker

    for owner, attr in ((bench.cell.run, "execute"), (Tracker, "start_cell"), (bench.scale.executors, "run_cells"),
                        (bench.audit, "audit_mechanism"), (bench.release.folder, "execute")):
        monkeypatch.setattr(owner, attr, _stop(f"{getattr(owner, '__name__', owner)}.{attr}"))
    server = types.SimpleNamespace(server_address=("127.0.0.1", 0), serve_forever=_stop("the board's server"),
                                   server_close=lambda: None)
    monkeypatch.setattr(bench.cli.leaderboard_cmd, "listen", lambda port, folder: server)
    guarded = types.ModuleType("subprocess")
    guarded.__dict__.update(subprocess.__dict__)
    guarded.Popen = _stop("bench ui's server")
    monkeypatch.setattr(bench.cli.ui_cmd, "subprocess", guarded)
    for name in ("BENCH_RESULTS", "BENCH_CACHE", "BENCH_ENTRIES", "BENCH_DATA", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)

    def too_long(signum, frame):
        raise WorkStarted(f"still running after {LIMIT_S} s")

    before = signal.signal(signal.SIGALRM, too_long)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def classify(argv: list[str], project: Path, phrase: str) -> tuple[str, str]:
    """Runs one line in the project folder; returns (clean | traceback | silent, why)."""
    from bench.cli import main
    from bench.core.registry import scoped

    before = snapshot(project)
    out, err = io.StringIO(), io.StringIO()
    signal.setitimer(signal.ITIMER_REAL, LIMIT_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), scoped():
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code
    except WorkStarted as exc:
        return "silent", f"accepted: {exc}"
    except Exception as exc:  # noqa: BLE001 (what the sweep looks for)
        return "traceback", f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    last = lines[-1][:300] if lines else ""
    if "Traceback" in err.getvalue():
        return "traceback", last
    changed = sorted(set(snapshot(project).items()) ^ set(before.items()))
    if code != 2 or len(lines) != 1 or out.getvalue() or changed:
        return "silent", (f"exit {code}, {len(lines)} stderr line(s), {len(out.getvalue())} chars on stdout, "
                          f"changed {[c[0] for c in changed][:3]}: {last}")
    if phrase not in lines[0]:
        return "silent", f"the line lacks {phrase!r}: {last}"
    return "clean", last


def free_port() -> str:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def filled(argv: list[str], values: dict[str, str]) -> list[str]:
    return [a.replace("{run}", values["run"]).replace("{tmp}", values["tmp"]).replace("{port}", values["port"])
            for a in argv]


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The project folder the cases run in (made once: every case must leave it as it was)."""
    folder = tmp_path_factory.mktemp("project")
    values = make_project(folder)
    return folder, {**values, "port": free_port()}


def test_the_sweep_covers_every_subcommand_with_400_cases():
    from bench.cli import build_parser

    (top,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    commands = set()
    for word, sub in top.choices.items():
        inner = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
        commands |= {f"{word} {action}" for action in inner[0].choices} if inner else {word}
    assert commands == set(BASES), commands ^ set(BASES)
    assert len(CASES) >= 400 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name", list(BASES))
def test_each_base_line_is_accepted(name, project, tmp_path, monkeypatch):
    """The mistakes are the only thing wrong: each base, unchanged, starts its work or answers (not exit 2)."""
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(project[0], folder)
    from bench.storage.tracking.relocate import relocate

    relocate(folder / "results")
    monkeypatch.chdir(folder)
    with no_work(monkeypatch):
        kind, why = classify(filled(BASES[name], {**project[1], "tmp": str(folder)}), folder, "")
    assert kind == "silent" and (why.startswith("accepted") or why.split(",")[0] in ("exit 0", "exit 1")), (kind, why)


@pytest.mark.parametrize("case, argv, phrase", CASES, ids=[c[0] for c in CASES])
def test_a_wrong_command_line_is_one_line_exit_2_and_writes_nothing(case, argv, phrase, project, monkeypatch):
    folder, values = project
    monkeypatch.chdir(folder)
    with no_work(monkeypatch):
        kind, why = classify(filled(argv, values), folder, phrase)
    assert kind == "clean", f"{case}: {kind}: {why}"


def main(args: list[str]) -> int:
    """Classifies every case (or those whose id holds ``--only TEXT``) and prints the counts."""
    import tempfile

    from _pytest.monkeypatch import MonkeyPatch

    only = args[args.index("--only") + 1] if "--only" in args else None
    counts = {"clean": 0, "traceback": 0, "silent": 0}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="wrong-lines-") as tmp:
        folder = Path(tmp) / "project"
        folder.mkdir()
        values = {**make_project(folder), "port": free_port()}
        patch = MonkeyPatch()
        patch.chdir(folder)
        with no_work(patch):
            for case, argv, phrase in CASES:
                if only is not None and only not in case:
                    continue
                kind, why = classify(filled(argv, values), folder, phrase)
                counts[kind] += 1
                if kind != "clean" or "-v" in args:
                    print(f"{kind:<9} {case:<44} {why}", flush=True)
        patch.undo()
    print(f"{sum(counts.values())} wrong command lines in {time.perf_counter() - started:.1f} s: {counts['clean']} "
          f"clean, {counts['traceback']} traceback, {counts['silent']} silent")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.exit(main(sys.argv[1:]))
