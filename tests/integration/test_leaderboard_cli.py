"""``bench leaderboard build | serve | show`` from real MLflow runs plus an entry; hostile names stay text."""

from __future__ import annotations

import dataclasses
import json
import re
import signal
import subprocess
import sys
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bench.cli import main
from bench.interfaces import Result
from bench.tracking import Tracker

ROOT = Path(__file__).resolve().parents[2]
TASK = "fewshot_synth_faces"
XSS = "<script>alert(1)</script>"
XSS_ENTRY = '<script>alert("entry")</script>'


class _Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.scripts: list[dict[str, str | None]] = []
        self.text: list[str] = []
        self.handlers: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            self.scripts.append(dict(attrs))
        self.handlers += [name for name, _ in attrs if name.startswith("on")]

    def handle_data(self, data):
        self.text.append(data)


def parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def fake_result(template: Result, mechanism: str, utility: float, privacy: float, seed: int) -> Result:
    """A result row for a made-up mechanism (names the registry would refuse)."""
    return dataclasses.replace(
        template, mechanism=mechanism, params={"level": f"{utility}</script><!--"}, seed=seed,
        cell_key=f"fake{abs(hash((mechanism, utility, seed))) % 10**12:012d}",
        utility={**template.utility, template.primary_metric: utility}, privacy_score=privacy,
        privacy={name: privacy for name in template.privacy},
    )


@pytest.fixture(scope="module")
def board(shared_cache, tmp_path_factory):
    """A results dir with three real smoke cells and two hostile-named runs, plus one hostile entry."""
    root = tmp_path_factory.mktemp("board")
    results, entries = root / "results", root / "entries"
    assert main(["grid", "--suite", "smoke", "--seeds", "0", "--mechanism", "identity,pixelate",
                 "--results-dir", str(results), "--cache-dir", str(shared_cache)]) == 0
    tracker = Tracker(results)
    experiment = tracker.experiment_id
    run = tracker.client.search_runs([experiment], filter_string="attributes.status = 'FINISHED'")[0]
    template = tracker.load_result(run.info.run_id)
    for seed, (u, p) in enumerate([(0.5, 0.6), (0.4, 0.9)]):
        tracker.log_cell(fake_result(template, XSS, u, p, seed), {}, {})
    entries.mkdir()
    cells = [{**fake_result(template, XSS_ENTRY, u, p, seed).to_dict(), "run_id": f"remote-{seed}"}
             for seed, (u, p) in enumerate([(0.45, 0.7), (0.35, 0.95)])]
    entry = {"schema": 1, "name": "team <b>", "mechanism": XSS_ENTRY, "cells": cells}
    (entries / "team.json").write_text(json.dumps(entry))
    return {"results": results, "entries": entries, "site": root / "site", "template": template}


def lb(board, *argv: str) -> list[str]:
    return ["leaderboard", *argv, "--results-dir", str(board["results"]), "--entries", str(board["entries"])]


def test_build_writes_site_markdown_and_csv(capsys, board):
    assert main(lb(board, "build", "--out", str(board["site"]))) == 0
    out = capsys.readouterr().out
    site = board["site"]
    assert str(site / "index.html") in out
    benchmark_pages = list((site / "benchmarks").glob("*.html"))
    assert len(benchmark_pages) == 1 and len(list((site / "plots").glob("*.png"))) == 1
    assert len(list((site / "mechanisms").glob("*.html"))) == 4
    assert list((site / "sheets").glob("*.png")), "no sample sheet copied from the runs"
    markdown = (site / "leaderboard.md").read_text()
    assert "## fewshot\\_synth\\_faces" in markdown and "pixelate" in markdown and "identity" in markdown
    assert "<script>" not in markdown
    csv = (site / "leaderboard.csv").read_text()
    assert "entry:team <b>" in csv and "local" in csv
    header = csv.splitlines()[0].split(",")
    assert {"mechanism", "claim_type", "best_utility_p50", "best_utility_p90", "hv_mean", "hv_std", "n_cells",
            "profiles"} <= set(header)


