"""End to end: Debian's chromium against ``panel serve apps/explorer_app.py`` on 127.0.0.1.

Screenshots land in ``test-artifacts/`` for a person to look at. Sizes are tiny (N ≤ 3,
horizon ≤ 6) except in the cancel test, whose run is meant to be long and is stopped.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
LOAD_S = 60_000  # ms, first page of a fresh server (it imports JAX and starts the worker)
RUN_S = 120_000


def _console_errors(page) -> list[str]:
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda err: errors.append(str(err)))
    return errors


def _open(page, url):
    from playwright.sync_api import expect  # noqa: PLC0415

    page.goto(url)
    expect(page.locator(".bk-Figure")).to_have_count(4, timeout=LOAD_S)
    expect(page.get_by_text("Status:")).to_be_visible(timeout=LOAD_S)
    # The results table is sent once the page has drawn (after the plots).
    expect(page.locator(".tabulator")).to_be_visible(timeout=LOAD_S)


def _set_number(page, label: str, value: int) -> None:
    box = page.locator(".bk-input-group", has_text=label).locator("input").first
    box.fill(str(value))
    box.press("Enter")


def _plotted(page) -> set[tuple[str, float]]:
    """(line label, N) of every point the Bokeh plots hold (from their data sources)."""
    pairs = page.evaluate("""() => {
        const out = [];
        for (const doc of Bokeh.documents) {
            for (const m of doc.all_models) {
                if (!m.data) continue;
                const d = m.data instanceof Map ? Object.fromEntries(m.data) : m.data;
                if (!d.line || !d.n_states) continue;
                const lines = Array.from(d.line), ns = Array.from(d.n_states);
                lines.forEach((line, i) => out.push([line, ns[i]]));
            }
        }
        return out;
    }""")
    return {(line, n) for line, n in pairs}


def _foreign_requests(page) -> list[str]:
    """Every request the page makes to a host other than its own server (the page must work
    offline: no CDN, no web font)."""
    foreign: list[str] = []

    def record(request) -> None:
        url = request.url
        if not url.startswith(("http://127.0.0.1:", "ws://127.0.0.1:", "data:", "blob:")):
            foreign.append(url)

    page.on("request", record)
    return foreign


def _shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def test_page_loads_with_the_example_and_no_console_errors(page, served_app):
    from playwright.sync_api import expect  # noqa: PLC0415

    errors = _console_errors(page)
    _open(page, served_app)
    expect(page.get_by_text("Example sweep shipped with the package")).to_be_visible()
    expect(page.locator(".tabulator-row", has_text="example").first).to_be_visible()
    assert any(line.startswith("dict") for line, _ in _plotted(page))
    page.wait_for_timeout(1000)
    _shot(page, "page-loaded.png")
    assert errors == []


def test_run_adds_a_row_to_the_table_and_to_the_plots(page, served_app):
    from playwright.sync_api import expect  # noqa: PLC0415

    errors = _console_errors(page)
    foreign = _foreign_requests(page)
    _open(page, served_app)
    _set_number(page, "or any N", 3)
    _set_number(page, "Horizon", 6)
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.get_by_text(re.compile(r"Run finished: 2 of 2"))).to_be_visible(timeout=RUN_S)
    expect(page.locator(".tabulator-row", has_text="measured")).to_have_count(2)
    deadline = time.monotonic() + 30  # the plots are redrawn just after the table
    while not {("dict", 3), ("array", 3)} <= (plotted := _plotted(page)):
        assert time.monotonic() < deadline, plotted
        page.wait_for_timeout(100)
    page.wait_for_timeout(1000)
    _shot(page, "after-run.png")
    # The Programs tab (built when first opened) shows the selected row's programs as text.
    page.locator(".tabulator-row", has_text="dict").first.click()
    page.locator(".bk-tab", has_text="Programs").click()
    page.get_by_role("button", name="Show programs of the selected row").click()
    expect(page.get_by_text(re.compile(r"Programs of: decay/dict N=3 H=6"))).to_be_visible(
        timeout=RUN_S)
    expect(page.locator("pre.program-text").first).to_contain_text("scan", timeout=RUN_S)
    page.locator(".bk-tab").filter(has_text=re.compile(r"^StableHLO$")).click()
    expect(page.locator("pre.program-text", has_text="stablehlo.").first).to_be_visible()
    _shot(page, "programs.png")
    page.locator(".bk-tab", has_text="Results").click()
    page.locator(".bk-tab", has_text="Programs").click()  # a second visit asks nothing either
    page.wait_for_timeout(500)
    # What a tab shows is brought up to date while another tab is in front (the selected
    # row's title; the jaxpr while StableHLO is shown): back in front, it asks nothing of any
    # other host either (Panel gave such updates its CDN's stylesheets).
    page.locator(".bk-tab", has_text="Results").click()
    page.locator(".tabulator-row", has_text="array").first.click()
    page.locator(".bk-tab", has_text="Programs").click()
    page.get_by_role("button", name="Show programs of the selected row").click()
    expect(page.get_by_text(re.compile(r"Programs of: decay/array N=3 H=6"))).to_be_visible(
        timeout=RUN_S)
    page.locator(".bk-tab").filter(has_text=re.compile(r"^jaxpr$")).click()
    expect(page.locator("pre.program-text").first).to_contain_text("scan")
    page.wait_for_timeout(500)
    page.locator(".bk-tab", has_text="Results").click()
    # The results and the plots leave the page as files.
    with page.expect_download() as csv:
        page.get_by_role("button", name="Download results (CSV)").click()
    header, *rows = Path(csv.value.path()).read_text().splitlines()
    assert header.startswith("id,") and header.endswith(",source")
    assert sum(row.endswith(",measured") for row in rows) == 2
    with page.expect_download() as html:
        page.get_by_role("button", name="Export plots (standalone HTML)").click()
    exported = Path(html.value.path()).read_bytes()
    assert exported.startswith(b"<!DOCTYPE html>") and b"Bokeh" in exported
    page.wait_for_timeout(500)
    assert foreign == [], foreign
    assert errors == []


def test_selection_stays_on_its_row_when_new_rows_arrive(page, served_app):
    from playwright.sync_api import expect  # noqa: PLC0415

    _open(page, served_app)
    _set_number(page, "Horizon", 5)
    _set_number(page, "or any N", 2)
    run = page.get_by_role("button", name="Run", exact=True)
    run.click()
    expect(page.get_by_text(re.compile(r"Run finished: 2 of 2"))).to_be_visible(timeout=RUN_S)
    measured = page.locator(".tabulator-row", has_text="measured")
    page.wait_for_timeout(1000)  # the table has taken the run's last row
    rows_before = measured.count()  # this module's server may hold rows of other tests
    measured.filter(has_text="dict").first.click()
    expect(page.locator(".tabulator-row.tabulator-selected")).to_have_count(1)
    before = page.locator(".tabulator-row.tabulator-selected").inner_text()
    assert "dict" in before and "measured" in before
    _set_number(page, "or any N", 3)  # two new rows arrive above the selected one
    run.click()
    expect(measured).to_have_count(rows_before + 2, timeout=RUN_S)
    expect(page.get_by_text(re.compile(r"Run finished: 2 of 2"))).to_be_visible(timeout=RUN_S)
    page.wait_for_timeout(1000)
    selected = page.locator(".tabulator-row.tabulator-selected")
    expect(selected).to_have_count(1)
    assert selected.inner_text() == before  # the same row (same id), not the same position
    _shot(page, "selection-kept.png")


_COMPILE_FIGURE_JS = """() => {
    // The compile-time figure drawn on the page: its id, the labels in its legend, and the
    // state counts N of its points.
    for (const view of Bokeh.index.all_views()) {
        const m = view.model;
        if (m.type !== 'Figure' || !view.el.isConnected) continue;
        if (!(m.title && m.title.text.startsWith('Compile time'))) continue;
        const labels = [], ns = new Set();
        for (const legend of m.center.filter(r => r.type === 'Legend'))
            for (const item of legend.items) labels.push(item.label.value);
        for (const r of m.renderers) {
            const data = r.data_source ? r.data_source.data : null;
            const column = data instanceof Map ? data.get('n_states') : (data || {}).n_states;
            for (const n of column || []) ns.add(Number(n));
        }
        return [m.id, labels, Array.from(ns).sort((a, b) => a - b)];
    }
    return null;
}"""


def _compile_figure_when(page, ready, timeout_s: float = 60):
    """The compile-time figure (:data:`_COMPILE_FIGURE_JS`) once ``ready(labels, ns)``."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = page.evaluate(_COMPILE_FIGURE_JS)
        if found is not None and ready(found[1], found[2]):
            return found
        assert time.monotonic() < deadline, found
        page.wait_for_timeout(100)


