"""How the detection chain aligns grey faces, clean and degraded, and what it does to dlib's top-1.

Reads a folder per person (``--folder DIR``: the ORL or Yale faces, grey; default the
committed ORL fixture) and, for the clean photos, blur radius 2, the photos in dim light (a
fifth of the contrast) and both, prints how many faces each method aligned with MTCNN
alone (the pipeline before the chain) and with the chain (MTCNN, then dlib's HOG detector,
then the fixed box), and dlib's ResNet top-1 with each: the first photo of each person
enrolled (clean), the others probed (degraded), chance 1 / people.

    python benchmarks/face_chain.py --folder /data/orl
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.faces.chain import describe, locate_faces  # noqa: E402
from bench.faces.identify import Gallery, hits  # noqa: E402
from bench.faces.recognizers import load_recognizer  # noqa: E402
from mechanisms._blur import gaussian_blur  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "faces_orl"


def read(folder: Path | None) -> tuple[torch.Tensor, np.ndarray]:
    """Grey uint8 [N, 1, H, W] photos and their person numbers (a folder per person, or the fixture's s<P>_<I>.png)."""
    if folder is None:
        files = sorted(FIXTURE.glob("s*_*.png"))
        people = [f.stem.split("_")[0] for f in files]
    else:
        files = sorted(f for d in sorted(folder.iterdir()) if d.is_dir() for f in sorted(d.iterdir()) if f.is_file())
        people = [f.parent.name for f in files]
    images = torch.stack([torch.from_numpy(np.array(Image.open(f).convert("L")))[None] for f in files])
    names = sorted(set(people))
    return images, np.array([names.index(p) for p in people])


def top1(rec, images: torch.Tensor, probes: torch.Tensor, labels: np.ndarray, located, located_probes) -> float:
    """dlib's top-1: each person's first photo enrolled clean, the others probed as given."""
    first = np.r_[True, labels[1:] != labels[:-1]]
    gallery = Gallery.enrol(rec.embed(images[first], located.subset(torch.from_numpy(first))), labels[first])
    rest = torch.from_numpy(~first)
    emb = rec.embed(probes[rest], located_probes.subset(rest))
    return float(hits(gallery.scores(emb), gallery.ids, labels[~first]).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=None, help="a folder per person (default: the ORL fixture)")
    args = parser.parse_args()
    images, labels = read(args.folder)
    dim = (images.float() * 0.2 + 100).round().to(torch.uint8)
    conditions = {"clean": images, "blur r=2": gaussian_blur(images, 2), "dim": dim, "dim + blur r=2":
                  gaussian_blur(dim, 2)}
    rec = load_recognizer("dlib")
    print(f"{len(images)} photos of {labels.max() + 1} people, {tuple(images.shape[-2:])}; chance "
          f"{1 / (labels.max() + 1):.3f}")
    print("| photos | MTCNN alone | chain | dlib top-1, MTCNN alone -> chain | chain s |")
    print("|---|---|---|---|---|")
    clean = {"before": locate_faces(images, detectors=("mtcnn",)), "after": locate_faces(images)}
    for name, x in conditions.items():
        before = locate_faces(x, detectors=("mtcnn",))
        started = time.perf_counter()
        after = locate_faces(x)
        seconds = time.perf_counter() - started
        t_before = top1(rec, images, x, labels, clean["before"], before)
        t_after = top1(rec, images, x, labels, clean["after"], after)
        print(f"| {name} | {describe(before.counts())} | {describe(after.counts())} | {t_before:.3f} -> "
              f"{t_after:.3f} | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
