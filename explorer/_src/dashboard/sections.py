"""The sections of the dashboard page, one small ``pn.viewable.Viewer`` each.

Each is built around the page's :class:`ExplorerModel` and reads or sets the params of the part
it shows; :class:`explorer._src.dashboard.page.Dashboard` lays them out.
"""

from __future__ import annotations

import html
import io
import json
import logging
from typing import Any

import pandas as pd
import panel as pn
import param

from . import bokeh_sync as _bokeh_sync
from .. import plots as _plots
from ..core.blame import BLAME_COLUMNS
from .model.model import MAX_N_STATES, N_CHOICES, ROLLOUT_MAX_N, ExplorerModel
from .model.session import Batch
from .model.view import PRESENTER_PLOT_OPTS
from .plotcache import RENDERED_AHEAD

__all__ = ["ControlsSection", "MessagesSection", "PlotPane", "PlotsSection", "ProgramsSection",
           "ResultsSection", "RunsSection", "program_html", "side_by_side_html"]

_log = logging.getLogger(__name__)

# Wide enough for each header (its name, the sort arrow) and for typical values.
_COLUMN_WIDTHS = {name: max(width, 11 * len(name) + 44) for name, width in {
    "id": 60, "source": 85, "problem": 85, "representation": 115, "target": 65, "n_states": 80,
    "horizon": 70, "unroll": 60, "status": 75, "trace_s": 80, "lower_s": 80, "compile_s": 90,
    "hlo_pre_bytes": 115, "hlo_post_bytes": 120, "jaxpr_eqns": 90, "run_s": 95, "backend": 75,
    "device_kind": 100, "jax_version": 95, "host": 130, "error": 320,
}.items()}


# The table's text follows presenter mode (``--explorer-table-font-size``, set on the page).
_TABLE_FONT = (":host .tabulator, :host .tabulator .tabulator-row .tabulator-cell { "
               "font-size: var(--explorer-table-font-size, 14px); }")

# Form controls keep the browser's own text size whatever the page's; presenter mode sets these.
_INPUT_FONT = (".bk-input { font-size: var(--explorer-input-font-size, 13.333px); } "
               ".choices__list--multiple .choices__item { "
               "font-size: var(--explorer-tag-font-size, 12px); }")


def _presenter_ready(layout: pn.layout.ListLike) -> pn.layout.ListLike:
    """``layout`` with its form controls' text sized by presenter mode (:data:`_INPUT_FONT`)."""
    for widget in layout.select(pn.widgets.Widget):
        widget.stylesheets = [*widget.stylesheets, _INPUT_FONT]
    return layout


_DIFF_COLORS = {"+": "#e6ffec", "-": "#ffebe9", "@": "#ddf4ff"}


def program_html(text: str, diff: bool = False) -> str:
    """Program text as escaped, scrollable HTML (a unified diff gets its lines coloured).

    A ``<pre>`` rather than a code editor: the texts are read-only, the browser's own search
    finds words anywhere in them, and the page does not load an editor it rarely shows.
    """
    if not text:
        return ""
    if diff:
        lines = []
        for line in text.splitlines():
            color = _DIFF_COLORS.get(line[:1]) if not line.startswith(("+++", "---")) else None
            escaped = html.escape(line)
            lines.append(f'<span style="background:{color}">{escaped}</span>' if color
                         else escaped)
        body = "\n".join(lines)
    else:
        body = html.escape(text)
    return f'<pre class="program-text">{body}</pre>'


