"""Building the case a page would measure ahead, while its worker is idle.

The first result of a new size is shown sooner (see :func:`explorer._src.jobs.run.prepare`,
which builds only in an idle local worker and changes no measured figure).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...jobs import run as _run
from .controls import CaseControls
from .session import Session

__all__ = ["PrepareAhead"]


class PrepareAhead:
    """Once the worker has answered (it is started and idle), and whenever the case changes,
    have it build the case Run would measure now.

    Args:
      controls, session: the page's parts.
      executor: the page's executor (called when needed: it may be made on first use).
      running: whether a run of the page is in progress (nothing is built meanwhile).
    """

    def __init__(self, controls: CaseControls, session: Session,
                 executor: Callable[[], Any], running: Callable[[], bool]):
        self.controls, self.session = controls, session
        self._executor, self._running = executor, running
        controls.param.watch(self.prepare, ["backends_known", "problem", "representations",
                                            "n_states", "horizon", "unroll"])

    def prepare(self, *_events: Any) -> None:
        if self._running() or self.session.closed or not self.controls.backends_known:
            return
        try:
            specs = self.controls.specs([self.controls.n_states])
        except (ValueError, TypeError):  # not a valid case (yet): nothing to build
            return
        _run.prepare(self._executor(), specs)
