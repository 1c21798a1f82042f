"""``bench mechanisms show NAME``: a sample sheet of a mechanism over parameter settings.

The images come from ``--dataset`` with the loader options of ``--set task.data.NAME=VALUE``
(as ``bench run`` takes them): a user's tree is ``--set task.data.root=DIR``, or, for the
datasets read from a tree (``folder`` and its kinds), ``--data-root DIR``.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from bench.core.params import parse_assignments
from bench.errors import BenchError

if TYPE_CHECKING:
    import torch

DATASET_OPTIONS: dict[str, dict[str, Any]] = {"synth_faces": {"n_ids": 20, "per_id": 4}}
"""Loader options of the datasets sheets are drawn from (small, fast to generate)."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench mechanisms show``."""
    from bench.cli.common import add_location_args, add_set_option, path_arg

    p = subparsers.add_parser("mechanisms", help="inspect mechanisms")
    actions = p.add_subparsers(dest="mechanisms_command", metavar="ACTION")
    actions.required = True
    show = actions.add_parser("show", help="write a sample sheet: clean images and one row per setting")
    show.add_argument("name", metavar="NAME", help="registered mechanism")
    show.add_argument("--param", action="append", default=[], metavar="K=V", help="fixed parameter (repeatable)")
    show.add_argument("--sweep", action="append", default=[], metavar="K=V1,V2,...",
                      help="one row per value; several sweeps give their product (repeatable)")
    show.add_argument("--dataset", default="synth_faces", help="dataset the images come from (default: synth_faces)")
    show.add_argument("--data-root", type=path_arg, default=None,
                      help="root of real datasets (default: $BENCH_DATA); for folder: the tree itself")
    add_set_option(show, "a loader option of --dataset, as bench run takes it: task.data.root=DIR, task.data.size=64")
    show.add_argument("--n", type=int, default=8, help="images per row (default: 8)")
    show.add_argument("--scale", type=int, default=1, help="integer upscaling of the images (default: 1)")
    show.add_argument("--palette", action="store_true", help="save with a 256-colour palette (smaller file)")
    show.add_argument("--seed", type=int, default=0, help="seed of the mechanism's noise, in [0, 2^63) (default: 0)")
    show.add_argument("--device", default="cpu", help="auto | cpu | cuda | cuda:N (default: cpu)")
    show.add_argument("--out", type=path_arg, required=True, help="PNG file to write")
    add_location_args(show)
    show.set_defaults(func=_show_command)


def _show_command(args: argparse.Namespace) -> int:
    from bench.cli.common import cache_dir, data_root, parse_overrides

    path = show_mechanism(
        args.name,
        params=parse_assignments(args.param),
        sweep=parse_sweeps(args.sweep),
        dataset=args.dataset,
        data_options=loader_options(args.dataset, parse_overrides(args.overrides), args.data_root),
        n=args.n,
        out=args.out,
        seed=args.seed,
        device=args.device,
        cache_dir=cache_dir(args),
        data_root=data_root(args.data_root),
        scale=args.scale,
        palette=args.palette,
    )
    print(path)
    return 0


def parse_sweeps(items: Sequence[str] | None) -> dict[str, list[str]]:
    """Parses ``["k=v1,v2", ...]`` into name -> values.

    Raises:
        BenchError: An item without ``=``, a name given twice, or an empty value list.
    """
    out: dict[str, list[str]] = {}
    for key, value in parse_assignments(list(items or [])).items():
        values = [v.strip() for v in value.split(",") if v.strip()]
        if not values:
            raise BenchError(f"--sweep {key}= needs at least one value")
        out[key] = values
    return out


def loader_options(dataset: str, overrides: Mapping[str, Mapping[str, str]], tree: Path | None = None
                   ) -> dict[str, Any]:
    """Returns the loader options of a sheet's dataset: its small defaults updated by ``--set task.data.*``.

    Values are read as YAML, as ``bench run`` reads them. A dataset read from a tree
    (:class:`~bench.data.loaders.folder.Folder` and its kinds) takes ``tree`` (``--data-root``)
    as its ``root`` when ``--set task.data.root`` does not name one.

    Raises:
        BenchError: A ``--set`` outside ``task.data``, or an unknown dataset.
    """
    import yaml

    from bench.core.registry import datasets
    from bench.data.loaders.folder import Folder

    for section, values in overrides.items():
        for key in values:
            if section != "task" or not key.startswith("data.") or key == "data.":
                raise BenchError(f"--set {section}.{key}: bench mechanisms show takes only loader options of "
                                 f"--dataset, as task.data.NAME=VALUE (e.g. task.data.root=DIR)")
    options = dict(DATASET_OPTIONS.get(dataset, {}))
    for key, value in overrides.get("task", {}).items():
        options[key.removeprefix("data.")] = yaml.safe_load(value)
    if tree is not None and "root" not in options and issubclass(datasets.get(dataset), Folder):
        options["root"] = str(tree)
    return options


