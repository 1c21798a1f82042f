"""Issue 62 part 6: a submitted mechanism runs isolated, in ``bench submit`` and ``bench leaderboard verify``.

Every call into a ``--mechanism-file`` (or an entry's carried source) goes to a worker process
in a bubblewrap sandbox (:mod:`bench.testing.isolated`); PrivBench's process never imports the
file. What is tested: a release through the worker is byte for byte the release in-process
(shipped mechanisms copied into files, one that fits among them); the worker's failures are one
line naming the mechanism, never a hang; ``bench submit`` refuses a file that reads ``~/.netrc``
whenever the old probe is not looking (tests/fixtures/cheats/cheat_netrc.py) and one that writes
``/tmp/x`` or into PrivBench's working directory only in the real cells (cheat_writer.py), and
writes no entry; ``bench leaderboard verify`` recomputes an entry's cell through the worker and
refuses the writer there too. Cells are made up where the test is about the path (as in
test_submit.py), and real but cheap (no adversary, one short epoch) where the mechanism must run
in them.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from bench.cli import main
from bench.core.interfaces import RunContext
from bench.core.registry import load_file, mechanisms, scoped
from bench.data.base import ImageSet
from bench.errors import BenchError
from bench.release import guard
from bench.release.dataset import apply_to_split, needs_fit
from bench.testing import isolated
from bench.testing.isolated import (
    IsolatedMechanism,
    WorkerFailure,
    close_all,
    load_isolated,
)
from leaderboard.entry_code import SOURCE_FIELD, load_entry_code
from leaderboard.reproduce import plan_cell
from tests.integration.test_submit import log_made_up_cells

ROOT = Path(__file__).resolve().parents[2]
CHEATS = ROOT / "tests" / "fixtures" / "cheats"
TASK = "fewshot_synth_faces"
CHEAP = {"description": "isolation suite", "profile": "smoke", "seeds": [0, 1, 2], "benchmarks": [TASK],
         "attacks": [], "mechanisms": [{"name": "gate_cheat_writer", "grid": {"radius": [2.0]}}],
         "set": {"task": {"epochs": 1, "episodes_per_epoch": 2, "val_episodes": 5, "test_episodes": 5}}}
"""Real cells that cost little: no adversary, one epoch of two episodes (about 25 s each on a shared 2-core CPU)."""


@pytest.fixture(autouse=True)
def _fresh_workers():
    """Each test starts its own workers and leaves none running."""
    yield
    close_all()


def _kind() -> str:
    from bench.testing.isolation import bwrap_usable

    return "bwrap" if bwrap_usable() is None else "process"


def _shipped_copy(tmp_path: Path, name: str) -> tuple[Path, str]:
    """A shipped mechanism's module copied into one file, registered under another name."""
    text = (ROOT / "mechanisms" / f"{name}.py").read_text(encoding="utf-8")
    assert f'@register_mechanism("{name}")' in text
    path = tmp_path / f"file_{name}.py"
    path.write_text(text.replace(f'@register_mechanism("{name}")', f'@register_mechanism("file_{name}")'),
                    encoding="utf-8")
    return path, f"file_{name}"


def _images(n: int, c: int, h: int, w: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (n, c, h, w), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)


def _release(name: str, params: dict, split: ImageSet, public: ImageSet, ctx: RunContext):
    mechanism = mechanisms.get(name)(**params)
    if needs_fit(mechanism):
        guard.fit(mechanism, public, ctx)
    released, _ = apply_to_split(mechanism, split, ctx, "release/test", batch=128)
    return released, mechanism.claim(), dict(mechanism.config), type(mechanism).version


@pytest.mark.parametrize("name, params", [("gaussian_noise", {"sigma": 30.0}),
                                          ("dp_pix", {"epsilon": 1.0, "block": 4}),
                                          ("dp_latent", {"epsilon": 2.0, "latent_dim": 2, "steps": 25})])
