"""A cell's result.json checked against the digest its run logged when it was written.

:meth:`bench.storage.tracking.Tracker.finish_cell` tags each run with the SHA-256 of the exact
``result.json`` bytes it logs, in the tracking database, before the run is marked
FINISHED. Every reader (``bench show``, a ``bench run`` that finds the cell done, the
leaderboard, ``bench submit``) checks the bytes it reads against that tag, so an artifact
edited, truncated or swapped after the run ended is never shown, reused or ranked. A run
logged before results were digested carries no tag: it cannot be verified either, and is
treated the same way (``bench run`` computes the cell again), as is a run whose tags are gone
from the tracking database (no ``bench.cell_key`` either: deleted, or the tags table dropped).
"""

from __future__ import annotations

import hashlib
from typing import Any

from bench.errors import BenchError

RESULT_DIGEST = "bench.result_sha256"
"""Run tag: SHA-256 (hex) of the run's result.json bytes."""


CELL_KEY = "bench.cell_key"
"""Run tag every PrivBench cell run carries from its start: a FINISHED run without it lost its tags."""

CHANGED, UNDIGESTED, TAGLESS, LOST = "changed", "undigested", "tagless", "lost"
"""Why a result cannot be verified: its bytes differ from the digest, it was logged before digests, its tags are
gone from the tracking database, or its result.json is gone (artifacts deleted)."""


class UnverifiedResult(BenchError):
    """A FINISHED run's result.json does not match the digest logged with it, or it has none.

    Attributes:
        reason: Why, without advice (the message adds how to replace the result).
        kind: :data:`CHANGED`, :data:`UNDIGESTED`, :data:`TAGLESS` or :data:`LOST`.
    """

    def __init__(self, reason: str, kind: str = CHANGED):
        super().__init__(f"{reason}; 'bench run --force' computes the cell again")
        self.reason = reason
        self.kind = kind


def result_digest(data: bytes) -> str:
    """Returns the digest a run logs for its result.json bytes."""
    return hashlib.sha256(data).hexdigest()


def tagless(run_id: str) -> UnverifiedResult:
    """Returns the error of a run whose tags are gone from the tracking database (its result cannot be verified)."""
    return UnverifiedResult(f"run {run_id}'s result.json cannot be verified (its tags are gone from the tracking "
                            "database: no cell key, no result digest)", TAGLESS)


def check_result(run: Any, data: bytes) -> None:
    """Checks result.json bytes read from a run against the digest the run logged.

    Args:
        run: The MLflow run (its tags are read).
        data: The bytes of its result.json as read now.

    Raises:
        UnverifiedResult: The run has no digest (logged before digests, or its tags are gone), or the
            bytes differ from it.
    """
    logged = run.data.tags.get(RESULT_DIGEST)
    run_id = run.info.run_id
    if logged is None and CELL_KEY not in run.data.tags:
        raise tagless(run_id)
    if logged is None:
        raise UnverifiedResult(f"run {run_id}'s result.json cannot be verified (logged before PrivBench "
                               "recorded result digests)", UNDIGESTED)
    if result_digest(data) != logged:
        raise UnverifiedResult(f"run {run_id}'s result.json does not match the digest logged with it "
                               "(changed after the run ended)", CHANGED)
