"""``bench release``: obfuscate a folder of images for real use (the work is :mod:`bench.release.folder`).

Only the options live here, so that ``bench --help`` imports neither torch nor numpy.
"""

from __future__ import annotations

import argparse

from bench.cli.common import path_arg


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench release``."""
    p = subparsers.add_parser(
        "release", help="obfuscate a folder of images for real use (secure noise, no metadata)",
        description="Obfuscate every image under --in and write it under --out (same relative paths): noise from "
                    "the OS CSPRNG, no metadata, and a release.json manifest with the claim.")
    p.add_argument("--mechanism", required=True, help="registered mechanism name (bench list mechanisms)")
    p.add_argument("--param", action="append", metavar="K=V", help="mechanism parameter (repeatable)")
    p.add_argument("--in", dest="source", type=path_arg, required=True, metavar="DIR", help="folder of images (recursive)")
    p.add_argument("--out", dest="target", type=path_arg, required=True, metavar="DIR",
                   help="folder to write (not overlapping --in)")
    p.add_argument("--format", choices=("png", "jpeg"), default="png", help="output format (default png)")
    p.add_argument("--boxes", default=None, metavar="detect|FILE.csv",
                   help="face boxes for face mechanisms: MTCNN (default) or a CSV of file,x1,y1,x2,y2")
    p.add_argument("--fit-on", type=path_arg, default=None, metavar="DIR",
                   help="public images to fit a mechanism on (dp_latent), never the released ones")
    p.add_argument("--cache-dir", type=path_arg, default=None, metavar="DIR", help="keep fitted models here (default: a temporary folder)")
    p.add_argument("--device", default="auto", metavar="DEVICE", help="auto | cpu | cuda | cuda:N (default auto)")
    p.add_argument("--mechanism-file", type=path_arg, default=None, metavar="FILE", help="a Python file that registers a mechanism")
    p.add_argument("--overwrite", action="store_true", help="replace files that already exist under --out")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.add_argument("-v", "--verbose", action="store_true", help="progress lines even when stderr is not a terminal")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Validates the release, performs it and prints a summary."""
    from bench.release.folder import run as release

    check_release_paths(args)
    return release(args)


def check_release_paths(args: argparse.Namespace) -> None:
    """Checks the folders a release reads and writes by name and permission; creates nothing.

    Raises:
        BenchError: A name over 255 bytes, or an --out or --cache-dir that cannot be written.
    """
    from bench.storage.folders import check_path_name, check_writable_folder

    check_path_name("--in", args.source)
    for flag, folder in (("--out", args.target), ("--cache-dir", args.cache_dir)):
        if folder is not None:
            check_writable_folder(flag, folder)
    for flag, path in (("--fit-on", args.fit_on), ("--boxes", args.boxes), ("--mechanism-file", args.mechanism_file)):
        if path is not None:
            check_path_name(flag, path)
