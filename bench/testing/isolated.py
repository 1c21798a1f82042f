"""A submitted mechanism file run isolated: every call into its code goes to a worker process in a sandbox.

``bench submit --mechanism-file F`` and ``bench leaderboard verify`` of an entry that carries
its mechanism's source never import the file into PrivBench's process.
:func:`load_isolated` starts one long-lived worker (:mod:`bench.testing.isolation_worker`) in
a sandbox (:mod:`bench.testing.isolation`: bubblewrap where the machine allows it, else a
plain child process, after one warning line), has it import the files, and registers, under
each mechanism the files declare, a proxy class (:class:`IsolatedMechanism`) with the
mechanism's version, parameters and class attributes as the worker describes them. Each
instance of the proxy is an instance in the worker; its construction, ``fit``, ``apply``,
``claim``, its other methods and attributes are requests to the worker, so the cells, the
audits, the gate's checks and the adaptive adversaries run the mechanism through the one
path they always take (the registry, :mod:`bench.release.guard`) and get its released
images back as tensors. The worker draws from the very streams the caller passes (their
seeds travel, not their numbers), under the caller's torch threads, kernel path,
precision, deterministic-algorithm and grad settings: a release through the proxy is
byte-for-byte the release in-process.

The conformance checks that look at a mechanism's own memory (``input_untouched``,
``initialised_output``) and the ``claimed_noise`` check (whose probe may be declared in the
file) run inside the worker, on the real class (:meth:`IsolatedMechanism.isolated_check`);
the others, the audits and everything measured go through the proxy.

After every request PrivBench looks for what refuses the mechanism: a canary of the
sandbox's home opened, read, listed or written; a file left in the sandbox's ``/tmp``
outside its private folder; a write outside that folder, a read of the home or a network
connection the worker's audit hook saw. The first refuses it: the worker is stopped, the
request raises :class:`IsolationBreach` (a BenchError, one line) and so does every later
one, and :func:`raise_breach` raises it again for a caller whose own error surfaced first
(a conformance check or a cell that reported the exception as a failure). An exception in
the mechanism comes back as the same exception type (a BenchError as a BenchError, a
built-in type as itself, anything else as a RuntimeError) with one line naming the
mechanism; a worker that dies or does not answer within its time (:func:`call_timeout`,
proportional to the batch) is a :class:`WorkerFailure`, never a hang.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch

from bench.core.claims import PrivacyClaim
from bench.core.interfaces import Mechanism, RunContext
from bench.core.params import Param, ParamSpace
from bench.errors import BenchError
from bench.randomness.streams import Streams
from bench.testing import _wire
from bench.testing.isolation import Sandbox, bwrap_usable

__all__ = ["ENV", "IsolatedMechanism", "IsolationBreach", "WorkerFailure", "call_timeout", "close_all",
           "finish", "isolation_mode", "load_isolated", "raise_breach", "record", "refuse_on_breach", "registered_by"]

ENV = "BENCH_ISOLATION"
"""How a submitted mechanism file runs: ``auto`` (bwrap where usable, else a plain process, with a warning),
``bwrap``, ``process``, or ``none`` (imported into PrivBench's own process, as ``bench run --mechanism-file``)."""
MODES = ("auto", "bwrap", "process", "none")
LOAD_TIMEOUT_S = 600.0
"""Longest the worker may take to start and import the files (it imports torch and PrivBench's registries)."""
CALL_TIMEOUT_S = 300.0
"""Longest any request may take, before its share per value."""
SECONDS_PER_MILLION_VALUES = 60.0
"""Time a request is allowed per million image values it carries (a release batch of 1,024 faces of 3 x 64 x 64:
12.6 million values, 755 s more); a fit's values are its public set's."""
CHECK_TIMEOUT_S = 1800.0
"""Longest a conformance check run inside the worker may take (one at a benchmark's size runs many batches)."""
WORKER_CHECKS = ("input_untouched", "initialised_output", "claimed_noise")
"""Conformance checks run next to the mechanism, inside its worker: they look at its own memory, or use a noise
probe its file may declare."""
_PIPE_BYTES = 1 << 20


class IsolationBreach(BenchError):
    """The mechanism did, in its sandbox, what refuses it (read the home, wrote outside its folder, used the network)."""


class WorkerFailure(BenchError):
    """The worker died or did not answer in time."""


def call_timeout(values: int = 0) -> float:
    """Returns the seconds a request carrying ``values`` image values may take."""
    return CALL_TIMEOUT_S + SECONDS_PER_MILLION_VALUES * values / 1e6


def isolation_mode() -> str:
    """Returns the isolation ``$BENCH_ISOLATION`` asks for (``auto`` when unset).

    Raises:
        BenchError: An unknown value.
    """
    mode = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise BenchError(f"{ENV}={mode!r}: expected one of {', '.join(MODES)}")
    return mode


class _Worker:
    """One worker process and its sandbox, serving the mechanisms of one set of files.

    Args:
        files: The mechanism files (copied into the sandbox's private folder).
        mode: ``bwrap`` or ``process``.
    """

    def __init__(self, files: Sequence[Path], mode: str):
        self.files = [Path(p) for p in files]
        self.mode = mode
        self.label = ", ".join(p.name for p in self.files)
        self.lock = threading.RLock()
        self.breach: IsolationBreach | None = None
        self.failure: WorkerFailure | None = None
        self.dropped: list[int] = []
        self.logs: list[str] = []
        self.closed = False
        self.epoch = _epoch[0]
        self.sandbox = Sandbox(mode)
        copied = []
        for k, path in enumerate(self.files):  # under their own names (the worker's messages name them)
            target = self.sandbox.private / "files" / str(k) / path.name
            target.parent.mkdir(parents=True)
            shutil.copyfile(path, target)
            copied.append(f"{self.sandbox.inside}/files/{k}/{path.name}")
        self.stderr = open(self.sandbox.root / "worker.stderr", "w+b")  # noqa: SIM115 (kept for the worker's life)
        argv = [sys.executable, "-I", "-B", "-m", "bench.testing.isolation_worker"]
        try:
            self.process = subprocess.Popen(self.sandbox.command(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=self.stderr, env=self.sandbox.environment(),
                                            cwd=str(self.sandbox.private), close_fds=True)
        except OSError as exc:
            self.sandbox.close()
            raise BenchError(f"cannot start the isolated worker of {self.label}: {exc}") from None
        assert self.process.stdin is not None and self.process.stdout is not None
        self.send_fd, self.receive_fd = self.process.stdin.fileno(), self.process.stdout.fileno()
        for fd in (self.send_fd, self.receive_fd):
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, 1031, _PIPE_BYTES)  # F_SETPIPE_SZ: fewer, larger chunks
        os.set_blocking(self.send_fd, False)
        try:
            self.loaded = self.request({"op": "load", "files": copied}, owner=self.label, what="importing the file",
                                       timeout=LOAD_TIMEOUT_S, state=True)  # the settings' first use costs seconds
        except BaseException:
            with contextlib.suppress(Exception):
                self.close()
            raise

    # --- requests ----------------------------------------------------------------------------

    def request(self, message: dict[str, Any], *, owner: str, what: str, timeout: float,
                state: bool = False) -> Any:
        """Sends one request and returns its answer's value.

        Raises:
            IsolationBreach: The mechanism did what refuses it (now or before).
            WorkerFailure: The worker is gone or did not answer within ``timeout`` seconds.
            BenchError, a built-in exception, RuntimeError: The mechanism raised it.
        """
        with self.lock:
            self._usable(owner)
            if self.dropped:
                message["drop"], self.dropped = self.dropped, []
            if state:
                message["state"] = _state()
            deadline = time.monotonic() + timeout
            try:
                _wire.write_message(self.send_fd, message, deadline, streams=_outgoing_streams)
            except _wire.WireError as exc:  # found before anything was sent
                raise BenchError(f"mechanism {owner!r}: {what}: {exc}") from None
            except TimeoutError:
                self._fail(owner, f"its isolated worker did not take {what} within {timeout:.0f} s; it was stopped")
            except OSError:
                self._fail(owner, f"its isolated worker ended before {what} ({self._death()})")
            try:
                reply = _wire.read_message(self.receive_fd, deadline, streams=_incoming_streams)
            except _wire.WireError as exc:
                self._fail(owner, f"its isolated worker sent a malformed answer to {what} ({exc})")
            except TimeoutError:
                self._fail(owner, f"its isolated worker did not answer {what} within {timeout:.0f} s; it was stopped")
            except (EOFError, OSError):
                self._fail(owner, f"its isolated worker ended during {what} ({self._death()})")
            if not isinstance(reply, dict):
                self._fail(owner, f"its isolated worker sent a malformed answer to {what}")
            self._inspect(owner, reply.get("attempts") or [])
            logs = reply.get("logs")
            self.logs = [" ".join(str(line).split())[:500] for line in logs[:50]] if isinstance(logs, list) else []
            return self._value(owner, what, reply)

    def _value(self, owner: str, what: str, reply: dict[str, Any]) -> Any:
        if "error" in reply:
            raise _exception(owner, reply["error"])
        return reply.get("ok")

    def _usable(self, owner: str) -> None:
        if self.breach is not None:
            raise self.breach
        if self.failure is not None:
            raise WorkerFailure(str(self.failure))

    def _inspect(self, owner: str, attempts: list[Any]) -> None:
        """Refuses the mechanism for what its sandbox saw, or what its worker's audit hook recorded."""
        touched, left = self.sandbox.findings()
        if touched:
            self._refuse(owner, f"it read or wrote the user's home in its sandbox (first: {touched[0]})")
        if left:
            self._refuse(owner, f"it wrote outside its private folder in its sandbox (first: {left[0]})")
        if attempts:
            first = " ".join(str(attempts[0]).split())[:300]
            what = ("it read the user's home" if first.startswith(("read ", "listed ")) else
                    "it used the network" if first.startswith("used the network") else
                    "it wrote outside its private folder")
            self._refuse(owner, f"{what} in its sandbox (first: {first})")

    def _refuse(self, owner: str, why: str) -> None:
        self.breach = IsolationBreach(f"mechanism {owner!r} ({self.label}): isolation: {why}; refused")
        _breaches.append(self.breach)
        self._stop()
        raise self.breach

    def _fail(self, owner: str, why: str) -> None:
        self._stop()
        self.failure = WorkerFailure(f"mechanism {owner!r} ({self.label}): {why}")
        touched, left = self.sandbox.findings()
        if touched or left:  # it died after doing what refuses it: that is the one line to say
            self._inspect(owner, [])
        raise self.failure

    def _death(self) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        code = self.process.poll()
        how = "still running" if code is None else (f"killed by signal {-code}" if code < 0 else f"exit code {code}")
        self.stderr.flush()
        self.stderr.seek(0)
        lines = [line.strip() for line in self.stderr.read()[-8192:].decode(errors="replace").splitlines() if line.strip()]
        return how + (f": {lines[-1][:300]}" if lines else "")

    def forget(self, handle: int) -> None:
        """Drops an instance in the worker with the next request (an instance's finaliser calls it)."""
        self.dropped.append(handle)

    def _stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            self.process.wait(timeout=10)

    def close(self) -> None:
        """Ends the worker, looks at what it left, and removes its sandbox (once).

        Raises:
            IsolationBreach: It left what refuses the mechanism, found only now.
        """
        with self.lock:
            if self.closed:
                return
            self.closed = True
            if self.process.poll() is None and self.breach is None and self.failure is None:
                with contextlib.suppress(Exception):
                    _wire.write_message(self.send_fd, {"op": "exit"}, time.monotonic() + 10)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(timeout=1)  # its interpreter's teardown is not worth waiting for
            self._stop()
            found = None
            try:
                if self.breach is None:
                    try:
                        self._inspect(self.label, [])
                    except IsolationBreach as exc:
                        found = exc
            finally:
                for stream in (self.process.stdin, self.process.stdout, self.stderr):
                    with contextlib.suppress(OSError):
                        stream.close()
                self.sandbox.close()
                if self.failure is None:
                    self.failure = WorkerFailure(f"{self.label}: its isolated worker was closed")
            if found is not None:
                raise found


def _exception(owner: str, error: Any) -> BaseException:
    """The exception a worker's error stands for: one line naming the mechanism."""
    if not isinstance(error, dict):
        return RuntimeError(f"mechanism {owner!r} failed in its isolated worker")
    kind, message = str(error.get("type", "Exception")), " ".join(str(error.get("message", "")).split())
    if error.get("bench"):
        return BenchError(message)
    where = f" ({error['where']})" if error.get("where") else ""
    text = f"mechanism {owner!r} raised {kind}: {message}{where}, in its isolated worker"
    cls = getattr(builtins, kind, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        with contextlib.suppress(Exception):
            return cls(text)
    return RuntimeError(text)


def _state() -> dict[str, Any]:
    """The caller's torch settings a mechanism's numbers depend on, for the worker to take on."""
    from bench.system import kernels, precision

    return {"threads": torch.get_num_threads(), "kernels": kernels.path_in_force(), "precision": precision.current(),
            **precision.determinism_state(), "grad": torch.is_grad_enabled()}


def _outgoing_streams(value: Any) -> _wire.Streams | None:
    if isinstance(value, Streams) and "seeds" in vars(value):  # seeded streams (secure ones have none)
        return _wire.Streams(value.seeds, str(value.device))
    return None


def _incoming_streams(seeds: torch.Tensor, device: str) -> Streams:
    return Streams(seeds, device)


def _secure_count(generator: Any) -> int | None:
    from bench.release.secure_streams import SecureStreams

    return len(generator) if isinstance(generator, SecureStreams) else None


class IsolatedMechanism(Mechanism):
    """A mechanism whose code runs in a worker process: every call is a request to it.

    Subclasses are made by :func:`load_isolated`, one per mechanism a file registers, with
    the class attributes the worker describes (``version``, ``params``, ``uses_boxes``,
    ``description``, ``conformance_params``, ``lineage``: the registered names along the
    real class's bases, so that a subclass of a built-in is audited as one).
    """

    isolated_worker: ClassVar[_Worker]
    isolated_source: ClassVar[Path]
    lineage: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **params: Any):
        self._worker = type(self).isolated_worker  # its own: a later worker of the class holds other instances
        answer = self._request({"op": "new", "name": self.name, "params": dict(params)}, "its construction")
        config = answer.get("config") if isinstance(answer, dict) else None
        if not isinstance(config, dict) or not isinstance(answer.get("id"), int):
            raise WorkerFailure(f"mechanism {self.name!r}: its isolated worker sent a malformed instance")
        self._handle: int = answer["id"]
        self.config = dict(config)

    def _request(self, message: dict[str, Any], what: str, values: int = 0, state: bool = False,
                 timeout: float | None = None) -> Any:
        return self._worker.request(message, owner=self.name, what=what, state=state,
                                    timeout=timeout or call_timeout(values))

    def apply(self, images: torch.Tensor, *, generator: Streams, boxes: list[torch.Tensor] | None = None) -> torch.Tensor:
        """Applies the mechanism in its worker to a copy of the batch, with the same streams; returns its output here."""
        secure = _secure_count(generator)
        if secure is not None:
            streams: Any = {"secure": secure, "device": str(generator.device)}
        elif isinstance(generator, Streams) or hasattr(generator, "seeds"):
            streams = generator if isinstance(generator, Streams) else Streams(generator.seeds, generator.device)
        else:
            raise BenchError(f"mechanism {self.name!r} expects per-image Streams, got {type(generator).__name__}")
        device = images.device if isinstance(images, torch.Tensor) else torch.device("cpu")
        values = images.numel() if isinstance(images, torch.Tensor) else 0
        answer = self._request({"op": "apply", "id": self._handle, "images": images, "streams": streams,
                                "boxes": boxes, "device": str(device)},
                               f"apply on {len(images) if isinstance(images, torch.Tensor) else '?'} images",
                               values, state=True)
        if secure is not None and isinstance(answer, dict):
            tally = answer.get("tally") or {}
            generator.tally.laplace += int(tally.get("laplace", 0))
            generator.tally.normal += int(tally.get("normal", 0))
        if not isinstance(answer, dict):
            raise WorkerFailure(f"mechanism {self.name!r}: its isolated worker sent a malformed release")
        if "foreign" in answer:
            return type(str(answer["foreign"])[:100] or "object", (), {})()
        out = answer.get("out")
        if not isinstance(out, torch.Tensor):
            raise WorkerFailure(f"mechanism {self.name!r}: its isolated worker sent a malformed release")
        where = torch.device(str(answer.get("device", "cpu")))
        return out.to(where) if where.type != "cpu" else out

    def _remote_fit(self, public: Any, ctx: RunContext) -> None:
        images = public.images if isinstance(public.images, torch.Tensor) else public.images[:]
        data = {"images": images, "labels": public.labels, "attrs": dict(public.attrs),
                "attr_names": {k: list(v) for k, v in public.attr_names.items()}, "boxes": public.boxes,
                "cams": public.cams}
        context = {"device": str(ctx.device), "seed": int(ctx.seed), "profile": str(ctx.profile),
                   "options": {str(k): str(v) for k, v in dict(ctx.options).items()}, "eval_split": ctx.eval_split,
                   "benchmark": ctx.benchmark}
        self._request({"op": "fit", "id": self._handle, "data": data, "ctx": context},
                      f"fit on {len(public)} images", int(images.numel()), state=True)
        for line in self._worker.logs:
            ctx.log(line)

    def claim(self) -> PrivacyClaim | None:
        """Returns the claim the instance in the worker makes (rebuilt here from its fields)."""
        answer = self._request({"op": "claim", "id": self._handle}, "claim()")
        value = answer.get("value") if isinstance(answer, dict) else None
        if value is None:
            return None
        if "foreign" in value:
            return type(str(value["foreign"])[:100] or "object", (), {})()  # the check names what it returned
        fields = value.get("claim") or {}
        try:
            return PrivacyClaim(epsilon=float(fields["epsilon"]), delta=float(fields["delta"]), unit=str(fields["unit"]),
                                note=str(fields.get("note", "")), withheld=tuple(str(s) for s in fields.get("withheld", ())),
                                backed=bool(fields.get("backed", True)), method=str(fields.get("method", "")))
        except (KeyError, TypeError, ValueError):
            raise WorkerFailure(f"mechanism {self.name!r}: its isolated worker sent a malformed claim") from None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or "_handle" not in self.__dict__:
            raise AttributeError(name)
        answer = self._request({"op": "attr", "id": self._handle, "name": name}, f"reading .{name}")
        if isinstance(answer, dict) and answer.get("callable"):
            def method(*args: Any, **kwargs: Any) -> Any:
                values = sum(a.numel() for a in args if isinstance(a, torch.Tensor))
                found = self._request({"op": "call", "id": self._handle, "name": name, "args": list(args),
                                       "kwargs": kwargs}, f"{name}()", values, state=True)
                return found.get("value") if isinstance(found, dict) else None

            method.__name__ = name
            return method
        return answer.get("value") if isinstance(answer, dict) else None

    def __deepcopy__(self, memo: dict) -> IsolatedMechanism:
        twin = object.__new__(type(self))
        answer = self._request({"op": "copy", "id": self._handle}, "a copy")
        twin.__dict__.update(_worker=self._worker, _handle=int(answer["id"]), config=dict(self.config))
        return twin

    def __reduce__(self):
        raise TypeError(f"mechanism {self.name!r} runs in an isolated worker of this process and cannot be pickled")

    def __del__(self) -> None:
        handle, worker = self.__dict__.get("_handle"), self.__dict__.get("_worker")
        if handle is not None and worker is not None:
            worker.forget(handle)

    @classmethod
    def isolated_check(cls, check: str, params: Any, device: Any, shapes: Any) -> None:
        """Runs a conformance check inside the worker, on the real class.

        Raises:
            ConformanceError: The check failed (its message).
        """
        from bench.testing._mechanism_cases import ConformanceError

        if check not in WORKER_CHECKS:
            raise ValueError(f"conformance check {check!r} runs through the proxy, not in the worker")
        answer = cls.isolated_worker.request(
            {"op": "check", "check": check, "name": cls.name, "params": None if params is None else dict(params),
             "device": None if device is None else str(device),
             "shapes": None if shapes is None else [list(s) for s in shapes]},
            owner=cls.name, what=f"the conformance check {check}", timeout=CHECK_TIMEOUT_S, state=True)
        if isinstance(answer, dict) and answer.get("failure"):
            raise ConformanceError(str(answer["failure"]))


_LINKS: dict[tuple[str, ...], tuple[_Worker, dict[str, type]]] = {}
"""(mode, the files' SHA-256s) -> their worker and proxy classes (kept, and pointed at a new worker after a close)."""
_breaches: list[IsolationBreach] = []
_epoch = [0]
"""Counts :func:`refuse_on_breach` blocks (commands): a refused file's worker is restarted only in a later one."""
_TYPES = {"int": int, "float": float, "str": str, "bool": bool}
_sandbox_problem: list[str | None] = []


def _bwrap_problem() -> str | None:
    """:func:`bench.testing.isolation.bwrap_usable`, asked once per process."""
    if not _sandbox_problem:
        _sandbox_problem.append(bwrap_usable())
    return _sandbox_problem[0]


def load_isolated(paths: Sequence[str | Path], mode: str | None = None) -> dict[str, Any]:
    """Starts (or reuses) the worker of mechanism files and registers a proxy for each mechanism they declare.

    Args:
        paths: The ``--mechanism-file`` files.
        mode: ``bwrap``, ``process`` or ``auto`` (default: :func:`isolation_mode`; ``auto`` warns, on
            stderr, where it falls back to ``process``).

    Returns:
        What an entry records as ``isolation``: ``{"kind": "bwrap" | "process", ...}``.

    Raises:
        BenchError: A file is missing or fails to import, registers no mechanism or something else than
            mechanisms, or a name it registers is taken here; the worker cannot start; ``mode`` is ``bwrap``
            and the machine cannot sandbox.
    """
    from bench.core.registry import mechanisms

    files = [Path(p) for p in paths]
    for path in files:
        if not path.is_file():
            raise BenchError(f"no such file: {path}")
    mode = mode or isolation_mode()
    why = None
    if mode in ("auto", "bwrap"):
        why = _bwrap_problem()
        if why is not None and mode == "bwrap":
            raise BenchError(f"{ENV}=bwrap: {why}")
        mode = "process" if why is not None else "bwrap"
    if mode not in ("bwrap", "process"):
        raise BenchError(f"isolation {mode!r}: a worker runs under bwrap or as a process")
    key = (mode, *(hashlib.sha256(p.read_bytes()).hexdigest() for p in files))
    worker, classes = _LINKS.get(key, (None, {}))
    if worker is not None and worker.breach is not None and worker.epoch == _epoch[0]:
        raise worker.breach  # refused: not restarted for the rest of this command (a grid's next cell)
    if worker is None or worker.failure is not None or worker.breach is not None:
        if worker is not None:  # stopped earlier (refused in an earlier command, died, timed out, closed)
            with contextlib.suppress(BenchError):
                worker.close()
        if why is not None:
            print(f"[bench] warning: {why}; the mechanism runs in a separate process without a sandbox "
                  "(isolation: process)", file=sys.stderr, flush=True)
        worker = _Worker(files, mode)
        try:
            classes = _proxies(worker, classes)
        except BaseException:
            with contextlib.suppress(BenchError):
                worker.close()
            raise
        _LINKS[key] = (worker, classes)
    mechanisms.discover()
    for name, cls in classes.items():
        if name in mechanisms.list() and mechanisms.get(name) is cls:
            continue
        if name in mechanisms.list():
            raise BenchError(f"{worker.label}: mechanism {name!r} is already registered by "
                             f"{mechanisms.origin(name)}; a submitted file runs isolated and cannot share a name")
        mechanisms.register(name)(cls)
    return record(mode, why)


def registered_by(paths: Sequence[str | Path]) -> list[str]:
    """Returns the mechanisms the isolated worker of these files registers (none when it was not started)."""
    digests = tuple(hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths)
    for key, (_worker, classes) in _LINKS.items():
        if key[1:] == digests:
            return list(classes)
    return []


def record(mode: str, why: str | None = None) -> dict[str, Any]:
    """Returns what an entry records as ``isolation`` for a worker of ``mode``."""
    isolated = ("every call into the file's code, in one worker process: its import, its classes' construction, "
                "fit, apply and claim (the conformance checks, the audits, the gate's checks and every cell's "
                "release and adaptive adversaries)")
    not_isolated = ("what it reads or computes inside its sandbox (it may encode a readable file in its output); "
                    "the boards (build, show, serve) import an entry's carried file in their own process")
    if mode == "bwrap":
        return {"kind": "bwrap", "network": "none", "environment": "a few named variables",
                "filesystem": "read-only but a private folder in a fresh /tmp; home: watched canaries",
                "isolated": isolated, "not_isolated": not_isolated}
    return {"kind": "process", "reason": why or f"{ENV}=process", "network": "the machine's",
            "filesystem": "the machine's (an audit hook reports writes outside its folder); $HOME: watched canaries",
            "isolated": isolated, "not_isolated": not_isolated}


def _proxies(worker: _Worker, earlier: dict[str, type]) -> dict[str, type]:
    """Returns a proxy class per mechanism the worker's files registered (``earlier``'s, pointed at this worker)."""
    from bench.audit.conformance import _AUDIT_PARAMS, register_audit_params

    loaded = worker.loaded if isinstance(worker.loaded, dict) else {}
    if loaded.get("others"):
        raise BenchError(f"{worker.label}: a mechanism file runs isolated and may register mechanisms only; it "
                         f"registers {', '.join(map(str, loaded['others'][:3]))}")
    described = loaded.get("mechanisms")
    if not isinstance(described, dict) or not described:
        raise BenchError(f"--mechanism-file {worker.label} registers no mechanism")
    module_name = f"bench_isolated_{Path(worker.files[0]).stem}_{abs(hash(tuple(map(str, worker.files)))) % 10**8}"
    module = sys.modules.get(module_name) or types.ModuleType(module_name, f"The isolated proxies of {worker.label}")
    module.__file__ = str(worker.files[0])
    classes = {}
    for name, desc in described.items():
        name = str(name)
        attrs, class_name = _proxy_attributes(worker, name, desc, module_name)
        cls = earlier.get(name)
        if cls is None:
            cls = type(class_name, (IsolatedMechanism,), attrs)
        else:  # the same files in a new worker: the registered class serves on
            for attr, value in attrs.items():
                setattr(cls, attr, value)
            if "fit" not in attrs and "fit" in cls.__dict__:
                delattr(cls, "fit")
        classes[name] = cls
        setattr(module, cls.__qualname__.split(".")[-1], cls)
    sys.modules[module_name] = module
    for name, params in (loaded.get("audit_params") or {}).items():
        if name not in _AUDIT_PARAMS and isinstance(params, dict):
            register_audit_params(str(name), params)
    return classes


def _proxy_attributes(worker: _Worker, name: str, desc: Any, module: str) -> tuple[dict[str, Any], str]:
    try:
        if isinstance(desc["version"], bool) or not isinstance(desc["version"], int):
            raise TypeError(f"version {desc['version']!r}")
        params = ParamSpace(**{str(k): _param(v) for k, v in desc["params"].items()})
        attrs: dict[str, Any] = {
            "__module__": module, "__qualname__": str(desc["qualname"]), "__doc__": str(desc.get("doc") or ""),
            "version": desc["version"], "params": params, "uses_boxes": bool(desc["uses_boxes"]),
            "description": str(desc.get("description") or ""), "lineage": tuple(str(n) for n in desc["lineage"]),
            "isolated_worker": worker, "isolated_source": worker.files[0],
            "conformance_params": None if desc.get("conformance_params") is None else dict(desc["conformance_params"]),
        }
        if desc.get("has_fit"):
            attrs["fit"] = IsolatedMechanism._remote_fit
        return attrs, str(desc["class"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BenchError(f"{worker.label}: mechanism {name!r} declares what cannot be read in PrivBench's process "
                         f"({type(exc).__name__}: {exc})") from None


def _param(desc: dict[str, Any]) -> Param:
    kind = _TYPES.get(str(desc["type"]))
    if kind is None:
        raise TypeError(f"a parameter of type {desc['type']!r}")
    tune = desc.get("tune")
    return Param(kind, desc.get("default"), low=desc.get("low"), high=desc.get("high"),
                 low_open=bool(desc.get("low_open")), log=bool(desc.get("log")),
                 choices=None if desc.get("choices") is None else tuple(str(c) for c in desc["choices"]),
                 nullable=bool(desc.get("nullable")), tune=None if tune is None else (float(tune[0]), float(tune[1])),
                 help=str(desc.get("help") or ""))


def raise_breach() -> None:
    """Raises the first refusal of an isolated mechanism in this process not yet raised here, if any.

    Raises:
        IsolationBreach: A mechanism read the home, wrote outside its folder or used the network.
    """
    if _breaches:
        first = _breaches[0]
        _breaches.clear()
        raise first


@contextlib.contextmanager
def refuse_on_breach() -> Iterator[None]:
    """Makes a refusal of an isolated mechanism the block's one error, whatever error it surfaced as first.

    A check or a cell that met the refusal reports it as its own failure (a conformance
    check that crashed, a failed cell): the refusal is what the user must read.
    """
    _breaches.clear()
    _epoch[0] += 1
    try:
        yield
    except Exception:
        raise_breach()
        raise
    raise_breach()


def close_all() -> None:
    """Ends every worker of this process, looking at what each left (the proxies stay registered, unusable).

    Raises:
        IsolationBreach: A worker left what refuses its mechanism.
    """
    first = None
    for key, (worker, _classes) in list(_LINKS.items()):
        try:
            worker.close()
        except IsolationBreach as exc:
            first = first or exc
    if first is not None:
        raise first


def finish() -> None:
    """Ends every worker (:func:`close_all`), then raises the first refusal of this command (:func:`raise_breach`).

    Call it once the mechanism's work is done and before anything is recorded (an entry, a reproduction).

    Raises:
        IsolationBreach: A mechanism was refused, now or earlier in the command.
    """
    try:
        close_all()
    finally:
        raise_breach()


def _close_at_exit() -> None:
    for worker, _classes in list(_LINKS.values()):
        with contextlib.suppress(Exception):
            worker.close()


atexit.register(_close_at_exit)
