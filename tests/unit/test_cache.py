"""The verified cache: damaged, truncated, foreign or half-written entries are never used."""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import bench.storage.cache as cache_module
from bench.storage.cache import MANIFEST, OBJECT_FILE, Cache, remove_stale_temporaries

OBJ = {"state": {"w": torch.arange(1000, dtype=torch.float32)}, "info": {"epochs": 3, "name": "x"}}


def stored(tmp_path: Path) -> tuple[Cache, Path]:
    cache = Cache(tmp_path)
    cache.save("models", "k1", OBJ)
    return cache, cache.entry_path("models", "k1")


def equal(a, b) -> bool:
    return torch.equal(a["state"]["w"], b["state"]["w"]) and a["info"] == b["info"]


def test_an_entry_round_trips_and_records_key_and_checksums(tmp_path):
    cache, path = stored(tmp_path)
    manifest = json.loads((path / MANIFEST).read_text())
    assert manifest["kind"] == "models" and manifest["key"] == "k1"
    assert set(manifest["files"]) == {OBJECT_FILE} and len(manifest["files"][OBJECT_FILE]["xxh3_128"]) == 32
    assert equal(cache.load("models", "k1"), OBJ)
    assert cache.load("models", "other") is None


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage, reason", [
    (lambda p: _flip(p / OBJECT_FILE, 700), "checksum mismatch"),
    (lambda p: (p / OBJECT_FILE).write_bytes((p / OBJECT_FILE).read_bytes()[:300]), "truncated"),
    (lambda p: (p / OBJECT_FILE).write_bytes(b""), "truncated"),
    (lambda p: (p / MANIFEST).unlink(), "no manifest"),
    (lambda p: (p / MANIFEST).write_text("{not json"), "unreadable manifest"),
    (lambda p: (p / "extra.bin").write_bytes(b"x"), "files differ"),
    (lambda p: (p / OBJECT_FILE).unlink(), "files differ"),
])
def test_a_damaged_entry_is_reported_in_one_line_removed_and_never_used(tmp_path, capsys, damage, reason):
    cache, path = stored(tmp_path)
    cache_module._verified.clear()
    damage(path)
    assert cache.load("models", "k1") is None
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and reason in err and "models/k1" in err
    assert not path.exists()
    built, hit = cache.get_or_build("models", "k1", lambda: OBJ)
    assert not hit and equal(built, OBJ) and equal(cache.load("models", "k1"), OBJ)


def test_an_entry_copied_under_another_key_is_refused(tmp_path, capsys):
    cache, path = stored(tmp_path)
    os.rename(path, cache.entry_path("models", "k2"))
    assert cache.load("models", "k2") is None
    assert "manifest names models/k1" in capsys.readouterr().err


def test_payloads_that_would_run_code_are_refused(tmp_path, capsys):
    """A cache is a shared directory: whoever can write into it must not run code as its readers."""
    cache, path = stored(tmp_path)
    marker = tmp_path / "ran"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    def write_exploit(folder: Path) -> None:
        with open(folder / OBJECT_FILE, "wb") as f:
            torch.save({"x": torch.zeros(1)}, f)
        (folder / OBJECT_FILE).write_bytes(pickle.dumps(Exploit()))

    cache.write("models", "evil", write_exploit)  # checksums match: only weights_only stands in the way
    assert cache.load("models", "evil") is None
    assert not marker.exists()
    assert "unreadable" in capsys.readouterr().err


def test_verification_hashes_an_entry_once_per_process(tmp_path, monkeypatch):
    cache, _ = stored(tmp_path)
    cache_module._verified.clear()
    calls = []
    real = cache_module.checksum
    monkeypatch.setattr(cache_module, "checksum", lambda p: calls.append(p) or real(p))
    for _ in range(3):
        assert cache.load("models", "k1") is not None
    assert len(calls) == 1


def test_an_entry_rewritten_elsewhere_is_verified_again(tmp_path, capsys):
    """The memo is keyed by the manifest's inode and mtime: another writer's entry is checked anew."""
    cache, path = stored(tmp_path)
    assert cache.load("models", "k1") is not None
    time.sleep(0.01)
    other = dict(OBJ, info={"epochs": 4, "name": "x"})
    cache.save("models", "k1", other)
    cache_module._verified.pop(cache_module._stamp(path))  # as if another process had rewritten it
    _flip(path / OBJECT_FILE, 700)
    assert cache.load("models", "k1") is None
    assert "checksum mismatch" in capsys.readouterr().err


def test_temporaries_of_dead_processes_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    host = socket.gethostname()
    kind = tmp_path / "releases"
    kind.mkdir()
    left = kind / f".abc.{host}.{pid}.1234abcd.tmp"
    left.mkdir()
    (left / OBJECT_FILE).write_bytes(b"half")
    alive = kind / f".abd.{host}.{os.getpid()}.1234abcd.tmp"
    alive.mkdir()
    other_host = kind / f".abe.elsewhere.{pid}.1234abcd.tmp"
    other_host.mkdir()
    removed = remove_stale_temporaries(tmp_path)
    assert removed == [left] and alive.exists() and other_host.exists()
    old = time.time() - 2 * cache_module.STALE_TMP_S
    os.utime(other_host, (old, old))
    assert remove_stale_temporaries(tmp_path) == [other_host]


def test_a_kill_during_a_write_leaves_no_entry(tmp_path):
    cache = Cache(tmp_path)

    def fill(folder: Path) -> None:
        (folder / OBJECT_FILE).write_bytes(b"partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cache.write("models", "k1", fill)
    assert not cache.entry_path("models", "k1").exists()
    assert not [p for p in (tmp_path / "models").iterdir() if p.suffix == ".tmp"]


def test_concurrent_builders_build_once(tmp_path):
    script = (
        "import sys, time, torch\n"
        "from bench.storage.cache import Cache\n"
        "def build():\n"
        "    print('built', flush=True); time.sleep(1.0); return {'x': torch.ones(3)}\n"
        f"obj, hit = Cache({str(tmp_path)!r}).get_or_build('models', 'k', build)\n"
        "assert torch.equal(obj['x'], torch.ones(3))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(out.count("built") for out in outs) == 1


def test_verify_and_strays(tmp_path):
    cache, path = stored(tmp_path)
    cache.save("releases", "r1", {"images": torch.zeros(2, 3, 4, 4, dtype=torch.uint8)})
    (tmp_path / "releases" / "legacy.pt").write_bytes(b"old format")
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "cell.lock").touch()
    _flip(path / OBJECT_FILE, 700)
    report = {(e.kind, e.key): problem for e, problem in cache.verify()}
    assert report[("releases", "r1")] is None and "checksum" in report[("models", "k1")]
    found = cache_module.survey(tmp_path)  # a file the cache did not write is foreign: listed, never removed
    assert found.foreign == [tmp_path / "releases" / "legacy.pt"] and not found.stale
