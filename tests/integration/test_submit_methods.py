"""``bench submit`` on a suite of training methods (dp_vit): one entry per method, each a row of one board.

As in ``test_submit.py``, made-up results are logged under the cells' real keys first, so
submitting reuses them and computes nothing.
"""

from __future__ import annotations

import re

import pytest
import yaml

from bench.cli import main
from bench.cli.submit_cmd import entry_names, suite_labels
from bench.scale.grid import load_suite
from leaderboard.reproduced import write_pins
from leaderboard.staleness import check_staleness
from leaderboard.store import load_entry
from tests.integration.test_submit import log_made_up_cells

TASK = "dp_vit_synth_objects"
METHODS = {"profile": "smoke", "seeds": [0, 1, 2], "benchmarks": [TASK], "mechanisms": [{"name": "identity"}],
           "methods": [{"grid": {"training.epsilon": ["inf"]}},
                       {"grid": {"training.epsilon": [3], "training.clipping": ["flat"]}}]}


@pytest.fixture(scope="module")
def env(tmp_path_factory, shared_cache):
    root = tmp_path_factory.mktemp("methods")
    suite = root / "methods.yaml"
    suite.write_text(yaml.safe_dump(METHODS))
    log_made_up_cells(suite, "identity", root / "results")
    return {"suite": suite, "results": root / "results", "entries": root / "entries", "cache": shared_cache}


def test_each_training_method_is_its_own_entry_recording_each_cells_own_settings(capsys, env):
    assert main(["submit", "--suite", str(env["suite"]), "--mechanism", "identity", "--name", "vit",
                 "--results-dir", str(env["results"]), "--cache-dir", str(env["cache"]),
                 "--entries", str(env["entries"])]) == 0
    out, err = capsys.readouterr()
    assert "6 cells of suite 'methods', 2 entries (one per training method)" in err
    assert "grid: 6 cells: 0 done, 6 skipped" in err
    entries = {e["name"]: e for e in map(load_entry, sorted(env["entries"].glob("*.json")))}
    assert sorted(entries) == ["vit + DP-SGD(flat, ε=3)", "vit + non-private"]
    # the names checked before any work (conformance) are the names written
    assert sorted(entry_names("vit", suite_labels(load_suite(env["suite"]))).values()) == sorted(entries)
    assert out.count("entry written: ") == 2
    private, public = entries["vit + DP-SGD(flat, ε=3)"], entries["vit + non-private"]
    for entry, training in ((private, {"training.epsilon": "3", "training.clipping": "flat"}),
                            (public, {"training.epsilon": "inf"})):
        assert entry["mechanism"] == "identity" and sorted(c["seed"] for c in entry["cells"]) == [0, 1, 2]
        assert {c["cell_key"] for c in entry["declaration"]["cells"]} == {c["cell_key"] for c in entry["cells"]}
        # A cell records its own method, so verifying or refreshing it plans the same cell (same key).
        for cell in entry["cells"]:
            assert {k: str(v) for k, v in cell["overrides"]["task"].items()} == training
        assert not check_staleness(entry).is_stale
    assert not {c["cell_key"] for c in private["cells"]} & {c["cell_key"] for c in public["cells"]}

    write_pins(env["entries"], [p.name for p in env["entries"].glob("*.json")])  # the maintainers' act: ranked
    assert main(["leaderboard", "show", "--results-dir", str(env["results"] / "none"), "--entries",
                 str(env["entries"]), "--suite", str(env["suite"])]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{TASK} · profile smoke · synthetic data")
    rows = [line for line in lines[2:] if line[:1].isdigit() or line.startswith(("–", "="))]
    assert len(rows) == 2 and all(row.rstrip().endswith("ranked") for row in rows), lines
    assert {re.split(r"\s{2,}", row.strip())[1] for row in rows} == set(entries)

