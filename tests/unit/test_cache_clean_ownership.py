"""Issue 57: the cache removes only what it wrote, and a full file system is one line, not a half entry.

A cache directory may be pointed at the wrong folder (``--cache-dir ~/thesis``): what the
cache did not write (by its names and layout, :mod:`bench.storage.cache_layout`) is listed
as foreign and never removed, whatever its name or age. A write that meets a full file
system (``ENOSPC``, or torch's zip writer's ``unexpected pos``) leaves no partial entry and
raises one :class:`BenchError` naming the folder.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import bench.storage.cache as cache_module
from bench.errors import BenchError
from bench.storage.cache import OBJECT_FILE, Cache, is_no_space
from bench.storage.cache_layout import (
    MANIFEST,
    STALE_TMP_S,
    parse_temporary,
    remove_stale_temporaries,
    survey,
)

OBJ = {"w": torch.arange(10, dtype=torch.float32)}


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def user_files(root: Path) -> dict[str, bytes]:
    """Writes files a user could keep in a folder mistaken for a cache; returns name -> bytes."""
    files = {
        "thesis.tex": b"\\documentclass{article}",
        "sub/data.csv": b"a,b\n1,2\n",
        "models/notes.txt": b"kept beside the entries",  # inside one of the cache's own kind folders
        ".draft.tmp": b"an editor's temporary",
        "x.removed.tmp": b"looks removable, is not the cache's",
        "mine/MANIFEST.json": b'{"title": "my own manifest"}',  # a manifest of another form
        "mine/deep/MANIFEST.json": b'["format", "kind", "key", "files"]',
        "job.lock": b"someone else's lock",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    old = time.time() - 3 * STALE_TMP_S
    for rel in (".draft.tmp", "x.removed.tmp"):
        os.utime(root / rel, (old, old))
    return files


def test_the_survey_sorts_own_entries_temporaries_and_locks_from_foreign_files(tmp_path):
    cache = Cache(tmp_path)
    cache.save("models", "k1", OBJ)
    cache.save("datasets/synth_faces", "d1", OBJ)
    with cache.lock("models", "k1"):
        pass
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "cellkey.lock").touch()
    files = user_files(tmp_path)
    host = socket.gethostname()
    stale = tmp_path / "models" / f".k2.{host}.{dead_pid()}.0123abcd.tmp"
    busy = tmp_path / "models" / f".k3.{host}.{os.getpid()}.0123abcd.tmp"
    stale.mkdir()
    busy.mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "models" / "k1")  # a link to an entry is not an entry

    found = survey(tmp_path)

    assert found.entries == [tmp_path / "datasets" / "synth_faces" / "d1", tmp_path / "models" / "k1"]
    assert found.stale == [stale] and found.busy == [busy]
    foreign = {p.relative_to(tmp_path).as_posix() for p in found.foreign}
    assert foreign == set(files) | {"link"}


def test_the_temporary_names_are_the_ones_the_cache_writes():
    assert parse_temporary(".k1.host.example.org.123.0123abcd.tmp").host == "host.example.org"
    assert parse_temporary(".k1.456.0123abcd.removed.tmp").removing
    for foreign in (".draft.tmp", "k1.host.1.0123abcd.tmp", ".k1.host.x.0123abcd.tmp", ".k1.host.1.XYZ.tmp",
                    ".removed.tmp", "x.removed.tmp"):
        assert parse_temporary(foreign) is None, foreign


def test_sweeping_stale_temporaries_leaves_foreign_names_of_any_age(tmp_path):
    files = user_files(tmp_path)
    old_dir = tmp_path / ".backup.tmp"  # a folder, old, ending in .tmp: not a name the cache writes
    old_dir.mkdir()
    old = time.time() - 3 * STALE_TMP_S
    os.utime(old_dir, (old, old))
    left = tmp_path / "models" / f".k9.{socket.gethostname()}.{dead_pid()}.0123abcd.tmp"
    left.mkdir(parents=True)
    assert remove_stale_temporaries(tmp_path) == [left]
    assert old_dir.is_dir()
    assert all((tmp_path / rel).read_bytes() == data for rel, data in files.items())


def test_entries_and_verify_see_only_own_entries(tmp_path):
    cache = Cache(tmp_path)
    cache.save("models", "k1", OBJ)
    user_files(tmp_path)
    assert [(e.kind, e.key) for e in cache.entries()] == [("models", "k1")]
    assert [problem for _, problem in cache.verify()] == [None]


def test_a_manifest_of_the_cache_s_form_is_an_entry_even_when_damaged(tmp_path):
    cache = Cache(tmp_path)
    cache.save("models", "k1", OBJ)
    entry = cache.entry_path("models", "k1")
    (entry / OBJECT_FILE).write_bytes(b"truncated")
    os.rename(entry, tmp_path / "models" / "k2")  # copied under another key: still the cache's, damaged
    manifest = json.loads((tmp_path / "models" / "k2" / MANIFEST).read_text())
    assert manifest["key"] == "k1"
    [(info, problem)] = cache.verify()
    assert info.key == "k2" and problem


# --- a full file system ----------------------------------------------------------------------


def _no_space_fill(folder: Path) -> None:
    (folder / OBJECT_FILE).write_bytes(b"half of it")
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_file_system_is_one_bench_error_naming_the_folder_and_leaves_no_entry(tmp_path):
    cache = Cache(tmp_path / "cache")
    with pytest.raises(BenchError) as caught:
        cache.write("models", "k1", _no_space_fill)
    message = str(caught.value)
    assert "no space left" in message and str(tmp_path / "cache") in message and "\n" not in message
    assert not cache.entry_path("models", "k1").exists()
    assert list((tmp_path / "cache" / "models").iterdir()) == []  # no temporary either


@pytest.mark.parametrize("error", [
    RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 64 vs 0"),
    RuntimeError("[enforce fail at inline_container.cc:820] . PytorchStreamWriter failed writing file "
                 "data/0: file write failed"),
])
def test_torch_s_zip_writer_on_a_full_disk_is_the_same_one_line(tmp_path, monkeypatch, error):
    def full_disk_save(obj, f, *args, **kwargs):
        Path(f).write_bytes(b"PK\x03\x04 partial zip")
        raise error

    monkeypatch.setattr(torch, "save", full_disk_save)
    cache = Cache(tmp_path)
    with pytest.raises(BenchError, match="no space left on the cache folder"):
        cache.save("models", "k1", OBJ)
    assert list((tmp_path / "models").iterdir()) == []


def test_other_errors_pass_through_unchanged(tmp_path):
    cache = Cache(tmp_path)

    def broken(folder: Path) -> None:
        raise RuntimeError("a bug in the builder")

    with pytest.raises(RuntimeError, match="a bug in the builder"):
        cache.write("models", "k1", broken)
    assert list((tmp_path / "models").iterdir()) == []


def test_no_space_is_recognised_through_a_chain():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise RuntimeError("writing failed") from inner
    except RuntimeError as outer:
        assert is_no_space(outer)
    assert not is_no_space(RuntimeError("shape mismatch"))
    assert not is_no_space(OSError(errno.EACCES, "Permission denied"))
    assert cache_module.NO_SPACE_TEXTS  # the words torch and Arrow use without an errno
