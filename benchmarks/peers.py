"""PrivBench's mechanisms side by side with re-implementations of peer code of the same semantics.

    python benchmarks/peers.py                                  # the full table (minutes)
    python benchmarks/peers.py --n 20 --repeats 1 --sizes 64x64 128x64 --scale-sizes 200,400

For every mechanism setting and image size (RGB uint8, ``--n`` images) it measures images
per second of

* PrivBench: the registered mechanism's ``apply`` on one [N, 3, H, W] batch at every
  ``--threads`` count (``torch.set_num_threads``);
* every peer (``benchmarks/_peer_impls.py``: the seeds' per-image numpy, Few-Shot-Privacy's
  ``noise.py``, SEBA's OpenCV functions, Pillow), one image at a time in this process at one
  thread (torch's and OpenCV's), and mapped over a pool of ``max(threads)`` processes (one
  thread each, one share of the images each; the images are sent to the workers when the
  pool starts and the outputs stay there, so only the mapping is timed). A slow peer is
  timed on the first images that fit ``--peer-seconds``.

The runs are taken in ``--repeats`` interleaved rounds (PrivBench at every thread count,
then each peer alone and over the pool), each run right after an untimed one of the same
code, and each rate is the median of its rounds: a drift in the machine's speed falls on
PrivBench and the peers alike.

A peer holds every output until its run ends, as PrivBench's batch does: releasing N images
writes N images to memory. Dropping each output before the next image reuses one cached
block (a box fill at 448x448 then ran 1.35x faster than when holding its outputs); the
flag ``--discard-outputs`` times the peers that way, for comparison.

The main table compares PrivBench with the fastest peer of the same semantics: a
deterministic peer counts only where its outputs equal PrivBench's on the checked images,
a noisy one where it draws the same distribution; the others (cv2's GaussianBlur, SEBA's
noise and DP-Pix) are listed, never the target. So is face_overlay's ``bound``, each image
copied without filling its boxes: the memory traffic any overlay that returns new images
has, which bounds it where the copies fill the memory bus (448x448 on this project's 2-core
VM). The ratios PrivBench(1 thread) / peer(1 process) and PrivBench(max threads) /
peer(pool) have the target 1.0 (0.8 for blur and face_blur); rows below it are marked BELOW. The same run prints the agreement checks and
the noise each implementation adds to mid-grey images against its theoretical value.

A second section gives PrivBench's cost per value at one thread on 128x64 batches of
``--scale-sizes`` images and the ratio of the largest to the smallest, target <= 1.3x.
Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import statistics
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

# Run as a script, this file's folder comes first on sys.path and benchmarks/mechanisms.py
# would shadow the ``mechanisms`` package.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import bench

bench.tune_allocator()  # before torch, as the CLI does: torch then puts large tensors on huge pages
import numpy as np
import PIL
import torch

from bench.cell.provenance import cpu_model
from bench.core.registry import mechanisms
from bench.randomness.streams import Streams
from bench.system import kernels
from bench.testing.mechanisms import synthetic_boxes


def _load(stem: str):
    """Returns ``benchmarks/<stem>.py``, loaded by path (opacus installs a ``benchmarks`` package)."""
    name = f"_privbench_benchmarks_{stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{stem}.py"))
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


impls = _load("_peer_impls")
timing = _load("_peer_timing")
tables = _load("_peer_tables")
PeerPool, peer_images, peer_seconds = timing.PeerPool, timing.peer_images, timing.peer_seconds
PeerResult, Row, main_table, peers_table, report = (tables.PeerResult, tables.Row, tables.main_table,
                                                    tables.peers_table, tables.report)
BM = impls.BM
DP_PIX = {"epsilon": 3.0, "block": 4, "m": 1}
SETTINGS: list[tuple[str, dict]] = [
    ("pixelate", {"block": 4}), ("pixelate", {"block": 8}), ("blur", {"radius": 2.0}), ("blur", {"radius": 8.0}),
    ("gaussian_noise", {"sigma": 40.0}), ("dp_pix", DP_PIX), ("image_dp", {}),
    ("face_blur", {"measure": "longer_side"}), ("face_overlay", {"colour": "mean"}),
]
"""(mechanism, parameters) rows; image_dp at the paper's defaults, face_blur as the released code."""
SCALE = [("pixelate", {"block": 4}), ("dp_pix", DP_PIX), ("gaussian_noise", {"sigma": 40.0}), ("image_dp", {}),
         ("blur", {"radius": 2.0})]
