"""Plot objects shared by every dashboard page of a server process.

Pages that show the same results with the same choices (every page that opens on the same
store) get the same HoloViews objects, built once; each page still renders its own Bokeh
figure. Also the one-time warm-up of the plotting code. View-side: imports HoloViews, no Panel.
"""

from __future__ import annotations

import collections
import hashlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from .. import plots as _plots
from ..store.example import load_example

__all__ = ["PLOT_CACHE", "array_key", "frame_key", "warm_plotting"]


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
    import holoviews as hv  # noqa: PLC0415

    example, rollouts = load_example()
    if example.empty:
        return
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
    for plot in plots:
        hv.render(plot, backend="bokeh")

