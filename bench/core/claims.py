"""The formal privacy guarantee a mechanism or a training method claims."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["PrivacyClaim"]


@dataclass(frozen=True)
class PrivacyClaim:
    """A formal guarantee, typed by the neighbourhood it protects.

    Claims with different units are never compared as one number.

    Attributes:
        epsilon: The privacy budget.
        delta: The failure probability (0 for pure DP).
        unit: The neighbourhood, e.g. ``"m-pixel (m=1)"``, ``"any image of this size"``.
        note: Caveats (e.g. a data-dependent step the accountant does not cover).
        withheld: Released splits the claim does not cover (e.g. the split a mechanism
            was fitted on).
        backed: Whether the code can back ``epsilon``. False for a nominal epsilon that an
            analysis does not cover (a clipping threshold computed from private data):
            such a claim is printed and ranked as ``unbacked``, never as a plain epsilon.
        method: The training method the claim is about (``DP-SGD(flat, ε=3)``); empty for
            a mechanism's claim.
    """

    epsilon: float
    delta: float = 0.0
    unit: str = ""
    note: str = ""
    withheld: tuple[str, ...] = ()
    backed: bool = True
    method: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Returns the claim as a JSON-ready dict."""
        return asdict(self)

    def __str__(self) -> str:
        delta = f", delta={self.delta:g}" if self.delta else ""
        withheld = f" (withheld for {', '.join(self.withheld)})" if self.withheld else ""
        if not self.backed:
            return f"unbacked (nominal epsilon={self.epsilon:g}{delta}) [{self.unit}]{withheld}"
        return f"epsilon={self.epsilon:g}{delta} [{self.unit}]{withheld}"
