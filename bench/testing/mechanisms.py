"""The mechanism conformance suite: what every registered mechanism must satisfy.

Plugin authors run it over their own mechanism::

    from bench.testing import run_conformance
    assert run_conformance("my_mask") == []

or parametrise pytest over :data:`CHECKS`::

    @pytest.mark.parametrize("check", sorted(CHECKS))
    def test_my_mask(check):
        CHECKS[check]("my_mask")

Each ``check_*`` function takes a registered name (and optionally parameters and a
device) and raises :class:`ConformanceError` with a message that says what is wrong.

A mechanism class may set ``conformance_params`` (a dict) to the parameters the suite
uses when none are given, e.g. few training steps so that ``fit`` stays cheap.

Mechanisms whose ``claim()`` is not None must also let the suite observe their noise:
register a :class:`NoiseProbe` with :func:`register_noise_probe` (a subclass of a
registered mechanism inherits its parent's probe). The probe runs the mechanism where no
clipping is in play and a Kolmogorov-Smirnov test compares the noise actually added with
the distribution and scale the claim implies. They are also audited empirically
(:mod:`bench.audit`, :func:`check_audit`): a small audit's Clopper-Pearson lower bound on
epsilon must not exceed the claim. Declare where the claim is within the audit's reach
with :func:`bench.audit.conformance.register_audit_params` (re-exported here).
"""

from __future__ import annotations

import atexit
import math
import shutil
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from scipy import stats

from bench.audit.conformance import conformance_audit, register_audit_params
from bench.datasets.base import ImageSet
from bench.errors import BenchError
from bench.interfaces import Mechanism, Param, PrivacyClaim, RunContext
from bench.registry import mechanisms
from bench.streams import Streams
from bench.testing.noise_probes import NoiseProbe, noise_probe_for, register_noise_probe, rounded_cdf

__all__ = [
    "CHECKS",
    "ConformanceError",
    "NoiseProbe",
    "check_audit",
    "check_batch_independence",
    "check_boxes_required",
    "check_claim_wellformed",
    "check_claimed_noise",
    "check_determinism",
    "check_input_untouched",
    "check_param_validation",
    "check_shape_device",
    "check_uint8",
    "invalid_values",
    "noise_probe_for",
    "register_audit_params",
    "register_noise_probe",
    "run_conformance",
    "synthetic_boxes",
]

KS_ALPHA = 1e-4
"""A claimed-noise check fails when the KS test's p-value is below this."""

CASE_SHAPES: tuple[tuple[int, int, int, int], ...] = ((4, 3, 32, 24), (4, 1, 19, 13))
"""Batches every check runs on: colour, and grey with sizes no block divides."""

_SEED = 20240601
_cache_dir: Path | None = None


class ConformanceError(AssertionError):
    """A mechanism broke a rule of the interface; the message says which and how."""


def synthetic_boxes(n: int, height: int, width: int) -> list[torch.Tensor]:
    """Returns face boxes (x1, y1, x2, y2) for a batch: one, two overlapping, none, one cut by the edge."""
    h, w = float(height), float(width)
    patterns = [
        [[0.3 * w, 0.25 * h, 0.7 * w, 0.7 * h]],
        [[0.1 * w, 0.1 * h, 0.45 * w, 0.5 * h], [0.35 * w, 0.3 * h, 0.9 * w, 0.8 * h]],
        [],
        [[-0.2 * w, 0.6 * h, 0.3 * w, 1.2 * h]],
    ]
    return [torch.tensor(patterns[i % 4], dtype=torch.float32).reshape(-1, 4) for i in range(n)]


@dataclass
class _Case:
    images: torch.Tensor
    boxes: list[torch.Tensor] | None
    streams: Streams
    public: ImageSet = field(repr=False, default=None)  # type: ignore[assignment]


def _context(device: torch.device) -> RunContext:
    global _cache_dir
    if _cache_dir is None:
        _cache_dir = Path(tempfile.mkdtemp(prefix="bench-conformance-"))
        atexit.register(shutil.rmtree, _cache_dir, ignore_errors=True)
    return RunContext(device=device, seed=_SEED, profile="smoke", data_root=None, cache_dir=_cache_dir)


def _random_images(shape: Sequence[int], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, tuple(shape), generator=g, dtype=torch.uint8)


