"""The static leaderboard site: index, one page per board, exploration, one page per mechanism.

Every user-provided string (mechanism, benchmark, entry, parameter, unit and setting
names) is escaped by Jinja's autoescaping in HTML (control characters made visible), by
:func:`script_json` inside ``<script>``, and by :mod:`leaderboard.exports` in the Markdown
and CSV files; file names are :func:`slug` s, never raw names. Pages carry a strict
Content-Security-Policy (no inline script, nothing from elsewhere).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import warnings
from pathlib import Path
from typing import Any, Mapping

import jinja2
import numpy as np
import pandas as pd
from markupsafe import Markup

from bench.errors import BenchError
from leaderboard.boards import Board, Leaderboard, Standing
from leaderboard.exports import PROTOCOL_LINE, fmt, interval_text, render_markdown, write_csv
from leaderboard.groups_view import mechanism_groups
from leaderboard.plot import frontier_plot
from leaderboard.protocol import precision_suffix, settings_label
from leaderboard.table import (
    RANK_LINE,
    board_power_text,
    exploration_table,
    hardware_note,
    leaderboard_table,
    places_text,
    privacy_text,
    rank_label,
    tied_text,
    worst_group,
)
from leaderboard.verification import VERIFIED

__all__ = ["board_file_name", "build_site", "script_json", "slug"]

TEMPLATES = Path(__file__).parent / "templates"
STATIC = ("style.css", "table.js")
SHEET_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".webp"}


def slug(name: str, digest: int = 8) -> str:
    """Derives a safe file-name stem from any string: an ASCII slug plus a short hash.

    Args:
        name: Any string (a mechanism or benchmark name).
        digest: Number of hex digits of the SHA-256 of ``name`` to append.

    Returns:
        ``[a-z0-9-]`` only, at most 40 + 1 + ``digest`` characters; distinct names get
        distinct slugs unless their hashes collide.
    """
    stem = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40].strip("-") or "x"
    return f"{stem}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:digest]}"


def board_file_name(board: Board) -> str:
    """Returns the name whose :func:`slug` is the stem of a board's page and plot files."""
    return f"{board.key.benchmark} {board.key.profile} {board.key.id}"


class _Names:
    """Assigns collision-free slugs to a set of names."""

    def __init__(self, names):
        self.slugs: dict[str, str] = {}
        taken: set[str] = set()
        for name in sorted(set(names)):
            digest = 8
            while (candidate := slug(name, digest)) in taken:
                digest += 4
            taken.add(candidate)
            self.slugs[name] = candidate

    def __getitem__(self, name: str) -> str:
        return self.slugs[name]


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) or math.isinf(value) else float(value)
    if value is pd.NA or value is None:
        return None
    if isinstance(value, (str, int, bool)):
        return value
    return str(value)


def script_json(value: Any) -> Markup:
    """Serialises data for a ``<script type="application/json">`` element.

    ``<``, ``>``, ``&``, U+2028 and U+2029 are written as ``\\uXXXX`` escapes, so no
    string can close the element or open a comment; NaN becomes ``null``.

    Args:
        value: JSON-like data (dicts, lists, strings, numbers, None).

    Returns:
        Markup that Jinja inserts verbatim.
    """
    text = json.dumps(_plain(value), ensure_ascii=False, sort_keys=True, allow_nan=False)
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                         ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escape)
    return Markup(text)


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _visible_controls(value: Any) -> Any:
    if isinstance(value, str) and not isinstance(value, Markup):
        return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", value)
    return value


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        finalize=_visible_controls,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["script_json"] = script_json
    return env


def _sort_value(value: Any) -> str:
    if value is None or value is pd.NA:
        return ""
    value = float(value)
    return "" if math.isnan(value) else repr(value)


def _seed_text(value: float) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:g}"


def _identity(board: Board) -> dict[str, str]:
    key = board.key
    return {"benchmark": key.benchmark, "profile": key.profile, "data": key.data_label,
            "fingerprint": key.dataset_fingerprint, "settings": settings_label(key.settings), "id": key.id}


