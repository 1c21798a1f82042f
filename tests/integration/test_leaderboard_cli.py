"""``bench leaderboard build | serve | show`` over MLflow runs, a suite and an entry; hostile names stay text.

The runs are logged through the real Tracker with results made up here (no cell is
computed): their cell keys are those of a small suite's cells, so the suite's local runs
form declared entries, exactly as after ``bench grid --suite FILE``.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import signal
import subprocess
import sys
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from bench.cli import main
from bench.core.interfaces import Result
from bench.storage.tracking import Tracker
from leaderboard.pareto import hypervolume_2d

ROOT = Path(__file__).resolve().parents[2]
TASK = "fewshot_synth_faces"
XSS = "<script>alert(1)</script>"
XSS_ENTRY = '<script>alert("entry")</script>'
SUITE = {"description": "leaderboard test suite", "profile": "smoke", "seeds": [0, 1, 2], "benchmarks": [TASK],
         "mechanisms": [{"name": "pixelate", "grid": {"block": [4, 8]}}, {"name": "blur", "grid": {"radius": [1.0, 3.0]}}]}
CURVES = {"pixelate": {4: (0.62, 0.55), 8: (0.45, 0.80)}, "blur": {1.0: (0.60, 0.30), 3.0: (0.40, 0.52)}}
ENTRY_CURVE = [(0.45, 0.7), (0.35, 0.95)]
SEED_SHIFT = {0: -0.02, 1: 0.015, 2: 0.0}


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


def made_up(key: str, mechanism: str, params: dict, seed: int, utility: float, privacy: float | None, **changes) -> Result:
    return Result(
        cell_key=key, task=TASK, dataset="synth_faces", mechanism=mechanism, mechanism_version=1, params=params,
        seed=seed, profile="smoke", utility={"acc": utility, "acc_ci95": 0.01}, primary_metric="acc",
        attacks={"face_reid": {"top1": 0.2, "top1_clean": 0.4, "chance": 0.1}}, privacy={"face_reid": privacy},
        privacy_score=privacy, claim=None, runtime_s=1.0, versions={"torch": "x"}, git_sha="x",
        dataset_fingerprint="fp-synth", synthetic=True, device="cpu", created="2026-01-01T00:00:00+00:00", **changes,
    )


def png() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 4), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


CONFIG = {"task": {}, "attacks": {"face_reid": {}}, "run": {"overrides": "{}", "attacks": "None"}}


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """The suite's 12 cells as runs, plus a tune trial, an ad-hoc run, an old-schema run and a hostile entry."""
    from bench.scale.grid import Placement, expand, load_suite

    root = tmp_path_factory.mktemp("board")
    results, entries = root / "results", root / "entries"
    suite_file = root / "lbsuite.yaml"
    suite_file.write_text(yaml.safe_dump(SUITE))
    tracker = Tracker(results)
    sheet = {"samples.png": png()}
    for cell in expand(load_suite(suite_file), Placement(results_dir=results)):
        cfg = cell.config
        u, p = CURVES[cfg.mechanism][next(iter(cfg.params.values()))]
        tracker.log_cell(made_up(cell.key, cfg.mechanism, dict(cfg.params), cfg.seed, u + SEED_SHIFT[cfg.seed], p),
                         CONFIG, sheet)
    tracker.log_cell(made_up("trial", "pixelate", {"block": 5}, 0, 0.99, 0.99, eval_split="val"), CONFIG, {})
    tracker.log_cell(made_up("adhoc", XSS, {"level": "</script><!--"}, 0, 0.5, None,
                             privacy_flags={"face_reid": "attack too weak"}), CONFIG, sheet)
    tracker.log_cell(dataclasses.replace(made_up("old", "pixelate", {"block": 16}, 0, 0.3, 1.0), schema=1), CONFIG, {})
    entries.mkdir()
    cells = [{**made_up(f"e{seed}{level}", XSS_ENTRY, {"level": level}, seed, u + SEED_SHIFT[seed], p).to_dict(),
              "run_id": f"remote-{seed}-{level}"}
             for seed in (0, 1, 2) for level, (u, p) in enumerate(ENTRY_CURVE)]
    declaration = {"suite": "standard", "profile": "smoke", "seeds": [0, 1, 2], "cells": [
        {"cell_key": c["cell_key"], "benchmark": TASK, "seed": c["seed"], "params": c["params"]} for c in cells]}
    entry = {"schema": 2, "name": "team <b>", "mechanism": XSS_ENTRY, "cells": cells, "declaration": declaration}
    (entries / "team.json").write_text(json.dumps(entry))
    return {"results": results, "entries": entries, "site": root / "site", "suite": suite_file}