def test_a_release_through_the_worker_is_the_release_in_process(tmp_path, name, params):
    """300 ragged colour images in batches of 128 (the last one short); dp_latent fits its autoencoder first."""
    path, registered = _shipped_copy(tmp_path, name)
    split = ImageSet(images=_images(300, 3, 29, 23, 1), labels=torch.zeros(300, dtype=torch.int64))
    public = ImageSet(images=_images(64, 3, 29, 23, 2), labels=torch.zeros(64, dtype=torch.int64))
    ctx = RunContext(device=torch.device("cpu"), seed=3, profile="smoke", data_root=None, cache_dir=tmp_path / "c1")
    with scoped():
        load_file(path)
        expected = _release(registered, params, split, public, ctx)
    ctx = RunContext(device=torch.device("cpu"), seed=3, profile="smoke", data_root=None, cache_dir=tmp_path / "c2")
    with scoped():
        assert load_isolated([path])["kind"] == _kind()
        assert issubclass(mechanisms.get(registered), IsolatedMechanism)
        got = _release(registered, params, split, public, ctx)
    assert torch.equal(got[0], expected[0])  # the released bytes
    assert got[1:] == expected[1:]  # the claim, the resolved parameters, the version


FAULTY = '''
import os
import time

from bench.errors import BenchError
from bench.registry import register_mechanism
from mechanisms.blur import Blur


@register_mechanism("iso_prints")
class Prints(Blur):
    def apply(self, images, *, generator, boxes=None):
        print("noise on the standard output")
        return super().apply(images, generator=generator, boxes=boxes)


@register_mechanism("iso_raises")
class Raises(Blur):
    def apply(self, images, *, generator, boxes=None):
        raise ValueError("no luck\\nat all")


@register_mechanism("iso_refuses")
class Refuses(Blur):
    def apply(self, images, *, generator, boxes=None):
        raise BenchError("iso_refuses takes no batch today")


@register_mechanism("iso_hangs")
class Hangs(Blur):
    def apply(self, images, *, generator, boxes=None):
        time.sleep(3600)


@register_mechanism("iso_dies")
class Dies(Blur):
    def apply(self, images, *, generator, boxes=None):
        os._exit(3)
'''


def test_the_workers_failures_are_one_line_naming_the_mechanism_never_a_hang(tmp_path, monkeypatch):
    from bench.randomness.streams import Streams

    path = tmp_path / "faulty.py"
    path.write_text(FAULTY, encoding="utf-8")
    images, streams = _images(4, 3, 8, 8, 0), Streams.for_images(0, "t", 4)
    with scoped():
        load_isolated([path])
        assert guard.apply(mechanisms.get("iso_prints")(), images, generator=streams).shape == images.shape
        with pytest.raises(ValueError, match=r"^mechanism 'iso_raises' raised ValueError: no luck at all "
                                             r"\(faulty.py:\d+\), in its isolated worker$"):
            guard.apply(mechanisms.get("iso_raises")(), images, generator=streams)
        with pytest.raises(BenchError, match="^iso_refuses takes no batch today$"):
            guard.apply(mechanisms.get("iso_refuses")(), images, generator=streams)
        monkeypatch.setattr(isolated, "CALL_TIMEOUT_S", 3.0)
        started = time.monotonic()
        with pytest.raises(WorkerFailure, match=r"^mechanism 'iso_hangs' \(faulty.py\): its isolated worker did not "
                                                r"answer apply on 4 images within 3 s; it was stopped$"):
            guard.apply(mechanisms.get("iso_hangs")(), images, generator=streams)
        assert time.monotonic() - started < 30
        with pytest.raises(WorkerFailure, match="was stopped"):  # its instances went with it
            mechanisms.get("iso_prints")()
        monkeypatch.setattr(isolated, "CALL_TIMEOUT_S", 300.0)
        load_isolated([path])  # a new worker serves the registered classes
        with pytest.raises(WorkerFailure, match=r"^mechanism 'iso_dies' \(faulty.py\): its isolated worker ended "
                                                r"during apply on 4 images \(exit code 3"):
            guard.apply(mechanisms.get("iso_dies")(), images, generator=streams)


def _submit(suite: Path, mechanism: Path, name: str, tmp: Path, cache: Path, capsys) -> tuple[int, str, Path]:
    entries = tmp / "entries"
    code = main(["submit", "--mechanism-file", str(mechanism), "--mechanism", name, "--suite", str(suite),
                 "--results-dir", str(tmp / "results"), "--cache-dir", str(cache), "--entries", str(entries)])
    _, err = capsys.readouterr()
    return code, err, entries


