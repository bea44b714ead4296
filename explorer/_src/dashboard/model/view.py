"""How a dashboard page looks at its results: view choices, the four plots, their redraws.

Each plot is a pure function of one query param: the results and the choices it filters on
(``compile_query``, ``metrics_query``, ``rollout_query``). A change of what a plot reads asks
for a redraw, which sets its query on the next turn of the page's event loop: the widget the
user touched answers at once, and changes that come together draw once. While a run of
several cases measures on a page (:meth:`PlotView.hold_redraws`), a new result redraws the
compile-time plot only; the other plots are drawn once, when the run ends or the user changes
the view.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import param

from ... import plots as _plots
from ...jobs.jobs import MAX_ROLLOUT_VARS
from ..plotcache import PLOT_CACHE, array_key, frame_key, plotting
from .controls import ROLLOUT_MAX_N, CaseControls
from .results import Results
from .session import Batch, Session

__all__ = ["PRESENTER_PLOT_OPTS", "PlotView", "query_flag"]

_QUERY_DOC = "What the {} shows, as of its last redraw (the plot reads only this)."

# Presenter mode: the plots' fonts for a projector (about 1.6 times the usual ticks and legends;
# titles less, or they outgrow a half-width plot), and no toolbar beside the title (hover and the
# legend's click-to-hide still work).
PRESENTER_PLOT_OPTS = {
    "Overlay": dict(fontsize={"title": "15pt", "labels": "16pt", "xticks": "15pt",
                              "yticks": "15pt", "legend": "13pt"}, toolbar=None),
    "Labels": dict(text_font_size="12pt"),
}

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off", "")


def query_flag(raw: str | bytes | None) -> bool | None:
    """A yes/no value from a URL query (``?presenter=true``), read strictly: ``true``/``1``/
    ``yes``/``on`` and ``false``/``0``/``no``/``off``; anything else is ``None`` (ignored). The
    text is only compared with those words, never evaluated."""
    if raw is None:
        return None
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    word = raw.strip().lower()
    return True if word in _TRUE else False if word in _FALSE else None


def projector_title(title: str) -> str:
    """``title`` in lines a half-width plot holds at a projector's font size: what it shows,
    then its case, then the rest ("Compile time vs N / (decay, H=200, loss) / stages at
    N=100"); on one line the case ran off the plot's edge."""
    return title.replace(" (", "\n(", 1).replace("): ", ")\n", 1)


def _for_projector(plot: Any) -> Any:
    """A copy of ``plot`` with :data:`PRESENTER_PLOT_OPTS`; a legend drawn inside the frame
    moves beside it (at these sizes it would cover points); the title is in lines
    (:func:`projector_title`)."""
    import holoviews as hv  # noqa: PLC0415 - loaded by then: ``plot`` is a HoloViews object

    options = {name: dict(opts) for name, opts in PRESENTER_PLOT_OPTS.items()}
    kwargs = hv.Store.lookup_options("bokeh", plot, "plot").kwargs
    if kwargs.get("legend_position") == "top_left":
        options["Overlay"]["legend_position"] = "right"
    if kwargs.get("title"):
        options["Overlay"]["title"] = projector_title(kwargs["title"])
    return plot.opts(options, backend="bokeh", clone=True)


class PlotView(param.Parameterized):
    """The view choices and the four plots of a page (compile time, size, rollouts, runtime)."""

    stage = param.Selector(default="total", objects=list(_plots.STAGES), label="Compile stage")
    show_target = param.Selector(default="loss", objects=["loss", "grad"], label="Plot target")
    rollout_states = param.ListSelector(default=[], objects=[], label="Rollout states")
    rollout_note = param.String(default="", precedence=-1)
    presenter = param.Boolean(default=False, label="Presenter mode (large fonts)",
                              doc="Larger fonts in the plots and on the page, for a projector.")

    compile_query = param.Dict(default={}, precedence=-1,
                               doc=_QUERY_DOC.format("compile-time plot"))
    metrics_query = param.Dict(default={}, precedence=-1,
                               doc=_QUERY_DOC.format("program-size and runtime plots"))
    rollout_query = param.Dict(default={}, precedence=-1, doc=_QUERY_DOC.format("rollout plot"))

    controls = param.ClassSelector(class_=CaseControls, precedence=-1)
    results = param.ClassSelector(class_=Results, precedence=-1)
    session = param.ClassSelector(class_=Session, precedence=-1)

    def __init__(self, **params: Any):
        super().__init__(**params)
        self._redraws = Batch(self.session.post, self._flush_redraw)
        # The plots that wait for the compile-time plot to go out (see _flush_redraw).
        self._later_redraws = Batch(functools.partial(self.session.post, later=True),
                                    self._flush_redraw)
        self._results_key = frame_key(self.results.frame)
        # Plots a new result asked to redraw while a run holds them (see hold_redraws).
        self._holding = False
        self._held: set[str] = set()
        self._results_driven = False
        self._rollout_data: dict[str, tuple[list[str], np.ndarray]] = {}
        self._rollout_n: int | None = None
        self._rollout_signature: tuple | None = None
        self.controls.param.watch(self.refresh_rollouts, ["problem", "horizon", "unroll",
                                                           "n_states", "representations"])
        self.controls.param.watch(self._view_changed, ["problem", "horizon", "unroll",
                                                        "representations"])
        self.controls.param.watch(self._follow_target, "target")
        self.results.param.watch(self._view_changed, "frame")
        # After the redraw the same new rows ask for (on a page: the next turn), so a new
        # result's compile-time plot does not wait for the trajectories to be looked up.
        self.results.param.watch(self._frame_changed, "frame")
        self.param.watch(self._view_changed, ["stage", "show_target", "rollout_states",
                                              "presenter"])
        self.refresh_rollouts()
        self._redraw({"compile", "metrics"})

    # -- what the plots read -----------------------------------------------------------
    def _filters(self) -> dict[str, Any]:
        c = self.controls
        # The ticked representations only, as the sidebar says (the example holds all eight).
        return dict(problem=c.problem, horizon=c.horizon, unroll=c.unroll,
                    target=self.show_target, representations=tuple(c.representations or ()))

    def _query(self, kind: str) -> dict[str, Any]:
        if kind == "rollout":
            return dict(data=self._rollout_data, n=self._rollout_n, states=self.rollout_states,
                        problem=self.controls.problem, horizon=self.controls.horizon,
                        presenter=self.presenter)
        extra = {"stage": self.stage} if kind == "compile" else {}
        return dict(frame=self.results.frame, key=self._results_key, filters=self._filters(),
                    presenter=self.presenter, **extra)

    def _frame_changed(self, event: param.parameterized.Event) -> None:
        # New rows' trajectories are looked up without an event (they may be held, see
        # hold_redraws); the example shown or hidden passes its event on (never held).
        self.session.post(self.refresh_rollouts if self.results.adding_rows
                          else functools.partial(self.refresh_rollouts, event))

    def _follow_target(self, event: param.parameterized.Event) -> None:
        if event.new in ("loss", "grad"):
            self.show_target = event.new

    # -- redraws -----------------------------------------------------------------------
    def _view_changed(self, *events: param.parameterized.Event) -> None:
        names = {"results" if e.obj is self.results else e.name for e in events}
        results_driven = self._results_driven or (names == {"results"}
                                                  and self.results.adding_rows)
        if "results" in names:
            self._results_key = frame_key(self.results.frame)
        if names & {"horizon", "unroll"} and (bad := self.controls.bad_view()):
            # Keep the plots as they are: emptying them and titling them "H=None" tells nobody
            # anything. Say what is wrong where the eye is (status) and in the alert.
            self.session.show(f"Bad input: {bad}", "danger")
            self.session.status = f"Bad input: {bad} (the plots still show the last valid choice)"
            return
        if names & {"horizon", "unroll"} and self.session.alert.startswith("Bad input"):
            self.session.clear_alert()  # the value that was wrong is right again
        which = set()
        if names & {"results", "stage", "problem", "horizon", "unroll", "show_target",
                    "representations"}:
            which.add("compile")
        if names & {"results", "problem", "horizon", "unroll", "show_target", "representations"}:
            which.add("metrics")
        if "rollout_states" in names:
            which.add("rollout")
        if "presenter" in names:
            which |= {"compile", "metrics", "rollout"}
        self._redraw(which, results_driven=results_driven)

    def _redraw(self, which: set[str], results_driven: bool = False) -> None:
        """Ask for the plots in ``which`` to be drawn again, on the next turn of the event loop
        when the page gave one (:attr:`Session.dispatch`), else at once. While redraws are held
        (:meth:`hold_redraws`), what a new result asks of the plots other than the compile-time
        one waits; any other change draws those too."""
        if self._holding and results_driven:
            self._held |= which - {"compile"}
            which = which & {"compile"}
        elif self._held:
            which, self._held = which | self._held, set()
        self._redraws.add(*sorted(which))

    def hold_redraws(self) -> None:
        """From now until :meth:`release_redraws`, a new result (a row, its trajectories)
        redraws the compile-time plot only, the one a new result is looked for in; the
        program-size, runtime and rollout plots are drawn once, at the release. A run of several
        cases on a page holds them: each of its cases waits for the page to draw what the one
        before brought (no drawing during a timed compile), and redrawing all four plots after
        every case took most of a run's time. A change the user makes draws every plot it asks
        for, held ones included."""
        self._holding = True

    def release_redraws(self) -> None:
        """Draw what was held (after what was sent before), and stop holding."""
        self._holding = False
        if self._held:
            held, self._held = self._held, set()
            self._later_redraws.add(*sorted(held))

    def _flush_redraw(self, names: list[str]) -> None:
        which = set(names)
        # On a page, the compile-time plot (the one a new result is looked for in) goes out on
        # its own, the others once it has been sent: it does not wait for their rendering.
        now = {"compile"} if (self.session.dispatch is not None and "compile" in which
                              and len(which) > 1) else which
        self.param.update(**{f"{name}_query": self._query(name) for name in sorted(now)})
        if rest := which - now:
            self._later_redraws.add(*sorted(rest))

    def after_redraws(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the page's loop once no redraw is waiting (re-posted behind them)."""
        if self.session.closed or not (self._redraws.pending or self._later_redraws.pending):
            fn()
        else:
            self.session.post(lambda: self.after_redraws(fn),
                              later=self._later_redraws.pending)

    # -- the plots ---------------------------------------------------------------------
    def _cached(self, title: str, key: tuple, draw: Callable[[], Any],
                presenter: bool = False) -> Any:
        """``draw()`` through :data:`PLOT_CACHE`, restyled for a projector when ``presenter``
        (a copy, cached beside the plain plot); a plot that failed is shown, never cached."""
        try:
            plot = PLOT_CACHE.get(key, draw)
            if presenter:
                plot = PLOT_CACHE.get((*key, "presenter"), lambda: _for_projector(plot))
            return plot
        except Exception as err:  # noqa: BLE001 - shown in the plot and in the alert
            self.session.show(f"Could not draw {title.lower()}: {type(err).__name__}: {err}")
            with plotting():
                return _plots.placeholder(title, "Could not draw this plot (see the alert).")

    def _metric(self, kind: str, title: str, draw: Callable, query: dict[str, Any],
                **extra: Any) -> Any:
        filters = query["filters"]
        key = (kind, query["key"], *sorted(filters.items()), *extra.values())
        return self._cached(title, key, lambda: draw(query["frame"], **extra, **filters),
                            query.get("presenter", False))

    @param.depends("compile_query")
    def compile_plot(self):
        q = self.compile_query or self._query("compile")
        return self._metric("compile", "Compile time", _plots.compile_time_plot, q,
                            stage=q["stage"])

    @param.depends("metrics_query")
    def size_plot(self):
        return self._metric("size", "Program size", _plots.program_size_plot,
                            self.metrics_query or self._query("metrics"))

    @param.depends("metrics_query")
    def runtime_plot(self):
        return self._metric("runtime", "Runtime", _plots.runtime_plot,
                            self.metrics_query or self._query("metrics"))

    @param.depends("rollout_query")
    def rollout_plot(self):
        q = self.rollout_query or self._query("rollout")
        if q["n"] is None:
            title = "Rollout trajectories"
        else:
            title = f"Rollouts at N={q['n']} ({q['problem']}, H={q['horizon']})"
        message = (f"No trajectories for {q['problem']}, H={q['horizon']} and the ticked "
                   f"representations: rows measured without them (sweeps, N > {ROLLOUT_MAX_N}) "
                   f"have none. Press Run with N ≤ {ROLLOUT_MAX_N} to capture them.")
        data = tuple(sorted((rep, array_key(names, array))
                            for rep, (names, array) in q["data"].items()))
        states = tuple(q["states"] or ())
        return self._cached("Rollouts", ("rollout", data, states, title, message),
                            lambda: _plots.rollout_plot(
                                _plots.rollout_frame(q["data"], states or None),
                                title=title, message=message),
                            q.get("presenter", False))

    def plots(self) -> list:
        """The four plots as they are now (for notebooks and export)."""
        return [self.compile_plot(), self.size_plot(), self.rollout_plot(), self.runtime_plot()]

    # -- which trajectories ------------------------------------------------------------
    def refresh_rollouts(self, *events: param.parameterized.Event) -> None:
        """Pick the trajectories to draw: at the chosen N if captured there, else at the most
        recent N that has them; per representation, those of its latest row that has them (a
        case measured again shows its earlier trajectories, the same numbers, until its new
        row's arrive: its line does not vanish while they are captured)."""
        c = self.controls
        rows = _plots.select(self.results.frame, problem=c.problem, horizon=c.horizon,
                             unroll=c.unroll, latest=False)
        data: dict[str, tuple[list[str], np.ndarray]] = {}
        chosen = None
        ticked = list(c.representations or ())
        if not rows.empty:
            # Only the ticked representations, as in every other plot of the page.
            rows = rows[rows["representation"].isin(ticked)]
            rows = rows[rows["n_states"] <= ROLLOUT_MAX_N].sort_values("finished_at")
            recent = list(dict.fromkeys(rows["n_states"].astype(int).tolist()[::-1]))
            for n in dict.fromkeys([c.n_states, *recent]):
                for record in rows[rows["n_states"] == n].to_dict("records")[::-1]:
                    if record["representation"] in data:
                        continue
                    found = self.results.rollout(int(record["id"]))
                    if found is not None:
                        data[record["representation"]] = found
                if data:
                    chosen = int(n)
                    break
        names: list[str] = []
        for found in data.values():
            names = list(found[0])
            break
        current = [s for s in self.rollout_states if s in names]
        if not current and names:
            current = [names[i] for i in sorted({0, len(names) // 2, len(names) - 1})]
        # The title names the problem and horizon: the same trajectories can be found under
        # another title (an emptied horizon box keeps every horizon), so it is part of the key.
        missing = [rep for rep in ticked if rep not in data]
        signature = (chosen, c.problem, c.horizon, tuple(missing),
                     tuple(sorted((rep, id(found[1])) for rep, found in data.items())))
        if signature == self._rollout_signature:
            return  # the same trajectories under the same title: no need to draw them again
        self._rollout_signature = signature
        self._rollout_data, self._rollout_n = data, chosen
        self.param.rollout_states.objects = names
        note = (f"Rollouts are captured for N ≤ {ROLLOUT_MAX_N} (at most {MAX_ROLLOUT_VARS} "
                f"states each); shown: N={chosen}." if chosen is not None else
                f"Rollouts are captured for N ≤ {ROLLOUT_MAX_N}; none for this selection yet.")
        if missing and chosen is not None:
            note += f" No trajectory at N={chosen} for: {', '.join(missing)}."
        # New trajectories, looked up for new results (no event: see __init__ and the
        # measuring's capture), may be held; a change of the controls never is.
        held = not events
        self._results_driven = held  # read by _view_changed, which the update calls
        try:
            self.param.update(rollout_states=current, rollout_note=note)
        finally:
            self._results_driven = False
        self._redraw({"rollout"}, results_driven=held)