def test_a_new_result_updates_the_plot_the_page_has(page, served_app):
    """A result that adds points to lines already drawn reaches the compile-time plot: the
    points, fits and legend are the new ones (the plot is drawn again, ``pane.object = new``,
    as Panel does it)."""
    from playwright.sync_api import expect  # noqa: PLC0415

    errors = _console_errors(page)
    _open(page, served_app)
    run = page.get_by_role("button", name="Run", exact=True)
    # The first result beside the shipped example: its lines beside the example's.
    # (For grad: other tests of this module's server measure loss at this horizon. A page
    # opened on a store with rows shows the example when asked.)
    page.locator("#sidebar").get_by_role("button", name="grad", exact=True).click()
    _set_number(page, "Horizon", 200)
    page.locator(".bk-Checkbox", has_text="Show the shipped example sweep").locator("input").check()
    # Labelled "dict example" once this server's store holds rows measured by earlier tests
    # (anywhere), "dict" on an empty one: either way the example's lines alone.
    _, labels, ns = _compile_figure_when(
        page, lambda labels, ns: [label.split(" k=")[0].removesuffix(" example")
                                  for label in labels] == ["dict", "array"] and 1000 in ns)
    assert 2 not in ns  # nothing measured here yet: the example's lines alone
    _set_number(page, "or any N", 2)
    run.click()
    expect(page.get_by_text(re.compile(r"Run finished: 2 of 2"))).to_be_visible(timeout=RUN_S)
    _, labels, ns = _compile_figure_when(page, lambda labels, ns: len(labels) == 4)
    assert 2 in ns
    assert [label.split(" k=")[0] for label in labels] == [
        "dict example", "dict", "array example", "array"], labels
    _shot(page, "first-result-beside-the-example.png")

    page.locator("#sidebar").get_by_role("button", name="loss", exact=True).click()
    _set_number(page, "Horizon", 4)  # nothing measured at this horizon yet
    figures = []
    for n in (2, 3, 4):
        _set_number(page, "or any N", n)
        run.click()
        expect(page.get_by_text(re.compile(r"Run finished: 2 of 2"))).to_be_visible(
            timeout=RUN_S)
        figures.append(_compile_figure_when(
            page, lambda labels, ns, n=n: len(labels) == 2 and n in ns))
    (_, labels, ns), _, (_, last_labels, last_ns) = figures
    assert labels == ["dict", "array"] and ns == [2]
    assert last_ns == [2, 3, 4]
    # Three points per line now: the legend gives each its fitted exponent.
    assert [label.split(" k=")[0] for label in last_labels] == ["dict", "array"]
    assert all(" k=" in label for label in last_labels), last_labels
    page.wait_for_timeout(1000)
    _shot(page, "updated.png")
    assert errors == []


