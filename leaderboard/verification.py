"""What the board verifies of an entry file before it ranks it.

An entry file is text anyone can edit, so the board believes none of it without checking
what it can check here, without the MLflow store the cells came from:

- its mechanism is registered in this installation (cells of an older version of it are
  *stale*, :mod:`leaderboard.staleness`, which the board shows apart);
- every cell carries the SHA-256 of its result.json (``result_sha256``, the digest its
  MLflow run logged, :mod:`bench.storage.tracking.verify`) and what the entry states hashes to it;
- every cell that makes a formal claim has an audit of that claim in the entry's ``audit``
  record that did not refute it: ``passed`` (or ``passed: true`` in older entries), or
  ``inconclusive`` (the trial budget cannot reach a claim that large, e.g. epsilon 100: the
  board shows the verdict beside the claim and ranks by measured privacy, never by epsilon,
  so an unreachable claim gains nothing); a ``failed`` audit or none makes it unverified;
- ``bench submit``'s conformance record says passed.

An entry failing any of these is *unverified*: the board shows why and never ranks it
(:meth:`leaderboard.declare.Declaration.problem`). A digest is not a signature: it tells an
entry edited after submission, and ``bench leaderboard verify`` recomputes sampled cells
(:mod:`leaderboard.reproduce`) to tell one whose numbers were never computed.

Local runs are checked where they are read (each run's result.json against its logged
digest, :func:`leaderboard.store.runs_frame`) and are computed by registered code, so
their suites' entries are verified; their claims carry no audit record and are shown
``not audited``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from bench.core.result import Result
from bench.storage.tracking.verify import result_digest
from leaderboard.protocol import canonical_params

__all__ = [
    "AUDIT_PASSED",
    "DIGEST_FIELD",
    "INCONCLUSIVE",
    "NOT_AUDITED",
    "VERIFIED",
    "EntryCheck",
    "audit_text",
    "audit_verdict",
    "cell_digest",
    "check_entry",
]

VERIFIED = "verified"
AUDIT_PASSED = "passed"
NOT_AUDITED = "not audited"
INCONCLUSIVE = "inconclusive"
DIGEST_FIELD = "result_sha256"
"""The key of a cell's result digest in an entry file."""
_ORDER = ("failed", NOT_AUDITED, INCONCLUSIVE, AUDIT_PASSED)


@dataclass(frozen=True)
class EntryCheck:
    """What checking one entry found.

    Attributes:
        problems: Why it is not verified (empty when it is).
        audits: Cell key -> audit verdict of its claim (``passed``, ``inconclusive``,
            ``failed`` or ``not audited``), for the cells that make a claim.
    """

    problems: tuple[str, ...] = ()
    audits: Mapping[str, str] = field(default_factory=dict)

    @property
    def verified(self) -> bool:
        """Whether every check passed."""
        return not self.problems

    @property
    def status(self) -> str:
        """``verified``, or ``unverified: <why>``."""
        return VERIFIED if self.verified else f"unverified: {'; '.join(self.problems)}"


def cell_digest(cell: Mapping[str, Any]) -> str:
    """Returns the SHA-256 of the result.json that a cell of an entry states (the bytes its run logged)."""
    return result_digest(Result.from_dict(cell).to_json().encode())


def audit_verdict(report: Any) -> str:
    """Returns an audit report's verdict: its ``verdict``, else ``passed``/``failed`` from a legacy ``passed`` flag."""
    if not isinstance(report, Mapping):
        return NOT_AUDITED
    verdict = report.get("verdict")
    if verdict in ("passed", "inconclusive", "failed"):
        return str(verdict)
    if "passed" in report:
        return AUDIT_PASSED if report.get("passed") is True else "failed"
    return NOT_AUDITED


def audit_text(verdicts: Any) -> str:
    """Summarises claim verdicts: ``""`` without claims, one verdict, or the least assuring with its count."""
    found = [v for v in verdicts if v]
    if not found:
        return ""
    worst = min(found, key=lambda v: _ORDER.index(v) if v in _ORDER else 0)
    shown = "audit passed" if worst == AUDIT_PASSED else ("not audited" if worst == NOT_AUDITED else f"audit {worst}")
    return shown if all(v == worst for v in found) else f"{shown} ({found.count(worst)} of {len(found)} claimed cells)"


def check_entry(entry: Mapping[str, Any]) -> EntryCheck:
    """Checks an entry file (as :func:`leaderboard.store.load_entry` returns it).

    Args:
        entry: The entry: ``mechanism``, ``cells`` and, from ``bench submit``, each cell's
            ``result_sha256``, ``audit`` and ``conformance``.

    Returns:
        What was found; :attr:`EntryCheck.status` says it in one line.

    Under the ``bench`` command the answer is kept for this code and the entry's content, and
    read back while it holds (:mod:`bench.storage.derived`).
    """
    from bench.core import registry
    from bench.storage import derived

    digest = entry_digest(entry) if derived.is_enabled() else None
    if digest is not None and registry.untouched():
        kept = derived.recall("entry-check", {"entry": digest})
        if isinstance(kept, dict):
            try:
                return EntryCheck(tuple(map(str, kept["problems"])), {str(k): str(v) for k, v in kept["audits"].items()})
            except (KeyError, TypeError, AttributeError):
                pass
    found = _check_entry(entry)
    if digest is not None and registry.only_builtins():
        derived.keep("entry-check", {"entry": digest}, {"problems": list(found.problems), "audits": dict(found.audits)})
    return found


