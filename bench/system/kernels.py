"""Fused kernels: ``torch.compile`` where it works, the same code run eagerly where not.

The random draws and the noise-adding mechanisms are elementwise code over whole
batches. Compiled (Inductor: C++/OpenMP on CPU, Triton on CUDA) they run as one pass
over memory; eagerly, every operation is a pass of its own, which is several times
slower on CPU but gives the same integers and floats equal to within an ulp or two.

``BENCH_COMPILE`` chooses: ``auto`` (default) compiles work large enough for compiling
to pay back (:func:`choose`: at least ``PAYBACK_VALUES`` values; compiling costs 10-20 s
cold on 2 cores, eager code a few ns per value more) and runs smaller work eagerly, and
falls back to eager for a device type whose compiler fails (no C++ compiler, no Triton),
with one warning; ``1`` compiles everything and lets a failure raise; ``0`` never compiles.
The choice depends only on the size of the work, never on what the process did before, so
a cell takes the same path in a fresh process and in a long-lived grid worker. The work
is what the innermost of these says: a release's split (:func:`using`, which
:mod:`bench.release.dataset` and the audits set), else a mechanism's batch or a draw's values (:func:`deciding`,
which the fused mechanisms' ``apply`` and :class:`~bench.randomness.streams.Streams` set), else the
kernel call's largest tensor argument.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import os
import warnings
from typing import Any, Callable, Iterator

import torch

from bench.errors import BenchError

ENV = "BENCH_COMPILE"
_MODES = ("auto", "0", "1")
_RECOMPILE_LIMIT = 32
PAYBACK_VALUES = 10**9
"""Work (values through the kernels) from which compiling pays back on its own cost."""
DEVICE_BATCH_VALUES = 1 << 26
"""Values a piece of kernel work holds on an accelerator: a release's batch there
(:mod:`bench.release.dataset`) and a mechanism's chunk (``mechanisms._ops``). Short kernels on small
batches leave a GPU idle: a chunk launches dozens of them."""
_failed: dict[str, str] = {}
_path_here: contextvars.ContextVar[str | None] = contextvars.ContextVar("kernel_path", default=None)


def _mode() -> str:
    mode = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if mode not in _MODES:
        raise BenchError(f"{ENV}={mode!r}: expected one of {', '.join(_MODES)}")
    return mode


def backend(device: torch.device | str) -> str:
    """Returns how kernels run on a device by default: ``"compiled"`` or ``"eager"``."""
    kind = torch.device(device).type
    if _mode() == "0" or kind in _failed:
        return "eager"
    return "compiled"


def choose(device: torch.device | str, values: int) -> str:
    """Returns how a piece of work of ``values`` values should run: ``"compiled"`` or ``"eager"``.

    ``auto`` compiles only work of at least :data:`PAYBACK_VALUES` values.
    """
    path = backend(device)
    if path == "compiled" and _mode() == "auto" and values < PAYBACK_VALUES:
        return "eager"
    return path


@contextlib.contextmanager
def using(path: str) -> Iterator[None]:
    """Runs the kernels called inside on ``path`` (``"compiled"`` or ``"eager"``, from :func:`choose`)."""
    token = _path_here.set(path)
    try:
        yield
    finally:
        _path_here.reset(token)


def path_in_force() -> str | None:
    """Returns the path an enclosing :func:`using` set (``"compiled"`` or ``"eager"``), or None outside any."""
    return _path_here.get()


@contextlib.contextmanager
def deciding(device: torch.device | str, values: int) -> Iterator[None]:
    """Runs the kernels called inside on the path :func:`choose` picks for ``values``, unless an outer
    :func:`using` already picked one (a release decides for its whole split, not per batch)."""
    if _path_here.get() is not None:
        yield
        return
    with using(choose(device, values)):
        yield


def _values_of(args: tuple[Any, ...]) -> int:
    return max((arg.numel() for arg in args if isinstance(arg, torch.Tensor)), default=0)


def _device_of(args: tuple[Any, ...]) -> str:
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return arg.device.type
    return "cpu"


class Kernel:
    """A tensor function run compiled when the device's compiler works, else eagerly.

    Shapes are dynamic, so a new image size reuses the compiled code; a new rank, a size
    of 1 (which Dynamo specialises) or a view's base do compile variants of their own, so
    callers pass fresh tensors of a fixed rank. A kernel that still hits the recompile
    limit runs eagerly from then on; the others stay compiled.

    Args:
        fn: A function of tensors (and Python scalars that select its variant) made of
            operations that Inductor can fuse.
    """

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn
        self._compiled: Callable[..., Any] | None = None
        self._over_limit = False
        functools.update_wrapper(self, fn)

    def eager(self, *args: Any) -> Any:
        """Runs the function without compiling it."""
        return self.fn(*args)

    def __call__(self, *args: Any) -> Any:
        device = _device_of(args)
        mode = _mode()
        path = _path_here.get() or choose(device, _values_of(args))
        if mode == "0" or path == "eager" or device in _failed or self._over_limit:
            return self.fn(*args)
        if self._compiled is None:
            self._compiled = torch.compile(self.fn, dynamic=True, fullgraph=True)
        if mode == "1":
            return self._run(args)
        try:
            return self._run(args)
        except torch._dynamo.exc.FailOnRecompileLimitHit:
            # Too many shape variants for this one kernel: it alone runs eagerly from now on.
            self._over_limit = True
            return self.fn(*args)
        except Exception as exc:  # noqa: BLE001 - any compiler failure falls back
            result = self.fn(*args)
            reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            _failed[device] = reason
            warnings.warn(
                f"torch.compile failed on {device} ({reason[:200]}); kernels run eagerly there "
                f"(same integers, floats within an ulp, slower). Set {ENV}=0 to skip compiling.",
                RuntimeWarning,
                stacklevel=2,
            )
            return result

    def _run(self, args: tuple[Any, ...]) -> Any:
        # cpp_extension warns about a missing CUDA runtime on every CPU compile.
        quiet = logging.getLogger("torch.utils.cpp_extension")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            assert self._compiled is not None
            # A fixed grad mode and a larger recompile limit, for these kernels only.
            with torch.no_grad(), torch._dynamo.config.patch(recompile_limit=_RECOMPILE_LIMIT):
                return self._compiled(*args)
        finally:
            quiet.setLevel(level)


def kernel(fn: Callable[..., Any]) -> Kernel:
    """Decorator: makes ``fn`` a :class:`Kernel`."""
    return Kernel(fn)
