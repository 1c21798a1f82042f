"""Results by demographic group on a mechanism's page: one table per configuration, seeds averaged.

A cell's ``Result.groups`` (:func:`bench.core.groups.cell_groups`) holds, per attribute and
group, the task's utility and each attack's success and privacy. On the site a
configuration's seeds are pooled into one table of the same shape
(:func:`average_groups`) and laid out by :func:`bench.cell.report.group_rows`, as in the text
report. Averaging rules:

- a number is the mean over seeds, shown only where it exists in every seed; a group
  missing from some seed, or too small in some seed, gets its size and no number;
- a ``±`` is the mean of the seeds' own 95% half-widths: whatever the seeds share (the
  same test images), the half-width of a mean of k estimates is at most the mean of
  theirs, so it is conservative for the sampling error (the spread over seeds is not in it);
- a group's privacy is the mean of its seeds' scores, undefined unless defined in every seed;
- the largest gaps and the worst group are recomputed on the averaged table.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Sequence

from bench.cell.report import group_rows
from bench.core.groups import MIN_GROUP_SIZE, TOO_SMALL, largest_gaps, worst_group
from bench.core.scores import TOO_WEAK
from leaderboard.boards import Board, Leaderboard
from leaderboard.protocol import precision_suffix

__all__ = ["average_groups", "board_group_tables", "exploration_group_tables", "mechanism_groups"]

_FLAG = re.compile(r"[a-z]")
_RESERVED = ("n", "flag", "privacy")


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _size(rows: Sequence[Mapping[str, Any]]) -> Any:
    sizes = sorted({int(r["n"]) for r in rows if _finite(r.get("n"))})
    if not sizes:
        return "–"
    return sizes[0] if len(sizes) == 1 else f"{sizes[0]}–{sizes[-1]}"


def _average_row(rows: list[Mapping[str, Any] | None], metric: str, attack: bool) -> dict[str, Any]:
    """Pools one group's rows over seeds (None: the group is missing from that seed)."""
    k = len(rows)
    present = [r for r in rows if r is not None]
    out: dict[str, Any] = {"n": _size(present)}
    if len(present) < k:
        out["flag"] = f"in {len(present)} of {k} seeds only"
        return out
    small = sum(r.get("flag") == TOO_SMALL for r in present)
    if small:
        out["flag"] = TOO_SMALL if small == k else f"{TOO_SMALL} in {small} of {k} seeds"
        return out
    for key in present[0]:
        if key in _RESERVED or key.endswith("_ci95"):
            continue
        if all(_finite(r.get(key)) for r in present):
            out[key] = sum(float(r[key]) for r in present) / k
            if f"{key}_ci95" in present[0] or key in (metric, "clean"):
                halves = [r.get(f"{key}_ci95") for r in present]
                out[f"{key}_ci95"] = sum(map(float, halves)) / k if all(_finite(h) for h in halves) else None
    flags = [r["flag"] for r in present if r.get("flag")]
    if attack:
        defined = [r.get("privacy") for r in present if _finite(r.get("privacy"))]
        out["privacy"] = sum(defined) / k if len(defined) == k else None
        if out["privacy"] is None:
            weak = k - len(defined)
            out["flag"] = TOO_WEAK if weak == k else f"{TOO_WEAK} in {weak} of {k} seeds"
    elif metric not in out and flags:
        out["flag"] = flags[0]
    return out


def _average_table(tables: list[Mapping[str, Any]], metric: str, attack: bool) -> dict[str, dict[str, Any]]:
    attrs = dict.fromkeys(a for t in tables for a in t)
    out: dict[str, dict[str, Any]] = {}
    for attr in attrs:
        values = dict.fromkeys(v for t in tables for v in t.get(attr, {}))
        out[attr] = {value: _average_row([t.get(attr, {}).get(value) for t in tables], metric, attack)
                     for value in values}
    return out


