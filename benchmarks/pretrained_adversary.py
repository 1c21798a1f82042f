"""Pretrained vs from-scratch face re-identification, side by side, and the recognizer's throughput.

Reads real faces from a folder per person (``--folder DIR``, e.g. the ORL database) or the
synthetic default (``--synthetic``: fewshot_synth_faces' data at the quick profile), splits
the people in two (the from-scratch adversary trains its embedder on the first half; the
targets are the second half), and for identity, pixelate, blur, gaussian_noise and dp_pix at
two strengths each prints top-1 (with its clean reference and chance) and the privacy score
of ``face_reid`` (trained from scratch) and ``face_reid_pretrained`` (dlib's ResNet). Then
the embedding throughput on this machine's cores: MTCNN + alignment + descriptor, and the
descriptor alone.

    python benchmarks/pretrained_adversary.py --folder /data/orl --out pretrained.md
    python benchmarks/pretrained_adversary.py --synthetic
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.core.interfaces import Release, RunContext  # noqa: E402
from bench.core.registry import attacks, datasets, mechanisms  # noqa: E402
from bench.data.base import ImageSet, Splits  # noqa: E402
from bench.faces.align import locate  # noqa: E402
from bench.faces.recognizers import load_recognizer  # noqa: E402
from bench.release.dataset import apply_to_split  # noqa: E402

GRID = [("identity", {}), ("pixelate", {"block": 4}), ("pixelate", {"block": 8}), ("blur", {"radius": 2}),
        ("blur", {"radius": 4}), ("gaussian_noise", {"sigma": 25}), ("gaussian_noise", {"sigma": 75}),
        ("dp_pix", {"epsilon": 8, "block": 4}), ("dp_pix", {"epsilon": 1, "block": 4})]


def folder_splits(root: Path) -> Splits:
    """A folder per person -> train (first half of the people) and test (second half), images at their own size."""
    people = sorted(p for p in root.iterdir() if p.is_dir())
    images, labels = [], []
    for label, person in enumerate(people):
        for file in sorted(f for f in person.iterdir() if f.is_file()):
            array = np.array(Image.open(file).convert("RGB"))
            images.append(torch.from_numpy(array).permute(2, 0, 1))
            labels.append(label)
    sizes = {tuple(i.shape[-2:]) for i in images}
    if len(sizes) != 1:
        side = min(min(s) for s in sizes)
        images = [torch.nn.functional.interpolate(i[None].float(), size=(side, side), mode="area")[0].round().byte()
                  for i in images]
    x, y = torch.stack(images), torch.tensor(labels)
    own = y < len(people) // 2
    return Splits(root.name, {"train": ImageSet(x[own], y[own]), "test": ImageSet(x[~own], y[~own])}, f"folder:{root}")


def synthetic_splits(cache: Path) -> Splits:
    """fewshot_synth_faces' data at the quick profile."""
    from bench.core.registry import tasks

    task = tasks.get("fewshot_synth_faces")("quick")
    return datasets.get("synth_faces")().load(None, task.data_options(), cache)


def release(clean: Splits, name: str, params: dict, ctx: RunContext) -> Release:
    if name == "identity":
        return Release(clean, "identity", {}, 0, "identity")
    mech = mechanisms.get(name)(**params)
    out = {s: apply_to_split(mech, clean[s], ctx, f"release/{s}")[0] for s in clean.sets}
    return Release(clean.replace_images(out), name, mech.config, 0, f"{name}-{sorted(mech.config.items())}", instance=mech)


PRETRAINED = ("face_reid_pretrained", "face_reid_pretrained_adapted", "face_reid_pretrained_restored")


