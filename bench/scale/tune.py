"""Multi-objective tuning: Optuna NSGA-II over a mechanism's ParamSpace, maximising utility and privacy.

Selection never looks at test data (docs/protocol.md): every trial is a cell evaluated on
the validation split (``RunConfig(split="val")``; run, or reused when its cell already has
a FINISHED MLflow run), and only the configurations the study selects (its Pareto set) are
then run on the test split, as ordinary cells. Trials never enter a board. Several workers, on several machines, share one study through ``--storage``: an RDB
URL (``sqlite:///study.db``, ``postgresql://...``) or a journal file (``journal:PATH``, or
a path ending in ``.journal``/``.log``), which is the safer choice on a shared file
system.

``trials`` is the study's total over all workers and every resumption, counting only trials
that evaluate a configuration: a trial killed with its worker is marked FAIL when the study
is next opened (and its MLflow run FAILED) and does not count, and a trial that proposes a
cell the study has already evaluated (completed, or failed with the cell's error) or is
evaluating is drawn again without counting (``bench.over_budget`` and ``bench.repeat_of``). Only when the search space has no
configuration left, or :data:`MAX_REDRAWS` draws in a row were all repeats, does a counted
trial repeat one: it reuses the earlier cell's FINISHED run and names the trial it repeats.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from bench.core.keys import content_key
from bench.errors import BenchError
from bench.scale.grid import Cell, CellOutcome, cell_label
from bench.scale.tune_cost import TUNING_COST_TAG, charges_training, tuning_cost_note
from bench.scale.tune_storage import (
    CELL_KEY,
    OVER_BUDGET,
    REPEAT_OF,
    WORKER,
    check_storage,
    counted_trials,
    evaluated_trial,
    fail_dead_trials,
    open_storage,
    resumed_seed,
    space_exhausted,
    uses_budget,
    worker_id,
)
from bench.system import precision

if TYPE_CHECKING:
    import optuna

    from bench.cell.plan import RunConfig
    from bench.core.params import ParamSpace

OBJECTIVES = ("utility", "privacy")
SAMPLER_SEEDS = 2**32
"""Sampler seeds are in [0, 2^32) (NumPy's RandomState)."""
MAX_REDRAWS = 20
"""Draws in a row that may repeat evaluated configurations before a trial accepts a repeat."""


@dataclass(frozen=True)
class TuneConfig:
    """One tuning study.

    Attributes:
        base: The cell template: task, mechanism, seed, profile, settings and locations;
            its ``params`` are held fixed and the others are searched.
        trials: Total counted trials of the study, over every worker and resumption (see
            the module docstring: killed trials and redrawn repeats do not count).
        storage: Optuna storage (see the module docstring); None keeps the study in a
            journal file in the results directory.
        study_name: Study name; None derives one from the cell template.
        population: NSGA-II population size; None picks from ``trials``.
        sampler_seed: Seed of the sampler (give each worker its own, or none).
        plugin_files: Files registering mechanisms, loaded before each trial.
    """

    base: "RunConfig"
    trials: int = 60
    storage: str | None = None
    study_name: str | None = None
    population: int | None = None
    sampler_seed: int | None = None
    plugin_files: tuple[Path, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        """Checks the study's sizes and seed, so that a mistake stops it before anything runs.

        Raises:
            BenchError: Fewer than 1 trial, a population under 2, or a sampler seed outside [0, 2^32).
        """
        if self.trials < 1:
            raise BenchError(f"--trials must be at least 1, got {self.trials}")
        if self.population is not None and self.population < 2:
            raise BenchError(f"--population must be at least 2 (NSGA-II breeds pairs), got {self.population}")
        if self.sampler_seed is not None and not 0 <= self.sampler_seed < SAMPLER_SEEDS:
            raise BenchError(f"--sampler-seed must be in [0, 2^32), got {self.sampler_seed}")

    @property
    def name(self) -> str:
        """The study name in use."""
        if self.study_name:
            return self.study_name
        b = self.base
        mixed = () if b.precision == precision.DEFAULT else (b.precision,)  # fp32 studies keep their names
        extra = content_key(b.overrides, b.attacks, sorted(b.params.items()), *mixed)[:8]
        return f"{b.task}-{b.mechanism}-{b.profile}-seed{b.seed}-val-{extra}"

    @property
    def population_size(self) -> int:
        """NSGA-II population: ``population``, else a quarter of the trials within [4, 50]."""
        return self.population or max(4, min(50, self.trials // 4))


class _TrialFailed(Exception):
    """A trial's cell failed; the trial is marked FAIL and the study goes on."""


def search_space(space: "ParamSpace", fixed: Mapping[str, Any]) -> dict[str, Any]:
    """Returns parameter name -> Optuna distribution for the parameters that are searched.

    Parameters held fixed, with a one-point tuning range, or without a finite range are not
    searched (the last keep their default).
    """
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out: dict[str, Any] = {}
    for name, param in space.items():
        if name in fixed:
            continue
        if param.type is str:
            if param.choices and len(param.choices) > 1:
                out[name] = CategoricalDistribution(list(param.choices))
            continue
        try:
            low, high = param.tune_range()
        except BenchError:
            continue
        if low == high:
            continue
        log = param.log and low > 0
        if param.type is int:
            out[name] = IntDistribution(int(math.ceil(low)), int(math.floor(high)), log=log)
        else:
            out[name] = FloatDistribution(float(low), float(high), log=log)
    return out


def open_study(config: TuneConfig) -> "optuna.Study":
    """Creates the study, or loads it when another worker created it already.

    A study that already holds trials gets a sampler seeded from ``sampler_seed`` and its
    size (:func:`bench.scale.tune_storage.resumed_seed`), so that a resumed worker does not draw
    its first trials' parameters again.
    """
    import optuna
    from optuna.samplers import NSGAIISampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    sampler = NSGAIISampler(population_size=config.population_size, seed=config.sampler_seed)
    study = optuna.create_study(
        storage=open_storage(config.storage, config.base.results_dir), study_name=config.name,
        directions=["maximize", "maximize"], sampler=sampler, load_if_exists=True,
    )
    held = len(study.get_trials(deepcopy=False))
    if held and config.sampler_seed is not None:
        study.sampler = NSGAIISampler(population_size=config.population_size,
                                      seed=resumed_seed(config.sampler_seed, held))
    study.set_metric_names(list(OBJECTIVES))
    return study


def tune(config: TuneConfig, on_trial: Callable[[int, CellOutcome], None] = lambda number, outcome: None,
         on_start: Callable[[], None] = lambda: None) -> "optuna.Study":
    """Runs trials until the study holds ``config.trials`` of them (counting other workers').

    Args:
        config: The study.
        on_trial: Called with the trial number and its cell's outcome after each trial.
        on_start: Called once everything is checked and the study and tracking store are
            open, before the first trial (``bench tune`` prints its estimate there).

    Returns:
        The study.

    Raises:
        BenchError: The template does not validate, nothing can be searched, the task
            has no adversary (privacy is an objective), or the storage cannot be used.
    """
    import optuna

    from bench.cell.once import sweep_orphans
    from bench.cell.plan import plan
    from bench.core.registry import load_mechanism_file, mechanisms
    from bench.scale.executors import execute_cell, open_tracker

    for path in config.plugin_files:
        load_mechanism_file(path)
    if config.base.attacks is not None and not config.base.attacks:
        raise BenchError("bench tune maximises privacy: the cells need at least one attack (drop --attacks none)")
    name = config.base.mechanism  # a --param value it refuses is named as such, not as "nothing left to tune"
    mechanisms.get(name).params.resolve(config.base.params, owner=f"--param: mechanism {name!r}")
    space = full_space(config.base)
    if not space:
        fixed = ", ".join(f"{k}={v}" for k, v in config.base.params.items())
        raise BenchError(f"mechanism {name!r} has no parameter left to tune"
                         + (f" (--param fixes {fixed})" if fixed else "")
                         + f" and task {config.base.task!r} no tunable setting that --set does not fix")
    check_storage(config.storage, config.base.results_dir)
    base = plan(trial_config(config.base, config.base.params))
    if not base.attacks:
        raise BenchError("bench tune maximises privacy: the cells need at least one attack (drop --attacks none)")
    study = open_study(config)
    tracker = open_tracker(config.base.results_dir, config.base.tracking_uri)
    on_start()
    dead, orphans = fail_dead_trials(study), sweep_orphans(tracker)
    if dead or orphans:
        print(f"[bench] tune: {dead} trial(s) and {orphans} MLflow run(s) left by killed processes marked FAILED "
              "(they do not count)", file=sys.stderr, flush=True)
    redraws = 0

    def objective(trial: "optuna.Trial") -> tuple[float, float]:
        nonlocal redraws
        trial.set_user_attr(WORKER, worker_id())
        earlier = [t for t in study.get_trials(deepcopy=False) if t.number < trial.number]
        if sum(map(uses_budget, earlier)) >= config.trials:
            trial.set_user_attr(OVER_BUDGET, True)
            raise optuna.TrialPruned("the study has its trials")
        chosen = {name: rounded(_suggest(trial, name, dist)) for name, dist in space.items()}
        cfg = trial_config(config.base, {**config.base.params, **mechanism_part(chosen)}, task_part(chosen))
        try:
            planned = plan(cfg)
        except BenchError as exc:
            _fail(trial, str(exc))
        cfg = dataclasses.replace(cfg, params=dict(planned.mechanism.config))
        trial.set_user_attr(CELL_KEY, planned.key)  # before computing: other workers then see it taken
        repeat = evaluated_trial(study, planned.key, trial.number)
        if repeat is not None:
            trial.set_user_attr(REPEAT_OF, repeat)
            exhausted = space_exhausted(study, space)
            if not exhausted and redraws < MAX_REDRAWS:
                redraws += 1
                trial.set_user_attr(OVER_BUDGET, True)
                raise optuna.TrialPruned(f"trial {repeat} evaluated this configuration: drawn again")
            why = "the search space has no other" if exhausted else f"{MAX_REDRAWS} draws in a row repeated one"
            print(f"[bench] trial {trial.number} repeats trial {repeat}'s configuration ({why}): its result is "
                  "reused", file=sys.stderr, flush=True)
        redraws = 0
        outcome = execute_cell(Cell(cfg, planned.key, cell_label(cfg)), config.plugin_files)
        on_trial(trial.number, outcome)
        if outcome.status == "failed" or outcome.result is None:
            _fail(trial, outcome.error or "the cell failed")
        trial.set_user_attr("run_id", outcome.run_id)
        trial.set_user_attr("reused", outcome.status == "skipped")
        if outcome.status == "done":
            tracker.client.set_tag(outcome.run_id, "bench.study", config.name)
            tracker.client.set_tag(outcome.run_id, "bench.trial", str(trial.number))
        result = outcome.result
        privacy = result.privacy_score
        if privacy is None or not math.isfinite(result.utility_value):
            _fail(trial, "the cell has no utility or privacy score")
        return float(result.utility_value), float(privacy)

    def stop_when_full(study: "optuna.Study", trial: Any) -> None:
        if counted_trials(study) >= config.trials:
            study.stop()

    if counted_trials(study) < config.trials:
        study.optimize(objective, n_trials=None, callbacks=[stop_when_full], catch=(_TrialFailed,), gc_after_trial=True)
    for trial in study.best_trials:
        run_id = trial.user_attrs.get("run_id")
        if run_id:
            tracker.client.set_tag(run_id, "bench.pareto", config.name)
    return study


def trial_config(base: "RunConfig", params: Mapping[str, Any], task_settings: Mapping[str, Any] | None = None,
                 split: str = "val") -> "RunConfig":
    """Returns the cell of a trial: the template with these parameters and task settings, on the validation split."""
    overrides = {k: dict(v) for k, v in base.overrides.items()}
    if task_settings:
        overrides["task"] = {**overrides.get("task", {}), **task_settings}
    return dataclasses.replace(base, params=dict(params), overrides=overrides, split=split)


TASK_PREFIX = "task."
"""Trial parameters named ``task.<setting>`` are task settings (a training method's), not the mechanism's."""


def full_space(base: "RunConfig") -> dict[str, Any]:
    """Returns the searched distributions: the mechanism's free parameters and the task's tunable settings.

    Task settings (``Task.tunable``) are named ``task.<setting>``; one given with ``--set``
    is held fixed.
    """
    from bench.core.registry import mechanisms, tasks

    space = search_space(mechanisms.get(base.mechanism).params, base.params)
    fixed_task = dict(base.overrides.get("task") or {})
    task_space = search_space(tasks.get(base.task).tunable, fixed_task)
    space.update({TASK_PREFIX + name: dist for name, dist in task_space.items()})
    return space


def mechanism_part(values: Mapping[str, Any]) -> dict[str, Any]:
    """Returns the mechanism's parameters of a trial's values."""
    return {k: v for k, v in values.items() if not k.startswith(TASK_PREFIX)}


def task_part(values: Mapping[str, Any]) -> dict[str, Any]:
    """Returns the task settings of a trial's values (without the ``task.`` prefix)."""
    return {k[len(TASK_PREFIX):]: v for k, v in values.items() if k.startswith(TASK_PREFIX)}


@dataclass
class Selected:
    """A configuration the study selected, with its validation and test outcomes.

    Attributes:
        params: The mechanism parameters.
        trials: The Pareto trials with these parameters.
        val_utility: Utility on the validation split (the trial's objective).
        val_privacy: Privacy on the validation split.
        test: The test cell's outcome.
        settings: The task settings searched with them (``training.epsilon``), if any.
        tuning_cost: Where the test cell trains with DP-SGD: that the study's selection,
            made on models trained on the private records, is not in its ε
            (:func:`tuning_cost_note`, also the run's :data:`TUNING_COST_TAG`); else "".
    """

    params: dict[str, Any]
    trials: list[int]
    val_utility: float
    val_privacy: float
    test: CellOutcome
    settings: dict[str, Any] = field(default_factory=dict)
    tuning_cost: str = ""


def run_selected_on_test(config: TuneConfig, study: "optuna.Study",
                         on_cell: Callable[[CellOutcome], None] = lambda outcome: None) -> list[Selected]:
    """Runs each configuration of the study's Pareto set once on the test split, as an ordinary cell.

    Cells that already have a FINISHED run are reused (another worker may have run them).
    The runs are tagged ``bench.selected_by`` with the study's name, and those that train
    with DP-SGD :data:`TUNING_COST_TAG` with :func:`tuning_cost_note` (reused ones too: the
    selection is what costs), which the leaderboard shows beside their training claim.

    Args:
        config: The study.
        study: The finished study.
        on_cell: Called with each test cell's outcome.

    Returns:
        The selected configurations, highest validation utility first.
    """
    from bench.cell.plan import plan
    from bench.scale.executors import execute_cell, open_tracker

    tracker = open_tracker(config.base.results_dir, config.base.tracking_uri)
    note = tuning_cost_note(config.name, counted_trials(study), full_space(config.base))
    selected = []
    for row in pareto_rows(study):
        chosen = {k: rounded(v) for k, v in row["params"].items()}
        cfg = trial_config(config.base, {**config.base.params, **mechanism_part(chosen)}, task_part(chosen),
                           split="test")
        planned = plan(cfg)
        cfg = dataclasses.replace(cfg, params=dict(planned.mechanism.config))
        outcome = execute_cell(Cell(cfg, planned.key, cell_label(cfg)), config.plugin_files)
        if outcome.status == "done":
            tracker.client.set_tag(outcome.run_id, "bench.selected_by", config.name)
        cost = note if charges_training(outcome.result) else ""
        if cost and outcome.run_id:
            tracker.client.set_tag(outcome.run_id, TUNING_COST_TAG, cost)
        on_cell(outcome)
        selected.append(Selected(dict(cfg.params), row["trials"], row["utility"], row["privacy"], outcome,
                                 task_part(chosen), cost))
    return selected


def _fail(trial: "optuna.Trial", error: str) -> None:
    trial.set_user_attr("error", error[:2000])
    raise _TrialFailed(error)


SIGNIFICANT = 3
"""Significant digits a sampled float keeps: the cell runs (and is named) with ``epsilon=4.8``, not 4.79670484931456."""


def rounded(value: Any) -> Any:
    """Returns a sampled float rounded to :data:`SIGNIFICANT` digits (other values unchanged)."""
    if isinstance(value, float) and math.isfinite(value) and value != 0:
        return float(f"{value:.{SIGNIFICANT}g}")
    return value


def _suggest(trial: "optuna.Trial", name: str, dist: Any) -> Any:
    from optuna.distributions import CategoricalDistribution, IntDistribution

    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(name, dist.choices)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, log=dist.log)
    return trial.suggest_float(name, dist.low, dist.high, log=dist.log)


def pareto_rows(study: "optuna.Study") -> list[dict[str, Any]]:
    """Returns the Pareto-optimal settings, highest utility first; trials of one setting share a row."""
    rows: dict[tuple, dict[str, Any]] = {}
    for t in sorted(study.best_trials, key=lambda t: t.number):
        key = tuple(sorted(t.params.items()))
        if key in rows:
            rows[key]["trials"].append(t.number)
            continue
        rows[key] = {"trials": [t.number], "utility": t.values[0], "privacy": t.values[1], "params": dict(t.params),
                     "run_id": t.user_attrs.get("run_id", "")}
    return sorted(rows.values(), key=lambda r: (-r["utility"], -r["privacy"], r["trials"][0]))
