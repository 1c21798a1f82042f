"""A new store after the first in a process is a copy of MLflow's blank store: same schema, nothing of another's."""

from __future__ import annotations

import sqlite3

import mlflow.store.db.utils as db_utils

from bench.storage.tracking import Tracker


def _tables(database) -> dict[str, int]:
    with sqlite3.connect(database) as db:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {name: db.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0] for name in names}


def test_a_second_store_is_copied_without_migrations_and_holds_nothing_of_the_first(tmp_path, monkeypatch):
    first = Tracker(tmp_path / "first")
    run_id = first.client.create_run(first.experiment_id).info.run_id
    first.client.log_metric(run_id, "acc", 0.5)

    monkeypatch.setattr(db_utils, "_initialize_tables", lambda engine: (_ for _ in ()).throw(AssertionError("migrated")))
    second = Tracker(tmp_path / "second")
    assert second.client.search_runs([second.experiment_id]) == []
    assert {e.name for e in second.client.search_experiments()} == {"privbench", "Default"}
    location = second.client.get_experiment(second.experiment_id).artifact_location
    assert location == (tmp_path / "second" / "artifacts").resolve().as_uri()
    counts = _tables(tmp_path / "second" / "mlflow.db")
    assert set(counts) == set(_tables(tmp_path / "first" / "mlflow.db"))
    assert counts["runs"] == 0 and counts["metrics"] == 0 and counts["experiments"] == 2

    run_id = second.client.create_run(second.experiment_id).info.run_id  # the copy is a working store
    second.client.log_metric(run_id, "acc", 0.25)
    assert second.client.get_run(run_id).data.metrics == {"acc": 0.25}
    assert first.client.get_run(first.client.search_runs([first.experiment_id])[0].info.run_id).data.metrics == {
        "acc": 0.5}
