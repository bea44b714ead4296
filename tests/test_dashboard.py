"""The dashboard view without a browser: it builds around its model, lazily, and shows program
text as text. (What only a page can show is in test_dashboard_browser.py.)"""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_the_view_builds_without_a_server(tmp_path, executor):
    import panel as pn

    import explorer

    view = explorer.dashboard(store=tmp_path / "r.sqlite", executor=executor, n_states=10)
    try:
        assert isinstance(view, explorer.Dashboard)
        assert isinstance(view.model, explorer.ExplorerModel)
        assert view.model.controls.n_states == 10
        layout = view.__panel__()
        assert isinstance(layout, pn.Row)  # a template only when served
        layout.get_root()
        # The Programs tab is built the first time it is opened.
        assert not view.programs.built
        view.tabs.active = 1
        assert view.programs.built
        assert not view.runs.built
        view.tabs.active = 2
        assert view.runs.built
    finally:
        view.model.close()


@pytest.mark.slow
def test_a_served_page_is_the_page_panel_builds_with_its_models_worked_out_once(
        tmp_path, executor, monkeypatch):
    """The served page is built under Panel's ``hold(freeze=True)`` (holoviz/panel#8417), which
    keeps Bokeh from working out the document's set of models again after each step of the
    build: the document must be the one Panel builds without it, model by model, and every
    model on the page must know its document. Fails if the hold stops deferring that work (the
    count) or changes the page (the comparison)."""
    import bokeh.document.models as bokeh_models
    from bokeh.document import Document

    import explorer
    from explorer.testing import PageTemplate as _PageTemplate

    recomputed = []
    plain_recompute = bokeh_models.DocumentModelManager.recompute

    def counting(self):
        recomputed.append(self)
        return plain_recompute(self)

    monkeypatch.setattr(bokeh_models.DocumentModelManager, "recompute", counting)
    built = {}
    for frozen in (True, False):
        view = explorer.dashboard(store=tmp_path / "r.sqlite", executor=executor, n_states=10)
        try:
            template, doc = view._page(), Document()
            recomputed.clear()
            if frozen:
                template.server_doc(doc)
            else:
                super(_PageTemplate, template).server_doc(doc)
            built[frozen] = doc, len(recomputed)
            reachable = set().union(*(root.references() for root in doc.roots))
            assert set(doc.models) == reachable
            assert all(model.document is doc for model in reachable)
        finally:
            view.model.close()
    (frozen_doc, frozen_count), (plain_doc, plain_count) = built[True], built[False]
    assert frozen_count == 1 < plain_count
    assert _document_json(frozen_doc) == _document_json(plain_doc)


def test_the_served_page_passes_bokehs_checks(tmp_path, executor):
    """Every model of the served page passes Bokeh's integrity checks with no error and no
    warning (Bokeh runs them on each served page and logs what it finds)."""
    from bokeh.core.validation.check import check_integrity
    from bokeh.document import Document

    import explorer

    view = explorer.dashboard(store=tmp_path / "r.sqlite", executor=executor, n_states=10)
    try:
        doc = Document()
        view._page().server_doc(doc)
        for root in doc.roots:
            issues = check_integrity(root.references())
            assert not issues.error and not issues.warning, (root, issues)
    finally:
        view.model.close()


def test_the_served_page_asks_no_font_host(tmp_path, executor):
    """explorer._src.compat.template_without_web_fonts: Panel's VanillaTemplate still keeps its
    web font's address where the page's template drops it (fails when Panel moves it: then the
    fallback, the template as it is, would ask Google for Lato again), and the served page's
    HTML names no host at all."""
    import re

    import panel as pn
    from bokeh.document import Document

    import explorer
    from explorer._src.compat import template_without_web_fonts

    assert "fonts.googleapis.com" in str(pn.template.VanillaTemplate._resources["css"])
    plain = template_without_web_fonts(pn.template.VanillaTemplate)
    assert issubclass(plain, pn.template.VanillaTemplate) and plain._resources["css"] == {}

    class NoResources:
        pass

    assert template_without_web_fonts(NoResources) is NoResources  # the public fallback

    view = explorer.dashboard(store=tmp_path / "r.sqlite", executor=executor, n_states=10)
    try:
        doc = Document()
        view._page().server_doc(doc)
        resources = str(doc._template_variables.get("template_resources"))
        assert not re.search(r"https?://", resources), resources
    finally:
        view.model.close()


