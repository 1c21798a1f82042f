"""Step 5 of a cell, the adversaries: each attacks the release (face adversaries its face crops), in fp32."""

from __future__ import annotations

from typing import Callable, Iterable

from bench.cell.plan import Plan
from bench.cell.protocol import face_crop_attacks
from bench.core.interfaces import AttackOutcome, Release, RunContext
from bench.core.splits import Splits
from bench.release.facecrops import face_crop_view, has_face_table
from bench.storage.cache import warn
from bench.system.progress import StageClock


def run(planned: Plan, clean: Splits, released: Release, ctx: RunContext, clock: StageClock,
        log: Callable[[str], None]) -> tuple[dict[str, AttackOutcome], dict[str, str]]:
    """Runs every adversary of the cell; returns their outcomes and the skipped ones -> why."""
    outcomes: dict[str, AttackOutcome] = {}
    crops: tuple[Splits, Release] | None = None
    skipped = skipped_face_attacks(clean, type(planned.task), planned.attacks)
    for name, attack in planned.attacks.items():
        if name in skipped:
            continue
        log(f"attacking with {name}")
        with clock(f"attack.{name}"):
            if name in face_crop_attacks(type(planned.task)):
                if crops is None:
                    log(f"cropping the faces of {planned.task.dataset} for the face adversaries")
                    crops = face_crop_view(clean, released, planned.config.seed)
                outcomes[name] = attack.run(*crops, ctx)
            else:
                outcomes[name] = attack.run(clean, released, ctx)
    return outcomes, skipped


def skipped_face_attacks(clean: Splits, task_cls: type, attacks: Iterable[str]) -> dict[str, str]:
    """Returns the face-crop adversaries a cell skips -> why (empty: every adversary runs).

    They are skipped only where the benchmark says its data may lack face identities
    (``Benchmark.optional_face_crops``) and this data has no face table; a benchmark that
    does not say so fails in :func:`~bench.release.facecrops.face_crop_view` instead. A warning
    says that privacy then comes from the other adversaries only.
    """
    hint = getattr(getattr(task_cls, "benchmark", None), "optional_face_crops", "")
    attacks = list(attacks)
    names = [name for name in attacks if name in face_crop_attacks(task_cls)]
    if not names or not hint or has_face_table(clean):
        return {}
    why = f"{clean.dataset} has no face identities: {hint}"
    others = [name for name in attacks if name not in names]
    warn(f"skipped {', '.join(names)}: {why}; privacy comes from {', '.join(others) or 'no adversary'} only")
    return {name: why for name in names}
