"""Fault suite, the board: a hand-edited entry is verified before it is ranked, and a shipped entry is reproduced.

Issue 45 item 4. A forged entry (an unregistered mechanism, epsilon 0.01 with no audit,
utility 0.99 and privacy 1.0) ranked first with no warning; now every entry is checked when
the board is built (mechanism registered, cells matching their result digests, claims with
a passed audit) and an unverified one is listed with why, never ranked. ``bench leaderboard
verify`` recomputes a seeded sample of an entry's cells by the normal cell path.
"""

from __future__ import annotations

import copy
import json
import re

import pytest
import yaml

from bench.cli import main
from bench.core.interfaces import Result
from bench.core.registry import mechanisms
from bench.storage.tracking import Tracker
from leaderboard.reproduced import record_path, reproduction_of, write_pins
from leaderboard.staleness import check_staleness
from leaderboard.verification import DIGEST_FIELD, cell_digest, check_entry

TASK = "fewshot_synth_faces"
SUITE = {"description": "board fault suite", "profile": "smoke", "seeds": [0, 1, 2], "benchmarks": [TASK],
         "mechanisms": [{"name": "pixelate", "grid": {"block": [8]}}]}
# A cheap real cell: no adversary, one short epoch, few episodes (about 25 s on a shared 2-core CPU).
COMPUTED = {**SUITE, "attacks": [], "set": {"task": {"epochs": 1, "episodes_per_epoch": 2, "val_episodes": 5,
                                                     "test_episodes": 5}}}


def made_up(cell, utility: float, privacy: float, **changes) -> Result:
    cfg = cell.config
    return Result(
        cell_key=cell.key, task=cfg.task, dataset="synth_faces", mechanism=cfg.mechanism,
        mechanism_version=mechanisms.get(cfg.mechanism).version, params=dict(cfg.params), seed=cfg.seed,
        profile=cfg.profile, utility={"acc": utility, "acc_ci95": 0.02}, primary_metric="acc",
        attacks={"face_reid": {"top1": 0.2}}, privacy={"face_reid": privacy}, privacy_score=privacy,
        runtime_s=1.0, versions={"torch": "x"}, git_sha="x", dataset_fingerprint="fp-synth", synthetic=True,
        device="cpu", created="2026-01-01T00:00:00+00:00", **{"claim": None, **changes},
    )


@pytest.fixture(scope="module")
def board(tmp_path_factory, shared_cache):
    """A verified entry written by ``bench submit`` (over made-up local cells it reuses) and a forged copy of it."""
    from bench.cli.submit_cmd import submission_suite
    from bench.scale.grid import Placement, expand

    root = tmp_path_factory.mktemp("faults_board")
    suite, results, entries = root / "small.yaml", root / "results", root / "entries"
    suite.write_text(yaml.safe_dump(SUITE))
    tracker = Tracker(results)
    for cell in expand(submission_suite(str(suite), "pixelate", None), Placement(results_dir=results)):
        tracker.log_cell(made_up(cell, 0.5 + 0.01 * cell.config.seed, 0.6), {"run": {"overrides": {}}}, {})
    assert main(["submit", "--mechanism", "pixelate", "--suite", str(suite), "--results-dir", str(results),
                 "--cache-dir", str(shared_cache), "--entries", str(entries)]) == 0
    (path,) = entries.glob("*.json")
    write_pins(entries, [path.name])  # the maintainers' act: a baseline the board ranks (leaderboard.reproduced)
    real = json.loads(path.read_text())
    forged = copy.deepcopy(real)
    forged.update(name="forged", mechanism="not_registered_anywhere", audit=None)
    for cell in forged["cells"]:
        cell.update(mechanism="not_registered_anywhere", utility={"acc": 0.99, "acc_ci95": 0.001},
                    privacy={"face_reid": 1.0}, privacy_score=1.0,
                    claim={"epsilon": 0.01, "delta": 0.0, "unit": "any image of this size", "note": ""})
    (entries / "forged.json").write_text(json.dumps(forged))
    return {"root": root, "suite": suite, "results": results, "entries": entries, "real": real, "forged": forged}


