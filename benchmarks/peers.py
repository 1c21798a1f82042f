"""PrivBench's mechanisms side by side with re-implementations of peer code of the same semantics.

    python benchmarks/peers.py                                  # the full table (minutes)
    python benchmarks/peers.py --n 20 --repeats 1 --sizes 64x64 128x64 --scale-sizes 200,400

For every mechanism setting and image size (RGB uint8, ``--n`` images) it measures images
per second of

* PrivBench: the registered mechanism's ``apply`` on one [N, 3, H, W] batch at every
  ``--threads`` count (``torch.set_num_threads``), median of ``--repeats`` after a warm-up;
* every peer (``benchmarks/_peer_impls.py``: the seeds' per-image numpy, Few-Shot-Privacy's
  ``noise.py``, SEBA's OpenCV functions, Pillow), one image at a time in this process at one
  thread, and mapped over a pool of ``max(threads)`` processes (one thread each, one share of
  the images each; the images are sent to the workers when the pool starts and the outputs
  stay there, so only the mapping is timed). A slow peer is timed on the first images that
  fit ``--peer-seconds``.

A peer holds every output until its run ends, as PrivBench's batch does: releasing N images
writes N images to memory. Dropping each output before the next image reuses one cached
block (a box fill at 448x448 then ran 1.35x faster than when holding its outputs); the
flag ``--discard-outputs`` times the peers that way, for comparison.

The main table compares PrivBench with the fastest peer of the same semantics: a
deterministic peer counts only where its outputs equal PrivBench's on the checked images,
a noisy one where it draws the same distribution; the others (cv2's GaussianBlur, SEBA's
noise and DP-Pix) are listed, never the target. The ratios PrivBench(1 thread) / peer(1
process) and PrivBench(max threads) / peer(pool) have the target 1.0 (0.8 for blur and
face_blur); rows below it are marked BELOW. The same run prints the agreement checks and
the noise each implementation adds to mid-grey images against its theoretical value.

A second section gives PrivBench's cost per value at one thread on 128x64 batches of
``--scale-sizes`` images and the ratio of the largest to the smallest, target <= 1.3x.
Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import multiprocessing
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and benchmarks/mechanisms.py
# would shadow the ``mechanisms`` package.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import bench  # noqa: F401  # first, as the CLI imports it: torch then puts large tensors on huge pages
import numpy as np
import PIL
import torch

from bench import kernels
from bench.registry import mechanisms
from bench.streams import Streams
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
TARGETS = {"blur": 0.8, "face_blur": 0.8}
"""Target of PrivBench / fastest peer where it is not 1.0."""
SCALE_TARGET = 1.3
CHECK_IMAGES = 16


def label(name: str, params: dict) -> str:
    """Returns a row's name, e.g. ``pixelate b=4``."""
    short = {"block": "b", "radius": "r", "sigma": "sigma", "epsilon": "eps"}
    return " ".join([name] + [f"{short[k]}={v:g}" for k, v in params.items() if k in short])


@dataclass
class PeerResult:
    """One peer's rates (None: not measured) and agreement on one row."""

    peer: "impls.Peer"
    rate1: float | None = None
    rate_pool: float | None = None
    images: int = 0
    agreement: str = ""
    counts: bool = False


@dataclass
class Row:
    """One (mechanism setting, size): PrivBench's rate per thread count and the peers'."""

    label: str
    name: str
    size: str
    privbench: dict[int, float]
    peers: list[PeerResult]

    def fastest(self) -> PeerResult | None:
        """Returns the fastest counted peer at one process, or None."""
        counted = [p for p in self.peers if p.counts and p.rate1]
        return max(counted, key=lambda p: p.rate1) if counted else None


# --- the process pool (spawn: the workers start clean, at one thread) ----------------------

_WORKER: dict = {}


def _worker_init(images: np.ndarray, boxes: list) -> None:
    torch.set_num_threads(1)
    if impls.cv2 is not None:
        impls.cv2.setNumThreads(1)
        impls.cv2.setRNGSeed(os.getpid())
    _WORKER.update(images=images, boxes=boxes, rng=np.random.default_rng(os.getpid()))


