"""Tables and frontier plot of a reID suite, in the format of the cross-camera reID paper.

    bench grid --suite reid_quick --device cpu --results-dir results/reid_quick
    python benchmarks/reid_report.py --results-dir results/reid_quick \
        --plot docs/reid_frontier.png --samples docs/reid_samples.png

Prints Markdown tables built from the suite's MLflow runs: reID mAP / top-1 of both models
per setting (Tables I-II), their mAP decrease against the clean models of the same seed,
the four model x gallery combinations, and the gender adversary (Table III). With several
seeds a cell shows the mean and, in brackets, the per-seed values.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.storage.tracking import Tracker  # noqa: E402
from leaderboard.store import read_bundle, runs_frame  # noqa: E402


def _epsilon(value: object) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def setting_label(mechanism: str, params: dict) -> str:
    """Returns a short label: ``clean`` or ``b=2 c=32 eps=1e6``."""
    if mechanism == "identity":
        return "clean"
    eps = _epsilon(params.get("epsilon"))
    shown = "none" if eps is None else f"{eps:.0e}".replace("e+0", "e").replace("e-0", "e-")
    return f"b={params['block']} c={params['colours']} eps={shown}"


def _sort_key(mechanism: str, params: dict) -> tuple:
    if mechanism == "identity":
        return (0, 0, 0.0)
    eps = _epsilon(params.get("epsilon"))
    return (1, params["block"], math.inf if eps is None else eps)


def load(results_dir: Path, task: str, bundle: Path | None = None) -> pd.DataFrame:
    """Returns one row per finished cell of ``task``: setting, seed, utility and attack columns.

    The cells come from the results directory's MLflow runs, or from a cells bundle
    (``bench report --cells FILE.json``). Each seed's mAP decreases against the clean cell
    of the same seed are added as ``drop_<metric>``.
    """
    frame = read_bundle(bundle) if bundle is not None else runs_frame(Tracker(results_dir, create=False))
    frame = frame[(frame["task"] == task) & (frame["eval_split"] == "test")]
    frame = frame.sort_values("created").drop_duplicates("cell_key", keep="last")  # one row per cell
    rows = []
    for _, row in frame.iterrows():
        params = dict(row["params"] or {})
        flat = {"setting": setting_label(row["mechanism"], params), "order": _sort_key(row["mechanism"], params),
                "mechanism": row["mechanism"], "params": params, "seed": row["seed"], "runtime_s": row["runtime_s"],
                "privacy": row["privacy_score"]}
        flat.update(row["utility"])
        flat.update({f"attack_{k}": v for k, v in (row["attacks"].get("attribute_inference") or {}).items()})
        rows.append(flat)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    clean = out[out["setting"] == "clean"].set_index("seed")
    for metric in ("map_regular", "map_centroid", "map_regular_on_centroids", "map_centroid_on_images"):
        out[f"drop_{metric}"] = [1 - r[metric] / clean.loc[r["seed"], metric] if r["seed"] in clean.index else math.nan
                                 for _, r in out.iterrows()]
    return out.sort_values(["order", "seed"]).reset_index(drop=True)


def settings(frame: pd.DataFrame) -> list[str]:
    """Returns the settings in table order (clean first, then by b and epsilon)."""
    return list(dict.fromkeys(frame["setting"]))


def cell(frame: pd.DataFrame, label: str, column: str, percent: bool = True) -> str:
    """Formats one table cell: the mean over seeds, with per-seed values when there are several."""
    values = [v for v in frame.loc[frame["setting"] == label, column] if v == v]
    if not values:
        return "-"
    fmt = (lambda v: f"{100 * v:.1f}") if percent else (lambda v: f"{v:.2f}")
    mean = sum(values) / len(values)
    unit = "%" if percent else ""
    if len(values) == 1:
        return fmt(mean) + unit
    return f"{fmt(mean)}{unit} ({' / '.join(fmt(v) for v in values)})"


def table(frame: pd.DataFrame, header: list[str], columns: list[str], skip_clean: bool = False,
          percent: tuple[bool, ...] | None = None) -> str:
    """Returns a Markdown table: one row per setting, one column per metric."""
    percent = percent or (True,) * len(columns)
    lines = ["| setting | " + " | ".join(header) + " |", "|---" * (len(header) + 1) + "|"]
    for label in settings(frame):
        if skip_clean and label == "clean":
            continue
        lines.append(f"| {label} | " + " | ".join(cell(frame, label, c, p) for c, p in zip(columns, percent)) + " |")
    return "\n".join(lines)


def plot(frame: pd.DataFrame, path: Path, title: str) -> None:
    """Draws mAP of both models against the gender adversary (seed means).

    The adversary does not depend on the reID model, so every setting is a vertical pair
    (centroid model above, regular below), numbered once; the key lists the numbers.
    """
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib.pyplot as plt

    means = frame.groupby("setting", sort=False).mean(numeric_only=True).reset_index()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    for ax, x_name, x_label in ((axes[0], "privacy", "privacy score (1 - retained gender advantage)"),
                                (axes[1], "attack_acc_gender", "gender accuracy of the adversary")):
        ax.vlines(means[x_name], means["map_regular"], means["map_centroid"], color="lightgrey", lw=1)
        for model, marker, colour in (("centroid", "o", "tab:blue"), ("regular", "s", "tab:orange")):
            ax.scatter(means[x_name], means[f"map_{model}"], marker=marker, color=colour, label=f"{model} model",
                       zorder=3)
        for i, row in means.iterrows():
            ax.annotate(str(i + 1), (row[x_name], row["map_centroid"]), fontsize=8, xytext=(0, 6),
                        textcoords="offset points", ha="center")
        ax.axhline(means["chance_map_images"].iloc[0], color="grey", lw=0.8, ls=":", label="chance mAP (image gallery)")
        if x_name == "attack_acc_gender":
            ax.axvline(means["attack_majority_gender"].iloc[0], color="grey", lw=0.8, ls="--", label="majority class")
        ax.set_xlabel(x_label)
        ax.set_ylabel("reID mAP")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="center right" if x_name == "privacy" else "center left")
    key = "   ".join(f"{i + 1}: {label}" for i, label in enumerate(means["setting"]))
    fig.text(0.5, 0.01, key, ha="center", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def samples(frame: pd.DataFrame, results_dir: Path, path: Path, task: str, count: int = 8) -> None:
    """Writes a sheet of query images of different identities under every setting of the suite."""
    from bench.cell.sheets import sample_sheet
    from bench.core.registry import mechanisms, tasks
    from bench.data.base import load_dataset
    from bench.randomness.streams import Streams

    task_obj = tasks.get(task)("quick")
    clean = load_dataset(task_obj.dataset, None, task_obj.data_options(), results_dir / "cache")["query"]
    first: dict[int, int] = {}
    for index, pid in enumerate(clean.labels.tolist()):
        first.setdefault(pid, index)
    images = clean.images[torch.tensor(list(first.values())[:count])]
    rows = []
    for label in settings(frame):
        row = frame[frame["setting"] == label].iloc[0]
        mechanism = mechanisms.get(row["mechanism"])(**row["params"])
        released = mechanism.apply(images, generator=Streams.for_images(0, "samples", len(images)))
        rows.append((label, released))
    sample_sheet(rows, path, scale=2, palette=True)


def main(argv: list[str] | None = None) -> int:
    """Prints the tables and draws the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results-dir", type=Path, default=Path("results/reid_quick"))
    parser.add_argument("--bundle", type=Path, default=None,
                        help="read the cells from this bundle (docs/reid_cells.json) instead of --results-dir")
    parser.add_argument("--task", default="reid_synth_persons")
    parser.add_argument("--plot", type=Path, default=None, help="write the frontier plot here")
    parser.add_argument("--samples", type=Path, default=None, help="write a sheet of released query images here")
    args = parser.parse_args(argv)
    if args.bundle is not None and args.samples is not None:
        print("--samples needs the runs' artifacts: give --results-dir, not --bundle", file=sys.stderr)
        return 2
    frame = load(args.results_dir, args.task, args.bundle)
    if frame.empty:
        print(f"no finished {args.task} cells in {args.results_dir}", file=sys.stderr)
        return 1
    seeds = sorted(frame["seed"].unique().tolist())
    print(f"{args.task}: {len(frame)} cells, seeds {seeds}\n")
    tables = [
        ("reID (Tables I-II format)",
         table(frame, ["regular mAP", "regular top-1", "centroid mAP", "centroid top-1"],
               ["map_regular", "rank1_regular", "map_centroid", "rank1_centroid"])),
        ("chance (random ranking)",
         table(frame[frame["setting"] == "clean"], ["image gallery mAP", "centroid gallery mAP"],
               ["chance_map_images", "chance_map_centroids"])),
        ("mAP decrease against the clean models of the same seed",
         table(frame, ["regular", "centroid", "regular model, centroid gallery", "CTL model, image gallery"],
               ["drop_map_regular", "drop_map_centroid", "drop_map_regular_on_centroids",
                "drop_map_centroid_on_images"], skip_clean=True)),
        ("mAP of every model x gallery combination",
         table(frame, ["regular model, images", "regular model, centroids", "CTL model, images",
                       "CTL model, centroids"],
               ["map_regular", "map_regular_on_centroids", "map_centroid_on_images", "map_centroid"])),
        ("CMC of both models",
         table(frame, ["regular rank-5", "regular rank-10", "centroid rank-5", "centroid rank-10"],
               ["rank5_regular", "rank10_regular", "rank5_centroid", "rank10_centroid"])),
        ("gender inference (Table III format)",
         table(frame, ["gender accuracy", "clean accuracy", "majority class", "privacy score"],
               ["attack_acc_gender", "attack_clean_acc_gender", "attack_majority_gender", "privacy"],
               percent=(True, True, True, False))),
    ]
    for title, text in tables:
        print(f"### {title}\n\n{text}\n")
    runtime = frame.groupby("seed")["runtime_s"].sum()
    print("cell runtimes summed per seed: " + ", ".join(f"seed {s}: {v:.0f} s" for s, v in runtime.items()))
    if args.plot is not None:
        plot(frame, args.plot, f"{args.task}, quick profile (synthetic data), mean of seeds {seeds}")
        print(f"plot: {args.plot}")
    if args.samples is not None:
        samples(frame, args.results_dir, args.samples, args.task)
        print(f"samples: {args.samples}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
