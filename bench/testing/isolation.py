"""A submitted mechanism file checked in a sandbox (bubblewrap) before it runs in PrivBench's process.

:func:`sandbox_probe` runs :mod:`bench.testing.isolation_probe` (the file imported, the
conformance checks but the audit, the checks at each benchmark's size, one release batch
per benchmark and configuration) under ``bwrap``:

- no network (``--unshare-all``: network, IPC, PID, UTS, cgroup and user namespaces);
- the whole filesystem read-only (the repository, the virtual environment, the results);
- ``/tmp`` a fresh folder of the host's, holding the mechanism's private writable folder
  ``/tmp/mech`` (its working directory and ``TMPDIR``; the file is copied there);
- the user's home (``$HOME`` and the account's home) a folder of canary files the host
  watches with inotify.

A mechanism that opens anything in the home, or leaves anything in ``/tmp`` outside its
folder or in the home, is refused; one that writes elsewhere gets a read-only file system
error, which fails the probe. What is not isolated: after the probe passes the file is
imported into PrivBench's own process and the cells, the audits and the release checks
run it there, unsandboxed (a mechanism that behaves differently when it sees a sandbox is
not caught). Where ``bwrap`` is missing or cannot create namespaces the probe is skipped
with one warning line and the entry records ``isolation: none``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import pwd
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from bench.errors import BenchError
from bench.testing.sized import SizedTarget

__all__ = ["CANARIES", "SANDBOX_TIMEOUT_S", "bwrap_usable", "sandbox_probe"]

SANDBOX_TIMEOUT_S = 1800
"""Longest the sandboxed probe may run."""

CANARIES = (".bashrc", ".netrc", ".ssh/id_ed25519", ".config/bench/token")
"""Files the sandbox's home holds, so that reading the usual secrets is an event to see."""

_IN_ACCESS, _IN_MODIFY, _IN_OPEN, _IN_CREATE, _IN_MOVED_TO = 0x1, 0x2, 0x20, 0x100, 0x80
_DENIED = ("Errno", "Read-only file system", "Permission denied", "Network is unreachable", "crashed with OSError",
           "crashed with PermissionError")
"""Failures in the sandbox that are the sandbox refusing something (a write, a connection), not a check failing."""
_ENV_DIRS = ("TMPDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "MPLCONFIGDIR", "TORCH_HOME", "TORCHINDUCTOR_CACHE_DIR",
             "TRITON_CACHE_DIR", "HF_HOME")


