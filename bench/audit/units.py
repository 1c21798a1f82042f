"""Neighbouring inputs per claim unit: the auditors, and the registry that picks one.

A claim's unit names its neighbourhood (``"m-pixel (m=1)"``, ``"any image of this
size"``, ``"latent (clipped)"``). An :class:`Auditor` for a unit holds pairs of inputs
that are neighbours under it (its candidates: where they differ, their contents, their
sizes), releases them through the mechanism and observes the whole release. The audit
scans every candidate on a few trials and audits the one that separates best
(:mod:`bench.audit.run`). Plugin authors whose claims use a new unit register an auditor
(one pair: :meth:`Auditor.observe`; several: also :meth:`Auditor.candidate_count` and
:meth:`Auditor.observe_candidate`)::

    @register_auditor("my unit")
    class MyUnitAuditor(Auditor): ...

The auditor whose prefix is the longest one the unit starts with is used.
"""

from __future__ import annotations

import abc
import contextlib
import tempfile
from pathlib import Path
from typing import Callable, ClassVar, Iterator

import torch

from bench.audit.config import AuditConfig
from bench.core.interfaces import Mechanism, PrivacyClaim, RunContext
from bench.data.base import ImageSet
from bench.errors import BenchError
from bench.randomness.seeding import make_generator
from bench.randomness.streams import Streams
from bench.release import guard as mechanism_guard

PUBLIC_IMAGES = 64
"""Random public images a mechanism that needs ``fit`` is fitted on before an audit."""

_AUDITORS: dict[str, type["Auditor"]] = {}
_BUILTINS = ("bench.audit.images", "bench.audit.latent")


class Auditor(abc.ABC):
    """Two neighbouring inputs of one claim unit and a mechanism's releases of them.

    The constructor only validates (it raises BenchError for a claim it cannot audit);
    :meth:`prepare` does the work needed before trials (fitting the mechanism).

    Args:
        mechanism: The configured mechanism under audit.
        claim: Its claim (the unit matches this auditor's prefix).
        config: The audit settings.

    Raises:
        BenchError: The mechanism or claim cannot be audited by this auditor.
    """

    unit_prefix: ClassVar[str] = ""

    def __init__(self, mechanism: Mechanism, claim: PrivacyClaim, config: AuditConfig):
        self.mechanism = mechanism
        self.claim = claim
        self.config = config
        self.device = torch.device(config.device)

    @abc.abstractmethod
    def describe(self) -> str:
        """Returns the two neighbouring inputs in words."""

    @abc.abstractmethod
    def values_per_trial(self) -> int:
        """Returns how many values one trial releases (to size the batches)."""

    @abc.abstractmethod
    def observe(self, which: int, streams: Streams) -> torch.Tensor:
        """Releases input ``which`` (0 or 1) once per stream.

        Args:
            which: 0 for the first input, 1 for the second.
            streams: One stream per trial.

        Returns:
            The observed coordinates of every trial: float tensor [len(streams), k].
        """

    def candidate_count(self) -> int:
        """Returns how many neighbouring pairs the auditor offers (1 unless overridden)."""
        return 1

    def describe_candidate(self, index: int) -> str:
        """Returns candidate pair ``index`` in words (:meth:`describe` for a single pair)."""
        return self.describe()

    def candidate_values(self, index: int) -> int:
        """Returns how many values one trial of candidate ``index`` releases."""
        return self.values_per_trial()

    def observe_candidate(self, index: int, which: int, streams: Streams) -> torch.Tensor:
        """Releases input ``which`` of candidate pair ``index`` once per stream (see :meth:`observe`)."""
        return self.observe(which, streams)

    def scan(self, indices: list[int], which: int, streams: Streams) -> list[torch.Tensor]:
        """Releases input ``which`` of several candidates, ``len(streams) // len(indices)`` trials each.

        Candidate ``indices[i]`` takes the i-th equal slice of ``streams``. Auditors may
        override this to release candidates of one shape in one call.

        Returns:
            One observation tensor [trials, k_i] per candidate.
        """
        each = len(streams) // len(indices)
        return [self.observe_candidate(i, which, streams[j * each:(j + 1) * each]) for j, i in enumerate(indices)]

    def public_shape(self) -> tuple[int, int, int]:
        """Returns the shape [C, H, W] of the public images the mechanism is fitted on."""
        size = self.config.image_size
        return (self.config.channels, size, size)

    def prepare(self) -> None:
        """Fits the mechanism on random public images (a no-op for most mechanisms)."""
        shape = self.public_shape()
        generator = make_generator(self.config.seed, "audit", "public")
        images = torch.randint(0, 256, (PUBLIC_IMAGES, *shape), generator=generator, dtype=torch.uint8)
        public = ImageSet(images=images, labels=torch.zeros(PUBLIC_IMAGES, dtype=torch.int64),
                          boxes=whole_image_boxes(PUBLIC_IMAGES, shape[1], shape[2]))
        with tempfile.TemporaryDirectory(prefix="bench-audit-") as cache:
            ctx = RunContext(device=self.device, seed=self.config.seed, profile="smoke", data_root=None,
                             cache_dir=Path(cache))
            mechanism_guard.fit(self.mechanism, public, ctx)


def whole_image_boxes(n: int, height: int, width: int) -> list[torch.Tensor]:
    """Returns one box covering the whole image per image (for mechanisms that use boxes)."""
    return [torch.tensor([[0.0, 0.0, float(width), float(height)]]) for _ in range(n)]


def register_auditor(unit_prefix: str) -> Callable[[type[Auditor]], type[Auditor]]:
    """Returns a decorator that registers an :class:`Auditor` for units starting with a prefix.

    Args:
        unit_prefix: The start of the claim units it audits, e.g. ``"m-pixel"``.

    Raises:
        ValueError: An empty prefix, or one another class already holds.
    """
    if not unit_prefix.strip():
        raise ValueError("an auditor's unit prefix must not be empty")

    def decorator(cls: type[Auditor]) -> type[Auditor]:
        held = _AUDITORS.get(unit_prefix)
        if held is not None and held is not cls:
            raise ValueError(f"claim unit {unit_prefix!r} already has an auditor ({held.__module__}.{held.__name__})")
        _AUDITORS[unit_prefix] = cls
        cls.unit_prefix = unit_prefix
        return cls

    return decorator


def _load_builtins() -> None:
    import importlib

    for module in _BUILTINS:
        importlib.import_module(module)


def known_units() -> list[str]:
    """Returns the registered unit prefixes, sorted."""
    _load_builtins()
    return sorted(_AUDITORS)


def auditor_for(unit: str) -> type[Auditor]:
    """Returns the auditor class for a claim unit (longest matching prefix).

    Raises:
        BenchError: No registered prefix matches; the message names the known ones.
    """
    _load_builtins()
    matches = [prefix for prefix in _AUDITORS if unit.startswith(prefix)]
    if not matches:
        known = ", ".join(repr(u) for u in sorted(_AUDITORS))
        raise BenchError(
            f"no auditor for claim unit {unit!r} (known units: {known}); "
            "register one with bench.audit.register_auditor(unit_prefix)"
        )
    return _AUDITORS[max(matches, key=len)]


@contextlib.contextmanager
def scoped_auditors() -> Iterator[None]:
    """Snapshots the auditor registry and restores it on exit (for tests)."""
    _load_builtins()
    saved = dict(_AUDITORS)
    try:
        yield
    finally:
        _AUDITORS.clear()
        _AUDITORS.update(saved)
