"""The sandbox an isolated mechanism's worker runs in (bubblewrap), and what it watches.

:class:`Sandbox` prepares, for one worker process of :mod:`bench.testing.isolated`:

- with ``bwrap`` (Debian package bubblewrap): no network (``--unshare-all``: network, IPC,
  PID, UTS, cgroup and user namespaces); the whole filesystem read-only (the repository, the
  virtual environment, the results); ``/tmp`` a fresh folder of the host's holding the
  mechanism's private writable folder (its working directory and ``TMPDIR``, where its file
  is copied); the user's home (``$HOME`` and the account's home) a folder of canary files the
  host watches with inotify; an environment of a few named variables (no tokens, no paths of
  the caller's);
- without it (``process``): the same private folder, canary home (``$HOME``) and environment,
  in a plain child process: nothing stops a write or a connection, only the worker's audit
  hook (:mod:`bench.testing.isolation_worker`) reports those it sees.

:meth:`Sandbox.findings` says what the worker did that refuses it: a canary home opened, read,
listed or written, or (with bwrap) anything left in its ``/tmp`` outside its folder.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import pwd
import secrets
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["CANARIES", "ENV_PASSED", "Sandbox", "bwrap_usable"]

CANARIES = (".bashrc", ".netrc", ".ssh/id_ed25519", ".config/bench/token")
"""Files the sandbox's home holds, so that reading the usual secrets is an event to see."""
ENV_PASSED = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "LD_LIBRARY_PATH", "GLIBC_TUNABLES", "BENCH_COMPILE",
              "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
              "CUBLAS_WORKSPACE_CONFIG", "CC", "CXX")
"""The caller's environment variables a worker sees (the others, tokens among them, it does not)."""

_IN_ACCESS, _IN_MODIFY, _IN_OPEN, _IN_CREATE, _IN_MOVED_TO = 0x1, 0x2, 0x20, 0x100, 0x80
_ENV_DIRS = ("TMPDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "MPLCONFIGDIR", "TORCH_HOME", "TORCHINDUCTOR_CACHE_DIR",
             "TRITON_CACHE_DIR", "HF_HOME", "CUDA_CACHE_PATH", "NUMBA_CACHE_DIR", "PYTORCH_KERNEL_CACHE_PATH")
"""Variables that point the libraries' caches and configuration into the private folder."""


def bwrap_usable() -> str | None:
    """Returns why ``bwrap`` cannot sandbox here (missing, or no namespaces), or None when it can."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "bwrap (Debian package bubblewrap) is not installed"
    try:
        done = subprocess.run([exe, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap cannot run here: {exc}"
    if done.returncode != 0:
        return f"bwrap cannot create a sandbox here: {' '.join(done.stderr.split()) or f'exit {done.returncode}'}"
    return None


class _Watch:
    """inotify watches on a folder tree: which paths were opened, read or written (none where inotify is missing)."""

    def __init__(self, root: Path):
        self.fd, self.paths = -1, {}
        name = ctypes.util.find_library("c")
        if not name:
            return
        self.libc = ctypes.CDLL(name, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        mask = _IN_ACCESS | _IN_MODIFY | _IN_OPEN | _IN_CREATE | _IN_MOVED_TO
        for folder in [root, *sorted(p for p in root.rglob("*") if p.is_dir())]:
            wd = self.libc.inotify_add_watch(self.fd, str(folder).encode(), mask)
            if wd >= 0:
                self.paths[wd] = folder

    def events(self) -> list[str]:
        """Returns the paths touched since the last call (a folder itself when it was listed)."""
        if self.fd < 0:
            return []
        found, buffer = [], ctypes.create_string_buffer(1 << 16)
        while True:
            size = self.libc.read(self.fd, buffer, len(buffer))
            if size <= 0:
                break
            raw, at = buffer.raw[:size], 0
            while at < size:
                wd, _mask, _cookie, length = struct.unpack_from("iIII", raw, at)
                leaf = raw[at + 16: at + 16 + length].rstrip(b"\0").decode(errors="replace")
                found.append(str(self.paths.get(wd, Path("?")) / leaf) if leaf else str(self.paths.get(wd, "?")))
                at += 16 + length
        return found

    def close(self) -> None:
        """Stops watching."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _homes() -> list[str]:
    """Returns the user's home folders as a mechanism could find them: ``$HOME`` and the account's."""
    found = [os.environ.get("HOME", ""), pwd.getpwuid(os.getuid()).pw_dir]
    return [h for h in dict.fromkeys(os.path.realpath(h) for h in found if h) if h != "/"]


def _kept_inside(home: str) -> list[str]:
    """Returns the folders the worker's Python needs that lie inside ``home`` (shown read-only over the canaries)."""
    source = Path(__file__).resolve().parents[2]  # the folder holding PrivBench's packages
    needed = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, os.path.dirname(sys.executable), source)}
    return sorted(p for p in needed if p.startswith(home.rstrip("/") + "/"))


def _plant(home: Path, homes: list[str]) -> None:
    for real in homes:  # mount points of what stays visible inside a home, made before the watch starts
        for kept in _kept_inside(real):
            (home / os.path.relpath(kept, real)).mkdir(parents=True, exist_ok=True)
    for rel in CANARIES:
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("canary: a benchmark mechanism has no business reading this\n", encoding="utf-8")


