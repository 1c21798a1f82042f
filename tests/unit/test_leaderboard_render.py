"""Leaderboard table maths, site rendering, exports and escaping."""

from __future__ import annotations

import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from leaderboard.render import (
    build_site,
    csv_safe,
    markdown_escape,
    render_markdown,
    render_terminal,
    script_json,
    slug,
    terminal_safe,
)
from leaderboard.table import TABLE_COLUMNS, cells_frame, leaderboard_table

XSS = "<script>alert(1)</script>"
NASTY = [XSS, '"><img src=x onerror=alert(2)>', "../../etc/passwd", "a$b$c \\frac", "=cmd|' /C calc'!A0", "\x1b[31mred\x1b[0m"]


def row(task, mechanism, utility, privacy, seed=0, claim=None, **extra):
    return {
        "task": task,
        "mechanism": mechanism,
        "params": {"level": utility},
        "seed": seed,
        "profile": "smoke",
        "utility": {"acc": utility, "other": 0.0},
        "primary_metric": "acc",
        "privacy_score": privacy,
        "claim": claim,
        **extra,
    }


CURVE = [(0.8, 0.3), (0.6, 0.6), (0.3, 0.95)]


def curve_rows(task="bench_a", mechanism="dp_pix", shift=0.1, claim=None):
    rows = []
    for seed in (0, 1):
        for u, p in CURVE:
            rows.append(row(task, mechanism, u + shift * seed, p, seed=seed, claim=claim, run_id=f"r{seed}{u}"))
    return rows


def test_table_numbers_match_hand_computation():
    claim = {"epsilon": 2.0, "delta": 0.0, "unit": "m-pixel (m=1)"}
    df = pd.DataFrame(curve_rows(claim=claim) + curve_rows(mechanism="blur", shift=0.0))
    table = leaderboard_table(df)
    assert list(table.columns) == TABLE_COLUMNS
    top = table.iloc[0]
    assert top["mechanism"] == "dp_pix" and top["rank"] == 1
    seed0 = 0.8 * 0.3 + 0.6 * 0.3 + 0.3 * 0.35
    seed1 = 0.9 * 0.3 + 0.7 * 0.3 + 0.4 * 0.35
    assert top["hv_mean"] == pytest.approx((seed0 + seed1) / 2)
    assert top["hv_std"] == pytest.approx(abs(seed1 - seed0) / math.sqrt(2))
    assert (top["hv_min"], top["hv_max"]) == pytest.approx((seed0, seed1))
    assert top["hv_pooled"] == pytest.approx(seed1)
    assert top["best_utility_p50"] == pytest.approx(0.7)
    assert top["best_utility_p90"] == pytest.approx(0.4)
    assert top["claim_type"] == "m-pixel (m=1)"
    assert (top["n_cells"], top["n_seeds"], top["profiles"], top["sources"]) == (6, 2, "smoke", "local")
    blur = table.iloc[1]
    assert blur["rank"] == 2 and blur["claim_type"] == "empirical only"
    assert blur["hv_std"] == pytest.approx(0.0)


def test_table_ranks_per_benchmark_and_handles_missing_values():
    rows = curve_rows("b1", "good") + curve_rows("b1", "bad", shift=-0.2) + curve_rows("b2", "bad")
    rows += [row("b1", "no_attacks", 0.9, None), row("b1", "no_attacks", 0.8, float("nan"), seed=1)]
    rows += [row("b1", "weak", 0.5, 0.4), row("b1", "weak", 0.6, 0.1)]
    table = leaderboard_table(pd.DataFrame(rows))
    b1 = table[table["benchmark"] == "b1"]
    assert b1["mechanism"].tolist() == ["good", "bad", "weak", "no_attacks"]
    assert b1["rank"].tolist()[:3] == [1, 2, 3] and pd.isna(b1["rank"].iloc[3])
    missing = b1.iloc[3]
    assert missing["claim_type"] == "none" and missing["n_cells"] == 2
    assert math.isnan(missing["hv_mean"]) and math.isnan(missing["best_utility_p50"])
    weak = b1.iloc[2]
    assert math.isnan(weak["hv_std"]) and weak["n_seeds"] == 1
    assert math.isnan(weak["best_utility_p50"]) and math.isnan(weak["best_utility_p90"])
    assert table[table["benchmark"] == "b2"]["rank"].tolist() == [1]


