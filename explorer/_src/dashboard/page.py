"""The Panel dashboard: a thin view of :class:`explorer._src.dashboard.model.model.ExplorerModel`.

Served with ``panel serve apps/explorer_app.py`` (a template around it), or shown in a notebook
after ``pn.extension()`` with ``explorer.dashboard()`` (the plain layout). All behaviour lives in
the model; this module only builds widgets from its parameters, lays them out, and hands updates
from background threads to the session's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import urllib.parse
import weakref
from typing import Any

import panel as pn
import param
from panel.io.state import set_curdoc

from .inspection import ProgramsSection, RunsSection, WatchedSection, program_html
from .sections import ControlsSection, MessagesSection, PlotsSection, ResultsSection, _guard, _md
from .model.model import ExplorerModel
from .model.view import query_flag
from .plotcache import warm_plotting
from ..compat import template_without_web_fonts
from ..jobs.worker import WORKER_MEMORY_ENV, limit_shared_worker, memory_limit_bytes

__all__ = ["Dashboard", "ExplorerModel", "dashboard", "program_html"]

TITLE = "PyTree Compile Explorer"
REFRESH_MS = 5000
PRESENTER_QUERY = "presenter"
EXAMPLE_QUERY = "example"
# Presenter mode: larger text for a projector. These custom properties inherit into every
# widget's shadow root: Bokeh widgets and tabs read ``--bokeh-font-size``; the results table,
# the form controls and the program texts our ``--explorer-*`` ones (``_dashboard_sections``);
# the plots restyle themselves (``PlotView.presenter``).
PRESENTER_STYLES = {"--bokeh-font-size": "18px", "--explorer-table-font-size": "18px",
                    "--explorer-input-font-size": "18px", "--explorer-tag-font-size": "16px",
                    "--explorer-code-font-size": "17px"}
PRESENTER_ROOT_FONT = "125%"


# What is sized in ``rem`` (buttons, inputs) follows the root font size: set in the browser
# when the toggle changes, in the template when the page opens in presenter mode.
_ROOT_FONT_JS = (f"document.documentElement.style.fontSize = cb_obj.active ? "
                 f"'{PRESENTER_ROOT_FONT}' : '100%'")


# Said in the browser the moment Run or Sweep is pressed, before the click has reached a busy
# server: only that it was pressed (the input may yet be refused). The server's next status
# replaces it ("queued", the stage, or why it did not start, a new line at every press). The
# pane's text is its HTML, escaped.
_QUEUED_JS = ("status.text = '&lt;p&gt;&lt;strong&gt;Status:&lt;/strong&gt; {kind} pressed: "
              "asking the server…&lt;/p&gt;\\n'")

_INTRO = (
    "How much does the **shape of your JAX state** cost? Pick a problem, a state count *N* and "
    "the representations to compare, then **Run**. Each case is traced, lowered and compiled "
    "cold in a separate worker process, one at a time for all viewers."
)


def _schedule(doc: Any, fn: Any) -> None:
    """Run ``fn`` on the session's event loop (called from background threads)."""
    with set_curdoc(doc):
        pn.state.execute(fn, schedule=True)


# What :func:`_schedule_later` waits: long enough for the loop to write what was sent before
# (a plot is a dozen socket writes, each a turn of the loop), short enough not to be seen.
_LATER_MS = 40


def _schedule_later(doc: Any, fn: Any) -> None:
    """Run ``fn`` on the session's event loop once what is being sent has gone out (from any
    thread: the timeout is set on the loop, as Bokeh asks)."""
    _schedule(doc, lambda: doc.add_timeout_callback(lambda: _schedule(doc, fn), _LATER_MS))


def _served() -> bool:
    doc = pn.state.curdoc
    return doc is not None and doc.session_context is not None


class _PageTemplate(template_without_web_fonts(pn.template.VanillaTemplate)):
    """The served page: Panel's plain template and its native design, which the browser draws
    faster than Bootstrap's (the first render and every redrawn plot about 0.05 s sooner on two
    cores), without the Lato web font the template asks Google for: the page works offline and
    asks nothing of any host but its own server (the Fast design pulls a Google font too)."""

    def server_doc(self, doc: Any = None, title: str | None = None,
                   location: Any = True) -> Any:
        """The page's document, built under Panel's ``hold(freeze=True)``: Bokeh works out the
        set of the page's models (a walk over all of them) once, when the page is complete,
        instead of each time a root is added, a design applied or a JavaScript callback
        attached (twelve times while Panel builds this page, a third of the server's time
        building it). Panel's public, experimental switch for this: holoviz/panel#8417
        "Add freeze option to hold"."""
        document = doc if doc is not None else pn.state.curdoc
        if document is None:
            return super().server_doc(doc, title, location)
        with pn.io.hold(document, freeze=True):
            return super().server_doc(document, title, location)