def test_bad_input_shows_an_alert_and_the_page_stays_alive(page, served_app):
    from playwright.sync_api import expect  # noqa: PLC0415

    _open(page, served_app)
    _set_number(page, "or any N", 20000)
    page.get_by_role("button", name="Run", exact=True).click()
    alert = page.locator(".alert", has_text="Bad input")
    expect(alert).to_be_visible()
    expect(alert).to_contain_text("n_states")
    # Said where the eye is too: under the Run button, and in the status line.
    expect(page.locator(".input-error")).to_contain_text("n_states")
    expect(page.get_by_text(re.compile(r"Run not started: "))).to_be_visible()
    _shot(page, "bad-input.png")
    page.get_by_role("button", name="Dismiss").click()
    expect(alert).to_be_hidden()


def test_cancel_stops_a_long_run(page, served_app):
    from playwright.sync_api import expect  # noqa: PLC0415

    _open(page, served_app)
    _set_number(page, "or any N", 3000)
    page.locator("#sidebar").get_by_role("button", name="grad", exact=True).click()
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.get_by_text(re.compile(r"dict N=3000 .* stage"))).to_be_visible(timeout=RUN_S)
    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_text(re.compile(r"Run cancelled"))).to_be_visible(timeout=30_000)
    expect(page.locator(".alert", has_text="Cancelled")).to_be_visible()
    expect(page.locator(".tabulator-row", has_text="cancelled").first).to_be_visible()
    _shot(page, "cancelled.png")


