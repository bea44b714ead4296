"""The dashboard view without a browser: it builds around its model, lazily, and shows program
text as text. (What only a page can show is in test_dashboard_browser.py.)"""

from __future__ import annotations


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


def test_a_served_page_is_the_page_panel_builds_with_its_models_worked_out_once(
        tmp_path, executor, monkeypatch):
    """The served page's template keeps Bokeh from working out the document's set of models
    again after each step of the build (explorer._src.dashboard.page._PageTemplate.server_doc): the
    document must be the one Panel builds without that, model by model, and every model on
    the page must know its document."""
    import bokeh.document.models as bokeh_models
    from bokeh.document import Document

    import explorer
    from explorer._src.dashboard.page import _FREEZE_WHILE_BUILDING, _PageTemplate

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
    if _FREEZE_WHILE_BUILDING:
        assert frozen_count == 1 < plain_count
    else:  # Panel needs the models to know their document while it builds: built as Panel does
        assert frozen_count == plain_count
    assert _document_json(frozen_doc) == _document_json(plain_doc)


def test_the_served_page_passes_bokehs_checks(tmp_path, executor, monkeypatch):
    """A served page skips Bokeh's per-page check of its models
    (explorer._src.dashboard.page._checked_in_tests) because this test makes it: every model of the
    page passes Bokeh's integrity checks with no error and no warning. And the skip is that
    page's alone: another document is still checked."""
    import bokeh.document.document as bokeh_document
    from bokeh.core.validation.check import check_integrity
    from bokeh.document import Document
    from bokeh.models import Div

    import explorer

    view = explorer.dashboard(store=tmp_path / "r.sqlite", executor=executor, n_states=10)
    try:
        doc = Document()
        view._page().server_doc(doc)
        for root in doc.roots:
            issues = check_integrity(root.references())
            assert not issues.error and not issues.warning, (root, issues)
        checked = []
        monkeypatch.setattr(bokeh_document, "check_integrity",
                            lambda refs: checked.append(refs) or check_integrity(refs))
        doc.validate()
        assert checked == []
        other = Document()
        other.add_root(Div(text="another page"))
        other.validate()
        assert len(checked) == 1
    finally:
        view.model.close()


def test_program_text_is_escaped_never_markup():
    from explorer._src.dashboard.page import program_html

    html = program_html('<script>alert("x")</script> & <b>')
    assert "<script>" not in html and "<b>" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;b&gt;" in html
    diff = program_html("--- a\n+++ b\n-old <i>\n+new\n same", diff=True)
    assert diff.count("<span") == 2 and "&lt;i&gt;" in diff and "<i>" not in diff
    assert program_html("") == ""


def test_side_by_side_and_verdict_lead_with_what_differs():
    from explorer._src.dashboard.sections import ProgramsSection, side_by_side_html

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

    from explorer._src.dashboard.page import _quiet_closed_pages  # noqa: PLC0415

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


_PANE_OPTIONS = dict(sizing_mode="stretch_width", min_height=340, linked_axes=False)


def _plot_pane_page(obj):
    from bokeh.document import Document

    from explorer._src.dashboard.sections import PlotPane

    doc = Document()
    pane = PlotPane(obj, **_PANE_OPTIONS)
    doc.add_root(pane.get_root(doc))  # a served page's pane: no comm
    return doc, pane


def _hooked(doc, plot) -> bool:
    """Whether ``doc`` would clean ``plot`` (or one of its subplots) up when its session ends."""
    mine = {id(p) for p in plot.traverse(lambda p: p)}
    return any(id(getattr(cb, "__self__", None)) in mine for cb in doc.session_destroyed_callbacks)


def test_a_plot_rendered_ahead_is_the_plot_the_next_page_would_render():
    """A page renders its plots again, off the page, for the next page showing the same plot
    object (explorer._src.dashboard.sections.PlotPane): that page's document must be the one it
    would have built itself, and the rendering is used once, by one page."""
    from explorer._src import plots as _plots
    from explorer._src.store.example import load_example
    from explorer._src.dashboard.plotcache import RENDERED_AHEAD

    RENDERED_AHEAD.clear()
    frame, rollouts = load_example()
    first = frame.iloc[0]
    filters = dict(problem=first["problem"], horizon=int(first["horizon"]))
    plots = [_plots.compile_time_plot(frame, **filters), _plots.program_size_plot(frame, **filters),
             _plots.rollout_plot(_plots.rollout_frame(
                 {str(k): v for k, v in list(rollouts.items())[:2]})),
             _plots.placeholder("Runtime", "nothing yet")]
    try:
        for obj in plots:
            rendered_here, pane = _plot_pane_page(obj)  # as without any rendering ahead
            plot_here = pane._plots[next(iter(pane._models))][0]
            earlier, pane = _plot_pane_page(obj)  # a page that has drawn...
            assert pane.render_ahead(earlier)  # ...renders the plot for the next one
            assert not pane.render_ahead(earlier)  # one waits already
            waiting = RENDERED_AHEAD.take(obj, pane._ahead_key(earlier))
            assert waiting is not None and waiting.document is None
            assert not _hooked(earlier, waiting)  # the earlier page's end leaves it alone
            RENDERED_AHEAD.put(obj, pane._ahead_key(earlier), waiting)

            taken, pane = _plot_pane_page(obj)
            assert len(RENDERED_AHEAD) == 0  # taken, by this page only
            plot = pane._plots[next(iter(pane._models))][0]
            assert plot is waiting and plot.document is taken
            assert _hooked(taken, plot) == _hooked(rendered_here, plot_here)
            assert _document_json(taken) == _document_json(rendered_here)

            again, pane = _plot_pane_page(obj)  # nothing waiting: rendered while built
            assert pane._plots[next(iter(pane._models))][0] is not waiting
            assert _document_json(again) == _document_json(rendered_here)
    finally:
        RENDERED_AHEAD.clear()


