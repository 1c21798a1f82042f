"""``bench ui``: the MLflow UI on a results directory, opened on its runs (the classic ML view)."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Iterator

from bench.cli.common import add_location_args, cannot_listen, check_locations, check_port

READY_TIMEOUT_S = 300.0
"""How long the server may take to answer before its address is printed anyway (with a note)."""
SLOW_S = 5.0
"""After this long without an answer, a line on stderr says the server is still starting."""
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
"""Signals that stop ``bench ui`` and, with it, the server and every process the server started."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench ui``."""
    p = subparsers.add_parser("ui", help="serve the MLflow UI for a results directory on 127.0.0.1",
                              description="Starts MLflow's server on loopback for RESULTS_DIR's store and, once it "
                                          "answers, prints the address of its runs table (the 'Model training' "
                                          "view). A copied or moved "
                                          "results directory is relocated first, so its runs' artifacts are read "
                                          "from it. Ctrl-C stops the server.")
    p.add_argument("--port", type=int, default=5000, help="port on 127.0.0.1 (default 5000)")
    add_location_args(p)
    p.set_defaults(func=ui)


def ui_url(port: int, experiment_id: str) -> str:
    """Returns the address of an experiment's runs table in MLflow 3's classic ML view."""
    return f"http://127.0.0.1:{port}/#/experiments/{experiment_id}?workflowType=machine_learning"


def check_free(port: int) -> None:
    """Checks that a server can listen on 127.0.0.1:port, by binding it for a moment.

    Raises:
        BenchError: Another program listens there, or the port is reserved.
    """
    import socket

    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: TIME_WAIT is no obstacle
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise cannot_listen(port, exc) from None


def ui(args: argparse.Namespace) -> int:
    """Checks the port, relocates a moved store, starts the server and waits for it.

    The server and everything it starts run in a process group of their own, which
    ``bench ui`` takes down on Ctrl-C, SIGTERM or SIGHUP, and when the server stops by itself.

    Returns:
        0 once Ctrl-C (or SIGTERM, SIGHUP) stopped the server; 1 when it stopped by itself (its log says why).
    """
    from bench.storage.tracking import Tracker
    from bench.storage.tracking.relocate import relocate

    check_port(args.port)
    check_locations(args, writing=False)
    tracker = Tracker(args.results_dir, args.tracking_uri, create=False)
    check_free(args.port)
    if tracker.uri == f"sqlite:///{(args.results_dir.resolve() / 'mlflow.db')}":
        old, changed = relocate(args.results_dir)
        if old is not None:
            print(f"[bench] {args.results_dir} was moved: {changed} artifact location(s) now point here (were {old})",
                  file=sys.stderr)
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracker.uri,
               "--host", "127.0.0.1", "--port", str(args.port),
               "--workers", "1"]  # one user on loopback: no supervisor restarting workers slow to start
    url = ui_url(args.port, tracker.experiment_id)
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    server = group = None
    with stopped_by_signals():
        try:
            # Its log on stderr (stdout is the address); its own process group (uvicorn and whatever
            # else MLflow starts join it), taken down as one.
            server = subprocess.Popen(command, env=env, stdout=_stderr(), start_new_session=True)
            group = getattr(server, "pid", None)
            ready = wait_until_serving(args.port, server, on_slow=lambda: print(
                f"[bench] MLflow's server on 127.0.0.1:{args.port} is starting; its address follows once it answers",
                file=sys.stderr, flush=True))
            if ready is not None:
                note = "" if ready else f" (not answering after {READY_TIMEOUT_S:.0f} s yet; it may still be starting)"
                print(f"MLflow UI for {args.results_dir}: {url}{note}", flush=True)
            status = server.wait()
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM/SIGHUP (stopped_by_signals)
            if server is not None:
                stop(server, group)
            return 0
        except BaseException:
            if server is not None:
                stop(server, group)
            raise
        stop(server, group)  # the server is gone: what it started must not keep the port
    print(f"bench: error: the MLflow server stopped by itself (exit status {status}; its log is above)",
          file=sys.stderr)
    return 1


@contextlib.contextmanager
def stopped_by_signals() -> Iterator[None]:
    """Turns SIGINT, SIGTERM and SIGHUP into ``KeyboardInterrupt`` inside the block, then restores the handlers.

    The server runs in a process group of its own (it must not take the terminal's Ctrl-C
    before ``bench ui`` can stop it cleanly), so these signals reach ``bench ui`` alone, and
    it is ``bench ui`` that takes the group down (:func:`stop`). Outside the main thread,
    where Python cannot set handlers, nothing changes.
    """

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    with _stop_signals_handled_by(interrupt):
        yield


def wait_until_serving(port: int, server: subprocess.Popen, timeout: float = READY_TIMEOUT_S,
                       on_slow: Callable[[], None] = lambda: None) -> bool | None:
    """Waits until the server answers on 127.0.0.1:port (MLflow's ``/health``).

    Args:
        port: Where it listens.
        server: Its process.
        timeout: Seconds to wait at most.
        on_slow: Called once when it has not answered within :data:`SLOW_S` seconds.

    Returns:
        True once it answers; False when ``timeout`` passed first; None when it exited first.
    """
    import urllib.error
    import urllib.request

    started = time.monotonic()
    slow = False
    while time.monotonic() < started + timeout:
        if not slow and time.monotonic() > started + SLOW_S:
            slow = True
            on_slow()
        if server.poll() is not None:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return True
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(0.25)
    return False


def _stderr() -> int | None:
    """Returns the file descriptor of stderr, or None (inherit stdout) where it has none."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def stop(server: subprocess.Popen, group: int | None = None, grace_s: float = 30.0) -> None:
    """Stops the server and every process in its process group: terminated, then killed after ``grace_s``.

    Further stop signals are ignored meanwhile, so a second Ctrl-C cannot leave the group half stopped.

    Args:
        server: The server process.
        group: Its process group (it leads one of its own), or None to stop the process alone.
        grace_s: Seconds the processes get to exit after SIGTERM before SIGKILL.
    """
    with _ignoring_stop_signals():
        _signal(server, group, signal.SIGTERM)
        try:
            server.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _signal(server, group, signal.SIGKILL)
            server.wait()
        if group is None:
            return
        deadline = time.monotonic() + min(grace_s, 5.0)
        while _group_alive(group) and time.monotonic() < deadline:  # children outliving the server
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)


def _signal(server: subprocess.Popen, group: int | None, signum: int) -> None:
    """Sends a signal to the server's group, or to the server alone."""
    if group is None:
        server.kill() if signum == signal.SIGKILL else server.terminate()
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


def _group_alive(group: int) -> bool:
    """Whether any process of a process group is still there."""
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


@contextlib.contextmanager
def _ignoring_stop_signals() -> Iterator[None]:
    with _stop_signals_handled_by(signal.SIG_IGN):
        yield


@contextlib.contextmanager
def _stop_signals_handled_by(handler: Any) -> Iterator[None]:
    """Sets ``handler`` for SIGINT, SIGTERM and SIGHUP inside the block, then restores theirs (main thread only)."""
    previous = {}
    for name in STOP_SIGNALS:
        number = getattr(signal, name, None)
        if number is None:
            continue
        try:
            previous[number] = signal.signal(number, handler)
        except ValueError:  # not the main thread
            break
    try:
        yield
    finally:
        for number, before in previous.items():
            signal.signal(number, before)
