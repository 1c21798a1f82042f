"""The worker process of an isolated mechanism: the only process that imports a submitted mechanism file.

``python -I -B -m bench.testing.isolation_worker`` is started by :mod:`bench.testing.isolated`
(in a bubblewrap sandbox where it can be) and answers its requests on its standard input
and output (:mod:`bench.testing._wire`): load the files, build an instance, fit it, apply it
to a batch, return its claim, read an attribute, call a method, run a conformance check that
must see the mechanism's own memory. Whatever the mechanism prints goes to the standard
error. Before the files are imported an audit hook (:func:`sys.addaudithook`) starts
recording what the process tries through Python that a mechanism has no business doing:
writing a file outside its private folder (its working directory), reading the user's home
or connecting a socket; every answer carries what was recorded, and PrivBench refuses the
mechanism for it. The hook is a second line: the sandbox (read-only files, no network, a
home of watched canary files) is the first, and what a mechanism does around Python (a
native library) only the sandbox sees.

It is not a module to import: it is the worker's main program.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

PRIVATE = os.path.realpath(os.getcwd())
HOMES = [h for h in json.loads(os.environ.get("BENCH_WORKER_HOMES", "[]")) if isinstance(h, str) and h]
KEPT = [k for k in json.loads(os.environ.get("BENCH_WORKER_KEPT", "[]")) if isinstance(k, str) and k]
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS = {"os.mkdir": (0,), "os.rename": (0, 1), "os.remove": (0,), "os.rmdir": (0,), "os.symlink": (1,),
                "os.link": (1,), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,)}
_attempts: list[str] = []


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _absolute(path: Any) -> str | None:
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)):
        return None
    return os.path.normpath(os.path.join(PRIVATE, os.fspath(path)))


def _writable(path: str) -> bool:
    return _inside(path, PRIVATE) or (path.startswith("/dev/") and not path.startswith("/dev/shm"))


def _in_home(path: str) -> bool:
    return any(_inside(path, h) for h in HOMES) and not any(_inside(path, k) for k in KEPT)


def _hook(event: str, args: tuple) -> None:
    """Records a write outside the private folder, a read of the home, a socket connection."""
    if event == "open":
        path = _absolute(args[0])
        if path is None:
            return
        mode, flags = args[1], args[2] if len(args) > 2 else 0
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS)
        if writes and not _writable(path):
            _attempts.append(f"wrote {path}")
        elif _in_home(path):
            _attempts.append(f"read {path}")
    elif event in ("os.listdir", "os.scandir"):
        path = _absolute(args[0] if args and args[0] is not None else ".")
        if path is not None and _in_home(path):
            _attempts.append(f"listed {path}")
    elif event in _PATH_EVENTS:
        for k in _PATH_EVENTS[event]:
            path = _absolute(args[k]) if k < len(args) else None
            if path is not None and not _writable(path):
                _attempts.append(f"changed {path} ({event})")
    elif event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
        family = getattr(args[0], "family", None)
        if family != socket.AF_UNIX:
            _attempts.append(f"used the network ({event} {args[1]!r})"[:300])


class Worker:
    """The worker's state: the mechanisms its files registered and the instances it holds."""

    def __init__(self) -> None:
        self.instances: dict[int, Any] = {}
        self.next_id = 1
        self.logs: list[str] = []
        self.tallies: list[Any] = []

    # --- requests --------------------------------------------------------------------------

    def load(self, files: list[str]) -> dict[str, Any]:
        from bench.audit.conformance import _AUDIT_PARAMS
        from bench.core.registry import REGISTRIES, load_mechanism_file, mechanisms

        before = {r.kind: set(r.list()) for r in REGISTRIES if r is not mechanisms}
        audits = dict(_AUDIT_PARAMS)
        names: list[str] = []
        for path in files:
            names += [n for n in load_mechanism_file(path) if n not in names]
        others = sorted(f"{r.kind} {n!r}" for r in REGISTRIES if r is not mechanisms
                        for n in set(r.list()) - before[r.kind])
        described = {name: self.describe(mechanisms.get(name)) for name in names}
        added = {k: dict(v) for k, v in _AUDIT_PARAMS.items() if audits.get(k) != v}
        return {"mechanisms": described, "others": others, "audit_params": added}

    def describe(self, cls: type) -> dict[str, Any]:
        from bench.core.interfaces import Mechanism

        params = {}
        for pname, p in cls.params.items():
            params[pname] = {"type": p.type.__name__, "default": p.default, "low": p.low, "high": p.high,
                             "low_open": p.low_open, "log": p.log, "choices": p.choices, "nullable": p.nullable,
                             "tune": p.tune, "help": p.help}
        lineage = [k.__dict__.get("name") for k in cls.__mro__]
        conformance = getattr(cls, "conformance_params", None)
        return {"class": cls.__name__, "qualname": cls.__qualname__, "doc": cls.__doc__ or "",
                "version": cls.version, "params": params, "uses_boxes": bool(cls.uses_boxes),
                "description": cls.description or "", "lineage": [n for n in lineage if isinstance(n, str) and n],
                "conformance_params": None if conformance is None else dict(conformance),
                "has_fit": cls.fit is not Mechanism.fit}

    def new(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        from bench.core.registry import mechanisms

        instance = mechanisms.get(name)(**params)
        return {"id": self._keep(instance), "config": dict(instance.config)}

    def copy(self, handle: int) -> int:
        import copy

        return self._keep(copy.deepcopy(self.instances[handle]))

    def apply(self, handle: int, images: Any, streams: Any, boxes: Any, device: str) -> dict[str, Any]:
        import torch

        device = torch.device(device)
        images = images.to(device) if isinstance(images, torch.Tensor) else images
        if boxes is not None:
            boxes = [b.to(device) if isinstance(b, torch.Tensor) else b for b in boxes]
        tally = None
        if isinstance(streams, dict) and "secure" in streams:  # a real release's streams: fresh OS randomness here
            from bench.release.secure_streams import SecureStreams

            streams = SecureStreams(int(streams["secure"]), str(streams.get("device") or "cpu"))
            tally = streams.tally
        out = self.instances[handle].apply(images, generator=streams, boxes=boxes)
        answer: dict[str, Any] = {} if tally is None else {"tally": {"laplace": tally.laplace, "normal": tally.normal}}
        if not isinstance(out, torch.Tensor):
            return {**answer, "foreign": type(out).__name__}
        return {**answer, "out": out, "device": str(out.device)}

    def fit(self, handle: int, data: dict[str, Any], ctx: dict[str, Any]) -> None:
        import torch

        from bench.core.interfaces import RunContext
        from bench.data.base import ImageSet

        public = ImageSet(**data)
        cache = Path(PRIVATE) / "cache"
        cache.mkdir(exist_ok=True)
        context = RunContext(device=torch.device(ctx["device"]), seed=int(ctx["seed"]), profile=str(ctx["profile"]),
                             data_root=None, cache_dir=cache, options=dict(ctx.get("options") or {}),
                             eval_split=str(ctx.get("eval_split") or "test"), benchmark=str(ctx.get("benchmark") or ""),
                             log=lambda line: self.logs.append(str(line)))
        self.instances[handle].fit(public, context)

    def claim(self, handle: int) -> Any:
        from bench.core.claims import PrivacyClaim

        claim = self.instances[handle].claim()
        if claim is None:
            return None
        if not isinstance(claim, PrivacyClaim):
            return {"foreign": type(claim).__name__}
        return {"claim": {"epsilon": claim.epsilon, "delta": claim.delta, "unit": claim.unit, "note": claim.note,
                          "withheld": tuple(claim.withheld), "backed": claim.backed, "method": claim.method}}

    def attr(self, handle: int, name: str) -> dict[str, Any]:
        value = getattr(self.instances[handle], name)
        return {"callable": True} if callable(value) else {"value": value}

    def call(self, handle: int, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return getattr(self.instances[handle], name)(*args, **kwargs)

    def check(self, check: str, name: str, params: Any, device: Any, shapes: Any) -> dict[str, Any]:
        from bench.testing import mechanisms as suite
        from bench.testing._mechanism_cases import case_shapes

        run = suite.CHECKS.get(check) or suite.PREFLIGHT.get(check)
        if run is None:
            return {"failure": f"no conformance check named {check!r}"}
        try:
            with case_shapes(shapes) if shapes else contextlib.nullcontext():
                run(name, params=params, device=device)
        except suite.ConformanceError as exc:
            return {"failure": str(exc)}
        return {}

    def _keep(self, instance: Any) -> int:
        handle, self.next_id = self.next_id, self.next_id + 1
        self.instances[handle] = instance
        return handle

    # --- the loop --------------------------------------------------------------------------

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        for handle in request.get("drop") or ():
            self.instances.pop(handle, None)
        op = request.get("op")
        with _state(request.get("state")):
            if op == "load":
                return self.load(list(request["files"]))
            if op == "new":
                return self.new(request["name"], dict(request.get("params") or {}))
            if op == "copy":
                return {"id": self.copy(request["id"])}
            if op == "apply":
                return self.apply(request["id"], request["images"], request["streams"], request.get("boxes"),
                                  request["device"])
            if op == "fit":
                self.fit(request["id"], request["data"], request["ctx"])
                return {}
            if op == "claim":
                return {"value": self.claim(request["id"])}
            if op == "attr":
                return self.attr(request["id"], request["name"])
            if op == "call":
                return {"value": self.call(request["id"], request["name"], list(request.get("args") or ()),
                                           dict(request.get("kwargs") or {}))}
            if op == "check":
                return self.check(request["check"], request["name"], request.get("params"), request.get("device"),
                                  request.get("shapes"))
            if op == "ping":
                return {}
        raise ValueError(f"unknown request {op!r}")


@contextlib.contextmanager
def _state(state: dict[str, Any] | None):
    """Runs a request under the caller's torch settings: threads, kernel path, precision, determinism, grad mode."""
    if not state:
        yield
        return
    import torch

    from bench.system import kernels, precision

    if int(state.get("threads") or 0) > 0 and torch.get_num_threads() != int(state["threads"]):
        torch.set_num_threads(int(state["threads"]))
    settings = {"deterministic": bool(state.get("deterministic")), "warn_only": bool(state.get("warn_only")),
                "fill": bool(state.get("fill"))}
    if "tf32" in state:
        settings["tf32"] = state["tf32"]
    with contextlib.ExitStack() as stack:
        stack.enter_context(precision.determinism(settings))
        if state.get("kernels"):
            stack.enter_context(kernels.using(str(state["kernels"])))
        stack.enter_context(precision.using(str(state.get("precision") or precision.DEFAULT)))
        stack.enter_context(torch.set_grad_enabled(bool(state.get("grad", True))))
        yield


def _streams(seeds: Any, device: str) -> Any:
    from bench.randomness.streams import Streams

    return Streams(seeds, device)


def _outgoing_streams(value: Any) -> Any:
    from bench.randomness.streams import Streams
    from bench.testing import _wire

    if isinstance(value, Streams) and "seeds" in vars(value):  # seeded streams (secure ones have none)
        return _wire.Streams(value.seeds, str(value.device))
    return None


def _error(exc: BaseException) -> dict[str, Any]:
    from bench.errors import BenchError

    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return {"type": type(exc).__name__, "message": " ".join(str(exc).split())[:2000], "where": where,
            "bench": isinstance(exc, BenchError)}


def main() -> int:
    """Answers requests until its input closes."""
    incoming, outgoing = os.dup(0), os.dup(1)
    quiet = os.open(os.devnull, os.O_RDONLY)
    os.dup2(quiet, 0)
    os.dup2(2, 1)  # the mechanism's prints go to the standard error, never into the answers
    if os.environ.get("BENCH_WORKER_PARENT"):
        from bench.system.pool import die_with_parent

        die_with_parent(int(os.environ["BENCH_WORKER_PARENT"]))
    sys.addaudithook(_hook)

    from bench.testing import _wire

    worker = Worker()
    while True:
        try:
            request = _wire.read_message(incoming, streams=_streams)
        except EOFError:
            return 0
        if request.get("op") == "exit":
            return 0
        worker.logs = []
        try:
            reply = {"ok": worker.answer(request)}
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 (every failure of the mechanism, sys.exit too, is an answer)
            reply = {"error": _error(exc)}
        reply.update(attempts=list(_attempts), logs=worker.logs[-50:])
        _attempts.clear()
        try:
            _wire.write_message(outgoing, reply, streams=_outgoing_streams)
        except _wire.WireError as exc:
            _wire.write_message(outgoing, {"error": {"type": "TypeError", "message": str(exc), "where": "",
                                                     "bench": False}, "attempts": reply["attempts"]})


if __name__ == "__main__":
    sys.exit(main())
