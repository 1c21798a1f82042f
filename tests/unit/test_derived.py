"""Answers kept under the code's digest (bench/storage/derived.py) and the registries' index of built-ins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from bench.storage import derived
from bench.system import bounds

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_DERIVED", str(tmp_path / "derived"))
    return tmp_path / "derived"


def test_an_answer_is_read_back_only_under_its_inputs_and_only_while_enabled(cache):
    assert derived.recall("thing", {"a": 1}) is None  # not enabled: never read
    derived.keep("thing", {"a": 1}, {"value": [1, 2]})
    assert not cache.exists()  # not enabled: never kept
    token = derived._enabled.set(True)
    try:
        derived.keep("thing", {"a": 1}, {"value": [1, 2]})
        assert derived.recall("thing", {"a": 1}) == {"value": [1, 2]}
        assert derived.recall("thing", {"a": 2}) is None
        assert derived.recall("other", {"a": 1}) is None
        (kept,) = cache.glob("thing-*.json")
        data = json.loads(kept.read_text())
        kept.write_text(json.dumps({**data, "key": "0" * 64}))  # a file that names another key is not read
        assert derived.recall("thing", {"a": 1}) is None
        kept.write_text("{not json")
        assert derived.recall("thing", {"a": 1}) is None
    finally:
        derived._enabled.reset(token)


def test_a_folder_that_cannot_be_written_keeps_nothing_and_fails_nothing(cache):
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text("a file where the folder would be")
    token = derived._enabled.set(True)
    try:
        derived.keep("thing", {}, 1)
        assert derived.recall("thing", {}) is None
    finally:
        derived._enabled.reset(token)


def test_the_code_digest_changes_with_any_file_of_the_packages_but_not_with_caches(tmp_path, monkeypatch):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("A = 1\n")
    (package / "sub" / "preset.yaml").write_text("x: 1\n")
    monkeypatch.setattr(derived, "PACKAGES", ("pkg",))
    monkeypatch.setattr(derived, "_package_folder", lambda name: package)

    def digest() -> str:
        derived.code_digest.cache_clear()
        return derived.code_digest()

    try:
        first = digest()
        (package / "__pycache__").mkdir()
        (package / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"compiled")
        assert digest() == first
        (package / "sub" / "preset.yaml").write_text("x: 2\n")
        second = digest()
        assert second != first
        (package / "b.py").write_text("")
        assert digest() not in (first, second)
    finally:
        derived.code_digest.cache_clear()


def test_the_memory_watch_records_the_largest_need_that_fitted_and_a_refusal(monkeypatch):
    monkeypatch.setattr(bounds, "available_memory", lambda: 1000)
    with bounds.watching() as watch:
        watch.record(bounds.Need("a", 10, ()), 1000)
        watch.record(bounds.Need("b", 700, ()), 1000)
    assert watch.peak == 700 and not watch.refused
    with bounds.watching() as watch:
        watch.record(bounds.Need("c", 2000, ()), 1000)
    assert watch.refused
    assert derived.fits(1000) and not derived.fits(1001) and not derived.fits(None)


INDEX_PROBE = r"""
import json, sys
from bench.core import registry
from bench.errors import BenchError
from bench.storage import derived

def answers():
    out = {}
    for table in registry.REGISTRIES:
        try:
            table.get(table.kind + "_no_such_name_x")
        except BenchError as exc:
            unknown = str(exc)
        near = table.list()[0][:-1] + "#"  # a near miss of a real name
        try:
            table.get(near)
        except BenchError as exc:
            close = str(exc)
        out[table.kind] = {"list": table.list(), "some": table.list("d*"), "unknown": unknown, "close": close,
                           "contains": [n in table for n in table.list()[:3]]}
    out["versions"] = {n: registry.mechanisms.attribute(n, "version") for n in registry.mechanisms.list()}
    out["entry_settings"] = {n: list(registry.tasks.attribute(n, "entry_settings")) for n in registry.tasks.list()}
    return out

