"""Plot objects shared by every dashboard page of a server process.

Pages that show the same results with the same choices (every page that opens on the same
store) get the same HoloViews objects, built once; each page still draws its own Bokeh figure
(a Bokeh model belongs to one document), either at once (:func:`render_figure`) or, for a
served page, ahead of it (:data:`FIGURES_AHEAD`). Also the one-time warm-up of the plotting
code. View-side: imports HoloViews and Bokeh, no Panel.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from .. import plots as _plots
from ..store.example import load_example

__all__ = ["FIGURES_AHEAD", "PLOT_CACHE", "array_key", "frame_key", "plotting",
           "render_figure", "warm_plotting"]

_log = logging.getLogger(__name__)


def frame_key(frame: pd.DataFrame | None) -> str:
    """A digest of a results frame's content: equal frames in two pages give the same key."""
    if frame is None or frame.empty:
        return "empty"
    digest = hashlib.blake2b(digest_size=16)
    digest.update(",".join(map(str, frame.columns)).encode())
    digest.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return digest.hexdigest()


def array_key(names: Sequence[str], array: np.ndarray) -> str:
    digest = hashlib.blake2b(digest_size=16)
    digest.update("\x1f".join(map(str, names)).encode())
    array = np.ascontiguousarray(array)
    digest.update(f"{array.dtype}{array.shape}".encode())
    digest.update(array.tobytes())
    return digest.hexdigest()


# One use of HoloViews at a time in this process, building a plot or drawing its figure:
# HoloViews keeps its options in process-wide tables (``.opts`` writes them, drawing reads
# them), and a page's build or redraw (on the server's loop) may meet a drawing ahead (in a
# thread). Reentrant: a plot built under it may be drawn under it.
_PLOTTING = threading.RLock()


def plotting() -> threading.RLock:
    """The lock to hold while building a HoloViews object or setting its options outside
    :data:`PLOT_CACHE` (which holds it while it draws): ``with plotting(): ...``."""
    return _PLOTTING


