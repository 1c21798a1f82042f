"""Text exports of the leaderboard: Markdown, CSV and the terminal table, with their escapers.

No user-provided string reaches an export raw: control characters (ESC, newlines, C1) are
written as visible ``\\uXXXX`` escapes everywhere, Markdown metacharacters and HTML are
escaped in Markdown, and spreadsheet formulas are neutralised in CSV.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pandas as pd

from leaderboard.boards import Leaderboard
from leaderboard.protocol import K_MAX, MIN_SEEDS, precision_suffix
from leaderboard.table import (
    RANK_LINE,
    board_power_text,
    claim_audit_label,
    exploration_table,
    hardware_note,
    leaderboard_table,
    places_text,
    privacy_text,
    rank_label,
    tied_text,
)

__all__ = [
    "csv_safe",
    "markdown_escape",
    "printable",
    "render_exploration",
    "render_markdown",
    "render_terminal",
    "terminal_safe",
    "worst_group_text",
    "write_csv",
]

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: Any) -> str:
    """Writes control characters (C0 incl. ESC and newlines, DEL, C1, line separators) as ``\\uXXXX``."""
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", str(text))


def markdown_escape(text: Any) -> str:
    """Escapes a string for inline Markdown (table cells, headings); no raw HTML or control byte survives."""
    text = printable(text)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\`*_\[\]#|~])", r"\\\1", text)


def csv_safe(text: Any) -> str:
    """Makes a string safe for a CSV cell: control characters escaped, formulas neutralised with ``'``."""
    text = printable(text)
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def terminal_safe(text: Any, width: int | None = None) -> str:
    """Replaces non-printable characters (ANSI escapes, newlines) by ``\\uXXXX`` and truncates."""
    out = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in str(text))
    if width is not None and len(out) > width:
        out = out[: width - 1] + "…"
    return out


def fmt(value: Any, digits: int = 3) -> str:
    """Formats a number (``–`` for missing or NaN)."""
    if value is None or value is pd.NA:
        return "–"
    value = float(value)
    return "–" if math.isnan(value) else f"{value:.{digits}f}"


def interval_text(low: Any, high: Any) -> str:
    """Formats an interval as ``[0.120, 0.180]`` (``–`` when unknown)."""
    if fmt(low) == "–":
        return "–"
    return f"[{fmt(low)}, {fmt(high)}]"


def _csv_safe_frame(table: pd.DataFrame) -> pd.DataFrame:
    safe = table.copy()
    for column in safe.columns:
        if not pd.api.types.is_numeric_dtype(safe[column]):
            safe[column] = safe[column].map(lambda v: csv_safe(v) if isinstance(v, str) else v)
    safe.columns = [csv_safe(c) for c in safe.columns]
    return safe


def csv_text(table: pd.DataFrame) -> str:
    """Returns a table as CSV text with every text cell (and header) passed through :func:`csv_safe`."""
    return _csv_safe_frame(table).to_csv(index=False, float_format="%.6g")


def write_csv(table: pd.DataFrame, path: Any) -> None:
    """Writes a table as CSV (a path or a text buffer; see :func:`csv_text`)."""
    _csv_safe_frame(table).to_csv(path, index=False, float_format="%.6g")


PROTOCOL_LINE = (f"Ranked by the mean over ≥ {MIN_SEEDS} seeds of each seed's frontier hypervolume over a declared "
                 f"set of ≤ {K_MAX} configurations; entries share a rank unless a paired t-test over common seeds "
                 "(two-sided, 5%) separates them (docs/protocol.md). An entry file the board cannot verify (its "
                 "mechanism not "
                 "registered, a cell that does not match its result digest, a claim whose audit failed or is "
                 "missing) is listed as unverified, and one whose cells today's code would compute under other "
                 "keys (a version bump) as stale; neither is ranked.")

_MD_HEADER = ("| Rank | Entry | Mechanism | Claim type | HV mean | 95% CI | Seed spread (sd; min–max) | Place by seed | Seeds "
              "| Configurations | Flagged cells | Worst-group privacy (group most often worst) | Status |")


def worst_group_text(privacy: Any, group: str) -> str:
    """Formats an entry's worst-group privacy as ``0.339 (age_group=young)``, or ``–`` without one."""
    if fmt(privacy) == "–":
        return "–"
    return f"{fmt(privacy)} ({group})" if group else fmt(privacy)


