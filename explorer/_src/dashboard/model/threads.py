"""The background threads of one page: started with a cancel event each, waited for, stopped.

Jobs are waited for here, never on the page's event loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["SessionThreads"]


class SessionThreads:
    """Run ``target(cancel_event, *args)`` on threads of one session; :meth:`cancel` sets the
    events of the jobs running now. A job started after a cancel gets a fresh event, so an old
    cancel never stops new work."""

    def __init__(self) -> None:
        self._cancels: set[threading.Event] = set()
        self._threads: list[threading.Thread] = []

    def start(self, target: Callable, *args: Any) -> None:
        cancel = threading.Event()
        self._cancels.add(cancel)

        def job() -> None:
            try:
                target(cancel, *args)
            finally:
                self._cancels.discard(cancel)

        thread = threading.Thread(target=job, daemon=True,
                                  name=f"explorer-session-{target.__name__}")
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def cancel(self) -> None:
        for event in list(self._cancels):
            event.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every thread started so far is done; ``False`` on a timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in list(self._threads):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(left)
        return not any(t.is_alive() for t in self._threads)