def average_groups(seeds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Pools the ``Result.groups`` of one configuration's seeds into one of the same shape.

    See the module docstring for the rules. A part (the utility, an attack) missing from a
    seed counts as every group missing there.

    Args:
        seeds: Non-empty ``Result.groups`` dicts, one per seed.

    Returns:
        ``{min_size, utility?, attacks?, worst_privacy?}`` as :func:`bench.core.groups.cell_groups`
        writes it, readable by :func:`bench.cell.report.group_rows`; ``{}`` for no seeds.
    """
    seeds = [g for g in seeds if g]
    if not seeds:
        return {}
    sizes = [int(g["min_size"]) for g in seeds if _finite(g.get("min_size"))]
    out: dict[str, Any] = {"min_size": max(sizes, default=MIN_GROUP_SIZE)}
    utilities = [g.get("utility") or {} for g in seeds]
    first = next((u for u in utilities if u), None)
    if first:
        metric = first["metric"]
        table = _average_table([u.get("table", {}) if u.get("metric") == metric else {} for u in utilities],
                               metric, attack=False)
        out["utility"] = {"metric": metric, "note": first.get("note", ""), "table": table,
                          "gaps": largest_gaps(table, metric)}
    attacks: dict[str, Any] = {}
    for name in dict.fromkeys(n for g in seeds for n in g.get("attacks", {})):
        parts = [g.get("attacks", {}).get(name) or {} for g in seeds]
        metric = next(p["metric"] for p in parts if p)
        table = _average_table([p.get("table", {}) if p.get("metric") == metric else {} for p in parts], metric,
                               attack=True)
        attacks[name] = {"metric": metric, "table": table, "gaps": largest_gaps(table, metric)}
    if attacks:
        out["attacks"] = attacks
        worst = worst_group({name: part["table"] for name, part in attacks.items()})
        if worst is not None:
            out["worst_privacy"] = worst
    return out


def _seed_text(seed: Any) -> str:
    return f"{seed:g}" if _finite(seed) else "–"


def board_group_tables(board: Board, mechanism: str) -> list[dict[str, Any]]:
    """Returns a board's group tables of one mechanism: one per entry and configuration with results by group.

    Each is ``{entry, params, seeds, seeds_with, seeds_total, min_size, note, header, rows,
    gaps}``: ``rows`` are lists of ``{text, flag}`` cells (``flag``: the cell holds a
    reason instead of a number), ``gaps`` lines of text (:func:`bench.cell.report.group_rows`).
    """
    cells = board.cells[[board.standing(e).mechanism == mechanism for e in board.cells["entry"]]]
    return _tables(cells, ["entry", "configuration"], lambda config: config["entry"].iloc[0])


def exploration_group_tables(leaderboard: Leaderboard, mechanism: str) -> list[dict[str, Any]]:
    """Returns a mechanism's exploration group tables: one per benchmark, profile, precision, data and configuration.

    Exploration cells are on no board (no declared entry, a validation split, ...); their
    tables are labelled with benchmark, profile and data instead of an entry.
    """
    cells = leaderboard.exploration
    if "groups" not in cells or not len(cells):
        return []
    cells = cells[cells["mechanism"] == mechanism]
    keys = ["benchmark", "profile", "precision", "synthetic", "split", "configuration"]
    return _tables(cells, keys, lambda c: f"{c['benchmark'].iloc[0]} · {c['profile'].iloc[0]}"
                                          f"{precision_suffix(c['precision'].iloc[0])} · "
                                          f"{'synthetic' if c['synthetic'].iloc[0] else 'real'} data · "
                                          f"{c['split'].iloc[0]} split")


def _tables(cells: Any, keys: list[str], label: Any) -> list[dict[str, Any]]:
    """One pooled table per group of cells that share ``keys`` (seeds averaged)."""
    tables = []
    for _, config in cells.groupby(keys, sort=True):
        config = config.sort_values("seed", kind="mergesort")
        entry = label(config)
        params = config["params_label"].iloc[0]
        with_groups = [(seed, g) for seed, g in zip(config["seed"], config["groups"]) if isinstance(g, dict) and g]
        if not with_groups:
            continue
        pooled = average_groups([g for _, g in with_groups])
        header, rows, gaps = group_rows(pooled)
        tables.append({
            "entry": entry, "params": params or "defaults", "seeds": ", ".join(_seed_text(s) for s, _ in with_groups),
            "seeds_with": len(with_groups), "seeds_total": len(config), "min_size": pooled["min_size"],
            "note": (pooled.get("utility") or {}).get("note", ""), "header": header,
            "rows": [[{"text": str(text), "flag": i > 2 and bool(_FLAG.match(str(text)))} for i, text in enumerate(row)]
                     for row in rows],
            "gaps": gaps,
        })
    return tables


def mechanism_groups(leaderboard: Leaderboard, mechanism: str, links: Mapping[str, str]) -> list[dict[str, Any]]:
    """Returns, per board where the mechanism's cells have results by group, ``{board, href, tables}``; then its exploration cells'.

    Args:
        leaderboard: The leaderboard.
        mechanism: The mechanism's name.
        links: Board id -> link to its page from the mechanism's page (``exploration``: the
            exploration view's).
    """
    out = []
    for board in leaderboard.boards:
        if not any(s.mechanism == mechanism for s in board.standings) or "groups" not in board.cells:
            continue
        tables = board_group_tables(board, mechanism)
        if tables:
            out.append({"board": board.key.label, "href": links[board.key.id], "tables": tables})
    explored = exploration_group_tables(leaderboard, mechanism)
    if explored:
        out.append({"board": "exploration cells (on no board)", "href": links.get("exploration", ""),
                    "tables": explored})
    return out