def test_hostile_names_render_as_text_in_every_page(capsys, board):
    assert main(lb(board, "build", "--out", str(board["site"]))) == 0
    capsys.readouterr()
    pages = sorted(board["site"].rglob("*.html"))
    assert len(pages) == 6
    for path in pages:
        page = parse(path)
        raw = path.read_text(encoding="utf-8")
        assert "<script>alert" not in raw, path
        assert page.handlers == [], path
        for script in page.scripts:
            assert script.get("type") == "application/json" or (script.get("src") or "").endswith("static/table.js"), path
    shown = {path.name: "".join(parse(path).text) for path in pages}
    index = shown["index.html"]
    assert XSS in index and XSS_ENTRY in index
    benchmark = next(text for name, text in shown.items() if name.startswith("fewshot"))
    assert XSS in benchmark and XSS_ENTRY in benchmark
    assert any(text.count(XSS) and "</script><!--" in text for name, text in shown.items() if name.startswith("script"))


def test_show_prints_the_table(capsys, board):
    assert main(lb(board, "show")) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{TASK}  (profile: smoke)")
    lines = out.splitlines()
    assert re.match(r"rank\s+mechanism\s+claim\s+HV mean", lines[1])
    assert any("pixelate" in line for line in lines) and any(XSS in line for line in lines)
    assert main(lb(board, "show", "--format", "csv")) == 0
    csv = capsys.readouterr().out
    assert csv.startswith("benchmark,rank,mechanism")
    assert main(lb(board, "show", "--format", "markdown", "--no-entries")) == 0
    markdown = capsys.readouterr().out
    assert "pixelate" in markdown and "entry" not in markdown


def test_show_user_errors_are_one_line(capsys, board, tmp_path):
    assert main(lb(board, "show", "--benchmark", "nope")) == 2
    assert "no results for benchmark 'nope'" in capsys.readouterr().err
    assert main(["leaderboard", "show", "--results-dir", str(tmp_path / "none"), "--no-entries"]) == 2
    err = capsys.readouterr().err
    assert "no finished cells" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "none").exists()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.json").write_text("{not json")
    assert main(["leaderboard", "show", "--results-dir", str(board["results"]), "--entries", str(bad)]) == 2
    assert "entry x.json: not a readable JSON file" in capsys.readouterr().err


def test_entry_replaces_the_local_run_of_the_same_cell(board, tmp_path):
    from leaderboard.store import combine, entries_frame, runs_frame

    runs = runs_frame(Tracker(board["results"]))
    local = runs[runs["mechanism"] == "pixelate"].iloc[0]
    entry = {"schema": 1, "name": "mine", "mechanism": "pixelate",
             "cells": [{**json.loads(json.dumps(local.drop(["source", "run_id"]).to_dict())), "run_id": local["run_id"]}]}
    (tmp_path / "mine.json").write_text(json.dumps(entry))
    both = combine(runs, entries_frame(tmp_path))
    assert len(both) == len(runs)
    assert both.loc[both["cell_key"] == local["cell_key"], "source"].tolist() == ["entry:mine"]


def test_serve_answers_on_loopback(board):
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", *lb(board, "serve", "--port", "0", "--out", str(board["site"]), "--rebuild")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline()
        match = re.search(r"at (http://127\.0\.0\.1:(\d+)/)", line)
        assert match, line + proc.stderr.read() if proc.poll() is not None else line
        url = match.group(1)
        with urllib.request.urlopen(url + "index.html", timeout=30) as response:
            assert response.status == 200
            body = response.read().decode()
        assert "Privacy–utility leaderboard" in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
        with urllib.request.urlopen(url + "leaderboard.csv", timeout=30) as response:
            assert response.read().decode().startswith("benchmark,rank")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert proc.returncode == 0