def _standing_rows(board: Board, mech_names: _Names, root: str) -> list[dict[str, Any]]:
    rows = []
    for s in board.standings:
        e = s.estimate
        volumes = list(s.hypervolumes.values())
        worst = worst_group(board.cells[board.cells["entry"] == s.name])
        rows.append({
            "rank": rank_label(s, board), "rank_sort": _sort_value(s.rank), "tied": s.tied, "entry": s.name,
            "mechanism": s.mechanism, "href": f"{root}mechanisms/{mech_names[s.mechanism]}.html",
            "claim_type": s.claim_type, "audit": s.audit, "verification": s.verification,
            "reproduction": s.reproduction,
            "verified": not s.verification.startswith("unverified"), "hv": fmt(e.mean if e else None), "hv_sort": _sort_value(e.mean if e else None),
            "ci": interval_text(e.low, e.high) if e else "–", "sd": fmt(e.std if e else None),
            "sd_sort": _sort_value(e.std if e else None),
            "range": f"{fmt(min(volumes))}–{fmt(max(volumes))}" if volumes else "–",
            "places": places_text(s), "places_sort": _sort_value(s.rank),
            "places_title": ", ".join(f"seed {seed}: {place}" for seed, place in s.seed_places),
            "seeds": f"{len(s.complete_seeds)} of {len(s.declared_seeds)}", "seeds_sort": len(s.complete_seeds),
            "configurations": s.configurations, "flagged": s.flagged, "worst": fmt(worst.privacy),
            "worst_sort": _sort_value(worst.privacy), "worst_group": worst.group, "worst_title": worst.title,
            "status": s.status, "ranked": s.ranked,
            "tied_with": tied_text(s, board), "tied_with_title": _tied_title(s),
            "source": s.source, "suite": s.suite, "notes": list(s.notes),
        })
    return rows


def _tied_title(s: Standing) -> str:
    """The tooltip of an entry's "Tied with" cell: its rank's other entries, then those of other ranks it is not
    separated from."""
    parts = [", ".join(s.tied_with)] if s.tied_with else []
    if s.not_separated:
        parts.append(f"not separated either (other ranks): {', '.join(s.not_separated)}")
    return "; ".join(parts)


def _board_cell_rows(board: Board) -> list[dict[str, Any]]:
    cells = board.cells.sort_values(["entry", "params_label", "seed"], kind="mergesort")
    return [{
        "entry": c.entry, "params": c.params_label, "seed": _seed_text(c.seed), "seed_sort": _sort_value(c.seed),
        "utility": fmt(c.utility, 4), "utility_sort": _sort_value(c.utility),
        "privacy": privacy_text(c.privacy, c.flag), "privacy_sort": _sort_value(c.privacy), "flagged": bool(c.flag),
        "privacy_attack": getattr(c, "privacy_attack", "") or "–", "detail": c.flag_detail, "claim": c.claim_label, "audit": getattr(c, "audit", ""), "runs": int(c.runs), "source": c.source, "run_id": c.run_id,
        "hardware": getattr(c, "hardware", ""),
    } for c in cells.itertuples(index=False)]


def _exploration_rows(table: pd.DataFrame) -> list[dict[str, Any]]:
    return [{
        "benchmark": r.benchmark, "profile": r.profile, "data": r.data, "settings": r.settings,
        "precision": r.precision, "mechanism": r.mechanism, "params": r.params, "seed": _seed_text(r.seed), "seed_sort": _sort_value(r.seed),
        "split": r.split, "utility": fmt(r.utility, 4), "utility_sort": _sort_value(r.utility),
        "privacy": privacy_text(r.privacy, r.flag), "privacy_sort": _sort_value(r.privacy), "flagged": bool(r.flag),
        "claim": r.claim, "reason": r.reason, "source": r.source, "run_id": r.run_id,
    } for r in table.itertuples(index=False)]


