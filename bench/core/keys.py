"""Content keys: a cell, a release and a cached model are named by what they depend on."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping


def content_key(*parts: Any) -> str:
    """Returns a 20-hex-digit key of JSON-serialisable parts (dict order does not matter)."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def cell_key(
    task: str, mechanism: str, version: int, params: Mapping[str, Any], seed: int, profile: str,
    options: Mapping[str, Any] | None = None,
) -> str:
    """Returns the key of one benchmark cell.

    A cell is (benchmark, mechanism, params, seed, profile); overrides of the task or attack
    configuration and the resolved settings' protocol key (``options``) are part of it
    because they change the numbers.
    """
    return content_key("cell", task, mechanism, version, dict(params), seed, profile, dict(options or {}))
