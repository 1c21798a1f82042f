"""How the conformance suite observes the noise of a mechanism that makes a formal claim.

A mechanism whose ``claim()`` is not None registers a :class:`NoiseProbe`
(:func:`register_noise_probe`); :func:`bench.testing.mechanisms.check_claimed_noise` runs
it and compares the noise actually added with the distribution its claim implies. The
built-in claimed mechanisms' probes are declared at the end of this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from scipy import stats

from bench.core.interfaces import Mechanism
from bench.randomness.streams import Streams

__all__ = ["NoiseProbe", "noise_probe_for", "register_noise_probe", "rounded_cdf"]


@dataclass(frozen=True)
class NoiseProbe:
    """How the suite observes the noise a claimed mechanism adds.

    Attributes:
        params: A configuration in which the noise never meets a clip.
        observe: ``(fitted mechanism, streams) -> samples``: the noise actually added,
            as a 1-D array, one value per independent draw, in the units of ``expected``.
        expected: ``mechanism -> frozen scipy distribution`` the claim implies for one
            sample, computed from the formulas (mechanisms/_dp.py), not from the
            mechanism's internals.
        rounded: Whether samples are the claimed noise rounded to integers (the suite
            then compares them with the rounded distribution).
        images: Number of images (streams) the probe draws for.
        shape: Image shape [C, H, W] the mechanism is fitted on before observing.
    """

    params: Mapping[str, Any]
    observe: Callable[[Mechanism, Streams], np.ndarray]
    expected: Callable[[Mechanism], Any]
    rounded: bool = True
    images: int = 64
    shape: tuple[int, int, int] = (3, 16, 16)


_PROBES: dict[str, NoiseProbe] = {}


def register_noise_probe(name: str, probe: NoiseProbe) -> None:
    """Declares how the claimed noise of mechanism ``name`` (and its subclasses) is observed."""
    _PROBES[name] = probe


def noise_probe_for(cls: type[Mechanism]) -> NoiseProbe | None:
    """Returns the probe of a mechanism class, looked up along its base classes."""
    _builtin_probes()
    for klass in cls.__mro__:
        name = klass.__dict__.get("name")
        if name and name in _PROBES:
            return _PROBES[name]
    return None


def rounded_cdf(dist: Any) -> Callable[[np.ndarray], np.ndarray]:
    """CDF of ``round(X) + U(-1/2, 1/2)``: continuous, so a KS test is exact."""

    def cdf(y: np.ndarray) -> np.ndarray:
        k = np.floor(np.asarray(y) + 0.5)
        lo, hi = dist.cdf(k - 0.5), dist.cdf(k + 0.5)
        return lo + (np.asarray(y) - (k - 0.5)) * (hi - lo)

    return cdf


# --- probes of the built-in claimed mechanisms ------------------------------------------


def _mid_grey(n: int, shape: Sequence[int], device: torch.device) -> torch.Tensor:
    return torch.full((n, *shape), 128, dtype=torch.uint8, device=device)


def _observe_dp_pix(mech: Mechanism, streams: Streams) -> np.ndarray:
    block = mech.config["block"]
    images = _mid_grey(len(streams), (3, 8 * block, 8 * block), streams.device)
    out = mech.apply(images, generator=streams)
    return (out[:, :, ::block, ::block].double() - 128.0).cpu().numpy()


def _expected_dp_pix(mech: Mechanism) -> Any:
    from mechanisms._dp import dp_pix_scale

    cfg = mech.config
    return stats.laplace(scale=dp_pix_scale(cfg["epsilon"], cfg["block"], cfg["m"], 3))


_IMAGE_DP_PROBE = {"size": 16, "block": 4, "colours": 4, "scale": 4.0}


def _image_dp_probe_params() -> dict[str, Any]:
    from mechanisms._dp import image_dp_sensitivity

    p = _IMAGE_DP_PROBE
    epsilon = image_dp_sensitivity(p["size"], p["size"], p["block"], p["colours"]) / p["scale"]
    return {"epsilon": epsilon, "block": p["block"], "colours": p["colours"]}


def _observe_image_dp(mech: Mechanism, streams: Streams) -> np.ndarray:
    block, colours = mech.config["block"], mech.config["colours"]
    size = _IMAGE_DP_PROBE["size"]
    out = mech.apply(_mid_grey(len(streams), (3, size, size), streams.device), generator=streams)
    levels = torch.div(out[:, :, ::block, ::block], colours, rounding_mode="floor")
    return (levels.double() - 128 // colours).cpu().numpy()


def _expected_image_dp(mech: Mechanism) -> Any:
    from mechanisms._dp import image_dp_scale

    cfg, size = mech.config, _IMAGE_DP_PROBE["size"]
    return stats.laplace(scale=image_dp_scale(cfg["epsilon"], size, size, cfg["block"], cfg["colours"]))


def _observe_dp_latent(mech: Mechanism, streams: Streams) -> np.ndarray:
    from mechanisms._dp import latent_scale

    lower, upper = mech.lower, mech.upper  # type: ignore[attr-defined]
    centre = ((lower + upper) / 2).expand(len(streams), -1)
    noisy = mech.privatise(centre, streams)  # type: ignore[attr-defined]
    scale = latent_scale(lower, upper, mech.config["epsilon"])
    keep = scale > 0
    return ((noisy - centre)[:, keep] / scale[keep]).double().cpu().numpy()


def _builtin_probe_table() -> dict[str, NoiseProbe]:
    return {
        "dp_pix": NoiseProbe(
            params={"epsilon": 10.0, "block": 4, "m": 1},
            observe=_observe_dp_pix,
            expected=_expected_dp_pix,
        ),
        "image_dp": NoiseProbe(
            params=_image_dp_probe_params(),
            observe=_observe_image_dp,
            expected=_expected_image_dp,
            images=256,
        ),
        "dp_latent": NoiseProbe(
            params={"epsilon": 4000.0, "latent_dim": 16, "steps": 20},
            observe=_observe_dp_latent,
            expected=lambda mech: stats.laplace(scale=1.0),
            rounded=False,
            images=512,
        ),
    }


_builtins_done = False


def _builtin_probes() -> None:
    global _builtins_done
    if _builtins_done:
        return
    _builtins_done = True
    for name, probe in _builtin_probe_table().items():
        _PROBES.setdefault(name, probe)
