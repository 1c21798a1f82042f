"""The README's main job, cold: its cell's seconds stage by stage, against issue 15's budget.

Issue 15 (item 3) asks for the main job's cell in at most 60 s on 2 cores, measured cold,
"if adaptive adversaries have been added to it by then, the budget is theirs plus 60 s".
Each run here starts as a fresh clone does: a new results directory (holding the data,
release and model caches) and a new TorchInductor cache, in a fresh process. The cell's
``runtime_s`` and ``stage_seconds`` are read from its result; the budget is 60 s plus the
stages of the adaptive adversaries (:data:`ADAPTIVE`).

    python benchmarks/main_job.py [--repeats 1] [--compare REV] [--profile quick] [--precision fp32,bf16]
                                  [--devices cpu,cuda]

With ``--compare REV`` the code at git revision REV (checked out into a temporary
worktree) runs too, at fp32, alternating with this checkout's, so that before and after
are timed on one machine in one session: the ratio of their median cell times is printed,
and whether their metrics are identical (each one that differs is listed with both
values). A revision whose results predate ``stage_seconds`` shows its total only.
``--precision`` lists the precisions this checkout runs at (:mod:`bench.system.precision`), each
timed the same way; bf16 computes other numbers, so its metrics are compared with fp32's
only to say that they differ.
``--devices`` lists the devices each precision runs on (``bench run --device``; by default
none is named and ``bench run`` picks, as the README's job does): ``--devices cpu,cuda`` on
a GPU machine times the quick cell on the GPU against the same cell on its CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAIN_JOB = ["--mechanism", "dp_pix", "--task", "fewshot_synth_faces", "--param", "epsilon=3", "--param", "block=4"]
"""The README's main job, less its profile."""
ADAPTIVE = ("attack.face_reid_adapted", "attack.denoise")
"""Stages of the adversaries that adapt to the mechanism (they train on its outputs)."""
BUDGET_S = 60.0
STAGES = ("data", "release", "task")
NOT_INHERITED = ("MLFLOW_TRACKING_URI", "BENCH_RESULTS", "BENCH_CACHE")
"""Settings that would send the cold run's results or caches somewhere warm."""
METRICS = ("utility", "attacks", "privacy", "privacy_score")
"""The parts of a result that must not change with speed."""


def run_cold(code: Path, profile: str, scratch: Path, precision: str = "fp32", device: str = "") -> dict:
    """Runs the main job cold with the code under ``code``; returns its result as a dict.

    Args:
        code: A checkout whose ``bench`` package runs the job (it is the working directory,
            so ``python -m bench`` imports its code).
        profile: The profile to run.
        scratch: An empty folder for the results, the caches and the compile cache.
        precision: ``fp32`` (the job as the README runs it; code that predates
            ``--precision`` runs it too) or ``bf16``.
        device: ``cpu``, ``cuda`` (``bench run --device``), or "" for the default choice.
    """
    inherited = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    env = {**inherited, "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor"), "MLFLOW_DISABLE_TELEMETRY": "true",
           "MPLCONFIGDIR": str(scratch / "matplotlib"),
           "PYTHONPATH": os.pathsep.join(p for p in (str(code), os.environ.get("PYTHONPATH", "")) if p)}
    results = scratch / "results"
    mixed = [] if precision == "fp32" else ["--precision", precision]
    mixed += ["--device", device] if device else []
    out = subprocess.run([sys.executable, "-m", "bench", "run", *MAIN_JOB, "--profile", profile, *mixed,
                          "--results-dir", str(results)], cwd=code, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no error output"])[-1]
        raise SystemExit(f"main job failed with the code in {code}: {last}")
    key = next(line.split("cell")[-1].strip() for line in out.stdout.splitlines() if line.startswith("runtime:"))
    shown = subprocess.run([sys.executable, "-m", "bench", "show", key, "--json", "--results-dir", str(results)],
                           cwd=code, env=env, capture_output=True, text=True, check=True)
    return json.loads(shown.stdout)


def flat(value: object, prefix: str = "") -> dict[str, object]:
    """A nested result value as ``{"a.b.c": leaf}`` (list items by position)."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return {prefix: value}
    out: dict[str, object] = {}
    for key, item in items:
        out.update(flat(item, f"{prefix}.{key}" if prefix else str(key)))
    return out


def differences(mine: dict, theirs: dict) -> list[str]:
    """The metrics two results do not share, one ``name: mine -> theirs`` line each (absent as ``-``)."""
    a = flat({n: mine.get(n) for n in METRICS})
    b = flat({n: theirs.get(n) for n in METRICS})
    return [f"{k}: {a.get(k, '-')} -> {b.get(k, '-')}" for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]


def row(label: str, result: dict) -> str:
    """One line: the code's label, the cell's seconds, then each stage's (data, release, task, attacks by name)."""
    stages = result.get("stage_seconds") or {}
    order = [*[s for s in STAGES if s in stages], *sorted(s for s in stages if s not in STAGES)]
    parts = ", ".join(f"{s} {stages[s]:.1f}" for s in order) or "stages not recorded"
    return f"{label}: cell {result['runtime_s']:.1f} s ({parts})"


def budget_line(results: list[dict]) -> str:
    """The median cell time against 60 s plus the median of the adaptive adversaries' stages."""
    timed = [r for r in results if r.get("stage_seconds")]
    if not timed:
        return "no stage seconds recorded: budget not computed"
    cell = statistics.median(r["runtime_s"] for r in timed)
    adaptive = statistics.median(sum(r["stage_seconds"].get(s, 0.0) for s in ADAPTIVE) for r in timed)
    budget = BUDGET_S + adaptive
    verdict = "within it" if cell <= budget else f"over by {cell - budget:.1f} s ({cell / budget:.2f}x)"
    return (f"cell {cell:.1f} s (median of {len(timed)}); budget {BUDGET_S:.0f} s + adaptive adversaries "
            f"{adaptive:.1f} s = {budget:.1f} s: {verdict}")


def hardware(result: dict) -> str:
    """What computed a cell: its GPU's name, or its CPU model and thread count."""
    versions = result.get("versions") or {}
    if versions.get("gpu"):
        return str(versions["gpu"])
    threads = versions.get("cpu_threads")  # absent from the results of revisions older than its record
    return str(versions.get("cpu", result.get("device", "cpu"))) + (f" ({threads} threads)" if threads else "")


def worktree(rev: str, where: Path) -> Path:
    """Checks out ``rev`` into a detached worktree under ``where``; returns its path."""
    path = where / "compare"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), rev], check=True)
    return path