def show(board, *extra: str) -> list[str]:
    return ["leaderboard", "show", "--results-dir", str(board["results"]), "--entries", str(board["entries"]),
            "--suite", str(board["suite"]), *extra]


def test_a_forged_entry_is_marked_and_never_ranked_above_a_verified_one(capsys, board):
    capsys.readouterr()
    assert main(show(board)) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[1]: line for line in lines[2:] if line.strip() and not line.lstrip().startswith(("note:", "Rank:"))}
    assert rows["pixelate"].split()[0] == "1" and rows["pixelate"].rstrip().endswith("ranked")
    forged = rows["forged"]
    assert forged.split()[0] == "–"
    assert "unverified: mechanism 'not_registered_anywhere' is not registered here" in forged
    assert "(not audited)" in forged  # the claim's verdict is shown beside it
    # Its numbers would have ranked it first: its hypervolume is far above the verified entry's.
    hv = {name: float(re.search(r"\s(0\.\d{3})\s+\[", line).group(1)) for name, line in rows.items()}
    assert hv["forged"] > hv["pixelate"] + 0.3

    assert main(show(board, "--format", "csv")) == 0
    csv = capsys.readouterr().out
    header = csv.splitlines()[0].split(",")
    assert "verification" in header and "audit" in header
    assert ",verified," in csv and "not audited" in csv


def test_the_site_says_which_entries_are_unverified(capsys, board):
    site = board["root"] / "site"
    assert main(["leaderboard", "build", "--out", str(site), "--results-dir", str(board["results"]), "--entries",
                 str(board["entries"]), "--suite", str(board["suite"])]) == 0
    capsys.readouterr()
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "1 ranked of 2 entries (1 unverified: not ranked)" in index
    (page,) = (site / "boards").glob("*.html")
    text = page.read_text(encoding="utf-8")
    assert 'class="unverified">unverified: mechanism' in text and 'class="verified">verified<' in text
    assert "not audited" in text
    assert "| forged | not\\_registered\\_anywhere | any image of this size (not audited) |" in (
        site / "leaderboard.md").read_text(encoding="utf-8")


def signed(entry: dict) -> dict:
    """The entry with each cell's digest recomputed from what it states (what a careful forger would do)."""
    entry = copy.deepcopy(entry)
    for cell in entry["cells"]:
        cell[DIGEST_FIELD] = cell_digest(cell)
    return entry


def with_claim(entry: dict, audit, epsilon: float = 1.0) -> dict:
    """The real entry re-labelled as a claimed dp_pix entry, its digests recomputed."""
    entry = copy.deepcopy(entry)
    version = mechanisms.get("dp_pix").version
    entry.update(mechanism="dp_pix", audit=audit)
    for cell in entry["cells"]:
        cell.update(mechanism="dp_pix", mechanism_version=version, params={"epsilon": epsilon},
                    claim={"epsilon": epsilon, "delta": 0.0, "unit": "m-pixel (m=1)", "note": ""})
    return signed(entry)


def report(verdict: str | None = None, passed: bool | None = None, epsilon: float = 1.0) -> dict:
    out = {"mechanism": "dp_pix", "params": {"epsilon": epsilon},
           "claim": {"epsilon": epsilon, "delta": 0.0, "unit": "m-pixel (m=1)"}}
    if verdict is not None:
        out["verdict"] = verdict
    if passed is not None:
        out["passed"] = passed
    return out