def _run_peer(peer, images: np.ndarray, boxes: list, rng: np.random.Generator, start: int, stop: int,
              keep: bool) -> None:
    """Runs ``peer`` on images ``start:stop``, holding every output until the end when ``keep``."""
    kept = []
    for i in range(start, stop):
        if keep:
            kept.append(peer(images[i], boxes[i], rng))
        else:
            peer(images[i], boxes[i], rng)


def _worker_chunk(peer, start: int, stop: int, keep: bool) -> int:
    _run_peer(peer, _WORKER["images"], _WORKER["boxes"], _WORKER["rng"], start, stop, keep)
    return stop - start


class PeerPool:
    """``workers`` spawned processes holding one size's images; times peers mapped over them."""

    def __init__(self, images: np.ndarray, boxes: list, workers: int):
        self.workers = workers
        self.pool = multiprocessing.get_context("spawn").Pool(workers, _worker_init, (images, boxes))
        self.pool.starmap(time.sleep, [(0.2,)] * (4 * workers))  # wait until every worker is up and idle

    def rate(self, peer, count: int, repeats: int, keep: bool) -> float:
        """Returns images per second of ``peer`` mapped over the first ``count`` images.

        Each worker gets one contiguous share and, with ``keep``, holds its outputs until
        the share is done.
        """
        edges = np.linspace(0, count, min(count, self.workers) + 1).astype(int)
        tasks = [(peer, int(a), int(b), keep) for a, b in zip(edges[:-1], edges[1:])]
        self.pool.starmap(_worker_chunk, [(peer, 0, min(2, count), keep)] * self.workers)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            done = sum(self.pool.starmap(_worker_chunk, tasks, chunksize=1))
            times.append(time.perf_counter() - start)
        assert done == count
        return count / statistics.median(times)

    def close(self) -> None:
        self.pool.terminate()
        self.pool.join()


def pool_usable() -> bool:
    """Spawned workers re-import the main script: the pool needs this file run as one."""
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    return main is not None and Path(main).resolve() == Path(__file__).resolve()


# --- measuring ---------------------------------------------------------------------------


def peer_rate(peer, images: np.ndarray, boxes: list, repeats: int, budget: float, keep: bool) -> tuple[float, int]:
    """Times a peer run one image at a time in this process.

    Args:
        peer: The peer.
        images: H x W x C images; boxes: their face boxes.
        repeats: Timed runs; the median counts.
        budget: Seconds per run: two warm-up images estimate the time per image and at most
            the images that fit are timed (at least 20; all of them when ``budget`` <= 0).
        keep: Hold every output until the run ends (as a batch does).

    Returns:
        (images per second, images timed).
    """
    rng = np.random.default_rng(1)

    def run(count: int) -> float:
        start = time.perf_counter()
        _run_peer(peer, images, boxes, rng, 0, count, keep)
        return time.perf_counter() - start

    per_image = run(min(2, len(images))) / min(2, len(images))
    count = len(images) if budget <= 0 else min(len(images), max(20, int(budget / max(per_image, 1e-9))))
    return count / statistics.median(run(count) for _ in range(repeats)), count


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
    pool = PeerPool(arr, boxes, max(threads)) if pool_ok else None
    path, keep = kernel_path(args.kernels, images.numel()), not args.discard_outputs
    try:
        for name, params in settings:
            mech = mechanisms.get(name)(**params)
            use = boxes_t if mech.uses_boxes else None
            rates = {}
            with kernels.using(path):
                for t in threads:
                    torch.set_num_threads(t)
                    rates[t] = args.n / BM.timed(lambda: mech.apply(images, generator=streams, boxes=use), args.repeats)
                torch.set_num_threads(1)
                ours = mech.apply(images[:k], generator=streams[:k], boxes=use[:k] if use else None).permute(0, 2, 3, 1).numpy()
            results = [PeerResult(peer) for peer in impls.peers_for(name, params)]
            for res in results:
                peer = res.peer
                try:
                    rng = np.random.default_rng(0)
                    theirs = np.stack([peer(arr[i], boxes[i], rng) for i in range(k)])
                except Exception as exc:  # a peer that crashes on this size is n/a, not fatal
                    res.agreement = f"n/a, crashes: {type(exc).__name__}: {exc}"
                    continue
                res.agreement, same = impls.agreement(peer, name, mech.config, ours, theirs, arr[:k])
                res.counts = peer.kind == "distribution" or (peer.kind == "exact" and same)
                res.rate1, res.images = peer_rate(peer, arr, boxes, args.repeats, args.peer_seconds, keep)
                if pool:
                    res.rate_pool = pool.rate(peer, res.images, args.repeats, keep)
            rows.append(Row(label(name, params), name, f"{size} ({path})", rates, results))
            print(f"  {size} {rows[-1].label} done", file=sys.stderr, flush=True)
    finally:
        if pool:
            pool.close()
    return rows


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
                seconds = BM.timed(lambda: mech.apply(images, generator=streams), repeats)
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


