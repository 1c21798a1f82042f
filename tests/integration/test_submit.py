"""``bench submit``: protocol and conformance gates, the suite's cells (reused when finished), one entry JSON.

The fast tests log made-up results under the suite's real cell keys first, so that submit
reuses them (as after an earlier ``bench grid --suite``) and computes nothing; the slow one
computes the three smoke cells.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path

import pytest
import yaml

from bench.cli import main
from bench.core.interfaces import Result
from bench.core.registry import scoped
from bench.storage.tracking import Tracker
from leaderboard.reproduced import write_pins
from leaderboard.table import RANK_LINE

TASK = "fewshot_synth_faces"
SUITE = {"description": "small submission suite", "profile": "smoke", "seeds": [0, 1, 2], "benchmarks": [TASK],
         "mechanisms": [{"name": "pixelate", "grid": {"block": [8]}}]}


def made_up(cell, utility: float, privacy: float) -> Result:
    cfg = cell.config
    return Result(
        cell_key=cell.key, task=cfg.task, dataset="synth_faces", mechanism=cfg.mechanism, mechanism_version=1,
        params=dict(cfg.params), seed=cfg.seed, profile=cfg.profile, utility={"acc": utility, "acc_ci95": 0.02},
        primary_metric="acc", attacks={"face_reid": {"top1": 0.2}}, privacy={"face_reid": privacy},
        privacy_score=privacy, claim=None, runtime_s=1.0, versions={"torch": "x"}, git_sha="x",
        dataset_fingerprint="fp-synth", synthetic=True, device="cpu", created="2026-01-01T00:00:00+00:00",
    )


def log_made_up_cells(suite_file, mechanism: str, results) -> None:
    """Logs a result for every cell ``bench submit`` will need, under the cells' real keys."""
    from bench.cli.submit_cmd import submission_suite
    from bench.scale.grid import Placement, expand

    tracker = Tracker(results)
    for cell in expand(submission_suite(str(suite_file), mechanism, None), Placement(results_dir=results)):
        tracker.log_cell(made_up(cell, 0.5 + 0.01 * cell.config.seed, 0.6), {"run": {"overrides": {}}}, {})


@pytest.fixture(scope="module")
def env(tmp_path_factory, shared_cache):
    root = tmp_path_factory.mktemp("submit")
    suite = root / "small.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    log_made_up_cells(suite, "pixelate", root / "results")
    log_made_up_cells(suite, "identity", root / "results")
    return {"root": root, "suite": suite, "results": root / "results", "entries": root / "entries", "cache": shared_cache}


def submit_argv(env, *extra: str) -> list[str]:
    entries = [] if "--entries" in extra else ["--entries", str(env["entries"])]  # an option is given once
    return ["submit", "--suite", str(env["suite"]), "--results-dir", str(env["results"]), "--cache-dir",
            str(env["cache"]), *entries, *extra]


