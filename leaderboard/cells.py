"""Result rows as flat leaderboard cells: axes, flags, claim, board key; re-runs averaged."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from bench.core.scores import TOO_WEAK
from bench.privacy.dpsgd.canary_scores import PER_SAMPLE_TOLERANCE
from bench.system import precision
from leaderboard.protocol import BoardKey, board_overrides, canonical_params, canonical_settings

__all__ = [
    "REFUTED",
    "CELL_COLUMNS",
    "NO_ADVERSARY",
    "average_reruns",
    "cells_frame",
    "claim_label",
    "formal_claim",
    "hardware_label",
    "withheld_text",
    "most_common",
    "params_label",
    "training_audit_text",
    "training_claim_label",
]

NO_ADVERSARY = "no adversary"
"""The flag of a cell that ran no attack (its privacy is not measured)."""
NOT_AUDITED = "not audited"
"""The audit verdict of a claim with no audit on record (:mod:`leaderboard.verification`)."""

CELL_COLUMNS = [
    "board",
    "board_key",
    "benchmark",
    "profile",
    "synthetic",
    "dataset_fingerprint",
    "settings",
    "precision",
    "mechanism",
    "mechanism_version",
    "params",
    "params_label",
    "configuration",
    "seed",
    "split",
    "metric",
    "utility",
    "utility_se",
    "privacy",
    "privacy_se",
    "privacy_attack",
    "flag",
    "flag_detail",
    "epsilon",
    "delta",
    "unit",
    "withheld",
    "backed",
    "claim_label",
    "audit",
    "training_claim",
    "tuning_cost",
    "source",
    "run_id",
    "cell_key",
    "groups",
    "worst_group_privacy",
    "worst_group",
    "hardware",
    "membership_clean",
]


def _mapping(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            parsed = json.loads(value)
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _text(value: Any, default: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return default
    return str(value)


def params_label(params: Any) -> str:
    """Formats mechanism parameters as ``k=v, k=v`` in key order.

    Args:
        params: A dict, a JSON object string, or anything else (shown as text).
    """
    mapping = _mapping(params)
    if mapping is None:
        return _text(params)
    parts = []
    for key in sorted(mapping, key=str):
        value = mapping[key]
        if not (value is None or isinstance(value, (str, int, float, bool))):
            value = json.dumps(value, sort_keys=True, default=str)
        parts.append(f"{key}={value}")
    return ", ".join(parts)


def withheld_text(withheld: Any) -> str:
    """Returns the splits a claim is withheld for, ``train`` or ``train, val`` ("" for none)."""
    if isinstance(withheld, str):
        return withheld
    if isinstance(withheld, (list, tuple)):
        return ", ".join(str(split) for split in withheld)
    return ""


def claim_label(epsilon: float, delta: float, unit: str, withheld: str = "", backed: bool = True) -> str:
    """Formats a claim as ``eps=3 [unit]`` (with delta when it is not zero).

    Args:
        epsilon: The claimed epsilon (NaN: no claim, "").
        delta: Its delta.
        unit: Its unit.
        withheld: The splits it is withheld for (:func:`withheld_text`): the label then ends
            ``(withheld for train)``, as ``bench run`` prints it, and is no formal claim.
        backed: False for a nominal epsilon the code cannot back: the label then reads
            ``UNBACKED (nominal eps=3) [unit]``, as ``bench run`` prints it, and is no formal claim.
    """
    if math.isnan(epsilon):
        return ""
    delta_part = f", delta={delta:g}" if delta and not math.isnan(delta) else ""
    number = f"eps={epsilon:g}{delta_part}" if backed else f"UNBACKED (nominal eps={epsilon:g}{delta_part})"
    text = f"{number} [{unit}]" if unit else number
    return f"{text} (withheld for {withheld})" if withheld else text


def formal_claim(withheld: str, backed: bool) -> bool:
    """Whether a mechanism's claim is a formal one: neither withheld for a split nor UNBACKED.

    Such a claim has one status: its audit verdict; a withheld or unbacked one is shown as
    that alone, never also as ``not audited``.
    """
    return not withheld and bool(backed)


TUNING_NOT_IN_EPSILON = "tuning cost not in ε"
"""Marks a training claim whose DP-SGD settings a tuning study selected on the private records."""


def training_claim_label(claim: dict[str, Any] | None, tuning_cost: str = "", audit: str = "") -> str:
    """Formats a training claim: ``DP-SGD(flat, ε=3): eps=3, delta=1e-05 [training record (DP-SGD)]``.

    A claim the code cannot back reads ``UNBACKED (nominal eps=3 ...)``: never a plain epsilon.
    Its one-run audit (``audit``, :func:`training_audit_text`) follows in parentheses. One
    whose settings ``bench tune`` selected on the private records (``tuning_cost``, the
    run's ``bench.tuning_cost`` tag) ends ``(tuning cost not in ε)``.
    """
    if not claim:
        return ""
    epsilon, delta = _number(claim.get("epsilon")), _number(claim.get("delta", 0.0))
    text = claim_label(epsilon, delta, _text(claim.get("unit"))) if math.isfinite(epsilon) else "non-private"
    if not claim.get("backed", True):
        text = f"UNBACKED (nominal {text})"
    if audit and math.isfinite(epsilon):
        text = f"{text} ({audit})"
    if tuning_cost and math.isfinite(epsilon):
        text = f"{text} ({TUNING_NOT_IN_EPSILON})"
    method = _text(claim.get("method"))
    return f"{method}: {text}" if method else text


REFUTED = "REFUTED by its one-run audit"
"""Marks a training claim whose one-run canary audit bounds epsilon above the claim."""


def training_audit_text(attacks: dict[str, Any] | None) -> str:
    """Returns what the membership adversary's one-run audit showed of a training claim ('' when none ran).

    ``one-run audit: eps >= 2.43 (ceiling 4.52); measured eps 8.1 (>= 7.2)``, or
    ``REFUTED by its one-run audit: eps >= 9.1`` (``measured eps >= 2.4`` when the canaries'
    measured mechanism refutes it).
    """
    metrics = (attacks or {}).get("membership")
    bound = _number(metrics.get("audit.epsilon_lower_bound")) if isinstance(metrics, dict) else math.nan
    if not math.isfinite(bound):
        return ""
    measured, low = _number(metrics.get("audit.observed.epsilon")), _number(metrics.get("audit.observed.epsilon_low"))
    if _number(metrics.get("audit.refutes_claim")) == 1.0:
        row_error = _number(metrics.get("audit.observed.per_sample_error"))
        if row_error > PER_SAMPLE_TOLERANCE:
            return f"{REFUTED}: per-sample gradients off by {row_error:.2g}"
        if _number(metrics.get("audit.observed_refutes_claim")) == 1.0:
            return f"{REFUTED}: measured eps >= {low:.3g} (one-run bound {bound:.3g})"
        return f"{REFUTED}: eps >= {bound:.3g}"
    text = f"one-run audit: eps >= {bound:.3g} (ceiling {_number(metrics.get('audit.epsilon_ceiling')):.3g})"
    return f"{text}; measured eps {measured:.3g} (>= {low:.3g})" if math.isfinite(low) else text


def _utility(row: pd.Series) -> tuple[str, float, float]:
    metric = _text(row.get("primary_metric"))
    utility = _mapping(row.get("utility"))
    if utility is None:
        return metric, _number(row.get("utility")), math.nan
    half_width = _number(utility.get(f"{metric}_ci95"))
    return metric, _number(utility.get(metric)), half_width / 1.96 if half_width > 0 else math.nan


def _privacy(row: pd.Series) -> tuple[float, float, str, str]:
    """Returns (privacy score or NaN, its standard error or NaN when not recorded, flag, detail of flagged targets)."""
    score = _number(row.get("privacy_score"))
    flags = _mapping(row.get("privacy_flags")) or {}
    detail = "; ".join(f"{target}: {why}" for target, why in sorted(flags.items()))
    if math.isfinite(score):
        se = _number(row.get("privacy_score_se"))
        return score, se if se >= 0 else math.nan, "", detail
    attacks = _mapping(row.get("attacks"))
    return math.nan, math.nan, (NO_ADVERSARY if attacks is not None and not attacks else TOO_WEAK), detail


def _deciding_attack(row: pd.Series, score: float) -> str:
    """Returns the adversary whose score is the cell's privacy score (the lowest; "" when none is defined)."""
    scores = {name: _number(value) for name, value in (_mapping(row.get("privacy")) or {}).items()}
    defined = sorted((value, name) for name, value in scores.items() if math.isfinite(value))
    if not defined or not math.isfinite(score):
        return ""
    return min(defined, key=lambda pair: (abs(pair[0] - score), pair[1]))[1]


def _groups(row: pd.Series) -> tuple[dict[str, Any], float, str]:
    """Returns (``Result.groups`` or ``{}``, the worst group's privacy or NaN, that group or "")."""
    groups = _mapping(row.get("groups")) or {}
    worst = groups.get("worst_privacy") if isinstance(groups.get("worst_privacy"), dict) else {}
    privacy = _number(worst.get("privacy"))
    return groups, privacy, _text(worst.get("group")) if math.isfinite(privacy) else ""


def data_fingerprint(row: pd.Series | dict[str, Any]) -> str:
    """Returns the fingerprint of the data a board's cells share.

    It is the cell's own dataset's fingerprint, followed (after ``+``) by those of the other
    real datasets whose splits it read (``Result.data_reads``: a transfer task's target),
    which every cell of its benchmark reads alike. A synthetic one is a function of its
    options and generator version, already in the board's protocol. Public sets are left
    out: only a mechanism that fits reads one, and it is part of that mechanism's release.
    """
    own = _text(row.get("dataset_fingerprint"))
    reads = row.get("data_reads")
    if not isinstance(reads, list):
        return own
    others = sorted({_text(r.get("fingerprint")) for r in reads
                     if isinstance(r, dict) and r.get("part") == "splits" and not r.get("synthetic", True)
                     and _text(r.get("fingerprint")) != own})
    return "+".join([own, *others])


def hardware_label(row: pd.Series | dict[str, Any]) -> str:
    """Names what computed a cell: ``<CPU model> (<ISA>), <n> threads``, a GPU's name, or the device alone.

    Read from ``Result.versions`` (``cpu``, ``cpu_capability`` and ``cpu_threads``, ``gpu``);
    results written before those were recorded say "model not recorded" (and name no ISA).
    """
    versions = _mapping(row.get("versions")) or {}
    device = _text(row.get("device"), "cpu").split(":")[0]
    if device == "cpu":
        threads = _text(versions.get("cpu_threads"))
        model = _text(versions.get("cpu"), "cpu (model not recorded)")
        capability = _text(versions.get("cpu_capability"))
        model = f"{model} ({capability})" if capability else model
        return f"{model}, {threads} thread{'' if threads == '1' else 's'}" if threads else model
    return _text(versions.get("gpu"), f"{device} (model not recorded)")


def _board(row: pd.Series) -> BoardKey:
    attacks = _mapping(row.get("attacks")) or {}
    overrides = board_overrides(_text(row.get("task")), _mapping(row.get("overrides")) or {})
    synthetic = row.get("synthetic")
    return BoardKey(
        benchmark=_text(row.get("task")),
        profile=_text(row.get("profile")),
        synthetic=bool(synthetic) if synthetic is not None and synthetic == synthetic else True,
        dataset_fingerprint=data_fingerprint(row),
        settings=canonical_settings(overrides, attacks),
        protocol=_text(row.get("protocol")),
        precision=precision.recorded(_mapping(row.get("versions"))),
    )


def cells_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Normalises result rows into one flat row per run.

    Args:
        df: Rows of ``Result.to_dict()``, optionally with ``source``, ``run_id`` and
            ``overrides`` (the cell's ``--set`` sections); dicts may be JSON strings.

    Returns:
        A frame with :data:`CELL_COLUMNS`: ``utility`` is the primary metric and
        ``utility_se`` its standard error from the logged 95% CI (NaN without one);
        ``privacy`` is the privacy score, NaN when undefined, in which case ``flag``
        says why (``attack too weak`` or ``no adversary``); ``privacy_se`` its standard
        error within the run (``Result.privacy_score_se``, the delta method's; NaN when the
        result does not record one); ``privacy_attack`` the adversary that set it (the one
        with the lowest score; "" when none is defined); ``withheld`` the splits the mechanism's claim is withheld for ("" for
        none; such a claim is no formal claim); ``backed`` False for a mechanism's claim the
        code cannot back (UNBACKED, no formal claim either); ``tuning_cost`` the run's
        ``bench.tuning_cost`` tag ("" for none); ``board`` is the id of the
        cell's :class:`~leaderboard.protocol.BoardKey` (``board_key``); ``groups`` is
        ``Result.groups`` (``{}`` without demographic results), ``audit`` the verdict of the
        audit of its claim (an entry's ``audit`` record; ``not audited`` for a formal claim without
        one, "" without a formal claim: a withheld or UNBACKED claim has that one status), ``worst_group_privacy``
        its worst group's privacy (NaN without one), ``worst_group`` that group
        (``attribute=value``, "" without one) and ``hardware`` what computed it
        (:func:`hardware_label`).

    Raises:
        ValueError: Rows are given without a ``task`` or ``mechanism`` column.
    """
    if len(df) == 0:
        return pd.DataFrame(columns=CELL_COLUMNS)
    missing = {"task", "mechanism"} - set(df.columns)
    if missing:
        raise ValueError(f"results lack column(s) {sorted(missing)}")
    rows = []
    for _, row in df.iterrows():
        metric, utility, utility_se = _utility(row)
        privacy, privacy_se, flag, detail = _privacy(row)
        claim = _mapping(row.get("claim")) or {}
        epsilon = _number(claim.get("epsilon")) if claim else math.nan
        delta = _number(claim.get("delta", 0.0)) if claim else math.nan
        unit = _text(claim.get("unit")) if claim else ""
        withheld = withheld_text(claim.get("withheld"))
        backed = bool(claim.get("backed", True)) if claim else True
        params = _mapping(row.get("params")) or {}
        tuning_cost = _text(row.get("tuning_cost"))
        training = training_claim_label(_mapping(row.get("training_claim")), tuning_cost,
                                        training_audit_text(_mapping(row.get("attacks"))))
        key = _board(row)
        groups, worst_privacy, worst_group = _groups(row)
        rows.append({
            "board": key.id, "board_key": key, "benchmark": key.benchmark, "profile": key.profile,
            "synthetic": key.synthetic, "dataset_fingerprint": key.dataset_fingerprint, "settings": key.settings,
            "precision": key.precision,
            "mechanism": _text(row["mechanism"]), "mechanism_version": _number(row.get("mechanism_version")),
            "params": params, "params_label": params_label(params), "configuration": canonical_params(params),
            "seed": _number(row.get("seed")), "split": _text(row.get("eval_split"), "test"),
            "metric": metric, "utility": utility, "utility_se": utility_se, "privacy": privacy,
            "privacy_se": privacy_se, "privacy_attack": _deciding_attack(row, privacy), "flag": flag, "flag_detail": detail, "epsilon": epsilon, "delta": delta,
            "unit": unit, "withheld": withheld, "backed": backed,
            "claim_label": "; ".join(x for x in (claim_label(epsilon, delta, unit, withheld, backed),
                                                 training and f"training: {training}") if x),
            "audit": (_text(row.get("audit")) or NOT_AUDITED) if claim and formal_claim(withheld, backed) else "",
            "training_claim": training, "tuning_cost": tuning_cost, "source": _text(row.get("source"), "local"),
            "run_id": _text(row.get("run_id")), "cell_key": _text(row.get("cell_key")),
            "groups": groups, "worst_group_privacy": worst_privacy, "worst_group": worst_group,
            "hardware": hardware_label(row), "membership_clean": _membership_clean(_mapping(row.get("attacks"))),
        })
    return pd.DataFrame(rows, columns=CELL_COLUMNS)


def _membership_clean(attacks: dict[str, Any] | None) -> dict[str, float]:
    """The membership attacks' TPRs on the non-private model (``lira.tpr_at_fpr_0.01_clean`` ...; {} without)."""
    metrics = (attacks or {}).get("membership")
    if not isinstance(metrics, dict):
        return {}
    return {k: float(v) for k, v in metrics.items() if k.endswith("_clean") and ".tpr_at_fpr_" in k
            and isinstance(v, (int, float)) and math.isfinite(v)}


def most_common(values: Any) -> tuple[str, int]:
    """Returns the most frequent non-empty string and its count (ties: the first in sorted order; ``("", 0)``)."""
    counts: dict[str, int] = {}
    for value in values:
        if isinstance(value, str) and value:
            counts[value] = counts.get(value, 0) + 1
    if not counts:
        return "", 0
    return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _mean_se(errors: pd.Series) -> float:
    """Standard error of the mean of measurements with these errors (NaN when none, or any unknown)."""
    values = errors.to_numpy(dtype=float)
    if len(values) == 0 or not np.all(np.isfinite(values)):
        return math.nan
    return float(math.sqrt(np.sum(values**2)) / len(values))


def average_reruns(cells: pd.DataFrame, by: tuple[str, ...] = ("board", "cell_key")) -> pd.DataFrame:
    """Averages the runs of each cell (one board, one cell key) into one row.

    Re-runs of a configuration with one seed are repeated measurements of one point, never
    extra points. Utility is their mean, with standard error ``sqrt(sum se^2) / m``;
    privacy is the mean of the defined scores, with standard error ``sqrt(sum se^2) / m``
    over them (NaN when any of them records none); a cell whose every run is flagged stays
    flagged, and one flagged in some runs says so in ``flag_detail``. The worst group's
    privacy is likewise the mean of the defined ones, ``worst_group`` the group most
    often worst, ``groups`` the first run's tables that are not empty, and ``hardware``
    every distinct :func:`hardware_label` of the runs, joined with "; ".

    Args:
        cells: Rows of :func:`cells_frame`.
        by: The columns that name one cell (add ``entry`` when a cell is in several entries).

    Returns:
        The same columns, one row per group of ``by``, plus ``runs`` (how many were
        averaged); ``run_id`` lists the averaged runs.
    """
    if len(cells) == 0:
        return cells.assign(runs=pd.Series(dtype=int))
    out = []
    for _, group in cells.groupby(list(by), sort=False):
        first = group.iloc[0].to_dict()
        runs = len(group)
        defined = group["privacy"].dropna()
        first.update({
            "utility": float(group["utility"].mean()),
            "utility_se": _mean_se(group["utility_se"]),
            "privacy": float(defined.mean()) if len(defined) else math.nan,
            "privacy_se": _mean_se(group.loc[defined.index, "privacy_se"]) if "privacy_se" in group else math.nan,
            "flag": "" if len(defined) else first["flag"],
            "run_id": ", ".join(dict.fromkeys(r for r in group["run_id"] if r)),
            "runs": runs,
        })
        if "hardware" in group:
            first["hardware"] = "; ".join(sorted(set(group["hardware"])))
        if "worst_group_privacy" in group:
            worst = group["worst_group_privacy"].dropna()
            first["worst_group_privacy"] = float(worst.mean()) if len(worst) else math.nan
            first["worst_group"] = most_common(group.loc[worst.index, "worst_group"])[0]
        if "groups" in group:
            first["groups"] = next((g for g in group["groups"] if g), first["groups"])
        if 0 < len(defined) < runs:
            note = f"{TOO_WEAK} in {runs - len(defined)} of {runs} runs"
            first["flag_detail"] = "; ".join(x for x in (note, first["flag_detail"]) if x)
        out.append(first)
    return pd.DataFrame(out, columns=[*cells.columns, "runs"])
