"""Leaderboard tables, the static site and the exports: numbers, layout and escaping."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
from html.parser import HTMLParser

import pandas as pd
import pytest

from leaderboard.boards import build_leaderboard
from leaderboard.cells import cells_frame
from leaderboard.declare import Declaration, DeclaredCell
from leaderboard.exports import (
    csv_safe,
    markdown_escape,
    printable,
    render_exploration,
    render_markdown,
    render_terminal,
    terminal_safe,
    write_csv,
)
from leaderboard.pareto import hypervolume_2d
from leaderboard.protocol import canonical_params
from leaderboard.render import build_site, script_json, slug
from leaderboard.table import TABLE_COLUMNS, exploration_table, leaderboard_table, tied_text

XSS = "<script>alert(1)</script>"
NASTY = [XSS, '"><img src=x onerror=alert(2)>', "../../etc/passwd", "a$b$c \\frac", "=cmd|' /C calc'!A0",
         "\x1b[31mred\x1b[0m"]
CURVE = [(0.8, 0.3), (0.6, 0.6), (0.3, 0.95)]
SEEDS = (0, 1, 2)


def row(task, mechanism, level, seed, utility, privacy, *, claim=None, source="local", **extra):
    return {
        "task": task, "mechanism": mechanism, "mechanism_version": 1, "params": {"level": level}, "seed": seed,
        "profile": "smoke", "utility": {"acc": utility, "other": 0.0}, "primary_metric": "acc",
        "attacks": {"face_reid": {}}, "privacy_score": privacy, "privacy_flags": {}, "claim": claim,
        "synthetic": True, "dataset_fingerprint": "fp", "eval_split": "test",
        "cell_key": f"{task}|{mechanism}|{level}|{seed}", "source": source, "run_id": f"run-{level}-{seed}", **extra,
    }


def entry(task, mechanism, shift=0.0, claim=None, source="local", name=None, spread=0.01):
    """Rows and declaration of an entry: CURVE shifted in utility, seed s moved by (s - 1) * spread."""
    rows = [row(task, mechanism, level, seed, u + shift + (seed - 1) * spread, p, claim=claim, source=source)
            for level, (u, p) in enumerate(CURVE) for seed in SEEDS]
    cells = {r["cell_key"]: DeclaredCell(task, canonical_params(r["params"]), r["seed"]) for r in rows}
    return rows, Declaration(name or mechanism, source, mechanism, "suite", "smoke", SEEDS, cells)


def board_of(*entries):
    rows = [r for rows, _ in entries for r in rows]
    return build_leaderboard(pd.DataFrame(rows), [d for _, d in entries])


def test_table_numbers_match_hand_computation():
    claim = {"epsilon": 2.0, "delta": 0.0, "unit": "m-pixel (m=1)"}
    leaderboard = board_of(entry("bench_a", "dp_pix", 0.1, claim), entry("bench_a", "blur", -0.2))
    table = leaderboard_table(leaderboard)
    assert list(table.columns) == TABLE_COLUMNS
    top = table.iloc[0]
    assert top["entry"] == "dp_pix" and top["rank"] == 1 and not top["tied"]
    per_seed = [hypervolume_2d([(u + 0.1 + (s - 1) * 0.01, p) for u, p in CURVE]) for s in SEEDS]
    assert top["hv_mean"] == pytest.approx(sum(per_seed) / 3)
    assert top["hv_std"] == pytest.approx(pd.Series(per_seed).std())
    assert (top["hv_min"], top["hv_max"]) == pytest.approx((min(per_seed), max(per_seed)))
    assert top["hv_low"] < top["hv_mean"] < top["hv_high"]
    assert top["claim_type"] == "m-pixel (m=1)" and top["status"] == "ranked"
    assert (top["cells"], top["runs"], top["seeds"], top["configurations"], top["flagged"]) == (9, 9, 3, 3, 0)
    assert (top["profile"], top["data"], top["benchmark"]) == ("smoke", "synthetic data (fp)", "bench_a")
    blur = table.iloc[1]
    assert blur["rank"] == 2 and blur["claim_type"] == "empirical only"


def test_cells_frame_reads_json_strings_ci_and_flags():
    df = pd.DataFrame([{
        "task": "b", "mechanism": "m", "params": json.dumps({"k": 1}), "seed": 3, "profile": "quick",
        "utility": json.dumps({"mAP": 0.5, "mAP_ci95": 0.0392}), "primary_metric": "mAP", "privacy_score": None,
        "attacks": json.dumps({"face_reid": {}}), "privacy_flags": {"face_reid": "attack too weak"},
        "claim": json.dumps({"epsilon": 1, "delta": 1e-5, "unit": "latent (clipped)"}), "source": "entry:team",
    }])
    cells = cells_frame(df)
    c = cells.iloc[0]
    assert c["utility"] == 0.5 and c["utility_se"] == pytest.approx(0.02) and c["params_label"] == "k=1"
    assert math.isnan(c["privacy"]) and c["flag"] == "attack too weak" and "face_reid" in c["flag_detail"]
    assert c["claim_label"] == "eps=1, delta=1e-05 [latent (clipped)]" and c["split"] == "test"
    none = cells_frame(df.assign(attacks=json.dumps({})))
    assert none.iloc[0]["flag"] == "no adversary"


def test_empty_results():
    empty = build_leaderboard(pd.DataFrame(), [])
    assert list(leaderboard_table(empty).columns) == TABLE_COLUMNS
    assert render_terminal(empty).startswith("No declared entries yet")
    assert render_exploration(empty).startswith("No exploration cells")
    assert "No declared entries yet." in render_markdown(empty)


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
    md = markdown_escape("<b>x</b> | *y* [z](http://e) `c`\nnext\x1b[2J")
    assert "<" not in md and "\n" not in md and "\x1b" not in md and "\\|" in md and "\\*y\\*" in md
    assert "\\[z\\]" in md and "\\u000a" in md
    assert csv_safe("=1+1") == "'=1+1" and csv_safe("-2") == "'-2" and csv_safe("dp_pix") == "dp_pix"
    assert csv_safe("\t=1") == "\\u0009=1" and csv_safe("a\x1b[31mb\r\n") == "a\\u001b[31mb\\u000d\\u000a"
    assert printable("ok\x9b\u2028") == "ok\\u009b\\u2028"
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


def nasty_leaderboard():
    rows, declarations = [], []
    for i, name in enumerate(NASTY + ["plain"]):
        claim = {"epsilon": 1.0 + i, "delta": 0.0, "unit": f"<i>{name}</i>"} if i % 2 else None
        cells = {}
        for task in ("bench <one>", "bench $two$"):
            task_rows, declaration = entry(task, name, shift=-0.05 * i, claim=claim, source=f"entry:{name}")
            for r in task_rows:
                r["params"] = {"k": name, "</script>": [1, 2], "level": r["params"]["level"]}
                r["run_id"] = f"<run>{i}"
            rows += task_rows
            cells.update(declaration.cells)
        declarations.append(dataclasses.replace(declaration, cells=cells))
    rows += [row("bench <one>", NASTY[1], 9, 0, 0.99, None, run_id="<x>\x1b", eval_split="val"),
             row("bench <one>", "ad hoc \x1b[2J", 9, 0, 0.99, 0.99)]
    return build_leaderboard(pd.DataFrame(rows), declarations)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    sheet = root.parent / "sheet.png"
    sheet.write_bytes(b"\x89PNG\r\n\x1a\n fake")
    leaderboard = nasty_leaderboard()
    with pytest.warns(UserWarning, match="not found"):
        index = build_site(leaderboard, root, sheets={XSS: sheet, "plain": root.parent / "missing.png"})
    return {"root": root, "index": index, "leaderboard": leaderboard}


def test_site_layout(site):
    root = site["root"]
    assert site["index"] == root / "index.html"
    assert len(list((root / "boards").glob("*.html"))) == 2
    assert len(list((root / "plots").glob("*.png"))) == 2
    assert len(list((root / "mechanisms").glob("*.html"))) == len(NASTY) + 2
    assert len(list((root / "sheets").glob("*.png"))) == 1
    assert (root / "exploration.html").is_file() and (root / "exploration.csv").is_file()
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
        assert "<i>" not in html and "<run>" not in html and "<x>" not in html and "\x1b" not in html
        assert html.count("</script>") == parser.scripts
        assert "Content-Security-Policy" in html and "script-src 'self'" in html


def test_pages_show_board_identity_and_escaped_names(site):
    root = site["root"]
    index = (root / "index.html").read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in index
    assert "&#34;&gt;&lt;img src=x onerror=alert(2)&gt;" in index
    assert index.count("profile smoke · synthetic data (fp)") == 2 and "2 cells outside declared entries" in index
    for page in (root / "boards").glob("*.html"):
        html = page.read_text(encoding="utf-8")
        assert '<dd class="profile">smoke</dd>' in html and '<dd class="data">synthetic data (fp)</dd>' in html
        assert '<dd class="settings">attacks: face_reid; settings: defaults</dd>' in html
    mech = next(p for p in (root / "mechanisms").glob("script-alert-1-script-*.html"))
    text = mech.read_text(encoding="utf-8")
    assert "<h1>&lt;script&gt;alert(1)&lt;/script&gt;</h1>" in text
    assert 'src="../sheets/' in text
    exploration = (root / "exploration.html").read_text(encoding="utf-8")
    assert "tuning cell (validation split)" in exploration and "not a declared configuration" in exploration
    assert "ad hoc \\u001b[2J" in exploration and 'class="flag">attack too weak</td>' in exploration


def test_embedded_json_round_trips(site):
    for page in (site["root"] / "boards").glob("*.html"):
        html = page.read_text(encoding="utf-8")
        payload = re.search(r'<script type="application/json" id="board-data">(.*?)</script>', html, re.S)
        data = json.loads(payload.group(1))
        assert {r["entry"] for r in data["rows"]} == set(NASTY + ["plain"])
        assert data["board"]["profile"] == "smoke"


def test_exports_hold_no_raw_names_or_control_bytes(site):
    root = site["root"]
    for name in ("leaderboard.csv", "exploration.csv", "leaderboard.md"):
        raw = (root / name).read_text(encoding="utf-8")
        assert not re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]", raw), name
    table = pd.read_csv(root / "leaderboard.csv", keep_default_na=False)
    assert len(table) == 2 * (len(NASTY) + 1)
    assert "'=cmd|' /C calc'!A0" in set(table["entry"]) and "\\u001b[31mred\\u001b[0m" in set(table["entry"])
    assert not any(str(v).startswith(("=", "+", "@")) for v in table.to_numpy().ravel() if isinstance(v, str))
    explore = pd.read_csv(root / "exploration.csv", keep_default_na=False)
    assert set(explore["run_id"]) == {"<x>\\u001b", "run-9-0"}
    md = (root / "leaderboard.md").read_text(encoding="utf-8")
    assert "<script>" not in md and "<img" not in md and "&lt;script&gt;" in md
    assert md.count("\n## ") == 2
    for line in md.splitlines():
        if line.startswith("| ") and "Rank" not in line:
            assert len(re.findall(r"(?<!\\)\|", line)) == 14, line


def test_write_csv_escapes_every_text_cell():
    out = io.StringIO()
    write_csv(pd.DataFrame({"name": ["=x", "a\x1bb", "ok"], "value": [1.0, 2.0, float("nan")]}), out)
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    assert rows == [["name", "value"], ["'=x", "1"], ["a\\u001bb", "2"], ["ok", ""]]


def test_terminal_shows_ties_flags_and_escaped_names():
    leaderboard = board_of(entry("bench_a", "dp_pix"), entry("bench_a", "\x1b[2Jevil", shift=-0.002, spread=-0.01))
    text = render_terminal(leaderboard)
    assert "\x1b" not in text and "\\u001b[2Jevil" in text
    lines = text.splitlines()
    assert lines[0].startswith("bench_a · profile smoke · synthetic data (fp)") and "HV mean" in lines[1]
    # a board that separates no pair ranks nothing: '=' for all, and one line that says so (issue 55)
    assert lines[2].split()[:2] == ["=", "dp_pix"]
    assert lines[3].split()[0] == "="
    assert "This board separates none of its 2 ranked entries" in lines[4]
    assert exploration_table(leaderboard).empty


def test_an_entry_tied_with_every_other_says_so_in_one_phrase_with_the_names_in_its_tooltip(tmp_path):
    names = ["blur", "pixelate", "dp_pix", "gaussian_noise"]

    def tied_board(count):
        return board_of(*(entry("bench_a", m, shift=0.001 * i, spread=0.05 * (i + 1) * (-1) ** i)
                          for i, m in enumerate(names[:count])))

    leaderboard = tied_board(4)
    board = leaderboard.boards[0]
    assert all(len(s.tied_with) == 3 for s in board.standings)
    assert {tied_text(s, board) for s in board.standings} == {"every other ranked entry (3)"}
    assert "This board separates none of its 4 ranked entries" in render_terminal(leaderboard)
    page = next((build_site(leaderboard, tmp_path / "site").parent / "boards").glob("*.html")).read_text("utf-8")
    assert page.count(">every other ranked entry (3)</td>") == 4
    assert 'class="tied-with" title="gaussian_noise, dp_pix, pixelate">every other ranked entry (3)<' in page
    # with three entries or fewer the names themselves are as short
    small = tied_board(3).boards[0]
    assert {frozenset(tied_text(s, small).split(", ")) for s in small.standings} == {
        frozenset(names[:3]) - {s.name} for s in small.standings}


def test_each_entry_shows_its_place_on_each_seed(tmp_path):
    """pixelate leads on seeds 0 and 1, blur on seed 2; an entry missing a seed is unranked and has no places."""
    partial_rows, partial = entry("bench_a", "gaussian_noise", shift=0.2)
    leaderboard = board_of(entry("bench_a", "pixelate", shift=0.05, spread=0.0),
                           entry("bench_a", "blur", spread=0.1),
                           ([r for r in partial_rows if r["seed"] != 2], partial))
    board = leaderboard.boards[0]
    assert board.standing("pixelate").seed_places == ((0, 1), (1, 1), (2, 2))
    assert board.standing("blur").seed_places == ((0, 2), (1, 2), (2, 1))
    assert not board.standing("gaussian_noise").ranked and board.standing("gaussian_noise").seed_places == ()
    table = leaderboard_table(leaderboard).set_index("entry")
    assert table.loc["pixelate", "seed_places"] == "0:1 1:1 2:2" and table.loc["gaussian_noise", "seed_places"] == ""
    lines = render_terminal(leaderboard).splitlines()
    assert "by seed" in lines[1]
    assert "1, 1, 2" in next(line for line in lines if "pixelate" in line)
    assert "| 2, 2, 1 |" in next(line for line in render_markdown(leaderboard).splitlines() if "| blur |" in line)
    build_site(leaderboard, tmp_path)
    page = next((tmp_path / "boards").glob("*.html")).read_text(encoding="utf-8")
    assert 'title="seed 0: 1, seed 1: 1, seed 2: 2">1, 1, 2</td>' in page


GROUP = "<b>x</b>"


def cell_groups(seed, level, privacy):
    """``Result.groups`` of one cell: a too-small group, an escaped name, a flag in seed 2 of level 1."""
    weak = seed == 2 and level == 1
    return {
        "min_size": 20,
        "utility": {"metric": "acc", "note": "5-way 5-shot <i>within</i> each group", "table": {
            "gender": {GROUP: {"n": 100, "acc": 0.57 + 0.01 * seed, "acc_ci95": 0.014, "acc_clean": 0.6},
                       "male": {"n": 100, "acc": 0.42, "acc_ci95": 0.02, "acc_clean": 0.6}},
            "age_group": {"young": {"n": 7, "classes": 3, "flag": "group too small"}}}, "gaps": {}},
        "attacks": {"face_reid": {"metric": "top1", "gaps": {}, "table": {"gender": {
            GROUP: {"n": 35, "top1": 0.26, "top1_ci95": 0.15, "clean": 0.43, "clean_ci95": 0.1, "chance": 0.1,
                    "privacy": None if weak else privacy, **({"flag": "attack too weak"} if weak else {})},
            "male": {"n": 35, "top1": 0.2, "top1_ci95": 0.1, "clean": 0.43, "clean_ci95": 0.1, "chance": 0.1,
                     "privacy": 0.9}}}}},
        "worst_privacy": {"privacy": privacy, "group": f"gender={GROUP}" if level else "gender=male",
                          "attack": "face_reid"},
    }


@pytest.fixture(scope="module")
def group_site(tmp_path_factory):
    """dp_pix with results by group (cell level 2, seed 2 without: results written before them); blur without."""
    rows, declaration = entry("bench_g", "dp_pix")
    for r in rows:
        level, seed = r["params"]["level"], r["seed"]
        r["groups"] = {} if (level, seed) == (2, 2) else cell_groups(seed, level, 0.3 + 0.1 * level)
    rows[0]["groups"] = json.dumps(rows[0]["groups"])
    leaderboard = board_of((rows, declaration), entry("bench_g", "blur", -0.2))
    root = tmp_path_factory.mktemp("groups")
    build_site(leaderboard, root)
    return {"root": root, "leaderboard": leaderboard}


def test_cells_frame_carries_groups_and_the_worst_group():
    rows, _ = entry("b", "m")
    rows[0]["groups"] = json.dumps(cell_groups(0, 1, 0.25))
    rows[1]["groups"] = {}
    cells = cells_frame(pd.DataFrame(rows[:3]))
    assert cells.iloc[0]["worst_group_privacy"] == 0.25 and cells.iloc[0]["worst_group"] == f"gender={GROUP}"
    assert cells.iloc[0]["groups"]["min_size"] == 20
    for i in (1, 2):  # empty, and a result written before the field existed (NaN in the frame)
        assert cells.iloc[i]["groups"] == {} and math.isnan(cells.iloc[i]["worst_group_privacy"])
        assert cells.iloc[i]["worst_group"] == ""


def test_board_table_has_the_worst_group_privacy(group_site):
    table = leaderboard_table(group_site["leaderboard"]).set_index("entry")
    # 8 of 9 cells have a worst group: levels 0 and 1 in 3 seeds, level 2 in 2.
    expected = (3 * 0.3 + 3 * 0.4 + 2 * 0.5) / 8
    assert table.loc["dp_pix", "worst_group_privacy"] == pytest.approx(expected)
    assert table.loc["dp_pix", "worst_group"] == f"gender={GROUP}"
    assert math.isnan(table.loc["blur", "worst_group_privacy"]) and table.loc["blur", "worst_group"] == ""
    html = next((group_site["root"] / "boards").glob("*.html")).read_text(encoding="utf-8")
    assert ">Worst-group privacy</button></th>" in html
    cells = re.findall(r'<td class="worst" data-sort="([^"]*)" title="([^"]*)">(.*?)</td>', html)
    assert [(float(v) if v else None) for v, _, _ in cells] == [pytest.approx(expected), None]
    assert cells[0][1] == "worst: gender=&lt;b&gt;x&lt;/b&gt; in 5 of 8 cells; mean over 8 of 9 cells"
    shown = f"{table.loc['dp_pix', 'worst_group_privacy']:.3f}"  # 0.3875 in floating point
    assert cells[0][2] == f'{shown} <span class="group">gender=&lt;b&gt;x&lt;/b&gt;</span>' and cells[1][2] == "–"
    csv_table = pd.read_csv(group_site["root"] / "leaderboard.csv", keep_default_na=False).set_index("entry")
    assert float(csv_table.loc["dp_pix", "worst_group_privacy"]) == pytest.approx(expected, abs=1e-6)
    assert csv_table.loc["blur", "worst_group_privacy"] == ""
    md = (group_site["root"] / "leaderboard.md").read_text(encoding="utf-8")
    assert f"| {shown} (gender=&lt;b&gt;x&lt;/b&gt;) | ranked |" in md and "| 0 | – | ranked |" in md


def test_mechanism_page_shows_results_by_group(group_site):
    root = group_site["root"]
    page = next((root / "mechanisms").glob("dp-pix-*.html")).read_text(encoding="utf-8")
    assert GROUP not in page and "<i>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    section = page[page.index('<section class="groups"'):page.index("</section>")]
    tables = re.findall(r'<table class="groups">(.*?)</table>\s*<ul class="gaps">(.*?)</ul>', section, re.S)
    assert len(tables) == 3
    level1, level2 = tables[1], tables[2]
    caption = re.search(r"<caption>(.*?)</caption>", level1[0], re.S).group(1)
    assert "dp_pix · level=1</span>: mean over 3 seeds (0, 1, 2)" in caption
    assert "under 20 targets; utility: 5-way 5-shot &lt;i&gt;within&lt;/i&gt; each group" in caption
    assert "mean over 2 seeds (0, 1), the 2 of 3 with results by group" in tables[2][0]
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", tr) for tr in re.findall(r"<tr>(.*?)</tr>", level1[0], re.S)[1:]]
    assert rows[0][:4] == ["gender", "&lt;b&gt;x&lt;/b&gt;", "100/35", "0.5800 ± 0.0140"]  # mean over seeds
    assert rows[0][5] == "0.2600 ± 0.1500 / undefined (attack too weak in 1 of 3 seeds)"
    assert rows[1][5] == "0.2000 ± 0.1000 / 0.9000"
    assert rows[2][:4] == ["age_group", "young", "7", "group too small"]
    assert '<td class="flag">group too small</td>' in level1[0]
    gaps = re.findall(r"<li>(.*?)</li>", level1[1])
    assert "largest utility gap in gender: acc 0.1600 ± 0.0244 (&lt;b&gt;x&lt;/b&gt; − male)" in gaps
    assert "worst group&#39;s privacy: 0.9000 (gender=male, face_reid)" in gaps
    level2_rows = re.findall(r"<td[^>]*>(.*?)</td>", level2[0])
    assert "0.5750 ± 0.0140" in level2_rows and "0.2600 ± 0.1500 / 0.5000" in level2_rows
    blur = next((root / "mechanisms").glob("blur-*.html")).read_text(encoding="utf-8")
    assert 'class="groups"' not in blur


def test_exploration_cells_show_their_groups_on_the_mechanism_page(tmp_path):
    from leaderboard.boards import build_leaderboard

    cell = row("fewshot_synth_faces", "dp_pix", 1, 0, 0.7, 0.4, cell_key="adhoc", run_id="adhoc-run")
    cell["groups"] = cell_groups(0, 1, 0.3)
    build_site(build_leaderboard(pd.DataFrame([cell]), []), tmp_path)
    page = next((tmp_path / "mechanisms").glob("dp-pix-*.html")).read_text(encoding="utf-8")
    section = page[page.index('<section class="groups"'):page.index("</section>")]
    assert "exploration cells (on no board)" in section and 'href="../exploration.html"' in section
    assert "fewshot_synth_faces · smoke · synthetic data · test split" in section
    assert "0.5700 ± 0.0140" in section


def test_a_board_names_the_hardware_of_its_cells_and_says_when_it_mixes_kinds(tmp_path):
    """Another CPU model, thread count or GPU rounds differently: each cell says what computed it."""
    intel = {"device": "cpu", "versions": {"cpu": "Intel Xeon", "cpu_threads": "2"}}
    amd = {"device": "cpu", "versions": {"cpu": "AMD EPYC", "cpu_threads": "1"}}
    gpu = {"device": "cuda:0", "versions": {"gpu": "NVIDIA H100"}}
    same_rows, same = entry("bench_a", "dp_pix")
    for r in same_rows:
        r.update(intel)
    mixed_rows, mixed = entry("bench_a", "blur", -0.2)
    for i, r in enumerate(mixed_rows):
        r.update((intel, amd, gpu)[i % 3])
    assert cells_frame(pd.DataFrame([{**mixed_rows[0], "versions": {}}]))["hardware"][0] == "cpu (model not recorded)"
    isa = {"device": "cpu", "versions": {"cpu": "AMD EPYC", "cpu_threads": "2", "cpu_capability": "AVX2"}}
    assert cells_frame(pd.DataFrame([{**mixed_rows[0], **isa}]))["hardware"][0] == "AMD EPYC (AVX2), 2 threads"

    alone = board_of((same_rows, same))
    assert set(leaderboard_table(alone)["hardware"]) == {"Intel Xeon, 2 threads"}
    assert "kinds of hardware" not in render_markdown(alone) + render_terminal(alone)

    both = board_of((same_rows, same), (mixed_rows, mixed))
    table = leaderboard_table(both).set_index("entry")
    assert table.loc["dp_pix", "hardware"] == "Intel Xeon, 2 threads"
    assert table.loc["blur", "hardware"] == "AMD EPYC, 1 thread; Intel Xeon, 2 threads; NVIDIA H100"
    note = "Cells computed on 3 kinds of hardware (AMD EPYC, 1 thread; Intel Xeon, 2 threads; NVIDIA H100)"
    assert note in render_markdown(both) and note in render_terminal(both)
    rerun = {**same_rows[0], **gpu, "run_id": "run-again"}  # the same cell again, on a GPU: averaged, both named
    cells = board_of((same_rows + [rerun], same)).boards[0].cells
    assert cells.loc[cells["runs"] == 2, "hardware"].tolist() == ["Intel Xeon, 2 threads; NVIDIA H100"]
    index = build_site(both, tmp_path / "site")
    board_page = next((index.parent / "boards").glob("*.html")).read_text()
    assert note in board_page and "<td class=\"hardware\">NVIDIA H100</td>" in board_page