def test_submit_writes_an_entry_the_leaderboard_ranks(capsys, env):
    assert main(submit_argv(env, "--mechanism", "pixelate", "--description", "mosaic")) == 0
    out, err = capsys.readouterr()
    assert "conformance passed" in err and "3 cells of suite 'small'" in err
    assert "grid: 3 cells: 0 done, 3 skipped" in err
    path = env["entries"] / next(p.name for p in env["entries"].glob("*.json"))
    assert f"entry written: {path} (3 cells)" in out
    entry = json.loads(path.read_text())
    assert entry["schema"] == 2 and entry["name"] == entry["mechanism"] == "pixelate"
    assert entry["suite"]["name"] == "small" and entry["suite"]["profile"] == "smoke"
    assert entry["suite"]["seeds"] == [0, 1, 2] and entry["suite"]["overrides"] == {}
    declaration = entry["declaration"]
    assert declaration["configurations"] == [{"block": 8}] and declaration["seeds"] == [0, 1, 2]
    assert declaration["k_max"] == 16 and declaration["profile"] == "smoke"
    assert sorted(c["cell_key"] for c in declaration["cells"]) == sorted(c["cell_key"] for c in entry["cells"])
    assert entry["conformance"]["passed"] and "determinism" in entry["conformance"]["checks"]
    assert entry["audit"] is None
    assert entry["git_sha"] and entry["versions"]["torch"] and entry["description"] == "mosaic"
    assert entry["dataset_fingerprints"] == {"synth_faces": "fp-synth"}
    assert sorted(c["seed"] for c in entry["cells"]) == [0, 1, 2]
    for cell in entry["cells"]:
        assert cell["run_id"] and cell["mechanism"] == "pixelate" and cell["eval_split"] == "test"
        assert cell["privacy_score"] is None or 0 <= cell["privacy_score"] <= 1
        assert cell["dataset_fingerprint"] == entry["dataset_fingerprints"]["synth_faces"]
    board_lines = out.splitlines()[1:]
    assert board_lines[0].startswith(f"{TASK} · profile smoke · synthetic data")
    # self-reported until reproduced (issue 62): listed, never ranked, and submit says what ranks it
    assert board_lines[2].split()[:2] == ["–", "pixelate"] and "self-reported: not reproduced" in board_lines[2]
    assert out.splitlines()[-1].startswith(f"self-reported until reproduced: the board ranks it once 'bench leaderboard "
                                           f"verify {path.name} --sample K'")
    write_pins(env["entries"], [path.name])  # what the maintainers' verify (or pin) makes of it: ranked

    assert main(["leaderboard", "show", "--format", "csv", "--results-dir", str(env["results"]),
                 "--entries", str(env["entries"]), "--suite", str(env["suite"])]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines()[1:] if line]
    assert len(rows) == 1, "the local suite entry holds the same cells as the entry and must not be listed twice"
    # the entry's cells were written without a CPU model (versions {"torch": "x"}): the hardware column says so
    assert ",pixelate,pixelate," in rows[0] and rows[0].endswith(",small,entry:pixelate,cpu (model not recorded)")


def test_a_local_suite_grid_is_a_declared_entry(capsys, env):
    assert main(["leaderboard", "show", "--results-dir", str(env["results"]), "--no-entries",
                 "--suite", str(env["suite"])]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split()[:2] == ["1", "small/pixelate"] and lines[2].rstrip().endswith("ranked")
    assert main(["leaderboard", "show", "--results-dir", str(env["results"]), "--no-entries",
                 "--suite", "smoke"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.lstrip().startswith("note:")]
    # The smoke suite declares identity, and pixelate block=4 and 8, on seeds 0, 1 and 2 (issue 43: three seeds,
    # the protocol's minimum): identity's three cells are all here, so it is ranked; pixelate lacks block=4.
    assert [line.split()[:2] for line in lines[2:4]] == [["1", "smoke/identity"], ["–", "smoke/pixelate"]]
    assert lines[4:] == ["", RANK_LINE]
    assert lines[2].rstrip().endswith("ranked") and lines[3].rstrip().endswith("needs ≥ 3 seeds (0 complete)")


def test_resubmitting_reuses_the_finished_cells(capsys, env):
    assert main(submit_argv(env, "--mechanism", "pixelate")) == 0
    _, err = capsys.readouterr()
    assert "grid: 3 cells: 0 done, 3 skipped" in err
    entries = list(env["entries"].glob("*.json"))
    assert len(entries) == 1


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--seeds", "0,1"], "an entry needs at least 3 seeds, suite 'small' gives 2 (0,1)"),
        (["--param", "block=" + ",".join(map(str, range(1, 18)))],
         "an entry declares at most 16 configurations, suite 'small' gives 17 on fewshot_synth_faces"),
    ],
)
def test_entries_the_protocol_would_not_rank_are_refused_before_anything_runs(capsys, env, tmp_path, extra, fragment):
    results, entries = tmp_path / "results", tmp_path / "entries"
    code = main(["submit", "--mechanism", "pixelate", "--suite", str(env["suite"]), "--results-dir", str(results),
                 "--cache-dir", str(tmp_path / "cache"), "--entries", str(entries), *extra])
    err = capsys.readouterr().err
    assert code == 2 and fragment in err and "conformance" not in err
    assert len(err.strip().splitlines()) == 1
    assert not results.exists() and not entries.exists() and not (tmp_path / "cache").exists()