def bwrap_usable() -> str | None:
    """Returns why ``bwrap`` cannot sandbox here (missing, or no namespaces), or None when it can."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "bwrap (Debian package bubblewrap) is not installed"
    done = subprocess.run([exe, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
                          capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        return f"bwrap cannot create a sandbox here: {' '.join(done.stderr.split()) or f'exit {done.returncode}'}"
    return None


class _Watch:
    """inotify watches on a folder tree: which paths were opened, read or written (None where inotify is missing)."""

    def __init__(self, root: Path):
        self.fd, self.paths = -1, {}
        name = ctypes.util.find_library("c")
        if not name:
            return
        self.libc = ctypes.CDLL(name, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK)
        mask = _IN_ACCESS | _IN_MODIFY | _IN_OPEN | _IN_CREATE | _IN_MOVED_TO
        for folder in [root, *sorted(p for p in root.rglob("*") if p.is_dir())]:
            wd = self.libc.inotify_add_watch(self.fd, str(folder).encode(), mask)
            if wd >= 0:
                self.paths[wd] = folder

    def events(self) -> list[str]:
        """Returns the paths touched since the watch began (a folder itself when it was listed)."""
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
        os.close(self.fd)
        self.fd = -1
        return found


def _homes() -> list[str]:
    """Returns the user's home folders as a mechanism could find them: ``$HOME`` and the account's."""
    found = [os.environ.get("HOME", ""), pwd.getpwuid(os.getuid()).pw_dir]
    return [h for h in dict.fromkeys(os.path.realpath(h) for h in found if h) if h != "/"]


def _kept_inside(home: str) -> list[str]:
    """Returns the folders the sandboxed Python needs that lie inside ``home`` (shown read-only over the canaries)."""
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


def _command(root: Path, homes: list[str], spec: Path) -> list[str]:
    tmp, mech = root / "tmp", "/tmp/mech"
    cmd = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent",
           "--new-session", "--bind", str(tmp), "/tmp"]
    for kept in _kept_inside("/tmp"):  # the interpreter, its venv or PrivBench itself under /tmp (a clone there)
        cmd += ["--ro-bind", kept, kept]
    for home in homes:  # a home inside /tmp (inside such a clone, say): its watched copy on top again
        if home.startswith("/tmp/"):
            cmd += ["--bind", str(tmp / Path(home).relative_to("/tmp")), home]
    for home in homes:
        if home.startswith("/tmp/") or home == "/tmp":
            continue  # already replaced by the sandbox's own /tmp
        cmd += ["--bind", str(root / "home"), home]
        for kept in _kept_inside(home):  # the interpreter or PrivBench itself installed in the home (pyenv)
            cmd += ["--ro-bind", kept, kept]
    cmd += ["--chdir", mech, "--setenv", "HOME", homes[0] if homes else "/tmp/home"]
    for var in _ENV_DIRS:
        cmd += ["--setenv", var, mech]
    return cmd + ["--", sys.executable, "-I", "-B", "-m", "bench.testing.isolation_probe", str(spec)]


def _leftovers(tmp: Path, homes: list[str]) -> list[str]:
    """Returns what the sandboxed process left in its /tmp outside its own folder (and a home there, watched apart)."""
    skip = {"mech", *(Path(h).relative_to("/tmp").parts[0] for h in homes if h.startswith("/tmp/"))}
    return sorted(f"/tmp/{p.relative_to(tmp)}" for p in tmp.rglob("*")
                  if p.relative_to(tmp).parts[0] not in skip and not p.is_dir())


def sandbox_probe(files: Sequence[Path], mechanism: str, targets: Sequence[tuple[SizedTarget, torch.Tensor]],
                  params: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """Runs a mechanism file's checks in a bwrap sandbox; returns what the entry records as ``isolation``.

    Args:
        files: The ``--mechanism-file`` files (copied into the sandbox's private folder).
        mechanism: The mechanism they register.
        targets: Each benchmark's shape and a batch of its clean images (released once per configuration).
        params: The declared configurations (default: the mechanism's conformance parameters).

    Returns:
        ``{"kind": "bwrap", ...}`` with what ran inside, or ``{"kind": "none", "reason": ...}``
        (after one warning line on stderr) where bwrap is missing or cannot sandbox.

    Raises:
        BenchError: The mechanism read the home, wrote outside its folder, or failed a check in the sandbox.
    """
    why = bwrap_usable()
    if why is not None:
        print(f"[bench] submit: warning: {why}; the mechanism file runs without isolation (isolation: none)",
              file=sys.stderr, flush=True)
        return {"kind": "none", "reason": why}
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as work:
        root = Path(work)
        mech, home = root / "tmp" / "mech", root / "home"
        mech.mkdir(parents=True)
        for kept in _kept_inside("/tmp"):  # their mount points in the sandbox's /tmp
            (root / "tmp" / os.path.relpath(kept, "/tmp")).mkdir(parents=True, exist_ok=True)
        homes = _homes()
        _plant(home, homes)
        for h in homes:  # a home inside /tmp lives inside the sandbox's /tmp
            if h.startswith("/tmp/"):
                shutil.copytree(home, root / "tmp" / Path(h).relative_to("/tmp"), dirs_exist_ok=True)
        copied = []
        for k, path in enumerate(files):
            target = mech / f"{k}_{Path(path).name}"
            shutil.copyfile(path, target)
            copied.append(f"/tmp/mech/{target.name}")
        shown = []
        for k, (target, images) in enumerate(targets):
            torch.save(images.contiguous().clone(), mech / f"images{k}.pt")
            shown.append({"target": asdict(target), "images": f"/tmp/mech/images{k}.pt"})
        spec = mech / "spec.json"
        spec.write_text(json.dumps({"files": copied, "mechanism": mechanism, "targets": shown,
                                    "params": [dict(p) for p in params]}, default=str), encoding="utf-8")
        watches = [_Watch(home)] + [_Watch(root / "tmp" / Path(h).relative_to("/tmp"))
                                    for h in homes if h.startswith("/tmp/")]
        done = subprocess.run(_command(root, homes, Path("/tmp/mech/spec.json")), capture_output=True, text=True,
                              timeout=SANDBOX_TIMEOUT_S, check=False)
        touched = [e for w in watches for e in w.events()]
        left = _leftovers(root / "tmp", homes)
    if touched:
        raise BenchError(f"submit {mechanism}: isolation: the mechanism read or wrote the user's home in the sandbox "
                         f"(first: {touched[0].replace(str(home), homes[0] if homes else '~')}); refused")
    if left:
        raise BenchError(f"submit {mechanism}: isolation: the mechanism wrote outside its private folder in the "
                         f"sandbox (first: {left[0]}); refused")
    result = _result(done)
    if result is None:
        tail = " ".join((done.stderr or "").strip().splitlines()[-1:]) or f"exit {done.returncode}"
        raise BenchError(f"submit {mechanism}: isolation: the sandboxed checks did not finish ({tail})")
    denied = [f for f in result["failures"] if any(k in f for k in _DENIED)]
    if denied:  # other failures are the conformance suite's to report, in full, once the file is loaded
        first = " ".join(str(denied[0]).split())
        raise BenchError(f"submit {mechanism}: isolation: in the sandbox, {first}"
                         + (f" (and {len(denied) - 1} more)" if len(denied) > 1 else ""))
    return {"kind": "bwrap", "network": "none", "filesystem": "read-only but a private /tmp/mech; home: watched canaries",
            "isolated": "the file's import, the conformance checks but the audit, and their batch checks and one "
                        "release batch at the probe's sizes",
            "not_isolated": "the cells, the audits, the checks at each benchmark's size and the release checks "
                            "(in PrivBench's process)"}


def _result(done: subprocess.CompletedProcess) -> dict[str, Any] | None:
    for line in reversed((done.stdout or "").strip().splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict) and "failures" in found:
            return found
    return None
