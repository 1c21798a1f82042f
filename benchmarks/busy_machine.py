"""A cell's training on a busy CPU: how much slower than on a quiet one, against its fair share.

Issue 15 asks that a lone ``bench run`` on a machine shared with other heavy jobs slow down
by its share of the cores, not by an order of magnitude more. Multi-threaded ops end at
barriers; when another process holds a core, the thread that reached the barrier first
can spin on its own core while the one it waits for is not running.

Each measurement runs in a fresh process (OpenMP reads ``OMP_WAIT_POLICY`` when torch is
imported): the training step of the few-shot task's quick profile (Conv-4, a 200-image
episode at 32x32, channels_last, Adam) on ``--threads`` threads, first with nothing else
running, then beside ``--hogs`` busy processes. The fair-share slowdown is
``(threads + hogs) / cores`` (at least 1): every runnable thread gets an equal slice.

    python benchmarks/busy_machine.py [--threads 2] [--hogs N] [--episodes 12] [--repeats 3]

Prints seconds per episode, the slowdown and its ratio to the fair share, for OpenMP's
default wait policy and for ``OMP_WAIT_POLICY=PASSIVE``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.system.cpus import usable_cpus

ROOT = Path(__file__).resolve().parents[1]

WORKLOAD = r"""
import json, sys, time, torch
from bench.nn.conv4 import Conv4
from tasks.episodes import prototypical_loss
threads, episodes, repeats = (int(a) for a in sys.argv[1:4])
torch.set_num_threads(threads)
torch.manual_seed(0)
model = Conv4(3).to(memory_format=torch.channels_last)
opt = torch.optim.Adam(model.parameters(), 1e-3)
x = torch.randn(200, 3, 32, 32).contiguous(memory_format=torch.channels_last)
def step():
    loss = prototypical_loss(model(x).view(20, 10, -1), 5)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
for _ in range(3):
    step()
best = float("inf")
for _ in range(repeats):
    start = time.perf_counter()
    for _ in range(episodes):
        step()
    best = min(best, (time.perf_counter() - start) / episodes)
print(json.dumps({"seconds": best}))
"""


def _hog() -> None:
    while True:
        pass


def measure(threads: int, episodes: int, repeats: int, policy: str | None) -> float:
    """Returns the best seconds per episode of the workload in a fresh process."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    out = subprocess.run([sys.executable, "-c", WORKLOAD, str(threads), str(episodes), str(repeats)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def main() -> None:
    """Measures quiet and busy, for both wait policies, and prints the table."""
    cores = usable_cpus()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=cores, help="torch threads of training (default: usable CPUs)")
    parser.add_argument("--hogs", type=int, default=cores, help="busy processes beside it (default: usable CPUs)")
    parser.add_argument("--episodes", type=int, default=12, help="episodes per timed repeat")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats (the best counts)")
    args = parser.parse_args()
    share = max(1.0, (args.threads + args.hogs) / cores)
    rows = []
    for policy in (None, "PASSIVE"):
        quiet = measure(args.threads, args.episodes, args.repeats, policy)
        hogs = [multiprocessing.Process(target=_hog, daemon=True) for _ in range(args.hogs)]
        for hog in hogs:
            hog.start()
        try:
            time.sleep(0.5)
            busy = measure(args.threads, args.episodes, args.repeats, policy)
        finally:
            for hog in hogs:
                hog.terminate()
            for hog in hogs:
                hog.join()
        rows.append((policy or "default", quiet, busy))
    print(f"{cores} cores, training on {args.threads} thread(s), {args.hogs} busy process(es): "
          f"fair-share slowdown {share:.2f}x")
    print(f"{'OMP_WAIT_POLICY':<16}{'quiet ms/ep':>12}{'busy ms/ep':>12}{'slowdown':>10}{'/ share':>9}")
    for policy, quiet, busy in rows:
        print(f"{policy:<16}{quiet * 1e3:>12.1f}{busy * 1e3:>12.1f}{busy / quiet:>9.2f}x{busy / quiet / share:>8.2f}x")


if __name__ == "__main__":
    main()
