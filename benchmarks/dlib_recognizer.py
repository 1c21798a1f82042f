"""dlib's face descriptor in torch against dlib-bin itself: per-face agreement on real photos, and throughput.

Finds every face in a folder of photos (searched recursively for .jpg/.jpeg/.png) the way
dlib's own pipeline does (its HOG frontal face detector, the 5-point shape predictor,
``dlib.get_face_chip`` at 150 px and padding 0.25), describes each 150 x 150 chip with
dlib-bin (the reference) and with :mod:`bench.faces.dlib_torch`, and prints:

- agreement: per face, the cosine of the two descriptors (min, 1st percentile, median), the
  largest element difference, and, over every pair of faces, the largest difference of
  the Euclidean distance dlib compares with 0.6 and how many same/different decisions at
  0.6 differ;
- throughput of the descriptor alone (chips in memory -> 128-d vectors) in images/s for
  dlib-bin and torch (1 and 2 intra-op threads, or --threads) at batch sizes 1, 32 and 128,
  measured in interleaved rounds in this one process (median and best of the rounds), with
  the machine's load average before and after, since a shared machine slows both;
- the alignment's cost (shape predictor + chip), which stays in dlib.

A batch is one call; on the CPU torch computes it in forward passes of at most
``dlib_torch.CPU_CHUNK`` chips. dlib-bin runs its network on one thread. On a CPU shared with
other jobs, two torch threads wait for each other at every convolution (libgomp spins, then
sleeps): compare a run under ``OMP_WAIT_POLICY=PASSIVE``. Nothing is asserted about time;
the numbers are this machine's.

    python benchmarks/dlib_recognizer.py --photos /tmp/realfaces --out dlib_torch.md
    python benchmarks/dlib_recognizer.py --photos /tmp/realfaces --device cuda --threads 2
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.faces import dlib_torch  # noqa: E402
from bench.faces.dlib_resnet import CHIP, PADDING, DlibResNet  # noqa: E402
from bench.nn.threads import cpu_threads  # noqa: E402
from bench.system.cpus import usable_cpus  # noqa: E402

SUFFIXES = (".jpg", ".jpeg", ".png")


def photos(root: Path, max_side: int) -> list[tuple[str, np.ndarray]]:
    """Returns (relative name, RGB uint8 array) of every distinct photo under ``root``, the larger ones shrunk to ``max_side``.

    A file whose bytes equal an earlier one's (the same photo in two folders) is skipped.
    """
    out, seen = [], set()
    for file in sorted(p for p in root.rglob("*") if p.suffix.lower() in SUFFIXES and p.is_file()):
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        try:
            image = Image.open(file).convert("RGB")
        except OSError:
            continue
        if max(image.size) > max_side:
            image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
        out.append((file.relative_to(root).as_posix(), np.array(image)))
    return out


def face_chips(rec: DlibResNet, images: list[tuple[str, np.ndarray]], max_faces: int) -> tuple[np.ndarray, list[str], float]:
    """Returns every face's 150 x 150 chip (dlib's HOG detector, upsampled once), their photos, and the alignment's seconds per face."""
    import dlib

    detector = dlib.get_frontal_face_detector()
    chips, names, align_s = [], [], 0.0
    for name, image in images:
        for rect in detector(image, 1):
            start = time.perf_counter()
            chips.append(dlib.get_face_chip(image, rec.predictor(image, rect), size=CHIP, padding=PADDING))
            align_s += time.perf_counter() - start
            names.append(name)
            if len(chips) >= max_faces:
                return np.stack(chips), names, align_s / len(chips)
    if not chips:
        return np.zeros((0, CHIP, CHIP, 3), np.uint8), names, 0.0
    return np.stack(chips), names, align_s / len(chips)


def agreement(ref: np.ndarray, got: np.ndarray) -> dict[str, float]:
    """Returns the per-face cosine summary and the pairwise-distance differences of two descriptor sets."""
    cos = (ref * got).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
    d_ref = np.linalg.norm(ref[:, None] - ref[None], axis=-1)
    d_got = np.linalg.norm(got[:, None] - got[None], axis=-1)
    upper = np.triu_indices(len(ref), 1)
    return {"faces": len(ref), "cos_min": float(cos.min()), "cos_p01": float(np.percentile(cos, 1)),
            "cos_median": float(np.median(cos)), "max_abs_diff": float(np.abs(ref - got).max()),
            "ref_norm_median": float(np.median(np.linalg.norm(ref, axis=1))), "pairs": len(upper[0]),
            "max_pair_distance_diff": float(np.abs(d_ref - d_got)[upper].max()),
            "decisions_differing_at_0.6": int(((d_ref < 0.6) != (d_got < 0.6))[upper].sum())}