def settings(params: Mapping[str, Any], sweep: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Returns one parameter dict per row: the fixed params with each combination of swept values.

    Raises:
        BenchError: A name both fixed and swept.
    """
    both = set(params) & set(sweep)
    if both:
        raise BenchError(f"parameter {sorted(both)[0]!r} is given both by --param and --sweep")
    names = list(sweep)
    return [{**params, **dict(zip(names, combo))} for combo in itertools.product(*(sweep[k] for k in names))]


def _sample(images: torch.Tensor, n: int) -> torch.Tensor:
    import torch

    index = torch.linspace(0, len(images) - 1, min(n, len(images))).round().long()
    return index


def _load_images(dataset: str, cache_dir: Path, data_root: Path | None, n: int, options: Mapping[str, Any]):
    from bench.data import load_dataset

    splits = load_dataset(dataset, data_root, options, cache_dir)
    shown = splits["test"] if "test" in splits else next(iter(splits.sets.values()))
    public = splits["train"] if "train" in splits else shown
    return shown.subset(_sample(shown.images, n)), public


def _label(name: str, setting: Mapping[str, Any], mech) -> str:
    text = name + (": " + ", ".join(f"{k}={v}" for k, v in setting.items()) if setting else "")
    claim = mech.claim()
    return f"{text}\n{claim}" if claim is not None else text


def show_mechanism(
    name: str,
    *,
    params: Mapping[str, Any] | None = None,
    sweep: Mapping[str, Sequence[Any]] | None = None,
    dataset: str = "synth_faces",
    data_options: Mapping[str, Any] | None = None,
    n: int = 8,
    out: str | Path = "sheet.png",
    seed: int = 0,
    device: str | torch.device = "cpu",
    cache_dir: str | Path = ".bench-cache",
    data_root: Path | None = None,
    images=None,
    public=None,
    scale: int = 1,
    palette: bool = False,
) -> Path:
    """Writes a sample sheet of a mechanism: a clean row, then one row per setting.

    Args:
        name: Registered mechanism name.
        params: Fixed parameter values (strings or Python values).
        sweep: Parameter name -> values; rows are the product of the sweeps.
        dataset: Dataset the images come from (its test split, ``n`` images spread over it).
        data_options: Its loader options (None: the small defaults of :data:`DATASET_OPTIONS`).
        n: Images per row.
        out: PNG path to write.
        seed: Seed of the mechanism's per-image streams.
        device: Device the mechanism runs on: auto, cpu, cuda or cuda:N (see :func:`bench.system.devices.resolve_device`).
        cache_dir: Cache for the dataset and fitted models.
        data_root: Root of real datasets.
        images: An ImageSet to show instead of loading ``dataset`` (boxes used if present).
        public: The ImageSet mechanisms fit on; defaults to the dataset's train split.
        scale: Integer upscaling of the images in the sheet.
        palette: Save the sheet with a 256-colour palette.

    Returns:
        The path written.

    Raises:
        BenchError: Unknown mechanism or dataset, invalid parameters, sweeps, seed, device or
            output file (all checked before any image is loaded).
    """
    from bench.cell.plan import check_seed
    from bench.cell.sheets import check_sheet_path, sample_sheet
    from bench.core.interfaces import RunContext
    from bench.core.registry import datasets, mechanisms
    from bench.randomness.streams import Streams
    from bench.release import guard as mechanism_guard
    from bench.storage.folders import check_writable_file, check_writable_folder
    from bench.system.devices import resolve_device

    cls = mechanisms.get(name)
    rows_params = settings(dict(params or {}), dict(sweep or {}))
    configured = [cls(**setting) for setting in rows_params]  # every setting validated before any work
    if n < 1:
        raise BenchError(f"--n must be at least 1, got {n}")
    if not 1 <= scale <= 16:
        raise BenchError(f"--scale must be an integer in [1, 16], got {scale}")
    check_seed(seed)
    device = resolve_device(str(device))
    check_writable_file("--out", Path(out))
    out = check_sheet_path(out)
    cache_dir = Path(cache_dir)
    options = dict(DATASET_OPTIONS.get(dataset, {}) if data_options is None else data_options)
    if images is None:  # the dataset is generated into (or read from) the cache
        check_writable_folder("--cache-dir", cache_dir)
        datasets.get(dataset)().inspect(data_root, options)  # missing data and bad options, before any work
        images, loaded_public = _load_images(dataset, cache_dir, data_root, n, options)
        public = public if public is not None else loaded_public
    else:
        images = images.subset(_sample(images.images, n))
        public = public if public is not None else images
    boxes = images.boxes
    if cls.uses_boxes and boxes is None:
        from bench.faces.detect import detect_boxes

        boxes = detect_boxes(images.images, device)
    ctx = RunContext(device=device, seed=seed, profile="smoke", data_root=data_root, cache_dir=cache_dir)
    batch = images.images.to(device)
    streams = Streams.for_images(seed, f"sheet/{name}", len(batch), device=device)
    rows = [("clean", images.images)]
    for setting, mech in zip(rows_params, configured):
        mechanism_guard.fit(mech, public, ctx)
        released = mechanism_guard.apply(mech, batch, generator=streams, boxes=boxes if cls.uses_boxes else None)
        rows.append((_label(name, setting, mech), released.cpu()))
    return sample_sheet(rows, out, scale=scale, palette=palette)
