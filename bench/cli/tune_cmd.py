"""``bench tune``: Optuna NSGA-II over a mechanism's parameters on the validation split, then the selection on test."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.cli.common import add_cell_options, load_plugins, run_config, text_arg
from bench.errors import BenchError

if TYPE_CHECKING:
    import optuna

    from bench.cell.estimate import Estimate
    from bench.cell.plan import RunConfig
    from bench.scale.grid import CellOutcome
    from bench.scale.tune import Selected


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench tune``."""
    p = subparsers.add_parser(
        "tune", help="search a mechanism's parameters for the utility-privacy Pareto front (Optuna NSGA-II)",
        description="Multi-objective tuning of one mechanism on one benchmark (its parameters, and the task's tunable "
                    "settings such as dp_vit's training method, task.training.*, unless --set fixes them). "
                    "Every trial is a cell evaluated "
                    "on the validation split and logged to MLflow; once the study is full, the configurations it "
                    "selects (its Pareto set) are run on the test split as ordinary cells. Trials never enter a "
                    "leaderboard board. Start the same command on several machines with one --storage to share "
                    "the study; --trials is the study's total.",
    )
    add_cell_options(p)
    p.add_argument("--trials", type=int, default=60, help="total trials of the study over all workers (default 60)")
    p.add_argument("--storage", type=text_arg, default=None,
                   help="sqlite:///F.db, postgresql://..., or journal:PATH (default: journal file in RESULTS_DIR)")
    p.add_argument("--study", type=text_arg, default=None, help="study name (default: derived from task, mechanism, profile, seed)")
    p.add_argument("--population", type=int, default=None, help="NSGA-II population (default trials/4 within [4, 50])")
    p.add_argument("--sampler-seed", type=int, default=None, help="seed of the sampler (give each worker its own)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads of this worker")
    p.add_argument("-q", "--quiet", action="store_true", help="no line per trial")
    p.set_defaults(func=tune)


def tune(args: argparse.Namespace) -> int:
    """Runs trials until the study is full, prints its Pareto trials and runs them on test."""
    from bench.scale.tune import TuneConfig, run_selected_on_test
    from bench.scale.tune import tune as run_study
    from bench.scale.tune_storage import still_running, storage_text

    check_tune_options(args)
    base = run_config(args, absolute=True)
    load_plugins(args)  # the study loads them again in each trial: loading is idempotent
    expected = tune_estimate(base, args.trials)
    config = TuneConfig(base=base, trials=args.trials, storage=args.storage, study_name=args.study,
                        population=args.population, sampler_seed=args.sampler_seed,
                        plugin_files=tuple(p.resolve() for p in args.mechanism_file))
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)

    def announce() -> None:
        if not args.quiet:
            from bench.cell.estimate import describe

            print(f"[bench] tune: {args.trials} trials expected to take {describe(expected)} of cell time over all "
                  "workers, then the selected configurations on test", file=sys.stderr, flush=True)

    study = run_study(config, (lambda number, outcome: None) if args.quiet else print_trial, announce)
    print(f"study {config.name!r} in {storage_text(args.storage, base.results_dir)} (another worker joins it with "
          f"--storage and --study)")
    print(format_pareto(study, args.trials))
    running = still_running(study)
    if running:
        print(f"{running} trial(s) still running in other workers: the last worker to finish runs the selected "
              "configurations on test (or run this command again once they are done)")
        return 0
    selected = run_selected_on_test(config, study, (lambda outcome: None) if args.quiet else _print_test_cell)
    print(format_selected(selected, args.seed))
    return 1 if any(item.test.status == "failed" for item in selected) else 0


def tune_estimate(base: "RunConfig", trials: int) -> "Estimate":
    """Plans one trial (the default parameters, on the validation split) and returns the study's estimate.

    Raises:
        BenchError: The trial cannot be planned, or ``trials`` of it are estimated beyond
            the time bound and ``--allow-long`` was not given (:func:`bench.cell.estimate.check_bound`).
    """
    import dataclasses

    from bench.cell.estimate import Estimate, check_bound, repeated
    from bench.cell.plan import plan

    trial = plan(dataclasses.replace(base, split="val"))
    expected = repeated(trial.estimate or Estimate(0.0), max(1, trials), f"--trials {trials}")
    check_bound(expected, base.allow_long, "this study")
    return expected


