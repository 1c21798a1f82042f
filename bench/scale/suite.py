"""Suites: YAML files (or command-line lists) naming benchmarks, mechanisms with parameter lists, methods, seeds.

A suite names benchmarks, mechanisms with parameter lists, seeds and a profile::

    description: ...
    profile: smoke
    seeds: [0, 1]
    benchmarks: [fewshot_synth_faces]
    set: {}                         # optional: section -> {setting: value}, as `bench run --set`;
                                    # nested mappings are dotted keys: {task: {data: {n_ids: 30}}}
    attacks: [face_reid]            # optional: adversaries (default: each task's own; [] for none)
    methods:                        # optional: task settings that define entries (dp_vit's training
      - grid: {training.epsilon: [inf]}                     # method), each crossed with every mechanism
      - grid: {training.epsilon: [1, 8], training.clipping: [flat, per_layer]}
    mechanisms:
      - name: identity
      - name: pixelate
        grid: {block: [4, 8]}       # cartesian product over these lists
      - name: image_dp
        grid: {epsilon: [0.001, 1, none]}
        zip: {block: [1, 2, 4], colours: [64, 32, 16]}   # zipped lists, crossed with grid

:func:`bench.scale.grid.expand` turns a suite into validated cells.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from bench.core.config import did_you_mean
from bench.core.params import parse_assignments
from bench.errors import BenchError

SUITE_KEYS = ("description", "profile", "seeds", "benchmarks", "set", "attacks", "mechanisms", "methods")
REQUIRED_SUITE_KEYS = ("profile", "seeds", "benchmarks", "mechanisms")
MECHANISM_KEYS = ("name", "grid", "zip")


@dataclass(frozen=True)
class MechanismSpec:
    """One mechanism of a suite and the parameter values it is run with.

    Attributes:
        name: Registered mechanism name.
        grid: Parameter -> values; every combination is a setting.
        zip: Parameter -> values of equal length, taken together and crossed with ``grid``.
    """

    name: str
    grid: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    zip: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)

    def settings(self) -> list[dict[str, Any]]:
        """Returns every parameter setting: the grid's product crossed with the zipped lists."""
        names = list(self.grid)
        product = [dict(zip(names, values)) for values in itertools.product(*(self.grid[n] for n in names))]
        zipped = [dict(zip(self.zip, values)) for values in zip(*self.zip.values())] if self.zip else [{}]
        return [{**g, **z} for g in product for z in zipped]


