"""The tags that mark PrivBench's runs in MLflow, and which FINISHED run counts as its cell's result."""

from __future__ import annotations

from typing import Any

from bench.core.result import RESULT_SCHEMA

EXPERIMENT = "privbench"
TAG = "bench."
SUPERSEDED = f"{TAG}superseded_by"


def counts_as_result(run: Any) -> bool:
    """Whether a FINISHED run is its cell's current result.

    A run a forced re-run superseded, or one holding a result of another schema (e.g.
    scored by an old formula), is not.
    """
    tags = run.data.tags
    return SUPERSEDED not in tags and tags.get(f"{TAG}schema") == str(RESULT_SCHEMA)
