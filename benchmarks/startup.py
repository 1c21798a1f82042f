"""Start-up times of the commands that compute nothing, against issue 58's targets (part 4).

Issue 58 asks for ``bench leaderboard build`` on a fresh clone in at most 3 s, ``bench list``
in at most 1 s and a mistyped ``bench run`` answered in at most 1 s. Each command here runs
as a fresh clone runs it: in a fresh process, from the checkout's root, with no results
directory (``$BENCH_RESULTS`` names an empty folder), no entries folder of the user's and
no real data. It is timed twice over:

- **cold**: with an empty folder of derived answers (``$BENCH_DERIVED``, see
  :mod:`bench.storage.derived`), as the very first command after a clone or a code change;
- **warm**: after one untimed run of the same command has kept those answers, as every
  later command on the same code.

Each cell of the table is the median wall-clock time of ``--repeats`` runs (and their
median CPU time, user + system, which a busy machine inflates less); ``target`` is the
issue's bound on the warm time. What every run prints is compared with the first run's: a
kept answer must print what working it out prints. The CPU model, torch's
CPU capability and the machine's load are read in a separate process, before and after.

    python benchmarks/startup.py [--repeats 5] [--code DIR ...] [--compare REV] [--only NAME ...]
                                 [--mode cold|warm|both]

``--code DIR`` times another checkout (repeatable; default this one), ``--compare REV``
also times git revision REV (checked out into a temporary worktree), alternating with the
others run by run, so that before and after share the machine's moments.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_INHERITED = ("BENCH_RESULTS", "BENCH_ENTRIES", "BENCH_DATA", "BENCH_CACHE", "BENCH_DERIVED", "MLFLOW_TRACKING_URI",
                 "MPLCONFIGDIR")
"""Settings that would show a command another workload than a fresh clone's, or a warm cache."""


@dataclass(frozen=True)
class Command:
    """One command timed: its name in the table, its arguments, the exit status it must end with and its target."""

    name: str
    args: tuple[str, ...]
    status: int
    target_s: float | None


COMMANDS = (
    Command("leaderboard build", ("leaderboard", "build", "--out", "{scratch}/site"), 0, 3.0),
    Command("leaderboard show", ("leaderboard", "show"), 0, None),
    Command("list", ("list",), 0, 1.0),
    Command("run, mistyped mechanism", ("run", "--mechanism", "dp_pixx", "--task", "fewshot_synth_faces"), 2, 1.0),
    Command("run, mistyped task", ("run", "--mechanism", "dp_pix", "--task", "fewshot_synth_facez"), 2, 1.0),
)

MACHINE = r"""
import os, platform
model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
             platform.processor()) if os.path.exists("/proc/cpuinfo") else platform.processor()
import torch
print(f"{model}; torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}")
"""


@dataclass
class Timings:
    """The runs of one command with one checkout in one mode."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    same_output: bool = True


def run_once(code: Path, command: Command, scratch: Path, cache: Path) -> tuple[float, float, str]:
    """Runs a command once in a fresh process; returns (wall s, CPU s, what it printed on stdout and stderr).

    Raises:
        SystemExit: It ended with another exit status than the command's.
    """
    inherited = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    env = {**inherited, "MLFLOW_DISABLE_TELEMETRY": "true", "BENCH_DERIVED": str(cache),
           "MPLCONFIGDIR": str(scratch / "matplotlib"), "BENCH_RESULTS": str(scratch / "no-results"),
           "PYTHONPATH": os.pathsep.join(p for p in (str(code), os.environ.get("PYTHONPATH", "")) if p)}
    args = [a.format(scratch=scratch) for a in command.args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "bench", *args], cwd=code, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != command.status:
        last = (out.stderr.strip().splitlines() or ["no error output"])[-1]
        raise SystemExit(f"bench {' '.join(args)} ({code}) exited {out.returncode}, not {command.status}: {last}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, (out.stdout + out.stderr).replace(str(scratch), "SCRATCH")


def machine() -> str:
    """Returns the CPU model and torch's CPU capability, read in a process of their own."""
    out = subprocess.run([sys.executable, "-c", MACHINE], capture_output=True, text=True)
    return out.stdout.strip() or f"unknown ({(out.stderr.strip().splitlines() or ['?'])[-1]})"


