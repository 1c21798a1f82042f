"""``bench relocate``: a copied or moved results directory reads its runs' artifacts from where it is now."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench relocate``."""
    p = subparsers.add_parser("relocate", help="point a copied or moved results directory's runs at its own artifacts",
                              description="MLflow keeps absolute artifact locations: after copying or moving a "
                                          "results directory, its runs still read their artifacts from the old "
                                          "folder. This rewrites them to RESULTS_DIR/artifacts (sqlite store only), "
                                          "so 'mlflow ui --backend-store-uri sqlite:///RESULTS_DIR/mlflow.db' and "
                                          "every bench command find them.")
    p.add_argument("--results-dir", type=Path, default=Path("results"), help="the copied results directory")
    p.set_defaults(func=relocate_cmd)


def relocate_cmd(args: argparse.Namespace) -> int:
    """Rewrites the locations and says what changed."""
    from bench.storage.folders import check_path_name
    from bench.storage.tracking.relocate import relocate

    check_path_name("--results-dir", args.results_dir)
    old, changed = relocate(args.results_dir)
    if old is None:
        print(f"{args.results_dir}: artifact locations already point here; nothing to do")
    else:
        print(f"{args.results_dir}: {changed} artifact location(s) moved from {old} to "
              f"{(args.results_dir.resolve() / 'artifacts').as_uri()}")
    return 0
