"""Issue 62, parts 5 and 6: cheats that pass the 11 conformance checks are refused by the gate, honest mechanisms are not.

The cheats (tests/fixtures/cheats/) are DP-Pix honest on the suite's small batches but:
at the benchmark's 64 x 64 (``cheat_size``), at batch position 999 (``cheat_batch``), on a
stream seed in a thousand (``cheat_stream``), or reading the home and writing /tmp
(``cheat_home``, run in its isolated worker: tests/integration/test_isolated_mechanism.py has the rest). Each test runs the gate's own functions at smoke sizes; the runs at the
shipped boards' full sizes and data are ``slow``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.core.registry import load_mechanism_file, mechanisms
from bench.data.base import ImageSet
from bench.testing.mechanisms import run_conformance
from bench.testing.release_checks import (
    ReleaseCheckError,
    check_outliers,
    release_stats,
    release_sweep,
)
from bench.testing.sized import SizedTarget, sized_audit, sized_conformance

CHEATS = Path(__file__).parents[1] / "fixtures" / "cheats"
FACES = SizedTarget("fewshot_synth_faces", 3, 64, 64, 1024)
"""The synthetic faces as the standard suite releases them on the CPU: 64 x 64 stored, batches of 1,024."""
DP = {"epsilon": 1.0, "block": 4}


@pytest.fixture(scope="module")
def cheat():
    """Loads the cheat files once, in a registry scope of the module's; returns stem -> registered name."""
    with mechanisms.scoped():
        names = {stem: load_mechanism_file(CHEATS / f"{stem}.py")[0]
                 for stem in ("cheat_size", "cheat_batch", "cheat_stream")}
        yield names.__getitem__


def _ctx(tmp_path):
    from bench.core.interfaces import RunContext

    return RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=None, cache_dir=tmp_path)


def _faces(n: int, side: int = 64, seed: int = 0) -> ImageSet:
    images = torch.randint(0, 256, (n, 3, side, side), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)
    return ImageSet(images=images, labels=torch.zeros(n, dtype=torch.int64))


@pytest.mark.parametrize("stem", ["cheat_size", "cheat_batch", "cheat_stream"])
def test_the_cheats_pass_the_small_conformance_suite(cheat, stem):
    """What makes them cheats: the suite at its own sizes sees nothing (the audit, the slow check, aside)."""
    name = cheat(stem)
    assert run_conformance(name, checks=["uint8", "determinism", "batch_independence", "claimed_noise"]) == []


def test_a_batch_position_cheat_fails_conformance_at_the_release_batch(cheat):
    failures = sized_conformance(cheat("cheat_batch"), DP, FACES, "cpu")
    assert failures and failures[0].startswith("batch_independence at fewshot_synth_faces (1024 x 3 x 64 x 64)")
    assert "image 999 of a batch" in failures[0]


@pytest.mark.parametrize("stem, first", [("cheat_size", "image 0 of"), ("cheat_batch", "image 999 of")])
def test_a_release_with_an_image_as_it_came_is_refused(cheat, tmp_path, stem, first):
    name = cheat(stem)
    with pytest.raises(ReleaseCheckError, match=f"^release check unchanged: {name} released {first} faces test") as err:
        release_sweep(name, mechanisms.get(name)(**DP), _faces(1024), _ctx(tmp_path), purpose="release/test",
                      where="faces test", total=1024)
    assert "\n" not in str(err.value)


def test_a_stream_seed_cheat_is_found_by_the_stream_sweep(cheat, tmp_path):
    """1 stream in 1,000 is left as it was: the split's own streams may miss it, 8,192 streams do not."""
    name = cheat("cheat_stream")
    with pytest.raises(ReleaseCheckError, match="^release check unchanged: .* stream sweep"):
        release_sweep(name, mechanisms.get(name)(**DP), _faces(512, side=16), _ctx(tmp_path), purpose="release/test",
                      where="faces test", total=8192)


def test_a_copy_of_another_clean_image_is_refused(tmp_path):
    clean = _faces(16, side=8).images
    released = clean.roll(1, dims=0)
    from bench.testing.release_checks import check_release

    with pytest.raises(ReleaseCheckError, match="^release check clean_copy: x released image 0 of s byte-equal to "
                                                "clean image 15"):
        check_release("x", clean, released, where="s")


def test_an_image_noised_far_less_than_the_bulk_is_an_outlier():
    clean = torch.full((64, 3, 8, 8), 128, dtype=torch.uint8)
    noise = torch.randint(-20, 21, clean.shape, generator=torch.Generator().manual_seed(1))
    released = (clean.int() + noise).clamp(0, 255).to(torch.uint8)
    released[37] = clean[37]
    released[37, 0, 0, 0] = 129  # one value changed: not equal to its input, still no noise
    with pytest.raises(ReleaseCheckError, match="^release check noise_outlier: x changed image 37 of s"):
        check_outliers("x", release_stats(clean, released), "s")


@pytest.mark.parametrize("name, params", [("dp_pix", DP), ("dp_pix", {"epsilon": 100.0, "block": 4}),
                                          ("image_dp", {"epsilon": 1000.0, "block": 2, "colours": 32}),
                                          ("gaussian_noise", {"sigma": 20.0}), ("blur", {"radius": 8.0})])