def lb(board, *argv: str) -> list[str]:
    return ["leaderboard", *argv, "--results-dir", str(board["results"]), "--entries", str(board["entries"]),
            "--suite", str(board["suite"])]


def test_show_ranks_the_suite_entries_and_the_submitted_one(capsys, board):
    assert main(lb(board, "show")) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == f"{TASK} · profile smoke · synthetic data (fp-synth) · attacks: face_reid; settings: defaults"
    assert re.match(r"rank\s+entry\s+claim\s+HV mean\s+95% CI", lines[1])
    # A seed shifts every entry alike, so the paired differences barely vary: all separated. The hand-made
    # entry (its mechanism unregistered, no result digests) is unverified: listed, never ranked.
    assert [line.split()[:2] for line in lines[2:5]] == [["1", "lbsuite/pixelate"], ["2", "lbsuite/blur"], ["–", "team"]]
    statuses = ["ranked", "ranked", "unverified: mechanism '.*' is not registered here.*"]
    places = ["1, 1, 1", "2, 2, 2", "–"]  # the same order on every seed; an unranked entry has no place
    for line, curve, status, place in zip(lines[2:5], [CURVES["pixelate"].values(), CURVES["blur"].values(),
                                                       ENTRY_CURVE], statuses, places):
        mean = sum(hypervolume_2d([(u + SEED_SHIFT[s], p) for u, p in curve]) for s in SEED_SHIFT) / 3
        assert re.search(rf"empirical only\s+{mean:.3f}\s+\[0\.\d+, 0\.\d+\]\s+0\.\d+\s+{place}\s+3/3\s+2\s+0\s+"
                         rf"{status}$", line)
    assert "team <b>" in lines[4] and "trial" not in out and XSS not in out
    # What the board can detect, from its own seeds (issue 55), then how ranks are read.
    assert lines[5].startswith("2 rank levels among 2 ranked entries; minimum detectable hypervolume difference ")
    assert lines[-1].startswith("Rank: 1 + the number of entries") and len(lines) == 8
    warnings = [line for line in err.splitlines() if line.startswith("[bench] warning:")]
    assert warnings == ["[bench] warning: 1 result(s) of schema 1 skipped (1 in the MLflow runs): they were scored "
                        "with the old formula (a useless attack counted as privacy 1.0); rerun them to include them"]


def test_exploration_lists_what_is_never_ranked(capsys, board):
    assert main(lb(board, "show", "--exploration")) == 0
    out = capsys.readouterr().out
    assert "exploration, not ranked" in out.splitlines()[0]
    assert re.search(r"pixelate\s+block=5\s+0\s+val\s+0\.9900\s+0\.9900\s+tuning cell \(validation split\)", out)
    assert re.search(r"\s0\s+test\s+0\.5000\s+attack too weak\s+not a declared configuration", out)
    assert main(lb(board, "show", "--exploration", "--format", "csv")) == 0
    csv = capsys.readouterr().out
    assert csv.startswith("benchmark,profile,data,settings,precision,mechanism") and csv.count("\n") == 3


def test_build_writes_site_markdown_and_csv(capsys, board):
    assert main(lb(board, "build", "--out", str(board["site"]))) == 0
    out = capsys.readouterr().out
    site = board["site"]
    assert str(site / "index.html") in out and str(site / "exploration.html") in out
    assert len(list((site / "boards").glob("*.html"))) == 1 and len(list((site / "plots").glob("*.png"))) == 1
    assert len(list((site / "mechanisms").glob("*.html"))) == 4
    assert list((site / "sheets").glob("*.png")), "no sample sheet copied from the runs"
    markdown = (site / "leaderboard.md").read_text()
    assert "## fewshot\\_synth\\_faces · profile smoke · synthetic data (fp-synth)" in markdown
    assert "| 1 | lbsuite/pixelate | pixelate |" in markdown and "<script>" not in markdown
    csv = (site / "leaderboard.csv").read_text()
    header = csv.splitlines()[0].split(",")
    assert header[:9] == ["board", "benchmark", "profile", "data", "settings", "precision", "rank", "tied", "entry"]
    assert "entry:team <b>" in csv and ",local" in csv


