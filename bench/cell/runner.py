"""One cell, end to end: data -> release -> utility and attacks -> Result -> MLflow."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from bench.cell.attribute_checks import check_attributes
from bench.cell.protocol import protocol_key
from bench.cell.provenance import git_sha, hardware, versions
from bench.cell.sheets import sample_sheet
from bench.core import curves, scores
from bench.core.config import PROFILES, did_you_mean
from bench.core.groups import MIN_GROUP_SIZE, cell_groups
from bench.core.interfaces import AttackOutcome, Mechanism, Release, Result, RunContext, Task
from bench.core.keys import cell_key
from bench.core.outcomes import attack_errors, imprecise_flags, privacy_score_se
from bench.core.registry import attacks as attack_registry
from bench.core.registry import datasets as dataset_registry
from bench.core.registry import mechanisms as mechanism_registry
from bench.core.registry import tasks as task_registry
from bench.data.base import ImageSet, Splits, load_dataset, load_public, recording_reads
from bench.data.shards import configure_huggingface
from bench.errors import BenchError
from bench.release.dataset import BOX_SOURCES, make_release
from bench.release.facecrops import face_crop_view, has_face_table
from bench.storage.folders import check_writable_folder
from bench.system import bounds, precision
from bench.system.devices import resolve_device
from bench.system.progress import StageClock
from bench.testing.preflight import preflight

SEED_LIMIT = 2**63
"""Seeds are non-negative 63-bit integers (they feed int64 arithmetic in the streams)."""


@dataclass(frozen=True)
class RunConfig:
    """What one ``bench run`` computes and where it writes.

    Attributes:
        task: Registered task (benchmark) name.
        mechanism: Registered mechanism name.
        params: Mechanism parameters (strings from the CLI or Python values).
        seed: Base seed.
        profile: smoke, quick or paper.
        device: auto, cpu or cuda (or cuda:N).
        data_root: Root of real datasets.
        results_dir: Where MLflow's default database and artifacts live.
        cache_dir: Releases and trained models; defaults to ``results_dir/cache``.
        attacks: Adversaries to run; None means the task's defaults.
        overrides: Section ("task" or an attack name) -> setting -> value.
        tracking_uri: MLflow tracking URI overriding the default.
        split: Where utility and attacks are measured: ``test``, or ``val`` for tuning
            (part of the cell key: a validation cell is never a test cell).
        verify_data: Fingerprint real datasets by their files' bytes (slower) rather than
            by size and modification time.
        precision: ``fp32``, or ``bf16`` mixed precision for the task's networks
            (:mod:`bench.system.precision`; part of the cell key). Adversaries always run in fp32.
    """

    task: str
    mechanism: str
    params: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    profile: str = "quick"
    device: str = "auto"
    data_root: Path | None = None
    results_dir: Path = Path("results")
    cache_dir: Path | None = None
    attacks: tuple[str, ...] | None = None
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    tracking_uri: str | None = None
    split: str = "test"
    verify_data: bool = False
    precision: str = precision.DEFAULT

    @property
    def cache(self) -> Path:
        """The cache directory in use."""
        return self.cache_dir or self.results_dir / "cache"


@dataclass
class Plan:
    """A validated cell: objects built, nothing computed or written yet."""

    config: RunConfig
    task: Task
    mechanism: Mechanism
    attacks: dict[str, Any]
    key: str
    device: torch.device
    protocol: str = ""
    """The board's protocol key (:func:`bench.cell.protocol.protocol_key` less the task's entry settings)."""


def check_seed(seed: Any) -> None:
    """Checks that a seed (``--seed``) is an integer in [0, 2^63) (see :data:`SEED_LIMIT`).

    Raises:
        BenchError: Not an integer, negative, or too large.
    """
    if not (isinstance(seed, int) and 0 <= seed < SEED_LIMIT):
        raise BenchError(f"--seed must be an integer in [0, 2^63), got {seed!r}")


def plan(config: RunConfig) -> Plan:
    """Validates names, parameters, profile and device without computing anything.

    Raises:
        BenchError: Any mistake in the configuration.
    """
    if config.profile not in PROFILES:
        raise BenchError(f"unknown profile {config.profile!r}{did_you_mean(config.profile, PROFILES)} "
                         f"(use {', '.join(PROFILES)})")
    check_seed(config.seed)
    for flag, folder in (("--results-dir", config.results_dir), ("--cache-dir", config.cache)):
        check_writable_folder(flag, Path(folder))
    if config.split not in ("test", "val"):
        raise BenchError(f"unknown evaluation split {config.split!r} (use test, or val for tuning)")
    task_cls = task_registry.get(config.task)
    mechanism = mechanism_registry.get(config.mechanism)(**config.params)
    known = {"task", "release", *(config.attacks if config.attacks is not None else task_cls.attacks)}
    unknown = sorted(set(config.overrides) - known)
    if unknown:
        raise BenchError(f"--set: no section {unknown[0]!r}{did_you_mean(unknown[0], known)} "
                         "(use task.NAME=VALUE, ATTACK.NAME=VALUE or release.boxes=detect)")
    release_options = dict(config.overrides.get("release", {}))
    if set(release_options) - {"boxes"} or release_options.get("boxes", "dataset") not in BOX_SOURCES:
        raise BenchError(f"--set release: only release.boxes={'|'.join(BOX_SOURCES)} is known, got {release_options}")
    task = task_cls(config.profile, config.overrides.get("task"))
    attack_names = config.attacks if config.attacks is not None else task_cls.attacks
    declared = getattr(task_cls, "benchmark", None)
    attacks = {name: attack_registry.get(name)(config.profile, declared.settings_of(name, config.overrides.get(name),
                                                                                    config.profile)
                                               if declared is not None else config.overrides.get(name))
               for name in attack_names}
    device = resolve_device(config.device)
    precision.check(config.precision, device, task.owner, task_cls.precisions)
    if config.split == "val":
        unable = [f"task {config.task!r}"] if not task_cls.validation else []
        unable += [f"attack {name!r}" for name, a in attacks.items() if not type(a).validation]
        if unable:
            raise BenchError(f"{' and '.join(unable)} cannot measure on a validation split, so tuning would "
                             "select on test; tune another benchmark or with --attacks naming attacks that can")
    for name, attack in attacks.items():
        needs = type(attack).requires
        if needs and needs not in task_cls.provides:
            offering = [t for t in task_registry.list() if needs in task_registry.get(t).provides]
            raise BenchError(f"attack {name!r} needs a task that provides {needs!r} (such as "
                             f"{', '.join(offering[:3]) or 'none registered'}); task {config.task!r} does not")
    bounds.check_cell(task, attacks, None, device, config.overrides)  # from the options, before inspect counts
    shape = dataset_registry.get(task.dataset)().inspect(config.data_root, task.data_options())
    bounds.check_cell(task, attacks, shape, device, config.overrides)
    task.check_data(shape, config.split)
    task.check_other_data(config.data_root, config.split)
    cropped = face_crop_attacks(task_cls)
    for name, attack in attacks.items():
        attack.check_data(None if name in cropped else shape, config.split)
    check_attributes(task, attacks, shape)
    options: dict[str, Any] = {"overrides": config.overrides, "attacks": list(attack_names),
                               "protocol": protocol_key(task, attacks)}
    if config.split != "test":
        options["split"] = config.split
    if config.precision != precision.DEFAULT:
        options["precision"] = config.precision
    key = cell_key(
        config.task, config.mechanism, type(mechanism).version, mechanism.config, config.seed, config.profile, options,
    )
    board_protocol = protocol_key(task, attacks, leave_out=task_cls.entry_settings)
    preflight(config.mechanism, mechanism, device)  # a plugin's conformance, once per process
    return Plan(config, task, mechanism, attacks, key, device, board_protocol)


@dataclass
class CellOutput:
    """A computed cell: its result, the data it was computed on (for sample sheets) and its models' training curves."""

    result: Result
    clean: Splits
    release: Release
    curves: dict[str, list[float]] = field(default_factory=dict)
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def run_cell(plan_: Plan, log: Callable[[str], None] = lambda msg: None, progress: Callable[..., Any] | None = None) -> CellOutput:
    """Computes one cell. Writes only to the cache; tracking is :func:`log_cell`'s job.

    Its result records every dataset the cell read (``data_reads``: its own, a transfer
    target, the public set a mechanism fitted on) with its fingerprint.

    Args:
        plan_: A validated plan from :func:`plan`.
        log: Progress messages.
        progress: Progress-bar wrapper for long loops.

    Raises:
        BenchError: Missing or malformed data.
    """
    with recording_reads(plan_.config.verify_data) as reads, precision.reproducible():
        output = _compute(plan_, log, progress)
    return dataclasses.replace(output, result=dataclasses.replace(output.result, data_reads=reads))


