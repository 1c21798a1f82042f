"""The static leaderboard site, its Markdown and CSV exports, and the terminal table.

Every user-provided string (mechanism, benchmark, parameter, unit and entry names) is
escaped by Jinja's autoescaping in HTML, by :func:`script_json` inside ``<script>``, by
:func:`markdown_escape` in Markdown, by :func:`csv_safe` in CSV and by
:func:`terminal_safe` in the terminal; file names are :func:`slug` s, never raw names.
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

import matplotlib

matplotlib.use("Agg")

import jinja2  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from markupsafe import Markup  # noqa: E402

from leaderboard.pareto import frontier  # noqa: E402
from leaderboard.table import cells_frame, leaderboard_table  # noqa: E402

__all__ = [
    "build_site",
    "frontier_plot",
    "csv_safe",
    "markdown_escape",
    "render_markdown",
    "render_terminal",
    "script_json",
    "slug",
    "terminal_safe",
]

TEMPLATES = Path(__file__).parent / "templates"
STATIC = ("style.css", "table.js")
SHEET_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".webp"}
TOP_N = 3


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


def markdown_escape(text: str) -> str:
    """Escapes a string for inline Markdown (table cells, headings); no raw HTML survives."""
    text = " ".join(str(text).split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\`*_\[\]#|~])", r"\\\1", text)


def csv_safe(text: str) -> str:
    """Neutralises spreadsheet formulas: a text starting with = + - @ or a tab gets a ``'``."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def terminal_safe(text: str, width: int | None = None) -> str:
    """Replaces non-printable characters (ANSI escapes, newlines) by ``\\uXXXX`` and truncates."""
    out = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in str(text))
    if width is not None and len(out) > width:
        out = out[: width - 1] + "…"
    return out


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or value is pd.NA:
        return "–"
    value = float(value)
    return "–" if math.isnan(value) else f"{value:.{digits}f}"


def _sort_value(value: Any) -> str:
    if value is None or value is pd.NA:
        return ""
    value = float(value)
    return "" if math.isnan(value) else repr(value)


def _rank(value: Any) -> str:
    return "–" if value is None or value is pd.NA else str(int(value))


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<")


def _colours() -> list:
    tab20 = plt.get_cmap("tab20").colors
    return list(tab20[0::2]) + list(tab20[1::2])


def frontier_plot(cells: pd.DataFrame, mechanisms: list[str], title: str, path: Path) -> None:
    """Draws one benchmark's privacy against utility plot as a PNG.

    Each mechanism gets its own colour and marker, all its cells as points and its
    frontier over all seeds as a step line down to the axes; cells with a formal claim
    are labelled with epsilon and unit (once per configuration, at its mean over seeds).

    Args:
        cells: The benchmark's rows of :func:`leaderboard.table.cells_frame`.
        mechanisms: Mechanisms in legend order (the ranking).
        title: Plot title (the benchmark name).
        path: Where to write the PNG.
    """
    fig, ax = plt.subplots(figsize=(8.0, 5.2), dpi=110)
    colours = _colours()
    for i, mechanism in enumerate(mechanisms):
        group = cells[(cells["mechanism"] == mechanism)]
        group = group[group["utility"].notna() & group["privacy"].notna()]
        colour, marker = colours[i % len(colours)], _MARKERS[i % len(_MARKERS)]
        pts = np.clip(group[["utility", "privacy"]].to_numpy(dtype=float), 0.0, 1.0)
        label = terminal_safe(f"{i + 1}. {mechanism}", 40)
        ax.scatter(pts[:, 0], pts[:, 1], color=colour, marker=marker, s=28, alpha=0.85,
                   label=label, zorder=3)
        front = frontier(pts)
        if len(front):
            xs = np.concatenate([[0.0], front[:, 0], [front[-1, 0]]])
            ys = np.concatenate([[front[0, 1]], front[:, 1], [0.0]])
            ax.step(xs, ys, where="pre", color=colour, linewidth=1.4, alpha=0.8, zorder=2)
        claimed = group[group["epsilon"].notna()].assign(
            u=np.clip(group["utility"], 0, 1), p=np.clip(group["privacy"], 0, 1))
        for (_, epsilon, unit), claim in claimed.groupby(["params_label", "epsilon", "unit"], sort=True):
            text = terminal_safe(f"ε={epsilon:g} [{unit}]" if unit else f"ε={epsilon:g}", 36)
            ax.annotate(text, (claim["u"].mean(), claim["p"].mean()), xytext=(4, 4),
                        textcoords="offset points", fontsize=7, color=colour, parse_math=False)
    metrics = ", ".join(sorted({m for m in cells["metric"] if m})) or "primary metric"
    ax.set_xlabel(terminal_safe(f"utility ({metrics})", 60), parse_math=False)
    ax.set_ylabel("privacy (1 − retained attack advantage)")
    ax.set_title(terminal_safe(title, 60), parse_math=False)
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if mechanisms:
        legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        for text in legend.get_texts():
            text.set_parse_math(False)
    fig.savefig(path, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)


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
        trim_blocks=False,
        keep_trailing_newline=True,
    )
    env.filters["script_json"] = script_json
    return env