SCALE_TARGET = 1.3
CHECK_IMAGES = 16


def label(name: str, params: dict) -> str:
    """Returns a row's name, e.g. ``pixelate b=4``."""
    short = {"block": "b", "radius": "r", "sigma": "sigma", "epsilon": "eps"}
    return " ".join([name] + [f"{short[k]}={v:g}" for k, v in params.items() if k in short])


def pool_usable() -> bool:
    """Spawned workers re-import the main script: the pool needs this file run as one."""
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    return main is not None and Path(main).resolve() == Path(__file__).resolve()


# --- measuring ---------------------------------------------------------------------------


def bench_size(size: str, settings: list, args, threads: list[int], pool_ok: bool) -> list[Row]:
    """Times PrivBench and every peer of every setting on one batch of ``args.n`` images.

    Args:
        size: ``HxW``.
        settings: (mechanism, parameters) rows to run.
        args: The command line (``n``, ``repeats``, ``peer_seconds``).
        threads: PrivBench's thread counts; the pool has ``max(threads)`` workers.
        pool_ok: Whether to time the peers in a process pool too.
    """
    h, w = (int(v) for v in size.lower().split("x"))
    images, boxes_t = BM.make_batch(args.n, 3, h, w), synthetic_boxes(args.n, h, w)
    arr, boxes = np.ascontiguousarray(images.permute(0, 2, 3, 1).numpy()), [b.tolist() for b in boxes_t]
    streams, k, rows = Streams.for_images(0, "benchmark/peers", args.n), min(CHECK_IMAGES, args.n), []
    path = kernel_path(args.kernels, images.numel())
    batch = PeerBatch(arr, boxes, PeerPool(arr, boxes, max(threads)) if pool_ok else None, not args.discard_outputs)
    try:
        for name, params in settings:
            mech = mechanisms.get(name)(**params)
            use = boxes_t if mech.uses_boxes else None
            with kernels.using(path):
                torch.set_num_threads(1)
                ours = mech.apply(images[:k], generator=streams[:k], boxes=use[:k] if use else None).permute(0, 2, 3, 1).numpy()
            results = [PeerResult(peer) for peer in impls.peers_for(name, params)]
            timed = [res for res in results if check_peer(res, name, mech.config, ours, arr[:k], boxes[:k])]
            for res in timed:
                res.images = peer_images(res.peer, arr, boxes, args.peer_seconds, batch.keep)
            with kernels.using(path):
                release = partial(mech.apply, images, generator=streams, boxes=use)
                rates = {t: args.n / s for t, s in time_rounds(release, threads, timed, batch, args.repeats).items()}
            rows.append(Row(label(name, params), name, f"{size} ({path})", rates, results))
            print(f"  {size} {rows[-1].label} done", file=sys.stderr, flush=True)
    finally:
        if batch.pool:
            batch.pool.close()
    return rows


@dataclass
class PeerBatch:
    """What the peers run on at one size: H x W x C images, their boxes, the pool (or None), and whether runs keep their outputs."""

    arr: np.ndarray
    boxes: list
    pool: PeerPool | None
    keep: bool


def check_peer(res: PeerResult, name: str, config: dict, ours: np.ndarray, arr: np.ndarray, boxes: list) -> bool:
    """Runs a peer on the checked images and records whether it counts; False when it crashes there."""
    rng = np.random.default_rng(0)
    try:
        theirs = np.stack([res.peer(arr[i], boxes[i], rng) for i in range(len(arr))])
    except Exception as exc:  # a peer that crashes on this size is n/a, not fatal
        res.agreement = f"n/a, crashes: {type(exc).__name__}: {exc}"
        return False
    res.agreement, same = impls.agreement(res.peer, name, config, ours, theirs, arr)
    res.counts = res.peer.kind == "distribution" or (res.peer.kind == "exact" and same)
    return True


