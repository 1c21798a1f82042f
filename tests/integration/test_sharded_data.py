"""A cell whose releases are read from disk shards gives the numbers of one whose releases are in memory."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

import bench.data.shards as shards
from bench.cli import main


def run(tmp_path, name: str) -> dict:
    results = tmp_path / name
    argv = ["run", "--mechanism", "dp_pix", "--param", "epsilon=3", "--task", "fewshot_synth_faces",
            "--profile", "smoke", "--attacks", "face_reid,denoise", "--results-dir", str(results)]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(argv) == 0
    (path,) = results.rglob("result.json")
    return json.loads(path.read_text())


@pytest.mark.slow
def test_streamed_from_disk_or_held_in_memory_a_cell_gives_the_same_numbers(tmp_path, monkeypatch):
    in_memory = run(tmp_path, "memory")
    monkeypatch.setattr(shards, "MATERIALIZE_BYTES", 0)
    monkeypatch.setattr(shards, "SHARD_BYTES", 1 << 20)  # several shards per split
    on_disk = run(tmp_path, "disk")
    for field in ("utility", "attacks", "privacy", "privacy_score", "cell_key", "dataset_fingerprint"):
        assert on_disk[field] == in_memory[field], field