def _copy_sheet(name: str, source: Any, target_dir: Path, stem: str) -> str | None:
    path = Path(source)
    suffix = path.suffix.lower()
    if suffix not in SHEET_SUFFIXES:
        warnings.warn(f"sample sheet of {name!r} is not a PNG/JPEG/GIF/WebP image; skipped", stacklevel=3)
        return None
    if not path.is_file():
        warnings.warn(f"sample sheet of {name!r} not found at {str(path)!r}; skipped", stacklevel=3)
        return None
    target_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, target_dir / f"{stem}{suffix}")
    return f"{stem}{suffix}"


def _joined(values, separator: str = ", ") -> str:
    return separator.join(sorted({str(v) for v in values if str(v)})) or "–"


def protocol_html(root: str, docs: str | None) -> Markup:
    """Returns the protocol line as HTML: its ``docs/protocol.md`` a link to that page when the docs are beside the site.

    Args:
        root: The page's path to the site root (``""`` or ``../``).
        docs: The docs root relative to the site root, or None (the reference stays text).
    """
    text = Markup.escape(PROTOCOL_LINE)
    if docs is None:
        return text
    link = Markup('<a href="{}">docs/protocol.md</a>').format(f"{root}{docs}protocol/index.html")
    return Markup(str(text).replace("docs/protocol.md", str(link)))


def _make_folders(out: Path) -> None:
    """Creates the site folder and its subfolders.

    Raises:
        BenchError: The folder is a file, lies under one, or cannot be created.
    """
    try:
        for sub in ("boards", "mechanisms", "plots", "static"):
            (out / sub).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BenchError(f"cannot create the site folder {out}: {exc.strerror or exc} (name a folder)") from None