def _public_set(c: int, h: int, w: int, n: int = 16) -> ImageSet:
    images = _random_images((n, c, h, w), seed=h * 1000 + w)
    return ImageSet(images=images, labels=torch.zeros(n, dtype=torch.int64), boxes=synthetic_boxes(n, h, w))


def _cases(cls: type[Mechanism], device: torch.device) -> list[_Case]:
    cases = []
    for k, (n, c, h, w) in enumerate(CASE_SHAPES):
        images = _random_images((n, c, h, w), seed=k).to(device)
        boxes = synthetic_boxes(n, h, w) if cls.uses_boxes else None
        streams = Streams.for_images(_SEED, f"conformance/{k}", n, device=device)
        cases.append(_Case(images, boxes, streams, _public_set(c, h, w)))
    return cases


def _suite_params(cls: type[Mechanism], params: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(params if params is not None else getattr(cls, "conformance_params", None) or {})


def _build(name: str, params: Mapping[str, Any] | None) -> tuple[type[Mechanism], Mechanism]:
    cls = mechanisms.get(name)
    params = _suite_params(cls, params)
    try:
        return cls, cls(**params)
    except BenchError as exc:
        raise ConformanceError(f"cannot build {name!r} with {params}: {exc}") from exc


def _fitted(cls: type[Mechanism], params: Mapping[str, Any] | None, public: ImageSet, device: torch.device) -> Mechanism:
    mech = cls(**_suite_params(cls, params))
    mech.fit(public, _context(device))
    return mech


def _apply(mech: Mechanism, case: _Case, images: torch.Tensor | None = None, index: slice | None = None) -> torch.Tensor:
    images = case.images if images is None else images
    streams = case.streams if index is None else case.streams[index]
    boxes = case.boxes if index is None or case.boxes is None else case.boxes[index]
    return mech.apply(images, generator=streams, boxes=boxes)


def _devices(device: str | torch.device | None) -> list[torch.device]:
    if device is not None:
        return [torch.device(device)]
    found = [torch.device("cpu")]
    if torch.cuda.is_available():
        found.append(torch.device("cuda"))
    return found


def _fail(name: str, message: str) -> ConformanceError:
    return ConformanceError(f"{name}: {message}")


# --- checks -----------------------------------------------------------------------------


def check_claim_wellformed(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """The claim is None or a PrivacyClaim with a finite epsilon > 0, 0 <= delta < 1 and a unit."""
    _, mech = _build(name, params)
    claim = mech.claim()
    if claim is None:
        return
    if not isinstance(claim, PrivacyClaim):
        raise _fail(name, f"claim() must return a PrivacyClaim or None, got {type(claim).__name__}")
    if not (claim.epsilon > 0 and math.isfinite(claim.epsilon)):
        raise _fail(name, f"claimed epsilon must be finite and > 0, got {claim.epsilon!r}")
    if not 0 <= claim.delta < 1:
        raise _fail(name, f"claimed delta must be in [0, 1), got {claim.delta!r}")
    if not claim.unit.strip():
        raise _fail(name, "a claim must name its unit (the neighbourhood it protects)")


def check_uint8(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """Outputs are uint8; a float batch is refused with a BenchError, not silently accepted."""
    cls, _ = _build(name, params)
    for dev in _devices(device):
        for case in _cases(cls, dev):
            mech = _fitted(cls, params, case.public, dev)
            out = _apply(mech, case)
            if not isinstance(out, torch.Tensor) or out.dtype != torch.uint8:
                got = out.dtype if isinstance(out, torch.Tensor) else type(out).__name__
                raise _fail(name, f"apply() must return a uint8 tensor, got {got}")
            try:
                _apply(mech, case, images=case.images.float())
            except BenchError:
                continue
            except Exception as exc:
                raise _fail(name, f"a float batch must raise BenchError, raised {type(exc).__name__}: {exc}") from exc
            raise _fail(name, "a float batch must raise BenchError (mechanisms take uint8 [N, C, H, W])")


def check_shape_device(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """The output has the input's shape and lives on the input's device."""
    cls, _ = _build(name, params)
    for dev in _devices(device):
        for case in _cases(cls, dev):
            out = _apply(_fitted(cls, params, case.public, dev), case)
            if tuple(out.shape) != tuple(case.images.shape):
                raise _fail(name, f"output shape {tuple(out.shape)} differs from input shape {tuple(case.images.shape)}")
            if out.device != case.images.device:
                raise _fail(name, f"output is on {out.device}, input on {case.images.device}")


def check_input_untouched(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """Neither the images nor the boxes are modified, and the output is not the input's memory."""
    cls, _ = _build(name, params)
    for dev in _devices(device):
        for case in _cases(cls, dev):
            images = case.images.clone()
            boxes = None if case.boxes is None else [b.clone() for b in case.boxes]
            out = _apply(_fitted(cls, params, case.public, dev), case)
            if not torch.equal(images, case.images):
                raise _fail(name, "apply() modified its input images")
            if boxes is not None and not all(torch.equal(a, b) for a, b in zip(boxes, case.boxes)):
                raise _fail(name, "apply() modified the boxes it was given")
            if out.numel() and out.untyped_storage().data_ptr() == case.images.untyped_storage().data_ptr():
                raise _fail(name, "apply() returned the input's memory; return a new tensor (e.g. images.clone())")


def check_determinism(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """Equal streams give equal outputs, from the same instance and from a fresh one."""
    cls, _ = _build(name, params)
    for dev in _devices(device):
        for case in _cases(cls, dev):
            mech = _fitted(cls, params, case.public, dev)
            first = _apply(mech, case)
            again = _apply(mech, case)
            fresh = _apply(_fitted(cls, params, case.public, dev), case)
            if not torch.equal(first, again):
                raise _fail(name, "two calls with equal streams gave different outputs: draw randomness only from `generator`")
            if not torch.equal(first, fresh):
                raise _fail(name, "a fresh instance with equal streams gave a different output (hidden state or unseeded fit)")


def check_batch_independence(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """A batch equals its images processed one by one with their own streams ``streams[i]``."""
    cls, _ = _build(name, params)
    for dev in _devices(device):
        for case in _cases(cls, dev):
            mech = _fitted(cls, params, case.public, dev)
            batch = _apply(mech, case)
            for i in range(case.images.shape[0]):
                single = _apply(mech, case, images=case.images[i : i + 1], index=slice(i, i + 1))
                if not torch.equal(batch[i : i + 1], single):
                    diff = (batch[i : i + 1].int() - single.int()).abs().max().item()
                    raise _fail(
                        name,
                        f"image {i} of a batch differs from the same image alone (max diff {diff}): "
                        "image i must draw only from stream i and not depend on the other images",
                    )


def invalid_values(param: Param) -> list[Any]:
    """Returns values a parameter must refuse: out of range, wrong type, none when not nullable."""
    values: list[Any] = []
    if param.type is str:
        if param.choices:
            values.append("__not_a_choice__")
    else:
        values += ["not-a-number", float("nan"), float("inf")]
        step = 1 if param.type is int else 1e-3 * max(1.0, abs(param.low or 0.0), abs(param.high or 0.0))
        if param.type is int:
            values.append((param.low if param.low is not None else 0) + 0.5)
        if param.low is not None:
            values.append(param.low if param.low_open else param.low - step)
        if param.high is not None:
            values.append(param.high + step)
    if not param.nullable:
        values.append(None)
    return values


def check_param_validation(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """Defaults build; every invalid value derived from the ParamSpace, and unknown names, raise BenchError."""
    cls, _ = _build(name, None)
    for pname, param in cls.params.items():
        for value in invalid_values(param):
            try:
                cls(**{pname: value})
            except BenchError:
                continue
            except Exception as exc:
                raise _fail(name, f"{pname}={value!r} raised {type(exc).__name__}, expected BenchError") from exc
            raise _fail(name, f"{pname}={value!r} was accepted; it is outside {param.describe_range()}")
        if param.type is not str:
            try:
                low, high = param.tune_range()
                param.parse(pname, low)
                param.parse(pname, high)
            except BenchError as exc:
                raise _fail(name, f"tuning range of {pname!r} is not valid: {exc}") from exc
    try:
        cls(__no_such_parameter__=1)
    except BenchError:
        return
    raise _fail(name, "an unknown parameter name was accepted")


def check_boxes_required(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """A mechanism with ``uses_boxes`` refuses ``boxes=None`` with a BenchError."""
    cls, _ = _build(name, params)
    if not cls.uses_boxes:
        return
    case = _cases(cls, torch.device("cpu"))[0]
    mech = _fitted(cls, params, case.public, torch.device("cpu"))
    try:
        mech.apply(case.images, generator=case.streams, boxes=None)
    except BenchError:
        return
    raise _fail(name, "uses_boxes is set but apply(boxes=None) did not raise BenchError")


def check_claimed_noise(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """The noise a claimed mechanism adds has the distribution and scale its claim implies (KS test)."""
    cls, mech = _build(name, params)
    probe = noise_probe_for(cls)
    if probe is None:
        if mech.claim() is None:
            return
        raise _fail(
            name,
            "claim() is not None but no NoiseProbe is registered: call "
            "bench.testing.register_noise_probe(name, NoiseProbe(...)) so the claim can be checked",
        )
    dev = _devices(device)[0]
    c, h, w = probe.shape
    probed = _fitted(cls, probe.params, _public_set(c, h, w, n=32), dev)
    if probed.claim() is None:
        raise _fail(name, f"the noise probe's configuration {dict(probe.params)} makes no claim")
    streams = Streams.for_images(_SEED, "conformance/noise", probe.images, device=dev)
    samples = np.asarray(probe.observe(probed, streams), dtype=np.float64).ravel()
    dist = probe.expected(probed)
    if probe.rounded:
        samples = samples + np.random.default_rng(0).uniform(-0.5, 0.5, samples.shape)
        cdf: Any = rounded_cdf(dist)
    else:
        cdf = dist.cdf
    result = stats.kstest(samples, cdf)
    if result.pvalue < KS_ALPHA:
        raise _fail(
            name,
            f"the noise added does not follow the claimed distribution (KS D={result.statistic:.3f}, "
            f"p={result.pvalue:.1e}, {samples.size} samples): mean |noise| {np.abs(samples).mean():.4g}, "
            f"claimed {dist.dist.name} with mean |noise| {dist.expect(abs):.4g}",
        )


def check_audit(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """A claimed mechanism passes a small empirical DP audit: the lower bound on epsilon is within its claim.

    Runs :func:`bench.audit.conformance.conformance_audit` (2000 counted trials per
    neighbouring input at 0.99 confidence) at ``params``, else at the registered audit
    parameters, else at ``conformance_params`` or the defaults.
    """
    cls, mech = _build(name, params)
    if mech.claim() is None:
        return
    report = conformance_audit(cls, params, _devices(device)[0], _SEED)
    if not report.passed:
        raise _fail(
            name,
            f"{report.summary()}: the claim is violated ({report.neighbours}; test {report.test}; "
            f"{report.false_positives} false positives, {report.false_negatives} false negatives)",
        )


CHECKS: dict[str, Callable[..., None]] = {
    "claim_wellformed": check_claim_wellformed,
    "uint8": check_uint8,
    "shape_device": check_shape_device,
    "input_untouched": check_input_untouched,
    "determinism": check_determinism,
    "batch_independence": check_batch_independence,
    "param_validation": check_param_validation,
    "boxes_required": check_boxes_required,
    "claimed_noise": check_claimed_noise,
    "audit": check_audit,
}
"""Check name -> function ``(name, params=None, device=None)`` that raises ConformanceError."""


def run_conformance(
    name: str,
    *,
    checks: Sequence[str] | None = None,
    params: Mapping[str, Any] | None = None,
    device: str | torch.device | None = None,
) -> list[str]:
    """Runs the suite over one registered mechanism.

    Args:
        name: Registered mechanism name.
        checks: Names from :data:`CHECKS` to run; all by default.
        params: Parameters of the instance under test (defaults otherwise).
        device: Device to test on; the CPU (and CUDA when available) by default.

    Returns:
        One ``"check: message"`` line per failed check; empty when the mechanism conforms.
    """
    failures = []
    for check in checks or list(CHECKS):
        try:
            CHECKS[check](name, params=params, device=device)
        except ConformanceError as exc:
            failures.append(f"{check}: {exc}")
        except Exception as exc:  # a crash is a failure of that check, not of the suite
            where = traceback.extract_tb(exc.__traceback__)[-1]
            failures.append(f"{check}: {name}: crashed with {type(exc).__name__}: {exc} ({where.filename}:{where.lineno})")
    return failures

