"""Finding runs: ``--since`` forms, MLflow filters, and a run named by a unique prefix of its id or cell key."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

from bench.core.interfaces import RESULT_SCHEMA
from bench.errors import BenchError
from bench.storage.tracking import lookup


def _run(run_id: str, key: str, status: str = "FINISHED", **tags: str) -> SimpleNamespace:
    tags = {"bench.cell_key": key, "bench.schema": str(RESULT_SCHEMA), **tags}
    return SimpleNamespace(info=SimpleNamespace(run_id=run_id, status=status), data=SimpleNamespace(tags=tags))


@pytest.fixture
def store(monkeypatch):
    runs = [_run("a1b2c3d4" + "0" * 24, "ffee01" + "0" * 14), _run("a1b2ffff" + "0" * 24, "ffee02" + "0" * 14),
            _run("c0ffee00" + "0" * 24, "ab12" + "0" * 16, status="FAILED"),
            _run("d00d0000" + "0" * 24, "ab34" + "0" * 16, **{"bench.superseded_by": "x"})]
    monkeypatch.setattr(lookup, "search", lambda tracker, filters="", order=True: iter(runs))
    return SimpleNamespace(uri="sqlite:///r/mlflow.db")


def test_a_unique_prefix_of_a_run_id_or_of_a_finished_cell_key_names_its_run(store):
    assert lookup.resolve(store, "a1b2c") == "a1b2c3d4" + "0" * 24
    assert lookup.resolve(store, "C0FF") == "c0ffee00" + "0" * 24  # a failed run, by its id
    assert lookup.resolve(store, "ffee02") == "a1b2ffff" + "0" * 24  # a cell, by its key


def test_an_ambiguous_prefix_is_one_line_naming_the_candidates(store):
    with pytest.raises(BenchError) as exc:
        lookup.resolve(store, "a1b2")
    message = str(exc.value)
    assert "\n" not in message and "ambiguous: 2 runs match" in message
    assert "run a1b2c3d40000" in message and "run a1b2ffff0000" in message
    with pytest.raises(BenchError, match="ambiguous"):
        lookup.resolve(store, "ffee0")  # two finished cells
    with pytest.raises(BenchError, match="no run or finished cell 'ab3'"):
        lookup.resolve(store, "ab3")  # only a superseded run's cell: not a finished cell
    with pytest.raises(BenchError, match="hex"):
        lookup.resolve(store, "xyz")


def test_since_takes_a_time_ago_or_a_date():
    now = dt.datetime(2026, 11, 28, 12, 0, tzinfo=dt.timezone.utc)
    assert lookup.parse_since("3d", now) == int((now - dt.timedelta(days=3)).timestamp() * 1000)
    assert lookup.parse_since("30m", now) == int((now - dt.timedelta(minutes=30)).timestamp() * 1000)
    assert lookup.parse_since("2026-11-28T09:00+00:00") == int(dt.datetime(2026, 11, 28, 9, tzinfo=dt.timezone.utc)
                                                               .timestamp() * 1000)
    with pytest.raises(BenchError, match="--since 'last week'"):
        lookup.parse_since("last week")


def test_filters_name_benchmark_mechanism_status_and_start():
    text = lookup.filter_string("fewshot_synth_faces", "dp_pix", "failed", 1000)
    assert text == ("tags.`bench.task` = 'fewshot_synth_faces' and tags.`bench.mechanism` = 'dp_pix' and "
                    "attributes.status = 'FAILED' and attributes.start_time >= 1000")
    assert lookup.filter_string() == ""