def test_submit_refuses_a_file_that_reads_the_home_whenever_the_probe_is_not_looking(tmp_path, capsys, shared_cache):
    suite = tmp_path / "small.yaml"
    suite.write_text(yaml.safe_dump({**CHEAP, "mechanisms": [{"name": "gate_cheat_netrc",
                                                                "grid": {"epsilon": [1.0], "block": [4]}}]}))
    with scoped():
        code, err, entries = _submit(suite, CHEATS / "cheat_netrc.py", "gate_cheat_netrc", tmp_path, shared_cache,
                                     capsys)
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "bench: error: mechanism 'gate_cheat_netrc' (cheat_netrc.py): isolation: it read or wrote the user's home "
        "in its sandbox (first: ~/.netrc); refused"), err
    assert not entries.exists() or not list(entries.glob("*.json"))
    assert "bench_user_cheat_netrc" not in " ".join(sys.modules)  # never imported into this process


@pytest.mark.parametrize("where", ["/tmp/x", "cwd"])
def test_submit_refuses_a_file_that_writes_outside_its_folder_in_the_real_cells(tmp_path, capsys, shared_cache,
                                                                                 monkeypatch, where):
    """The cheat passes every check of the gate: it writes only in a cell's release of the train split."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    target = "/tmp/x" if where == "/tmp/x" else str(work / "stolen.txt")
    writer = tmp_path / "writer.py"
    writer.write_text((CHEATS / "cheat_writer.py").read_text().replace('TARGET = "/tmp/x"', f"TARGET = {target!r}"))
    suite = tmp_path / "small.yaml"
    suite.write_text(yaml.safe_dump(CHEAP))
    with scoped():
        code, err, entries = _submit(suite, writer, "gate_cheat_writer", tmp_path, shared_cache, capsys)
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("bench: error: mechanism 'gate_cheat_writer' (writer.py): isolation: it wrote outside "
                           "its private folder in its sandbox (first: "), err
    assert target in last and last.endswith("; refused")
    assert "checks at the task's size and on the release passed" in err  # the gate saw nothing
    assert not entries.exists() or not list(entries.glob("*.json"))
    if _kind() == "bwrap":  # without a sandbox the write happened: it is refused, not prevented
        assert not Path(target).exists()
    else:
        Path(target).unlink(missing_ok=True)


@pytest.fixture(scope="module")
def honest_entry(tmp_path_factory, shared_cache):
    """An entry of a blur written by ``bench submit --mechanism-file`` (over made-up cells), carrying its source."""
    root = tmp_path_factory.mktemp("isolated_entry")
    honest = root / "honest_blur.py"
    honest.write_text((CHEATS / "cheat_writer.py").read_text().replace("if in_a_cell(generator):", "if False:"))
    suite, results, entries = root / "small.yaml", root / "results", root / "entries"
    suite.write_text(yaml.safe_dump(CHEAP))
    with scoped():
        load_isolated([honest])  # planned as submit plans it: the file is never imported here
        log_made_up_cells(suite, "gate_cheat_writer", results)
        code = main(["submit", "--mechanism-file", str(honest), "--mechanism", "gate_cheat_writer", "--suite",
                     str(suite), "--results-dir", str(results), "--cache-dir", str(shared_cache), "--entries",
                     str(entries)])
    close_all()
    assert code == 0
    (path,) = entries.glob("*.json")
    return path


def test_submit_records_how_the_file_ran_and_carries_it(honest_entry):
    entry = json.loads(honest_entry.read_text(encoding="utf-8"))
    assert entry["isolation"]["kind"] == _kind()
    assert entry[SOURCE_FIELD]["file"] == "honest_blur.py"
    assert "bench_user_honest_blur" not in " ".join(sys.modules)


def test_verify_recomputes_a_carried_mechanism_in_its_worker(honest_entry, tmp_path, capsys, shared_cache):
    with scoped():
        code = main(["leaderboard", "verify", str(honest_entry), "--sample", "1", "--cache-dir", str(shared_cache),
                     "--results-dir", str(tmp_path / "verify")])
    out, err = capsys.readouterr()
    assert code == 1, err  # the made-up numbers do not match what the worker's release gives
    assert out.count("mismatch: ") == 1 and "numbers compared" in out  # computed, then compared
    from leaderboard.reproduced import record_path

    record = json.loads(record_path(honest_entry).read_text(encoding="utf-8"))
    assert record["code"]["isolation"] == _kind()
    assert "bench_user_honest_blur" not in " ".join(sys.modules)


def test_verify_refuses_a_carried_mechanism_that_writes_outside_its_folder(honest_entry, tmp_path, capsys):
    from leaderboard.reproduced import record_path

    entry = json.loads(honest_entry.read_text(encoding="utf-8"))
    text = (CHEATS / "cheat_writer.py").read_text(encoding="utf-8")
    entry[SOURCE_FIELD] = {"file": "honest_blur.py", "text": text, "sha256": hashlib.sha256(text.encode()).hexdigest()}
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(entry), encoding="utf-8")
    with scoped():  # a cell key names the carried code: the swapped file alone is a mismatch, before it runs
        code = main(["leaderboard", "verify", str(forged), "--sample", "1", "--cache-dir", str(tmp_path / "cache"),
                     "--results-dir", str(tmp_path / "keyed")])
    out, _ = capsys.readouterr()
    assert code == 1 and "planned here" in out and not (tmp_path / "cache" / "releases").exists(), out
    record_path(forged).unlink()  # the mismatch is recorded; what follows must record nothing
    with scoped():  # a forger who also re-keys the cells for the swapped file
        load_entry_code(entry, isolated=True)
        for cell in entry["cells"]:
            cell["cell_key"] = plan_cell(entry, cell, tmp_path / "plan", tmp_path / "cache", None, "cpu").key
    forged.write_text(json.dumps(entry), encoding="utf-8")
    with scoped():  # a cache of its own: the honest code's release of the cell (same name and version) is cached
        code = main(["leaderboard", "verify", str(forged), "--sample", "1", "--cache-dir", str(tmp_path / "cache"),
                     "--results-dir", str(tmp_path / "verify")])
    _, err = capsys.readouterr()
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("bench: error: mechanism 'gate_cheat_writer' (honest_blur.py): isolation: it wrote "
                           "outside its private folder in its sandbox (first: ") and "/tmp/x" in last, err
    assert not record_path(forged).exists()
    if _kind() == "bwrap":
        assert not Path("/tmp/x").exists()
    else:
        Path("/tmp/x").unlink(missing_ok=True)


def test_where_bwrap_cannot_sandbox_the_worker_is_a_plain_process_that_still_refuses(tmp_path, monkeypatch, capsys):
    """The fallback: one warning line, ``isolation: process``; its canary $HOME and its audit hook still refuse."""
    from bench.randomness.streams import Streams
    from bench.testing.isolated import IsolationBreach

    monkeypatch.setattr(isolated, "_bwrap_problem", lambda: "bwrap cannot create a sandbox here: (simulated)")
    target = tmp_path / "outside.txt"
    writer = tmp_path / "writer.py"
    writer.write_text((CHEATS / "cheat_writer.py").read_text().replace('TARGET = "/tmp/x"', f"TARGET = {str(target)!r}")
                      .replace('"gate_cheat_writer"', '"process_writer"'))
    images, train = _images(4, 3, 8, 8, 0), Streams.for_images(0, "release/train", 4)
    with scoped():
        record = load_isolated([CHEATS / "cheat_netrc.py"])
        assert capsys.readouterr().err.strip() == ("[bench] warning: bwrap cannot create a sandbox here: (simulated); "
                                                   "the mechanism runs in a separate process without a sandbox "
                                                   "(isolation: process)")
        assert record["kind"] == "process" and "simulated" in record["reason"]
        with pytest.raises(IsolationBreach, match=r"home in its sandbox \(first: ~/.netrc\); refused$"):
            guard.apply(mechanisms.get("gate_cheat_netrc")(epsilon=1.0, block=4), images, generator=train)
        load_isolated([writer])
        with pytest.raises(IsolationBreach, match=r"outside its private folder in its sandbox \(first: wrote "
                                                  + str(target).replace(".", r"\.")):
            guard.apply(mechanisms.get("process_writer")(), images, generator=train)
    assert target.exists()  # nothing prevented the write without a sandbox; the mechanism is refused for it
