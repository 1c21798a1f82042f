"""bench report's paper tables: booktabs floats with a caption, one meaning of ± per table, seeds never pooled."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from leaderboard.report import plus_minus, report_table, to_latex, to_markdown
from leaderboard.stats import mean_interval
from tests.unit.test_protocol_boards import row

CURVE = [(0.80, 0.40), (0.60, 0.60)]
PRIVACY = {0: 0.00, 1: 0.03, 2: -0.02}


def cells(entry, seeds=(0, 1, 2), se=None, split="test"):
    out = []
    for seed in seeds:
        for level, (u, p) in enumerate(CURVE):
            r = row(entry, level, seed, u + 0.01 * seed, p + PRIVACY[seed], split=split)
            out.append({**r, **({"privacy_score_se": se} if se is not None else {})})
    return out


def test_one_seed_rows_are_never_pooled_with_means_over_seeds():
    tune = [{**r, "run_id": "tune-" + r["run_id"], "cell_key": "tune-" + r["cell_key"]}
            for r in cells("tuned", seeds=(0,))]
    table = report_table(pd.DataFrame(cells("blur") + tune))
    assert sorted(table["seeds"].unique()) == [1, 3]
    markdown = to_markdown(table)
    sections = markdown.split("### ")[1:]
    assert len(sections) == 2
    one = next(s for s in sections if "· 1 seed\n" in s)
    three = next(s for s in sections if "· 3 seeds\n" in s)
    assert "| tuned |" in one and "| blur |" not in one
    assert "| blur |" in three and "| tuned |" not in three
    assert plus_minus(1) in one and plus_minus(3) in three


def test_every_plus_minus_of_a_table_is_a_95_ci_and_says_so():
    markdown = to_markdown(report_table(pd.DataFrame(cells("blur"))))
    assert "Privacy (95% CI)" in markdown and "(sd)" not in markdown
    assert "acc (95% CI)" in markdown and "half-width of the 95% CI" in markdown


def test_latex_is_booktabs_inside_a_table_float_with_a_real_caption():
    latex = to_latex(report_table(pd.DataFrame(cells("blur") + cells("pix", seeds=(0,)))))
    assert "booktabs" in latex.splitlines()[0]
    floats = re.findall(r"\\begin\{table\}\[htbp\](.*?)\\end\{table\}", latex, re.S)
    assert len(floats) == 2
    labels = set()
    for body in floats:
        assert body.index(r"\caption{") < body.index(r"\begin{tabular}") < body.index(r"\toprule")
        assert body.index(r"\toprule") < body.index(r"\midrule") < body.index(r"\bottomrule") < body.index(
            r"\end{tabular}")
        caption = re.search(r"\\caption\{(.*)\}\n", body).group(1)
        assert "fewshot" in caption and r"$\pm$ is the half-width" in caption
        labels.add(re.search(r"\\label\{([^}]*)\}", body).group(1))
    assert len(labels) == 2 and all(re.fullmatch(r"tab:privbench-[a-z0-9-]+", x) for x in labels)
    assert not any(line.startswith("% fewshot") for line in latex.splitlines())


def test_the_privacy_interval_is_over_seeds_and_within_seed_noise_is_not_added_again():
    quiet = report_table(pd.DataFrame(cells("blur"))).set_index("configuration")
    noisy = report_table(pd.DataFrame(cells("blur", se=0.08))).set_index("configuration")
    for configuration in quiet.index:
        assert noisy.loc[configuration, "privacy"] == pytest.approx(quiet.loc[configuration, "privacy"])
        assert noisy.loc[configuration, "privacy_ci"] == pytest.approx(quiet.loc[configuration, "privacy_ci"])
        assert quiet.loc[configuration, "privacy_ci"] > 0
    one = report_table(pd.DataFrame(cells("blur", seeds=(0,), se=0.05)))
    assert one["privacy_ci"].tolist() == pytest.approx([1.96 * 0.05] * 2, rel=1e-3)
    assert math.isnan(report_table(pd.DataFrame(cells("blur", seeds=(0,))))["privacy_ci"].iloc[0])


def test_a_privacy_interval_is_cut_to_0_1_and_says_so():
    markdown = to_markdown(report_table(pd.DataFrame(cells("blur", seeds=(0,), se=0.5))))
    rows = [line for line in markdown.splitlines() if line.startswith("| blur |")]
    assert rows and all("(0.000–1.000)" in line and line.count(" ± ") == 1 for line in rows)  # utility keeps its ±
    assert "cut to it" in markdown


def test_mean_interval_is_the_t_interval_over_seeds():
    values = np.array([0.40, 0.45, 0.43])
    mean, half = mean_interval(values, [math.nan] * 3)
    from scipy import stats

    t_half = stats.t.ppf(0.975, 2) * values.std(ddof=1) / math.sqrt(3)
    assert mean == pytest.approx(values.mean()) and half == pytest.approx(t_half, rel=1e-9)
    assert mean_interval(values, [0.05] * 3) == (mean, half)
    assert mean_interval([], []) == (pytest.approx(math.nan, nan_ok=True), pytest.approx(math.nan, nan_ok=True))


@pytest.mark.parametrize("command", [["report"], ["leaderboard", "verify"]])
def test_help_prints_a_single_percent_sign(command, capsys):
    from bench.cli import main

    with pytest.raises(SystemExit) as exit_:
        main([*command, "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and "95%%" not in out and "95% CI" in out