def test_hostile_names_render_as_text_in_every_page(capsys, board):
    assert main(lb(board, "build", "--out", str(board["site"]))) == 0
    capsys.readouterr()
    pages = sorted(board["site"].rglob("*.html"))
    assert len(pages) == 7
    for path in pages:
        page = parse(path)
        raw = path.read_text(encoding="utf-8")
        assert "<script>alert" not in raw, path
        assert page.handlers == [], path
        for script in page.scripts:
            assert script.get("type") == "application/json" or (script.get("src") or "").endswith("static/table.js"), path
    shown = {path.name: "".join(parse(path).text) for path in pages}
    assert XSS in shown["index.html"] and XSS_ENTRY in shown["index.html"]
    board_page = next(text for name, text in shown.items() if name.startswith("fewshot"))
    assert XSS_ENTRY in board_page and "team <b>" in board_page and XSS not in board_page
    assert XSS in shown["exploration.html"] and "</script><!--" in shown["exploration.html"]


def test_show_user_errors_are_one_line(capsys, board, tmp_path):
    assert main(lb(board, "show", "--benchmark", "nope")) == 2
    assert "no results for benchmark 'nope'" in capsys.readouterr().err
    assert main(lb(board, "show", "--exploration", "--format", "markdown")) == 2
    assert "--exploration prints text or csv" in capsys.readouterr().err
    assert main(["leaderboard", "show", "--results-dir", str(tmp_path / "none"), "--no-entries"]) == 2
    err = capsys.readouterr().err
    assert "no finished cells" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "none").exists()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.json").write_text("{not json")
    assert main(["leaderboard", "show", "--results-dir", str(board["results"]), "--entries", str(bad)]) == 2
    assert "entry x.json: not a readable JSON file" in capsys.readouterr().err
    assert main(lb(board, "show", "--suite", str(tmp_path / "missing.yaml"))) == 2
    assert "no suite file" in capsys.readouterr().err


def test_serve_answers_on_loopback(board):
    proc = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-m", "bench",
         *lb(board, "serve", "--port", "0", "--out", str(board["site"]), "--rebuild")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # A suite started as a background job inherits SIGINT ignored, and Python then installs
        # no KeyboardInterrupt handler: give the server Ctrl-C back, as a terminal has it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
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
            assert response.read().decode().startswith("board,benchmark")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler writes every thread's stack to stderr
            proc.wait(timeout=30)
    err = proc.stderr.read()
    assert proc.returncode == 0, err


def report_argv(board, *argv: str) -> list[str]:
    return ["report", "--results-dir", str(board["results"]), "--entries", str(board["entries"]), "--suite",
            str(board["suite"]), *argv]


def test_report_plot_writes_the_site_plots(capsys, board, tmp_path):
    plots = tmp_path / "report" / "plots"
    assert main(report_argv(board, "--plot", str(plots))) == 0
    captured = capsys.readouterr()
    assert "| pixelate | block=4 | 3 |" in captured.out
    svgs = sorted(plots.glob("*.svg"))
    assert len(svgs) == 1
    assert {p.name for p in plots.iterdir()} == {svgs[0].name, svgs[0].with_suffix(".json").name}
    assert f"[bench] plot: {svgs[0]}" in captured.err
    site = tmp_path / "site"
    assert main(lb(board, "build", "--out", str(site))) == 0
    capsys.readouterr()
    assert [p.name for p in (site / "plots").glob("*.svg")] == [svgs[0].name]
    sidecar = json.loads(svgs[0].with_suffix(".json").read_text(encoding="utf-8"))
    assert sidecar == json.loads((site / "plots" / svgs[0].with_suffix(".json").name).read_text(encoding="utf-8"))
    assert {p["entry"] for p in sidecar["points"]} == {"lbsuite/pixelate", "lbsuite/blur", "team <b>"}
    assert sidecar["mark"] == "SYNTHETIC DATA · profile smoke" and all(p["x_ci"] for p in sidecar["points"])
    svg = svgs[0].read_text(encoding="utf-8")
    assert "<script" not in svg and 'id="point-0"' in svg and 'id="xerr-0"' in svg


def test_report_plot_into_a_file_is_one_line_before_any_work(capsys, tmp_path):
    a_file = tmp_path / "plots.txt"
    a_file.write_text("not a folder")
    for target, says in ((a_file, f"--plot {a_file} is a file, not a folder"),
                         (a_file / "sub", f"--plot {a_file / 'sub'}: {a_file} is a file, so no folder can be created")):
        assert main(["report", "--results-dir", str(tmp_path / "none"), "--plot", str(target)]) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "none").exists()