def build_site(leaderboard: Leaderboard, out_dir: str | Path, sheets: Mapping[str, str | Path] | None = None,
               docs: str | None = None) -> Path:
    """Writes the static leaderboard site.

    Layout: ``index.html``; ``boards/<slug>.html`` with ``plots/<slug>.svg`` (and
    ``.png``, and ``.json``: the plot's data, see :func:`leaderboard.plot.frontier_plot`);
    ``exploration.html``; ``mechanisms/<slug>.html`` with ``sheets/<slug>.<ext>`` (and
    results by demographic group, see :mod:`leaderboard.groups_view`);
    ``static/``; ``leaderboard.md``, ``leaderboard.csv`` and ``exploration.csv``.
    Existing files are overwritten, nothing is deleted.

    Args:
        leaderboard: Boards and exploration cells (:func:`leaderboard.boards.build_leaderboard`).
        out_dir: Site directory, created if missing.
        sheets: Mechanism name -> sample sheet image (PNG, JPEG, GIF or WebP), copied into
            the site. Missing files are skipped with a warning.
        docs: Where the documentation site's root is, relative to this site's root (``../``
            when the board is published inside it, :mod:`leaderboard.publish`): pages then
            link the protocol's page and the documentation. None for a board on its own.

    Returns:
        The path of ``index.html``.

    Raises:
        BenchError: ``out_dir`` is a file, lies under one, or cannot be created.
    """
    out = Path(out_dir)
    _make_folders(out)
    env = _environment()
    table = leaderboard_table(leaderboard)
    explore = exploration_table(leaderboard)
    mechanisms = sorted({s.mechanism for b in leaderboard.boards for s in b.standings} | set(explore["mechanism"]))
    mech_names = _Names(mechanisms)
    board_names = _Names(board_file_name(b) for b in leaderboard.boards)
    sheets = dict(sheets or {})
    for asset in STATIC:
        shutil.copyfile(TEMPLATES / asset, out / "static" / asset)

    def write(rel: str, template: str, root: str, **context: Any) -> None:
        html = env.get_template(template).render(root=root, protocol=protocol_html(root, docs),
                                                 docs=None if docs is None else f"{root}{docs}", **context)
        (out / rel).write_text(html, encoding="utf-8")

    cell_rows = {id(b): _board_cell_rows(b) for b in leaderboard.boards}  # read by its page and every mechanism's
    index_boards, board_links = [], {}
    for board in leaderboard.boards:
        stem = board_names[board_file_name(board)]
        board_links[board.key.id] = f"boards/{stem}.html"
        plot = frontier_plot(board, out / "plots" / f"{stem}.svg")
        rows = _standing_rows(board, mech_names, "../")
        write(f"boards/{stem}.html", "board.html", "../", name=board.key.benchmark, identity=_identity(board),
              plot=f"../plots/{stem}.svg", plot_png=f"../plots/{stem}.png", plot_data=f"../plots/{stem}.json",
              plot_mark=plot["mark"], plot_note=plot["note"], rows=rows, cells=cell_rows[id(board)],
              hardware_note=hardware_note(board), rank_line=RANK_LINE, power=board_power_text(board),
              claim_types=sorted({r["claim_type"] for r in rows}),
              data={"board": _identity(board), "rows": table[table["board"] == board.key.id].to_dict(orient="records")})
        index_boards.append({"name": board.key.benchmark, "href": f"boards/{stem}.html", "identity": _identity(board),
                             "n_entries": len(board.standings), "n_ranked": sum(s.ranked for s in board.standings),
                             "n_unverified": sum(s.verification != VERIFIED for s in board.standings),
                             "rows": _standing_rows(board, mech_names, "")})

    write("exploration.html", "exploration.html", "", rows=_exploration_rows(explore), n_cells=len(explore))

    index_mechanisms = []
    for mechanism in mechanisms:
        stem = mech_names[mechanism]
        entries = [{"board": b.key.label, "benchmark": b.key.benchmark, "href": f"../{board_links[b.key.id]}",
                    "entry": s.name, "rank": rank_label(s, b), "of": sum(x.ranked for x in b.standings),
                    "hv": fmt(s.estimate.mean if s.estimate else None),
                    "ci": interval_text(s.estimate.low, s.estimate.high) if s.estimate else "–", "status": s.status}
                   for b in leaderboard.boards for s in b.standings if s.mechanism == mechanism]
        sheet = None
        if mechanism in sheets:
            copied = _copy_sheet(mechanism, sheets[mechanism], out / "sheets", stem)
            sheet = f"../sheets/{copied}" if copied else None
        # one mechanism's claim types on several boards; a claim type may itself hold commas
        claims = _joined(table.loc[table["mechanism"] == mechanism, "claim_type"], "; ")
        board_cells = [{**row, "board": b.key.label, "status": "on a board"} for b in leaderboard.boards
                       for row in cell_rows[id(b)] if b.standing(row["entry"]).mechanism == mechanism]
        explored = [{**row, "board": f"{row['benchmark']} · profile {row['profile']}"
                                     f"{precision_suffix(row['precision'])} · {row['data']} · {row['settings']}",
                     "status": f"exploration: {row['reason']}", "entry": "–",
                     "runs": 1}
                    for row in _exploration_rows(explore[explore["mechanism"] == mechanism])]
        groups = mechanism_groups(leaderboard, mechanism, {**{k: f"../{v}" for k, v in board_links.items()},
                                                           "exploration": "../exploration.html"})
        write(f"mechanisms/{stem}.html", "mechanism.html", "../", name=mechanism, claim_types=claims, sheet=sheet,
              entries=entries, cells=board_cells + explored, n_cells=len(board_cells) + len(explored), groups=groups)
        index_mechanisms.append({"name": mechanism, "href": f"mechanisms/{stem}.html", "claim_types": claims,
                                 "boards": _joined(e["benchmark"] for e in entries)})

    write("index.html", "index.html", "", boards=index_boards, mechanisms=index_mechanisms, n_exploration=len(explore))
    (out / "leaderboard.md").write_text(render_markdown(leaderboard), encoding="utf-8")
    write_csv(table, out / "leaderboard.csv")
    write_csv(explore, out / "exploration.csv")
    return out / "index.html"
