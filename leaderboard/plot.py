"""The frontier plot of one board (PNG)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from leaderboard.boards import Board  # noqa: E402
from leaderboard.exports import terminal_safe  # noqa: E402
from leaderboard.pareto import frontier  # noqa: E402
from leaderboard.table import rank_label  # noqa: E402

__all__ = ["configuration_means", "frontier_plot"]

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<")


def _colours() -> list:
    tab20 = plt.get_cmap("tab20").colors
    return list(tab20[0::2]) + list(tab20[1::2])


def configuration_means(cells: pd.DataFrame) -> pd.DataFrame:
    """Returns each configuration's mean utility and privacy over seeds (defined scores only).

    A configuration whose privacy is undefined in every seed has NaN privacy (not a point).
    """
    grouped = cells.groupby(["params_label"], sort=True)
    out = grouped.agg(utility=("utility", "mean"), privacy=("privacy", "mean"), epsilon=("epsilon", "first"),
                      unit=("unit", "first"))
    return out.reset_index()


def frontier_plot(board: Board, path: Path) -> None:
    """Draws a board's privacy against utility as a PNG.

    Each entry gets a colour and marker; its points are its configurations' means over
    seeds and its step line their frontier (the ranking itself uses each seed's own
    frontier). Cells flagged ``attack too weak`` in every seed are not points. Claimed
    configurations are labelled with epsilon and unit.

    Args:
        board: The board.
        path: Where to write the PNG.
    """
    fig, ax = plt.subplots(figsize=(8.0, 5.2), dpi=110)
    colours = _colours()
    for i, standing in enumerate(board.standings):
        means = configuration_means(board.cells[board.cells["entry"] == standing.name])
        means = means[means["utility"].notna() & means["privacy"].notna()]
        colour, marker = colours[i % len(colours)], _MARKERS[i % len(_MARKERS)]
        pts = np.clip(means[["utility", "privacy"]].to_numpy(dtype=float), 0.0, 1.0)
        label = terminal_safe(f"{rank_label(standing)}. {standing.name}", 48)
        ax.scatter(pts[:, 0], pts[:, 1], color=colour, marker=marker, s=28, alpha=0.85, label=label, zorder=3)
        front = frontier(pts)
        if len(front):
            xs = np.concatenate([[0.0], front[:, 0], [front[-1, 0]]])
            ys = np.concatenate([[front[0, 1]], front[:, 1], [0.0]])
            ax.step(xs, ys, where="pre", color=colour, linewidth=1.4, alpha=0.8, zorder=2)
        for row, (u, p) in zip(means.itertuples(index=False), pts):
            if row.epsilon == row.epsilon:
                text = terminal_safe(f"ε={row.epsilon:g} [{row.unit}]" if row.unit else f"ε={row.epsilon:g}", 36)
                ax.annotate(text, (u, p), xytext=(4, 4), textcoords="offset points", fontsize=7, color=colour,
                            parse_math=False)
    metrics = ", ".join(sorted({m for m in board.cells["metric"] if m})) or "primary metric"
    ax.set_xlabel(terminal_safe(f"utility ({metrics})", 60), parse_math=False)
    ax.set_ylabel("privacy (1 − retained attack advantage)")
    ax.set_title(terminal_safe(f"{board.key.benchmark} · {board.key.profile} · {board.key.data_label}", 70),
                 parse_math=False)
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if board.standings:
        legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        for text in legend.get_texts():
            text.set_parse_math(False)
    fig.savefig(path, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