def test_two_pages_at_once_both_get_their_results(browser, served_app):
    from playwright.sync_api import expect  # noqa: PLC0415

    pages = [browser.new_page(viewport={"width": 1600, "height": 2200}) for _ in range(2)]
    try:
        for page, target in zip(pages, ("loss", "grad")):
            _open(page, served_app)
            _set_number(page, "or any N", 2)
            _set_number(page, "Horizon", 5)
            page.locator("#sidebar").get_by_role("button", name=target, exact=True).click()
        for page in pages:
            page.get_by_role("button", name="Run", exact=True).click()
        for i, page in enumerate(pages):
            expect(page.get_by_text(re.compile(r"Run finished: 2 of 2"))).to_be_visible(
                timeout=RUN_S)
            rows = page.locator(".tabulator-row", has_text="measured")
            expect(rows.first).to_be_visible()
            _shot(page, f"two-pages-{i}.png")
    finally:
        for page in pages:
            page.close()


_FIGURES_JS = """() => {
    // Title and number of renderers of each figure drawn on the page now.
    const out = [];
    for (const view of Bokeh.index.all_views()) {
        const m = view.model;
        if (m.type !== 'Figure' && m.type !== 'Plot') continue;
        if (!view.el.isConnected) continue;
        out.push([m.title ? m.title.text : '', m.renderers.length]);
    }
    return out;
}"""


def test_the_next_page_shows_the_same_plots(browser, served_app):
    """Pages share their plots' HoloViews objects (the plot cache), each rendering its own
    figures: the next page shows the same figures, lines and points."""
    shown, errors = [], []
    for _ in range(2):
        page = browser.new_page(viewport={"width": 1600, "height": 2200})
        errors += _console_errors(page)
        _open(page, served_app)
        page.wait_for_timeout(1500)
        shown.append((sorted(_plotted(page)), sorted(page.evaluate(_FIGURES_JS))))
        page.close()
    assert len(shown[0][1]) == 4 and shown[0][0], shown[0]
    assert shown[1] == shown[0]
    assert errors == []


_FONT_SIZES_JS = """() => {
    // Computed font sizes (px) of what a room reads: a widget label, the status line, a tab
    // title, a table cell, a menu, a button, a chosen tag. Found through the shadow roots
    // Panel and Bokeh render into.
    const all = [];
    const walk = (root) => {
        for (const el of root.querySelectorAll('*')) {
            all.push(el);
            if (el.shadowRoot) walk(el.shadowRoot);
        }
    };
    walk(document);
    const size = (test) => {
        const el = all.find(test);
        return el ? parseFloat(getComputedStyle(el).fontSize) : null;
    };
    const text = (el) => (el.textContent || '').trim();
    return {
        label: size(el => el.tagName === 'LABEL' && text(el).startsWith('Horizon')),
        status: size(el => el.tagName === 'P' && text(el).startsWith('Status:')),
        tab: size(el => el.classList.contains('bk-tab') && text(el) === 'Programs'),
        cell: size(el => el.classList.contains('tabulator-cell')),
        input: size(el => el.tagName === 'SELECT' && el.classList.contains('bk-input')),
        button: size(el => el.tagName === 'BUTTON' && text(el) === 'Run'),
        tag: size(el => el.classList.contains('choices__item') && text(el).startsWith('state_')),
    };
}"""

_PLOT_FONTS_JS = """() => {
    // The title and tick-label font sizes (pt) of the figures drawn on the page now (their
    // views: a redrawn plot's old model may linger in the document).
    const out = [];
    for (const view of Bokeh.index.all_views()) {
        const m = view.model;
        if (m.type !== 'Figure' && m.type !== 'Plot') continue;
        if (!view.el.isConnected || !(m.title && m.title.text)) continue;
        const axis = (m.below || []).find(a => a.major_label_text_font_size);
        out.push([m.title.text, parseFloat(m.title.text_font_size),
                  axis ? parseFloat(axis.major_label_text_font_size) : null]);
    }
    return out;
}"""


