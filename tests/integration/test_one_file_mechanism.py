"""A mechanism written in one file, as the README shows, reaches the board (issue 62 part 3).

``bench submit --mechanism-file F`` says what it will compute and about how long it takes
before the work, and the entry carries F (its text and SHA-256): a fresh process that never
imported F shows the entry verified, loading the mechanism from the entry itself, and ranks
it once the maintainers pin or reproduce it. The cells are made up (logged under their real
keys), as in test_submit.py: what is tested is the path, not the numbers.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from bench.cli import main
from bench.core.registry import scoped
from leaderboard.entry_code import SOURCE_FIELD
from leaderboard.reproduced import write_pins
from tests.integration.test_submit import SUITE, log_made_up_cells

ROOT = Path(__file__).resolve().parents[2]


def readme_mechanism() -> str:
    """The README's "Your own mechanism, in one file", as written there."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(import torch\nfrom bench.interfaces import Mechanism.*?)```", readme, re.S)
    assert block, "the README's one-file mechanism"
    return block.group(1)


def show(entries: Path, cwd: Path) -> str:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "bench", "leaderboard", "show", "--entries", str(entries),
                           "--results-dir", str(cwd / "none")],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_one_file_mechanism_is_carried_by_its_entry_and_loaded_by_the_board(tmp_path, capsys, shared_cache):
    mechanism = tmp_path / "my_mask.py"
    mechanism.write_text(readme_mechanism(), encoding="utf-8")
    suite, results, entries = tmp_path / "small.yaml", tmp_path / "results", tmp_path / "entries"
    suite.write_text(yaml.safe_dump(SUITE))
    with scoped():
        from bench.testing.isolated import load_isolated

        load_isolated([mechanism])  # as submit loads it: never imported here (the cells' keys are the same)
        log_made_up_cells(suite, "my_mask", results)
        code = main(["submit", "--mechanism-file", str(mechanism), "--mechanism", "my_mask", "--suite", str(suite),
                     "--results-dir", str(results), "--cache-dir", str(shared_cache), "--entries", str(entries)])
    out, err = capsys.readouterr()
    assert code == 0, err
    # what it computes, said before the cells run
    planned = err.index("[bench] submit my_mask: 3 cells planned (suite 'small', profile smoke, seeds 0, 1, 2)")
    assert planned < err.index("grid: 3 cells")
    (path,) = entries.glob("*.json")
    entry = json.loads(path.read_text(encoding="utf-8"))
    source = entry[SOURCE_FIELD]
    assert source["file"] == "my_mask.py" and source["text"] == mechanism.read_text(encoding="utf-8")
    assert source["sha256"] == hashlib.sha256(mechanism.read_bytes()).hexdigest()
    assert entry["isolation"]["kind"] in ("bwrap", "process")  # submit ran it in an isolated worker

    # A fresh process has never imported my_mask.py: it loads it from the entry.
    mechanism.unlink()
    text = show(entries, tmp_path)
    row = next(line for line in text.splitlines() if " my_mask " in f" {line} ")
    assert "not registered" not in text and "self-reported: not reproduced" in row and row.split()[0] == "–"
    write_pins(entries, [path.name])  # the maintainers pin (or reproduce) it: ranked
    row = next(line for line in show(entries, tmp_path).splitlines() if " my_mask " in f" {line} ")
    assert row.split()[0] == "1" and row.rstrip().endswith("ranked")

    # A carried text that does not match its digest is not loaded: the entry is unverified.
    entry[SOURCE_FIELD]["text"] += "\n# changed\n"
    path.write_text(json.dumps(entry), encoding="utf-8")
    text = show(entries, tmp_path)
    assert "does not match its SHA-256" in text
