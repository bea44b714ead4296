"""The Panel dashboard: a thin view of :class:`explorer._model.ExplorerModel`.

Served with ``panel serve apps/explorer_app.py`` (a template around it), or shown in a notebook
after ``pn.extension()`` with ``explorer.dashboard()`` (the plain layout). All behaviour lives in
the model; this module only builds widgets from its parameters, lays them out, and hands updates
from background threads to the session's event loop.
"""

from __future__ import annotations

import gc
import html
import io
from typing import Any

import pandas as pd
import panel as pn
import param
from panel.io.state import set_curdoc

from ._blame import BLAME_COLUMNS
from ._model import MAX_N_STATES, N_CHOICES, ROLLOUT_MAX_N, ExplorerModel
from ._plotcache import warm_plotting

__all__ = ["Dashboard", "ExplorerModel", "dashboard"]

TITLE = "PyTree Compile Explorer"
REFRESH_MS = 5000

_INTRO = (
    "How much does the **shape of your JAX state** cost? Pick a problem, a state count *N* and "
    "the representations to compare, then **Run**. Each case is traced, lowered and compiled "
    "cold in a separate worker process, one at a time for all viewers."
)


# Wide enough for each header (its name, the sort arrow) and for typical values.
_COLUMN_WIDTHS = {name: max(width, 11 * len(name) + 44) for name, width in {
    "id": 60, "source": 85, "problem": 85, "representation": 115, "target": 65, "n_states": 80,
    "horizon": 70, "unroll": 60, "status": 75, "trace_s": 80, "lower_s": 80, "compile_s": 90,
    "hlo_pre_bytes": 115, "hlo_post_bytes": 120, "jaxpr_eqns": 90, "run_s": 95, "backend": 75,
    "device_kind": 100, "jax_version": 95, "host": 130, "error": 320,
}.items()}


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


_PRE_STYLE = {"overflow": "auto", "font-size": "12px", "border": "1px solid #ddd",
              "background": "#fafafa", "padding": "0 6px"}


def _md(*args: Any, **params: Any) -> pn.pane.Markdown:
    # No LaTeX: a "$" in a message or a label is a dollar sign, and the page needs no MathJax.
    return pn.pane.Markdown(*args, disable_math=True, **params)


def _text_view(text: Any, diff: bool = False) -> pn.pane.HTML:
    return pn.pane.HTML(pn.bind(program_html, text, diff), sizing_mode="stretch_width",
                        height=420, styles=_PRE_STYLE, disable_math=True)


def _schedule(doc: Any, fn: Any) -> None:
    """Run ``fn`` on the session's event loop (called from background threads)."""
    with set_curdoc(doc):
        pn.state.execute(fn, schedule=True)


_frozen = False


