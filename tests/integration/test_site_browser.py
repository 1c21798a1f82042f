"""The static leaderboard site in a real browser: navigation, sorting, filtering, escaping.

Needs the ``playwright`` Python package and the system Chromium at /usr/bin/chromium
(Debian: ``apt-get install -y chromium``); never ``playwright install``.
"""

from __future__ import annotations

import functools
import http.server
import itertools
import threading
import time
from pathlib import Path
from urllib.parse import urljoin

import pandas as pd
import pytest

from leaderboard.boards import build_leaderboard
from leaderboard.declare import Declaration, DeclaredCell
from leaderboard.protocol import canonical_params
from leaderboard.render import build_site
from leaderboard.table import leaderboard_table

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
XSS = "<script>alert(1)</script>"
XSS_ATTR = '"><img src=x onerror=alert(2)>'
UNIT = "m-pixel (m=1)"
WORST = {"dp_pix": 0.2, "blur": 0.6, XSS: 0.4}
"""Worst-group privacy of each mechanism's cells (plus 0.01 per level); the fourth has no results by group."""

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="the playwright Python package is not installed (pip install playwright)"
)
if not CHROMIUM.exists():
    pytest.skip(f"no system Chromium at {CHROMIUM} (apt-get install -y chromium)", allow_module_level=True)


def synthetic_leaderboard():
    """Four entries on two benchmarks, three seeds, three settings each, plus two exploration cells."""
    curves = {
        "dp_pix": [(0.80, 0.30), (0.60, 0.60), (0.30, 0.95)],
        "blur": [(0.85, 0.20), (0.50, 0.50), (0.20, 0.80)],
        XSS: [(0.70, 0.40), (0.65, 0.70), (0.40, 0.92)],
        XSS_ATTR: [(0.90, 0.05), (0.88, 0.10), (0.85, 0.15)],
    }
    claims = {"dp_pix": UNIT, XSS: "<b>image</b>"}
    rows, declared = [], {}
    for task, metric in (("fewshot_celeba", "acc"), ("reid_market1501", "mAP")):
        for mechanism, curve in curves.items():
            source = "entry:team <x>" if mechanism == "blur" else "local"
            cells = declared.setdefault(mechanism, {})
            for seed in (0, 1, 2):
                for level, (utility, privacy) in enumerate(curve):
                    shift = 0.02 * seed - (0.05 if task == "reid_market1501" else 0.0)
                    unit = claims.get(mechanism)
                    key = f"{task}|{mechanism}|{level}|{seed}"
                    cells[key] = DeclaredCell(task, canonical_params({"level": level, "tag": "</script><!--"}), seed)
                    rows.append({
                        "task": task, "mechanism": mechanism, "mechanism_version": 1,
                        "params": {"level": level, "tag": "</script><!--"}, "seed": seed, "profile": "quick",
                        "utility": {metric: utility + shift}, "primary_metric": metric, "attacks": {"face_reid": {}},
                        "privacy_score": privacy, "privacy_flags": {},
                        "claim": None if unit is None else {"epsilon": 8.0 / (level + 1), "delta": 0.0, "unit": unit},
                        "synthetic": False, "dataset_fingerprint": f"fp-{task}", "eval_split": "test",
                        "cell_key": key, "source": source, "run_id": f"run-{task}-{seed}-{level}",
                        "groups": _groups(WORST[mechanism] + 0.01 * level) if mechanism in WORST else {},
                    })
    declarations = [Declaration("team <x>" if m == "blur" else m, "entry:team <x>" if m == "blur" else "local", m,
                                "standard", "quick", (0, 1, 2), cells) for m, cells in declared.items()]
    extra = dict(rows[0], cell_key="trial", eval_split="val", run_id="trial-run", privacy_score=None)
    rows += [extra, dict(rows[0], cell_key="adhoc", params={"level": 7}, run_id="adhoc-run")]
    return build_leaderboard(pd.DataFrame(rows), declarations)