class Sandbox:
    """The folders, command and watches of one worker process.

    Args:
        mode: ``bwrap`` (a bubblewrap sandbox) or ``process`` (a plain child process).
    """

    def __init__(self, mode: str):
        self.mode = mode
        self.root = Path(tempfile.mkdtemp(prefix="bench-isolated-"))
        self.homes = _homes()
        self.home = self.root / "home"
        name = f"bench-{secrets.token_hex(4)}"  # an ordinary temporary folder's name, no sign of a probe
        if mode == "bwrap":
            self.tmp = self.root / "tmp"
            self.private = self.tmp / name
            self.inside = f"/tmp/{name}"
        else:
            self.tmp = None
            self.private = self.root / name
            self.inside = str(self.private)
        self.private.mkdir(parents=True)
        _plant(self.home, self.homes if mode == "bwrap" else [])
        self._planted: set[Path] = set()
        if self.tmp is not None:
            for kept in _kept_inside("/tmp"):  # their mount points in the sandbox's /tmp
                (self.tmp / os.path.relpath(kept, "/tmp")).mkdir(parents=True, exist_ok=True)
            for h in self.homes:  # a home inside /tmp lives inside the sandbox's /tmp
                if h.startswith("/tmp/"):
                    shutil.copytree(self.home, self.tmp / Path(h).relative_to("/tmp"), dirs_exist_ok=True)
            self._planted = set(self.tmp.rglob("*"))
        watched = [self.home] + [self.tmp / Path(h).relative_to("/tmp") for h in self.homes
                                 if self.tmp is not None and h.startswith("/tmp/")]
        self._watches = [_Watch(w) for w in watched]

    def command(self, argv: list[str]) -> list[str]:
        """Returns the command that runs ``argv`` (a Python program of PrivBench's) in the sandbox."""
        env = self.environment()
        if self.mode != "bwrap":
            return list(argv)
        assert self.tmp is not None
        cmd = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all",
               "--die-with-parent", "--new-session", "--bind", str(self.tmp), "/tmp"]
        for device in sorted(Path("/dev").glob("nvidia*")):  # an accelerator the cells run on
            cmd += ["--dev-bind", str(device), str(device)]
        for kept in _kept_inside("/tmp"):  # the interpreter, its venv or PrivBench itself under /tmp (a clone there)
            cmd += ["--ro-bind", kept, kept]
        for home in self.homes:  # a home inside /tmp (inside such a clone, say): its watched copy on top again
            if home.startswith("/tmp/"):
                cmd += ["--bind", str(self.tmp / Path(home).relative_to("/tmp")), home]
        for home in self.homes:
            if home.startswith("/tmp/") or home == "/tmp":
                continue  # already replaced by the sandbox's own /tmp
            cmd += ["--bind", str(self.home), home]
            for kept in _kept_inside(home):  # the interpreter or PrivBench itself installed in the home (pyenv)
                cmd += ["--ro-bind", kept, kept]
        cmd += ["--chdir", self.inside, "--clearenv"]
        for key, value in env.items():
            cmd += ["--setenv", key, value]
        return cmd + ["--", *argv]

    def environment(self) -> dict[str, str]:
        """Returns the worker's environment: :data:`ENV_PASSED`, a home, the private folder for temporary files and caches."""
        env = {k: os.environ[k] for k in ENV_PASSED if k in os.environ}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        if self.mode == "bwrap":
            env["HOME"] = self.homes[0] if self.homes else "/tmp/home"
            env["BENCH_WORKER_HOMES"] = json.dumps(self.homes)
            env["BENCH_WORKER_KEPT"] = json.dumps([k for h in self.homes for k in _kept_inside(h)])
        else:
            env["HOME"] = str(self.home)
            env["BENCH_WORKER_HOMES"] = json.dumps([str(self.home), *self.homes])
            env["BENCH_WORKER_KEPT"] = json.dumps([k for h in self.homes for k in _kept_inside(h)])
            env["BENCH_WORKER_PARENT"] = str(os.getpid())
        for var in _ENV_DIRS:
            env[var] = self.inside
        return env

    def findings(self) -> tuple[list[str], list[str]]:
        """Returns what the worker did since the last call: home paths touched, and files left outside its folder."""
        touched = [self._shown(e) for w in self._watches for e in w.events()]
        return touched, self._leftovers()

    def _shown(self, path: str) -> str:
        """A canary path as the worker saw it (``~/.netrc``)."""
        for base in [self.home] + ([self.tmp] if self.tmp is not None else []):
            if path.startswith(str(base)):
                rest = path[len(str(base)):]
                if base == self.home:
                    return "~" + rest
                inside = "/tmp" + rest
                for home in self.homes:  # a home that lives under /tmp is watched in the sandbox's own /tmp
                    if inside == home or inside.startswith(home.rstrip("/") + "/"):
                        return "~" + inside[len(home.rstrip("/")):]
                return inside
        return path

    def _leftovers(self) -> list[str]:
        """Files and folders in the sandbox's /tmp that were not there at the start, outside the private folder.

        A home inside /tmp is not walked: its watch sees what is made there, and a walk would be an event of its own.
        """
        if self.tmp is None:
            return []
        skip = {self.private, *(self.tmp / Path(h).relative_to("/tmp") for h in self.homes if h.startswith("/tmp/"))}
        found, folders = [], [self.tmp]
        while folders:
            for entry in os.scandir(folders.pop()):
                path = Path(entry.path)
                if path in skip:
                    continue
                if path not in self._planted:
                    found.append(f"/tmp/{path.relative_to(self.tmp)}")
                elif entry.is_dir(follow_symlinks=False):
                    folders.append(path)
        return sorted(found)

    def close(self) -> None:
        """Stops the watches and removes the sandbox's folders."""
        for watch in self._watches:
            watch.close()
        shutil.rmtree(self.root, ignore_errors=True)