def time_rounds(release: Callable[[], object], threads: list[int], timed: list[PeerResult], batch: PeerBatch,
                repeats: int) -> dict[int, float]:
    """Times PrivBench and the peers in interleaved rounds; sets the peers' rates.

    Each of ``repeats`` rounds times PrivBench's ``release`` once at every thread count,
    then every peer once in this process (one thread) and once over the pool, so a drift in
    the machine's speed (other tenants, the memory bus) falls on all of them alike. Right
    before each timed run its code runs once untimed (PrivBench on the batch, a peer on two
    images), so none starts on threads that went idle while the others ran. Every rate is
    the median of its rounds.

    Returns:
        PrivBench's median seconds per release at every thread count.
    """
    ours: dict[int, list[float]] = {t: [] for t in threads}
    alone: list[list[float]] = [[] for _ in timed]
    pooled: list[list[float]] = [[] for _ in timed]
    for _ in range(repeats):
        for t in threads:
            torch.set_num_threads(t)
            release()
            start = time.perf_counter()
            release()
            ours[t].append(time.perf_counter() - start)
        torch.set_num_threads(1)
        for res, seconds, pool_seconds in zip(timed, alone, pooled):
            peer_seconds(res.peer, batch.arr, batch.boxes, min(2, res.images), batch.keep)
            seconds.append(peer_seconds(res.peer, batch.arr, batch.boxes, res.images, batch.keep))
            if batch.pool:
                batch.pool.warm(res.peer, batch.keep)
                pool_seconds.append(batch.pool.seconds(res.peer, res.images, batch.keep))
    for res, seconds, pool_seconds in zip(timed, alone, pooled):
        res.rate1 = res.images / statistics.median(seconds)
        res.rate_pool = res.images / statistics.median(pool_seconds) if pool_seconds else None
    return {t: statistics.median(v) for t, v in ours.items()}


def scale_rows(sizes: list[int], repeats: int, mode: str = "release", h: int = 128,
               w: int = 64) -> tuple[list[tuple], list[str]]:
    """Measures PrivBench's cost per value at one thread on batches of every size.

    Args:
        sizes: Numbers of images; each batch is made once and freed before the next.
        repeats: Timed runs per mechanism (median).
        mode: ``--kernels``: the elementwise kernels' path (:func:`kernel_path`).
        h: Image height; w: width.

    Returns:
        (table rows: ns per value per size, the ratio largest/smallest, the target, a flag;
        each size's elementwise kernel path).
    """
    torch.set_num_threads(1)
    ns: dict[str, list[float]] = {label(n, p): [] for n, p in SCALE}
    paths = []
    for n in sizes:
        base, images = BM.make_batch(min(n, 1000), 3, h, w), torch.empty((n, 3, h, w), dtype=torch.uint8)
        for start in range(0, n, len(base)):  # in pieces: make_batch of 100,000 images needs tens of GB
            images[start : start + len(base)] = base[: n - start]
        streams = Streams.for_images(0, "benchmark/scale", n)
        path = kernel_path(mode, images.numel())
        paths.append(f"{n:,}: {path}")
        for name, params in SCALE:
            mech = mechanisms.get(name)(**params)
            with kernels.using(path):
                seconds = BM.timed(lambda m=mech, x=images, g=streams: m.apply(x, generator=g), repeats)
            ns[label(name, params)].append(seconds / images.numel() * 1e9)
            print(f"  scale {n:,} {name} done", file=sys.stderr, flush=True)
        del images, streams, base
        gc.collect()
    rows = []
    for name, costs in ns.items():
        ratio = costs[-1] / costs[0]
        flag = "ABOVE" if ratio > SCALE_TARGET else "ok"
        rows.append((name, *(f"{c:.2f}" for c in costs), f"{ratio:.2f}x", f"<= {SCALE_TARGET}x", flag))
    return rows, paths


# --- output ------------------------------------------------------------------------------


KERNEL_MODES = {"release": "the path a release of that many images takes (compiled from "
                           f"{kernels.PAYBACK_VALUES:,} values, BENCH_COMPILE)",
                "compiled": "always compiled (--kernels compiled)", "eager": "always eager (--kernels eager)"}


def kernel_path(mode: str, values: int) -> str:
    """Returns the elementwise kernels' path for ``--kernels`` and a batch of ``values`` values."""
    return kernels.choose("cpu", values) if mode == "release" else mode