def _presenter_checkbox(page):
    return page.locator("#sidebar .presenter-toggle input[type=checkbox]")


def test_presenter_mode_enlarges_the_page_and_the_plots(page, served_app):
    from playwright.sync_api import expect  # noqa: PLC0415

    errors = _console_errors(page)
    _open(page, served_app)
    page.wait_for_timeout(1000)
    normal = page.evaluate(_FONT_SIZES_JS)
    assert all(normal.values()), normal  # every element measured was found
    normal_plots = page.evaluate(_PLOT_FONTS_JS)
    assert len(normal_plots) >= 4, normal_plots
    _shot(page, "presenter-off.png")

    _presenter_checkbox(page).check()
    deadline = time.monotonic() + 30  # the four plots are drawn again with larger fonts
    while True:
        plots = page.evaluate(_PLOT_FONTS_JS)
        if len(plots) >= 4 and min(t for _, t, _ in plots) > max(t for _, t, _ in normal_plots):
            break
        assert time.monotonic() < deadline, (normal_plots, plots)
        page.wait_for_timeout(200)
    assert all(tick > max(t for _, _, t in normal_plots if t) for _, _, tick in plots if tick)
    larger = page.evaluate(_FONT_SIZES_JS)
    for name, size in normal.items():
        assert larger[name] >= 1.2 * size, (name, normal, larger)
    # The address says so, so a teacher can bookmark it.
    expect(page).to_have_url(re.compile(r"[?&]presenter=true"))
    page.wait_for_timeout(1000)
    _shot(page, "presenter-on.png")
    # The sidebar folds away (the header's button) to give the plots the projector's width.
    page.locator("#sidebar-button").click()
    expect(page.locator("#sidebar")).to_be_hidden()
    page.wait_for_timeout(1000)
    _shot(page, "presenter-sidebar-folded.png")
    page.locator("#sidebar-button").click()
    expect(_presenter_checkbox(page)).to_be_visible()

    # The bookmark opens the page in presenter mode (a value that is not a yes/no is ignored:
    # test_presenter.py's query_flag cases; each page opened here costs seconds of CI).
    _open(page, served_app + "?presenter=true")
    expect(_presenter_checkbox(page)).to_be_checked()
    page.wait_for_timeout(500)
    assert page.evaluate(_FONT_SIZES_JS)["label"] >= 1.2 * normal["label"]
    # Off again: the usual sizes and the address without the flag.
    _presenter_checkbox(page).uncheck()
    expect(page).not_to_have_url(re.compile("presenter"))
    deadline = time.monotonic() + 10
    while page.evaluate(_FONT_SIZES_JS)["label"] != normal["label"]:
        assert time.monotonic() < deadline
        page.wait_for_timeout(200)
    assert errors == []


_PROGRAMS_GEOMETRY_JS = """() => {
    // Where the Programs tab's parts are drawn (viewport pixels: left, top, width, height).
    const all = [];
    const walk = (root) => {
        for (const el of root.querySelectorAll('*')) {
            all.push(el);
            if (el.shadowRoot) walk(el.shadowRoot);
        }
    };
    walk(document);
    const shown = (el) => {
        const r = el.getBoundingClientRect();
        return r.width > 0 && r.height > 0;
    };
    const rect = (el) => {
        if (!el) return null;
        const r = el.getBoundingClientRect();
        return [r.left, r.top, r.width, r.height];
    };
    const text = (el) => (el.textContent || '').trim();
    const blameTab = all.find(el => el.classList.contains('bk-tab')
                                    && text(el) === 'Equation blame');
    const table = all.find(el => el.classList.contains('tabulator') && shown(el)
                                 && text(el).includes('primitives'));
    const caption = all.find(el => el.tagName === 'P' && text(el).startsWith('at the problem'));
    return {
        blameTab: rect(blameTab), table: rect(table),
        rows: table ? table.querySelectorAll('.tabulator-row').length : 0,
        button: rect(all.find(el => el.tagName === 'BUTTON'
                                    && text(el).startsWith('Show programs'))),
        title: rect(all.find(el => el.tagName === 'P' && text(el).startsWith('Programs of:'))),
        columns: all.filter(el => el.tagName === 'TH' && text(el).startsWith('only in')
                                  && shown(el)).map(rect),
        sideBySide: rect(all.find(el => el.tagName === 'TABLE'
                                        && el.classList.contains('side-by-side'))),
        caption: rect(caption),
        captionCut: caption ? caption.scrollWidth > caption.clientWidth : null,
        viewport: [window.innerWidth, window.innerHeight],
    };
}"""