def _compute(plan_: Plan, log: Callable[[str], None], progress: Callable[..., Any] | None) -> CellOutput:
    cfg = plan_.config
    started = time.perf_counter()
    ctx = RunContext(
        device=plan_.device, seed=cfg.seed, profile=cfg.profile, data_root=cfg.data_root, cache_dir=cfg.cache,
        options={}, eval_split=cfg.split, benchmark=cfg.task, task=plan_.task, log=log, progress=progress or (lambda it, total=None, desc=None: it),
    )
    dataset = dataset_registry.get(plan_.task.dataset)()
    log(f"{'generating' if dataset.synthetic else 'loading'} {plan_.task.dataset} (or reading it from the cache)")
    clock = StageClock()
    with clock("data"):
        clean = cell_data(plan_)
    chain = image_chain(clean, plan_.task)
    if chain["upscaled"]:
        from bench.data.stored_size import upscaling_warning

        print(f"bench: warning: {upscaling_warning(chain, plan_.task.dataset)}", file=sys.stderr, flush=True)
    log(f"releasing {plan_.task.dataset} through {cfg.mechanism}")
    boxes = cfg.overrides.get("release", {}).get("boxes", "dataset")

    def public() -> ImageSet | None:
        return load_public(plan_.task.dataset, cfg.data_root, plan_.task.data_options(), cfg.cache)

    with clock("release"):
        release = make_release(clean, plan_.mechanism, ctx, public, boxes)
    with curves.recording() as recorded:
        log(f"evaluating {cfg.task}")
        with clock("task"), precision.using(cfg.precision):
            utility = plan_.task.evaluate(clean, release, ctx)
        outcomes: dict[str, AttackOutcome] = {}
        crops: tuple[Splits, Release] | None = None
        skipped = skipped_face_attacks(clean, type(plan_.task), plan_.attacks)
        for name, attack in plan_.attacks.items():
            if name in skipped:
                continue
            log(f"attacking with {name}")
            with clock(f"attack.{name}"):
                if name in face_crop_attacks(type(plan_.task)):
                    if crops is None:
                        log(f"cropping the faces of {plan_.task.dataset} for the face adversaries")
                        crops = face_crop_view(clean, release, cfg.seed)
                    outcomes[name] = attack.run(*crops, ctx)
                else:
                    outcomes[name] = attack.run(clean, release, ctx)
    groups = result_groups(ctx, outcomes, type(plan_.task).primary)
    privacy = {name: o.privacy() for name, o in outcomes.items()}
    flags = {**attack_flags(outcomes), **imprecise_flags(outcomes)}
    training_claim = plan_.task.training_claim(clean)
    result = Result(
        cell_key=plan_.key, task=cfg.task, dataset=plan_.task.dataset, mechanism=cfg.mechanism,
        mechanism_version=type(plan_.mechanism).version, params=dict(plan_.mechanism.config), seed=cfg.seed,
        profile=cfg.profile, utility=utility, primary_metric=type(plan_.task).primary,
        attacks=attack_errors(outcomes, {name: type(plan_.attacks[name]).primary for name in outcomes}),
        privacy=privacy, privacy_score=scores.worst(privacy.values()), privacy_score_se=privacy_score_se(outcomes),
        privacy_flags=flags, eval_split=cfg.split,
        claim=release.claim.to_dict() if release.claim else None,
        runtime_s=time.perf_counter() - started, versions={**versions(), "kernels": release.kernels,
                                                           "precision": cfg.precision, **hardware(plan_.device)},
        git_sha=git_sha(),
        dataset_fingerprint=clean.fingerprint, synthetic=clean.synthetic, device=str(plan_.device),
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        release_metrics=dict(release.metrics), images=chain,
        training_claim=training_claim.to_dict() if training_claim else None, groups=groups,
        skipped_attacks=skipped, protocol=plan_.protocol, stage_seconds=clock.seconds,
    )
    return CellOutput(result, clean, release, recorded, ctx.tables)