def test_honest_mechanisms_pass_the_checks_at_the_faces_size(tmp_path, name, params):
    assert sized_conformance(name, params, FACES, "cpu") == []
    if mechanisms.get(name)(**params).claim() is not None:
        assert release_sweep(name, mechanisms.get(name)(**params), _faces(256), _ctx(tmp_path),
                             purpose="release/test", where="faces", total=1024) == 1024


def test_the_audit_at_the_task_size_refutes_a_size_cheat_cheap(cheat):
    """The audit at the faces' size with few trials: an un-noised 64 x 64 image is refuted."""
    from bench.audit import run_audit

    report = run_audit(cheat("cheat_size"), DP, 300, confidence=0.99, image_size=64)
    assert report.verdict == "failed"


@pytest.mark.slow
def test_the_sized_audit_refutes_a_size_cheat_and_passes_dp_pix(cheat):
    """About 40 s each on a shared 2-core CPU (the scan of every pixel of a 64 x 64 image)."""
    assert sized_audit(cheat("cheat_size"), DP, FACES, "cpu").verdict == "failed"
    assert sized_audit("dp_pix", DP, FACES, "cpu").verdict != "failed"


def _isolated(path: Path, name: str, params: dict) -> tuple[dict, object]:
    """Loads a file in a bubblewrap-isolated worker (within the module's registry scope) and builds one instance."""
    from bench.testing.isolated import load_isolated
    from bench.testing.isolation import bwrap_usable

    why = bwrap_usable()
    if why is not None:
        pytest.skip(why)
    record = load_isolated([path], "bwrap")
    return record, mechanisms.get(name)(**params)


def test_a_file_that_reads_the_home_is_refused_in_its_sandbox(cheat):
    from bench.randomness.streams import Streams
    from bench.release import guard
    from bench.testing.isolated import IsolationBreach, close_all

    _, mechanism = _isolated(CHEATS / "cheat_home.py", "gate_cheat_home", DP)
    with pytest.raises(IsolationBreach, match=r"^mechanism 'gate_cheat_home' \(cheat_home.py\): isolation: it read or "
                                              r"wrote the user's home in its sandbox \(first: ~\); refused$") as err:
        guard.apply(mechanism, _faces(8, side=16).images, generator=Streams.for_images(0, "t", 8))
    assert "\n" not in str(err.value)
    with pytest.raises(IsolationBreach):  # every later call too: its worker was stopped
        mechanism.claim()
    close_all()
    assert not Path("/tmp/gate_cheat_home.txt").exists()


def test_a_file_that_writes_outside_its_folder_is_refused_and_an_honest_one_passes(cheat, tmp_path):
    from bench.randomness.streams import Streams
    from bench.release import guard
    from bench.testing.isolated import IsolationBreach, close_all

    writer = tmp_path / "writer.py"
    writer.write_text((CHEATS / "cheat_size.py").read_text().replace('"gate_cheat_size"', '"gate_writer"').replace(
        "        return super().apply(", "        open('/tmp/left_behind', 'w').close()\n        return super().apply("))
    _, mechanism = _isolated(writer, "gate_writer", DP)
    with pytest.raises(IsolationBreach, match=r"^mechanism 'gate_writer' .* outside its private folder .*/tmp/left_"):
        guard.apply(mechanism, _faces(8, side=16).images, generator=Streams.for_images(0, "t", 8))
    honest = tmp_path / "honest.py"
    honest.write_text((CHEATS / "cheat_size.py").read_text().replace('"gate_cheat_size"', '"gate_honest"'))
    record, mechanism = _isolated(honest, "gate_honest", DP)
    guard.apply(mechanism, _faces(8, side=16).images, generator=Streams.for_images(0, "t", 8))
    assert record["kind"] == "bwrap" and record["network"] == "none"
    close_all()
    assert not Path("/tmp/left_behind").exists()


@pytest.mark.slow
@pytest.mark.parametrize("suite", ["standard", "classify_baselines", "reid_baselines"])
def test_the_shipped_boards_honest_mechanisms_pass_the_release_checks_on_their_data(tmp_path, shared_cache, suite):
    """dp_pix and image_dp at the shipped suites' settings, on each board's real evaluation splits (minutes)."""
    from bench.cell.plan import run_context
    from bench.cli.submit_gate import gate_data
    from bench.scale.grid import Placement, load_suite

    data = gate_data(load_suite(suite), Placement(results_dir=tmp_path, cache_dir=shared_cache, device="cpu"))[0]
    ctx = run_context(data.planned, lambda _line: None, None)
    for name, params in [("dp_pix", DP), ("dp_pix", {"epsilon": 100.0, "block": 4}),
                         ("image_dp", {"epsilon": 1e6, "block": 4, "colours": 64})]:
        assert sized_conformance(name, params, data.target, "cpu") == []
        for split_name, split in data.splits.items():
            release_sweep(name, mechanisms.get(name)(**params), split, ctx, purpose=f"release/{split_name}",
                          where=split_name)