def machine() -> str:
    """Returns one line on the machine: versions, CPUs, load."""
    model = cpu_model()
    cv = impls.cv2.__version__ if impls.cv2 is not None else "not installed"
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    return (f"torch {torch.__version__}, numpy {np.__version__}, Pillow {PIL.__version__}, cv2 {cv}; "
            f"{os.cpu_count()} CPUs ({len(os.sched_getaffinity(0))} usable, {model}); load average {load}; "
            f"kernels can run {kernels.backend('cpu')}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Returns the command line's options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=["64x64", "128x64", "224x224", "448x448"], help="HxW sizes (RGB)")
    p.add_argument("--n", type=int, default=300, help="images per size")
    p.add_argument("--repeats", type=int, default=5, help="interleaved timed rounds (median)")
    p.add_argument("--mechanisms", nargs="+", default=list(dict.fromkeys(n for n, _ in SETTINGS)), help="mechanisms to run")
    p.add_argument("--threads", default="1,2", help="PrivBench's torch thread counts; peers also run as a pool of the largest")
    p.add_argument("--scale-sizes", default="1000,10000,100000", help="batch sizes of the per-value cost section")
    p.add_argument("--skip-scale", action="store_true", help="skip the per-value cost section")
    p.add_argument("--peer-seconds", type=float, default=10.0,
                   help="time a per-image peer on the first images that fit this many seconds per run (0: all)")
    p.add_argument("--discard-outputs", action="store_true",
                   help="peers drop each output before the next image (their writes then stay in cache)")
    p.add_argument("--kernels", choices=("release", "compiled", "eager"), default="release",
                   help="PrivBench's elementwise kernels: the path a release of that many images takes "
                        "(BENCH_COMPILE's rule), or always compiled or eager")
    p.add_argument("--out", type=Path, help="also write the tables as Markdown to this file")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark, prints the report (and writes it as Markdown with ``--out``)."""
    args = parse_args(argv)
    threads = sorted({int(t) for t in args.threads.split(",")})
    settings = [(n, p) for n, p in SETTINGS if n in args.mechanisms]
    unknown = set(args.mechanisms) - {n for n, _ in SETTINGS}
    if unknown or not threads or threads[0] < 1:
        raise SystemExit(f"unknown mechanisms {sorted(unknown)} or bad --threads {args.threads!r}")
    outputs = "drop each output" if args.discard_outputs else "keep every output until the run ends"
    head = [machine(), f"{args.n} images per size, median of {args.repeats} interleaved rounds; PrivBench at {threads} threads, "
                       f"peers at 1 thread ({outputs}); PrivBench's elementwise kernels (after each size): "
                       f"{KERNEL_MODES[args.kernels]}"]
    if impls.cv2 is not None:
        impls.cv2.setNumThreads(1)  # the peers in this process run at one thread, as the pool's workers do
    else:
        head.append("cv2 is not importable: SEBA's OpenCV peers are skipped (pip install -e '.[bench]')")
    pool_ok = max(threads) > 1 and pool_usable()
    if max(threads) > 1 and not pool_ok:
        head.append("the peers' process pool needs benchmarks/peers.py run as a script: skipped")
    print("\n".join(head), flush=True)
    rows = [row for size in args.sizes for row in bench_size(size, settings, args, threads, pool_ok)]
    sections = [("PrivBench against the fastest peer of the same semantics", main_table(rows, threads)),
                (f"Every peer (counted: same semantics, checked on the first {min(CHECK_IMAGES, args.n)} images of each size)",
                 peers_table(rows, max(threads)))]
    noise = impls.noise_rows(args.mechanisms, DP_PIX, 40.0, {n: label(n, p) for n, p in SETTINGS})
    if noise:
        sections.append(("Noise added to mid-grey 64x64 images (dp_pix: one value per cell; expected: for this code)",
                         (("mechanism", "implementation", "mean", "std", "expected mean", "expected std", "check", "note"), noise)))
    if not args.skip_scale:
        sizes = [int(v) for v in args.scale_sizes.split(",")]
        scale, paths = scale_rows(sizes, args.repeats, args.kernels)
        sections.append((f"Cost per value, 128x64 RGB, PrivBench at 1 thread (ns/value; elementwise kernels {'; '.join(paths)})",
                         (("mechanism", *(f"{n:,} images" for n in sizes), f"cost({sizes[-1]:,})/cost({sizes[0]:,})",
                           "target", ""), scale)))
    print(report([], sections, markdown=False))
    if args.out:
        args.out.write_text(report(head, sections, markdown=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