class _PlotCache:
    """The HoloViews objects of recently drawn plots, shared by every page of the server.

    Pages that show the same results with the same choices (every page that opens on the same
    store) get the same objects, built once; each page still renders its own Bokeh figure.
    """

    def __init__(self, size: int = 48):
        self._size = size
        self._lock = threading.Lock()
        self._items: collections.OrderedDict[tuple, Any] = collections.OrderedDict()

    def get(self, key: tuple, draw: Callable[[], Any]) -> Any:
        """The object stored under ``key``, else ``draw()`` stored there (if it raises, the
        error propagates and nothing is stored)."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        with _PLOTTING:
            value = draw()
        with self._lock:
            self._items[key] = value
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return value


PLOT_CACHE = _PlotCache()


_warmed_plotting = threading.Event()


def warm_plotting() -> None:
    """Draw the plots once, off screen, as they look after a first run (the example beside a
    measured row), so the first result a server shows does not also pay for the first use of
    the plotting code (about 0.4 s). Once per process; the objects are thrown away."""
    if _warmed_plotting.is_set():
        return
    _warmed_plotting.set()
    example, rollouts = load_example()
    if example.empty:
        return
    with _PLOTTING:
        plots = _example_plots(example, rollouts)
    for plot in plots:
        render_figure(plot, {})


def _example_plots(example: pd.DataFrame, rollouts: dict) -> list[Any]:
    measured = example.iloc[: len(example) // 2].assign(source="measured", id=1)
    frame = pd.concat([example, measured], ignore_index=True)
    first = example.iloc[0]
    filters = dict(problem=first["problem"], horizon=int(first["horizon"]),
                   unroll=int(first["unroll"]), target=first["target"])
    plots = [_plots.compile_time_plot(frame, **filters), _plots.program_size_plot(frame, **filters),
             _plots.runtime_plot(frame, **filters)]
    if rollouts:
        two = {str(k): v for k, v in list(rollouts.items())[:2]}
        plots.append(_plots.rollout_plot(_plots.rollout_frame(two)))
    return plots


def render_figure(plot: Any, layout: dict[str, Any]) -> Any:
    """The Bokeh figure of the HoloViews object ``plot`` (as ``hv.render`` draws it), with the
    ``layout`` properties (sizing mode, minimum height, margin) set on it: the figure
    ``pn.pane.HoloViews(plot, **layout)`` puts in a page, drawn without a page. It belongs to no
    document yet, so it can be drawn in any thread, ahead of the page that shows it."""
    import holoviews as hv  # noqa: PLC0415 - loaded by then: ``plot`` is a HoloViews object
    from bokeh.document import Document  # noqa: PLC0415

    # As the pane draws for a served page ("server" mode), in a document of its own: without one
    # HoloViews hooks the plot to Bokeh's ``curdoc()`` (the process's document, or in a thread
    # any page's), which would keep every plot drawn until that document ends.
    renderer = hv.renderer("bokeh").instance(mode="server")
    with _PLOTTING:
        figure = renderer.get_plot_state(renderer.get_plot(plot, doc=Document()))
    figure.update(**{name: value for name, value in layout.items()
                     if name in figure.properties()})
    return figure


class _FiguresAhead:
    """Figures drawn for the next served page, while no page is waiting for them.

    A page that opens on the same results with the same choices as the last one shows the same
    HoloViews objects (:data:`PLOT_CACHE`); drawing their four Bokeh figures was about a third of
    the server's build of a page. Once a page has drawn, :meth:`prepare` draws the figures of its
    plots again in a background thread, and the next page :meth:`take` s them instead of drawing
    its own. Each figure goes to one page (a Bokeh model belongs to one document); a page that
    finds none ready for its plots (the first one, a page opened a moment after another, one
    with other choices) draws its own, the same figure (:func:`render_figure`).
    """

    def __init__(self, size: int = 8):
        self._size = size
        self._lock = threading.Lock()
        # id(plot) -> (plot, layout key, figure); the plot is held, so its id is not reused.
        self._ready: collections.OrderedDict[int, tuple[Any, tuple, Any]] = (
            collections.OrderedDict())
        self._drawing: threading.Thread | None = None

    @staticmethod
    def _key(layout: dict[str, Any]) -> tuple:
        return tuple(sorted(layout.items()))

    def take(self, plot: Any, layout: dict[str, Any]) -> Any | None:
        """The figure drawn ahead for ``plot`` with ``layout``, else ``None``; once only."""
        with self._lock:
            entry = self._ready.pop(id(plot), None)
        if entry is None or entry[0] is not plot or entry[1] != self._key(layout):
            return None
        return entry[2]

    def prepare(self, plots: Sequence[Any], layout: dict[str, Any],
                delay_s: float = 0.0) -> threading.Thread | None:
        """Draw a figure of each of ``plots`` not already drawn, in a background thread, after
        ``delay_s``; returns that thread (``None`` when there is nothing to draw or a drawing is
        under way). A plot that fails to draw is left out (its page draws it, and says why)."""
        key = self._key(layout)
        with self._lock:
            todo = [plot for plot in dict.fromkeys(plots, None)
                    if not (id(plot) in self._ready and self._ready[id(plot)][0] is plot
                            and self._ready[id(plot)][1] == key)]
            if not todo or (self._drawing is not None and self._drawing.is_alive()):
                return None
            thread = threading.Thread(target=self._draw, args=(todo, layout, delay_s),
                                      name="pytree-explorer-figures-ahead", daemon=True)
            self._drawing = thread
        thread.start()
        return thread

    def _draw(self, plots: list[Any], layout: dict[str, Any], delay_s: float) -> None:
        if delay_s > 0:
            threading.Event().wait(delay_s)
        for plot in plots:
            try:
                figure = render_figure(plot, layout)
            except Exception:  # noqa: BLE001 - the page draws it itself and shows the error
                _log.debug("could not draw a figure ahead", exc_info=True)
                continue
            with self._lock:
                self._ready[id(plot)] = (plot, self._key(layout), figure)
                self._ready.move_to_end(id(plot))
                while len(self._ready) > self._size:
                    self._ready.popitem(last=False)

    def join(self, timeout_s: float | None = None) -> None:
        """Wait for the drawing under way, if any (at most ``timeout_s``)."""
        thread = self._drawing
        if thread is not None:
            thread.join(timeout_s)

    def drawn(self) -> list[Any]:
        """The figures drawn ahead and not yet taken, oldest first."""
        with self._lock:
            return [entry[2] for entry in self._ready.values()]

    def clear(self) -> None:
        """Forget every figure drawn ahead."""
        with self._lock:
            self._ready.clear()


FIGURES_AHEAD = _FiguresAhead()
