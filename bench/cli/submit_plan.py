"""What ``bench submit`` is about to compute, said before the work: the cells and their expected time."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

__all__ = ["planned_cells_text"]


def _paces(folder: Path) -> dict[tuple[str, str], tuple[float, str]]:
    """(benchmark, profile) -> (median cell time in seconds, the hardware it was measured on), from entry files."""
    times: dict[tuple[str, str], list[float]] = {}
    machines: dict[tuple[str, str], Counter] = {}
    for path in sorted(folder.glob("*.json")):
        try:
            cells = json.loads(path.read_text(encoding="utf-8")).get("cells") or []
        except (OSError, ValueError):
            continue
        for cell in cells:
            key = (str(cell.get("task")), str(cell.get("profile")))
            runtime = cell.get("runtime_s")
            if isinstance(runtime, (int, float)) and runtime > 0:
                times.setdefault(key, []).append(float(runtime))
                versions = cell.get("versions") or {}
                machines.setdefault(key, Counter())[str(versions.get("cpu") or versions.get("gpu") or "unknown")] += 1
    return {key: (statistics.median(values), machines[key].most_common(1)[0][0]) for key, values in times.items()}


def planned_cells_text(name: str, suite: Any, cells: Iterable[Any], folder: Path) -> list[str]:
    """Returns the lines that say what a submission computes and about how long it takes.

    The time is the shipped baselines' median cell time of each benchmark and profile (their
    entry files record it, with the hardware), times the cells; cells already finished in the
    results folder are skipped, so it is an upper bound on this machine's share of the work
    where that machine is as fast.

    Args:
        name: The mechanism.
        suite: The submission suite.
        cells: Its planned cells.
        folder: The shipped baselines' folder.
    """
    cells = list(cells)
    counts = Counter((c.config.task, c.config.profile) for c in cells)
    paces = _paces(folder)
    lines = [f"[bench] submit {name}: {len(cells)} cells planned (suite {suite.name!r}, profile {suite.profile}, "
             f"seeds {', '.join(map(str, suite.seeds))}): " + ", ".join(f"{n} on {task}" for (task, _), n in
                                                                          sorted(counts.items()))]
    total, unknown = 0.0, []
    for (task, profile), n in sorted(counts.items()):
        if (task, profile) in paces:
            median, machine = paces[(task, profile)]
            total += n * median
            lines.append(f"[bench]   {task} at {profile}: a shipped baseline's cell takes {median / 60:.1f} min (median, "
                         f"on {machine})")
        else:
            unknown.append(task)
    if total:
        lines.append(f"[bench]   about {total / 60:.0f} min of cell time in all at that pace (cells already finished "
                     "in the results folder are skipped)" + (f"; no pace known for {', '.join(unknown)}" if unknown
                                                           else ""))
    elif unknown:
        lines.append(f"[bench]   no shipped baseline measures a cell of {', '.join(unknown)} at this profile: no "
                     "estimate")
    return lines