def cell_data(plan_: Plan) -> Splits:
    """Loads (or generates, or reads from the cache) the dataset a cell is computed on."""
    cfg = plan_.config
    configure_huggingface(cfg.cache)
    return load_dataset(plan_.task.dataset, cfg.data_root, plan_.task.data_options(), cfg.cache, cfg.verify_data)


def face_crop_attacks(task_cls: type) -> frozenset[str]:
    """Returns the adversaries the task's benchmark has attack face crops (:mod:`bench.release.facecrops`)."""
    return frozenset(getattr(getattr(task_cls, "benchmark", None), "face_crops", ()) or ())


def skipped_face_attacks(clean: Splits, task_cls: type, attacks: Iterable[str]) -> dict[str, str]:
    """Returns the face-crop adversaries a cell skips -> why (empty: every adversary runs).

    They are skipped only where the benchmark says its data may lack face identities
    (``Benchmark.optional_face_crops``) and this data has no face table; a benchmark that
    does not say so fails in :func:`~bench.release.facecrops.face_crop_view` instead. A warning
    says that privacy then comes from the other adversaries only.
    """
    from bench.storage.cache import warn

    hint = getattr(getattr(task_cls, "benchmark", None), "optional_face_crops", "")
    attacks = list(attacks)
    names = [name for name in attacks if name in face_crop_attacks(task_cls)]
    if not names or not hint or has_face_table(clean):
        return {}
    why = f"{clean.dataset} has no face identities: {hint}"
    others = [name for name in attacks if name not in names]
    warn(f"skipped {', '.join(names)}: {why}; privacy comes from {', '.join(others) or 'no adversary'} only")
    return {name: why for name in names}


