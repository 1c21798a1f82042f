"""A cell's result.json checked against the digest its run logged when it was written.

:meth:`bench.storage.tracking.Tracker.finish_cell` tags each run with the SHA-256 of the exact
``result.json`` bytes it logs, in the tracking database, before the run is marked
FINISHED. Every reader (``bench show``, a ``bench run`` that finds the cell done, the
leaderboard, ``bench submit``) checks the bytes it reads against that tag, so an artifact
edited, truncated or swapped after the run ended is never shown, reused or ranked. A run
logged before results were digested carries no tag: it cannot be verified either, and is
treated the same way (``bench run`` computes the cell again).
"""

from __future__ import annotations

import hashlib
from typing import Any

from bench.errors import BenchError

RESULT_DIGEST = "bench.result_sha256"
"""Run tag: SHA-256 (hex) of the run's result.json bytes."""


class UnverifiedResult(BenchError):
    """A FINISHED run's result.json does not match the digest logged with it, or it has none.

    Attributes:
        reason: Why, without advice (the message adds how to replace the result).
    """

    def __init__(self, reason: str):
        super().__init__(f"{reason}; 'bench run --force' computes the cell again")
        self.reason = reason


def result_digest(data: bytes) -> str:
    """Returns the digest a run logs for its result.json bytes."""
    return hashlib.sha256(data).hexdigest()


def check_result(run: Any, data: bytes) -> None:
    """Checks result.json bytes read from a run against the digest the run logged.

    Args:
        run: The MLflow run (its tags are read).
        data: The bytes of its result.json as read now.

    Raises:
        UnverifiedResult: The run has no digest, or the bytes differ from it.
    """
    logged = run.data.tags.get(RESULT_DIGEST)
    run_id = run.info.run_id
    if logged is None:
        raise UnverifiedResult(f"run {run_id}'s result.json cannot be verified (logged before PrivBench "
                               "recorded result digests)")
    if result_digest(data) != logged:
        raise UnverifiedResult(f"run {run_id}'s result.json does not match the digest logged with it "
                               "(changed after the run ended)")