@dataclass(frozen=True)
class Suite:
    """Benchmarks x mechanism settings x seeds under one profile.

    Attributes:
        name: The suite's name (file stem) for messages.
        description: One line for humans.
        profile: smoke, quick or paper.
        seeds: Base seeds.
        benchmarks: Registered task names.
        mechanisms: Mechanisms with their parameter lists.
        overrides: Section -> setting -> value, as ``bench run --set``.
        attacks: Adversaries; None means each task's defaults.
        methods: Task settings crossed with every mechanism setting (a training method each:
            ``training.epsilon``, ``training.clipping``); each is a ``task`` override.
    """

    name: str
    profile: str
    seeds: tuple[int, ...]
    benchmarks: tuple[str, ...]
    mechanisms: tuple[MechanismSpec, ...]
    description: str = ""
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    attacks: tuple[str, ...] | None = None
    methods: tuple[MechanismSpec, ...] = ()

    def method_settings(self) -> list[dict[str, Any]]:
        """Returns the task settings of every method (one empty setting without ``methods``)."""
        return [s for spec in self.methods for s in spec.settings()] or [{}]

    def cell_overrides(self, method: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """Returns a cell's ``--set`` sections: the suite's, with one method's task settings added."""
        overrides = {k: dict(v) for k, v in self.overrides.items()}
        if method:
            overrides["task"] = {**overrides.get("task", {}), **method}
        return overrides

    def restrict(self, mechanisms: Sequence[str] | None = None, benchmarks: Sequence[str] | None = None) -> "Suite":
        """Returns the suite limited to some mechanisms and benchmarks.

        Raises:
            BenchError: A requested name is not in the suite.
        """
        specs = self.mechanisms
        if mechanisms:
            missing = sorted(set(mechanisms) - {s.name for s in specs})
            if missing:
                raise BenchError(f"suite {self.name!r} has no mechanism {missing[0]!r} "
                                 f"(it has {', '.join(dict.fromkeys(s.name for s in specs))})")
            specs = tuple(s for s in specs if s.name in mechanisms)
        names = self.benchmarks
        if benchmarks:
            missing = sorted(set(benchmarks) - set(names))
            if missing:
                raise BenchError(f"suite {self.name!r} has no benchmark {missing[0]!r} (it has {', '.join(names)})")
            names = tuple(b for b in names if b in benchmarks)
        return dataclasses.replace(self, mechanisms=specs, benchmarks=names)


def suite_names() -> list[str]:
    """Returns the names of the suites shipped in bench/scale/suites/."""
    folder = resources.files("bench.scale") / "suites"
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def suite_source(ref: str | Path) -> tuple[str, str]:
    """Returns the text a suite reference names and the suite's name (see :func:`load_suite`).

    Raises:
        BenchError: No such suite, or a file that cannot be read as text.
    """
    from bench.storage.folders import check_path_name

    text_ref = str(ref)
    check_path_name("--suite", text_ref)  # a name over 255 bytes is no file (the file system refuses to look)
    if text_ref.endswith((".yaml", ".yml")) or "/" in text_ref or Path(text_ref).is_file():
        path = Path(text_ref)
        if not path.is_file():
            raise BenchError(f"no suite file {text_ref}")
        try:
            return path.read_text(encoding="utf-8"), path.stem
        except (OSError, UnicodeDecodeError) as exc:
            raise BenchError(f"suite file {text_ref} cannot be read as UTF-8 text ({type(exc).__name__})") from None
    resource = resources.files("bench.scale") / "suites" / f"{text_ref}.yaml"
    if not resource.is_file():
        names = suite_names()
        raise BenchError(f"unknown suite {text_ref!r}{did_you_mean(text_ref, names)} (suites: {', '.join(names)}; "
                         "or pass a path to a .yaml file)")
    return resource.read_text(), text_ref


def load_suite(ref: str | Path) -> Suite:
    """Loads and checks a suite: a name from bench/scale/suites/ or a path to a YAML file.

    Raises:
        BenchError: No such suite, unreadable YAML, or a malformed suite.
    """
    text, name = suite_source(ref)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" line {where.line + 1}" if where is not None else ""
        raise BenchError(f"suite {name!r}:{line} is not valid YAML ({getattr(exc, 'problem', exc)})") from None
    return parse_suite(data, name)


def parse_suite(data: Any, name: str) -> Suite:
    """Checks the structure of a suite's YAML data and builds the suite.

    Names and parameter values are checked later, cell by cell, by :func:`expand`.

    Raises:
        BenchError: Unknown or missing keys, or values of the wrong shape.
    """
    where = f"suite {name!r}"
    if not isinstance(data, Mapping):
        raise BenchError(f"{where} must be a mapping with keys {', '.join(REQUIRED_SUITE_KEYS)}")
    _check_keys(data, SUITE_KEYS, REQUIRED_SUITE_KEYS, where)
    mechanisms = data["mechanisms"]
    if not isinstance(mechanisms, list) or not mechanisms:
        raise BenchError(f"{where}: 'mechanisms' must be a non-empty list of {{name: ..., grid: ..., zip: ...}}")
    attacks = data.get("attacks")
    return Suite(
        name=name,
        description=str(data.get("description") or ""),
        profile=_string(data["profile"], f"{where}: 'profile'"),
        seeds=tuple(_seeds(data["seeds"], where)),
        benchmarks=tuple(_strings(data["benchmarks"], f"{where}: 'benchmarks'")),
        mechanisms=tuple(_mechanism_spec(m, f"{where}: mechanisms[{i}]") for i, m in enumerate(mechanisms)),
        overrides=_overrides(data.get("set") or {}, f"{where}: 'set'"),
        attacks=None if attacks is None else tuple(_strings(attacks, f"{where}: 'attacks'", empty=True)),
        methods=_methods(data.get("methods"), where),
    )


def _methods(value: Any, where: str) -> tuple[MechanismSpec, ...]:
    """Reads ``methods:``: a list of {grid, zip} over task settings (see the module docstring)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise BenchError(f"{where}: 'methods' must be a non-empty list of {{grid: ..., zip: ...}}")
    specs = []
    for i, spec in enumerate(value):
        if not isinstance(spec, Mapping) or "name" in spec:
            raise BenchError(f"{where}: methods[{i}] must be {{grid: ..., zip: ...}} over task settings, got {spec!r}")
        specs.append(_mechanism_spec({"name": "task", **spec}, f"{where}: methods[{i}]"))
    return tuple(specs)


def suite_from_lists(
    tasks: Sequence[str], mechanisms: Sequence[str], params: Mapping[str, Sequence[str]], seeds: Sequence[int],
    profile: str,
) -> Suite:
    """Builds a suite from command-line lists (every mechanism gets the same parameter grid)."""
    grid = {k: tuple(v) for k, v in params.items()}
    return Suite(
        name="command line", profile=profile, seeds=tuple(seeds), benchmarks=tuple(tasks),
        mechanisms=tuple(MechanismSpec(m, grid) for m in mechanisms),
    )


def parse_value_lists(items: Sequence[str] | None) -> dict[str, list[str]]:
    """Parses ``--param k=v1,v2`` items into name -> values.

    Raises:
        BenchError: An item without ``=``, an empty value or a name given twice.
    """
    out: dict[str, list[str]] = {}
    for name, values in parse_assignments(list(items or []), form="--param NAME=V1,V2,...").items():
        parts = [v.strip() for v in values.split(",")]
        if not all(parts):
            raise BenchError(f"--param {name!r} has an empty value in {values!r}")
        out[name] = parts
    return out


def parse_ints(text: str, what: str) -> list[int]:
    """Parses a comma-separated list of integers.

    Raises:
        BenchError: A part that is not an integer, no integer at all, or an empty part between two
            (``1,,2``: a number left out; ``what`` names the option).
    """
    parts = [part.strip() for part in text.split(",")]
    try:
        values = [int(part) for part in parts if part]
    except ValueError:
        raise BenchError(f"{what} expects comma-separated integers, got {text!r}") from None
    if not values:
        raise BenchError(f"{what} needs at least one integer (comma-separated), got {text!r}")
    filled = [i for i, part in enumerate(parts) if part]
    if "" in parts[filled[0]:filled[-1]]:
        raise BenchError(f"{what} {text!r} has an empty item between commas (a number left out?)")
    return values


def _check_keys(data: Mapping, allowed: Sequence[str], required: Sequence[str], where: str) -> None:
    for key in data:
        if key not in allowed:
            raise BenchError(f"{where}: unknown key {key!r}{did_you_mean(key, allowed)} (keys: {', '.join(allowed)})")
    for key in required:
        if key not in data:
            raise BenchError(f"{where}: missing key {key!r}")


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise BenchError(f"{where} must be a name, got {value!r}")
    return value


def _strings(value: Any, where: str, empty: bool = False) -> list[str]:
    if not isinstance(value, list) or (not value and not empty):
        raise BenchError(f"{where} must be a {'' if empty else 'non-empty '}list of names, got {value!r}")
    return [_string(v, where) for v in value]


def _seeds(value: Any, where: str) -> list[int]:
    if not isinstance(value, list) or not value or not all(isinstance(s, int) and not isinstance(s, bool) for s in value):
        raise BenchError(f"{where}: 'seeds' must be a non-empty list of integers, got {value!r}")
    if len(set(value)) != len(value):
        raise BenchError(f"{where}: 'seeds' lists a seed twice: {value!r}")
    return list(value)


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _value_lists(value: Any, where: str) -> dict[str, tuple[Any, ...]]:
    if not isinstance(value, Mapping):
        raise BenchError(f"{where} must map parameter names to lists of values, got {value!r}")
    out = {}
    for name, values in value.items():
        values = values if isinstance(values, list) else [values]
        if not values or not all(_scalar(v) for v in values):
            raise BenchError(f"{where}: {name!r} must be a value or a non-empty list of values, got {value[name]!r}")
        out[str(name)] = tuple(values)
    return out


def _mechanism_spec(data: Any, where: str) -> MechanismSpec:
    if isinstance(data, str):
        data = {"name": data}
    if not isinstance(data, Mapping):
        raise BenchError(f"{where} must be {{name: ..., grid: ..., zip: ...}}, got {data!r}")
    _check_keys(data, MECHANISM_KEYS, ("name",), where)
    name = _string(data["name"], f"{where}: 'name'")
    where = f"{where} ({name})"
    grid = _value_lists(data.get("grid") or {}, f"{where}: 'grid'")
    zipped = _value_lists(data.get("zip") or {}, f"{where}: 'zip'")
    both = sorted(set(grid) & set(zipped))
    if both:
        raise BenchError(f"{where}: parameter {both[0]!r} is in both 'grid' and 'zip'")
    lengths = {len(v) for v in zipped.values()}
    if len(lengths) > 1:
        shown = ", ".join(f"{k}: {len(v)}" for k, v in zipped.items())
        raise BenchError(f"{where}: the lists under 'zip' must have one length, got {shown}")
    return MechanismSpec(name, grid, zipped)


def _overrides(value: Any, where: str) -> dict[str, dict[str, Any]]:
    """Reads ``set:``: section -> settings, nested mappings flattened to dotted keys as ``--set`` writes them.

    ``{task: {data: {n_ids: 30}, epochs: 1}}`` becomes ``{"task": {"data.n_ids": 30, "epochs": 1}}``,
    the same as ``--set task.data.n_ids=30 --set task.epochs=1``.
    """
    if not isinstance(value, Mapping):
        raise BenchError(f"{where} must map sections (task or an attack) to {{setting: value}}, got {value!r}")
    out: dict[str, dict[str, Any]] = {}
    for section, settings in value.items():
        if not isinstance(settings, Mapping):
            raise BenchError(f"{where}: {section!r} must map settings to values, got {settings!r}")
        out[str(section)] = _flatten(settings, f"{where}: {section}")
    return out


def _flatten(settings: Mapping, where: str, prefix: str = "") -> dict[str, Any]:
    """Returns nested settings as dotted key -> value (values: scalars or lists of scalars)."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            if not value:
                raise BenchError(f"{where}: {dotted!r} is an empty mapping; set its entries ({dotted}.NAME: VALUE)")
            entries = _flatten(value, where, f"{dotted}.")
        elif _scalar(value) or (isinstance(value, list) and all(_scalar(v) for v in value)):
            entries = {dotted: value}
        else:
            raise BenchError(f"{where}: {dotted!r} must be a value, a list of values or a mapping, got {value!r}")
        twice = sorted(set(entries) & set(out))
        if twice:
            raise BenchError(f"{where}: {twice[0]!r} is set twice")
        out.update(entries)
    return out