def render_markdown(leaderboard: Leaderboard) -> str:
    """Formats the boards as Markdown: one section per board, its identity in the heading."""
    lines = ["# PrivBench leaderboard", "", PROTOCOL_LINE, ""]
    table = leaderboard_table(leaderboard)
    if table.empty:
        return "\n".join(lines + ["No declared entries yet.", ""])
    for board in leaderboard.boards:
        key = board.key
        rows = table[table["board"] == key.id]
        mixed = precision_suffix(key.precision)
        lines += [f"## {markdown_escape(key.benchmark)} · profile {markdown_escape(key.profile)}{mixed} · "
                  f"{markdown_escape(key.data_label)}", "",
                  f"Settings: {markdown_escape(rows['settings'].iloc[0])}", ""]
        note = hardware_note(board)
        if note:
            lines += [markdown_escape(note), ""]
        power = board_power_text(board)
        lines += [markdown_escape(RANK_LINE + (" " + power if power else "")), ""]
        lines += [_MD_HEADER, "|" + "---|" * 13]
        for standing, r in zip(board.standings, rows.itertuples(index=False)):
            lines.append("| " + " | ".join([
                markdown_escape(rank_label(standing, board)), markdown_escape(r.entry), markdown_escape(r.mechanism),
                markdown_escape(claim_audit_label(standing)), fmt(r.hv_mean), interval_text(r.hv_low, r.hv_high),
                f"{fmt(r.hv_std)}; {fmt(r.hv_min)}–{fmt(r.hv_max)}", places_text(standing),
                f"{r.seeds} of {len(standing.declared_seeds)}",
                str(r.configurations), f"{r.flagged} (attack too weak)" if r.flagged else "0",
                markdown_escape(worst_group_text(r.worst_group_privacy, r.worst_group)), markdown_escape(r.status),
            ]) + " |")
        lines.append("")
        notes = [f"- {markdown_escape(s.name)}: {markdown_escape(note)}" for s in board.standings for note in s.notes]
        if notes:
            lines += [*notes, ""]
    return "\n".join(lines)


def _columns(headers: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if i in right else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths))).rstrip()

    return [line(headers), *map(line, rows)]


def render_terminal(leaderboard: Leaderboard, width: int = 32) -> str:
    """Formats the boards as plain text: per board its identity, then its entries.

    Args:
        leaderboard: The leaderboard.
        width: Longest shown name; longer ones are cut with "…".

    Returns:
        One block per board; control characters in names are shown escaped.
    """
    if not leaderboard.boards:
        return "No declared entries yet (see 'bench leaderboard show --exploration' for other cells).\n"
    headers = ["rank", "entry", "claim", "HV mean", "95% CI", "sd", "by seed", "seeds", "configs", "flagged", "status"]
    blocks = []
    for board in leaderboard.boards:
        rows = []
        for s in board.standings:
            e = s.estimate
            rows.append([
                rank_label(s, board), terminal_safe(s.name, width), terminal_safe(claim_audit_label(s), width + 16),
                fmt(e.mean if e else None), interval_text(e.low, e.high) if e else "–", fmt(e.std if e else None),
                places_text(s), f"{len(s.complete_seeds)}/{len(s.declared_seeds)}", str(s.configurations),
                str(s.flagged),
                terminal_safe(s.status, 160 if s.status.startswith(("unverified", "stale")) else 48),
            ])
        head, note, power = terminal_safe(board.key.label), hardware_note(board), board_power_text(board)
        if note:
            head += "\n" + terminal_safe(note)
        shown = lambda n: terminal_safe(n, width)  # noqa: E731
        ties = [f"  tied: {shown(s.name)} shares its rank with {tied_text(s, board, shown)}"
                for s in board.standings if s.tied_with and not board.cannot_rank]
        ties += [f"  not separated either: {shown(s.name)} and {', '.join(map(shown, s.not_separated))} (other ranks)"
                 for s in board.standings if s.not_separated]
        notes = [f"  note: {terminal_safe(s.name, width)}: {terminal_safe(note)}" for s in board.standings
                 for note in s.notes]
        summary = [terminal_safe(power)] if power else []
        blocks.append("\n".join([head, *_columns(headers, rows, {3, 5, 7, 8, 9}), *summary, *ties, *notes]))
    return "\n\n".join(blocks) + "\n\n" + RANK_LINE + "\n"


def render_exploration(leaderboard: Leaderboard, width: int = 32) -> str:
    """Formats the exploration cells (never ranked) as plain text, grouped by board identity."""
    table = exploration_table(leaderboard)
    if table.empty:
        return "No exploration cells: every cell is part of a declared entry.\n"
    headers = ["mechanism", "params", "seed", "split", "utility", "privacy", "reason", "run id"]
    blocks = []
    for (benchmark, profile, data, settings, precision), group in table.groupby(
            ["benchmark", "profile", "data", "settings", "precision"], sort=True):
        rows = [[terminal_safe(r.mechanism, width), terminal_safe(r.params, 40), fmt(r.seed, 0),
                 terminal_safe(r.split), fmt(r.utility, 4), terminal_safe(privacy_text(r.privacy, r.flag)),
                 terminal_safe(r.reason), terminal_safe(r.run_id, 34)] for r in group.itertuples(index=False)]
        head = terminal_safe(f"{benchmark} · profile {profile}{precision_suffix(precision)} · {data} · {settings} — "
                             "exploration, not ranked")
        blocks.append("\n".join([head, *_columns(headers, rows, {2, 4})]))
    return "\n\n".join(blocks) + "\n"