class Dashboard(pn.viewable.Viewer):
    """Controls, four plots, a results table and a program panel around one model.

    Args:
      model: the :class:`ExplorerModel` to show (a new one by default).
      **params: parameters for a new model (ignored when ``model`` is given).
    """

    model = param.ClassSelector(class_=ExplorerModel)

    def __init__(self, model: ExplorerModel | None = None, **params: Any):
        owners = ExplorerModel.part_params()
        model_params = {k: params.pop(k) for k in list(params) if k in owners}
        store = params.pop("store", None)
        executor = params.pop("executor", None)
        if model is None and "show_example" not in model_params and _served():
            # ``?example=true`` (the teaching demo's bookmark): the shipped example, on its own
            # case, whatever the store holds.
            wanted = query_flag((pn.state.session_args.get(EXAMPLE_QUERY) or [None])[-1])
            if wanted is not None:
                model_params["show_example"] = wanted
        if model is None:
            model = ExplorerModel(store=store, executor=executor, **model_params)
        super().__init__(model=model, **params)
        self._periodic = None
        self._doc = doc = pn.state.curdoc
        self._is_served = _served()
        if self._is_served:
            model.session.param.update(dispatch=lambda fn: _schedule(doc, fn),
                                       dispatch_later=lambda fn: _schedule_later(doc, fn))
            # Polling starts when a browser has loaded the page: a request that never opens it
            # (a health check, a closed tab) must not keep redrawing plots nobody sees.
            pn.state.onload(self._start_polling)
            pn.state.onload(warm_plotting)  # once per server, after the first page has drawn
            pn.state.on_session_destroyed(self._session_destroyed)
        self.controls = ControlsSection(model)
        self.messages = MessagesSection(model)
        self.plots = PlotsSection(model, served=self._is_served)
        self.results = ResultsSection(model, served=self._is_served)
        self.programs = ProgramsSection(model)
        self.runs = RunsSection(model)
        self.watched = WatchedSection(model)
        # Panel keeps every JavaScript callback in a process-wide registry keyed (weakly) by
        # its widget; the callback's ``args`` (the status pane, and through its watchers the
        # whole page) hold that widget, so the entry never goes: each page stayed in memory
        # for good (about 1.7 MiB a page load). They are unregistered when the session ends.
        self._js_callbacks = [
            button.js_on_click(args={"status": self.messages.status},
                               code=_QUEUED_JS.format(kind=kind))
            for button, kind in ((self.controls.run_button, "Run"),
                                 (self.controls.sweep_button, "Sweep"))]
        # Not ``dynamic``: Panel keeps a hidden tab's models off the page and brings them up to
        # date there with its CDN's stylesheets, which the page then asks that host for (the
        # selected row's title, changed while Results is in front). The Programs and Compare
        # runs sections cost the first render nothing anyway: empty until first opened.
        self.tabs = pn.Tabs(("Results", self.results), ("Programs", self.programs),
                            ("Compare runs", self.runs), ("Your program", self.watched),
                            sizing_mode="stretch_width")
        self.tabs.param.watch(self._tab_opened, "active")
        where = model.jobs.where  # measuring on a Dask cluster: said under the introduction
        intro = _INTRO if where is None else _INTRO.replace(
            "in a separate worker process, one at a time for all viewers", "on a Dask cluster, "
            "each in a separate worker process") + f"\n\n**{where}**"
        self._main = pn.Column(
            _md(intro, sizing_mode="stretch_width", margin=(0, 10)),
            self.messages, self.plots, self.tabs, sizing_mode="stretch_width")
        self._location = pn.state.location if self._is_served else None
        if self._is_served:
            # A bookmark such as ``.../explorer_app?presenter=true`` opens in presenter mode.
            values = pn.state.session_args.get(PRESENTER_QUERY) or [None]
            wanted = query_flag(values[-1])
            if wanted is not None:
                model.view.presenter = wanted
        model.view.param.watch(self._presenter_changed, "presenter")
        if model.view.presenter:
            self._show_presenter(True)

    # -- lifecycle ---------------------------------------------------------------------
    def _session_destroyed(self, session_context: Any) -> None:
        """What this page holds outside itself goes when its session ends: its polling, its
        jobs, its JavaScript callbacks (see ``__init__``)."""
        for callback in self._js_callbacks:
            callback.unwatch()
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
        if not self.model.jobs.running and self._connected():
            _guard(self.model, self.model.refresh)(None)

    # -- presenter mode ----------------------------------------------------------------
    def _show_presenter(self, on: bool) -> None:
        # Off: "initial" sends each property back to its fallback (a page drawn with the styles
        # keeps them when they are merely left out).
        styles = {k: v if on else "initial" for k, v in PRESENTER_STYLES.items()}
        for layout in (self._main, self.controls.__panel__()):
            layout.styles = styles

    def _presenter_changed(self, event: param.parameterized.Event) -> None:
        self._show_presenter(event.new)
        if self._location is not None:  # the address says so too, to bookmark it
            query = [(k, v) for k, v in urllib.parse.parse_qsl(
                self._location.search.lstrip("?"), keep_blank_values=True)
                if k != PRESENTER_QUERY]
            if event.new:
                query.append((PRESENTER_QUERY, "true"))
            self._location.search = "?" + urllib.parse.urlencode(query) if query else ""

    def _tab_opened(self, event: param.parameterized.Event) -> None:
        if event.new == 1:
            self.programs.build()
        elif event.new == 2:
            self.runs.build()
        elif event.new == 3:
            self.watched.build()

    def _page(self) -> _PageTemplate:
        """The served page around this view."""
        template = _PageTemplate(
            title=TITLE, sidebar=[self.controls], main=[self._main], sidebar_width=320,
            header_background="#1f4e79")
        if self.model.view.presenter:
            template.config.raw_css.append(f"html {{ font-size: {PRESENTER_ROOT_FONT}; }}")
        self._js_callbacks.append(self.controls.presenter_toggle.jscallback(value=_ROOT_FONT_JS))
        return template

    def __panel__(self) -> pn.viewable.Viewable:
        # ``pn.state.served`` only answers for the served script's own frame; from a library
        # the same question is whether this page belongs to a server session.
        if _served():
            _quiet_closed_pages()
            return self._page()
        return pn.Row(pn.Column(_md(f"## {TITLE}"), self.controls, width=300),
                      self._main, sizing_mode="stretch_width")


