"""Paper-style tables of results: one row per configuration (mechanism, parameters, method), seeds pooled.

A row's utility is the mean over its seeds with a 95% interval (Student t over seeds;
with one seed, the cell's own logged CI), privacy the mean of the defined scores (flagged
cells counted, never scored) with a 95% interval (Student t over seeds, whose spread already
holds each seed's within-run noise; one seed: ±1.96 × its ``privacy_score_se``, the delta
method's standard error; :func:`leaderboard.stats.mean_interval`), cut to [0, 1] and printed
as ``(low–high)`` where it reaches outside that range, and its claims typed by unit: the mechanism's and a training claim, side by side
(``UNBACKED`` where the code cannot back one); a formal claim without a passed audit on record
is marked ``(unaudited)`` (``(audit inconclusive)``, ``(audit failed)``), a withheld or
unbacked one carries that status alone. Rows of one benchmark, profile, data (synthetic or
real), settings, precision and number of seeds form one table, so every ± of a table is a
95% CI of one kind and one-seed cells are never pooled with means over several seeds; cells
computed in bf16 mixed precision are never pooled with fp32 ones.
"""

from __future__ import annotations

import math
import re
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from bench.errors import BenchError
from leaderboard.cells import cells_frame, claim_label, formal_claim
from leaderboard.exports import csv_text, markdown_escape
from leaderboard.protocol import precision_suffix, settings_label
from leaderboard.stats import mean_interval

__all__ = ["REPORT_COLUMNS", "report_table", "to_latex", "to_markdown"]

REPORT_COLUMNS = ["benchmark", "profile", "data", "settings", "precision", "mechanism",
                  "configuration", "metric", "seeds", "utility",
                  "utility_ci", "privacy", "privacy_ci", "flagged", "flag", "claim", "training_claim"]


def report_table(rows: pd.DataFrame, benchmark: str | None = None, columns: Sequence[str] = ()) -> pd.DataFrame:
    """Returns one row per configuration and benchmark (test-split cells only; tuning cells are left out).

    Args:
        rows: Result rows (``leaderboard.store.runs_frame`` / ``combine``).
        benchmark: Only this benchmark.
        columns: Further metrics, each as mean ± 95% CI over seeds (one seed: the cell's
            own ``<metric>_ci95`` where it logs one): ``utility.<metric>``,
            ``attack.<attack>.<metric>`` or ``privacy.<attack>``.

    Raises:
        BenchError: A column of another form.
    """
    cells = cells_frame(rows)
    if len(cells) == 0:
        return pd.DataFrame(columns=REPORT_COLUMNS + [c for name in columns for c in (name, f"{name}_ci")])
    for name in columns:
        values = [_lookup(row, name) for row in rows.to_dict("records")]
        cells[name] = [v for v, _ in values]
        cells[f"{name}_se"] = [h / 1.96 if h is not None else math.nan for _, h in values]
    cells = cells[cells["split"] == "test"]
    if benchmark is not None:
        cells = cells[cells["benchmark"] == benchmark]
    out = []
    keys = ["benchmark", "profile", "synthetic", "settings", "precision", "mechanism", "params_label", "training_claim"]
    for (bench_name, profile, synthetic, settings, arithmetic, mechanism, params, training), group in cells.groupby(
            keys, sort=True, dropna=False):
        per_seed = group.groupby("seed").agg(utility=("utility", "mean"), se=("utility_se", "mean"),
                                             privacy=("privacy", "mean"), privacy_se=("privacy_se", "mean"))
        utility, half = _mean_ci(per_seed["utility"].to_numpy(float), per_seed["se"].to_numpy(float))
        scored = per_seed[per_seed["privacy"].notna()]
        privacy, privacy_half = mean_interval(scored["privacy"].to_numpy(float), scored["privacy_se"].to_numpy(float))
        method = training.split(":")[0] if training else ""
        extra = {}
        for name in columns:
            seeds = group.groupby("seed").agg(value=(name, "mean"), se=(f"{name}_se", "mean"))
            extra[name], extra[f"{name}_ci"] = _mean_ci(seeds["value"].to_numpy(float), seeds["se"].to_numpy(float))
        out.append({
            **extra,
            "benchmark": bench_name, "profile": profile, "data": "synthetic" if synthetic else "real",
            "settings": settings_label(settings), "precision": arithmetic, "mechanism": mechanism,
            "configuration": " + ".join(x for x in (params, method) if x) or "defaults",
            "metric": group["metric"].iloc[0], "seeds": int(len(per_seed)), "utility": utility, "utility_ci": half,
            "privacy": privacy, "privacy_ci": privacy_half,
            "flagged": int(group["privacy"].isna().sum()),
            "flag": "; ".join(sorted({f for f in group["flag"] if f})),
            "claim": _claim(group),
            "training_claim": training.split(": ", 1)[1] if ": " in training else training,
        })
    return pd.DataFrame(out, columns=REPORT_COLUMNS + [c for name in columns for c in (name, f"{name}_ci")])