def main() -> None:
    """Runs the job cold (and the compared revision's, alternating) and prints the table and verdicts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1, help="cold runs per code version")
    parser.add_argument("--compare", metavar="REV", help="also time the code at this git revision")
    parser.add_argument("--profile", default="quick", help="the job's profile (the README's: quick)")
    parser.add_argument("--precision", default="fp32",
                        help="comma-separated precisions this checkout runs at (default fp32, the README's)")
    parser.add_argument("--devices", default="",
                        help="comma-separated devices each precision runs on (default: bench run's choice)")
    args = parser.parse_args()
    precisions = args.precision.split(",")
    devices = [d for d in args.devices.split(",") if d] or [""]
    scratch = Path(tempfile.mkdtemp(prefix="privbench-main-job-"))
    codes = {"this checkout" + ("" if p == "fp32" else f" at {p}") + (f" on {d}" if d else ""): (ROOT, p, d)
             for d in devices for p in precisions}
    try:
        if args.compare:
            codes[args.compare] = (worktree(args.compare, scratch), "fp32", devices[0])
        runs: dict[str, list[dict]] = {label: [] for label in codes}
        for i in range(args.repeats):
            for n, (label, (code, precision, device)) in enumerate(codes.items()):
                place = scratch / f"run-{i}-{n}"
                runs[label].append(run_cold(code, args.profile, place, precision, device))
                shutil.rmtree(place, ignore_errors=True)
                print(f"run {i + 1}/{args.repeats} of {label}: {runs[label][-1]['runtime_s']:.1f} s", file=sys.stderr)
    finally:
        if args.compare:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(scratch / "compare")])
        shutil.rmtree(scratch, ignore_errors=True)
    kinds = dict.fromkeys(hardware(r) for results in runs.values() for r in results)
    print(f"main job ({args.profile}), cold, on {'; '.join(kinds)}")
    for label, results in runs.items():
        for result in results:
            print(row(label, result))
    for label, results in runs.items():
        print(f"{label}: {budget_line(results)}")
    reference, mine = next(iter(runs.items()))
    for label, theirs in list(runs.items())[1:]:
        ratio = statistics.median(r["runtime_s"] for r in theirs) / statistics.median(r["runtime_s"] for r in mine)
        changed = differences(mine[0], theirs[0])
        print(f"{label} / {reference}: {ratio:.2f}x (medians); metrics {'DIFFER' if changed else 'identical'}")
        for line in changed:
            print(f"  {line}")


if __name__ == "__main__":
    main()
