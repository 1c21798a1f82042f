"""``bench cache verify|clean``: check and prune a cache directory, touching only what the cache wrote."""

from __future__ import annotations

import argparse
import os

from bench.cli.common import add_location_args, cache_dir, check_locations
from bench.errors import BenchError

FOREIGN = "not PrivBench's, left in place"
"""How a file the cache did not write is listed (it is never removed)."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench cache``."""
    p = subparsers.add_parser("cache", help="verify or prune a cache directory (datasets, releases, models)",
                              description="Every cache entry carries its content key and a checksum of each file. "
                                          "'verify' checks them all; 'clean' removes damaged entries and "
                                          "temporaries left by killed processes (--all: every entry). Only what "
                                          "the cache wrote is ever removed: any other file or folder is listed as "
                                          "not PrivBench's and left in place.")
    p.add_argument("action", choices=("verify", "clean"))
    p.add_argument("--all", action="store_true", help="clean: remove every entry, not only the bad ones")
    add_location_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Verifies or cleans; ``verify`` exits 1 when an entry is damaged.

    Raises:
        BenchError: The cache directory is a file, or a folder given with --cache-dir
            (or $BENCH_CACHE) does not exist.
    """
    from bench.storage.cache import Cache, remove_entry
    from bench.storage.cache_layout import remove_temporary, survey

    check_locations(args, writing=False)
    root = cache_dir(args)
    if root.exists() and not root.is_dir():
        raise BenchError(f"cache directory {root} is a file")
    if not root.is_dir():
        if args.cache_dir is not None or os.environ.get("BENCH_CACHE"):
            given = "--cache-dir" if args.cache_dir is not None else "$BENCH_CACHE"
            raise BenchError(f"{given}: no such folder {root}")
        print(f"{root}: no cache here")
        return 0
    cache = Cache(root, sweep=False)  # verify changes nothing; clean removes what it lists
    checked = cache.verify()
    damaged = [(entry, problem) for entry, problem in checked if problem]
    found = survey(root)
    size = sum(entry.size for entry, _ in checked)
    for path in found.foreign:
        print(f"foreign  {path.relative_to(root)} ({FOREIGN})")
    if args.action == "verify":
        for entry, problem in damaged:
            print(f"damaged  {entry.kind}/{entry.key}: {problem}")
        for path in found.stale:
            print(f"stale    {path.relative_to(root)} (a temporary of a killed process: "
                  "'bench cache clean' removes it)")
        print(f"{root}: {len(checked)} entries ({_size(size)}), {len(damaged)} damaged, {len(found.stale)} stale "
              f"temporar{'y' if len(found.stale) == 1 else 'ies'}, {len(found.foreign)} foreign ({FOREIGN})")
        return 1 if damaged else 0
    removed = 0
    for entry, problem in checked:
        if problem or args.all:
            remove_entry(entry.path)
            removed += 1
    for path in found.stale:
        remove_temporary(path)
    busy = f", {len(found.busy)} being written left" if found.busy else ""
    print(f"{root}: removed {removed} entr{'y' if removed == 1 else 'ies'} and {len(found.stale)} stale "
          f"temporar{'y' if len(found.stale) == 1 else 'ies'}; {len(checked) - removed} verified entries kept"
          f"{busy}; {len(found.foreign)} foreign file(s) {FOREIGN}")
    return 0


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
