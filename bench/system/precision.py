"""The arithmetic precision of a cell's utility networks: full float32, or bfloat16 mixed precision.

A cell computes its task at one precision (``bench run --precision``). At ``bf16`` the
task's networks run their forward passes under ``torch.autocast`` with bfloat16
(convolutions and matrix products in bfloat16; weights, optimiser state, losses and
embeddings in float32). On a CPU with AMX that about halves their training time, and it
changes the numbers, so the precision is part of the cell key, of every trained model's
cache key (:func:`key_parts`) and of the board key, and is recorded in ``Result.versions``.

Only the task's networks use it. Adversaries always run in float32, so a cell's privacy is
measured by the same adversary at every precision (a bfloat16 adversary could be a weaker
one), and mechanisms never do (:func:`exact`): a release's images do not depend on it.

The precision in force is a context variable, set by the runner around the task
(:func:`using`) and read where networks run (:func:`autocast`), so that no trained model
can be cached without it.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import weakref
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from bench.errors import BenchError

if TYPE_CHECKING:
    import torch
    from torch import nn

PRECISIONS = ("fp32", "bf16")
"""``fp32``: float32 throughout (the default); ``bf16``: bfloat16 autocast of network forward passes."""

DEFAULT = "fp32"
TOLERANCE = 0.02
"""Largest error a layer may show at bf16 against float32 on the same bfloat16 values, relative to
the largest value of its output or gradient. Rounding its result to bfloat16 costs at most
2^-8 (0.004); torch 2.14.1's oneDNN computes some stride-2 convolutions with an output one
pixel wide wrongly on AMX CPUs (errors from 0.07 to 1e37), which :func:`verify` refuses."""

VERIFY_IMAGES = 16
"""Images of a batch :func:`verify` checks layers on: the wrong kernels depend on a layer's input
size, not on the batch's (batches of 8 and 16 images were equally wrong), and a whole batch
of a large network's layer inputs would not fit in memory."""

