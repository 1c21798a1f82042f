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

import math
import traceback
from typing import Any, Callable, Mapping, Sequence

import torch

from bench.audit.conformance import register_audit_params
from bench.core.interfaces import Param, PrivacyClaim
from bench.errors import BenchError
from bench.system.precision import reproducible
from bench.testing._mechanism_cases import (
    ConformanceError,
    apply_case,
    build_mechanism,
    check_devices,
    checked_in_worker,
    failure,
    fitted_mechanism,
    make_cases,
    synthetic_boxes,
)
from bench.testing.claim_checks import check_audit, check_claimed_noise
from bench.testing.noise_probes import NoiseProbe, noise_probe_for, register_noise_probe

__all__ = [
    "CHECKS",
    "PREFLIGHT",
    "ConformanceError",
    "NoiseProbe",
    "check_audit",
    "check_batch_independence",
    "check_boxes_required",
    "check_claim_wellformed",
    "check_claimed_noise",
    "check_determinism",
    "check_initialised_output",
    "check_input_untouched",
    "check_output_uint8",
    "check_param_validation",
    "check_shape_device",
    "check_uint8",
    "invalid_values",
    "noise_probe_for",
    "register_audit_params",
    "register_noise_probe",
    "run_conformance",
    "run_preflight",
    "synthetic_boxes",
]


# --- checks -----------------------------------------------------------------------------