@pytest.mark.slow
def test_pages_whose_sessions_ended_leave_nothing_behind(tmp_path, executor):
    """A served page's objects go when its session ends: a server that has served and ended
    several sessions holds none of their Dashboards (each kept its whole page, about 1.7 MiB,
    for good: Panel's process-wide registry of JavaScript callbacks held the Run and Sweep
    buttons' through their arguments, and the worker's shared list-of-backends answer held the
    first page's controls). In this process, through the server a user runs, with pages
    requested over HTTP (no browser: their sessions end after the unused-session lifetime)."""
    import gc
    import time
    import urllib.request
    import weakref

    import panel as pn
    from _support import free_port

    import explorer

    made: list[weakref.ref] = []
    ended: list[str] = []

    def page():
        view = explorer.dashboard(store=tmp_path / "r.sqlite", executor=executor)
        made.append(weakref.ref(view))
        pn.state.on_session_destroyed(lambda context: ended.append(context.id))
        return view.__panel__()

    port = free_port()
    server = pn.serve({"app": page}, port=port, address="127.0.0.1", show=False,
                      threaded=True, unused_session_lifetime_milliseconds=500,
                      check_unused_sessions_milliseconds=250,
                      websocket_origin=[f"127.0.0.1:{port}"])
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/app", timeout=60) as r:
                    r.read()
                break
            except OSError:
                assert time.monotonic() < deadline, "the server did not answer"
                time.sleep(0.2)
        for _ in range(2):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/app", timeout=60) as r:
                assert b"PyTree Compile Explorer" in r.read()
        assert len(made) == 3
        # The server ends unused sessions on its own clock (on a loaded CI host the last one
        # ended 27 s after the first, with this test's collections taking the GIL 1.5 s at a
        # time): wait for that without collecting, then ask what is left of the pages.
        deadline = time.monotonic() + 120
        while len(ended) < 3:
            assert time.monotonic() < deadline, f"only {len(ended)} of 3 sessions ended in 120 s"
            time.sleep(0.5)
        deadline = time.monotonic() + 15
        while any(ref() is not None for ref in made):
            assert time.monotonic() < deadline, (
                f"{sum(ref() is not None for ref in made)} of 3 pages still in memory after "
                "their sessions ended")
            gc.collect()
            time.sleep(1)
    finally:
        server.stop()


def test_program_text_is_escaped_never_markup():
    from explorer.testing import program_html

    html = program_html('<script>alert("x")</script> & <b>')
    assert "<script>" not in html and "<b>" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;b&gt;" in html
    diff = program_html("--- a\n+++ b\n-old <i>\n+new\n same", diff=True)
    assert diff.count("<span") == 2 and "&lt;i&gt;" in diff and "<i>" not in diff
    assert program_html("") == ""


def test_side_by_side_and_verdict_lead_with_what_differs():
    from explorer.testing import ProgramsSection, side_by_side_html

    comparison = {"labels": ("dict", "<array>"), "distinct": (("a = mul <b>", ""), ("", "c")),
                  "op_summary": "dict: 6 × mul\narray: 1 × mul", "title": "t", "verdict": "v",
                  "same_hlo": False}
    table = side_by_side_html(comparison)
    assert table.count("<tr>") == 3  # a header and one row per pair
    assert "only in &lt;array&gt;" in table and "mul &lt;b&gt;" in table and "<b>" not in table
    assert "No jaxpr line differs" in side_by_side_html({**comparison, "distinct": ()})
    assert side_by_side_html({}) == ""
    text = ProgramsSection._verdict_text(comparison)
    assert text.index("Operations that differ") < text.index("`dict: 6 × mul`")
    assert "Operations" not in ProgramsSection._verdict_text({**comparison, "op_summary": ""})