def test_each_check_says_why(board):
    real = board["real"]
    assert check_entry(real).status == "verified" and all(DIGEST_FIELD in c for c in real["cells"])

    edited = copy.deepcopy(real)
    edited["cells"][0]["utility"]["acc"] = 0.99
    assert check_entry(edited).problems == ("1 of 3 cell(s) do not match their result digest (edited after "
                                            "submission)",)
    undigested = copy.deepcopy(real)
    for cell in undigested["cells"]:
        del cell[DIGEST_FIELD]
    assert "3 of 3 cell(s) carry no result digest" in check_entry(undigested).status
    older = signed(real)
    for cell in older["cells"]:
        cell["mechanism_version"] = 0
    # Cells of an older version of the mechanism are stale (shown apart, recomputed by --refresh), not unverified.
    assert check_entry(signed(older)).verified
    stale = check_staleness(signed(older))
    assert stale.summary() == (f"3 of 3 cell(s) computed by older code (mechanism pixelate version 0, version "
                               f"{mechanisms.get('pixelate').version} registered)")
    assert not check_staleness(real).is_stale and not check_staleness(real).unchecked
    unconformed = copy.deepcopy(real)
    unconformed["conformance"] = {"passed": False}
    assert check_entry(unconformed).problems == ("no passed conformance record",)

    unaudited = check_entry(with_claim(real, None))
    assert unaudited.problems == ("3 of 3 claimed cell(s) without a passed or inconclusive audit (not audited)",)
    inconclusive = check_entry(with_claim(real, {"epsilon=1.0": report("inconclusive")}))
    # A claim too large for the trial budget to reach is shown as such and does not stop the entry's rank.
    assert set(inconclusive.audits.values()) == {"inconclusive"} and inconclusive.verified
    assert check_entry(with_claim(real, {"epsilon=1.0": report("passed")})).verified
    assert check_entry(with_claim(real, {"epsilon=1.0": report(passed=True)})).verified  # a legacy record
    assert not check_entry(with_claim(real, {"epsilon=1.0": report(passed=False)})).verified
    # An audit of another claim does not vouch for this one.
    other = check_entry(with_claim(real, {"epsilon=1.0": report("passed", epsilon=8.0)}))
    assert set(other.audits.values()) == {"not audited"}
    # A cell's claim may add delta (the Laplace sampler's clamp on its image size) to the audited (epsilon, 0):
    # the audit covers it; an audit of a larger delta than the cell claims does not.
    clamped = copy.deepcopy(with_claim(real, {"epsilon=1.0": report("passed")}))
    for cell in clamped["cells"]:
        cell["claim"]["delta"] = 1e-15
    assert set(check_entry(signed(clamped)).audits.values()) == {"passed"}
    looser = report("passed")
    looser["claim"]["delta"] = 1e-3
    assert set(check_entry(signed({**clamped, "audit": {"epsilon=1.0": looser}})).audits.values()) == {"not audited"}


def test_report_marks_claims_by_their_audit(capsys, board, tmp_path):
    from bench.cli.submit_cmd import submission_suite
    from bench.scale.grid import Placement, expand

    results = tmp_path / "results"
    tracker = Tracker(results)
    claim = {"epsilon": 1.0, "delta": 0.0, "unit": "m-pixel (m=1)", "note": ""}
    for cell in expand(submission_suite(str(board["suite"]), "pixelate", None), Placement(results_dir=results)):
        tracker.log_cell(made_up(cell, 0.5, 0.6, claim=claim), {"run": {"overrides": {}}}, {})
    assert main(["report", "--results-dir", str(results)]) == 0
    out = capsys.readouterr().out
    assert "| eps=1 \\[m-pixel (m=1)\\] (unaudited) |" in out

    entries = tmp_path / "entries"
    entries.mkdir()
    audited = with_claim(board["real"], {"epsilon=1.0": report("passed")})
    (entries / "audited.json").write_text(json.dumps(audited))
    assert main(["report", "--results-dir", str(tmp_path / "none"), "--entries", str(entries)]) == 0
    assert "(audit passed)" in capsys.readouterr().out


