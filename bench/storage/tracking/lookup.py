"""Finding runs: a list with filters (``bench runs``), and a run by a unique prefix of its id or cell key."""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any, Iterator, Protocol

from bench.errors import BenchError
from bench.storage.tracking.tags import SUPERSEDED, counts_as_result


class RunStore(Protocol):
    """What finding runs reads of a :class:`bench.storage.tracking.Tracker`."""

    client: Any
    experiment_id: str
    uri: str

SHOWN_CANDIDATES = 6
_AGO = re.compile(r"^(\d+)\s*([mhdw])$")
_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, now: _dt.datetime | None = None) -> int:
    """Returns the epoch milliseconds ``--since`` names: ``30m``, ``12h``, ``3d``, ``2w`` ago, or an ISO date/time.

    Raises:
        BenchError: Neither form.
    """
    now = now or _dt.datetime.now(_dt.timezone.utc)
    ago = _AGO.match(text.strip().lower())
    if ago:
        return int((now.timestamp() - int(ago.group(1)) * _UNITS[ago.group(2)]) * 1000)
    try:
        when = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise BenchError(f"--since {text!r}: give a time ago (30m, 12h, 3d, 2w) or a date (2026-11-28, "
                         "2026-11-28T09:00)") from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time, as a user types it
    return int(when.timestamp() * 1000)


def filter_string(benchmark: str | None = None, mechanism: str | None = None, status: str | None = None,
                  since_ms: int | None = None) -> str:
    """Returns MLflow's filter for runs of a benchmark and mechanism, with a status, started since a time."""
    parts = []
    for tag, value in (("bench.task", benchmark), ("bench.mechanism", mechanism)):
        if value is not None:
            parts.append(f"tags.`{tag}` = '{_quoted(value)}'")
    if status is not None:
        parts.append(f"attributes.status = '{status.upper()}'")
    if since_ms is not None:
        parts.append(f"attributes.start_time >= {int(since_ms)}")
    return " and ".join(parts)


def search(tracker: RunStore, filters: str = "", order: bool = True) -> Iterator[Any]:
    """Yields the experiment's runs that match an MLflow filter, newest first, page by page."""
    token = None
    while True:
        page = tracker.client.search_runs([tracker.experiment_id], filter_string=filters, max_results=5000,
                                          order_by=["attributes.start_time DESC"] if order else None, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


def resolve(tracker: RunStore, ref: str) -> str:
    """Returns the run a unique prefix names: of a run id, or of a cell key (its current FINISHED run).

    Raises:
        BenchError: Nothing starts with ``ref``, or several runs do (the line lists them).
    """
    text = ref.strip().lower()
    if not text or not all(c in "0123456789abcdef" for c in text):
        raise BenchError(f"no run or finished cell {ref!r} in {tracker.uri} (run ids and cell keys are hex)")
    targets: dict[str, str] = {}  # run id -> how the prefix names it
    for run in search(tracker, order=False):
        run_id, key = run.info.run_id, run.data.tags.get("bench.cell_key", "")
        if run_id.startswith(text):
            targets.setdefault(run_id, f"run {run_id[:12]}")
        if key.startswith(text) and run.info.status == "FINISHED" and counts_as_result(run):
            targets.setdefault(run_id, f"cell {key[:12]}")
    if len(targets) == 1:
        return next(iter(targets))
    if not targets:
        raise BenchError(f"no run or finished cell {ref!r} in {tracker.uri} (bench runs lists them)")
    shown = ", ".join(list(targets.values())[:SHOWN_CANDIDATES])
    more = f" and {len(targets) - SHOWN_CANDIDATES} more" if len(targets) > SHOWN_CANDIDATES else ""
    raise BenchError(f"{ref!r} is ambiguous: {len(targets)} runs match ({shown}{more}); give more characters")


def run_row(run: Any) -> dict[str, Any]:
    """Returns what ``bench runs`` shows of a run: id, status, start, name, profile and its key numbers."""
    tags, metrics = run.data.tags, run.data.metrics
    status = run.info.status
    if status == "FINISHED" and SUPERSEDED in tags:
        status = "SUPERSEDED"
    started = _dt.datetime.fromtimestamp(run.info.start_time / 1000).strftime("%Y-%m-%d %H:%M")
    return {"run_id": run.info.run_id, "status": status, "started": started, "name": run.info.run_name or "",
            "benchmark": tags.get("bench.task", ""), "mechanism": tags.get("bench.mechanism", ""),
            "seed": tags.get("bench.seed", ""), "profile": tags.get("bench.profile", ""),
            "utility": metrics.get(utility_metric(tags, metrics) or ""), "privacy_score": metrics.get("privacy_score"),
            "runtime_s": metrics.get("runtime_s"), "cell_key": tags.get("bench.cell_key", ""),
            "error": tags.get("bench.error", "")}


def utility_metric(tags: dict[str, str], metrics: dict[str, float]) -> str | None:
    """Returns the run's primary utility metric: as tagged, else (older runs) ``utility.acc`` or the first."""
    if tags.get("bench.primary_metric"):
        return f"utility.{tags['bench.primary_metric']}"
    names = sorted(k for k in metrics if k.startswith("utility.") and not k.endswith("_ci95"))
    return "utility.acc" if "utility.acc" in names else (names[0] if names else None)


def _quoted(value: str) -> str:
    return value.replace("'", "\\'")


def tagless_runs(tracker: RunStore, identity: dict[str, Any], cell_key: str) -> list[str]:
    """Returns the FINISHED runs of a cell whose tags are gone from the tracking database, oldest first.

    Such a run has no ``bench.cell_key`` tag, so the cell's lookup misses it; its params
    (task, mechanism, seed, profile: :meth:`~bench.storage.tracking.Tracker.start_cell` logs
    them) narrow the search and its result.json's cell key says it is this cell's. It cannot be
    verified (no result digest either): the caller computes the cell again and supersedes it.

    Args:
        tracker: The store.
        identity: ``task``, ``mechanism``, ``seed`` and ``profile`` of the cell.
        cell_key: The cell's key.
    """
    import json
    import tempfile

    from mlflow.exceptions import MlflowException

    filters = " and ".join([*(f"params.{name} = '{_quoted(str(identity[name]))}'"
                              for name in ("task", "mechanism", "seed", "profile")), "attributes.status = 'FINISHED'"])
    found = []
    for run in search(tracker, filters, order=False):
        if "bench.cell_key" in run.data.tags or SUPERSEDED in run.data.tags:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            try:
                with open(tracker.client.download_artifacts(run.info.run_id, "result.json", tmp), "rb") as f:
                    logged = json.loads(f.read()).get("cell_key")
            except (MlflowException, OSError, ValueError, AttributeError):  # no result.json, or not one
                continue
        if logged == cell_key:
            found.append((run.info.start_time, run.info.run_id))
    return [run_id for _, run_id in sorted(found)]