def _board_rows(table: pd.DataFrame, mech_names: _Names, root: str) -> list[dict[str, Any]]:
    rows = []
    for r in table.itertuples(index=False):
        rows.append(
            {
                "rank": _rank(r.rank),
                "rank_sort": _sort_value(r.rank),
                "mechanism": r.mechanism,
                "href": f"{root}mechanisms/{mech_names[r.mechanism]}.html",
                "claim_type": r.claim_type,
                "hv_mean": _fmt(r.hv_mean),
                "hv_mean_sort": _sort_value(r.hv_mean),
                "hv_std": _fmt(r.hv_std),
                "hv_std_sort": _sort_value(r.hv_std),
                "hv_min": _fmt(r.hv_min),
                "hv_max": _fmt(r.hv_max),
                "hv_pooled": _fmt(r.hv_pooled),
                "hv_pooled_sort": _sort_value(r.hv_pooled),
                "p50": _fmt(r.best_utility_p50),
                "p50_sort": _sort_value(r.best_utility_p50),
                "p90": _fmt(r.best_utility_p90),
                "p90_sort": _sort_value(r.best_utility_p90),
                "n_cells": int(r.n_cells),
                "n_seeds": int(r.n_seeds),
                "profiles": r.profiles,
                "sources": r.sources,
            }
        )
    return rows


def _seed_text(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:g}"


def _cell_rows(cells: pd.DataFrame) -> list[dict[str, Any]]:
    ordered = cells.sort_values(["benchmark", "params_label", "seed"], kind="mergesort")
    return [
        {
            "benchmark": c.benchmark,
            "params": c.params_label,
            "seed": _seed_text(c.seed),
            "seed_sort": _sort_value(c.seed),
            "profile": c.profile,
            "metric": c.metric,
            "utility": _fmt(c.utility, 4),
            "utility_sort": _sort_value(c.utility),
            "privacy": _fmt(c.privacy, 4),
            "privacy_sort": _sort_value(c.privacy),
            "claim": c.claim_label,
            "source": c.source,
            "run_id": c.run_id,
        }
        for c in ordered.itertuples(index=False)
    ]


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


def _joined(values) -> str:
    return ", ".join(sorted({str(v) for v in values if str(v)})) or "–"