def test_a_mechanism_not_in_the_suite_runs_at_its_defaults(capsys, env):
    argv = submit_argv(env, "--mechanism", "identity", "--name", "the clean <reference>",
                       "--entries", str(env["root"] / "other"))
    assert main(argv) == 0
    capsys.readouterr()
    (path,) = (env["root"] / "other").glob("*.json")
    entry = json.loads(path.read_text())
    assert entry["name"] == "the clean <reference>" and [c["params"] for c in entry["cells"]] == [{}, {}, {}]
    assert entry["declaration"]["configurations"] == [{}]
    assert path.name.startswith("the-clean-reference-")


@pytest.mark.slow
def test_submit_computes_the_cells_it_lacks(capsys, tmp_path, shared_cache, env):
    results, entries = tmp_path / "results", tmp_path / "entries"
    assert main(["submit", "--mechanism", "pixelate", "--suite", str(env["suite"]), "--results-dir", str(results),
                 "--cache-dir", str(shared_cache), "--entries", str(entries)]) == 0
    out, err = capsys.readouterr()
    assert "grid: 3 cells: 3 done, 0 skipped" in err
    (path,) = entries.glob("*.json")
    entry = json.loads(path.read_text())
    assert sorted(c["seed"] for c in entry["cells"]) == [0, 1, 2]
    assert all(c["versions"]["torch"] != "x" and c["runtime_s"] > 0 for c in entry["cells"])
    assert out.splitlines()[3].split()[:2] in (["1", "pixelate"], ["–", "pixelate"])


BROKEN = textwrap.dedent('''
    from bench.core.interfaces import Mechanism
    from bench.core.registry import register_mechanism


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


def test_every_claimed_configuration_is_audited_and_a_refuted_claim_stops_the_submission():
    from bench.cli.submit_cmd import submission_audit
    from bench.core.registry import register_mechanism
    from bench.scale.grid import Placement, expand, suite_from_lists
    from mechanisms.dp_pix import DPPix

    class UnderNoised(DPPix):
        def noise_scale(self, channels: int) -> float:
            return super().noise_scale(channels) / channels  # forgets the channel factor C

    suite = suite_from_lists([TASK], ["dp_pix"], {"epsilon": ["1", "2"], "block": ["4"]}, [0, 1, 2], "smoke")
    cells = expand(suite, Placement(results_dir=Path("unused")))
    reports = submission_audit("dp_pix", cells)
    assert sorted(reports) == ["epsilon=1.0, block=4, m=1", "epsilon=2.0, block=4, m=1"]
    assert all(r["passed"] and r["epsilon_lower_bound"] <= r["claim"]["epsilon"] for r in reports.values())
    with scoped():
        register_mechanism("under_noised")(UnderNoised)
        broken = expand(suite_from_lists([TASK], ["under_noised"], {"epsilon": ["1"]}, [0], "smoke"),
                        Placement(results_dir=Path("unused")))
        with pytest.raises(Exception, match="refutes the claim"):
            submission_audit("under_noised", broken)
    assert submission_audit("pixelate", expand(suite_from_lists([TASK], ["pixelate"], {}, [0], "smoke"),
                                                Placement(results_dir=Path("unused")))) is None


def test_the_preview_of_a_claimed_entry_shows_the_audit_it_just_recorded(capsys, tmp_path, shared_cache):
    from bench.cli.submit_cmd import submission_suite
    from bench.core.registry import mechanisms
    from bench.scale.grid import Placement, expand

    suite = tmp_path / "claimed.yaml"
    suite.write_text(yaml.safe_dump({**SUITE, "mechanisms": [{"name": "dp_pix", "grid": {"epsilon": [1.0]}}]}))
    tracker = Tracker(tmp_path / "results")
    for cell in expand(submission_suite(str(suite), "dp_pix", None), Placement(results_dir=tmp_path / "results")):
        claim = mechanisms.get("dp_pix")(**cell.config.params).claim().to_dict()
        tracker.log_cell(dataclasses.replace(made_up(cell, 0.5, 0.6), claim=claim), {"run": {"overrides": {}}}, {})
    assert main(["submit", "--suite", str(suite), "--mechanism", "dp_pix", "--results-dir", str(tmp_path / "results"),
                 "--cache-dir", str(shared_cache), "--entries", str(tmp_path / "entries")]) == 0
    out = capsys.readouterr().out
    entry = json.loads(next((tmp_path / "entries").glob("*.json")).read_text())
    assert [r["verdict"] for r in entry["audit"].values()] == ["passed"]
    assert "audit passed" in out and "not audited" not in out, out
