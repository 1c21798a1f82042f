"""``bench submit``: conformance gate, the suite's cells (reused when finished), one entry JSON."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml

from bench.cli import main
from bench.registry import scoped

TASK = "fewshot_synth_faces"
SUITE = {"description": "small submission suite", "profile": "smoke", "seeds": [0], "benchmarks": [TASK],
         "mechanisms": [{"name": "pixelate", "grid": {"block": [4, 8]}}]}


@pytest.fixture(scope="module")
def env(tmp_path_factory, shared_cache):
    root = tmp_path_factory.mktemp("submit")
    suite = root / "small.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    return {"root": root, "suite": suite, "results": root / "results", "entries": root / "entries", "cache": shared_cache}


def submit_argv(env, *extra: str) -> list[str]:
    return ["submit", "--suite", str(env["suite"]), "--results-dir", str(env["results"]), "--cache-dir",
            str(env["cache"]), "--entries", str(env["entries"]), *extra]


def test_submit_writes_an_entry_the_leaderboard_shows(capsys, env):
    assert main(submit_argv(env, "--mechanism", "pixelate", "--description", "mosaic")) == 0
    out, err = capsys.readouterr()
    assert "conformance passed" in err and "2 cells of suite 'small'" in err
    path = env["entries"] / next(p.name for p in env["entries"].glob("*.json"))
    assert f"entry written: {path} (2 cells)" in out
    entry = json.loads(path.read_text())
    assert entry["schema"] == 1 and entry["name"] == entry["mechanism"] == "pixelate"
    assert entry["suite"]["name"] == "small" and entry["suite"]["profile"] == "smoke" and entry["suite"]["seeds"] == [0]
    assert entry["conformance"]["passed"] and "determinism" in entry["conformance"]["checks"]
    assert entry["git_sha"] and entry["versions"]["torch"] and entry["description"] == "mosaic"
    assert set(entry["dataset_fingerprints"]) == {"synth_faces"}
    assert sorted(c["params"]["block"] for c in entry["cells"]) == [4, 8]
    for cell in entry["cells"]:
        assert cell["run_id"] and cell["mechanism"] == "pixelate" and 0 <= cell["privacy_score"] <= 1
        assert cell["dataset_fingerprint"] == entry["dataset_fingerprints"]["synth_faces"]

    assert main(["leaderboard", "show", "--format", "csv", "--results-dir", str(env["results"]),
                 "--entries", str(env["entries"])]) == 0
    csv = capsys.readouterr().out
    row = next(line for line in csv.splitlines() if ",pixelate," in line)
    assert "entry:pixelate" in row and ",2," in row


def test_resubmitting_reuses_the_finished_cells(capsys, env):
    assert main(submit_argv(env, "--mechanism", "pixelate")) == 0
    _, err = capsys.readouterr()
    assert "grid: 2 cells: 0 done, 2 skipped" in err
    entries = list(env["entries"].glob("*.json"))
    assert len(entries) == 1


def test_a_mechanism_not_in_the_suite_runs_at_its_defaults(capsys, env):
    argv = submit_argv(env, "--mechanism", "identity", "--name", "the clean <reference>",
                       "--entries", str(env["root"] / "other"))
    assert main(argv) == 0
    capsys.readouterr()
    (path,) = (env["root"] / "other").glob("*.json")
    entry = json.loads(path.read_text())
    assert entry["name"] == "the clean <reference>" and [c["params"] for c in entry["cells"]] == [{}]
    assert path.name.startswith("the-clean-reference-")


BROKEN = textwrap.dedent('''
    from bench.interfaces import Mechanism
    from bench.registry import register_mechanism


    @register_mechanism("inplace_submit")
    class InPlace(Mechanism):
        def apply(self, images, *, generator, boxes=None):
            images.zero_()
            return images
''')


def test_a_mechanism_that_fails_conformance_is_refused(capsys, env, tmp_path):
    plugin = tmp_path / "broken.py"
    plugin.write_text(BROKEN)
    results, entries = tmp_path / "results", tmp_path / "entries"
    with scoped():
        code = main(["submit", "--mechanism", "inplace_submit", "--mechanism-file", str(plugin), "--suite",
                     str(env["suite"]), "--results-dir", str(results), "--entries", str(entries)])
    _, err = capsys.readouterr()
    assert code == 2
    assert "[bench] conformance: input_untouched" in err
    assert err.strip().splitlines()[-1].startswith("bench: error: mechanism 'inplace_submit' fails")
    assert not entries.exists() and not results.exists()


def test_submit_user_errors(capsys, env, tmp_path):
    assert main(["submit", "--suite", str(env["suite"]), "--results-dir", str(tmp_path / "r")]) == 2
    assert "exactly one --mechanism" in capsys.readouterr().err
    assert main(["submit", "--mechanism", "pixelat", "--results-dir", str(tmp_path / "r")]) == 2
    assert "did you mean 'pixelate'" in capsys.readouterr().err