def rate(fn, chips: np.ndarray, batch: int, total: int) -> float:
    """Returns images/s of describing ``total`` chips in calls of ``batch``."""
    data = np.concatenate([chips] * (-(-total // len(chips))))[:total]
    start = time.perf_counter()
    for i in range(0, total, batch):
        fn(data[i : i + batch])
    return total / (time.perf_counter() - start)


def throughput(chips: np.ndarray, batches: list[int], threads: list[int], device: str, rounds: int,
               dlib_images: int, torch_images: int) -> list[tuple[str, int, list[float]]]:
    """Returns (engine, batch size, images/s per round), rounds interleaved so a load change hits every engine alike."""
    ref = DlibResNet(engine="dlib", batch_size=max(batches))  # each call gets one batch whole
    net = dlib_torch.load(dlib_torch_path(), device)
    engines: list[tuple[str, object, int | None]] = [("dlib-bin", ref.describe, None)]
    for n in threads:
        label = f"torch {device}" + (f", {n} thread{'s' if n > 1 else ''}" if device == "cpu" else "")
        engines.append((label, lambda c, b=None: dlib_torch.describe(net, c, len(c)), n))
    results: dict[tuple[str, int], list[float]] = {}
    for _ in range(rounds):
        for batch in batches:
            for label, fn, n in engines:
                total = max(batch, dlib_images if label == "dlib-bin" else torch_images)
                with cpu_threads(n):
                    fn(chips[: min(batch, 2)])  # warm: oneDNN builds its kernels per shape
                    if device.startswith("cuda"):
                        torch.cuda.synchronize()
                    results.setdefault((label, batch), []).append(rate(fn, chips, batch, total))
    return [(label, batch, results[(label, batch)]) for label, _, _ in engines for batch in batches]


def dlib_torch_path() -> Path:
    from bench.faces.dlib_resnet import model_files

    return model_files()[1]


def machine() -> list[str]:
    import dlib

    try:
        with open("/proc/cpuinfo") as info:
            model = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor() or "unknown"
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return [(f"- CPU: {model}; {usable_cpus()} usable CPUs; torch {torch.__version__}, "
             f"cpu capability {torch.backends.cpu.get_cpu_capability()}, default threads {torch.get_num_threads()}"),
            (f"- dlib {dlib.__version__} (DLIB_USE_BLAS {dlib.DLIB_USE_BLAS}, DLIB_USE_CUDA {dlib.DLIB_USE_CUDA}); "
             f"GPU: {gpu}")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=Path, required=True, help="a folder of face photos (searched recursively)")
    parser.add_argument("--max-faces", type=int, default=400, help="stop collecting faces after this many")
    parser.add_argument("--max-side", type=int, default=1024, help="shrink larger photos to this side first")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32, 128], help="batch sizes timed")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch intra-op threads timed (CPU)")
    parser.add_argument("--device", default="cpu", help="where the torch engine runs (cpu, cuda)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    parser.add_argument("--dlib-images", type=int, default=64, help="chips dlib-bin describes per timing (at least a batch)")
    parser.add_argument("--torch-images", type=int, default=256, help="chips torch describes per timing (at least a batch)")
    parser.add_argument("--out", type=Path, help="also write the tables here (markdown)")
    args = parser.parse_args()

    lines = ["# dlib's face descriptor: torch vs dlib-bin", "", *machine(),
             f"- load average at start: {' '.join(f'{v:.1f}' for v in os.getloadavg())}", ""]
    print("\n".join(lines), flush=True)
    found = photos(args.photos, args.max_side)
    ref = DlibResNet(engine="dlib")
    chips, names, align_s = face_chips(ref, found, args.max_faces)
    if not len(chips):
        raise SystemExit(f"no faces found under {args.photos}")
    reference = ref.describe(chips)
    net = dlib_torch.load(dlib_torch_path(), args.device)
    per_batch = {b: dlib_torch.describe(net, chips, b) for b in (1, 32)}
    rows = ["## Agreement", "",
            (f"{len(chips)} faces found by dlib's HOG detector in {len(set(names))} of {len(found)} photos "
             f"under {args.photos}; chips by dlib's 5-point shape predictor and get_face_chip "
             f"({align_s * 1e3:.1f} ms a face). Reference: dlib-bin's compute_face_descriptor."), "",
            ("| torch batch | faces | cosine min | cosine 1st pct | cosine median | max abs diff | pairs | "
             "max pair-distance diff | decisions at 0.6 differing |"),
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for b, got in per_batch.items():
        a = agreement(reference, got)
        rows.append(f"| {b} | {a['faces']} | {a['cos_min']:.8f} | {a['cos_p01']:.8f} | {a['cos_median']:.8f} | "
                    f"{a['max_abs_diff']:.2e} | {a['pairs']} | {a['max_pair_distance_diff']:.2e} | "
                    f"{a['decisions_differing_at_0.6']} |")
    rows += ["", f"(descriptor norms: median {np.median(np.linalg.norm(reference, axis=1)):.3f})", ""]
    print("\n".join(rows), flush=True)
    lines += rows

    table = throughput(chips, args.batches, args.threads, args.device, args.rounds, args.dlib_images,
                       args.torch_images)
    base = {b: statistics.median(r) for label, b, r in table if label == "dlib-bin"}
    rows = ["## Throughput (descriptor only, chips in memory)", "",
            (f"Rounds: {args.rounds}, interleaved; dlib-bin timed on {args.dlib_images} chips, torch on "
             f"{args.torch_images} (or one batch if larger)."), "",
            "| engine | batch | images/s (median) | best | x dlib-bin (medians) |", "|---|---:|---:|---:|---:|"]
    for label, b, r in table:
        med = statistics.median(r)
        rows.append(f"| {label} | {b} | {med:.1f} | {max(r):.1f} | {med / base[b]:.1f} |")
    rows += ["", f"- load average at end: {' '.join(f'{v:.1f}' for v in os.getloadavg())}", ""]
    print("\n".join(rows), flush=True)
    lines += rows
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