def _rate(r: float | None) -> str:
    return "-" if not r else f"{r:,.0f}"


def render(header: tuple, body: list[tuple], markdown: bool) -> str:
    """Returns a table as aligned text or as Markdown."""
    cells = [tuple(str(x) for x in row) for row in [header, *body]]
    if markdown:
        lines = ["| " + " | ".join(r) + " |" for r in cells]
        lines.insert(1, "|" + "|".join("---" for _ in header) + "|")
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(x.ljust(wd) for x, wd in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * wd for wd in widths))
    return "\n".join(lines)


KERNEL_MODES = {"release": "the path a release of that many images takes (compiled from "
                           f"{kernels.PAYBACK_VALUES:,} values, BENCH_COMPILE)",
                "compiled": "always compiled (--kernels compiled)", "eager": "always eager (--kernels eager)"}


def kernel_path(mode: str, values: int) -> str:
    """Returns the elementwise kernels' path for ``--kernels`` and a batch of ``values`` values."""
    return kernels.choose("cpu", values) if mode == "release" else mode


def main_table(rows: list[Row], threads: list[int]) -> tuple[tuple, list[tuple]]:
    """Returns the header and body of the comparison with the fastest peer of the same semantics."""
    top, pool = threads[0], max(threads)
    pairs = [(top, "rate1", "1p")] + ([(pool, "rate_pool", f"{pool}p")] if pool > 1 else [])
    header = ("mechanism", "size", *(f"PrivBench {t}t img/s" for t in threads), "fastest peer",
              *(f"peer {p} img/s" for _, _, p in pairs), *(f"PB{t}t/{p}" for t, _, p in pairs), "target", "")
    body = []
    for row in rows:
        best, target = row.fastest(), TARGETS.get(row.name, 1.0)
        peer_rates = [getattr(best, attr) if best else None for _, attr, _ in pairs]
        ratios = [row.privbench[t] / r if r else None for (t, _, _), r in zip(pairs, peer_rates)]
        flag = "no peer" if not best else "BELOW" if any(r is not None and r < target for r in ratios) else "ok"
        body.append((row.label, row.size, *(_rate(row.privbench[t]) for t in threads), best.peer.name if best else "-",
                     *map(_rate, peer_rates), *("-" if r is None else f"{r:.2f}" for r in ratios), f"{target:.1f}", flag))
    return header, body


def peers_table(rows: list[Row], pool: int) -> tuple[tuple, list[tuple]]:
    """Returns every peer's rates, what its agreement check found and whether it counts."""
    header = ("mechanism", "size", "peer", "implementation", "timed on", "1p img/s", f"{pool}p pool img/s" if pool > 1 else "pool",
              "counted", "agreement with PrivBench")
    body = [(row.label, row.size, p.peer.name, p.peer.what, p.images or "-", _rate(p.rate1), _rate(p.rate_pool),
             "yes" if p.counts else "no", p.agreement) for row in rows for p in row.peers]
    return header, body


def report(head: list[str], sections: list[tuple[str, tuple]], markdown: bool) -> str:
    """Returns the head lines, then every (title, (header, body)) section's table."""
    out = ["\n\n".join(head)] if markdown else list(head)
    for title, table in sections:
        out += [f"\n## {title}\n" if markdown else f"\n{title}", render(*table, markdown)]
    return "\n".join(out)


def machine() -> str:
    """Returns one line on the machine: versions, CPUs, load."""
    info = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    model = next((ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")), "?")
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
    p.add_argument("--repeats", type=int, default=5, help="timed runs (median) after a warm-up")
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
    head = [machine(), f"{args.n} images per size, median of {args.repeats} runs; PrivBench at {threads} threads, "
                       f"peers at 1 thread ({outputs}); PrivBench's elementwise kernels (after each size): "
                       f"{KERNEL_MODES[args.kernels]}"]
    if impls.cv2 is None:
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
