"""Times a peer of ``benchmarks/peers.py``: one image at a time in this process, or mapped over a process pool."""

from __future__ import annotations

import multiprocessing
import os
import time

import bench

bench.tune_allocator()  # before torch, as the CLI does: torch then puts large tensors on huge pages
import numpy as np
import torch

try:
    import cv2
except ImportError:  # the optional extra ``bench`` installs it (as for benchmarks/_peer_impls.py)
    cv2 = None


# --- the process pool (spawn: the workers start clean, at one thread) ----------------------

_WORKER: dict = {}


def _worker_init(images: np.ndarray, boxes: list) -> None:
    torch.set_num_threads(1)
    if cv2 is not None:
        cv2.setNumThreads(1)
        cv2.setRNGSeed(os.getpid())
    _WORKER.update(images=images, boxes=boxes, rng=np.random.default_rng(os.getpid()))


def run_peer(peer, images: np.ndarray, boxes: list, rng: np.random.Generator, start: int, stop: int,
             keep: bool) -> None:
    """Runs ``peer`` on images ``start:stop``, holding every output until the end when ``keep``."""
    kept = []
    for i in range(start, stop):
        if keep:
            kept.append(peer(images[i], boxes[i], rng))
        else:
            peer(images[i], boxes[i], rng)


def _worker_chunk(peer, start: int, stop: int, keep: bool) -> int:
    run_peer(peer, _WORKER["images"], _WORKER["boxes"], _WORKER["rng"], start, stop, keep)
    return stop - start


class PeerPool:
    """``workers`` spawned processes holding one size's images; times peers mapped over them."""

    def __init__(self, images: np.ndarray, boxes: list, workers: int):
        self.workers = workers
        self.pool = multiprocessing.get_context("spawn").Pool(workers, _worker_init, (images, boxes))
        self.pool.starmap(time.sleep, [(0.2,)] * (4 * workers))  # wait until every worker is up and idle

    def warm(self, peer, keep: bool) -> None:
        """Runs ``peer`` on two images in every worker (imports, first calls)."""
        self.pool.starmap(_worker_chunk, [(peer, 0, 2, keep)] * self.workers)

    def seconds(self, peer, count: int, keep: bool) -> float:
        """Returns the wall time of ``peer`` mapped once over the first ``count`` images.

        Each worker gets one contiguous share and, with ``keep``, holds its outputs until
        the share is done.
        """
        edges = np.linspace(0, count, min(count, self.workers) + 1).astype(int)
        tasks = [(peer, int(a), int(b), keep) for a, b in zip(edges[:-1], edges[1:])]
        start = time.perf_counter()
        done = sum(self.pool.starmap(_worker_chunk, tasks, chunksize=1))
        seconds = time.perf_counter() - start
        assert done == count
        return seconds

    def close(self) -> None:
        self.pool.terminate()
        self.pool.join()


# --- one image at a time in this process -------------------------------------------------


def peer_images(peer, images: np.ndarray, boxes: list, budget: float, keep: bool) -> int:
    """Returns how many images a per-image peer is timed on, after running it on two.

    Args:
        peer: The peer.
        images: H x W x C images; boxes: their face boxes.
        budget: Seconds per run: the two images estimate the time per image and at most
            the images that fit are timed (at least 20; all of them when ``budget`` <= 0).
        keep: Hold every output until the run ends (as a batch does).
    """
    warm = min(2, len(images))
    per_image = peer_seconds(peer, images, boxes, warm, keep) / max(1, warm)
    return len(images) if budget <= 0 else min(len(images), max(20, int(budget / max(per_image, 1e-9))))


def peer_seconds(peer, images: np.ndarray, boxes: list, count: int, keep: bool) -> float:
    """Returns the wall time of one run of a peer, one image at a time in this process, over the first ``count`` images."""
    rng = np.random.default_rng(1)
    start = time.perf_counter()
    run_peer(peer, images, boxes, rng, 0, count, keep)
    return time.perf_counter() - start
