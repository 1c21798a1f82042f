"""``bench list``: what is registered, with parameters, ranges and claim units."""

from __future__ import annotations

import argparse

KINDS = ("mechanisms", "benchmarks", "tasks", "attacks", "datasets")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench list``."""
    p = subparsers.add_parser("list", help="list registered mechanisms, benchmarks, tasks, attacks and datasets")
    p.add_argument("kind", nargs="?", choices=KINDS, help="what to list (default: everything)")
    p.add_argument("--pattern", default="*", help="wildcard on names, e.g. 'dp_*'")
    p.set_defaults(func=list_registered)


def list_registered(args: argparse.Namespace) -> int:
    """Prints the registered names of one kind (or all kinds) with their details.

    What ``bench list`` printed of the built-ins is kept for this code
    (:mod:`bench.storage.derived`): the next listing prints it without importing them.
    """
    import fnmatch

    from bench.core import registry
    from bench.storage import derived

    kept = derived.recall("list", {"kinds": KINDS}) if registry.untouched() else None
    if isinstance(kept, dict) and all(isinstance(kept.get(kind), list) for kind in KINDS):
        for kind in [args.kind] if args.kind else KINDS:
            print(f"{kind}:")
            for name, lines in kept[kind]:
                if fnmatch.fnmatchcase(name, args.pattern):
                    print("\n".join("  " + line for line in lines))
            print()
        return 0
    described: dict[str, list] = {}
    for kind in [args.kind] if args.kind else KINDS:
        table = getattr(registry, kind)
        print(f"{kind}:")
        for name in table.list(args.pattern):
            lines = describe(kind, name, table.get(name))
            described.setdefault(kind, []).append([name, lines])
            print("\n".join("  " + line for line in lines))
        print()
    if args.kind is None and args.pattern == "*" and registry.only_builtins():  # every built-in described
        derived.keep("list", {"kinds": KINDS}, {kind: described.get(kind, []) for kind in KINDS})
    return 0


def describe(kind: str, name: str, obj) -> list[str]:
    """Returns the lines that describe one registered object."""
    doc = (getattr(obj, "description", "") or (obj.__doc__ or "").strip().splitlines()[0:1] or [""])
    summary = doc if isinstance(doc, str) else doc[0]
    lines = [f"{name:<24}{summary}" if len(name) < 24 else f"{name}  {summary}"]
    if kind == "mechanisms":
        for pname, param in obj.params.items():
            pixels = getattr(param, "unit", None) == "px"
            unit = "; in pixels of each image at the size it has in the data" if pixels else ""
            text = f"{param.help}{unit}" if param.help else unit.removeprefix("; ")
            lines.append(f"    {pname:<12}{param.describe()}" + (f"  ({text})" if text else ""))
        lines.append(f"    claim       {claim_unit(obj)}")
    elif kind == "benchmarks":
        lines += describe_benchmark(obj)
    elif kind == "tasks":
        lines.append(f"    dataset {obj.dataset}; primary metric {obj.primary}; attacks {', '.join(obj.attacks) or 'none'}")
        for pname, param in obj.tunable.items():
            lines.append(f"    task.{pname:<24} {param.describe()}" + (f"  ({param.help})" if param.help else ""))
    elif kind == "attacks":
        lines.append(f"    primary metric {obj.primary}")
    elif kind == "datasets":
        lines.append("    synthetic (generated, no download)" if obj.synthetic else f"    expects {obj.layout}")
    return lines


def claim_unit(mechanism_cls) -> str:
    """Returns the neighbourhood unit the mechanism claims at its defaults, or 'none'."""
    try:
        claim = mechanism_cls().claim()
    except Exception:  # a plugin whose defaults cannot be built still gets listed
        return "unknown (defaults do not build)"
    return f"epsilon-DP, unit: {claim.unit}" if claim else "none (no formal guarantee)"


def describe_benchmark(benchmark) -> list[str]:
    """Returns the detail lines of a declared benchmark: kind, dataset, adversaries, targets, preset."""
    attributes = f"; attributes {', '.join(benchmark.attributes)}" if benchmark.attributes else ""
    missing = "" if benchmark.has_preset() else " (missing: cells of this benchmark cannot be planned)"
    fixed = "".join(f"; task.{k}={v}" for k, v in benchmark.task_settings.items())
    crops = f" (on face crops: {', '.join(benchmark.face_crops)})" if benchmark.face_crops else ""
    lines = [
        f"    {benchmark.kind.__name__} on dataset {benchmark.dataset}{attributes}{fixed}",
        f"    adversaries {', '.join(benchmark.attacks) or 'none (utility only)'}{crops}",
    ]
    if benchmark.optional_face_crops:
        lines.append(f"    face crops skipped without identities: {benchmark.optional_face_crops}")
    if len(benchmark.kind.precisions) > 1:
        lines.append(f"    precisions {', '.join(benchmark.kind.precisions)} (--precision)")
    return lines + [f"    preset {benchmark.preset_file}{missing}"]