with derived.enabled():
    if sys.argv[1] == "record":
        for table in registry.REGISTRIES:
            table.discover()
    else:
        indexed = answers()
        untouched = registry.untouched() and "torch" not in sys.modules
        for table in registry.REGISTRIES:
            table.discover()
        print(json.dumps({"indexed": indexed, "discovered": answers(), "untouched": untouched}))
"""


def test_the_index_of_built_ins_answers_what_a_discovery_of_the_decorators_answers(tmp_path):
    """The index is worked out from the decorators; read back, it says what they say, without importing a module."""
    env = {**os.environ, "BENCH_DERIVED": str(tmp_path / "derived")}
    subprocess.run([sys.executable, "-c", INDEX_PROBE, "record"], env=env, check=True, timeout=300)
    assert list((tmp_path / "derived").glob("registries-*.json"))
    done = subprocess.run([sys.executable, "-c", INDEX_PROBE, "read"], env=env, check=True, timeout=300,
                          capture_output=True, text=True)
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["untouched"], "the index was not used: the built-ins were imported to answer"
    assert out["indexed"] == out["discovered"]
    assert "dp_pix" in out["indexed"]["mechanism"]["list"]


def test_a_registry_holding_names_registered_by_hand_answers_with_them(monkeypatch):
    from bench.core import registry
    from bench.errors import BenchError

    table = registry.Registry("widget", (), "bench.no_such_group")
    table.register("by_hand")(type("ByHand", (), {"version": 7}))

    class Index:
        def names(self, kind):
            return {"built_in": {"version": 3}} if kind == "widget" else None

    monkeypatch.setattr(registry, "_index", Index())
    monkeypatch.setattr(registry, "_entry_points", lambda group: [])
    assert table.list() == ["by_hand"]  # a table of its own: the index holds the names of the five
    table._discovered = False
    monkeypatch.setattr(registry, "REGISTRIES", (*registry.REGISTRIES, table))
    assert table.list() == ["built_in", "by_hand"] and "built_in" in table and "by_hand" in table
    with pytest.raises(BenchError, match="unknown widget 'built_inn'; did you mean 'built_in'"):
        table.get("built_inn")
    assert table.attribute("built_in", "version") == 3
    assert not table._discovered
    assert table.attribute("by_hand", "version") == 7 and table._discovered  # get() discovers, as it always has
    table._discovered = False
    monkeypatch.setattr(registry, "plugins_installed", lambda: True)  # a plugin: the index stands for nothing
    assert table.list() == ["by_hand"] and table._discovered


def test_result_to_dict_is_what_asdict_returns():
    from bench.core.result import Result

    cells = [c for path in sorted((ROOT / "leaderboard" / "entries").glob("*.json"))
             for c in json.loads(path.read_text())["cells"] if c.get("schema") == 2]
    assert cells
    for cell in cells:
        result = Result.from_dict(cell)
        assert json.dumps(result.to_dict(), sort_keys=True) == json.dumps(asdict(result), sort_keys=True)
    odd = Result.from_dict({**cells[0], "params": {"shape": (1, 2)}})  # a tuple: asdict's own copy
    assert odd.to_dict() == asdict(odd) and odd.to_dict()["params"]["shape"] == (1, 2)


def test_planning_many_cells_with_a_memo_gives_each_the_key_it_gets_alone(tmp_path):
    from bench.cell.plan import plan
    from bench.scale.grid import Placement, expand
    from bench.scale.suite import load_suite

    suite = load_suite("smoke")
    memo: dict = {}
    cells = expand(suite, Placement(results_dir=tmp_path / "results"), memo)
    assert len(cells) > len([k for k in memo if k[0] != "folder"]) >= 1  # cells shared their settings' planning
    assert [plan(c.config).key for c in cells] == [c.key for c in cells]