def check_claim_wellformed(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """The claim is None or a PrivacyClaim with a finite epsilon > 0, 0 <= delta < 1 and a unit."""
    _, mech = build_mechanism(name, params)
    claim = mech.claim()
    if claim is None:
        return
    if not isinstance(claim, PrivacyClaim):
        raise failure(name, f"claim() must return a PrivacyClaim or None, got {type(claim).__name__}")
    if not (claim.epsilon > 0 and math.isfinite(claim.epsilon)):
        raise failure(name, f"claimed epsilon must be finite and > 0, got {claim.epsilon!r}")
    if not 0 <= claim.delta < 1:
        raise failure(name, f"claimed delta must be in [0, 1), got {claim.delta!r}")
    if not claim.unit.strip():
        raise failure(name, "a claim must name its unit (the neighbourhood it protects)")


def check_output_uint8(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """Outputs of uint8 batches are uint8 tensors."""
    cls, _ = build_mechanism(name, params)
    for dev in check_devices(device):
        for case in make_cases(cls, dev):
            _check_uint8_output(name, apply_case(fitted_mechanism(cls, params, case.public, dev), case))


def _check_uint8_output(name: str, out: Any) -> None:
    if not isinstance(out, torch.Tensor) or out.dtype != torch.uint8:
        got = out.dtype if isinstance(out, torch.Tensor) else type(out).__name__
        raise failure(name, f"apply() must return a uint8 tensor, got {got}")


def check_uint8(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """Outputs are uint8; a float batch is refused with a BenchError, not silently accepted."""
    cls, _ = build_mechanism(name, params)
    for dev in check_devices(device):
        for case in make_cases(cls, dev):
            mech = fitted_mechanism(cls, params, case.public, dev)
            _check_uint8_output(name, apply_case(mech, case))
            try:
                apply_case(mech, case, images=case.images.float())
            except BenchError:
                continue
            except Exception as exc:
                raise failure(name, f"a float batch must raise BenchError, raised {type(exc).__name__}: {exc}") from exc
            raise failure(name, "a float batch must raise BenchError (mechanisms take uint8 [N, C, H, W])")


def check_shape_device(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """The output has the input's shape and lives on the input's device."""
    cls, _ = build_mechanism(name, params)
    for dev in check_devices(device):
        for case in make_cases(cls, dev):
            out = apply_case(fitted_mechanism(cls, params, case.public, dev), case)
            if tuple(out.shape) != tuple(case.images.shape):
                raise failure(name, f"output shape {tuple(out.shape)} differs from input shape {tuple(case.images.shape)}")
            if out.device != case.images.device:
                raise failure(name, f"output is on {out.device}, input on {case.images.device}")


def check_input_untouched(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """Neither the images, the boxes nor the streams' seeds are modified, and the output is new memory of its own.

    The output is not the input's memory, and a later call on other images writes neither
    into it nor into the earlier call's inputs (a reference kept): a release keeps earlier
    batches (on an accelerator, on the device until they are copied out together) while
    the mechanism runs on the next, and the inputs are the caller's.
    """
    if checked_in_worker("input_untouched", name, params, device):
        return
    cls, _ = build_mechanism(name, params)
    for dev in check_devices(device):
        for case in make_cases(cls, dev):
            images = case.images.clone()
            boxes = None if case.boxes is None else [b.clone() for b in case.boxes]
            seeds = case.streams.seeds.clone()
            mech = fitted_mechanism(cls, params, case.public, dev)
            out = apply_case(mech, case)
            _check_inputs_kept(name, case, images, boxes, seeds, "apply()")
            if not isinstance(out, torch.Tensor):
                raise failure(name, f"apply() must return a tensor, got {type(out).__name__}")
            if out.numel() and out.untyped_storage().data_ptr() == case.images.untyped_storage().data_ptr():
                raise failure(name, "apply() returned the input's memory; return a new tensor (e.g. images.clone())")
            kept = out.clone()
            apply_case(mech, case, images=255 - images)
            if not torch.equal(out, kept):
                raise failure(name, "a later apply() wrote into an earlier call's output; return a new tensor every call")
            _check_inputs_kept(name, case, images, boxes, seeds, "a later apply()")


def _check_inputs_kept(name: str, case: Any, images: torch.Tensor, boxes: list[torch.Tensor] | None,
                       seeds: torch.Tensor, who: str) -> None:
    """Raises unless a case's images, boxes and stream seeds still equal the copies taken before ``who`` ran."""
    whose = "its input" if who == "apply()" else "an earlier call's input (a reference kept):"
    if not torch.equal(images, case.images):
        raise failure(name, f"{who} modified {whose} images")
    if boxes is not None and not all(torch.equal(a, b) for a, b in zip(boxes, case.boxes)):
        raise failure(name, f"{who} modified {whose} boxes")
    if not torch.equal(seeds, case.streams.seeds):
        raise failure(name, f"{who} modified {whose} streams' seeds (generator)")


def check_determinism(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """Equal streams give equal outputs, from the same instance and from a fresh one."""
    cls, _ = build_mechanism(name, params)
    for dev in check_devices(device):
        for case in make_cases(cls, dev):
            mech = fitted_mechanism(cls, params, case.public, dev)
            first = apply_case(mech, case)
            again = apply_case(mech, case)
            fresh = apply_case(fitted_mechanism(cls, params, case.public, dev), case)
            if not torch.equal(first, again):
                raise failure(name, "two calls with equal streams gave different outputs: draw randomness only from `generator`")
            if not torch.equal(first, fresh):
                raise failure(name, "a fresh instance with equal streams gave a different output (hidden state or unseeded fit)")


def _leave_written_memory(device: torch.device, values: int) -> None:
    """Allocates and frees buffers holding 7s of up to 16 bytes per value, so that the allocator hands them out next."""
    held = [torch.full((values * size,), 7, dtype=torch.uint8, device=device) for size in (1, 2, 3, 4, 8, 12, 16)]
    del held


def check_initialised_output(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """Every output value is computed: the output is the same whatever memory ``torch.empty`` hands out.

    Cells run without PyTorch's fill of new memory (:func:`bench.system.precision.reproducible`),
    so a value read from memory the mechanism never wrote would be what an earlier tensor
    left there. The mechanism runs once with PyTorch filling new memory (NaN, or a type's
    largest value) and once right after buffers holding other values were freed; the two
    outputs must be equal.
    """
    if checked_in_worker("initialised_output", name, params, device):
        return
    cls, _ = build_mechanism(name, params)
    for dev in check_devices(device):
        for case in make_cases(cls, dev):
            mech = fitted_mechanism(cls, params, case.public, dev)
            with reproducible(fill_new_memory=True):
                filled = apply_case(mech, case)
            with reproducible():  # as in a cell
                _leave_written_memory(dev, case.images.numel())
                unfilled = apply_case(mech, case)
            if not torch.equal(filled, unfilled):
                raise failure(name, "its output depends on memory it never wrote (a buffer from torch.empty read "
                                    "before every value was set): write the whole buffer, or use torch.zeros")


def check_batch_independence(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """A batch equals its images processed one by one with their own streams ``streams[i]``."""
    cls, _ = build_mechanism(name, params)
    for dev in check_devices(device):
        for case in make_cases(cls, dev):
            mech = fitted_mechanism(cls, params, case.public, dev)
            batch = apply_case(mech, case)
            for i in range(case.images.shape[0]):
                single = apply_case(mech, case, images=case.images[i : i + 1], index=slice(i, i + 1))
                if not torch.equal(batch[i : i + 1], single):
                    diff = (batch[i : i + 1].int() - single.int()).abs().max().item()
                    raise failure(
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
    cls, _ = build_mechanism(name, None)
    for pname, param in cls.params.items():
        for value in invalid_values(param):
            try:
                cls(**{pname: value})
            except BenchError:
                continue
            except Exception as exc:
                raise failure(name, f"{pname}={value!r} raised {type(exc).__name__}, expected BenchError") from exc
            raise failure(name, f"{pname}={value!r} was accepted; it is outside {param.describe_range()}")
        if param.type is not str:
            try:
                low, high = param.tune_range()
                param.parse(pname, low)
                param.parse(pname, high)
            except BenchError as exc:
                raise failure(name, f"tuning range of {pname!r} is not valid: {exc}") from exc
    try:
        cls(__no_such_parameter__=1)
    except BenchError:
        return
    raise failure(name, "an unknown parameter name was accepted")


def check_boxes_required(name: str, params: Mapping[str, Any] | None = None, device: str | torch.device | None = None) -> None:
    """A mechanism with ``uses_boxes`` refuses ``boxes=None`` with a BenchError."""
    cls, _ = build_mechanism(name, params)
    if not cls.uses_boxes:
        return
    case = make_cases(cls, torch.device("cpu"))[0]
    mech = fitted_mechanism(cls, params, case.public, torch.device("cpu"))
    try:
        mech.apply(case.images, generator=case.streams, boxes=None)
    except BenchError:
        return
    raise failure(name, "uses_boxes is set but apply(boxes=None) did not raise BenchError")


CHECKS: dict[str, Callable[..., None]] = {
    "claim_wellformed": check_claim_wellformed,
    "uint8": check_uint8,
    "shape_device": check_shape_device,
    "input_untouched": check_input_untouched,
    "determinism": check_determinism,
    "initialised_output": check_initialised_output,
    "batch_independence": check_batch_independence,
    "param_validation": check_param_validation,
    "boxes_required": check_boxes_required,
    "claimed_noise": check_claimed_noise,
    "audit": check_audit,
}
"""Check name -> function ``(name, params=None, device=None)`` that raises ConformanceError."""

PREFLIGHT: dict[str, Callable[..., None]] = {
    "claim_wellformed": check_claim_wellformed,
    "output_uint8": check_output_uint8,
    "shape_device": check_shape_device,
    "input_untouched": check_input_untouched,
    "determinism": check_determinism,
    "initialised_output": check_initialised_output,
    "batch_independence": check_batch_independence,
}
"""The cheap checks run before every cell of a plugin mechanism (:func:`bench.cell.preflight.preflight`):
about what the mechanism does to a uint8 batch of its own kind, not what it refuses, nor its noise or audit."""


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


def run_preflight(
    name: str, params: Mapping[str, Any] | None, device: str | torch.device
) -> tuple[list[str], str | None]:
    """Runs the :data:`PREFLIGHT` checks over one registered mechanism on one device.

    Args:
        name: Registered mechanism name.
        params: Parameters of the instance under test.
        device: The device its cells run on.

    Returns:
        One ``"check: message"`` line per failed check, and the first check the mechanism
        crashed in (``"check: Type: message"``; such a check cannot judge it), or None.
    """
    failures, crashed = [], None
    for check, run in PREFLIGHT.items():
        try:
            run(name, params=params, device=device)
        except ConformanceError as exc:
            failures.append(f"{check}: {exc}")
        except Exception as exc:  # the mechanism raised on the small batch: its cell will say so itself
            crashed = crashed or f"{check}: {type(exc).__name__}: {exc}"
    return failures, crashed