def test_one_line_and_two_are_the_same_figure_updated_in_place():
    """A plot's points in one colour (one representation ticked; trajectories of one
    representation so far) and in several make the same figure: a line more or less updates the
    page's figure in place instead of replacing it (HoloViews gave a hover glyph to points of
    several colours only, so the two differed), and the page shows what a fresh one would."""
    from explorer._src import plots as _plots
    from explorer._src.store.example import load_example

    frame, rollouts = load_example()
    first = frame.iloc[0]
    filters = dict(problem=first["problem"], horizon=int(first["horizon"]), target="loss")
    one, two = ("dict",), ("dict", "array")
    found = list(rollouts.values())
    trajectories = {k: _plots.rollout_frame(dict(zip(reps, found))) for k, reps in
                    (("one", one), ("two", two))}
    kinds = [(draw.__name__, [draw(frame, representations=reps, **filters) for reps in
                              (one, two, one)])
             for draw in (_plots.compile_time_plot, _plots.program_size_plot,
                          _plots.runtime_plot)]
    kinds.append(("rollout_plot", [_plots.rollout_plot(trajectories[k])
                                   for k in ("one", "two", "one")]))
    for name, objs in kinds:
        doc, pane = _plot_pane_page(objs[0])
        ref = next(iter(pane._models))
        figure = pane._models[ref][0]
        for obj in objs[1:]:
            pane.object = obj
            assert pane._models[ref][0] is figure, name  # updated, not replaced
            assert _document_json(doc) == _document_json(_plot_pane_page(obj)[0]), name


def test_an_update_in_place_compares_what_a_full_comparison_would_find_different():
    """explorer._src.dashboard.bokeh_sync.plan compares only the properties either figure holds a value of
    (set, themed or made on reading); the others are both their class's default. It must list
    the very settings a comparison of every property lists (the path it falls back to when
    Bokeh keeps values otherwise), for values, a line more and a line less, on every kind of
    plot the page updates in place."""
    import pandas as pd
    from bokeh.themes import Theme

    from explorer._src.dashboard import bokeh_sync as _bokeh_sync
    from explorer._src import plots as _plots
    from explorer._src.dashboard.sections import _PAGE_SET, PlotPane
    from explorer._src.store.example import load_example

    frame, rollouts = load_example()
    first = frame.iloc[0]
    filters = dict(problem=first["problem"], horizon=int(first["horizon"]), target="loss",
                   representations=("dict", "array"))
    slower = frame.assign(compile_s=frame["compile_s"] * 1.5,
                          hlo_pre_bytes=frame["hlo_pre_bytes"] * 2, run_s=frame["run_s"] * 0.5)
    measured = pd.concat([slower, slower.iloc[[0]].assign(source="measured", id=1)],
                         ignore_index=True)
    reps = {str(k): v for k, v in rollouts.items()}
    kinds = [(draw, [draw(d, **filters) for d in (frame, measured, slower)])
             for draw in (_plots.compile_time_plot, _plots.program_size_plot, _plots.runtime_plot)]
    kinds.append((_plots.rollout_plot, [_plots.rollout_plot(_plots.rollout_frame(
        dict(list(reps.items())[:k]))) for k in (1, 2, 1)]))
    theme = Theme(json={"attrs": {"Axis": {"axis_label_text_font_size": "15px"}}})

    def settings(changes):
        return [(type(m).__name__, name, _plain_value(v)) for m, name, v in changes]

    checked = 0
    for draw, objs in kinds:
        for before, after in zip(objs, objs[1:]):
            doc, pane = _plot_pane_page(before)
            doc.theme = theme
            live = pane._plots[next(iter(pane._models))][0].state
            pane.object = after  # updated in place...
            pane.object = before  # ...and back: ``live`` shows ``before`` again
            plans = []
            for full in (False, True):
                new = PlotPane(after, **_PANE_OPTIONS)._render(doc, None, None).state
                held = _bokeh_sync._held
                _bokeh_sync._held = (lambda model: None) if full else held
                try:
                    changes = _bokeh_sync.plan(live, new, theme=doc.theme, keep=_PAGE_SET,
                                               name=_plots.line_name)
                finally:
                    _bokeh_sync._held = held
                plans.append(None if changes is None else settings(changes))
            assert plans[0] is not None and plans[0] == plans[1], draw.__name__
            checked += bool(plans[0])
    assert checked == 2 * len(kinds)  # the renderings did differ


