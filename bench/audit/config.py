"""The settings of one audit, validated before any work starts."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.errors import BenchError

MIN_TRIALS = 100
"""Fewer counted trials per input cannot bound a rate usefully."""

MAX_TRIALS = 10**9
"""More would hold over 16 GB of test statistics (and run for days on one CPU)."""

MIN_IMAGE_SIZE = 4
"""Smallest side of the audit images."""

MAX_IMAGE_SIZE = 1024
"""Largest side: one 3-channel image still fits in a release call of the default chunk_values."""


@dataclass(frozen=True)
class AuditConfig:
    """How an audit runs.

    Attributes:
        trials: Counted trials per neighbouring input (>= 100). A scan of every candidate
            pair and up to 5,000 more trials per input, drawn from other streams, choose the
            pair and the test and are never counted.
        confidence: Joint confidence of the epsilon lower bound, in (0, 1).
        seed: Base seed of the trials' streams (and of the public images a mechanism is
            fitted on).
        device: ``cpu``, ``cuda`` or ``cuda:N`` (resolved; not ``auto``).
        image_size: Side S of the square audit images, for units whose epsilon does not
            depend on the image size (the image auditors also use a ragged (S+3) x (S+1)).
        channels: Channels of the audit images (3: the channel factor of a pixel matters).
        chunk_values: Largest number of image values released in one call.
    """

    trials: int = 10_000
    confidence: float = 0.95
    seed: int = 0
    device: str = "cpu"
    image_size: int = 16
    channels: int = 3
    chunk_values: int = 1 << 23

    def validate(self) -> "AuditConfig":
        """Returns the config itself after checking every field.

        Raises:
            BenchError: A field out of range, or a device that is not a torch device name.
        """
        _require_int("trials", self.trials, MIN_TRIALS, MAX_TRIALS)
        _require_int("seed", self.seed, 0)
        _require_int("image size", self.image_size, MIN_IMAGE_SIZE, MAX_IMAGE_SIZE)
        _require_int("channels", self.channels, 1)
        _require_int("chunk values", self.chunk_values, 1)
        confidence = self.confidence
        if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0.0 < confidence < 1.0:
            raise BenchError(f"audit confidence must be a number strictly between 0 and 1, got {confidence!r}")
        try:
            torch.device(self.device)
        except (RuntimeError, TypeError):
            raise BenchError(f"audit device must be cpu, cuda or cuda:N, got {self.device!r}") from None
        return self


def _require_int(what: str, value: object, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise BenchError(f"audit {what} must be an integer {bounds}, got {value!r}")
