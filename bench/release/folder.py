"""Obfuscating a folder of images for real use (``bench release``; its options are in :mod:`bench.cli.release_cmd`).

Unlike a benchmark release, the noise comes from the OS CSPRNG
(:class:`bench.release.secure_streams.SecureStreams`) and cannot be replayed; every output holds
pixels only; ``release.json`` states the claim with the delta that the Laplace
sampler's tail implies. Everything a user can get wrong is checked before any image is
processed or any file written; ``release.json`` is written last, so a folder without it
is an unfinished release.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np
import torch

from bench.core.params import parse_assignments
from bench.data.imageio import (
    ImageEntry,
    atomic_write,
    output_path,
    read_box_file,
    read_pixels,
    read_rgb,
    scan_folder,
    with_channels,
    write_image,
)
from bench.errors import BenchError
from bench.storage.folders import check_writable_folder

if TYPE_CHECKING:
    from bench.core.interfaces import Mechanism, PrivacyClaim
    from bench.release.secure_streams import DrawTally

MANIFEST = "release.json"
MANIFEST_SCHEMA = 1
_BATCH_VALUES = 1 << 24
_MAX_BATCH = 64

Group = tuple[int, int, int]
"""(height, width, channels) of a group of images released together: a one-channel (grey) image is released
with one channel, as the dataset loaders store it, so its mechanism runs at C = 1."""


@dataclass
class ReleasePlan:
    """A validated release.

    Attributes:
        mechanism: The configured mechanism (a template: fitted copies are made per size).
        source: Folder read.
        target: Folder written.
        fmt: ``png`` or ``jpeg``.
        device: Where the mechanism runs.
        images: Images to release, sorted by path.
        skipped: Files under ``source`` that are not released (not images).
        boxes: ``"detect"``, boxes per image from a CSV, or None for mechanisms without boxes.
        fit_on: Folder of public images the mechanism is fitted on, or None.
        public: The images under ``fit_on``.
        cache_dir: Where fitted models are cached (None: a temporary folder).
        overwrite: Whether existing outputs may be replaced.
    """

    mechanism: Mechanism
    source: Path
    target: Path
    fmt: str
    device: torch.device
    images: list[ImageEntry]
    skipped: list[PurePosixPath]
    boxes: str | dict[PurePosixPath, torch.Tensor] | None
    fit_on: Path | None
    public: list[ImageEntry]
    cache_dir: Path | None
    overwrite: bool


@dataclass
class ReleaseOutcome:
    """What a release did.

    Attributes:
        claim: The claim with the tail's delta included (None without a formal claim).
        tails: Size label (``WxH``, ``WxHx1`` for grey) -> (delta from the sampler's tail, why).
        sizes: Size label -> number of images.
        faceless: Images in which no face box was found or given (released unchanged by
            face mechanisms).
    """

    claim: PrivacyClaim | None
    tails: dict[str, tuple[float, str]]
    sizes: dict[str, int]
    faceless: int


def run(args: argparse.Namespace) -> int:
    """Validates the release, performs it and prints a summary."""
    from bench.system.progress import Display, interactive

    started = time.perf_counter()
    release_plan = plan(args)
    with Display(interactive=interactive() and not args.quiet, lines=args.verbose) as display:
        emitter = display.emitter()
        emitter.start(f"release {args.mechanism}")
        outcome = execute(release_plan, emitter.log, emitter.progress)
    print(summary(release_plan, outcome, time.perf_counter() - started))
    return 0


def plan(args: argparse.Namespace) -> ReleasePlan:
    """Checks everything a user can get wrong; computes and writes nothing.

    Raises:
        BenchError: The first mistake found.
    """
    from bench.core.registry import load_mechanism_file, mechanisms
    from bench.system.devices import resolve_device

    if args.mechanism_file is not None:
        load_mechanism_file(args.mechanism_file)
    mechanism = mechanisms.get(args.mechanism)(**parse_assignments(args.param))
    device = resolve_device(args.device)
    source, target = _check_folders(args.source, args.target)
    fit_on = _check_fit_on(mechanism, args.fit_on, source)
    if args.cache_dir is not None:
        check_writable_folder("--cache-dir", args.cache_dir)
    box_source = _check_box_source(mechanism, args.boxes)
    images, skipped = scan_folder(source)
    if not images:
        raise BenchError(f"--in {source}: no images found ({len(skipped)} other files)")
    _check_outputs(images, target, args.format, args.overwrite)
    boxes: str | dict[PurePosixPath, torch.Tensor] | None = box_source
    if box_source not in (None, "detect"):
        boxes = read_box_file(Path(box_source), images)
    public: list[ImageEntry] = []
    if fit_on is not None:
        public, _ = scan_folder(fit_on)
        if not public:
            raise BenchError(f"--fit-on {fit_on}: no images found")
        shared = {e.digest for e in public} & {e.digest for e in images}
        if shared:
            raise BenchError(f"--fit-on {fit_on}: {len(shared)} of its images are among the images being released; "
                             "fit on public images only")
    return ReleasePlan(mechanism, source, target, args.format, device, images, skipped, boxes, fit_on, public,
                       args.cache_dir, args.overwrite)


def _check_folders(source: Path, target: Path) -> tuple[Path, Path]:
    if not source.is_dir():
        raise BenchError(f"--in {source}: no such folder")
    if target.exists() and not target.is_dir():
        raise BenchError(f"--out {target}: exists and is not a folder")
    src, dst = source.resolve(), target.resolve()
    if _overlap(src, dst):
        raise BenchError(f"--out {target} and --in {source} overlap; write the release to a separate folder")
    return src, dst


def _overlap(a: Path, b: Path) -> bool:
    return a == b or a in b.parents or b in a.parents


def _check_fit_on(mechanism: Mechanism, fit_on: Path | None, source: Path) -> Path | None:
    from bench.core.interfaces import Mechanism

    name = type(mechanism).name
    needs_fit = type(mechanism).fit is not Mechanism.fit
    if needs_fit and fit_on is None:
        raise BenchError(f"mechanism {name!r} is fitted on data: pass --fit-on DIR with public images "
                         "(never the images being released)")
    if not needs_fit and fit_on is not None:
        raise BenchError(f"mechanism {name!r} is not fitted on data; drop --fit-on")
    if fit_on is None:
        return None
    if not fit_on.is_dir():
        raise BenchError(f"--fit-on {fit_on}: no such folder")
    if _overlap(fit_on.resolve(), source):
        raise BenchError(f"--fit-on {fit_on} overlaps --in: fit on public images, never on the images being released")
    return fit_on.resolve()


def _check_box_source(mechanism: Mechanism, boxes: str | None) -> str | None:
    name = type(mechanism).name
    if not type(mechanism).uses_boxes:
        if boxes is not None:
            raise BenchError(f"mechanism {name!r} does not use face boxes; drop --boxes")
        return None
    if boxes is None or boxes == "detect":
        return "detect"
    if not Path(boxes).is_file():
        raise BenchError(f"--boxes {boxes}: expected 'detect' or an existing CSV file")
    return boxes


def _check_outputs(images: list[ImageEntry], target: Path, fmt: str, overwrite: bool) -> None:
    seen: dict[str, PurePosixPath] = {}
    for entry in images:
        out = output_path(entry.relative, fmt)
        key = str(out).casefold()
        if key in seen:
            raise BenchError(f"{seen[key]} and {entry.relative} would both be written to {out}; rename one")
        seen[key] = entry.relative
    if overwrite:
        return
    existing = [str(output_path(e.relative, fmt)) for e in images if (target / output_path(e.relative, fmt)).exists()]
    if (target / MANIFEST).exists():
        existing.insert(0, MANIFEST)
    if existing:
        raise BenchError(f"--out {target}: {len(existing)} files already exist (e.g. {existing[0]}); "
                         "pass --overwrite to replace them")


def execute(release_plan: ReleasePlan, log: Callable[[str], None], progress: Callable[..., Iterable]) -> ReleaseOutcome:
    """Fits (if needed), obfuscates every image group by group and writes the outputs and the manifest."""
    from bench.release.secure_streams import DrawTally, release_claim, tail_delta

    p = release_plan
    groups: dict[Group, list[ImageEntry]] = {}
    for entry in p.images:
        groups.setdefault((entry.height, entry.width, entry.channels), []).append(entry)
    fitted = _fit_groups(p, list(groups), log)
    if p.overwrite:
        (p.target / MANIFEST).unlink(missing_ok=True)
    claim = p.mechanism.claim()
    faceless = 0
    batches = [(size, chunk) for size, entries in groups.items() for chunk in _batches(entries, size)]
    drawn: dict[Group, DrawTally] = {size: DrawTally() for size in groups}
    for size, chunk in progress(batches, total=len(batches), desc="release"):
        missing, tally = _release_batch(p, fitted.get(size, p.mechanism), chunk)
        faceless += missing
        drawn[size].laplace = max(drawn[size].laplace, tally.laplace)
        drawn[size].normal = max(drawn[size].normal, tally.normal)
    tails = {_label(g): tail_delta(fitted.get(g, p.mechanism), claim, g[:2], drawn[g], g[2]) for g in groups}
    outcome = ReleaseOutcome(release_claim(claim, tails), tails, {_label(s): len(e) for s, e in groups.items()},
                             faceless)
    text = json.dumps(manifest(p, outcome), indent=2, sort_keys=True) + "\n"
    atomic_write(p.target / MANIFEST, lambda f: f.write(text.encode()))
    return outcome


def _release_batch(p: ReleasePlan, mechanism: Mechanism, chunk: list[ImageEntry]) -> tuple[int, DrawTally]:
    """Reads, obfuscates and writes images of one size and channels; returns the faceless count and draws per image."""
    from bench.release import guard as mechanism_guard
    from bench.release.secure_streams import SecureStreams

    images = torch.from_numpy(np.stack([read_pixels(p.source / e.relative, e.channels) for e in chunk]))
    # a fresh [N, C, H, W] tensor: permuting [N, H, W, 1] leaves a stride on the size-1 channel axis that kernels
    # viewing the bytes as words reject
    images = torch.empty(images.permute(0, 3, 1, 2).shape, dtype=torch.uint8).copy_(images.permute(0, 3, 1, 2))
    images = images.to(p.device)
    boxes, missing = _batch_boxes(p, chunk, images)
    streams = SecureStreams(len(chunk), p.device)
    released = mechanism_guard.apply(mechanism, images, generator=streams, boxes=boxes)
    for entry, pixels in zip(chunk, released.permute(0, 2, 3, 1).cpu().numpy()):
        write_image(pixels, p.target / output_path(entry.relative, p.fmt), p.fmt)
    return missing, streams.tally


def _label(group: Group) -> str:
    return f"{group[1]}x{group[0]}" + ("x1" if group[2] == 1 else "")


def _batches(entries: list[ImageEntry], group: Group) -> list[list[ImageEntry]]:
    step = max(1, min(_MAX_BATCH, _BATCH_VALUES // (group[2] * group[0] * group[1])))
    return [entries[i : i + step] for i in range(0, len(entries), step)]


def _batch_boxes(
    p: ReleasePlan, chunk: list[ImageEntry], images: torch.Tensor
) -> tuple[list[torch.Tensor] | None, int]:
    if p.boxes is None:
        return None, 0
    if p.boxes == "detect":
        from bench.faces.detect import detect_boxes

        found = detect_boxes(images, p.device)
    else:
        found = [p.boxes[e.relative] for e in chunk]
    return [b.to(p.device) for b in found], sum(1 for b in found if len(b) == 0)


def _fit_groups(p: ReleasePlan, sizes: list[Group], log: Callable[[str], None]) -> dict[Group, Mechanism]:
    """Fits one copy of the mechanism per image size and channels on the public images resized to it."""
    if p.fit_on is None:
        return {}
    from bench.core.interfaces import ImageSet, RunContext
    from bench.release import guard as mechanism_guard

    public = [read_rgb(p.fit_on / e.relative) for e in p.public]
    fitted = {}
    with tempfile.TemporaryDirectory(prefix="bench-release-") as scratch:
        cache = p.cache_dir if p.cache_dir is not None else Path(scratch)
        ctx = RunContext(device=p.device, seed=0, profile="release", data_root=None, cache_dir=cache, log=log)
        for height, width, channels in sizes:
            at = _label((height, width, channels))
            log(f"fitting {type(p.mechanism).name} on {len(public)} public images at {at}")
            stack = torch.stack([_resized(with_channels(pixels, channels), height, width) for pixels in public])
            mechanism = type(p.mechanism)(**p.mechanism.config)
            mechanism_guard.fit(mechanism, ImageSet(stack, torch.zeros(len(stack), dtype=torch.int64)), ctx)
            fitted[(height, width, channels)] = mechanism
    return fitted


def _resized(pixels: np.ndarray, height: int, width: int) -> torch.Tensor:
    x = torch.from_numpy(pixels).permute(2, 0, 1).unsqueeze(0)
    if tuple(x.shape[-2:]) != (height, width):
        x = torch.nn.functional.interpolate(x.float(), size=(height, width), mode="bilinear", antialias=True)
        x = x.round().clamp(0, 255).to(torch.uint8)
    return x[0].contiguous()


def manifest(p: ReleasePlan, outcome: ReleaseOutcome) -> dict[str, Any]:
    """Returns the release.json content: the mechanism, its claim, the noise source and counts (no input metadata)."""
    from bench.core.version import __version__
    from bench.release.secure_streams import SOURCE, laplace_max_abs, laplace_tail_mass, normal_max_abs

    mechanism = type(p.mechanism)
    out: dict[str, Any] = {
        "schema": MANIFEST_SCHEMA,
        "privbench": __version__,
        "mechanism": mechanism.name,
        "mechanism_version": mechanism.version,
        "params": dict(p.mechanism.config),
        "claim": None if outcome.claim is None else outcome.claim.to_dict(),
        "noise": {
            "source": SOURCE,
            "reproducible": False,
            "laplace_max_abs_scales": laplace_max_abs(),
            "laplace_tail_mass": laplace_tail_mass(laplace_max_abs()),
            "normal_max_abs": normal_max_abs(),
            "tail": {size: {"delta": delta, "why": why} for size, (delta, why) in outcome.tails.items()},
        },
        "count": len(p.images),
        "sizes": outcome.sizes,
        "format": p.fmt,
        "metadata": "none: pixels only (no EXIF, XMP, ICC profile, text chunks or thumbnails)",
        "skipped_files": len(p.skipped),
        "first_frame_only": sum(1 for e in p.images if e.frames > 1),
    }
    if p.boxes is not None:
        out["boxes"] = {"source": "detect (MTCNN)" if p.boxes == "detect" else "csv",
                        "images_without_faces": outcome.faceless}
    if p.fit_on is not None:
        out["fitted_on_public_images"] = len(p.public)
    return out


def summary(p: ReleasePlan, outcome: ReleaseOutcome, seconds: float) -> str:
    """Returns the one-paragraph summary printed after a release that took ``seconds`` in all."""
    name = type(p.mechanism).name
    params = ", ".join(f"{k}={v}" for k, v in p.mechanism.config.items())
    rate = len(p.images) / seconds if seconds > 0 else float("inf")
    sizes = len(outcome.sizes)
    parts = [
        f"Released {len(p.images)} images ({sizes} size{'s' if sizes != 1 else ''}) from {p.source} "
        f"to {p.target} as {p.fmt.upper()} with {name}({params}) in {seconds:.1f} s ({rate:.0f} images/s).",
        f"Claim: {outcome.claim}." if outcome.claim is not None else "No formal claim.",
        "Noise from the OS CSPRNG: not reproducible; outputs carry pixels only (no EXIF, XMP, ICC, text, thumbnails).",
    ]
    if p.boxes is not None and outcome.faceless:
        parts.append(f"WARNING: {outcome.faceless} images had no face box and were released without face obfuscation.")
    if p.skipped:
        parts.append(f"Skipped {len(p.skipped)} files that are not images PIL can read (e.g. {p.skipped[0]}).")
    frames = sum(1 for e in p.images if e.frames > 1)
    if frames:
        parts.append(f"{frames} multi-frame images: only the first frame was released.")
    parts.append(f"Manifest: {p.target / MANIFEST}.")
    return " ".join(parts)