def test_a_page_closed_mid_update_is_one_quiet_line_and_other_errors_still_reach_the_log(caplog):
    """tornado reports a tab closed while the server sends it updates as a never-retrieved
    WebSocketClosedError, two tracebacks in the server log (seen under load in the five-sessions
    test); the server's loop turns that into one quiet line and passes every other error on."""
    import asyncio  # noqa: PLC0415
    import logging  # noqa: PLC0415

    from tornado.websocket import WebSocketClosedError  # noqa: PLC0415

    from explorer.testing import quiet_closed_pages as _quiet_closed_pages  # noqa: PLC0415

    loop = asyncio.new_event_loop()
    passed_on = []
    loop.set_exception_handler(lambda loop, context: passed_on.append(context))
    try:
        _quiet_closed_pages(loop)
        _quiet_closed_pages(loop)  # once per loop: the previous handler is not wrapped twice
        with caplog.at_level(logging.INFO):
            loop.call_exception_handler({"message": "Task exception was never retrieved",
                                         "exception": WebSocketClosedError()})
        assert passed_on == []
        assert [r.levelno for r in caplog.records] == [logging.INFO]
        assert "\n" not in caplog.records[0].getMessage()
        other = {"message": "boom", "exception": ZeroDivisionError()}
        loop.call_exception_handler(other)
        assert passed_on == [other]
    finally:
        loop.close()


