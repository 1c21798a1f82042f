"""Registry behaviour: declaration, lookup, wildcards, suggestions, duplicates, scoping, plugins."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import bench
from bench.core import registry
from bench.core.interfaces import Mechanism
from bench.core.registry import Registry
from bench.errors import BenchError


class _Echo(Mechanism):
    def apply(self, images, *, generator, boxes=None):
        return images.clone()


def test_decorator_declares_name_and_lookup_returns_it():
    with registry.scoped():
        registry.register_mechanism("echo_test")(_Echo)
        assert registry.mechanisms.get("echo_test") is _Echo
        assert _Echo.name == "echo_test"


def test_wildcard_list():
    with registry.scoped():
        for name in ("zz_a1", "zz_a2", "zz_b1"):
            registry.register_mechanism(name)(type(name, (_Echo,), {}))
        assert registry.mechanisms.list("zz_a*") == ["zz_a1", "zz_a2"]
        assert "zz_b1" in registry.mechanisms.list()


def test_unknown_name_suggests_the_closest():
    with pytest.raises(BenchError, match="did you mean 'dp_pix'"):
        registry.mechanisms.get("dp_pxi")


def test_duplicate_name_raises():
    with registry.scoped():
        registry.register_mechanism("dup_test")(_Echo)
        with pytest.raises(ValueError, match="already registered"):
            registry.register_mechanism("dup_test")(type("Other", (_Echo,), {}))


def test_scoped_restores_the_table():
    before = registry.mechanisms.list()
    with registry.scoped():
        registry.register_mechanism("scoped_only")(_Echo)
        assert "scoped_only" in registry.mechanisms
    assert registry.mechanisms.list() == before


def test_invalid_name_rejected():
    with pytest.raises(ValueError):
        registry.register_mechanism("bad name!")


def test_builtins_are_discovered():
    assert {"identity", "pixelate", "blur", "dp_pix"} <= set(registry.mechanisms.list())
    assert {"fewshot_synth_faces", "fewshot_celeba"} <= set(registry.tasks.list())
    assert "face_reid" in registry.attacks.list()
    assert {"synth_faces", "celeba"} <= set(registry.datasets.list())


def test_entry_point_plugins_load_and_broken_ones_warn(monkeypatch):
    class _EP:
        def __init__(self, name, fn):
            self.name, self.value, self._fn = name, f"plugin:{name}", fn

        def load(self):
            return self._fn()

    def good():
        registry_table.register("plugin_good")(type("PluginGood", (_Echo,), {}))

    def broken():
        raise ImportError("missing dependency")

    registry_table = Registry("mechanism", (), "bench.mechanisms")
    monkeypatch.setattr(registry, "_entry_points", lambda group: [_EP("good", good), _EP("broken", broken)])
    with pytest.warns(UserWarning, match="broken"):
        names = registry_table.list()
    assert names == ["plugin_good"]


def test_load_file_registers_a_single_file_mechanism(tmp_path: Path):
    source = tmp_path / "my_mech.py"
    source.write_text(
        "from bench.core.interfaces import Mechanism\n"
        "from bench.core.registry import register_mechanism\n"
        "@register_mechanism('from_file_test')\n"
        "class FromFile(Mechanism):\n"
        "    def apply(self, images, *, generator, boxes=None):\n"
        "        return images.clone()\n"
    )
    with registry.scoped():
        registry.load_file(source)
        assert "from_file_test" in registry.mechanisms


def test_load_file_errors_are_bench_errors(tmp_path: Path):
    with pytest.raises(BenchError, match="no such file"):
        registry.load_file(tmp_path / "absent.py")
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(BenchError, match="boom"):
        registry.load_file(broken)


@pytest.mark.parametrize("package", ["bench", "mechanisms", "tasks", "attacks", "leaderboard"])
def test_installed_top_level_packages_are_ours(package):
    module = importlib.import_module(package)
    assert getattr(module, "PRIVBENCH_PACKAGE", False), f"{package} resolves to {module.__file__}, not PrivBench"
    assert Path(module.__file__).resolve().parent.parent == Path(bench.__file__).resolve().parent.parent