def load() -> str:
    """Returns the cores this process may use and the load averages."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    one, five, fifteen = os.getloadavg()
    return f"{cores} cores, load average {one:.2f} {five:.2f} {fifteen:.2f}"


def worktree(rev: str, where: Path) -> Path:
    """Checks out ``rev`` into a detached worktree under ``where``; returns its path."""
    path = where / "compare"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), rev], check=True)
    return path


def measure(codes: dict[str, Path], commands: list[Command], repeats: int, scratch: Path,
            modes: tuple[str, ...] = ("cold", "warm")) -> dict[tuple, Timings]:
    """Times every command with every checkout in each mode, alternating checkouts run by run."""
    found: dict[tuple, Timings] = {}
    reference: dict[tuple, str] = {}
    folders = {label: scratch / f"code{i}" for i, label in enumerate(codes)}
    for command in commands:
        for label, code in codes.items():  # the warm caches, kept by one untimed run each
            run_once(code, command, folders[label], folders[label] / "warm-cache")
        for i in range(repeats):
            for label, code in codes.items():
                for mode in modes:
                    cache = folders[label] / ("warm-cache" if mode == "warm" else f"cold-cache-{i}")
                    wall, cpu, printed = run_once(code, command, folders[label], cache)
                    if mode == "cold":
                        shutil.rmtree(cache, ignore_errors=True)
                    timings = found.setdefault((label, command.name, mode), Timings())
                    timings.wall.append(wall)
                    timings.cpu.append(cpu)
                    timings.same_output &= printed == reference.setdefault((label, command.name), printed)
    return found


def table(codes: dict[str, Path], commands: list[Command], found: dict[tuple, Timings]) -> str:
    """Returns the timings as a Markdown table."""
    lines = ["| command | checkout | cold s (cpu s) | warm s (cpu s) | target s | warm within | output |",
             "|---|---|---|---|---|---|---|"]

    def shown(timings: Timings | None) -> str:
        if timings is None:
            return "—"
        return f"{statistics.median(timings.wall):.2f} ({statistics.median(timings.cpu):.2f})"

    for command in commands:
        for label in codes:
            cold, warm = found.get((label, command.name, "cold")), found.get((label, command.name, "warm"))
            within = "—"
            if command.target_s is not None and warm is not None:
                within = "yes" if statistics.median(warm.wall) <= command.target_s else "no"
            same = "same" if all(t.same_output for t in (cold, warm) if t is not None) else "DIFFERS"
            lines.append(f"| bench {command.name} | {label} | {shown(cold)} | {shown(warm)} | "
                         f"{'—' if command.target_s is None else f'{command.target_s:g}'} | {within} | {same} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per command, checkout and mode (default 5)")
    parser.add_argument("--code", type=Path, action="append", default=None,
                        help="a checkout to time (repeatable; default this one)")
    parser.add_argument("--compare", default=None, metavar="REV", help="also time git revision REV (a worktree)")
    parser.add_argument("--mode", choices=("cold", "warm", "both"), default="both",
                        help="time the first command on this code (cold), the next ones (warm) or both (default)")
    parser.add_argument("--only", action="append", default=None, choices=[c.name for c in COMMANDS],
                        metavar="NAME", help="time only this command (repeatable): " + ", ".join(c.name for c in COMMANDS))
    args = parser.parse_args()
    commands = [c for c in COMMANDS if args.only is None or c.name in args.only]
    print(f"machine: {machine()}")
    print(f"before: {load()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        scratch = Path(tmp)
        codes = {str(p): p.resolve() for p in (args.code or [ROOT])}
        try:
            if args.compare:
                codes[args.compare] = worktree(args.compare, scratch)
            modes = ("cold", "warm") if args.mode == "both" else (args.mode,)
            found = measure(codes, commands, args.repeats, scratch, modes)
        finally:
            if args.compare:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(scratch / "compare")],
                               check=False)
    print(f"after: {load()}")
    print(f"median of {args.repeats} runs each, in fresh processes\n")
    print(table(codes, commands, found))


if __name__ == "__main__":
    main()
