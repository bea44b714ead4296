"""The sections of the dashboard page, one small ``pn.viewable.Viewer`` each.

Each is built around the page's :class:`ExplorerModel` and reads or sets the params of the part
it shows; :class:`explorer._src.dashboard.page.Dashboard` lays them out. The Programs and
Compare runs tabs are in :mod:`explorer._src.dashboard.inspection`.
"""

from __future__ import annotations

import functools
import io
from typing import Any

import panel as pn
import param
from bokeh.models.widgets.tables import NumberFormatter

from .model.model import MAX_N_STATES, N_CHOICES, ROLLOUT_MAX_N, ExplorerModel
from .model.session import Batch
from .plotcache import FIGURES_AHEAD, plotting, render_figure
from ..plots import placeholder

__all__ = ["ControlsSection", "MessagesSection", "PlotsSection", "ResultsSection"]

# Wide enough for each header (its name, the sort arrow) and for typical values.
_COLUMN_WIDTHS = {name: max(width, 11 * len(name) + 44) for name, width in {
    "id": 60, "source": 85, "problem": 85, "representation": 115, "target": 65, "n_states": 80,
    "horizon": 70, "unroll": 60, "status": 75, "trace_s": 80, "lower_s": 80, "compile_s": 90,
    "hlo_pre_bytes": 115, "hlo_post_bytes": 120, "jaxpr_eqns": 90, "run_s": 95, "backend": 75,
    "device_kind": 100, "jax_version": 95, "host": 130, "error": 320,
}.items()}


# How each plot sits in the page: what ``pn.pane.HoloViews(plot, sizing_mode=..., min_height=...)``
# sets on its figure (the pane's default margin included).
PLOT_LAYOUT = dict(sizing_mode="stretch_width", min_height=340, margin=(5, 10))

# How long after a served page has drawn the next page's figures start to be drawn.
_AHEAD_DELAY_S = 1.0

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


def _md(*args: Any, **params: Any) -> pn.pane.Markdown:
    # No LaTeX: a "$" in a message or a label is a dollar sign, and the page needs no MathJax.
    return pn.pane.Markdown(*args, disable_math=True, **params)


def _guard(model: ExplorerModel, action: Any) -> Any:
    """A click handler that runs ``action`` and turns any unexpected error into an alert: a
    user action never kills the page or leaves only a traceback in the server log."""

    def handler(event: Any) -> None:
        try:
            action()
        except Exception as err:  # noqa: BLE001
            model.session.show(f"Unexpected error: {type(err).__name__}: {err}", "danger")

    return handler


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
        # Each plot is the Bokeh figure of its HoloViews object, drawn again when the query it
        # reads changes (as ``pn.pane.HoloViews`` would: a new figure in the pane); a served
        # page takes the figures drawn ahead for it, if any (``FIGURES_AHEAD``).
        self._draws = (v.compile_plot, v.size_plot, v.rollout_plot, v.runtime_plot)
        self.panes = plots = [self._plot_pane(draw, query) for draw, query in zip(
            self._draws, ("compile_query", "metrics_query", "rollout_query", "metrics_query"))]
        if self.served:
            # Once this page has drawn, the next page's figures (the same plots) are drawn in
            # the background, a moment later: not while this page's are still being drawn.
            pn.state.onload(lambda: FIGURES_AHEAD.prepare(
                [draw() for draw in self._draws], PLOT_LAYOUT, delay_s=_AHEAD_DELAY_S))
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

    def _plot_pane(self, draw: Any, query: str) -> pn.pane.Bokeh:
        """A pane showing the figure of ``draw()``, drawn again when the view's ``query``
        changes."""
        plot = draw()
        figure = FIGURES_AHEAD.take(plot, PLOT_LAYOUT) if self.served else None
        pane = pn.pane.Bokeh(figure if figure is not None else self._figure(plot),
                             autodispatch=False, sizing_mode="stretch_width",
                             min_height=PLOT_LAYOUT["min_height"])
        self.model.view.param.watch(
            lambda _: setattr(pane, "object", self._figure(draw())), query)
        return pane

    def _figure(self, plot: Any) -> Any:
        try:
            return render_figure(plot, PLOT_LAYOUT)
        except Exception as err:  # noqa: BLE001 - shown in the plot and in the alert
            self.model.session.show(f"Could not draw a plot: {type(err).__name__}: {err}")
            with plotting():
                return render_figure(
                    placeholder("Plot", "Could not draw this plot (see the alert)."), PLOT_LAYOUT)

    def _arrange(self, presenter: bool) -> list[pn.viewable.Viewable]:
        return list(self._singles) if presenter else list(self._pairs)

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
            # A missing figure (a cancelled row's) reads "-" in every column, as Panel's other
            # number columns show it (Tabulator's money formatter wrote "NaN").
            formatters={c: NumberFormatter(format="0.0000", nan_format="-", null_format="-")
                        for c in ("trace_s", "lower_s", "compile_s")},
            # Fixed widths: fitting 21 columns to their data took the browser about 0.3 s.
            widths=dict(_COLUMN_WIDTHS),
            stylesheets=[_TABLE_FONT],
        )
        self.table.param.watch(self._row_selected, "selection")
        # New rows reach the table once what was sent before has gone out: a new result's
        # compile-time plot (asked for by the same change) goes out first, and the browser
        # draws it first.
        self._table_update = Batch(functools.partial(m.session.post, later=True),
                                   lambda _: self.table.param.update(value=r.table()))
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
