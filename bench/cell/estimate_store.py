"""Estimates calibrated by this machine's own earlier cells, read from the tracking store.

Each FINISHED run of the same benchmark and profile on this host (its ``bench.host`` tag)
logged its settings and its ``runtime_s``; the plan's model (:mod:`bench.cell.estimate`)
estimates that run from its own settings, and the median ratio of measured to estimated
time over the most recent runs rescales the estimate of a new cell. One query per
benchmark and profile, made where a command has opened the store anyway.
"""

from __future__ import annotations

import json
import socket
import statistics
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Mapping

from bench.cell.estimate import Estimate, about, describe, estimate_settings, mechanism_factors

if TYPE_CHECKING:
    from bench.storage.tracking import Tracker

EARLIER = 20
"""The most recent runs of a benchmark and profile that calibrate an estimate."""

LONG_S = 60.0
"""A cell expected to take longer says so before it starts."""


def machine_factor(tracker: "Tracker", task: str, profile: str) -> tuple[float, int]:
    """Returns (median measured / estimated time, runs used) of this host's earlier cells of a benchmark and profile.

    (1.0, 0) when the store holds none it can use.
    """
    host = socket.gethostname().replace("'", "")
    query = (f"tags.`bench.task` = '{task}' and tags.`bench.profile` = '{profile}' and tags.`bench.host` = '{host}' "
             "and attributes.status = 'FINISHED'")
    try:
        runs = tracker.client.search_runs([tracker.experiment_id], filter_string=query, max_results=EARLIER,
                                          order_by=["attributes.start_time DESC"])
    except Exception:  # an older store without these tags, or a server that refuses the query: no calibration
        return 1.0, 0
    ratios = []
    for run in runs:
        measured = run.data.metrics.get("runtime_s")
        modelled = _modelled(run.data.params, run.data.tags, task, profile)
        if measured and modelled:
            ratios.append(measured / modelled)
    return (statistics.median(ratios), len(ratios)) if ratios else (1.0, 0)


def calibrated(estimate: Estimate, factor: float, runs: int) -> Estimate:
    """Returns the estimate rescaled by this machine's factor from ``runs`` earlier cells (unchanged when none)."""
    if not runs:
        return estimate
    return replace(estimate, seconds=estimate.seconds * factor,
                   stages={k: v * factor for k, v in estimate.stages.items()},
                   source=f"{runs} earlier cell{'s' if runs > 1 else ''} of this benchmark on this machine",
                   lower=False)


def announce(planned: Any, tracker: "Tracker", force: bool = False) -> str | None:
    """Returns the line a planned cell prints before it is computed, calibrated by this machine's earlier cells.

    None when the cell has a FINISHED run it will show instead (unless ``force``), when
    it has no estimate, or when it is expected to take at most :data:`LONG_S`.
    """
    if planned.estimate is None or (not force and tracker.finished_runs(planned.key)):
        return None
    cfg = planned.config
    return expected_line(calibrated(planned.estimate, *machine_factor(tracker, cfg.task, cfg.profile)))


def expected_line(estimate: Estimate) -> str | None:
    """Returns the line a cell longer than :data:`LONG_S` prints before it starts, else None."""
    if estimate.seconds <= LONG_S:
        return None
    return f"[bench] expected {describe(estimate)}"


def grid_line(estimates: list[Estimate], workers: int | None) -> str:
    """Returns what a grid's cells are expected to take, in cell time and with ``workers`` at a time."""
    total = sum(e.seconds for e in estimates)
    lower = any(e.lower for e in estimates)
    sources = sorted({e.source for e in estimates})
    source = sources[0] if len(sources) == 1 else f"{len(sources)} sources: " + "; ".join(sources[:3])
    wall = f", about {about(total / workers)} with {workers} at a time" if workers and workers > 1 else ""
    text = describe(Estimate(total, source=source, lower=lower))
    head, _, tail = text.partition(" (")
    return f"[bench] grid: expected {head} of cell time{wall} ({tail}"


def _modelled(params: Mapping[str, str], tags: Mapping[str, str], task: str, profile: str) -> float:
    """The model's estimate of an earlier run from the settings it logged (0 when they cannot be read)."""
    from bench.core.registry import mechanisms

    settings = {k: _value(v) for k, v in params.items() if k.startswith(("task.", "attack."))}
    attacks = tuple(dict.fromkeys(k.split(".")[1] for k in settings if k.startswith("attack.")))
    name = tags.get("bench.mechanism", "")
    config = {k[len("param."):]: _value(v) for k, v in params.items() if k.startswith("param.")}
    try:
        release = mechanism_factors(mechanisms.get(name), config) if name in mechanisms else {}
        return estimate_settings(task, profile, attacks, settings, name, release).seconds
    except Exception:  # an attack or task no longer registered, a preset that changed shape
        return 0.0


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
