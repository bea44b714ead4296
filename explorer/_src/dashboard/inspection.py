"""The dashboard's inspection sections: a row's programs, two representations compared, and
two groups of rows compared (the Programs and Compare runs tabs). Both are built the first
time their tab is opened; :class:`explorer._src.dashboard.page.Dashboard` lays them out."""

from __future__ import annotations

import html
from typing import Any

import pandas as pd
import panel as pn
from bokeh.models.widgets.tables import NumberFormatter

from .. import plots as _plots
from ..core.blame import BLAME_COLUMNS
from .model.view import PRESENTER_PLOT_OPTS
from .model.watched import TABLE_COLUMNS as WATCH_TABLE_COLUMNS
from .plotcache import plotting, render_figure
from .sections import _TABLE_FONT, _guard, _md, _presenter_ready, _Section

__all__ = ["ProgramsSection", "RunsSection", "WatchedSection", "program_html",
           "side_by_side_html"]


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
    # Two columns of half the width each, long lines wrapped: sized by their content, one
    # column of long lines left the other a sliver (presenter mode at 1280 px).
    cell = ('<td style="vertical-align:top;white-space:pre-wrap;overflow-wrap:anywhere;'
            'font-family:monospace;font-size:var(--explorer-code-font-size, 12px);'
            'padding:0 8px;background:{}">{}</td>')
    rows = "".join(
        "<tr>" + cell.format("#ffebe9" if a else "transparent", html.escape(a))
        + cell.format("#e6ffec" if b else "transparent", html.escape(b)) + "</tr>"
        for a, b in pairs)
    return ('<table class="side-by-side" style="border-collapse:collapse;width:100%;'
            'table-layout:fixed"><colgroup><col style="width:50%"><col style="width:50%">'
            '</colgroup>'
            f'<thead><tr><th style="text-align:left">only in {left}</th>'
            f'<th style="text-align:left">only in {right}</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>")


_PRE_STYLE = {"overflow": "auto", "font-size": "var(--explorer-code-font-size, 12px)",
              "border": "1px solid #ddd", "background": "#fafafa", "padding": "0 6px"}


def _text_view(text: Any, diff: bool = False) -> pn.pane.HTML:
    return pn.pane.HTML(pn.bind(program_html, text, diff), sizing_mode="stretch_width",
                        height=420, styles=_PRE_STYLE, disable_math=True)


def _figure_pane(plot: Any, layout: dict[str, Any]) -> pn.pane.Bokeh:
    """A pane showing the Bokeh figure of the HoloViews object ``plot`` (a ``pn.bind`` of
    one), drawn again when it changes, as ``pn.pane.HoloViews(plot, **layout)`` would show it,
    but drawn by :func:`render_figure`: one drawing at a time in the process, never beside a
    figure drawn ahead for the next page (HoloViews switches Bokeh's validation off for the
    whole process while it updates a plot's data, and a figure built meanwhile broke)."""
    return pn.pane.Bokeh(pn.bind(render_figure, plot, layout), autodispatch=False, **layout)


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
        # No fixed widths in these rows: at a projector's font sizes a label outgrew its
        # button's width and ran under the text beside it. The rows wrap instead (FlexBox).
        inspect = w.Button(label="Show programs of the selected row", color="primary",
                           disabled=pn.bind(lambda s: s is None, p.param.selected))
        inspect.on_click(_guard(m, m.inspect))
        # A row never measured is compiled first: what that costs, and the user's go.
        go = w.Button(label="Compile it and show its programs", color="warning", width=280,
                      visible=pn.bind(bool, p.param.confirm))
        go.on_click(_guard(m, p.confirm_inspect))
        cost = _md(pn.bind(lambda c: c.get("message", ""), p.param.confirm),
                   visible=pn.bind(bool, p.param.confirm), sizing_mode="stretch_width",
                   styles={"color": "#8a5300"})
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

        compare = w.Button(label="Compare", color="primary", min_width=120)
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
        compare_row = _presenter_ready(pn.FlexBox(
            w.Select.from_param(p.param.compare_a, label="Compare", width=150),
            w.Select.from_param(p.param.compare_b, label="with", width=150),
            compare,
            _md("at the problem, N, horizon and plot target chosen above.",
                css_classes=["compare-caption"]),
            align_items="flex-end", sizing_mode="stretch_width"))
        # Tabs that are not ``dynamic``: Panel keeps a hidden tab's models off the page and
        # brings them up to date there with its CDN's stylesheets (a second row's jaxpr while
        # StableHLO is in front), which the page then asks that host for. Every text is cut at
        # MAX_TEXT_CHARS, so a row's programs all go to the page at once.
        return pn.Column(
            pn.FlexBox(inspect, program_title, align_items="center",
                       sizing_mode="stretch_width"),
            pn.Row(go, cost, sizing_mode="stretch_width"),
            pn.Tabs(("jaxpr", jaxpr), ("StableHLO", stablehlo), ("Optimised HLO", hlo),
                    # In a Column: the table's own model is replaced when its rows first come,
                    # and Bokeh's tabs then laid the new one out below the other tabs' space
                    # (about 430 px down: an empty screen at 1280x800) instead of in it.
                    ("Equation blame", pn.Column(blame, sizing_mode="stretch_width")),
                    sizing_mode="stretch_width"),
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
        with plotting():
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
        plot = _figure_pane(
            pn.bind(self._ratio_plot, r.param.runs_table, r.param.runs_metric,
                    self.model.view.param.presenter),
            dict(sizing_mode="stretch_width", height=_plots.PLOT_HEIGHT + 20))
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


class WatchedSection(_LazySection):
    """Your program: a run ``pytree-explorer watch --store`` kept, its functions ranked by
    compile time (a plot and a table) and the findings of the row selected. Built, and the
    store read, when first shown; "Reload" reads it again."""

    @staticmethod
    def _ranking_plot(ranking: pd.DataFrame | None, presenter: bool) -> Any:
        with plotting():
            plot = _plots.compile_ranking_plot(ranking)
            return plot.opts(PRESENTER_PLOT_OPTS, backend="bokeh") if presenter else plot

    def build(self) -> None:
        if self.built:
            return
        self.model.watched.load()
        super().build()

    def _contents(self) -> pn.Column:
        wp = self.model.watched
        w = pn.widgets
        reload = w.Button(label="Reload", color="light", width=100)
        reload.on_click(_guard(self.model, wp.load))
        choose = _presenter_ready(pn.Row(
            w.Select.from_param(wp.param.watch_run, width=520), reload))
        plot = _figure_pane(
            pn.bind(self._ranking_plot, wp.param.watch_ranking, self.model.view.param.presenter),
            dict(sizing_mode="stretch_width", min_height=_plots.PLOT_HEIGHT))
        self.table = w.Tabulator(
            pn.bind(self._table, wp.param.watch_ranking), disabled=True, show_index=False,
            selectable=1, pagination="local", page_size=12, sizing_mode="stretch_width",
            selection=[] if wp.watch_selected is None else [wp.watch_selected],
            stylesheets=[_TABLE_FONT],
            visible=pn.bind(lambda t: t is not None and len(t) > 0, wp.param.watch_ranking),
            formatters={c: NumberFormatter(format="0.000", nan_format="-", null_format="-")
                        for c in ("compile_s", "trace_s", "lower_s")}
            | {"share": NumberFormatter(format="0%", nan_format="-", null_format="-")})
        self.table.param.watch(self._row_selected, "selection")
        wp.param.watch(lambda e: self.table.param.update(selection=[] if e.new is None
                                                         else [e.new]), "watch_selected")
        return pn.Column(
            _md("Which compiles make a whole program slow to start, and why: run it under "
                "`pytree-explorer watch --store PATH script.py [args...]` with this page's "
                "store as `PATH`, then pick the run here. Select a function for its "
                "findings.", margin=(0, 10)),
            choose, _md(wp.param.watch_headline, sizing_mode="stretch_width"), plot,
            # Python-Markdown, not markdown-it: that one links "train.py:7" to a web site.
            self.table, _md(wp.param.watch_findings, renderer="markdown",
                            sizing_mode="stretch_width"),
            sizing_mode="stretch_width")

    @staticmethod
    def _table(ranking: pd.DataFrame | None) -> pd.DataFrame:
        if ranking is None:
            return pd.DataFrame(columns=list(WATCH_TABLE_COLUMNS))
        return ranking[list(WATCH_TABLE_COLUMNS)].astype({"reason": object}).fillna(
            {"reason": ""})

    def _row_selected(self, event: Any) -> None:
        rows = event.new or []
        if rows and rows[0] != self.model.watched.watch_selected:
            self.model.watched.watch_selected = int(rows[0])
