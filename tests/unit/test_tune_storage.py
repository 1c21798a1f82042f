"""``bench tune``'s storage and study options: every mistake is one line, exit 2, before any trial runs.

A storage that cannot be used (an unknown scheme, a missing driver, a file that is not a
database or not a journal, a folder) is refused without writing to it; so are a population
under 2 and a sampler seed outside [0, 2^32).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.cli import main
from bench.errors import BenchError
from bench.scale.tune_storage import check_storage, open_storage

TUNE = ["tune", "--mechanism", "dp_pix", "--task", "fewshot_synth_faces", "--profile", "smoke", "--trials", "1"]


def bad_storages(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """Returns case -> (--storage value, fragment of its error), with the files the cases name."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "not-a-db.db").write_text("hello\n")
    (tmp_path / "object.json").write_text('{"a": 1}\n')
    (tmp_path / "pretty.json").write_text('{\n  "a": 1\n}\n')
    (tmp_path / "one-line.txt").write_text("not json\n")
    return {
        "unknown scheme": ("foo:///x", "unsupported scheme 'foo'"),
        "redis": ("redis://localhost:6379", "unsupported scheme 'redis'"),
        "unknown driver": ("postgresql+nodriver://u:secret@localhost/db", "unsupported scheme"),
        "not a database": (f"sqlite:///{tmp_path / 'not-a-db.db'}",
                           "cannot open the database (file is not a database)"),
        "no folder": (f"sqlite:///{tmp_path / 'missing' / 'x.db'}", "cannot open the database"),
        "in memory": ("sqlite://", "an in-memory SQLite database is private to one connection"),
        "in memory, named": ("sqlite:///:memory:", "an in-memory SQLite database is private to one connection"),
        "folder journal": (f"journal:{tmp_path / 'folder'}", "is a folder"),
        "json object": (f"journal:{tmp_path / 'object.json'}", "is not an Optuna journal"),
        "pretty json": (f"journal:{tmp_path / 'pretty.json'}", "is not an Optuna journal"),
        "one-line text": (f"journal:{tmp_path / 'one-line.txt'}", "is not an Optuna journal"),
    }


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", ["unknown scheme", "redis", "unknown driver", "not a database", "no folder",
                                  "in memory", "in memory, named", "folder journal", "json object", "pretty json",
                                  "one-line text"])
def test_a_storage_that_cannot_be_used_is_refused_without_writing_to_it(tmp_path, case):
    url, fragment = bad_storages(tmp_path)[case]
    before = snapshot(tmp_path)
    with pytest.raises(BenchError, match=fragment.replace("(", r"\(").replace(")", r"\)")) as exc:
        open_storage(url, tmp_path / "results")
    assert "\n" not in str(exc.value) and snapshot(tmp_path) == before
    assert not (tmp_path / "results").exists() and not (tmp_path / "missing").exists()


def test_a_missing_driver_is_named_and_the_password_hidden(monkeypatch):
    from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite

    def missing():
        raise ModuleNotFoundError("No module named 'psycopg'", name="psycopg")

    monkeypatch.setattr(SQLiteDialect_pysqlite, "import_dbapi", staticmethod(missing))
    with pytest.raises(BenchError) as exc:
        check_storage("sqlite://u:secret@/x.db", Path("unused"))
    assert "the Python driver of sqlite (psycopg) is not installed" in str(exc.value)
    assert "secret" not in str(exc.value) and "***" in str(exc.value)


def test_unsupported_and_unopenable_storages_say_which_are_supported(tmp_path):
    storages = bad_storages(tmp_path)
    for case in ("unknown scheme", "not a database"):
        with pytest.raises(BenchError, match="sqlite:///F.db, postgresql://..., mysql://...") as exc:
            open_storage(storages[case][0], tmp_path)
        assert "journal:PATH" in str(exc.value)


def test_journals_and_databases_that_can_be_used_open(tmp_path):
    import optuna

    journal = f"journal:{tmp_path / 'new' / 'study.journal'}"
    optuna.create_study(storage=open_storage(journal, tmp_path), study_name="s").ask()
    assert optuna.load_study(study_name="s", storage=open_storage(journal, tmp_path)).trials
    database = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(storage=open_storage(database, tmp_path), study_name="s")
    assert check_storage(database, tmp_path) is None
    assert check_storage(None, tmp_path) == tmp_path / "optuna.journal"


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--storage", "foo:///x"], "unsupported scheme 'foo'"),
        (["--storage", "postgresql+nodriver://localhost/db"], "unsupported scheme"),
        (["--storage", "journal:FOLDER"], "is a folder"),
        (["--storage", "journal:OBJECT"], "is not an Optuna journal"),
        (["--storage", "sqlite:///NOTDB"], "file is not a database"),
        (["--population", "1"], "--population must be at least 2"),
        (["--population", "0"], "--population must be at least 2"),
        (["--sampler-seed", "-1"], "--sampler-seed must be in [0, 2^32), got -1"),
        (["--sampler-seed", str(2**32)], "--sampler-seed must be in [0, 2^32)"),
    ],
)
def test_tune_refuses_bad_options_in_one_line_before_any_trial(capsys, tmp_path, extra, fragment):
    bad_storages(tmp_path)
    names = {"FOLDER": "folder", "OBJECT": "object.json", "NOTDB": "not-a-db.db"}
    extra = [next((v.replace(k, str(tmp_path / n)) for k, n in names.items() if k in v), v) for v in extra]
    code = main([*TUNE, "--results-dir", str(tmp_path / "r"), *extra])
    err = capsys.readouterr().err
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("bench: error: ")
    assert not (tmp_path / "r").exists()


def test_a_journal_damaged_past_its_first_line_is_refused_without_writing_to_it(tmp_path):
    import optuna

    journal = tmp_path / "study.journal"
    optuna.create_study(storage=open_storage(f"journal:{journal}", tmp_path), study_name="s").ask()
    first, *rest = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(first + b"not json\n" + b"".join(rest))
    before = journal.read_bytes()
    with pytest.raises(BenchError, match="is not a readable Optuna journal") as exc:
        open_storage(f"journal:{journal}", tmp_path)
    assert "\n" not in str(exc.value) and journal.read_bytes() == before