def test_verify_refuses_what_it_cannot_recompute_without_computing(capsys, board):
    code = main(["leaderboard", "verify", str(board["entries"] / "forged.json"), "--sample", "all"])
    out = capsys.readouterr().out
    assert code == 1
    assert out.splitlines()[0].startswith("entry forged: unverified: mechanism 'not_registered_anywhere'")
    assert out.count("error: ") == 3 and "cannot be planned here" in out
    assert out.splitlines()[-1] == "0 of 3 sampled cells match; the entry is unverified"


@pytest.mark.parametrize("argv, fragment", [
    (["--sample", "0"], "--sample must be a whole number >= 1 or 'all', got '0'"),
    (["--seed", "x"], "--seed must be a whole number >= 0, got 'x'"),
])
def test_verify_user_errors_are_one_line(capsys, board, argv, fragment):
    path = next(board["entries"].glob("pixelate*.json"))
    assert main(["leaderboard", "verify", str(path), *argv]) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1


def test_leaderboard_verify_reproduces_a_submitted_entry(capsys, tmp_path, shared_cache):
    """``bench submit`` computes three cheap smoke cells; ``verify`` recomputes a sample and finds the same numbers."""
    suite, results, entries = tmp_path / "computed.yaml", tmp_path / "results", tmp_path / "entries"
    suite.write_text(yaml.safe_dump(COMPUTED))
    assert main(["submit", "--mechanism", "pixelate", "--suite", str(suite), "--results-dir", str(results),
                 "--cache-dir", str(shared_cache), "--entries", str(entries)]) == 0
    capsys.readouterr()
    (path,) = entries.glob("*.json")
    assert main(["leaderboard", "verify", str(path), "--sample", "1", "--cache-dir", str(shared_cache)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "entry pixelate: verified"
    assert out[1] == "recomputing 1 of 3 cells (sample seed 0)"
    assert out[2].startswith("estimate: about ") and "min of cell time, as the cells took on" in out[2]
    out = out[:2] + out[3:]
    assert re.match(r"match: fewshot_synth_faces pixelate\(block=8\) \[.*epochs=1.*\] seed \d \(cell [0-9a-f]+\): "
                    r"\d+ numbers compared, equal on the same hardware", out[2])
    assert out[-1] == "1 of 1 sampled cells match"
    # The maintainer's verify writes its record beside the entry: the entry is reproduced (issue 62).
    assert out[-2] == f"recorded: {record_path(path)} (commit it beside the entry: the board ranks an entry file once it " \
                      "is reproduced)"
    reproduction = reproduction_of(path)
    assert reproduction.reproduced and reproduction.text.startswith("reproduced: 1 of 3 cells on ")
    record = json.loads(record_path(path).read_text())
    assert record["verdict"] == "reproduced" and record["hardware"]["cpu_capability"] and record["code"]["git_sha"]
    assert [c["status"] for c in record["cells"]] == ["match"] and record["sample"] == {"cells": 1, "of": 3, "seed": 0}

    # A careful forger recomputes the digests of numbers nobody computed: the board cannot tell, verify can.
    entry = json.loads(path.read_text())
    for cell in entry["cells"]:
        cell["utility"]["acc"] = min(1.0, cell["utility"]["acc"] + 0.2)
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(signed(entry)))
    assert check_entry(signed(entry)).verified
    assert main(["leaderboard", "verify", str(forged), "--sample", "1", "--cache-dir", str(shared_cache)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^mismatch: fewshot_synth_faces pixelate", out, re.M)
    assert re.search(r"^  utility\.acc: [0-9.]+ stated, [0-9.]+ recomputed \(allowed ± 0\)$", out, re.M)
    assert out.splitlines()[-1] == "0 of 1 sampled cells match"
    assert not reproduction_of(forged).reproduced  # its record says mismatch: self-reported, never ranked
    assert "did not match" in reproduction_of(forged).text
    path.write_text(json.dumps(signed(entry)))  # the reproduced file edited afterwards: no longer reproduced
    assert "changed after it was reproduced" in reproduction_of(path).text
