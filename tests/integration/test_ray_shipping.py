"""The ray executor ships PrivBench and --mechanism-file files, and checks what every node sees.

One Ray cluster of two nodes (one CPU each, on this machine) serves the whole module; every
``bench grid`` connects to it with ``--ray-address`` as a new job, as on a real cluster.
Cells are the smoke profile's, and share the session's cache.
"""

from __future__ import annotations

import dataclasses
import os
import re
import textwrap
from pathlib import Path

import pytest
from fixtures.smoke_cells import CHEAP_TASK

pytest.importorskip("ray", reason="the ray executor needs ray (pip install 'ray>=2.9')")

from bench.cli import main  # noqa: E402
from bench.core.registry import scoped  # noqa: E402
from bench.errors import BenchError  # noqa: E402
from bench.scale import raycluster  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TASK = "fewshot_synth_faces"

PLUGIN = textwrap.dedent('''
    import os
    from pathlib import Path

    import bench
    from bench.core.interfaces import Mechanism, ParamSpace
    from bench.core.registry import register_mechanism

    # Where each process that loads this file found it, and found PrivBench.
    (Path({markers!r}) / f"{{os.getpid()}}.txt").write_text(f"{{__file__}}\\n{{bench.__file__}}\\n{{os.getcwd()}}")


    @register_mechanism("shipped_identity")
    class ShippedIdentity(Mechanism):
        """The identity, from a --mechanism-file."""

        description = "identity, loaded from a mechanism file"
        params = ParamSpace()

        def apply(self, images, *, generator, boxes=None):
            self.check_inputs(images, generator)
            return images.clone()
''')


@pytest.fixture(scope="module")
def cluster():
    """A two-node Ray cluster (one CPU per node) for the module; yields its address."""
    from ray.cluster_utils import Cluster

    started = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "object_store_memory": 128 * 1024**2})
    try:
        started.add_node(num_cpus=1, object_store_memory=128 * 1024**2)
        started.wait_for_nodes()
        yield started.address
    finally:
        started.shutdown()


def grid_argv(results: Path, cache: Path, mechanism: str, *extra: str) -> list[str]:
    return ["grid", "--task", TASK, "--mechanism", mechanism, "--seeds", "0", "--profile", "smoke",
            "--results-dir", str(results), "--cache-dir", str(cache), "--executor", "ray", *extra]


def summary_counts(text: str) -> dict[str, int]:
    match = re.search(r"grid: (\d+) cells: (\d+) done, (\d+) skipped \(already finished\), (\d+) failed", text)
    assert match, text
    return dict(zip(("cells", "done", "skipped", "failed"), map(int, match.groups())))


