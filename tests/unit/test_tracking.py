"""MLflow tracking: a cell round-trips, only FINISHED runs count, nothing is written for reads."""

from __future__ import annotations

import pytest

from bench.core.interfaces import Result
from bench.errors import BenchError
from bench.storage.tracking import Tracker, flatten


def _result(key: str = "k1") -> Result:
    return Result(
        cell_key=key, task="fewshot_synth_faces", dataset="synth_faces", mechanism="dp_pix", mechanism_version=1,
        params={"epsilon": 3.0, "block": 4, "m": 1}, seed=0, profile="smoke",
        utility={"acc": 0.5, "acc_ci95": 0.01}, primary_metric="acc",
        attacks={"face_reid": {"top1": 0.2, "top1_clean": 0.6, "chance": 0.1}}, privacy={"face_reid": 0.8},
        privacy_score=0.8, claim={"epsilon": 3.0, "delta": 0.0, "unit": "m-pixel (m=1)", "note": ""},
        runtime_s=1.0, versions={"torch": "2.14.1"}, git_sha="abc", dataset_fingerprint="fp", synthetic=True,
        device="cpu", created="2026-01-01T00:00:00+00:00",
    )


def test_cell_round_trip_and_finished_lookup(results_dir):
    tracker = Tracker(results_dir)
    run_id = tracker.log_cell(_result(), {"task": {}}, {"extra.txt": b"hello"})
    assert tracker.finished_runs("k1") == [run_id]
    assert tracker.finished_runs("other") == []
    assert tracker.load_result(run_id) == _result()
    run = tracker.client.get_run(run_id)
    assert run.data.params["param.epsilon"] == "3.0"
    assert run.data.metrics["attack.face_reid.top1"] == 0.2
    assert run.data.tags["bench.cell_key"] == "k1"
    assert run.data.tags["bench.version.torch"] == "2.14.1"
    assert (results_dir / "mlflow.db").exists()
    artifacts = {f.path for f in tracker.client.list_artifacts(run_id)}
    assert {"result.json", "config.json", "extra.txt"} <= artifacts


def test_a_failed_logging_marks_the_run_failed(results_dir, monkeypatch):
    tracker = Tracker(results_dir)

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(tracker.client, "log_artifacts", boom)
    with pytest.raises(OSError):
        tracker.log_cell(_result("k2"), {}, {})
    assert tracker.finished_runs("k2") == []
    runs = tracker.client.search_runs([tracker.experiment_id])
    assert [r.info.status for r in runs] == ["FAILED"]


def _result_file(tracker: Tracker, run_id: str):
    from pathlib import Path
    from urllib.parse import urlparse

    return Path(urlparse(tracker.client.get_run(run_id).info.artifact_uri).path) / "result.json"


def test_a_result_changed_after_its_run_ended_is_refused(results_dir):
    from bench.storage.tracking.verify import RESULT_DIGEST, UnverifiedResult

    tracker = Tracker(results_dir)
    run_id = tracker.log_cell(_result("k3"), {}, {})
    path = _result_file(tracker, run_id)
    path.write_text(path.read_text().replace('"acc": 0.5', '"acc": 0.999'))
    with pytest.raises(UnverifiedResult, match="does not match the digest logged with it") as exc:
        tracker.load_result(run_id)
    assert "\n" not in str(exc.value) and "bench run --force" in str(exc.value)
    tracker.client.delete_tag(run_id, RESULT_DIGEST)  # as a run logged before digests were
    with pytest.raises(UnverifiedResult, match="cannot be verified"):
        tracker.load_result(run_id)


def test_read_only_use_creates_nothing(tmp_path):
    with pytest.raises(BenchError, match="no results database"):
        Tracker(tmp_path / "absent", create=False)
    assert not (tmp_path / "absent").exists()


def test_flatten():
    assert flatten("a.", {"x": 1, "y": {"z": 2}}) == {"a.x": 1, "a.y.z": 2}


def test_an_undefined_score_is_flagged_in_mlflow_and_results_of_another_schema_do_not_count(results_dir):
    import dataclasses
    import json

    weak = dataclasses.replace(_result("k3"), privacy={"face_reid": None}, privacy_score=None,
                               privacy_flags={"face_reid": "attack too weak"})
    tracker = Tracker(results_dir)
    run = tracker.client.get_run(tracker.log_cell(weak, {}, {}))
    assert "privacy_score" not in run.data.metrics and "privacy.face_reid" not in run.data.metrics
    assert json.loads(run.data.tags["bench.privacy_flags"]) == {"face_reid": "attack too weak"}
    old = tracker.log_cell(dataclasses.replace(_result("k4")), {}, {})
    tracker.client.set_tag(old, "bench.schema", "1")  # as written before scores could be undefined
    assert tracker.finished_runs("k4") == []


def test_a_run_whose_tags_are_gone_says_so_not_that_it_is_old(results_dir):
    from bench.storage.tracking.verify import TAGLESS, UNDIGESTED, UnverifiedResult

    tracker = Tracker(results_dir)
    run_id = tracker.log_cell(_result("k4"), {}, {})
    tracker.client.delete_tag(run_id, "bench.result_sha256")
    with pytest.raises(UnverifiedResult, match="logged before PrivBench recorded result digests") as old:
        tracker.load_result(run_id)
    for tag in list(tracker.client.get_run(run_id).data.tags):
        tracker.client.delete_tag(run_id, tag)
    with pytest.raises(UnverifiedResult, match="its tags are gone from the tracking database") as gone:
        tracker.load_result(run_id)
    assert (old.value.kind, gone.value.kind) == (UNDIGESTED, TAGLESS)