def test_table_ties_share_a_rank_and_values_are_clipped():
    rows = [row("b", "x", 1.4, 1.0), row("b", "y", 1.0, 1.2), row("b", "z", -0.5, 0.9)]
    table = leaderboard_table(pd.DataFrame(rows))
    assert table["rank"].tolist() == [1, 1, 3]
    assert table["hv_mean"].tolist() == pytest.approx([1.0, 1.0, 0.0])


def test_table_accepts_json_strings_and_store_columns():
    df = pd.DataFrame(
        [
            {
                "task": "b",
                "mechanism": "m",
                "params": json.dumps({"k": 1}),
                "seed": 3,
                "profile": "quick",
                "utility": json.dumps({"mAP": 0.5}),
                "primary_metric": "mAP",
                "privacy_score": 0.5,
                "claim": json.dumps({"epsilon": 1, "delta": 1e-5, "unit": "latent (clipped)"}),
                "source": "entry:team",
            }
        ]
    )
    cells = cells_frame(df)
    assert cells.loc[0, "utility"] == 0.5 and cells.loc[0, "params_label"] == "k=1"
    assert cells.loc[0, "claim_label"] == "eps=1, delta=1e-05 [latent (clipped)]"
    table = leaderboard_table(df)
    assert table.loc[0, "hv_pooled"] == pytest.approx(0.25)
    assert table.loc[0, "claim_type"] == "latent (clipped)" and table.loc[0, "sources"] == "entry:team"


def test_empty_results():
    assert list(leaderboard_table(pd.DataFrame()).columns) == TABLE_COLUMNS
    assert render_terminal(leaderboard_table(pd.DataFrame())) == "No results yet.\n"


def test_script_json_cannot_close_the_script_element():
    data = {"name": "</script><script>alert(1)</script><!--", "x": float("nan"), "s": "\u2028&"}
    text = str(script_json(data))
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"name": data["name"], "x": None, "s": "\u2028&"}


@pytest.mark.parametrize("name", NASTY + ["", "ÄÖÜ", "a" * 300, "dp_pix"])
def test_slug_is_a_safe_file_name(name):
    s = slug(name)
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]*-[0-9a-f]{8}", s) and len(s) <= 49
    assert slug(name) == s


def test_slugs_differ_for_names_that_normalise_alike():
    assert len({slug(n) for n in ["A B", "a-b", "a_b", "a b", "A_B"]}) == 5


def test_text_escapers():
    md = markdown_escape("<b>x</b> | *y* [z](http://e) `c`\nnext")
    assert "<" not in md and "\n" not in md and "\\|" in md and "\\*y\\*" in md and "\\[z\\]" in md
    assert csv_safe("=1+1") == "'=1+1" and csv_safe("-2") == "'-2" and csv_safe("dp_pix") == "dp_pix"
    assert terminal_safe("\x1b[31mred\nx") == "\\u001b[31mred\\u000ax"
    assert terminal_safe("abcdef", 4) == "abc…"


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.targets: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script":
            self.scripts += 1
        for key in ("href", "src"):
            if attrs.get(key):
                self.targets.append(attrs[key])