def side_by_side_html(comparison: dict) -> str:
    """The jaxpr lines found in only one of two programs, in two columns (escaped HTML)."""
    pairs = comparison.get("distinct") or ()
    if not comparison:
        return ""
    if not pairs:
        return '<p class="side-by-side">No jaxpr line differs.</p>'
    left, right = (html.escape(label) for label in comparison.get("labels", ("a", "b")))
    cell = ('<td style="vertical-align:top;white-space:pre;font-family:monospace;'
            'font-size:var(--explorer-code-font-size, 12px);padding:0 8px;'
            'background:{}">{}</td>')
    rows = "".join(
        "<tr>" + cell.format("#ffebe9" if a else "transparent", html.escape(a))
        + cell.format("#e6ffec" if b else "transparent", html.escape(b)) + "</tr>"
        for a, b in pairs)
    return ('<table class="side-by-side" style="border-collapse:collapse;width:100%">'
            f'<thead><tr><th style="text-align:left">only in {left}</th>'
            f'<th style="text-align:left">only in {right}</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>")


_PRE_STYLE = {"overflow": "auto", "font-size": "var(--explorer-code-font-size, 12px)",
              "border": "1px solid #ddd", "background": "#fafafa", "padding": "0 6px"}


def _md(*args: Any, **params: Any) -> pn.pane.Markdown:
    # No LaTeX: a "$" in a message or a label is a dollar sign, and the page needs no MathJax.
    return pn.pane.Markdown(*args, disable_math=True, **params)


def _text_view(text: Any, diff: bool = False) -> pn.pane.HTML:
    return pn.pane.HTML(pn.bind(program_html, text, diff), sizing_mode="stretch_width",
                        height=420, styles=_PRE_STYLE, disable_math=True)



def _guard(model: ExplorerModel, action: Any) -> Any:
    """A click handler that runs ``action`` and turns any unexpected error into an alert: a
    user action never kills the page or leaves only a traceback in the server log."""

    def handler(event: Any) -> None:
        try:
            action()
        except Exception as err:  # noqa: BLE001
            model.session.show(f"Unexpected error: {type(err).__name__}: {err}", "danger")

    return handler


def _theme_json(theme: Any) -> str | None:
    if theme is None:
        return None
    return json.dumps(getattr(theme, "_json", theme), sort_keys=True, default=str)


# A plot's size options (HoloViews'), which the page's layout turns into the figure's size
# properties (Bokeh's): a change of the first replaces the figure; the second are left as the
# layout set them, and so are the stylesheets the page's design gave the figure.
_PLOT_SIZING = ("width", "height", "frame_width", "frame_height", "min_width", "min_height",
                "max_width", "max_height", "responsive", "aspect", "data_aspect")
_PAGE_SET = frozenset({"width", "height", "min_width", "min_height", "max_width", "max_height",
                       "sizing_mode", "aspect_ratio", "margin", "stylesheets"})


class PlotPane(pn.pane.HoloViews):
    """A HoloViews pane that, on a served page, takes its plot already rendered when the page
    before it rendered the same plot object ahead (:meth:`render_ahead`; the rendering waits
    in :data:`explorer._src.dashboard.plotcache.RENDERED_AHEAD`), instead of rendering it while the page is
    built; and, given a new object of the same shape, updates the figure on the page in place
    (:meth:`_update_in_place`). Either way the page's document is the one a plain HoloViews
    pane would give (tests compare the two). In a notebook (a comm) it renders as always."""

    def _ahead_key(self, doc: Any) -> tuple:
        # The theme the pane renders with: its own, else the page's, else its design's.
        theme = self.theme
        if theme is None and doc.theme and doc.theme._json != {"attrs": {}}:
            theme = doc.theme
        if theme is None and self._design:
            theme = self._design.theme.bokeh_theme
        if theme is None:  # else the renderer's own
            import holoviews as hv  # noqa: PLC0415 - loaded by then: the object is a plot

            renderer = self.renderer or hv.Store.renderers.get("bokeh")
            theme = getattr(renderer, "theme", None)
        return repr(self.margin), _theme_json(theme)

    def _render(self, doc: Any, comm: Any, root: Any) -> Any:
        if comm is None and doc is not None and self.object is not None:
            plot = RENDERED_AHEAD.take(self.object, self._ahead_key(doc))
            if plot is not None:
                # What the renderer does to a plot it makes for a document.
                plot.set_root(root)
                plot.document = doc  # its clean-up is tied to this page's session now
                if plot.renderer.theme:
                    doc.theme = plot.renderer.theme
                return plot
        return super()._render(doc, comm, root)

    def _update_object(self, ref: str, doc: Any, root: Any, parent: Any, comm: Any) -> None:
        if comm is None and self._update_in_place(ref, doc, root):
            return
        super()._update_object(ref, doc, root, parent, comm)

    def _update_in_place(self, ref: str, doc: Any, root: Any) -> bool:
        """On a served page, make the figure already there equal to the new object's rendering
        when the two have the same shape (the same axes and legend place: a new result, a new
        fit, a new line), instead of replacing it: the browser updates the figure it has rather
        than building a new one (:mod:`explorer._src.dashboard.bokeh_sync`). Whether it did; when it did
        not, the replacement uses the rendering made here."""
        current = self._plots.get(ref)
        if current is None or self.object is None or doc is None:
            return False
        old_plot = current[0]
        new_plot = self._render(doc, None, root)
        try:
            changes = None
            if all(getattr(old_plot, k, None) == getattr(new_plot, k, None)
                   for k in _PLOT_SIZING):
                # The figure's own size is what the page's layout made of these: kept.
                changes = _bokeh_sync.plan(old_plot.state, new_plot.state, theme=doc.theme,
                                           keep=_PAGE_SET, name=_plots.line_name)
            if changes is not None:
                with pn.io.hold(doc):  # one message to the browser
                    _bokeh_sync.apply(changes)
                return True
        except Exception:  # noqa: BLE001 - replaced instead, as without this shortcut
            _log.warning("could not update a plot in place; replacing it", exc_info=True)
        self._restore_plot = new_plot  # what Panel renders the replacement from
        return False

    def render_ahead(self, doc: Any) -> bool:
        """Render this pane's plot for the next page that shows the same object, unless one is
        waiting already; whether it rendered."""
        obj = self.object
        if obj is None or doc is None:
            return False
        key = self._ahead_key(doc)
        if not RENDERED_AHEAD.wants(obj, key):
            return False
        plot = super()._render(doc, None, None)
        plot.document = None  # not this page's: its session's end must not clean it up
        RENDERED_AHEAD.put(obj, key, plot)
        return True


class _Section(pn.viewable.Viewer):
    """One part of the page, built around the page's model."""

    model = param.ClassSelector(class_=ExplorerModel)
    served = param.Boolean(default=False, doc="""
        Part of a page a server sends: what the first view does not need (the results table)
        is sent once the page has drawn.""")

    def __init__(self, model: ExplorerModel, **params: Any):
        super().__init__(model=model, **params)
        self._layout = self._build()

    def _build(self) -> pn.viewable.Viewable:
        raise NotImplementedError

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout


class ControlsSection(_Section):
    """The sidebar: what to measure, and Run / Sweep / Cancel."""

    def _build(self) -> pn.Column:
        m, c = self.model, self.model.controls
        w = pn.widgets
        # "other" (0) stands for a value typed in the box below, so the list never lies.
        self._n_preset = w.Select(label="State count N (presets)",
                                  options={"other": 0, **{f"{n:,}": n for n in N_CHOICES}},
                                  value=c.n_states if c.n_states in N_CHOICES else 0)
        self._n_preset.param.watch(self._preset_chosen, "value")
        c.param.watch(self._n_changed, "n_states")
        # No ``start`` or ``end`` on the number inputs: an out-of-range value reaches the model,
        # whose check (the core's own) explains the limit in an alert. With bounds, Bokeh's
        # spinner silently puts the previous value back (typing 0 would re-run the old N).
        number = dict(start=None, end=None)
        running = m.jobs.param.running
        run = w.Button(label="Run", color="primary", disabled=running,
                       sizing_mode="stretch_width")
        sweep = w.Button(label="Sweep", color="primary", variant="outline", disabled=running,
                         sizing_mode="stretch_width")
        cancel = w.Button(label="Cancel", color="danger",
                          disabled=pn.bind(lambda busy: not busy, m.jobs.param.busy),
                          sizing_mode="stretch_width")
        # For a projector; ``?presenter=true`` in the address opens the page this way.
        self.presenter_toggle = w.Checkbox.from_param(
            m.view.param.presenter, css_classes=["presenter-toggle"], margin=(15, 10, 10, 10))
        run.on_click(_guard(m, m.run))
        sweep.on_click(_guard(m, m.sweep))
        self.run_button, self.sweep_button = run, sweep
        cancel.on_click(_guard(m, m.cancel))
        return _presenter_ready(pn.Column(
            w.Select.from_param(c.param.problem, label="Problem"),
            self._n_preset,
            w.IntInput.from_param(c.param.n_states,
                                  label=f"…or any N (1 to {MAX_N_STATES:,})", **number),
            w.IntInput.from_param(c.param.horizon, label="Horizon (scan steps)", **number),
            _md("**Representations**", margin=(10, 10, 0, 10)),
            w.CheckBoxGroup.from_param(c.param.representations, inline=False),
            _md("**Target**", margin=(10, 10, 0, 10)),
            w.RadioButtonGroup.from_param(c.param.target, color="light"),
            w.IntInput.from_param(c.param.unroll, label="Scan unroll", **number),
            w.Select.from_param(c.param.backend, label="Backend (devices JAX sees)"),
            w.FloatInput.from_param(c.param.timeout_s, label="Timeout per case (s)", **number),
            pn.Row(run, cancel, sizing_mode="stretch_width"),
            _md(pn.bind(lambda e: f"**Bad input:** {e}" if e else "", c.param.input_error),
                css_classes=["input-error"], styles={"color": "#b00020"},
                visible=pn.bind(bool, c.param.input_error), sizing_mode="stretch_width"),
            w.MultiChoice.from_param(c.param.sweep_n_states, label="Sweep over N"),
            sweep,
            _md(f"Trajectories are captured when N ≤ {ROLLOUT_MAX_N}.",
                styles={"font-size": "0.85em", "color": "#555"}),
            self.presenter_toggle,
            sizing_mode="stretch_width", min_width=260))

    def _preset_chosen(self, event: param.parameterized.Event) -> None:
        if event.new:
            self.model.controls.n_states = int(event.new)

    def _n_changed(self, event: param.parameterized.Event) -> None:
        # Keep the preset list honest: it shows N when N is a preset, and nothing otherwise.
        self._n_preset.value = event.new if event.new in N_CHOICES else 0


class MessagesSection(_Section):
    """The alert (with Dismiss), the status line and the example-sweep label."""

    def _build(self) -> pn.Column:
        s, r = self.model.session, self.model.results
        self.status = status = _md(
            pn.bind(self._status_text, s.param.status, self.model.jobs.param.busy),
            sizing_mode="stretch_width", margin=(0, 10))
        alert = pn.pane.Alert(s.param.alert, alert_type=s.param.alert_kind,
                              visible=pn.bind(bool, s.param.alert), sizing_mode="stretch_width")
        dismiss = pn.widgets.Button(label="Dismiss", color="light",
                                    visible=pn.bind(bool, s.param.alert), width=110)
        dismiss.on_click(lambda event: s.clear_alert())
        example = _md(
            pn.bind(lambda show, text: f"*{text}*" if show else "", r.param.show_example,
                    r.param.example_label),
            sizing_mode="stretch_width", margin=(0, 10), styles={"color": "#555"})
        return pn.Column(pn.Row(alert, dismiss, sizing_mode="stretch_width"), status, example,
                         sizing_mode="stretch_width", margin=0)

    @staticmethod
    def _status_text(status: str, busy: bool) -> str:
        return f"**Status:** {status}" + (" *(press Cancel to stop)*" if busy else "")


class PlotsSection(_Section):
    """The view choices, the legend note and the four plots."""

    def _build(self) -> pn.Column:
        v, r = self.model.view, self.model.results
        w = pn.widgets
        plot_opts = dict(sizing_mode="stretch_width", min_height=340, linked_axes=False)
        self.panes = plots = [PlotPane(plot, **plot_opts) for plot in
                              (v.compile_plot, v.size_plot, v.rollout_plot, v.runtime_plot)]
        # Wraps rather than running off the page's edge (presenter mode on a projector).
        view_controls = pn.FlexBox(
            w.Select.from_param(v.param.stage, label="Compile time: stage", width=170),
            pn.Column(_md("Plot target", margin=(0, 10)),
                      w.RadioButtonGroup.from_param(v.param.show_target, color="light")),
            w.MultiChoice.from_param(v.param.rollout_states, label="Rollout states",
                                     max_items=8, width=320),
            w.Checkbox.from_param(r.param.show_example, margin=(34, 10, 10, 10)),
            sizing_mode="stretch_width",
        )
        legend_note = _md(
            pn.bind(self._legend, v.param.stage, v.param.rollout_note),
            sizing_mode="stretch_width", margin=(0, 10), styles={"font-size": "0.9em",
                                                                  "color": "#555"})
        # Two plots a row; in presenter mode one, the page's width: at a projector's font
        # sizes a half-width plot's frame was left a third of it beside its legend, and the
        # ticks of its x axis ran into each other.
        self._pairs = [pn.Row(*pair, sizing_mode="stretch_width")
                       for pair in (plots[:2], plots[2:])]
        self._singles = [pn.Row(plot, sizing_mode="stretch_width") for plot in plots]
        self.grid = pn.Column(*self._arrange(v.presenter), sizing_mode="stretch_width")
        v.param.watch(lambda event: setattr(self.grid, "objects", self._arrange(event.new)),
                      "presenter")
        return pn.Column(_presenter_ready(view_controls), legend_note, self.grid,
                         sizing_mode="stretch_width", margin=0)

    def _arrange(self, presenter: bool) -> list[pn.viewable.Viewable]:
        return list(self._singles) if presenter else list(self._pairs)

    def render_ahead(self) -> None:
        """Once the page has drawn: render its four plots again, one per turn of its event
        loop, for the next page that opens with the same plots (:class:`PlotPane`). That page
        is sent about 0.1 s per plot sooner. Stops when this page starts a run."""
        doc = pn.state.curdoc
        panes = list(self.panes)

        def next_one() -> None:
            # Never in the way of this page's own work: a Run pressed meanwhile stops it.
            if not panes or self.model.session.closed or self.model.jobs.running:
                return
            pane = panes.pop(0)
            try:
                pane.render_ahead(doc)
            except Exception:  # noqa: BLE001 - only a head start lost; the page is unaffected
                _log.debug("could not render a plot ahead", exc_info=True)
            if panes:
                self.model.session.post(next_one)

        self.model.session.post(next_one)

    @staticmethod
    def _legend(stage: str, note: str) -> str:
        return ("**k**: fitted exponent of size or time ≈ c·N^k (0 = flat, 1 = linear, "
                "2 = quadratic). Program size: solid = StableHLO before optimisation, dashed = "
                "optimised HLO."
                + (" Compile stages: dotted = trace, dashed = lower, solid = XLA compile "
                   "(at a single N: stacked bars)." if stage == "all stages" else "")
                + " Lighter lines labelled \"example\": the shipped example sweep, beside your "
                  "own measurements. Click a legend entry to hide its lines; hover a point for "
                  "exact values. "
                + note)


class ResultsSection(_Section):
    """The results table (select a row to inspect it), CSV and HTML downloads."""

    def _build(self) -> pn.Column:
        m, r = self.model, self.model.results
        w = pn.widgets
        self.table = w.Tabulator(
            r.table(),
            pagination="local", page_size=12, selectable=1, show_index=False,
            hidden_columns=["key"],
            disabled=True, sizing_mode="stretch_width", height=440,
            header_filters={"representation": {"type": "input", "func": "like"},
                            "status": {"type": "input", "func": "like"},
                            "source": {"type": "input", "func": "like"}},
            formatters={c: {"type": "money", "precision": 4, "symbol": ""}
                        for c in ("trace_s", "lower_s", "compile_s")},
            # Fixed widths: fitting 21 columns to their data took the browser about 0.3 s.
            widths=dict(_COLUMN_WIDTHS),
            stylesheets=[_TABLE_FONT],
        )
        self.table.param.watch(self._row_selected, "selection")
        # New rows reach the table on the page's next turn: a new result's compile-time plot
        # (asked for by the same change) goes out first, and the browser draws it first.
        self._table_update = Batch(m.session.post, lambda _: self.table.param.update(
            value=r.table()))
        r.param.watch(lambda _: self._table_update.add(True), "frame")
        # Tabulator's selection is a row position: when new rows arrive (newest first) the
        # highlight would slide onto another row while the model still means the first one.
        self.table.param.watch(self._keep_selection, "value")
        csv = w.FileDownload(callback=lambda: io.BytesIO(r.csv_bytes()),
                             filename="pytree-explorer-results.csv",
                             label="Download results (CSV)", color="light", width=240)
        html_file = w.FileDownload(callback=self._html_file,
                                   filename="pytree-explorer-plots.html",
                                   label="Export plots (standalone HTML)", color="light",
                                   width=260)
        refresh = w.Button(label="Load rows stored by others", color="light", width=240)
        refresh.on_click(_guard(m, m.refresh))
        layout = pn.Column(
            pn.Row(csv, html_file, refresh),
            _md("Select a row, then open **Programs** to see its jaxpr, "
                "StableHLO, optimised HLO and equation blame.", margin=(0, 10)),
            self.table, sizing_mode="stretch_width")
        if self.served:
            # Served: the table (below the plots) is sent once the page has drawn, so the plots
            # do not wait for it.
            layout[2] = _md("*Loading the results table…*", margin=(0, 10))
            pn.state.onload(lambda: layout.__setitem__(2, self.table))
        return layout

    def _row_selected(self, event: param.parameterized.Event) -> None:
        rows = event.new or []
        programs = self.model.programs
        if not rows:
            programs.selected = None
            return
        frame = self.table.value  # selection indexes the table's value, whatever its sorting
        index = rows[0]
        if 0 <= index < len(frame):
            programs.selected = int(frame.iloc[index]["key"])

    def _keep_selection(self, event: param.parameterized.Event) -> None:
        """Keep the highlight on the selected row's id whatever rows came before it."""
        selected, frame = self.model.programs.selected, event.new
        if selected is None or frame is None or "key" not in frame:
            return
        positions = [i for i, row_id in enumerate(frame["key"]) if row_id == selected]
        self.table.selection = positions[:1]

    def _html_file(self) -> io.BytesIO:
        try:
            return io.BytesIO(self.model.html_bytes())
        except Exception as err:  # noqa: BLE001 - shown in the page, never a dead page
            self.model.session.alert = f"Could not export the plots: {err}"
            return io.BytesIO(b"")


class _LazySection(_Section):
    """A section whose widgets are made the first time it is shown (:meth:`build`)."""

    def _build(self) -> pn.Column:
        # A spacer until built: the tab's Column is on the page from the start, and an empty
        # layout is one Bokeh warns of.
        self._unbuilt = pn.Spacer(height=0)
        return pn.Column(self._unbuilt, sizing_mode="stretch_width")

    @property
    def built(self) -> bool:
        return self._unbuilt not in self._layout.objects

    def build(self) -> None:
        if not self.built:
            self._layout.objects = [self._contents()]

    def _contents(self) -> pn.Column:
        raise NotImplementedError


class ProgramsSection(_LazySection):
    """The selected row's programs and the comparison of two representations.

    Built the first time it is shown (:meth:`build`): most visits never open it, and its
    widgets (five code viewers, a table, selects) cost every page load time.
    """

    def _contents(self) -> pn.Column:
        m, p = self.model, self.model.programs
        w = pn.widgets
        inspect = w.Button(label="Show programs of the selected row", color="primary",
                           width=280, disabled=pn.bind(lambda s: s is None, p.param.selected))
        inspect.on_click(_guard(m, m.inspect))
        jaxpr = _text_view(pn.bind(lambda prog: prog.get("jaxpr") or "", p.param.program))
        stablehlo = _text_view(pn.bind(lambda prog: prog.get("stablehlo") or "",
                                       p.param.program))
        hlo = _text_view(pn.bind(
            lambda prog: prog.get("hlo") or (prog and "(this backend gives no optimised HLO text)"
                                             or ""),
            p.param.program))
        blame = w.Tabulator(
            pn.bind(lambda b: b if b is not None else pd.DataFrame(columns=list(BLAME_COLUMNS)),
                    p.param.blame_table),
            disabled=True, show_index=False, pagination="local", page_size=15,
            sizing_mode="stretch_width", height=420)
        program_title = _md(pn.bind(self._program_title, p.param.program, p.param.selected),
                            margin=(0, 10))

        compare = w.Button(label="Compare", color="primary", width=140)
        compare.on_click(_guard(m, m.compare))
        verdict = _md(pn.bind(self._verdict_text, p.param.comparison),
                      sizing_mode="stretch_width")
        jaxpr_diff = _text_view(pn.bind(lambda c: c.get("jaxpr_diff", ""), p.param.comparison),
                                diff=True)
        hlo_diff = _text_view(pn.bind(lambda c: c.get("hlo_diff", ""), p.param.comparison),
                              diff=True)
        side_by_side = pn.pane.HTML(pn.bind(side_by_side_html, p.param.comparison),
                                    sizing_mode="stretch_width", height=420, styles=_PRE_STYLE,
                                    disable_math=True)
        compare_row = _presenter_ready(pn.Row(
            w.Select.from_param(p.param.compare_a, label="Compare", width=150),
            w.Select.from_param(p.param.compare_b, label="with", width=150),
            pn.Column(pn.Spacer(height=18), compare),
            _md("at the problem, N, horizon and plot target chosen above.",
                margin=(32, 10, 0, 10))))
        # Tabs that are not ``dynamic``: Panel keeps a hidden tab's models off the page and
        # brings them up to date there with its CDN's stylesheets (a second row's jaxpr while
        # StableHLO is in front), which the page then asks that host for. Every text is cut at
        # MAX_TEXT_CHARS, so a row's programs all go to the page at once.
        return pn.Column(
            pn.Row(inspect, program_title),
            pn.Tabs(("jaxpr", jaxpr), ("StableHLO", stablehlo), ("Optimised HLO", hlo),
                    ("Equation blame", blame), sizing_mode="stretch_width"),
            _md("### Are two representations the same program to XLA?",
                margin=(20, 10, 0, 10)),
            compare_row, verdict,
            pn.Tabs(("Side by side", side_by_side), ("jaxpr diff", jaxpr_diff),
                    ("StableHLO diff", hlo_diff), sizing_mode="stretch_width"),
            sizing_mode="stretch_width")

    @staticmethod
    def _program_title(program: dict, selected: int | None) -> str:
        if program:
            return f"**Programs of:** {program['title']}"
        if selected is not None:
            return f"Row {selected} selected: press the button."
        return "No row selected yet."

    @staticmethod
    def _verdict_text(comparison: dict) -> str:
        if not comparison:
            return ""
        same = comparison.get("same_hlo")
        head = ("**Verdict: the same program to XLA**" if same else
                "**Verdict: different programs**")
        text = f"{head}: {comparison['title']}\n\n`{comparison['verdict']}`"
        summary = comparison.get("op_summary")
        if summary:  # the operation counts first: what a room reads before any diff line
            lines = "\n".join(f"- `{line}`" for line in summary.splitlines())
            text += f"\n\n**Operations that differ** (jaxpr equations by primitive):\n\n{lines}"
        return text


class RunsSection(_LazySection):
    """Compare runs: two groups of rows (JAX version, backend, device kind, host, interpreter)
    as ratios per representation and N, a plot and a table. Built when first shown."""

    @staticmethod
    def _ratio_plot(table: pd.DataFrame | None, metric: str, presenter: bool) -> Any:
        plot = _plots.run_ratio_plot(table, metric)
        return plot.opts(PRESENTER_PLOT_OPTS, backend="bokeh") if presenter else plot

    def _contents(self) -> pn.Column:
        r = self.model.runs
        w = pn.widgets
        choose = _presenter_ready(pn.Row(
            w.Select.from_param(r.param.runs_by, width=170),
            w.Select.from_param(r.param.runs_a, width=200),
            w.Select.from_param(r.param.runs_b, width=200),
            w.Select.from_param(r.param.runs_metric, width=170)))
        message = _md(r.param.runs_message, sizing_mode="stretch_width")
        plot = pn.pane.HoloViews(
            pn.bind(self._ratio_plot, r.param.runs_table, r.param.runs_metric,
                    self.model.view.param.presenter),
            sizing_mode="stretch_width", height=_plots.PLOT_HEIGHT + 20)
        table = w.Tabulator(
            pn.bind(lambda t: t if t is not None else pd.DataFrame(), r.param.runs_table),
            disabled=True, show_index=False, pagination="local", page_size=15,
            sizing_mode="stretch_width", height=360,
            visible=pn.bind(lambda t: t is not None, r.param.runs_table))
        return pn.Column(
            _md("Two groups of the rows above side by side, per representation and N: the "
                "ratio b / a of compile time, program size and runtime (1 = no change). Store "
                "the same sweep under two JAX versions (`pytree-explorer sweep --python "
                "PATH`) or from two machines to compare them.", margin=(0, 10)),
            choose, message, plot, table, sizing_mode="stretch_width")