def _groups(privacy: float) -> dict:
    table = {"gender": {"<b>f</b>": {"n": 40, "top1": 0.3, "top1_ci95": 0.1, "clean": 0.5, "clean_ci95": 0.1,
                                     "chance": 0.1, "privacy": privacy},
                        "male": {"n": 9, "flag": "group too small"}}}
    return {"min_size": 20, "attacks": {"face_reid": {"metric": "top1", "table": table, "gaps": {}}},
            "worst_privacy": {"privacy": privacy, "group": "gender=<b>f</b>", "attack": "face_reid"}}


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    leaderboard = synthetic_leaderboard()
    root = tmp_path_factory.mktemp("site")
    sheet = root.parent / "sheet.png"
    _write_png(sheet)
    build_site(leaderboard, root, sheets={XSS: sheet})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {"url": f"http://127.0.0.1:{server.server_address[1]}", "table": leaderboard_table(leaderboard)}
    finally:
        server.shutdown()
        server.server_close()


def _write_png(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1), dpi=50)
    ax.imshow([[0, 1], [1, 0]])
    fig.savefig(path)
    plt.close(fig)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    dialogs: list[str] = []
    errors: list[str] = []

    def on_dialog(dialog):
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    assert dialogs == [], f"a script injected through a name ran: {dialogs}"
    assert errors == [], f"JavaScript errors: {errors}"
    context.close()


def _visible_rows(page, table_id: str) -> list[list[str]]:
    return page.evaluate(
        """id => Array.from(document.getElementById(id).tBodies[0].rows)
            .filter(r => !r.hidden)
            .map(r => Array.from(r.cells).map(c => c.textContent.trim()))""",
        table_id,
    )


def _column(page, table_id: str, index: int) -> list[str]:
    return page.evaluate(
        """([id, i]) => Array.from(document.getElementById(id).tBodies[0].rows)
            .filter(r => !r.hidden).map(r => r.cells[i].getAttribute('data-sort'))""",
        [table_id, index],
    )


def _image_loaded(page, selector: str, timeout_s: float = 10.0) -> int:
    # Polled from Python: wait_for_function evaluates a string in the page, which the
    # site's Content-Security-Policy (script-src 'self') rightly refuses.
    image = page.locator(selector)
    deadline = time.monotonic() + timeout_s
    while not image.evaluate("img => img.complete") and time.monotonic() < deadline:
        time.sleep(0.05)
    return image.evaluate("img => img.naturalWidth")


def test_index_lists_boards_with_their_identity(page, site):
    page.goto(f"{site['url']}/index.html")
    assert page.locator("h1").inner_text() == "Privacy–utility leaderboard"
    assert page.locator("a.board").all_inner_texts() == ["fewshot_celeba", "reid_market1501"]
    identity = page.locator("ul.boards > li").first.locator(".identity-line").inner_text()
    assert identity == "profile quick · real data (fp-fewshot) · attacks: face_reid; settings: defaults"
    names = page.locator("a.mechanism").all_text_contents()
    assert sorted(names) == sorted(["dp_pix", "blur", XSS, XSS_ATTR])
    # The index leads with each board's ranking table (issue 43): every entry, in the board's order.
    ranking = page.locator("ul.boards > li").first.locator("table.ranking a.entry").all_text_contents()
    expected = site["table"].query("benchmark == 'fewshot_celeba'")["entry"].tolist()
    assert ranking == expected
    assert page.locator("a.exploration").inner_text() == "2 cells outside declared entries"
    assert page.evaluate("document.scripts.length") == 1
    assert page.evaluate("document.querySelectorAll('img').length") == 0