def image_chain(clean: Splits, task: Task) -> dict[str, Any]:
    """Returns the sizes images pass through: native (as read), stored (where the mechanism runs), task input.

    ``upscaled`` counts images the loader enlarged to the stored size (from the dataset's
    ``info["images"]``, written by :func:`bench.data.base.size_report`).
    """
    first = next(iter(clean.sets.values())).images
    stored = [int(first.shape[-2]), int(first.shape[-1])]
    reported = clean.info.get("images") or {}
    native = reported.get("native") or {"min": stored, "median": stored, "max": stored}
    task_input = task.input_size()
    chain = {"native": native, "stored": stored, "mechanism_at": "stored",
             "release_shape": [int(first.shape[1]), *stored], "channels": int(first.shape[1]),
             "task_input": list(task_input) if task_input else stored, "upscaled": int(reported.get("upscaled", 0))}
    kept = clean.info.get("storage")
    if kept:
        chain["upscaled_examples"] = list(kept.get("upscaled_examples", []))
        chain["size_option"] = list(kept["target"])
    return chain


def result_groups(ctx: RunContext, outcomes: dict[str, AttackOutcome], primary: str) -> dict[str, Any]:
    """Returns the cell's per-group tables: the task's (``ctx.groups``) and each attack's (or part's)."""
    tables = {}
    for name, outcome in outcomes.items():
        if outcome.groups:
            tables[name] = dict(outcome.groups)
        for part, sub in outcome.parts.items():
            if sub.groups:
                tables[f"{name}.{part}"] = dict(sub.groups)
    utility, note = ctx.groups.get("utility", (None, ""))
    return cell_groups(utility, tables, primary, MIN_GROUP_SIZE, note)


def attack_flags(outcomes: dict[str, AttackOutcome]) -> dict[str, str]:
    """Returns ``attack`` / ``attack.target`` -> why its privacy score is undefined."""
    flags: dict[str, str] = {}
    for name, outcome in outcomes.items():
        for target, why in outcome.flags().items():
            flags[f"{name}.{target}" if target else name] = why
        if outcome.privacy() is None:
            flags[name] = scores.TOO_WEAK
    return flags


def cell_artifacts(output: CellOutput, plan_: Plan, sample_split: str = "test",
                   samples: int = 8) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Returns what a cell's run carries besides its result: resolved configs and a sample sheet."""
    run = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(plan_.config).items()}
    configs = {
        "task": plan_.task.config_dict(),
        "attacks": {name: a.config_dict() for name, a in plan_.attacks.items()},
        "run": run,
    }
    split = sample_split if sample_split in output.clean else next(iter(output.clean.sets))
    clean_images = output.clean[split].images[:samples]
    released_images = output.release.splits[split].images[:samples]
    label = output.result.mechanism + "".join(f" {k}={v}" for k, v in output.result.params.items())
    with tempfile.TemporaryDirectory() as tmp:
        sheet = Path(tmp) / "samples.png"
        sample_sheet([("clean", clean_images), (label, released_images)], sheet)
        artifacts = {"samples.png": sheet.read_bytes()}
    for name, rows in output.tables.items():
        artifacts[f"{name}.csv"] = table_csv(rows)
    return configs, artifacts


def table_csv(rows: list[dict[str, Any]]) -> bytes:
    """Returns a task's table as CSV bytes (columns of the first row; numbers as Python prints them)."""
    import csv
    import io

    out = io.StringIO()
    if rows:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return out.getvalue().encode()


def stderr_log(message: str) -> None:
    """Prints a progress line on stderr."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)