def nasty_results():
    rows = []
    for i, name in enumerate(NASTY + ["plain"]):
        claim = {"epsilon": 1.0 + i, "delta": 0.0, "unit": f"<i>{name}</i>"} if i % 2 else None
        for task in ("bench <one>", "bench $two$"):
            for seed in (0, 1):
                r = row(task, name, 0.5 + 0.05 * i, 0.9 - 0.1 * i, seed=seed, claim=claim,
                        source=f"entry:{name}", run_id=f"<run>{i}")
                r["params"] = {"k": name, "</script>": [1, 2]}
                rows.append(r)
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    sheet = root.parent / "sheet.png"
    sheet.write_bytes(b"\x89PNG\r\n\x1a\n fake")
    df = nasty_results()
    with pytest.warns(UserWarning, match="not found"):
        index = build_site(df, root, sheets={XSS: sheet, "plain": root.parent / "missing.png"})
    return {"root": root, "index": index, "df": df}


def test_site_layout(site):
    root = site["root"]
    assert site["index"] == root / "index.html"
    assert len(list((root / "benchmarks").glob("*.html"))) == 2
    assert len(list((root / "plots").glob("*.png"))) == 2
    assert len(list((root / "mechanisms").glob("*.html"))) == len(NASTY) + 1
    assert len(list((root / "sheets").glob("*.png"))) == 1
    for path in root.rglob("*"):
        assert re.fullmatch(r"[a-z0-9.-]+", path.name), path
    for png in (root / "plots").glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (root / "static" / "table.js").is_file() and (root / "static" / "style.css").is_file()


def test_every_link_resolves_and_no_name_reaches_markup(site):
    root = site["root"]
    for page in root.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        parser = _Links()
        parser.feed(html)
        for target in parser.targets:
            assert not target.startswith(("http:", "https:", "//", "javascript:")), target
            assert (page.parent / target).resolve().is_file(), f"{page.name}: broken link {target}"
        for name in NASTY[:2]:
            assert name not in html, f"{page.name} contains a raw hostile name"
        assert "<i>" not in html and "<run>" not in html and "\x1b" not in html
        assert html.count("</script>") == parser.scripts


def test_pages_show_escaped_names(site):
    root = site["root"]
    index = (root / "index.html").read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in index
    assert "&#34;&gt;&lt;img src=x onerror=alert(2)&gt;" in index
    mech = next(p for p in (root / "mechanisms").glob("script-alert-1-script-*.html"))
    text = mech.read_text(encoding="utf-8")
    assert "<h1>&lt;script&gt;alert(1)&lt;/script&gt;</h1>" in text
    assert 'src="../sheets/' in text


def test_embedded_json_round_trips(site):
    for page in (site["root"] / "benchmarks").glob("*.html"):
        html = page.read_text(encoding="utf-8")
        payload = re.search(r'<script type="application/json" id="board-data">(.*?)</script>', html, re.S)
        data = json.loads(payload.group(1))
        assert {r["mechanism"] for r in data["rows"]} == set(NASTY + ["plain"])


def test_exports(site):
    root = site["root"]
    csv = pd.read_csv(root / "leaderboard.csv", keep_default_na=False)
    assert len(csv) == 2 * (len(NASTY) + 1)
    assert "'=cmd|' /C calc'!A0" in set(csv["mechanism"])
    assert not any(str(v).startswith(("=", "+", "@")) for v in csv.to_numpy().ravel() if isinstance(v, str))
    md = (root / "leaderboard.md").read_text(encoding="utf-8")
    assert "<script>" not in md and "<img" not in md and "&lt;script&gt;" in md
    assert md.count("## ") == 2
    for line in md.splitlines():
        if line.startswith("| ") and "Rank" not in line:
            assert len(re.findall(r"(?<!\\)\|", line)) == 13, line


def test_markdown_and_terminal_render_the_table():
    table = leaderboard_table(pd.DataFrame(curve_rows() + curve_rows(mechanism="\x1b[2Jevil", shift=-0.1)))
    md = render_markdown(table)
    assert "| 1 | dp\\_pix |" in md
    text = render_terminal(table)
    assert "\x1b" not in text and "\\u001b[2Jevil" in text
    lines = text.splitlines()
    assert lines[0].startswith("bench_a") and "HV mean" in lines[1]
    assert lines[2].split()[:2] == ["1", "dp_pix"]