def test_board_page_sorts_filters_and_shows_plot(page, site):
    page.goto(f"{site['url']}/index.html")
    page.get_by_role("link", name="fewshot_celeba", exact=True).click()
    page.wait_for_selector("#board")
    assert page.locator("h1").inner_text() == "fewshot_celeba"
    assert page.locator("dl.identity dd.profile").inner_text() == "quick"
    assert page.locator("dl.identity dd.data").inner_text() == "real data (fp-fewshot)"
    assert _image_loaded(page, "#frontier-plot") > 0

    board = site["table"].query("benchmark == 'fewshot_celeba'")
    assert [row[1] for row in _visible_rows(page, "board")] == board["entry"].tolist()
    assert [row[0] for row in _visible_rows(page, "board")] == ["1", "2", "3", "4"]

    header = page.locator("#board thead th", has_text="Hypervolume").first
    index = header.evaluate("th => Array.from(th.parentNode.cells).indexOf(th)")
    header.click()
    assert header.get_attribute("aria-sort") == "ascending"
    values = [float(v) for v in _column(page, "board", index)]
    assert values == sorted(values)
    assert [row[1] for row in _visible_rows(page, "board")] == board["entry"].tolist()[::-1]
    header.click()
    assert header.get_attribute("aria-sort") == "descending"
    assert [float(v) for v in _column(page, "board", index)] == sorted(values, reverse=True)

    select = page.locator('[data-filter="claim"]')
    assert XSS_ATTR not in select.inner_html()
    select.select_option(UNIT)
    assert [row[1] for row in _visible_rows(page, "board")] == ["dp_pix"]
    assert page.locator("[data-filters-for=board] [data-count]").inner_text() == "1 of 4 rows"
    select.select_option("empirical only")
    assert sorted(row[1] for row in _visible_rows(page, "board")) == sorted(["team <x>", XSS_ATTR])
    select.select_option("<b>image</b>")
    assert [row[1] for row in _visible_rows(page, "board")] == [XSS]
    select.select_option("")
    page.locator('[data-filters-for=board] [data-filter="text"]').fill("team <x>")
    assert [row[1] for row in _visible_rows(page, "board")] == ["team <x>"]
    assert len(_visible_rows(page, "cells")) == 4 * 3 * 3


def test_hostile_names_render_as_text(page, site):
    page.goto(f"{site['url']}/index.html")
    page.locator("a.mechanism", has_text=XSS).click()
    page.wait_for_selector("#cells")
    assert page.locator("h1").text_content() == XSS
    assert page.title().startswith(XSS)
    assert page.evaluate("document.scripts.length") == 1
    assert _image_loaded(page, "#sample-sheet") > 0
    rows = _visible_rows(page, "cells")
    assert len(rows) == 18
    assert all("tag=</script><!--" in row[2] for row in rows)

    page.locator("ul.ranks a", has_text="reid_market1501").click()
    page.wait_for_selector("#board")
    entries = [row[1] for row in _visible_rows(page, "board")]
    assert XSS in entries and XSS_ATTR in entries
    assert page.evaluate("document.scripts.length") == 2
    data = page.evaluate("JSON.parse(document.getElementById('board-data').textContent)")
    assert {row["entry"] for row in data["rows"]} == {"dp_pix", "team <x>", XSS, XSS_ATTR}

    page.locator("#board a", has_text=XSS_ATTR).first.click()
    page.wait_for_selector("#cells")
    assert page.locator("h1").text_content() == XSS_ATTR
    assert page.evaluate("document.querySelectorAll('img').length") == 0


def test_exploration_page_lists_unranked_cells(page, site):
    page.goto(f"{site['url']}/index.html")
    page.locator("a.exploration").click()
    page.wait_for_selector("#exploration")
    rows = _visible_rows(page, "exploration")
    assert sorted(row[11] for row in rows) == ["not a declared configuration", "tuning cell (validation split)"]
    assert {row[10] for row in rows} == {"attack too weak", "0.3000"} and {row[4] for row in rows} == {"fp32"}