def _freeze_long_lived_objects() -> None:
    """Once per server process, before its first page is built: move what is alive now (the
    imported modules of JAX, HoloViews, Bokeh, Panel... and their caches) out of the garbage
    collector's reach. A full collection then scans only what pages create, and no longer
    pauses a page build or a redraw for about 0.2 s every second or third page."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.collect()
        gc.freeze()


def _served() -> bool:
    doc = pn.state.curdoc
    return doc is not None and doc.session_context is not None


class Dashboard(pn.viewable.Viewer):
    """Controls, four plots, a results table and a program panel around one model.

    Args:
      model: the :class:`ExplorerModel` to show (a new one by default).
      **params: parameters for a new model (ignored when ``model`` is given).
    """

    model = param.ClassSelector(class_=ExplorerModel)

    def __init__(self, model: ExplorerModel | None = None, **params: Any):
        model_params = {k: params.pop(k) for k in list(params) if k in ExplorerModel.param}
        store = params.pop("store", None)
        executor = params.pop("executor", None)
        if model is None:
            model = ExplorerModel(store=store, executor=executor, **model_params)
        super().__init__(model=model, **params)
        self._periodic = None
        self._doc = doc = pn.state.curdoc
        self._is_served = _served()
        if self._is_served:
            _freeze_long_lived_objects()
            model.dispatch = lambda fn: _schedule(doc, fn)
            # Polling starts when a browser has loaded the page: a request that never opens it
            # (a health check, a closed tab) must not keep redrawing plots nobody sees.
            pn.state.onload(self._start_polling)
            pn.state.onload(warm_plotting)  # once per server, after the first page has drawn
            pn.state.on_session_destroyed(self._session_destroyed)
        self._build()

    # -- lifecycle ---------------------------------------------------------------------
    def _session_destroyed(self, session_context: Any) -> None:
        if self._periodic is not None:
            self._periodic.stop()
        self.model.close()

    def _start_polling(self) -> None:
        if self._periodic is None:
            self._periodic = pn.state.add_periodic_callback(self._poll_store, period=REFRESH_MS)

    def _connected(self) -> bool:
        session = getattr(self._doc.session_context, "session", None)
        return session is None or session.connection_count > 0

    def _poll_store(self) -> None:
        # A page whose browser went away waits for the server to end its session; until then
        # it does not redraw.
        if not self.model.running and self._connected():
            self._guard(self.model.refresh)(None)

    # -- building ------------------------------------------------------------------------
    def _build(self) -> None:
        m = self.model
        w = pn.widgets

        self._problem = w.Select.from_param(m.param.problem, label="Problem")
        # "other" (0) stands for a value typed in the box below, so the list never lies.
        self._n_preset = w.Select(label="State count N (presets)",
                                  options={"other": 0, **{f"{n:,}": n for n in N_CHOICES}},
                                  value=m.n_states if m.n_states in N_CHOICES else 0)
        self._n_preset.param.watch(self._preset_chosen, "value")
        m.param.watch(self._n_changed, "n_states")
        # No ``start`` or ``end`` on the number inputs: an out-of-range value reaches the model,
        # whose check (the core's own) explains the limit in an alert. With bounds, Bokeh's
        # spinner silently puts the previous value back (typing 0 would re-run the old N).
        self._n_entry = w.IntInput.from_param(
            m.param.n_states, label=f"…or any N (1 to {MAX_N_STATES:,})", start=None, end=None)
        self._horizon = w.IntInput.from_param(m.param.horizon, label="Horizon (scan steps)",
                                              start=None, end=None)
        self._reps = w.CheckBoxGroup.from_param(m.param.representations, inline=False)
        self._target = w.RadioButtonGroup.from_param(m.param.target, color="light")
        self._unroll = w.IntInput.from_param(m.param.unroll, label="Scan unroll", start=None,
                                             end=None)
        self._backend = w.Select.from_param(m.param.backend, label="Backend (devices JAX sees)")
        self._timeout = w.FloatInput.from_param(m.param.timeout_s, label="Timeout per case (s)",
                                               start=None, end=None)
        self._sweep_n = w.MultiChoice.from_param(m.param.sweep_n_states, label="Sweep over N")

        self._run = w.Button(label="Run", color="primary",
                             disabled=m.param.running, sizing_mode="stretch_width")
        self._sweep = w.Button(label="Sweep", color="primary", variant="outline",
                               disabled=m.param.running, sizing_mode="stretch_width")
        self._cancel = w.Button(label="Cancel", color="danger",
                                disabled=pn.bind(lambda busy: not busy, m.param.busy),
                                sizing_mode="stretch_width")
        self._run.on_click(self._guard(m.run))
        self._sweep.on_click(self._guard(m.sweep))
        self._cancel.on_click(self._guard(m.cancel))

        self._status = _md(pn.bind(self._status_text, m.param.status,
                                                m.param.busy),
                                        sizing_mode="stretch_width", margin=(0, 10))
        self._alert = pn.pane.Alert(m.param.alert, alert_type=m.param.alert_kind,
                                    visible=pn.bind(bool, m.param.alert),
                                    sizing_mode="stretch_width")
        self._dismiss = w.Button(label="Dismiss", color="light",
                                 visible=pn.bind(bool, m.param.alert), width=110)
        self._dismiss.on_click(lambda event: m.clear_alert())
        self._example = _md(
            pn.bind(lambda show, text: f"*{text}*" if show else "", m.param.show_example,
                    m.param.example_label),
            sizing_mode="stretch_width", margin=(0, 10), styles={"color": "#555"})

        plot_opts = dict(sizing_mode="stretch_width", min_height=340, linked_axes=False)
        self._plots = [
            pn.pane.HoloViews(m.compile_plot, **plot_opts),
            pn.pane.HoloViews(m.size_plot, **plot_opts),
            pn.pane.HoloViews(m.rollout_plot, **plot_opts),
            pn.pane.HoloViews(m.runtime_plot, **plot_opts),
        ]
        view_controls = pn.Row(
            w.Select.from_param(m.param.stage, label="Compile time: stage", width=170),
            pn.Column(_md("Plot target", margin=(0, 10)),
                      w.RadioButtonGroup.from_param(m.param.show_target, color="light")),
            w.MultiChoice.from_param(m.param.rollout_states, label="Rollout states",
                                     max_items=8, width=320),
            w.Checkbox.from_param(m.param.show_example, margin=(34, 10, 10, 10)),
            sizing_mode="stretch_width",
        )
        legend_note = _md(
            pn.bind(lambda stage, note: (
                "**k**: fitted exponent of size or time ≈ c·N^k (0 = flat, 1 = linear, "
                "2 = quadratic). Program size: solid = StableHLO before optimisation, dashed = "
                "optimised HLO."
                + (" Compile stages: dotted = trace, dashed = lower, solid = XLA compile."
                   if stage == "all stages" else "")
                + " Faded points without a line: the shipped example sweep, beside your own "
                  "measurements. Click a legend entry to hide its lines; hover a point for exact "
                  "values. "
                + note),
                m.param.stage, m.param.rollout_note),
            sizing_mode="stretch_width", margin=(0, 10), styles={"font-size": "0.9em",
                                                                  "color": "#555"})
        self._grid = pn.Column(
            pn.Row(self._plots[0], self._plots[1], sizing_mode="stretch_width"),
            pn.Row(self._plots[2], self._plots[3], sizing_mode="stretch_width"),
            sizing_mode="stretch_width")

        # Results table, with CSV download.
        self._table = w.Tabulator(
            pn.bind(lambda results: m.table(), m.param.results),
            pagination="local", page_size=12, selectable=1, show_index=False,
            disabled=True, sizing_mode="stretch_width", height=440,
            header_filters={"representation": {"type": "input", "func": "like"},
                            "status": {"type": "input", "func": "like"},
                            "source": {"type": "input", "func": "like"}},
            formatters={c: {"type": "money", "precision": 4, "symbol": ""}
                        for c in ("trace_s", "lower_s", "compile_s")},
            # Fixed widths: fitting 21 columns to their data took the browser about 0.3 s.
            widths=dict(_COLUMN_WIDTHS),
        )
        self._table.param.watch(self._row_selected, "selection")
        # Tabulator's selection is a row position: when new rows arrive (newest first) the
        # highlight would slide onto another row while the model still means the first one.
        self._table.param.watch(self._keep_selection, "value")
        self._csv = w.FileDownload(callback=lambda: io.BytesIO(m.csv_bytes()),
                                   filename="pytree-explorer-results.csv",
                                   label="Download results (CSV)", color="light", width=240)
        self._html = w.FileDownload(callback=self._html_file,
                                    filename="pytree-explorer-plots.html",
                                    label="Export plots (standalone HTML)", color="light",
                                    width=260)
        self._refresh = w.Button(label="Load rows stored by others", color="light", width=240)
        self._refresh.on_click(self._guard(m.refresh))
        results_tab = pn.Column(
            pn.Row(self._csv, self._html, self._refresh),
            _md("Select a row, then open **Programs** to see its jaxpr, "
                             "StableHLO, optimised HLO and equation blame.",
                             margin=(0, 10)),
            self._table, sizing_mode="stretch_width")
        if self._is_served:
            # Served: the table (below the plots) is sent once the page has drawn, so the plots
            # do not wait for it.
            results_tab[2] = _md("*Loading the results table…*", margin=(0, 10))
            pn.state.onload(lambda: results_tab.__setitem__(2, self._table))

        # The Programs tab (five code viewers, a table, selects) is built the first time it is
        # opened: most visits never open it, and its widgets cost every page load time.
        self._programs_tab = pn.Column(sizing_mode="stretch_width")
        self._tabs = pn.Tabs(("Results", results_tab), ("Programs", self._programs_tab),
                             dynamic=True, sizing_mode="stretch_width")
        self._tabs.param.watch(self._tab_opened, "active")

        self._controls = pn.Column(
            self._problem, self._n_preset, self._n_entry, self._horizon,
            _md("**Representations**", margin=(10, 10, 0, 10)), self._reps,
            _md("**Target**", margin=(10, 10, 0, 10)), self._target,
            self._unroll, self._backend, self._timeout,
            pn.Row(self._run, self._cancel, sizing_mode="stretch_width"),
            self._sweep_n, self._sweep,
            _md(
                f"Trajectories are captured when N ≤ {ROLLOUT_MAX_N}.",
                styles={"font-size": "0.85em", "color": "#555"}),
            sizing_mode="stretch_width", min_width=260)
        self._main = pn.Column(
            _md(_INTRO, sizing_mode="stretch_width", margin=(0, 10)),
            pn.Row(self._alert, self._dismiss, sizing_mode="stretch_width"),
            self._status, self._example, view_controls, legend_note, self._grid, self._tabs,
            sizing_mode="stretch_width")

    def _tab_opened(self, event: param.parameterized.Event) -> None:
        if event.new == 1 and not self._programs_tab.objects:
            self._programs_tab.objects = [self._program_panel()]

    def _program_panel(self) -> pn.Column:
        m = self.model
        w = pn.widgets
        inspect = w.Button(label="Show programs of the selected row", color="primary",
                           width=280, disabled=pn.bind(lambda s: s is None, m.param.selected))
        inspect.on_click(self._guard(m.inspect))
        self._jaxpr = _text_view(pn.bind(lambda p: p.get("jaxpr") or "", m.param.program))
        self._stablehlo = _text_view(pn.bind(lambda p: p.get("stablehlo") or "",
                                             m.param.program))
        self._hlo = _text_view(pn.bind(
            lambda p: p.get("hlo") or (p and "(this backend gives no optimised HLO text)" or ""),
            m.param.program))
        self._blame = w.Tabulator(
            pn.bind(lambda b: b if b is not None else pd.DataFrame(columns=list(BLAME_COLUMNS)),
                m.param.blame_table),
            disabled=True, show_index=False, pagination="local", page_size=15,
            sizing_mode="stretch_width", height=420)
        program_title = _md(
            pn.bind(self._program_title, m.param.program, m.param.selected), margin=(0, 10))

        compare = w.Button(label="Compare", color="primary", width=140)
        compare.on_click(self._guard(m.compare))
        verdict = _md(pn.bind(self._verdict_text, m.param.comparison),
                                   sizing_mode="stretch_width")
        jaxpr_diff = _text_view(pn.bind(lambda c: c.get("jaxpr_diff", ""), m.param.comparison),
                                diff=True)
        hlo_diff = _text_view(pn.bind(lambda c: c.get("hlo_diff", ""), m.param.comparison),
                              diff=True)
        compare_row = pn.Row(
            w.Select.from_param(m.param.compare_a, label="Compare", width=150),
            w.Select.from_param(m.param.compare_b, label="with", width=150),
            pn.Column(pn.Spacer(height=18), compare),
            _md("at the problem, N, horizon and plot target chosen above.",
                             margin=(32, 10, 0, 10)))
        return pn.Column(
            pn.Row(inspect, program_title),
            pn.Tabs(("jaxpr", self._jaxpr), ("StableHLO", self._stablehlo),
                    ("Optimised HLO", self._hlo), ("Equation blame", self._blame),
                    dynamic=True, sizing_mode="stretch_width"),
            _md("### Are two representations the same program to XLA?",
                             margin=(20, 10, 0, 10)),
            compare_row, verdict,
            pn.Tabs(("jaxpr diff", jaxpr_diff), ("StableHLO diff", hlo_diff), dynamic=True,
                    sizing_mode="stretch_width"),
            sizing_mode="stretch_width")

    # -- callbacks -----------------------------------------------------------------------
    def _guard(self, action: Any) -> Any:
        """A click handler that runs ``action`` and turns any unexpected error into an alert:
        a user action never kills the page or leaves only a traceback in the server log."""

        def handler(event: Any) -> None:
            try:
                action()
            except Exception as err:  # noqa: BLE001
                self.model.param.update(alert=f"Unexpected error: {type(err).__name__}: {err}",
                                        alert_kind="danger")

        return handler

    @staticmethod
    def _program_title(program: dict, selected: int | None) -> str:
        if program:
            return f"**Programs of:** {program['title']}"
        if selected is not None:
            return f"Row {selected} selected: press the button."
        return "No row selected yet."

    @staticmethod
    def _status_text(status: str, busy: bool) -> str:
        return f"**Status:** {status}" + (" *(press Cancel to stop)*" if busy else "")

    @staticmethod
    def _verdict_text(comparison: dict) -> str:
        if not comparison:
            return ""
        same = comparison.get("same_hlo")
        head = ("**Verdict: the same program to XLA**" if same else
                "**Verdict: different programs**")
        return f"{head}: {comparison['title']}\n\n`{comparison['verdict']}`"

    def _preset_chosen(self, event: param.parameterized.Event) -> None:
        if event.new:
            self.model.n_states = int(event.new)

    def _n_changed(self, event: param.parameterized.Event) -> None:
        # Keep the preset list honest: it shows N when N is a preset, and nothing otherwise.
        self._n_preset.value = event.new if event.new in N_CHOICES else 0

    def _row_selected(self, event: param.parameterized.Event) -> None:
        rows = event.new or []
        if not rows:
            self.model.selected = None
            return
        frame = self._table.value  # selection indexes the table's value, whatever its sorting
        index = rows[0]
        if 0 <= index < len(frame):
            self.model.selected = int(frame.iloc[index]["id"])

    def _keep_selection(self, event: param.parameterized.Event) -> None:
        """Keep the highlight on the selected row's id whatever rows came before it."""
        selected, frame = self.model.selected, event.new
        if selected is None or frame is None or "id" not in frame:
            return
        positions = [i for i, row_id in enumerate(frame["id"]) if row_id == selected]
        self._table.selection = positions[:1]

    def _html_file(self) -> io.BytesIO:
        try:
            return io.BytesIO(self.model.html_bytes())
        except Exception as err:  # noqa: BLE001 - shown in the page, never a dead page
            self.model.alert = f"Could not export the plots: {err}"
            return io.BytesIO(b"")

    def __panel__(self) -> pn.viewable.Viewable:
        # ``pn.state.served`` only answers for the served script's own frame; from a library
        # the same question is whether this page belongs to a server session.
        if _served():
            # Bootstrap rather than Fast: the Fast design pulls a web font from Google, which
            # fails (a console error) wherever the page is used offline.
            template = pn.template.BootstrapTemplate(
                title=TITLE, sidebar=[self._controls], main=[self._main], sidebar_width=320,
                header_background="#1f4e79")
            return template
        return pn.Row(pn.Column(_md(f"## {TITLE}"), self._controls, width=300),
                      self._main, sizing_mode="stretch_width")


def dashboard(problems: Any = (), **params: Any) -> Dashboard:
    """The explorer as a Panel component: ``explorer.dashboard()`` in a notebook (after
    ``pn.extension()``), or ``.servable()`` in an app. Keyword arguments set the model's
    parameters (``problem``, ``n_states``, ``representations``...) or pass ``store`` /
    ``executor``; ``problems`` lists your own (:func:`explorer.define_problem`), shown in the
    problem menu beside the built-in ones."""
    from ._problems import register  # noqa: PLC0415

    for problem in problems:
        register(problem)
    pn.extension("tabulator")
    return Dashboard(**params)


def serve(*, address: str = "127.0.0.1", port: int = 5006, show: bool = False) -> None:
    """Serve the explorer page at ``http://ADDRESS:PORT/explorer_app`` until interrupted
    (``pytree-explorer serve``); the problems defined in this process are in its menu."""
    origins = [f"{host}:{port}" for host in ("localhost", "127.0.0.1", address)]
    def page() -> pn.viewable.Viewable:  # the template a served page gets (``__panel__``)
        return dashboard().__panel__()

    pn.serve({"explorer_app": page},
             address=address, port=port, websocket_origin=sorted(set(origins)), show=show,
             title="PyTree Compile Explorer")