def _claim(group: pd.DataFrame) -> str:
    """Returns a configuration's mechanism claim with its one status (:func:`_audited`, or withheld / UNBACKED)."""
    first = group.iloc[0]
    withheld, backed = str(first["withheld"]), bool(first.get("backed", True))
    label = claim_label(float(first["epsilon"]), float(first["delta"]), str(first["unit"]), withheld, backed)
    return _audited(label, group) if formal_claim(withheld, backed) else label


def _audited(claim: str, group: pd.DataFrame) -> str:
    """Marks a claim with its audit: ``eps=1 [unit] (unaudited)``, ``(audit passed)``, ``(audit inconclusive)``.

    A configuration's claim counts as audited only when every one of its cells carries a
    passed audit (an entry's ``audit`` record); local runs carry none.
    """
    if not claim:
        return claim
    verdicts = {v for v in group.get("audit", pd.Series(dtype=str)) if v}
    if verdicts == {"passed"}:
        return f"{claim} (audit passed)"
    for verdict in ("failed", "inconclusive"):
        if verdict in verdicts:
            return f"{claim} (audit {verdict})"
    return f"{claim} (unaudited)"


def parse_column(name: str) -> tuple[str, str, str]:
    """Splits a report column into (``utility``/``attack``/``privacy``, attack or "", metric).

    Raises:
        BenchError: A column of another form.
    """
    kind, _, rest = name.partition(".")
    if kind in ("utility", "privacy") and rest:
        return kind, "", rest
    if kind == "attack" and "." in rest:
        attack, metric = rest.split(".", 1)
        return kind, attack, metric
    raise BenchError(f"--columns: {name!r} is not utility.METRIC, attack.ATTACK.METRIC or privacy.ATTACK")


def _lookup(row: dict, name: str) -> tuple[float, float | None]:
    """Returns a row's value of a report column and its logged 95% half-width."""
    kind, attack, metric = parse_column(name)
    if kind == "attack":
        source = dict(dict(row.get("attacks") or {}).get(attack) or {})
    else:
        source = dict(row.get(kind) or {})
    value = source.get(metric)
    half = source.get(f"{metric}_ci95")
    return (math.nan if value is None else float(value)), (float(half) if isinstance(half, (int, float)) else None)


def _mean_ci(values: np.ndarray, errors: np.ndarray) -> tuple[float, float]:
    """Mean over seeds and its 95% half-width (t over seeds; one seed: its own CI)."""
    if len(values) == 0:
        return math.nan, math.nan
    if len(values) == 1:
        return float(values[0]), float(1.96 * errors[0]) if math.isfinite(errors[0]) else math.nan
    t = stats.t.ppf(0.975, len(values) - 1)
    return float(values.mean()), float(t * values.std(ddof=1) / math.sqrt(len(values)))


def _pm(value: float, half: float, digits: int = 3) -> str:
    if not math.isfinite(value):
        return "–"
    return f"{value:.{digits}f} ± {half:.{digits}f}" if math.isfinite(half) else f"{value:.{digits}f}"


def _bounded(value: float, half: float, digits: int = 3) -> str:
    """``value ± half``, or ``value (low–high)`` with the interval cut to [0, 1] where it reaches outside."""
    if math.isfinite(value) and math.isfinite(half) and (value - half < 0.0 or value + half > 1.0):
        return f"{value:.{digits}f} ({max(0.0, value - half):.{digits}f}–{min(1.0, value + half):.{digits}f})"
    return _pm(value, half, digits)


def _privacy_text(row: Any) -> str:
    text = _bounded(row.privacy, row.privacy_ci)
    return text + (f" ({row.flagged} cell(s): {row.flag})" if row.flagged else "")


def _records(rows: pd.DataFrame) -> list[SimpleNamespace]:
    return [SimpleNamespace(**record) for record in rows.to_dict("records")]


def _extra_columns(table: pd.DataFrame) -> list[str]:
    return [c for c in table.columns if c not in REPORT_COLUMNS and not c.endswith("_ci")]