def runs_by_key(results: Path, status: str) -> dict[str, list[str]]:
    """Cell key -> run ids with that status (empty before the database exists)."""
    from mlflow.tracking import MlflowClient

    if not (results / "mlflow.db").exists():
        return {}
    client = MlflowClient(tracking_uri=f"sqlite:///{results.resolve() / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("privbench")
    if experiment is None:
        return {}
    out: dict[str, list[str]] = {}
    for run in client.search_runs([experiment.experiment_id], filter_string=f"attributes.status = '{status}'"):
        out.setdefault(run.data.tags["bench.cell_key"], []).append(run.info.run_id)
    return out


def all_runs(results: Path) -> dict[str, list[str]]:
    return {status: runs_by_key(results, status) for status in ("FINISHED", "FAILED", "RUNNING")}


def tokens_in(cache: Path) -> list[Path]:
    return list(cache.glob(f"{raycluster.TOKEN_PREFIX}*"))


# --- (a) what is shipped ---------------------------------------------------------------------


def zipped(directory: Path, excludes: list[str], target: Path) -> set[str]:
    """The files of the package Ray builds from ``directory`` (as for a py_modules entry)."""
    from zipfile import ZipFile

    from ray._private.runtime_env.packaging import create_package

    create_package(str(directory), target, include_gitignore=True, include_parent_dir=True, excludes=excludes)
    with ZipFile(target) as archive:
        return {name for name in archive.namelist() if not name.endswith("/")}


def test_the_runtime_env_ships_the_five_packages_and_the_mechanism_files_without_junk(tmp_path):
    plugin = tmp_path / "mine" / "my_mech.py"
    plugin.parent.mkdir()
    plugin.write_text("X = 1\n")
    with raycluster.shipment([plugin]) as shipped:
        env = shipped.runtime_env
        assert env is not None
        assert [Path(p) for p in env["py_modules"]] == [ROOT / name for name in raycluster.PACKAGES]
        staging = Path(env["working_dir"])
        assert shipped.plugins == ("0/my_mech.py",)
        assert (staging / raycluster.PLUGIN_PACKAGE / "0" / "my_mech.py").read_text() == "X = 1\n"
        assert (staging / raycluster.PLUGIN_PACKAGE / "__init__.py").is_file()
        assert sorted(p.name for p in staging.iterdir()) == [raycluster.PLUGIN_PACKAGE]
        assert str(tmp_path) not in repr(dataclasses.replace(shipped, runtime_env=None))  # no driver path
    assert not staging.exists()

    # What Ray's own packaging puts in the zip of a package with junk in it, and of the real ones.
    fake = tmp_path / "pkg"
    for name in ("__init__.py", "sub/mod.py", "presets/p.yaml", "__pycache__/m.cpython-311.pyc",
                 "sub/__pycache__/x.pyc", "stale.pyc", ".venv/lib/site.py", "results/mlflow.db", ".cache/model.pt",
                 ".pytest_cache/v/x", "privbench.egg-info/PKG-INFO", ".git/HEAD"):
        (fake / name).parent.mkdir(parents=True, exist_ok=True)
        (fake / name).write_text("x")
    assert zipped(fake, env["excludes"], tmp_path / "fake.zip") == {"pkg/__init__.py", "pkg/sub/mod.py",
                                                                    "pkg/presets/p.yaml"}
    for package in env["py_modules"]:  # nothing a package needs is left out, and no junk goes in
        root = Path(package)
        wanted = {f"{root.name}/{p.relative_to(root).as_posix()}" for p in root.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts}
        names = zipped(root, env["excludes"], tmp_path / f"{root.name}.zip")
        assert f"{root.name}/__init__.py" in names
        assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
        assert not [n for n in wanted - names if (root.parent / n).exists()]  # (not one deleted meanwhile)

    with raycluster.shipment([plugin], ship=False) as unshipped:  # Ray started by the caller
        assert unshipped.runtime_env is None and unshipped.plugins == (str(plugin.resolve()),)


# --- (b) a mechanism file runs from the shipped copy ----------------------------------------


@pytest.mark.slow
def test_a_mechanism_file_runs_on_the_cluster_from_its_shipped_copy(capsys, tmp_path, shared_cache, cluster):
    markers = tmp_path / "markers"
    markers.mkdir()
    plugin = tmp_path / "plugins" / "shipped_mech.py"
    plugin.parent.mkdir()
    plugin.write_text(PLUGIN.format(markers=str(markers)))
    results = tmp_path / "results"
    with scoped():
        code = main(grid_argv(results, shared_cache, "shipped_identity", "--mechanism-file", str(plugin),
                              "--attacks", "none", "--ray-address", cluster))
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    assert summary_counts(out) == {"cells": 1, "done": 1, "skipped": 0, "failed": 0}
    assert "[bench] ray: 2 node(s) see the cache, data and tracking store; code shipped (1 mechanism file(s))" in err
    seen = {int(p.stem): p.read_text().splitlines() for p in markers.iterdir()}
    assert seen.pop(os.getpid())[0] == str(plugin)  # the driver loaded the user's file
    assert seen, "no Ray worker loaded the mechanism file"
    for plugin_there, bench_there, cwd_there in seen.values():
        assert Path(plugin_there).parts[-3:] == (raycluster.PLUGIN_PACKAGE, "0", "shipped_mech.py")
        assert not Path(plugin_there).is_relative_to(tmp_path)
        assert not Path(bench_there).is_relative_to(ROOT)  # the shipped package, not the checkout
        assert cwd_there == os.getcwd()  # relative paths mean what they meant to the driver
    assert not tokens_in(shared_cache)
    from mlflow.tracking import MlflowClient

    from bench.cell.provenance import git_sha

    [run_id] = [i for ids in runs_by_key(results, "FINISHED").values() for i in ids]
    run = MlflowClient(tracking_uri=f"sqlite:///{results.resolve() / 'mlflow.db'}").get_run(run_id)
    assert run.data.tags["bench.git_sha"] == git_sha()  # the driver's commit ("unknown" from the copy)


# --- (c) a node that cannot see something stops the grid in one line --------------------------


def test_a_cache_the_workers_do_not_share_stops_the_grid_in_one_line(capsys, tmp_path, cluster, monkeypatch):
    cache, results = tmp_path / "cache", tmp_path / "results"
    # The driver's token file lands on another file system than the workers' cache: they read something else.
    monkeypatch.setattr(raycluster, "_write_token", lambda directory, name, token: (directory / name).write_text("x"))
    code = main(grid_argv(results, cache, "identity", "--ray-address", cluster))
    err = capsys.readouterr().err
    assert code == 2
    errors = [line for line in err.splitlines() if line.startswith("bench: error:")]
    assert len(errors) == 1 and errors[0] == err.strip().splitlines()[-1]
    assert errors[0].startswith("bench: error: the Ray worker on node ")
    assert f"sees another cache directory at {cache} than the driver" in errors[0]
    assert "(and 1 more node(s))" in errors[0]
    assert not cache.exists()  # made for the check file, and removed with it
    assert all_runs(results) == {"FINISHED": {}, "FAILED": {}, "RUNNING": {}}


def test_a_data_root_a_node_cannot_see_stops_the_grid_in_one_line(capsys, tmp_path, shared_cache, cluster,
                                                                   monkeypatch):
    data, elsewhere, results = tmp_path / "data", tmp_path / "not-on-the-nodes", tmp_path / "results"
    data.mkdir()
    real = raycluster.probes

    def nodes_see_elsewhere(cells, token):  # the workers look at a path they do not have
        return [dataclasses.replace(p, path=str(elsewhere)) if p.what == "data" else p for p in real(cells, token)]

    monkeypatch.setattr(raycluster, "probes", nodes_see_elsewhere)
    before = sorted(p.name for p in shared_cache.iterdir())
    code = main(grid_argv(results, shared_cache, "identity", "--data-root", str(data), "--ray-address", cluster))
    err = capsys.readouterr().err
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("bench: error: the Ray worker on node ")
    assert f"cannot see the data root {elsewhere} (no such directory there" in last
    assert sum(line.startswith("bench: error:") for line in err.splitlines()) == 1
    assert sorted(p.name for p in shared_cache.iterdir()) == before  # no token, no lock, nothing
    assert all_runs(results) == {"FINISHED": {}, "FAILED": {}, "RUNNING": {}}


# --- (d) everything visible ------------------------------------------------------------------


@pytest.mark.slow
def test_the_check_passes_when_every_node_sees_everything(capsys, tmp_path, shared_cache, cluster):
    data, results = tmp_path / "data", tmp_path / "results"
    data.mkdir()
    code = main(grid_argv(results, shared_cache, "identity", "--data-root", str(data), "--ray-address", cluster))
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    assert summary_counts(out) == {"cells": 1, "done": 1, "skipped": 0, "failed": 0}
    assert "[bench] ray: 2 node(s) see the cache, data and tracking store; code shipped" in err
    assert not tokens_in(shared_cache) and sorted(p.name for p in data.iterdir()) == []


def test_ray_started_by_the_caller_runs_the_nodes_code_after_the_same_check(capsys, tmp_path, shared_cache,
                                                                             cluster):
    import ray

    results = tmp_path / "results"
    ray.init(address=cluster, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        code = main(grid_argv(results, shared_cache, "identity", "--attacks", "none", *CHEAP_TASK))
    finally:
        ray.shutdown()
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    assert summary_counts(out)["done"] == 1
    assert "2 node(s) see the cache, data and tracking store; Ray was started by the caller" in err


def test_an_address_where_no_cluster_answers_is_one_line_at_once():
    import socket
    import time

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(BenchError, match=f"cannot reach the Ray cluster at 127.0.0.1:{port} \\(--ray-address\\)"):
        raycluster.connect(None, f"127.0.0.1:{port}", 1, 0, False, None)  # never reaches Ray
    assert time.monotonic() - started < 10



def test_a_grid_without_an_address_starts_its_own_ray_beside_a_running_cluster(capsys, tmp_path, shared_cache,
                                                                              cluster):
    # Ray would join the running cluster (it finds it in /tmp/ray) and refuse the grid's num_cpus.
    results = tmp_path / "results"
    code = main(grid_argv(results, shared_cache, "identity", "--attacks", "none", "--workers", "1", *CHEAP_TASK))
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    assert summary_counts(out)["done"] == 1
    assert "1 node(s) see the cache" in err  # its own local Ray, not the cluster's two nodes
