"""What an entry file is made of, for ``bench submit`` and ``bench submit --refresh``: checks, cells, files.

The conformance suite and the audits of a mechanism's claims, one cell's record (its result,
run id and digest), the sample sheet beside the entry, and the entry's atomic write.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.errors import BenchError

__all__ = ["SUBMIT_AUDIT_CONFIDENCE", "SUBMIT_AUDIT_IMAGE_SIZE", "SUBMIT_AUDIT_MAX_TRIALS", "attach_sheet",
           "cell_record", "conformance", "entry_path", "submission_audit", "write_entry"]


def conformance(name: str) -> list[str]:
    """Runs the conformance suite and returns the names of the checks that ran.

    Raises:
        BenchError: A check failed (each failure is printed on stderr first).
    """
    from bench.testing.isolated import raise_breach
    from bench.testing.mechanisms import CHECKS, run_conformance

    failures = run_conformance(name)
    raise_breach()  # an isolated mechanism refused by its sandbox: that, not the checks it broke off, is the error
    if failures:
        for failure in failures:
            print(f"[bench] conformance: {' '.join(failure.split())}", file=sys.stderr)
        raise BenchError(f"mechanism {name!r} fails {len(failures)} conformance check(s) (listed above); "
                         "no cells run, no entry written")
    return sorted(CHECKS)


SUBMIT_AUDIT_MAX_TRIALS = 200_000
"""The submission audit's budget: most counted trials per input of one configuration's audit.
Below it, each audit runs the trials its claim needs to pass (:func:`bench.privacy.audit_plan.trials_needed`,
about 17,000 at epsilon 1, 10,000 at 2, 67,000 at 6); a claim that needs more (epsilon above
about 7 at 99%) is audited at the budget and recorded ``inconclusive`` unless refuted. On the
8x8 audit images a DP-Pix audit at the budget takes about a minute on a shared 2-core CPU."""
SUBMIT_AUDIT_CONFIDENCE = 0.99
"""Joint confidence of the submission audit's bounds."""
SUBMIT_AUDIT_IMAGE_SIZE = 8
"""Side of the submission audit's square images (its ragged ones are 11 x 9), as the conformance suite's."""


def submission_audit(name: str, cells) -> dict[str, Any] | None:
    """Audits every declared configuration that makes a formal claim; returns what the entry records.

    Each configuration's claim is checked by :func:`bench.audit.run_audit` (neighbouring
    inputs per the claim's unit, every value of the release read, a Clopper-Pearson lower
    bound on epsilon at 99%) with the trials its claim needs, at most
    ``SUBMIT_AUDIT_MAX_TRIALS``. Each report records its ``verdict``: ``passed``,
    ``inconclusive`` (the budget could not refute a 1.25 x over-claim: recorded, and the
    submission goes on) or ``failed`` (the submission stops).

    Args:
        name: The mechanism.
        cells: The entry's validated cells (their configurations carry the claims).

    Returns:
        Parameter label -> the audit report as a dict (``verdict``, and ``passed`` =
        verdict is ``passed``); None when no configuration makes a claim.

    Raises:
        BenchError: A lower bound exceeds its claim (nothing is run or written).
    """
    from bench.audit import run_audit
    from bench.core.registry import mechanisms

    reports: dict[str, Any] = {}
    for cell in cells:
        params = dict(cell.config.params)
        label = ", ".join(f"{k}={v}" for k, v in params.items()) or "defaults"
        if label in reports or mechanisms.get(name)(**params).claim() is None:
            continue
        report = run_audit(name, params, None, confidence=SUBMIT_AUDIT_CONFIDENCE,
                           image_size=SUBMIT_AUDIT_IMAGE_SIZE, max_trials=SUBMIT_AUDIT_MAX_TRIALS)
        if report.verdict == "failed":
            raise BenchError(f"submit {name}: the audit refutes the claim at {label}: {report.summary()}")
        if report.verdict == "inconclusive":
            print(f"[bench] submit {name}: audit at {label} recorded inconclusive: {report.reach_note()}",
                  file=sys.stderr, flush=True)
        reports[label] = report.to_dict()
    return reports or None


def cell_record(outcome, overrides: dict[str, Any], tracker) -> dict[str, Any]:
    """Returns one cell of an entry: its result, MLflow run id, ``--set`` sections, result digest and tuning-cost tag.

    Args:
        outcome: The grid's outcome of the cell (its result, or the run to read it from).
        overrides: The cell's ``--set`` sections.
        tracker: The store its run is in.
    """
    from bench.storage.tracking.verify import result_digest
    from leaderboard.verification import DIGEST_FIELD

    result = outcome.result or tracker.load_result(outcome.run_id)
    # The digest its run logged: the board checks what the entry states against it without the store.
    cell = {**result.to_dict(), "run_id": outcome.run_id, "overrides": overrides,
            DIGEST_FIELD: result_digest(result.to_json().encode())}
    return {**cell, **_tuning_cost(tracker, outcome.run_id)}


def _tuning_cost(tracker, run_id: str) -> dict[str, str]:
    """Returns ``{"tuning_cost": note}`` for a run 'bench tune' selected on private records (its tag), else {}."""
    from bench.scale.tune_cost import TUNING_COST_TAG

    try:
        note = tracker.client.get_run(run_id).data.tags.get(TUNING_COST_TAG, "")
    except Exception:  # a run the store no longer has carries no tag to copy
        note = ""
    return {"tuning_cost": note} if note else {}


def attach_sheet(entry: dict[str, Any], folder: Path, run_ids: list[str], tracker) -> Path | None:
    """Writes the sample sheet of one of the entry's runs beside its file and records it in the entry.

    The board shows it on the mechanism's page once it hashes to the recorded digest
    (:mod:`leaderboard.sheets`).

    Args:
        entry: The entry (gains ``sample_sheet``: its file name and SHA-256).
        folder: The entries folder.
        run_ids: The entry's runs, in order of preference.
        tracker: The store they are in.

    Returns:
        The sheet's path, or None when no run logged one.
    """
    from leaderboard.sheets import SHEET_FIELD, run_sheet, write_entry_sheet

    data = run_sheet(tracker, run_ids)
    if data is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    target = entry_path(folder, str(entry["name"]))
    entry[SHEET_FIELD] = write_entry_sheet(data, target)
    return target.with_suffix(".png")


def entry_path(folder: Path, name: str) -> Path:
    """Returns the file an entry of this name is written to: ``folder/<slug of the name>.json``."""
    from leaderboard.render import slug

    return folder / f"{slug(name)}.json"


def write_entry(entry: dict[str, Any], folder: Path, path: Path | None = None) -> Path:
    """Writes ``path``, by default :func:`entry_path` (replacing an entry of the same name), atomically."""
    folder.mkdir(parents=True, exist_ok=True)
    path = path or entry_path(folder, str(entry["name"]))
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(entry, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
