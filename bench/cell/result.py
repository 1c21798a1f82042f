"""Step 6 of a cell, its result: the frozen row of what the task and the adversaries measured, with its provenance."""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import dataclass, field
from typing import Any

from bench.cell.plan import Plan
from bench.cell.provenance import git_sha, hardware, versions
from bench.core import scores
from bench.core.groups import MIN_GROUP_SIZE, cell_groups
from bench.core.interfaces import AttackOutcome, Release, Result, RunContext
from bench.core.outcomes import attack_errors, imprecise_flags, privacy_score_se
from bench.core.splits import Splits
from bench.system.progress import StageClock


@dataclass
class CellOutput:
    """A computed cell: its result, the data it was computed on (for sample sheets) and its models' training curves."""

    result: Result
    clean: Splits
    release: Release
    curves: dict[str, list[float]] = field(default_factory=dict)
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def build(planned: Plan, ctx: RunContext, clean: Splits, released: Release, chain: dict[str, Any],
          utility: dict[str, float], outcomes: dict[str, AttackOutcome], skipped: dict[str, str], clock: StageClock,
          started: float) -> Result:
    """Returns the cell's :class:`~bench.core.result.Result` (``started``: its ``time.perf_counter()`` at the start)."""
    cfg = planned.config
    groups = result_groups(ctx, outcomes, type(planned.task).primary)
    privacy = {name: o.privacy() for name, o in outcomes.items()}
    flags = {**attack_flags(outcomes), **imprecise_flags(outcomes)}
    training_claim = planned.task.training_claim(clean)
    return Result(
        cell_key=planned.key, task=cfg.task, dataset=planned.task.dataset, mechanism=cfg.mechanism,
        mechanism_version=type(planned.mechanism).version, params=dict(planned.mechanism.config), seed=cfg.seed,
        profile=cfg.profile, utility=utility, primary_metric=type(planned.task).primary,
        attacks=attack_errors(outcomes, {name: type(planned.attacks[name]).primary for name in outcomes}),
        privacy=privacy, privacy_score=scores.worst(privacy.values()), privacy_score_se=privacy_score_se(outcomes),
        privacy_flags=flags, eval_split=cfg.split,
        claim=released.claim.to_dict() if released.claim else None,
        runtime_s=time.perf_counter() - started, versions={**versions(), "kernels": released.kernels,
                                                           "precision": cfg.precision, **hardware(planned.device)},
        git_sha=git_sha(),
        dataset_fingerprint=clean.fingerprint, synthetic=clean.synthetic, device=str(planned.device),
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        release_metrics=dict(released.metrics), images=chain,
        training_claim=training_claim.to_dict() if training_claim else None, groups=groups,
        skipped_attacks=skipped, protocol=planned.protocol, stage_seconds=clock.seconds,
    )


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