def _rects(page, selector: str) -> dict[str, list[float]]:
    return page.evaluate(
        """sel => Object.fromEntries(Array.from(document.querySelectorAll(sel)).map(e => {
            const r = e.getBoundingClientRect(); return [e.id, [r.left, r.top, r.right, r.bottom]]; }))""",
        selector,
    )


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_frontier_svg_fits_the_data_and_its_labels_do_not_overlap(page, site):
    page.goto(f"{site['url']}/index.html")
    page.get_by_role("link", name="fewshot_celeba", exact=True).click()
    page.wait_for_selector("#board")
    assert _image_loaded(page, "#frontier-plot") > 0
    src = page.locator("#frontier-plot").get_attribute("src")
    assert src.startswith("../plots/") and src.endswith(".svg")
    sidecar = page.request.get(urljoin(page.url, page.locator("figure.plot a", has_text="Plot data")
                                       .get_attribute("href"))).json()
    assert sidecar["benchmark"] == "fewshot_celeba" and sidecar["mark"] == "real data · profile quick"

    (x_lo, x_hi), (y_lo, y_hi) = sidecar["data_range"]["x"], sidecar["data_range"]["y"]
    for (low, high), (data_lo, data_hi) in ((sidecar["xlim"], (x_lo, x_hi)), (sidecar["ylim"], (y_lo, y_hi))):
        room = sidecar["margin"] * max(data_hi - data_lo, sidecar["min_span"]) + 1e-9
        assert data_lo - room <= low < data_lo and data_hi < high <= data_hi + room
    assert len(sidecar["points"]) == 4 * 3
    for p in sidecar["points"]:
        assert sidecar["xlim"][0] < p["x"] - p["x_ci"] and p["x"] + p["x_ci"] < sidecar["xlim"][1], p["id"]
        assert sidecar["ylim"][0] < p["y"] < sidecar["ylim"][1], p["id"]
    claimed = {p["id"] for p in sidecar["points"] if p["entry"] in ("dp_pix", XSS)}
    assert {label["point"] for label in sidecar["labels"]} | {d["point"] for d in sidecar["dropped_labels"]} == claimed
    assert {label["text"] for label in sidecar["labels"]} <= {f"ε={8 / (level + 1):.4g} [{unit}]"
                                                              for level in range(3) for unit in (UNIT, "<b>image</b>")}

    page.goto(urljoin(page.url, src))
    svg = page.locator("svg").first.bounding_box()
    area = _rects(page, "#plot-area")["plot-area"]
    points = _rects(page, '[id^="point-"]')
    assert set(points) == {p["id"] for p in sidecar["points"]}
    for gid, (left, top, right, bottom) in points.items():
        assert area[0] <= (left + right) / 2 <= area[2] and area[1] <= (top + bottom) / 2 <= area[3], gid
    labels = _rects(page, '[id^="label-"]')
    assert set(labels) == {label["id"] for label in sidecar["labels"]} and labels
    for gid, box in labels.items():
        assert svg["x"] <= box[0] and box[2] <= svg["x"] + svg["width"], gid
        assert svg["y"] <= box[1] and box[3] <= svg["y"] + svg["height"], gid
        assert area[0] <= box[0] and box[2] <= area[2] and area[1] <= box[1] and box[3] <= area[3], gid
    for (a, box_a), (b, box_b) in itertools.combinations(labels.items(), 2):
        assert not _overlap(box_a, box_b), (a, b)
    legend = _rects(page, "#legend")["legend"]
    assert not any(_overlap(box, legend) for box in labels.values())
    bars = _rects(page, '[id^="xerr-"]')
    assert set(bars) == {p["id"].replace("point-", "xerr-") for p in sidecar["points"] if p["x_ci"]}
    assert len(bars) == 12 and all(right - left > 0 for left, _, right, _ in bars.values())
    assert page.locator("#data-mark").count() == 1 and page.locator('[id^="frontier-"]').count() == 4


