"""``bench cache verify|clean``: check and prune a cache directory."""

from __future__ import annotations

import argparse
import shutil

from bench.cli.common import add_location_args, cache_dir, check_locations
from bench.errors import BenchError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench cache``."""
    p = subparsers.add_parser("cache", help="verify or prune a cache directory (datasets, releases, models)",
                              description="Every cache entry carries its content key and a checksum of each file. "
                                          "'verify' checks them all; 'clean' removes damaged entries, half-written "
                                          "temporaries and files of older cache formats (--all: everything).")
    p.add_argument("action", choices=("verify", "clean"))
    p.add_argument("--all", action="store_true", help="clean: remove every entry, not only the bad ones")
    add_location_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Verifies or cleans; ``verify`` exits 1 when an entry is damaged."""
    from bench.storage.cache import Cache, remove_entry

    check_locations(args, writing=False)
    root = cache_dir(args)
    if root.exists() and not root.is_dir():
        raise BenchError(f"cache directory {root} is a file")
    if not root.is_dir():
        print(f"{root}: no cache here")
        return 0
    cache = Cache(root)
    checked = cache.verify()
    damaged = [(entry, problem) for entry, problem in checked if problem]
    strays = cache.strays()
    size = sum(entry.size for entry, _ in checked)
    if args.action == "verify":
        for entry, problem in damaged:
            print(f"damaged  {entry.kind}/{entry.key}: {problem}")
        for path in strays:
            print(f"stray    {path.relative_to(root)} (not an entry: 'bench cache clean' removes it)")
        print(f"{root}: {len(checked)} entries ({_size(size)}), {len(damaged)} damaged, {len(strays)} stray")
        return 1 if damaged else 0
    removed = 0
    for entry, problem in checked:
        if problem or args.all:
            remove_entry(entry.path)
            removed += 1
    for path in strays:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    print(f"{root}: removed {removed} entr{'y' if removed == 1 else 'ies'} and {len(strays)} stray file(s); "
          f"{len(checked) - removed} verified entries kept")
    return 0


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"