def _document_json(doc) -> str:
    """``doc``'s models as one canonical text: every property's value (set or default, so
    a value set to its default equals the default), models numbered in the order they are
    first met, arrays by content, what is new in each build left out: Panel's generated names
    (``Row01078``), model ids in template markup (``__ref:p1766``), template areas' and
    links' ``id()``s, uuids."""
    import json
    import re
    import warnings

    import numpy as np
    from bokeh.model import Model

    seen: dict[int, int] = {}

    def model(m):
        if id(m) in seen:
            return {"ref": seen[id(m)]}
        seen[id(m)] = len(seen)
        props = {}
        for name in sorted(m.properties()):
            if name == "tags" and type(m).__name__ == "CustomJS":
                props[name] = "LINK IDS"  # Panel's links tag their callbacks with id()s
                continue
            try:
                props[name] = plain(getattr(m, name))
            except Exception as err:  # noqa: BLE001 - a property with no value yet
                props[name] = f"<{type(err).__name__}>"
        return {"type": type(m).__name__, "props": props}

    def plain(x):
        if isinstance(x, Model):
            return model(x)
        if isinstance(x, np.ndarray) and x.dtype == object:
            return ["array", "object", list(x.shape), [plain(v) for v in x.tolist()]]
        if isinstance(x, np.ndarray):
            return ["array", str(x.dtype), list(x.shape), np.ascontiguousarray(x).tobytes().hex()]
        if isinstance(x, dict):
            return {str(k): plain(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        if isinstance(x, float) and x != x:
            return "nan"
        if isinstance(x, str) and re.fullmatch(r"[A-Za-z]+\d{5}", x):
            return "NAME"
        if isinstance(x, str) and re.fullmatch(r"__ref:p\d+", x):  # a model's id, per build
            return "MODEL ID"
        if isinstance(x, str) and re.fullmatch(r"[a-z]+-\d{9,}", x):  # a template area's id()
            return x.split("-")[0] + "-ID"
        if isinstance(x, str) and re.fullmatch(r"[0-9a-f]{32}", x):  # a uuid
            return "UUID"
        if isinstance(x, (str, int, float, bool)) or x is None:
            return x
        return repr(x)

    with warnings.catch_warnings():  # reading deprecated properties says so
        warnings.simplefilter("ignore")
        return json.dumps([model(root) for root in doc.roots], sort_keys=True)


def _figure_json(figure) -> dict:
    """A Bokeh figure's JSON with its model ids numbered in order of appearance: two drawings
    of one plot compare equal, two different plots do not."""
    import json
    import re

    from bokeh.document import Document
    from bokeh.embed import json_item

    if figure.document is not None:
        figure.document.remove_root(figure) if figure in figure.document.roots else None
    Document().add_root(figure)
    text = json.dumps(json_item(figure), sort_keys=True)
    ids: dict[str, str] = {}
    text = re.sub(r'"(p\d+)"', lambda m: '"%s"' % ids.setdefault(m.group(1), f"m{len(ids)}"),
                  text)
    return json.loads(text)


def _holoviews_pane_figure(plot):
    """The figure ``pn.pane.HoloViews`` puts in a page for ``plot``, the way the page showed
    its plots before it drew them itself (``PLOT_LAYOUT``'s sizing and height)."""
    import panel as pn
    from bokeh.document import Document

    from explorer.testing import PLOT_LAYOUT

    doc = Document()
    root = pn.pane.HoloViews(plot, sizing_mode=PLOT_LAYOUT["sizing_mode"],
                             min_height=PLOT_LAYOUT["min_height"],
                             linked_axes=False).get_root(doc)
    figure = next(m for m in root.references() if type(m).__name__ == "figure")
    doc.remove_root(root)
    root.children = []
    return figure


def test_a_figure_drawn_ahead_is_the_figure_the_holoviews_pane_draws(tmp_path, executor):
    """Each of the page's four plots, drawn ahead in a thread, is the figure Panel's HoloViews
    pane draws for it, model by model, in both modes of the page; each goes to one page. No
    drawing hooks its plot to Bokeh's current document (HoloViews does unless given one of its
    own: the process's document would keep every plot drawn)."""
    from bokeh.io import curdoc

    import explorer
    from explorer.testing import FIGURES_AHEAD, PLOT_LAYOUT

    hooked = len(curdoc().session_destroyed_callbacks)
    view = explorer.dashboard(store=tmp_path / "r.sqlite", executor=executor, n_states=10)
    try:
        for presenter in (False, True):
            view.model.view.presenter = presenter
            plots = view.model.view.plots()
            FIGURES_AHEAD.clear()
            FIGURES_AHEAD.prepare(plots, PLOT_LAYOUT)
            FIGURES_AHEAD.join(120)
            assert len(FIGURES_AHEAD.drawn()) == 4
            for plot in plots:
                other_layout = {**PLOT_LAYOUT, "min_height": PLOT_LAYOUT["min_height"] + 1}
                assert FIGURES_AHEAD.take(plot, other_layout) is None  # drawn for another page
            FIGURES_AHEAD.prepare(plots, PLOT_LAYOUT)
            FIGURES_AHEAD.join(120)
            figures = [FIGURES_AHEAD.take(plot, PLOT_LAYOUT) for plot in plots]
            assert all(figure is not None for figure in figures)
            assert all(FIGURES_AHEAD.take(plot, PLOT_LAYOUT) is None for plot in plots)  # once
            expected = [_figure_json(_holoviews_pane_figure(plot)) for plot in plots]
            assert [_figure_json(figure) for figure in figures] == expected
            # What the page shows (drawn there: it is not a served page) is the same figure.
            assert [_figure_json(pane.object) for pane in view.plots.panes] == expected
            assert expected[0] != expected[1]  # the comparison tells plots apart
        assert len(curdoc().session_destroyed_callbacks) == hooked
    finally:
        FIGURES_AHEAD.clear()
        view.model.close()


def test_a_served_page_shows_the_figures_drawn_ahead_for_it_then_draws_the_next_pages(
        tmp_path, executor):
    """A served page's plots are the figures drawn ahead for its plots, when there are any;
    once it has drawn (at once outside a server) the next page's are drawn, new ones. A page
    that is not served draws its own. A change of view draws the plot again, as the
    HoloViews pane would."""
    import explorer
    from explorer.testing import FIGURES_AHEAD, PLOT_LAYOUT, PlotsSection

    view = explorer.dashboard(store=tmp_path / "r.sqlite", executor=executor, n_states=10)
    try:
        FIGURES_AHEAD.clear()
        FIGURES_AHEAD.prepare(view.model.view.plots(), PLOT_LAYOUT)
        FIGURES_AHEAD.join(120)
        ahead = FIGURES_AHEAD.drawn()
        assert len(ahead) == 4

        own = PlotsSection(view.model)  # not served: draws its own, leaves those drawn ahead
        assert not {id(pane.object) for pane in own.panes} & {id(f) for f in ahead}
        assert len(FIGURES_AHEAD.drawn()) == 4

        served = PlotsSection(view.model, served=True)
        shown = [pane.object for pane in served.panes]
        assert sorted(map(id, shown)) == sorted(map(id, ahead))
        FIGURES_AHEAD.join(120)  # the next page's, drawn once this one has drawn
        following = FIGURES_AHEAD.drawn()
        assert len(following) == 4 and not {id(f) for f in following} & {id(f) for f in shown}

        view.model.view.stage = "all stages"
        redrawn = served.panes[0].object
        assert redrawn is not shown[0]
        assert _figure_json(redrawn) == _figure_json(
            _holoviews_pane_figure(view.model.view.compile_plot()))
        assert _figure_json(redrawn) != _figure_json(
            _holoviews_pane_figure(view.model.view.size_plot()))
    finally:
        FIGURES_AHEAD.clear()
        view.model.close()


def test_a_plot_that_fails_to_draw_says_why_and_the_page_goes_on(tmp_path, executor,
                                                                 monkeypatch):
    """A figure HoloViews cannot draw is a placeholder in its place and an alert; the other
    plots are drawn."""
    import holoviews as hv

    import explorer

    view = explorer.dashboard(store=tmp_path / "r.sqlite", executor=executor, n_states=10)
    try:
        size_plot = view.model.view.size_plot()
        renderer = type(hv.renderer("bokeh"))
        plain_get_plot = renderer.__dict__["get_plot"]

        def failing(self, obj, *args, **kwargs):
            if obj is size_plot:
                raise RuntimeError("no such glyph")
            return plain_get_plot.__get__(self, type(self))(obj, *args, **kwargs)

        monkeypatch.setattr(renderer, "get_plot", failing)
        from explorer.testing import PlotsSection

        section = PlotsSection(view.model)
        assert "Could not draw a plot: RuntimeError: no such glyph" in view.model.session.alert
        titles = [pane.object.title.text for pane in section.panes]
        assert titles[1] == "Plot" and "Compile time" in titles[0], titles
    finally:
        view.model.close()


def test_a_plot_is_built_under_the_lock_its_figures_are_drawn_under():
    """Building a HoloViews object writes its options into HoloViews' process-wide tables,
    which drawing a figure reads; a page builds its plots on the server's loop while the next
    page's figures are drawn in a thread (``FIGURES_AHEAD``). So building holds the lock that
    drawing holds: here, while a plot is built, another thread cannot take it."""
    import threading

    import holoviews as hv

    from explorer.testing import PLOT_CACHE, plotting

    seen = []

    def try_to_take():
        taken = plotting().acquire(timeout=0.5)
        if taken:
            plotting().release()
        seen.append(taken)

    def draw():
        other = threading.Thread(target=try_to_take)
        other.start()
        other.join()
        return hv.Curve([1, 2, 3])

    key = ("a test's plot", object())
    curve = PLOT_CACHE.get(key, draw)
    assert seen == [False]  # the lock was held while the plot was built
    assert PLOT_CACHE.get(key, lambda: None) is curve  # and the plot was kept

    def take_and_let_go():
        with plotting():
            seen.append("taken")

    other = threading.Thread(target=take_and_let_go)
    other.start()
    other.join(60)
    assert seen == [False, "taken"]  # and let go after it


@pytest.mark.slow
def test_the_inspection_tabs_draw_their_plots_one_at_a_time_with_the_figures_ahead(
        tmp_path, executor):
    """The "Compare runs" and "Your program" tabs draw their figures as the four plots do, one
    drawing at a time in the process. HoloViews switches Bokeh's property validation off for the
    whole process while it updates a plot's data (``with validate(False)`` in
    ``holoviews/plotting/bokeh/plot.py``); a figure built meanwhile in another thread keeps its
    title as a ``str``, and HoloViews then fails on it ("'str' object has no attribute
    'update'"). A CI run opened "Your program" while the server drew the next page's figures
    ahead, and the tab stayed empty. Here a figure drawn ahead holds validation off for a
    second, as that update does, while both tabs are opened."""
    import threading
    import time

    import holoviews as hv
    from bokeh.core.property.validation import validate
    from bokeh.models import Title

    import explorer
    from explorer.testing import FIGURES_AHEAD, PLOT_LAYOUT

    inside = threading.Event()

    def validation_off_a_while(plot, element):
        with validate(False):
            inside.set()
            time.sleep(1.0)

    view = explorer.dashboard(store=tmp_path / "r.sqlite", executor=executor)
    try:
        view.__panel__().get_root()
        for tab in (3, 2):
            inside.clear()
            FIGURES_AHEAD.clear()
            ahead = hv.Curve([1, 2, 3]).opts(hooks=[validation_off_a_while], backend="bokeh")
            assert FIGURES_AHEAD.prepare([ahead], PLOT_LAYOUT) is not None
            assert inside.wait(60)
            view.tabs.active = tab  # built now, while the figure ahead is being drawn
            FIGURES_AHEAD.join(60)
        assert view.watched.built and view.runs.built
        figures = [m for section in (view.watched, view.runs)
                   for m in section.__panel__().get_root().select({"type": Title})]
        assert figures  # each tab's plot has its title, as a Bokeh Title
    finally:
        FIGURES_AHEAD.clear()
        view.model.close()