def test_board_sorts_by_worst_group_privacy(page, site):
    page.goto(f"{site['url']}/index.html")
    page.get_by_role("link", name="fewshot_celeba", exact=True).click()
    page.wait_for_selector("#board")
    header = page.locator("#board thead th", has_text="Worst-group privacy").first
    index = header.evaluate("th => Array.from(th.parentNode.cells).indexOf(th)")
    header.click()
    assert header.get_attribute("aria-sort") == "ascending"
    rows = _visible_rows(page, "board")
    assert [row[1] for row in rows] == ["dp_pix", XSS, "team <x>", XSS_ATTR]
    assert [row[index] for row in rows] == [f"{v:.3f} gender=<b>f</b>" for v in (0.21, 0.41, 0.61)] + ["–"]
    title = page.locator("#board tbody tr").first.locator("td").nth(index).get_attribute("title")
    assert title == "worst: gender=<b>f</b> in 9 of 9 cells; mean over 9 of 9 cells"
    header.click()
    assert header.get_attribute("aria-sort") == "descending"
    assert [row[1] for row in _visible_rows(page, "board")] == ["team <x>", XSS, "dp_pix", XSS_ATTR]  # none: last
    values = [float(v) for v in _column(page, "board", index)[:3]]
    assert values == sorted(values, reverse=True)

    page.locator("#board a", has_text="dp_pix").first.click()
    page.wait_for_selector("section.groups")
    assert page.locator("table.groups").count() == 2 * 3 + 2  # 2 boards x 3 levels, and the 2 exploration cells
    assert page.locator("section.groups h3", has_text="exploration cells (on no board)").count() == 1
    row = page.locator("table.groups").first.locator("tbody tr").nth(1).locator("td").all_inner_texts()
    assert row == ["gender", "male", "9", "group too small"]
    assert page.locator("table.groups caption").first.inner_text().startswith("dp_pix · level=0, tag=</script><!--")


MID_WORD_JS = """() => {
  const doc = document.documentElement;
  const split = [];
  document.querySelectorAll('table td, table th').forEach(cell => {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let node;
    while ((node = walker.nextNode())) {
      const words = /\\S+/g;
      let word;
      while ((word = words.exec(node.textContent))) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        const lines = new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top)));
        if (lines.size < 2) continue;
        // Where the word goes to a new line: a break between two letters or digits is mid-word
        // (a break after '-' or '/' is a break opportunity, as between words).
        let top = null;
        for (let i = 0; i < word[0].length; i++) {
          const char = document.createRange();
          char.setStart(node, word.index + i);
          char.setEnd(node, word.index + i + 1);
          const rect = char.getClientRects()[0];
          if (!rect) continue;
          const now = Math.round(rect.top);
          if (top !== null && now !== top && /[A-Za-z0-9]{2}/.test(word[0][i - 1] + word[0][i])) split.push(word[0]);
          top = now;
        }
      }
    }
  });
  const boxes = Array.from(document.querySelectorAll('table.sortable, table.ranking')).map(
    t => getComputedStyle(t.parentElement).overflowX);
  return {pageScrolls: doc.scrollWidth > doc.clientWidth, split: split, boxes: boxes};
}"""


def test_tables_fit_1280_px_without_page_scroll_or_mid_word_wraps(page, site):
    """Issue 43: at 1,280 px no page-wide horizontal scroll; words wrap at spaces; wide tables scroll in their box."""
    assert page.viewport_size["width"] == 1280
    page.goto(f"{site['url']}/index.html")
    links = page.locator("a.full-board").evaluate_all("links => links.map(a => a.href)")
    assert len(links) == 2
    for url in [f"{site['url']}/index.html", *links]:
        page.goto(url)
        found = page.evaluate(MID_WORD_JS)
        assert not found["pageScrolls"], url
        assert found["split"] == [], (url, found["split"][:30])
        assert found["boxes"] and set(found["boxes"]) == {"auto"}, url