def _cells(row: Any, extra: Sequence[str] = ()) -> tuple:
    """One row's printed cells: mechanism, configuration, seeds, utility ± CI, further columns, privacy ± CI, claims."""
    record = vars(row)
    more = tuple((_bounded if name.startswith("privacy.") else _pm)(record[name], record[f"{name}_ci"]) for name in extra)
    return (row.mechanism, row.configuration, row.seeds, _pm(row.utility, row.utility_ci), *more, _privacy_text(row),
            row.claim or "none", row.training_claim or "–")


def plus_minus(seeds: int) -> str:
    """States what every ± of a table of ``seeds``-seed rows means (the table's caption)."""
    clipped = (" A privacy score's interval that reaches outside its range, 0 to 1, is cut to it and printed as its "
               "two ends, low–high, after the score.")
    if seeds == 1:
        return ("One seed per row (never pooled with means over several seeds); ± is the half-width of the "
                "cell's own 95% CI: its logged CI, for privacy 1.96 × its delta-method standard error." + clipped)
    return (f"Mean over {seeds} seeds; ± is the half-width of the 95% CI of the mean: Student t over seeds (their "
            "spread already holds each seed's within-run noise)." + clipped)


def _sections(table: pd.DataFrame):
    """Yields (title, meaning of ±, column heads, rows of printed cells).

    One per benchmark, profile, data, settings, precision and number of seeds.
    """
    extra = _extra_columns(table)
    for (benchmark, profile, data, settings, precision, seeds), rows in table.groupby(
            ["benchmark", "profile", "data", "settings", "precision", "seeds"], sort=True):
        heads = ["Mechanism", "Configuration", "Seeds", f"{rows['metric'].iloc[0]} (95% CI)",
                 *(f"{c} (95% CI)" for c in extra), "Privacy (95% CI)", "Claim", "Training claim"]
        count = f"{seeds} seed{'s' if seeds != 1 else ''}"
        yield (f"{benchmark} · profile {profile}{precision_suffix(precision)} · {data} data · {settings} · {count}",
               plus_minus(int(seeds)), heads, [_cells(r, extra) for r in _records(rows)])


def to_markdown(table: pd.DataFrame) -> str:
    """Formats the report as Markdown: one table per benchmark, profile and data."""
    if table.empty:
        return "No finished test-split cells.\n"
    lines = []
    for title, meaning, heads, cells in _sections(table):
        lines += [f"### {markdown_escape(title)}", "", markdown_escape(meaning), "",
                  "| " + " | ".join(markdown_escape(h) for h in heads) + " |", "|" + "---|" * len(heads)]
        lines += ["| " + " | ".join(markdown_escape(x) for x in row) + " |" for row in cells]
        lines.append("")
    return "\n".join(lines)


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "ε": r"$\varepsilon$",
                  "±": r"$\pm$", "×": r"$\times$", "–": "--", "·": r"$\cdot$"}


def latex_escape(text: Any) -> str:
    """Escapes text for a LaTeX table cell."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))


def to_latex(table: pd.DataFrame) -> str:
    """Formats the report as LaTeX ``table`` floats, one per section of :func:`to_markdown`.

    Each holds a booktabs ``tabular`` (``\\toprule``, ``\\midrule``, ``\\bottomrule``: the
    preamble needs ``\\usepackage{booktabs}``) under a ``\\caption`` that names the table and
    says what its ± means, and a ``\\label`` (``tab:privbench-<title>``).
    """
    if table.empty:
        return "% No finished test-split cells.\n"
    lines = [r"% Tables of bench report: the preamble needs \usepackage{booktabs}.", ""]
    labels: set[str] = set()
    for title, meaning, heads, cells in _sections(table):
        label = _latex_label(title, labels)
        lines += [r"\begin{table}[htbp]", r"\centering", rf"\caption{{{latex_escape(title)}. {latex_escape(meaning)}}}",
                  rf"\label{{{label}}}", r"\begin{tabular}{llr" + "l" * (len(heads) - 3) + "}", r"\toprule",
                  " & ".join(latex_escape(h) for h in heads) + r" \\", r"\midrule"]
        lines += [" & ".join(latex_escape(c) for c in row) + r" \\" for row in cells]
        lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)


def _latex_label(title: str, taken: set[str]) -> str:
    """Returns a unique ``\\label`` key of ASCII letters, digits and dashes for a table's title."""
    stem = "tab:privbench-" + (re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:60].strip("-") or "table")
    label, number = stem, 2
    while label in taken:
        label, number = f"{stem}-{number}", number + 1
    taken.add(label)
    return label


def to_csv_text(table: pd.DataFrame) -> str:
    """Formats the report as CSV (text cells made safe for spreadsheets)."""
    return csv_text(table)