def table(clean: Splits, ctx: RunContext, enrol: int | None, epochs: int | None, max_ids: int | None,
          only: set[str] | None) -> list[str]:
    rows = ["| mechanism | face_reid top-1 (privacy) | pretrained top-1 (privacy) | TAR@FAR=1e-2 | adapted top-1 "
            "(privacy) | restored top-1 (privacy) |",
            "|---|---|---|---|---|---|"]
    enrolment = {**({} if enrol is None else {"enrol_per_id": enrol}), **({} if max_ids is None else {"max_ids": max_ids})}
    trained = attacks.get("face_reid")("quick", {**enrolment, **({} if epochs is None else {"epochs": epochs})})
    pretrained = [attacks.get(name)("quick", enrolment) for name in PRETRAINED]
    fmt = lambda o: f"{o.value:.3f} ({'undefined' if o.privacy() is None else f'{o.privacy():.3f}'})"  # noqa: E731
    for name, params in GRID:
        if only and name + "".join(f" {k}={v}" for k, v in params.items()) not in only and name not in only:
            continue
        released = release(clean, name, params, ctx)
        a = trained.run(clean, released, ctx)
        b, c, d = (attack.run(clean, released, ctx) for attack in pretrained)
        label = name + "".join(f" {k}={v}" for k, v in params.items())
        rows.append(f"| {label} | {fmt(a)} | {fmt(b)} | {b.metrics['tar_far1e-2']:.3f} | {fmt(c)} | {fmt(d)} |")
        print(rows[-1], flush=True)
    rows.append(f"clean references: face_reid top-1 {a.clean:.3f}; pretrained top-1 {b.clean:.3f}, TAR@FAR=1e-2 "
                f"{b.metrics['tar_far1e-2_clean']:.3f}, TAR@FAR=1e-3 {b.metrics['tar_far1e-3_clean']:.3f}; chance "
                f"{a.chance:.3f} ({int(a.metrics['identities'])} people, {a.trials} probes)")
    return rows


def throughput(images: torch.Tensor) -> list[str]:
    rec = load_recognizer("dlib")
    started = time.perf_counter()
    located = locate(images)
    located_s = time.perf_counter() - started
    started = time.perf_counter()
    chips = rec.chips(images, located)
    chips_s = time.perf_counter() - started
    started = time.perf_counter()
    rec.descriptor.compute_face_descriptor(chips)
    descriptor_s = time.perf_counter() - started
    n = len(images)
    total = located_s + chips_s + descriptor_s
    return [f"embedding {n} images of {tuple(images.shape[-2:])} on {os.cpu_count()} cores: "
            f"{n / total:.1f} images/s in all (MTCNN {located_s:.1f} s, dlib landmarks + chips {chips_s:.1f} s, "
            f"descriptor {descriptor_s:.1f} s = {n / descriptor_s:.1f} images/s)"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--folder", type=Path, help="a folder per person of real face photos")
    source.add_argument("--synthetic", action="store_true", help="fewshot_synth_faces' data (quick profile)")
    parser.add_argument("--enrol", type=int, help="enrolment photos per person, the rest are probes (default: 5 for "
                        "a folder, as fewshot_folder; the quick preset's 13 for --synthetic)")
    parser.add_argument("--epochs", type=int, help="epochs of the from-scratch embedder (default: 30 for a folder, "
                        "as fewshot_folder; the quick preset's for --synthetic)")
    parser.add_argument("--max-ids", type=int, help="target at most this many people (drawn by the seed)")
    parser.add_argument("--only", help="comma-separated rows to run: mechanism names or labels such as 'blur radius=4'")
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    parser.add_argument("--cache-dir", type=Path, help="keep trained models and embeddings here (default: temporary)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ctx = RunContext(device=torch.device("cpu"), seed=0, profile="quick", data_root=None,
                         cache_dir=args.cache_dir or Path(tmp))
        clean = folder_splits(args.folder) if args.folder else synthetic_splits(Path(tmp))
        what = f"folder {args.folder}" if args.folder else "synth_faces (quick)"
        test = clean["test"]
        head = [f"data: {what}; {len(torch.unique(clean['train'].labels))} training people, "
                f"{len(torch.unique(test.labels))} target people, images {tuple(test.images.shape[-2:])}"]
        print(head[0], flush=True)
        enrol = args.enrol if args.enrol or args.synthetic else 5
        epochs = args.epochs if args.epochs or args.synthetic else 30
        only = set(args.only.split(",")) if args.only else None
        rows = table(clean, ctx, enrol, epochs, args.max_ids, only)
        speed = throughput(test.images[:64])
        print(speed[0])
    if args.out:
        args.out.write_text("\n".join(head + [""] + rows + [""] + speed) + "\n")


if __name__ == "__main__":
    main()
