"""Data at scale: a split larger than memory is written, released and streamed in bounded memory.

Builds a synthetic split of N images (default 200,000 at 128x128, ~9.8 GB as uint8) as
Arrow shards, releases it with dp_pix through the harness's release path
(``bench.release.dataset.make_release``: shard by shard, each image drawing from the stream of
its global index) and streams the release through a task's data path
(``bench.nn.images.embed_images``: a DataLoader over the shards, a Conv-4 embedding every
image). A sampler thread records the private memory (RssAnon: anonymous pages, not the
file pages of the memory-mapped shards) of this process and its DataLoader workers.

Then, on a subset that fits in memory, it compares the release throughput of the disk
path with the in-memory path of the previous harness (one tensor per split, saved as one
object), both measured in this run.

    python benchmarks/scale.py [--n 200000] [--size 128] [--subset 20000] [--dir /tmp/bench-scale]

It checks free space first and scales N down, with a message, when the disk is short.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.core.interfaces import RunContext  # noqa: E402
from bench.core.registry import mechanisms  # noqa: E402
from bench.data.base import ImageSet, Splits, SplitsSink, cached_sharded_splits  # noqa: E402
from bench.nn.conv4 import Conv4  # noqa: E402
from bench.nn.images import embed_images  # noqa: E402
from bench.release.dataset import apply_to_split, make_release  # noqa: E402
from bench.storage.cache import Cache  # noqa: E402
from bench.system.memory import release_free_memory  # noqa: E402

CHUNK = 512


def rss_anon_kib(pid: int) -> int:
    """Returns the RssAnon of a process in KiB (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def children(pid: int) -> list[int]:
    """Returns the ids of a process's children."""
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


class PeakMemory(threading.Thread):
    """Samples the summed RssAnon of this process and its children every 0.2 s."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak_kib = 0
        self.stop = threading.Event()

    def run(self) -> None:
        me = os.getpid()
        while not self.stop.is_set():
            total = rss_anon_kib(me) + sum(rss_anon_kib(c) for c in children(me))
            self.peak_kib = max(self.peak_kib, total)
            time.sleep(0.2)

    def reset(self) -> None:
        """Hands back what the last phase freed (the heap keeps it: bench/system/memory.py) and starts a new peak."""
        release_free_memory()
        self.peak_kib = 0


def synthetic_chunk(start: int, count: int, size: int) -> torch.Tensor:
    """Returns ``count`` deterministic images (smooth colour fields with texture) from index ``start``."""
    g = torch.Generator().manual_seed(start)
    low = torch.randint(0, 256, (count, 3, 8, 8), generator=g).float()
    images = torch.nn.functional.interpolate(low, size=(size, size), mode="bilinear", align_corners=False)
    texture = torch.randint(-20, 21, (count, 3, size, size), generator=g).float()
    return (images + texture).clamp(0, 255).to(torch.uint8)


def build(n: int, size: int, cache: Path) -> Splits:
    """Writes the N-image split as shards (chunk by chunk) through the dataset cache; returns it."""

    def fill(sink: SplitsSink) -> dict:
        writer = sink.images("test", (3, size, size))
        for start in range(0, n, CHUNK):
            writer.add(synthetic_chunk(start, min(CHUNK, n - start), size))
        sink.describe("test", labels=torch.arange(n) // 20)
        return {"source": "benchmarks/scale.py"}

    sets, content, _ = cached_sharded_splits(cache, "scale", f"scale-{n}-{size}", fill)
    return Splits("scale", sets, content, synthetic=True)


def context(cache: Path) -> RunContext:
    """A CPU run context on ``cache``."""
    return RunContext(device=torch.device("cpu"), seed=0, profile="quick", data_root=None, cache_dir=cache)


def in_memory_release(split: ImageSet, mechanism, cache: Path) -> float:
    """The previous harness's path: the release as one tensor, saved as one cache object; returns seconds."""
    started = time.perf_counter()
    images, _ = apply_to_split(mechanism, split, context(cache), "release/test", path="eager")
    Cache(cache).save("releases-in-memory", "subset", {"images": {"test": images}, "metrics": {}})
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    """Runs the measurement and prints the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--subset", type=int, default=20_000, help="images of the in-memory comparison")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bench-scale"))
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, (os.cpu_count() or 1)))
    image_bytes = 3 * args.size**2
    args.dir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(args.dir).free
    need = 2.2 * args.n * image_bytes + 3 * args.subset * image_bytes
    if need > free:
        n = int((free / 1.1 - 3 * args.subset * image_bytes) / (2.2 * image_bytes))
        print(f"only {free / 2**30:.1f} GiB free in {args.dir}: N scaled down from {args.n} to {n}")
        args.n = n
    cache = args.dir / "cache"
    mechanism = mechanisms.get("dp_pix")(epsilon=3, block=4)
    memory = PeakMemory()
    memory.start()

    started = time.perf_counter()
    data = build(args.n, args.size, cache)
    written = time.perf_counter() - started
    print(f"dataset: {args.n} images of 3x{args.size}x{args.size} ({args.n * image_bytes / 2**30:.1f} GiB) "
          f"in {written:.0f} s; peak RssAnon {memory.peak_kib / 2**20:.2f} GiB")

    memory.reset()
    started = time.perf_counter()
    release = make_release(data, mechanism, context(cache))
    released = time.perf_counter() - started
    print(f"release (dp_pix, sharded): {released:.0f} s, {args.n / released:,.0f} images/s, kernels "
          f"{release.kernels}; peak RssAnon {memory.peak_kib / 2**20:.2f} GiB")

    memory.reset()
    started = time.perf_counter()
    model = Conv4(in_channels=3)
    embeddings = embed_images(model, release.splits["test"].images, 32, torch.device("cpu"), batch=512)
    streamed = time.perf_counter() - started
    print(f"streamed through embed_images (DataLoader, Conv-4 at 32 px): {len(embeddings)} embeddings in "
          f"{streamed:.0f} s; peak RssAnon {memory.peak_kib / 2**20:.2f} GiB")

    subset = data["test"].subset(torch.arange(args.subset))
    small = Splits("scale-subset", {"test": subset}, f"subset-{args.subset}", synthetic=True)
    for attempt in range(2):  # the second pair is the measurement; the first warms every path
        sub_cache = args.dir / f"subset-cache-{attempt}"
        shutil.rmtree(sub_cache, ignore_errors=True)
        memory_s = in_memory_release(subset, mechanism, sub_cache)
        started = time.perf_counter()
        make_release(small, mechanism, context(sub_cache))
        disk_s = time.perf_counter() - started
    print(f"release of {args.subset} images: in memory (one tensor, one object) {memory_s:.2f} s, sharded "
          f"{disk_s:.2f} s: ratio {disk_s / memory_s:.2f} (target <= 2)")
    memory.stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
