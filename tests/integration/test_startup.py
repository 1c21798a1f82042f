"""Commands that compute nothing answer from what the code alone decides, kept once (issue 58, part 4).

``bench list``, a mistyped ``bench run`` and ``bench leaderboard show`` work out their answers
the first time (importing every built-in, planning every shipped suite's cells) and keep
them (:mod:`bench.storage.derived`); the next run prints the same, byte for byte, without
importing torch. Timings are measured by ``benchmarks/startup.py``, not here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = r"""
import json, sys
from bench.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as exc:
    status = exc.code
heavy = sorted(m for m in ("torch", "torchvision", "mlflow", "matplotlib", "optuna", "opacus") if m in sys.modules)
print(json.dumps({"status": status, "heavy": heavy}), file=sys.stderr)
"""


def bench(tmp_path: Path, cache: Path, *argv: str) -> tuple[int, str, str, list[str]]:
    """Runs ``bench ARGV`` in a fresh process from an empty folder; returns (status, stdout, stderr, heavy modules)."""
    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_RESULTS", "BENCH_ENTRIES", "BENCH_DATA")}
    env["BENCH_DERIVED"] = str(cache)
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    *err, last = done.stderr.splitlines() or [""]
    probe = json.loads(last)
    return probe["status"], done.stdout, "\n".join(err), probe["heavy"]


@pytest.mark.parametrize("argv", [
    ["list"],
    ["list", "mechanisms", "--pattern", "dp_*"],
    ["run", "--mechanism", "dp_pixx", "--task", "fewshot_synth_faces"],
    ["run", "--mechanism", "dp_pix", "--task", "fewshot_synth_facez"],
])
def test_a_listing_and_a_mistyped_name_are_answered_again_without_torch(tmp_path, argv):
    cache = tmp_path / "cache"
    first = bench(tmp_path, cache, "list")  # keeps the listing and the registries' names
    cold = bench(tmp_path, tmp_path / "other-cache", *argv)
    warm = bench(tmp_path, cache, *argv)
    assert first[0] == 0 and "torch" in first[3]
    assert warm[:3] == cold[:3]
    assert warm[3] == []
    if argv[0] == "run":
        assert warm[0] == 2 and "did you mean" in warm[2]


def test_leaderboard_show_prints_the_same_from_kept_planning_without_torch(tmp_path):
    cache = tmp_path / "cache"
    cold = bench(tmp_path, cache, "leaderboard", "show")
    kept = sorted(p.name.split("-")[0] for p in cache.glob("*.json"))
    warm = bench(tmp_path, cache, "leaderboard", "show")
    assert cold[0] == 0 and cold[1]
    assert {"registries", "suites", "staleness"} <= set(kept)
    assert warm[:3] == cold[:3]
    assert warm[3] == []


def test_an_unwritable_cache_folder_only_costs_time(tmp_path):
    cache = tmp_path / "cache"
    cache.write_text("a file where the folder would be")
    first = bench(tmp_path, cache, "run", "--mechanism", "dp_pixx", "--task", "fewshot_synth_faces")
    again = bench(tmp_path, cache, "run", "--mechanism", "dp_pixx", "--task", "fewshot_synth_faces")
    assert first[:3] == again[:3] and first[0] == 2 and "did you mean 'dp_pix'" in first[2]
    assert "torch" in again[3]  # nothing was kept: worked out again