_log = logging.getLogger(__name__)
_QUIET_LOOPS: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def _quiet_closed_pages(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """A browser tab closed while the server was still sending it updates is the user closing
    a page, not a fault; tornado reports it as a never-retrieved ``WebSocketClosedError`` with
    two tracebacks in the server's log. On the server's event loop (``loop``, default: the
    current tornado loop) those become one quiet line; every other error is reported as before.
    """
    from tornado.iostream import StreamClosedError  # noqa: PLC0415 - the server's own
    from tornado.websocket import WebSocketClosedError  # noqa: PLC0415

    if loop is None:
        from tornado.ioloop import IOLoop  # noqa: PLC0415

        loop = IOLoop.current().asyncio_loop
    if loop in _QUIET_LOOPS:
        return
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if isinstance(context.get("exception"), (WebSocketClosedError, StreamClosedError)):
            _log.info("a page closed while updates were being sent to it")
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
    _QUIET_LOOPS.add(loop)


def dashboard(problems: Any = (), *, scheduler: Any = None, per_host: int = 1,
              worker_memory_gib: float | None = None, **params: Any) -> Dashboard:
    """The explorer as a Panel component: ``explorer.dashboard()`` in a notebook (after
    ``pn.extension()``), or ``.servable()`` in an app. Keyword arguments set the model's
    parameters (``problem``, ``n_states``, ``representations``...) or pass ``store`` /
    ``executor``; ``problems`` lists your own (:func:`explorer.define_problem`), shown in the
    problem menu beside the built-in ones. ``scheduler`` (a Dask scheduler address such as
    ``tcp://host:8786``, or a ``distributed.Client``) measures on that cluster, at most
    ``per_host`` cases at once per host; a one-line ``ValueError`` if nothing answers there.
    ``worker_memory_gib`` limits the memory of the worker this process's pages share (CPU
    only; a case that needs more is stored as out of memory); ``None`` leaves it as it is."""
    from ..core.user_problems import register  # noqa: PLC0415

    for problem in problems:
        register(problem)
    if worker_memory_gib is not None:
        if scheduler is not None or params.get("executor") is not None:
            raise ValueError("worker_memory_gib limits the worker this process's pages share; "
                             "a cluster's or your own executor's workers are not it")
        limit_shared_worker(memory_limit_bytes(worker_memory_gib))
    if scheduler is not None:
        from ..jobs.cluster import cluster_executor  # noqa: PLC0415 - distributed only when asked

        params["executor"] = cluster_executor(scheduler, per_host)
    pn.extension("tabulator")
    return Dashboard(**params)


def settings_from_environment() -> dict[str, Any]:
    """``scheduler``, ``per_host`` and ``worker_memory_gib`` for :func:`dashboard` from
    ``$PYTREE_EXPLORER_SCHEDULER``, ``$PYTREE_EXPLORER_PER_HOST`` and
    ``$PYTREE_EXPLORER_WORKER_MEMORY`` (how ``panel serve apps/explorer_app.py`` is pointed at
    a Dask cluster, or its shared worker limited); a one-line ``ValueError`` for a value that
    is not a whole number >= 1 (per host) or a number of GiB >= 2 (worker memory)."""
    raw = os.environ.get("PYTREE_EXPLORER_PER_HOST", "1").strip()
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"PYTREE_EXPLORER_PER_HOST must be a whole number >= 1, got {raw!r}")
    memory = memory_limit_bytes(os.environ.get(WORKER_MEMORY_ENV), what=WORKER_MEMORY_ENV)
    return {"scheduler": os.environ.get("PYTREE_EXPLORER_SCHEDULER") or None,
            "per_host": int(raw), "worker_memory_gib": None if memory is None else memory / 2**30}