_CURRENT: contextvars.ContextVar[str] = contextvars.ContextVar("bench_precision", default=DEFAULT)
_VERIFIED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Model -> the input shapes (less the batch) its layers were checked on in this process."""


def check(precision: str, device: torch.device, task: str, supported: tuple[str, ...]) -> None:
    """Checks that a cell can compute at ``precision`` before anything runs.

    Args:
        precision: The requested precision.
        device: The cell's device.
        task: The task, for messages (``task 'x'``).
        supported: The precisions the task declares (``Task.precisions``).

    Raises:
        BenchError: An unknown precision, bf16 on a GPU without it, or a task whose
            networks have not been made to run at it.
    """
    if precision not in PRECISIONS:
        raise BenchError(f"unknown precision {precision!r} (use {' or '.join(PRECISIONS)})")
    if precision == DEFAULT:
        return
    import torch

    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise BenchError(f"--precision {precision}: {torch.cuda.get_device_name(device)} has no bfloat16 "
                         "(use --precision fp32)")
    if precision not in supported:
        raise BenchError(f"--precision {precision}: {task} computes in {' and '.join(supported)} only "
                         f"(use --precision {DEFAULT})")


def no_tf32() -> None:
    """Makes float32 on CUDA float32: cuDNN runs float32 convolutions in TF32 unless told not to.

    Called for every cell (autocast leaves the ops it does not cast in float32), so that a
    cell's precision is what its label says on GPUs too.
    """
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


@contextlib.contextmanager
def reproducible(fill_new_memory: bool = False) -> Iterator[None]:
    """Sets, for the block, what every cell computes under, in its own process and in each data-parallel rank.

    Deterministic algorithms where PyTorch has them (a warning, not an error, where an op
    has none), cuBLAS's deterministic workspace, and float32 without TF32 (:func:`no_tf32`).
    PyTorch's deterministic mode also fills the memory of every ``torch.empty`` (NaN, or an
    integer type's largest value) so that a read of memory nobody wrote is reproducible:
    that is one more pass over memory per buffer (5 ms for a batch of 300 images of
    448x448 on one core, 2.6 s of the README's main job). It is turned off: PrivBench's
    code writes every buffer it allocates before reading it, and the mechanism conformance
    check ``initialised_output`` holds every registered mechanism to that.
    The caller's settings are restored after the block (cuBLAS's workspace stays set: it is
    read once per process).

    Args:
        fill_new_memory: Keep PyTorch's fill on (the checks that compare a run with it against
            one without).
    """

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    with determinism({"deterministic": True, "warn_only": True, "fill": fill_new_memory, "tf32": [False, False]}):
        yield


def determinism_state() -> dict[str, Any]:
    """Returns torch's determinism settings in force, as :func:`determinism` takes them.

    Keys: ``deterministic`` and ``warn_only`` (deterministic algorithms), ``fill`` (fill
    new memory) and ``tf32`` ([cuDNN, cuBLAS matmul] TF32 allowed).
    """
    import torch

    return {"deterministic": torch.are_deterministic_algorithms_enabled(),
            "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
            "fill": bool(torch.utils.deterministic.fill_uninitialized_memory),
            "tf32": [bool(torch.backends.cudnn.allow_tf32), bool(torch.backends.cuda.matmul.allow_tf32)]}


@contextlib.contextmanager
def determinism(state: Mapping[str, Any]) -> Iterator[None]:
    """Sets torch's determinism settings for the block and restores the caller's after it.

    Args:
        state: As :func:`determinism_state` returns it; a missing key keeps its setting.
    """
    import torch

    before = determinism_state()
    wanted = {**before, **state}
    torch.use_deterministic_algorithms(bool(wanted["deterministic"]), warn_only=bool(wanted["warn_only"]))
    torch.utils.deterministic.fill_uninitialized_memory = bool(wanted["fill"])
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = (bool(v) for v in wanted["tf32"])
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before["deterministic"], warn_only=before["warn_only"])
        torch.utils.deterministic.fill_uninitialized_memory = before["fill"]
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before["tf32"]


def current() -> str:
    """Returns the precision in force (``fp32`` outside any cell)."""
    return _CURRENT.get()


@contextlib.contextmanager
def using(precision: str) -> Iterator[None]:
    """Sets the precision in force for the block (the runner's, around a cell's task)."""
    token = _CURRENT.set(precision)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def exact() -> contextlib.AbstractContextManager[None]:
    """Full float32 for the block whatever the cell's precision: mechanisms, and what they fit, inside a task."""
    return using(DEFAULT)


def autocast(device: torch.device | str) -> contextlib.AbstractContextManager:
    """Returns the context a network's forward pass runs in: autocast at bf16, nothing at fp32.

    Outputs computed inside are bfloat16 at bf16; callers convert them to float32
    (``.float()``) before losses, distances and metrics.
    """
    if current() == DEFAULT:
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)


def memory_format() -> torch.memory_format:
    """Returns the layout a convolutional network takes at the precision in force.

    ``channels_last`` at bf16 (bfloat16 convolutions run on it without reordering: a ResNet-50
    step at 224 px took 871 ms against 1,163 ms contiguous on an AMX CPU), ``preserve_format``
    at fp32, whose networks keep the layout their numbers were computed in.
    """
    import torch

    return torch.preserve_format if current() == DEFAULT else torch.channels_last


def recorded(versions: Mapping[str, Any] | None) -> str:
    """Returns the precision a result was computed at, from its ``versions``.

    Results written before the precision was recorded were computed in fp32.
    """
    return str((versions if isinstance(versions, Mapping) else {}).get("precision") or DEFAULT)


