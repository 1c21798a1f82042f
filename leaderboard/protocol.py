"""What a board is: its key, and the rules' constants (docs/protocol.md).

A board ranks like for like: one benchmark, one profile, one dataset (synthetic or real,
by content fingerprint), one set of benchmark-defining settings (the cell's task, attack
and release overrides and its adversaries) and one protocol (the resolved task and attack
settings, so a profile whose preset changed between releases is another board). Cells that
differ in any of these never share a frontier.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from bench.core.keys import content_key
from bench.system.precision import DEFAULT as FULL_PRECISION
from leaderboard.stats import LEVEL, MIN_SEEDS

__all__ = [
    "BoardKey",
    "K_MAX",
    "LEVEL",
    "MIN_SEEDS",
    "canonical_params",
    "board_overrides",
    "canonical_settings",
    "precision_suffix",
    "settings_label",
]

K_MAX = 16
"""The most configurations an entry may declare (per benchmark)."""

TEST_SPLIT = "test"
"""The only evaluation split that can enter a board (``val`` cells are tuning cells)."""


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def canonical_params(params: Mapping[str, Any] | None) -> str:
    """Returns a configuration's identity: its resolved parameters as sorted, compact JSON."""
    return json.dumps(_plain(dict(params or {})), sort_keys=True, separators=(",", ":"), default=str)


def canonical_settings(overrides: Mapping[str, Any] | None, attacks: Iterable[str]) -> str:
    """Returns the benchmark-defining settings of a cell as sorted, compact JSON.

    Override values are compared as text (``task.epochs=3`` from the command line and
    ``epochs: 3`` in a suite give the same board); the adversaries are a sorted list.

    Args:
        overrides: Section (``task``, an attack, ``release``) -> setting -> value.
        attacks: The adversaries the cell ran.
    """
    sections = {
        str(section): {str(k): _text(v) for k, v in dict(values or {}).items()}
        for section, values in dict(overrides or {}).items()
        if values
    }
    return json.dumps({"attacks": sorted(set(attacks)), "overrides": sections}, sort_keys=True, separators=(",", ":"))


def board_overrides(benchmark: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Returns a cell's overrides without the task settings that define an entry, not a board.

    A task's ``entry_settings`` (dp_vit's ``training``: the DP-SGD method) make rows of
    one board; every other setting makes its own board. Unknown benchmarks keep them all.
    """
    from bench.core.registry import tasks
    from bench.errors import BenchError

    if not overrides.get("task"):
        return dict(overrides)
    try:
        prefixes = tuple(tasks.attribute(benchmark, "entry_settings")) if benchmark else ()
    except BenchError:  # an unregistered plugin benchmark: every setting defines the board
        prefixes = ()
    if not prefixes:
        return dict(overrides)
    task = {k: v for k, v in dict(overrides["task"]).items()
            if not any(k == p or k.startswith(p + ".") for p in prefixes)}
    return {**overrides, "task": task}


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(_text(v) for v in value)
    return "none" if value is None else str(value)


def settings_label(settings: str, fingerprint: str = "") -> str:
    """Returns canonical settings as one readable line: ``attacks face_reid; task.epochs=3``.

    A path (a dataset's ``root`` or ``path``, a weights file) shows as its last part, never
    as the folders of the machine it ran on: ``task.data.root=people``, followed by the
    first digits of the data's ``fingerprint`` where it is given (the content it names).
    """
    data = json.loads(settings)
    attacks = ", ".join(data.get("attacks") or []) or "none"

    def shown(key: str, value: str) -> str:
        if "/" not in value and "\\" not in value:
            return value
        name = value.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or value
        is_data = key.rsplit(".", 1)[-1] in ("root", "path") and "data" in key
        return f"{name} (data {fingerprint[:10]})" if is_data and fingerprint else name

    overrides = [f"{section}.{k}={shown(k, str(v))}" for section, values in sorted(data.get("overrides", {}).items())
                 for k, v in sorted(values.items())]
    return f"attacks: {attacks}; settings: {', '.join(overrides) if overrides else 'defaults'}"


def precision_suffix(precision: str) -> str:
    """Returns what a title adds for cells of ``precision``: `` · bf16 mixed precision``, or ``""`` for fp32."""
    return "" if precision == FULL_PRECISION else f" · {precision} mixed precision"


@dataclass(frozen=True)
class BoardKey:
    """The identity of a board.

    Attributes:
        benchmark: Registered task name.
        profile: smoke, quick or paper.
        synthetic: Whether the data is a synthetic stand-in.
        dataset_fingerprint: Content hash of the data.
        settings: Canonical settings (:func:`canonical_settings`).
        protocol: ``Result.protocol``: the key of the resolved task and attack settings less
            the task's entry settings; empty for results written before it was recorded
            (their own board).
        precision: ``fp32``, or ``bf16`` for cells whose networks ran in mixed precision
            (:mod:`bench.system.precision`): never ranked beside fp32 cells.
    """

    benchmark: str
    profile: str
    synthetic: bool
    dataset_fingerprint: str
    settings: str
    protocol: str = ""
    precision: str = FULL_PRECISION

    @property
    def id(self) -> str:
        """A short stable identifier (also the stem of the board's page)."""
        parts = (self.benchmark, self.profile, self.synthetic, self.dataset_fingerprint, self.settings)
        mixed = () if self.precision == FULL_PRECISION else (("precision", self.precision),)
        return content_key("board", *parts, *((self.protocol,) if self.protocol else ()), *mixed)[:12]

    @property
    def data_label(self) -> str:
        """``synthetic data`` or ``real data``, with the fingerprint's first digits."""
        kind = "synthetic data" if self.synthetic else "real data"
        return f"{kind} ({self.dataset_fingerprint[:10] or 'no fingerprint'})"

    @property
    def label(self) -> str:
        """One line naming everything that defines the board."""
        protocol = f" · protocol {self.protocol[:8]}" if self.protocol else ""
        return (f"{self.benchmark} · profile {self.profile}{protocol}{precision_suffix(self.precision)} · "
                f"{self.data_label} · "
                f"{settings_label(self.settings)}")