def test_an_update_in_place_finds_a_change_inside_a_default_model():
    """A model made as a property's default on first reading (a figure's toolbar) and changed
    since is compared though the property itself was never set."""
    from bokeh.models import Range1d
    from bokeh.plotting import figure

    from explorer._src.dashboard import bokeh_sync as _bokeh_sync

    live, new = figure(), figure()
    live.x_range, new.x_range = Range1d(0, 1), Range1d(0, 1)  # held by both: compared
    new.toolbar.autohide = True  # ``toolbar``: the default only ``new`` made
    new.x_range.end = 2
    changes = _bokeh_sync.plan(live, new)
    assert {(type(m).__name__, name, value) for m, name, value in changes} == {
        ("Toolbar", "autohide", True), ("Range1d", "end", 2)}
    assert all(m is live.toolbar or m is live.x_range for m, _, _ in changes)


def _plain_value(value):
    """A setting's value as plain data (a model by its type)."""
    import numpy as np
    from bokeh.model import Model

    if isinstance(value, Model):
        return type(value).__name__
    if isinstance(value, np.ndarray):
        return ["array", str(value.dtype), value.tolist()]
    if isinstance(value, dict):
        return {str(k): _plain_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_value(v) for v in value]
    return repr(value)


def test_a_rendering_ahead_is_only_taken_for_its_own_object():
    from explorer._src.dashboard.plotcache import _RenderedAhead

    class Plot:
        cleaned = False

        def cleanup(self):
            self.cleaned = True

    pool = _RenderedAhead(size=2)
    a, b, c = object(), object(), object()
    pa, pb, pc = Plot(), Plot(), Plot()
    pool.put(a, "k", pa)
    assert pool.take(a, "other key") is None and pool.take(b, "k") is None
    assert pool.take(a, "k") is pa and pool.take(a, "k") is None
    for obj, plot in ((a, pa), (b, pb), (c, pc)):
        pool.put(obj, "k", plot)
    assert len(pool) == 2 and pa.cleaned and not pb.cleaned  # the oldest went, cleaned up
    pool.clear()
    assert len(pool) == 0 and pb.cleaned and pc.cleaned


def test_a_new_plot_of_the_same_kind_updates_the_figure_on_the_page_in_place():
    """A new result that changes values, fits, ranges or adds a line updates the figure the
    page has (the browser redraws it instead of building a new one); a plot of another kind
    (a placeholder's plain axes, a legend moved) replaces it. Either way the page's document is
    the one a fresh page would show, model by model."""
    import pandas as pd

    from explorer._src import plots as _plots
    from explorer._src.store.example import load_example
    from explorer._src.dashboard.plotcache import RENDERED_AHEAD

    RENDERED_AHEAD.clear()
    frame, _ = load_example()
    first = frame.iloc[0]
    filters = dict(problem=first["problem"], horizon=int(first["horizon"]), target="loss",
                   representations=("dict", "array"))
    shown = _plots.select(frame, **filters)
    slower = frame.copy()  # one case measured again, slower: values, a fit, a range change
    row = shown.index[shown["representation"] == "dict"][-1]
    slower.loc[row, "compile_s"] *= 3
    measured = pd.concat([slower, slower.loc[[row]].assign(source="measured", id=1)],
                         ignore_index=True)  # a new line beside the example's (lighter now)
    empty = frame.iloc[:0]
    for draw in (_plots.compile_time_plot, _plots.program_size_plot, _plots.runtime_plot):
        doc, pane = _plot_pane_page(draw(frame, **filters))
        ref = next(iter(pane._models))
        figure = pane._models[ref][0]
        for data in (slower, measured, slower, measured):  # a line more, a line less...
            pane.object = draw(data, **filters)
            assert pane._models[ref][0] is figure, draw.__name__  # the same figure, updated
            fresh = _document_json(_plot_pane_page(draw(data, **filters))[0])
            assert _document_json(doc) == fresh, draw.__name__
        for data in (empty, measured):  # a placeholder (plain axes) and back: replaced
            pane.object = draw(data, **filters)
            assert pane._models[ref][0] is not figure
            figure = pane._models[ref][0]
            assert _document_json(doc) == _document_json(_plot_pane_page(draw(data, **filters))[0])
    # The stages of a plot at one N are bars: another kind of plot again.
    doc, pane = _plot_pane_page(_plots.compile_time_plot(measured, **filters))
    figure = pane._models[next(iter(pane._models))][0]
    one_n = measured[measured["n_states"] == measured.loc[row, "n_states"]]
    pane.object = _plots.compile_time_plot(one_n, stage="all stages", **filters)
    assert pane._models[next(iter(pane._models))][0] is not figure