def build_site(
    df: pd.DataFrame,
    out_dir: str | Path,
    sheets: Mapping[str, str | Path] | None = None,
) -> Path:
    """Writes the static leaderboard site.

    Layout: ``index.html``; ``benchmarks/<slug>.html`` with ``plots/<slug>.png``;
    ``mechanisms/<slug>.html`` with ``sheets/<slug>.<ext>``; ``static/``;
    ``leaderboard.md`` and ``leaderboard.csv``. Existing files are overwritten, nothing
    is deleted.

    Args:
        df: Result rows, as accepted by :func:`leaderboard.table.cells_frame`.
        out_dir: Site directory, created if missing.
        sheets: Mechanism name -> sample sheet image (PNG, JPEG, GIF or WebP), copied into
            the site. Missing files are skipped with a warning.

    Returns:
        The path of ``index.html``.
    """
    out = Path(out_dir)
    for sub in ("benchmarks", "mechanisms", "plots", "static"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    cells = cells_frame(df)
    table = leaderboard_table(df)
    env = _environment()
    bench_names = _Names(cells["benchmark"])
    mech_names = _Names(cells["mechanism"])
    sheets = dict(sheets or {})

    for asset in STATIC:
        shutil.copyfile(TEMPLATES / asset, out / "static" / asset)

    def write(rel: str, template: str, root: str, **context: Any) -> None:
        html = env.get_template(template).render(root=root, **context)
        (out / rel).write_text(html, encoding="utf-8")

    index_benchmarks = []
    for benchmark, board in table.groupby("benchmark", sort=True):
        stem = bench_names[benchmark]
        bench_cells = cells[cells["benchmark"] == benchmark]
        frontier_plot(bench_cells, list(board["mechanism"]), benchmark, out / "plots" / f"{stem}.png")
        rows = _board_rows(board, mech_names, "../")
        write(
            f"benchmarks/{stem}.html",
            "benchmark.html",
            "../",
            name=benchmark,
            metrics=_joined(bench_cells["metric"]),
            n_cells=len(bench_cells),
            seeds=_joined(_seed_text(s) for s in sorted(bench_cells["seed"].unique())),
            profiles=_joined(bench_cells["profile"]),
            plot=f"../plots/{stem}.png",
            claim_types=sorted(board["claim_type"].unique()),
            rows=rows,
            data={"benchmark": benchmark, "rows": board.to_dict(orient="records")},
        )
        top = [
            {**row, "hv": f"{row['hv_mean']} ± {row['hv_std']}",
             "href": f"mechanisms/{mech_names[row['mechanism']]}.html"}
            for row in _board_rows(board.head(TOP_N), mech_names, "")
        ]
        index_benchmarks.append(
            {
                "name": benchmark,
                "href": f"benchmarks/{stem}.html",
                "n_mechanisms": len(board),
                "n_cells": len(bench_cells),
                "top": top,
            }
        )

    index_mechanisms = []
    for mechanism, mech_cells in cells.groupby("mechanism", sort=True):
        stem = mech_names[mechanism]
        rows = table[table["mechanism"] == mechanism]
        ranks = [
            {
                "benchmark": r.benchmark,
                "href": f"../benchmarks/{bench_names[r.benchmark]}.html",
                "rank": _rank(r.rank),
                "of": int((table["benchmark"] == r.benchmark).sum()),
                "hv": f"{_fmt(r.hv_mean)} ± {_fmt(r.hv_std)}",
            }
            for r in rows.itertuples(index=False)
        ]
        sheet = None
        if mechanism in sheets:
            copied = _copy_sheet(mechanism, sheets[mechanism], out / "sheets", stem)
            sheet = f"../sheets/{copied}" if copied else None
        claim_types = _joined(rows["claim_type"])
        write(
            f"mechanisms/{stem}.html",
            "mechanism.html",
            "../",
            name=mechanism,
            claim_types=claim_types,
            n_cells=len(mech_cells),
            sources=_joined(mech_cells["source"]),
            sheet=sheet,
            ranks=ranks,
            cells=_cell_rows(mech_cells),
        )
        index_mechanisms.append(
            {
                "name": mechanism,
                "href": f"mechanisms/{stem}.html",
                "claim_types": claim_types,
                "benchmarks": _joined(rows["benchmark"]),
            }
        )

    write(
        "index.html",
        "index.html",
        "",
        benchmarks=index_benchmarks,
        mechanisms=index_mechanisms,
        n_cells=len(cells),
    )
    (out / "leaderboard.md").write_text(render_markdown(table), encoding="utf-8")
    _export_csv(table, out / "leaderboard.csv")
    return out / "index.html"


def _export_csv(table: pd.DataFrame, path: Path) -> None:
    safe = table.copy()
    for column in safe.columns:
        if not pd.api.types.is_numeric_dtype(safe[column]):
            safe[column] = safe[column].map(lambda v: csv_safe(v) if isinstance(v, str) else v)
    safe.to_csv(path, index=False, float_format="%.6g")


_MD_HEADER = (
    "| Rank | Mechanism | Claim type | HV mean | HV std | HV min–max | HV pooled "
    "| Best utility (privacy ≥ 0.5) | Best utility (privacy ≥ 0.9) | Cells | Seeds | Profiles |"
)


def render_markdown(table: pd.DataFrame) -> str:
    """Formats a :func:`leaderboard.table.leaderboard_table` as Markdown, one section per benchmark."""
    lines = ["# PrivBench leaderboard", ""]
    if table.empty:
        return "\n".join(lines + ["No results yet.", ""])
    for benchmark, board in table.groupby("benchmark", sort=True):
        lines += [f"## {markdown_escape(benchmark)}", "", _MD_HEADER, "|" + "---|" * 12]
        for r in board.itertuples(index=False):
            cells = [
                _rank(r.rank),
                markdown_escape(r.mechanism),
                markdown_escape(r.claim_type),
                _fmt(r.hv_mean),
                _fmt(r.hv_std),
                f"{_fmt(r.hv_min)}–{_fmt(r.hv_max)}",
                _fmt(r.hv_pooled),
                _fmt(r.best_utility_p50),
                _fmt(r.best_utility_p90),
                str(r.n_cells),
                str(r.n_seeds),
                markdown_escape(r.profiles),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def render_terminal(table: pd.DataFrame, width: int = 32) -> str:
    """Formats a :func:`leaderboard.table.leaderboard_table` as plain text for a terminal.

    Args:
        table: The leaderboard table.
        width: Longest shown mechanism or claim name; longer ones are cut with "…".

    Returns:
        One block per benchmark; control characters in names are shown escaped.
    """
    if table.empty:
        return "No results yet.\n"
    headers = ["rank", "mechanism", "claim", "HV mean", "± std", "pooled", "util@p≥.5", "util@p≥.9", "cells", "seeds"]
    right = {0, 3, 4, 5, 6, 7, 8, 9}
    blocks = []
    for benchmark, board in table.groupby("benchmark", sort=True):
        rows = [
            [
                _rank(r.rank),
                terminal_safe(r.mechanism, width),
                terminal_safe(r.claim_type, width),
                _fmt(r.hv_mean),
                _fmt(r.hv_std),
                _fmt(r.hv_pooled),
                _fmt(r.best_utility_p50),
                _fmt(r.best_utility_p90),
                str(r.n_cells),
                str(r.n_seeds),
            ]
            for r in board.itertuples(index=False)
        ]
        widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]

        def line(values: list[str]) -> str:
            return "  ".join(v.rjust(w) if i in right else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths))).rstrip()

        profiles = terminal_safe(", ".join(sorted({p for p in board["profiles"] if p})) or "–")
        blocks.append("\n".join([f"{terminal_safe(benchmark)}  (profile: {profiles})", line(headers), *map(line, rows)]))
    return "\n\n".join(blocks) + "\n"
