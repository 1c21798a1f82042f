"""``bench tune``: Optuna NSGA-II over a mechanism's parameters, maximising utility and privacy."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.cli.common import add_location_args, cache_dir, data_root, parse_overrides


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench tune``."""
    p = subparsers.add_parser(
        "tune", help="search a mechanism's parameters for the utility-privacy Pareto front (Optuna NSGA-II)",
        description="Multi-objective tuning of one mechanism on one benchmark. Every trial is an ordinary cell "
                    "logged to MLflow. Start the same command on several machines with one --storage to share "
                    "the study; --trials is the study's total.",
    )
    p.add_argument("--mechanism", required=True, help="registered mechanism name")
    p.add_argument("--task", required=True, help="registered task (benchmark) name")
    p.add_argument("--trials", type=int, default=60, help="total trials of the study over all workers (default 60)")
    p.add_argument("--storage", default=None,
                   help="sqlite:///F.db, postgresql://..., or journal:PATH (default: journal file in RESULTS_DIR)")
    p.add_argument("--study", default=None, help="study name (default: derived from task, mechanism, profile, seed)")
    p.add_argument("--param", action="append", metavar="K=V", help="hold a parameter fixed (repeatable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", default="quick", help="smoke | quick | paper (default quick)")
    p.add_argument("--set", action="append", metavar="SECTION.K=V", dest="overrides", help="override a task or attack setting")
    p.add_argument("--attacks", default=None, help="comma-separated adversaries (default: the task's)")
    p.add_argument("--population", type=int, default=None, help="NSGA-II population (default trials/4 within [4, 50])")
    p.add_argument("--sampler-seed", type=int, default=None, help="seed of the sampler (give each worker its own)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads of this worker")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default auto)")
    p.add_argument("--data-root", type=Path, default=None, help="root of real datasets (default $BENCH_DATA)")
    p.add_argument("--mechanism-file", type=Path, action="append", default=[], help="a Python file that registers a mechanism")
    p.add_argument("-q", "--quiet", action="store_true", help="no line per trial")
    add_location_args(p)
    p.set_defaults(func=tune)


def tune(args: argparse.Namespace) -> int:
    """Runs trials until the study is full, then prints its Pareto trials."""
    from bench.errors import BenchError
    from bench.params import parse_assignments
    from bench.runner import RunConfig
    from bench.tracking import tracking_uri
    from bench.tune import TuneConfig, format_pareto, print_trial
    from bench.tune import tune as run_study

    if args.trials < 1:
        raise BenchError(f"--trials must be at least 1, got {args.trials}")
    if args.threads is not None:
        import torch

        torch.set_num_threads(max(1, args.threads))
    results = args.results_dir.resolve()
    attacks = None if args.attacks is None else tuple(a for a in args.attacks.split(",") if a and a != "none")
    base = RunConfig(
        task=args.task, mechanism=args.mechanism, params=parse_assignments(args.param), seed=args.seed,
        profile=args.profile, device=args.device, data_root=data_root(args.data_root), results_dir=results,
        cache_dir=cache_dir(args).resolve(), attacks=attacks, overrides=parse_overrides(args.overrides),
        tracking_uri=tracking_uri(results, args.tracking_uri),
    )
    config = TuneConfig(base=base, trials=args.trials, storage=args.storage, study_name=args.study,
                        population=args.population, sampler_seed=args.sampler_seed,
                        plugin_files=tuple(p.resolve() for p in args.mechanism_file))
    study = run_study(config, (lambda number, outcome: None) if args.quiet else print_trial)
    print(format_pareto(study, args.trials))
    return 0
