"""The tables in docs/ are bench report's output on the committed cells bundles, regenerated here.

A generated table sits between ``<!-- bench report ARGS -->`` and ``<!-- end bench report -->``;
ARGS is the command line after ``bench report`` (run from the repository root). Editing a
number by hand, or changing the report code without regenerating the docs, fails here.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from bench.cli import main

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- bench report (?P<args>[^\n]*?) -->\n(?P<body>.*?)<!-- end bench report -->", re.S)


def _blocks():
    for doc in sorted((ROOT / "docs").glob("*.md")):
        for match in BLOCK.finditer(doc.read_text(encoding="utf-8")):
            yield pytest.param(doc, match["args"], match["body"], id=f"{doc.name}:{match['args'][:60]}")


def test_reid_doc_has_generated_tables():
    assert sum(1 for p in _blocks() if p.values[0].name == "reid.md") >= 2


@pytest.mark.parametrize("doc, args, body", list(_blocks()))
def test_doc_table_is_what_bench_report_prints(doc, args, body, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["report", *shlex.split(args)]) == 0
    assert capsys.readouterr().out == body, f"{doc.name}: regenerate with: bench report {args}"


def test_reid_doc_analysis_tables_are_reid_report_output_on_the_bundle(capsys, monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("reid_report", ROOT / "benchmarks" / "reid_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.chdir(ROOT)
    assert module.main(["--bundle", "docs/reid_cells.json"]) == 0
    printed = capsys.readouterr().out
    doc = (ROOT / "docs" / "reid.md").read_text(encoding="utf-8")
    for title in ("mAP decrease against the clean models of the same seed", "mAP of every model x gallery combination"):
        start = printed.index(f"### {title}")
        table = printed[start:printed.index("\n### ", start + 4)].strip()
        assert table in doc, f"docs/reid.md: regenerate '{title}' with python benchmarks/reid_report.py --bundle docs/reid_cells.json"