def verify(model: nn.Module, example: torch.Tensor, what: str = "") -> None:
    """At bf16, checks every convolution and linear layer of ``model`` against float32 before it runs.

    The model runs once on ``example`` in float32 (in its current mode, its buffers and the
    random number generators restored after) to record what each layer receives; each
    layer then computes its output and both gradients (for one fixed random upstream
    gradient) in bfloat16 and in float32 from the same bfloat16 values. Training loops call
    it before the first step, and :func:`bench.nn.images.embed` before the first batch, so
    a model read from a cache filled elsewhere is checked on this machine too; a model is
    checked once per input size. Nothing happens at fp32.

    Args:
        model: The network about to train or run.
        example: A batch of its inputs, as it will get them (layout included); its first
            :data:`VERIFY_IMAGES` are used.
        what: The model, for messages (``the few-shot model``; default: its class).

    Raises:
        BenchError: A layer's bfloat16 result is off by more than :data:`TOLERANCE`: this
            machine's kernels cannot train it in mixed precision.
    """
    if current() == DEFAULT or tuple(example.shape[1:]) in _VERIFIED.get(model, ()):
        return
    import torch
    from torch import nn

    example = example[:VERIFY_IMAGES]

    seen: dict[nn.Module, torch.Tensor] = {}
    layers = [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]

    def record(layer: nn.Module, args: tuple, out: torch.Tensor) -> None:
        seen.setdefault(layer, args[0].detach())

    hooks = [m.register_forward_hook(record) for m in layers]
    buffers = {name: b.clone() for name, b in model.named_buffers()}
    # Dropout in training mode draws: the run's random streams continue as if nothing had run.
    rng_devices = [example.device] if example.device.type == "cuda" else []
    try:
        with torch.no_grad(), torch.autocast(example.device.type, enabled=False), \
                torch.random.fork_rng(devices=rng_devices, device_type=example.device.type):
            model(example)
    finally:
        for hook in hooks:
            hook.remove()
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(buffers[name])
    with torch.enable_grad(), torch.autocast(example.device.type, enabled=False):  # callers may be in either
        errors = {layer: _layer_error(layer, x) for layer, x in seen.items()}
    for layer, error in errors.items():
        if not error <= TOLERANCE:
            x = seen[layer]
            shape = f"{'x'.join(str(n) for n in x.shape[2:])} inputs" if x.dim() == 4 else f"{x.shape[-1]} features"
            raise BenchError(f"--precision bf16: this machine's bfloat16 kernels compute "
                             f"{what or 'the ' + type(model).__name__}'s {layer} on {shape} wrongly (relative error "
                             f"{error:.2g} against float32, torch {torch.__version__}); use --precision fp32")
    _VERIFIED.setdefault(model, set()).add(tuple(example.shape[1:]))


def _layer_error(layer: nn.Module, x: torch.Tensor) -> float:
    """Returns the largest relative error of a layer's bfloat16 output and gradients against float32's."""
    import torch
    import torch.nn.functional as F

    op = layer._conv_forward if isinstance(layer, torch.nn.Conv2d) else F.linear  # its padding mode included
    values = [t.detach().to(torch.bfloat16) for t in (x, layer.weight)]
    bias = None if layer.bias is None else layer.bias.detach().to(torch.bfloat16)
    upstream = None
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        a, w = (t.to(dtype).requires_grad_() for t in values)
        out = op(a, w, None if bias is None else bias.to(dtype))
        if upstream is None:
            g = torch.Generator(device=out.device).manual_seed(0)
            upstream = torch.randn(out.shape, generator=g, device=out.device).to(torch.bfloat16)
        out.backward(upstream.to(dtype))
        results[dtype] = [t.detach().float() for t in (out, a.grad, w.grad)]
    errors = [((low - full).abs().max() / full.abs().max().clamp_min(1e-30)).item()
              for low, full in zip(results[torch.bfloat16], results[torch.float32])]
    return max(errors)


def key_parts() -> tuple[str, ...]:
    """Returns what a trained model's cache key adds for the precision in force: nothing at fp32."""
    return () if current() == DEFAULT else ("precision", current())