def serve(*, address: str = "127.0.0.1", port: int = 5006, show: bool = False,
          scheduler: str | None = None, per_host: int = 1,
          worker_memory_gib: float | None = None) -> None:
    """Serve the explorer page at ``http://ADDRESS:PORT/explorer_app`` until interrupted
    (``pytree-explorer serve``); the problems defined in this process are in its menu.

    With ``scheduler`` (a Dask scheduler address) every page measures on that cluster, at most
    ``per_host`` cases at once per host; it is reached now, once: a one-line ``ValueError``
    if nothing answers there. Else ``worker_memory_gib`` limits the memory of the worker all
    pages share (see :func:`dashboard`)."""
    origins = [f"{host}:{port}" for host in ("localhost", "127.0.0.1", address)]
    cluster = None
    if worker_memory_gib is not None:
        if scheduler is not None:
            raise ValueError("--worker-memory limits this machine's shared worker; with "
                             "--scheduler the cluster's workers measure (give those "
                             "dask-worker --memory-limit)")
        limit_shared_worker(memory_limit_bytes(worker_memory_gib))
    if scheduler is not None:
        from ..jobs.cluster import cluster_executor  # noqa: PLC0415 - distributed only when asked

        cluster = cluster_executor(scheduler, per_host)

    def page() -> pn.viewable.Viewable:  # the template a served page gets (``__panel__``)
        return dashboard(executor=cluster).__panel__()

    from tornado.ioloop import IOLoop  # noqa: PLC0415 - the server's own

    loop = IOLoop.current()
    previous = _stop_on_sigterm(loop.asyncio_loop)
    try:
        pn.serve({"explorer_app": page},
                 address=address, port=port, websocket_origin=sorted(set(origins)), show=show,
                 title="PyTree Compile Explorer", loop=loop)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if cluster is not None:  # its jobs are cancelled; no callback outlives the server
            cluster.close()


def _raise_interrupt() -> None:
    raise KeyboardInterrupt


def _stop_on_sigterm(loop: asyncio.AbstractEventLoop) -> Any:
    """While serving, SIGTERM stops the server as an interrupt raised by ``loop`` itself (out
    of ``pn.serve``; the caller's previous handler is returned to put back, ``None`` off the
    main thread). Raised straight from the signal handler, the interrupt could land inside a
    garbage-collector callback (JAX registers one), where Python prints and drops it: the
    server went on serving (seen once in 20 quick starts and stops under load)."""
    try:
        return signal.signal(signal.SIGTERM,
                             lambda signum, frame: loop.call_soon_threadsafe(_raise_interrupt))
    except ValueError:  # not the main thread: signals are not ours to handle
        return None
