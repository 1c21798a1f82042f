"""The references of the time estimates, worked out from the shipped baselines' cells.

Each shipped entry (``leaderboard/entries/*.json``: data of the ``leaderboard`` package, found
here without importing it, as this layer may not) records every cell's stage seconds and the
CPU and thread count it ran on. The reference of a benchmark at a profile is the median of
each stage over its cells, the release apart per mechanism; so recomputing a board refreshes
the estimates of its cells with it, and nothing is copied by hand.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

__all__ = ["Reference", "references_from", "shipped_entries_folder", "shipped_references"]


@dataclass(frozen=True)
class Reference:
    """Median stage seconds of reference cells of one benchmark at one profile.

    Attributes:
        stages: Stage -> median seconds (``release`` apart: it depends on the mechanism).
        release: Mechanism -> median release seconds over its cells.
        cpu: The CPU they were measured on, with the thread count.
        where: Which cells they are.
    """

    stages: Mapping[str, float]
    release: Mapping[str, float]
    cpu: str
    where: str = "shipped baselines'"


def shipped_entries_folder() -> Path | None:
    """Returns the folder of the shipped entries (None when the ``leaderboard`` package is not installed)."""
    spec = importlib.util.find_spec("leaderboard")
    places = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(places[0]) / "entries" if places else None


@functools.lru_cache(maxsize=4)
def shipped_references(folder: Path | None = None) -> dict[tuple[str, str], Reference]:
    """Returns (benchmark, profile) -> the reference of the shipped cells (read once per process).

    Args:
        folder: The entries folder (default: the shipped one). A file that cannot be read
            as an entry is passed over: an estimate never fails for one.
    """
    folder = folder or shipped_entries_folder()
    cells: list[Mapping[str, Any]] = []
    for path in sorted(folder.glob("*.json")) if folder is not None and folder.is_dir() else ():
        try:
            cells += [c for c in json.loads(path.read_text()).get("cells", ()) if isinstance(c, Mapping)]
        except (OSError, ValueError, AttributeError):
            continue
    return references_from(cells)


def references_from(cells: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], Reference]:
    """Returns (benchmark, profile) -> the medians of these cells' stage seconds (see the module's docstring).

    Args:
        cells: Cell results as entries record them (``task``, ``profile``, ``mechanism``,
            ``stage_seconds``, ``versions.cpu``, ``versions.cpu_threads``).
    """
    stages: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    release: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    cpus: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for cell in cells:
        seconds = cell.get("stage_seconds")
        if not isinstance(seconds, Mapping) or not cell.get("task") or not cell.get("profile"):
            continue
        kind = (str(cell["task"]), str(cell["profile"]))
        for stage, value in seconds.items():
            if isinstance(value, (int, float)):
                target = release[kind][str(cell.get("mechanism"))] if stage == "release" else stages[kind][stage]
                target.append(float(value))
        versions = cell.get("versions") if isinstance(cell.get("versions"), Mapping) else {}
        threads = str(versions.get("cpu_threads", "?"))
        cpus[kind][f"{versions.get('cpu', 'an unnamed CPU')} ({threads} thread{'' if threads == '1' else 's'})"] += 1
    return {kind: Reference({k: statistics.median(v) for k, v in stages[kind].items()},
                            {k: statistics.median(v) for k, v in release[kind].items()},
                            cpus[kind].most_common(1)[0][0])
            for kind in stages}