def entry_digest(entry: Mapping[str, Any]) -> str | None:
    """Returns the SHA-256 of everything an entry holds (as loaded), or None where it is not JSON."""
    import hashlib
    import json

    try:
        text = json.dumps(entry, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(text.encode()).hexdigest()


def _check_entry(entry: Mapping[str, Any]) -> EntryCheck:
    cells = [c for c in entry.get("cells") or [] if isinstance(c, Mapping)]
    problems = _mechanism_problems(str(entry.get("mechanism")), cells)
    problems += _digest_problems(cells)
    audits = _cell_audits(entry, cells)
    lacking = [v for v in audits.values() if v not in (AUDIT_PASSED, INCONCLUSIVE)]
    if lacking:
        problems.append(f"{len(lacking)} of {len(audits)} claimed cell(s) without a passed or inconclusive audit "
                        f"({audit_text(lacking)})")
    conformance = entry.get("conformance")
    if not (isinstance(conformance, Mapping) and conformance.get("passed") is True):
        problems.append("no passed conformance record")
    return EntryCheck(tuple(problems), audits)


def _mechanism_problems(name: str, cells: list[Mapping[str, Any]]) -> list[str]:
    from bench.core.registry import mechanisms

    if name not in mechanisms:
        return [f"mechanism {name!r} is not registered here"]
    problems = []
    others = sorted({str(c.get("mechanism")) for c in cells} - {name})
    if others:
        problems.append(f"cells of other mechanisms ({', '.join(others)})")
    return problems  # cells of another version of it are stale, not unverified (leaderboard.staleness)


def _digest_problems(cells: list[Mapping[str, Any]]) -> list[str]:
    missing = changed = 0
    for cell in cells:
        stated = cell.get(DIGEST_FIELD)
        if not isinstance(stated, str):
            missing += 1
            continue
        try:
            if cell_digest(cell) != stated:
                changed += 1
        except (ValueError, TypeError):
            changed += 1
    problems = []
    if missing:
        problems.append(f"{missing} of {len(cells)} cell(s) carry no result digest (resubmit with 'bench submit')")
    if changed:
        problems.append(f"{changed} of {len(cells)} cell(s) do not match their result digest (edited after submission)")
    return problems


def _cell_audits(entry: Mapping[str, Any], cells: list[Mapping[str, Any]]) -> dict[str, str]:
    """Returns cell key -> the verdict of the audit of its claim, for every cell that makes one."""
    reports = entry.get("audit") if isinstance(entry.get("audit"), Mapping) else {}
    declared = {str(c.get("cell_key")): c.get("params") or {}
                for c in ((entry.get("declaration") or {}).get("cells") or []) if isinstance(c, Mapping)}
    out = {}
    for cell in cells:
        claim = cell.get("claim")
        if not isinstance(claim, Mapping) or not claim:
            continue
        key = str(cell.get("cell_key"))
        report = _report_for(reports, cell.get("params") or {}, declared.get(key, cell.get("params") or {}))
        out[key] = audit_verdict(report) if report is not None and _same_claim(report, claim) else NOT_AUDITED
    return out


def _report_for(reports: Mapping[str, Any], resolved: Mapping[str, Any], declared: Mapping[str, Any]) -> Any:
    """Returns the audit report of a configuration: by its resolved parameters, else by its label."""
    wanted = {f"{k}={v}" for k, v in declared.items()}
    for label, report in reports.items():
        params = report.get("params") if isinstance(report, Mapping) else None
        if isinstance(params, Mapping) and _canonical(params) == _canonical(resolved):
            return report
        parts = set() if label == "defaults" else set(str(label).split(", "))
        if parts == wanted:
            return report
    return None


def _canonical(params: Mapping[str, Any]) -> str | None:
    try:
        return canonical_params(dict(params))
    except (TypeError, ValueError):
        return None


def _same_claim(report: Mapping[str, Any], claim: Mapping[str, Any]) -> bool:
    """Whether an audit covers this claim, where the report names its claim: same epsilon and unit, and a delta no larger.

    A cell's claim can carry a larger delta than the audited one (the Laplace sampler's clamp
    adds one that depends on the cell's image size, and the audit runs on small images). An
    audit of (epsilon, delta') that the lower bound did not refute does not refute (epsilon,
    delta) for any delta >= delta' either: a larger delta only lowers the bound.
    """
    audited = report.get("claim")
    if not isinstance(audited, Mapping):
        return True
    a, b = _number(audited.get("epsilon")), _number(claim.get("epsilon"))
    if not (a == b or (math.isnan(a) and math.isnan(b))):
        return False
    if not _number(audited.get("delta", 0.0)) <= _number(claim.get("delta", 0.0)):
        return False
    return str(audited.get("unit", "")) == str(claim.get("unit", ""))


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