def _programs_fit(geometry: dict, mode: str) -> None:
    """The Programs tab's layout at 1280x800 (the issue 'Trust under real use', item 12)."""
    g = geometry
    tab, table = g["blameTab"], g["table"]
    assert tab and table and g["rows"] > 0, (mode, g)
    # The table starts under its tab (it was about 430 px lower: an empty screen at 1280x800).
    assert 0 <= table[1] - (tab[1] + tab[3]) < 60, (mode, g)
    # The button's label does not run under the title beside it.
    button, title = g["button"], g["title"]
    beside = button[0] + button[2] <= title[0] + 1
    assert beside or title[1] >= button[1] + button[3] - 1, (mode, g)
    # Side by side: two columns of about half the table each, neither a sliver.
    assert len(g["columns"]) == 2, (mode, g)
    assert all(c[2] >= 0.4 * g["sideBySide"][2] for c in g["columns"]), (mode, g)
    # The compare caption is whole, inside the page.
    caption = g["caption"]
    assert not g["captionCut"] and caption[0] + caption[2] <= g["viewport"][0], (mode, g)


def test_the_programs_tab_fits_1280_by_800_in_both_modes(page, served_app):
    """Equation blame right under its tab, the programs row and the compare row whole, the
    side-by-side columns half the width each: at 1280x800, normal and in presenter mode."""
    from playwright.sync_api import expect  # noqa: PLC0415

    page.set_viewport_size({"width": 1280, "height": 800})
    errors = _console_errors(page)
    _open(page, served_app)
    _set_number(page, "or any N", 2)
    _set_number(page, "Horizon", 3)
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.get_by_text(re.compile(r"Run finished: 2 of 2"))).to_be_visible(timeout=RUN_S)
    show = page.get_by_role("button", name="Show programs of the selected row")
    # A click that lands as the run's second row reaches the table can lose its selection
    # (seen once in CI: the button stayed disabled); the row is clicked again then.
    for attempt in range(3):
        page.locator(".tabulator-row", has_text="measured").first.click()
        page.locator(".bk-tab", has_text="Programs").click()
        try:
            expect(show).to_be_enabled(timeout=10_000)
            break
        except AssertionError:
            if attempt == 2:
                raise
            page.locator(".bk-tab", has_text="Results").click()
    show.click()
    expect(page.get_by_text(re.compile(r"Programs of: decay/"))).to_be_visible(timeout=RUN_S)
    page.locator(".bk-tab", has_text="Equation blame").click()
    page.get_by_role("button", name="Compare", exact=True).click()
    expect(page.get_by_text(re.compile(r"Verdict"))).to_be_visible(timeout=RUN_S)
    for mode in ("normal", "presenter"):
        if mode == "presenter":
            _presenter_checkbox(page).check()
            expect(page).to_have_url(re.compile(r"[?&]presenter=true"))
        page.locator(".bk-tab", has_text="Equation blame").scroll_into_view_if_needed()
        page.wait_for_timeout(1500)  # the page has laid itself out again
        # The blame table draws its rows after the table itself (a fresh-clone run measured
        # the layout with the table drawn and its rows not yet): wait for them, up to 30 s.
        geometry, deadline = page.evaluate(_PROGRAMS_GEOMETRY_JS), time.monotonic() + 30
        while geometry["rows"] == 0 and time.monotonic() < deadline:
            page.wait_for_timeout(250)
            geometry = page.evaluate(_PROGRAMS_GEOMETRY_JS)
        _shot(page, f"programs-{mode}.png")
        _programs_fit(geometry, mode)
    assert errors == []