def check_tune_options(args: argparse.Namespace) -> None:
    """Checks tune's own options before anything is planned or written.

    Raises:
        BenchError: --threads outside 1..the CPUs this process may use, a --population
            larger than --trials (NSGA-II would never breed a generation), a journal
            file (--storage journal:PATH) that cannot be written, or a --storage it cannot use.
    """
    from bench.scale.tune_storage import check_storage
    from bench.storage.folders import check_writable_file
    from bench.system.cpus import usable_cpus

    cpus = usable_cpus()
    if args.threads is not None and not 1 <= args.threads <= cpus:
        raise BenchError(f"--threads must be in 1..{cpus} (the CPUs this process may use), got {args.threads}")
    if args.population is not None and args.trials >= 1 and args.population > args.trials:
        raise BenchError(f"--population {args.population} is larger than --trials {args.trials}: NSGA-II would never "
                         "breed a generation (a random search); give at most --trials")
    if args.storage is not None and args.storage.startswith("journal:"):
        check_writable_file("--storage", Path(args.storage[len("journal:"):]))
    if args.storage is not None:
        check_storage(args.storage, args.results_dir)  # a scheme or file it cannot use, before the trial is planned


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _privacy(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.4f}"


def print_trial(number: int, outcome: "CellOutcome") -> None:
    """Prints one line per finished trial on stderr."""
    if outcome.status == "failed":
        text = f"failed: {outcome.error}"
    else:
        r = outcome.result
        verb = "reused" if outcome.status == "skipped" else f"{outcome.seconds:.1f} s"
        text = f"utility {r.utility_value:.4f}, privacy {_privacy(r.privacy_score)} ({verb})" if r else outcome.status
        if r is not None and r.privacy_score is None:
            text += ": attack too weak, the trial fails"
    print(f"[bench] trial {number}: {outcome.label}: {text}", file=sys.stderr, flush=True)


def _print_test_cell(outcome: "CellOutcome") -> None:
    verb = {"skipped": "reused", "done": f"{outcome.seconds:.1f} s"}.get(outcome.status, f"failed: {outcome.error}")
    print(f"[bench] test: {outcome.label} ({verb})", file=sys.stderr, flush=True)


def format_pareto(study: "optuna.Study", trials: int) -> str:
    """Returns the study's state and its Pareto trials (validation split) as a table."""
    from optuna.trial import TrialState

    from bench.scale.tune import pareto_rows
    from bench.scale.tune_storage import uses_budget

    counted = [t for t in study.get_trials(deepcopy=False) if uses_budget(t)]
    states = {s: sum(t.state == s for t in counted) for s in (TrialState.COMPLETE, TrialState.FAIL, TrialState.RUNNING)}
    lines = [
        f"study {study.study_name}: {states[TrialState.COMPLETE]} complete, {states[TrialState.FAIL]} failed, "
        f"{states[TrialState.RUNNING]} running of {trials} trials",
        "Pareto trials (maximising utility and privacy on the validation split):",
        f"{'trial':>6}  {'utility':>8}  {'privacy':>8}  {'run id':<32}  params",
    ]
    for row in pareto_rows(study):
        params = ", ".join(f"{k}={_short(v)}" for k, v in row["params"].items())
        again = f"  (also trials {', '.join(map(str, row['trials'][1:]))})" if len(row["trials"]) > 1 else ""
        lines.append(f"{row['trials'][0]:>6}  {row['utility']:>8.4f}  {row['privacy']:>8.4f}  {row['run_id']:<32}  "
                     f"{params}{again}")
    return "\n".join(lines)


def format_selected(selected: "list[Selected]", seed: int) -> str:
    """Returns the selected configurations' validation and test numbers as a table."""
    lines = [f"Selected configurations run on the test split (seed {seed}; ordinary cells in the exploration view, "
             "never ranked: declare them in a suite and 'bench submit' it to rank them; undefined: attack too weak):",
             f"  {'val util':>8}  {'val priv':>8}  {'test util':>9}  {'test priv':>9}  {'run id':<32}  params"]
    for item in selected:
        result = item.test.result
        shown = {**item.params, **{f"task.{k}": v for k, v in item.settings.items()}}
        params = ", ".join(f"{k}={_short(v)}" for k, v in shown.items())
        if item.test.status == "failed" or result is None:
            test = f"{'failed':>9}  {'':>9}  {item.test.error[:32]:<32}"
        else:
            test = f"{result.utility_value:>9.4f}  {_privacy(result.privacy_score):>9}  {item.test.run_id or '':<32}"
        lines.append(f"  {item.val_utility:>8.4f}  {item.val_privacy:>8.4f}  {test}  {params}")
    lines += sorted({f"  note: {item.tuning_cost}" for item in selected if item.tuning_cost})
    return "\n".join(lines)
