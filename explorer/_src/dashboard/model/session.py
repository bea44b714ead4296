"""What every part of a dashboard page shares: its messages and the way to its event loop.

Background threads never touch a page directly: they hand a no-argument function to
:attr:`Session.post`, which runs it where the page wants updates made (:attr:`Session.dispatch`).
:class:`Batch` is the one place where updates that arrive faster than the page draws are
gathered and handed over together.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import param

__all__ = ["Batch", "Session"]


class Session(param.Parameterized):
    """One page's status line, alert and event loop (shared by the parts of its model)."""

    status = param.String(default="Idle.", precedence=-1)
    alert = param.String(default="", precedence=-1)
    alert_kind = param.Selector(default="danger", objects=["danger", "warning", "info", "success"],
                                precedence=-1)
    closed = param.Boolean(default=False, precedence=-1,
                           doc="The page is gone: nothing more is posted to it.")
    dispatch = param.Callable(default=None, precedence=-1, doc="""
        How a background thread hands an update to the page: called with a no-argument
        function. ``None`` runs it at once (tests, scripts).""")
    dispatch_later = param.Callable(default=None, precedence=-1, doc="""
        Like :attr:`dispatch`, but once the updates made so far have had time to go out to the
        browser: a served page writes an update to its socket over several turns of its event
        loop, and a long update run on the next turn would hold the earlier one back. ``None``
        falls back to :attr:`dispatch`.""")

    def post(self, fn: Callable[[], None], later: bool = False) -> None:
        """Run ``fn`` where the page wants updates made (see :attr:`dispatch`; with ``later``,
        :attr:`dispatch_later`); not at all once the page is closed, also when it closed after
        ``fn`` was handed over (a job finishing as its session ends must not update a page
        whose document is gone)."""
        if self.closed:
            return
        dispatch = (self.dispatch_later or self.dispatch) if later else self.dispatch
        if dispatch is None:
            fn()
            return

        def unless_closed() -> None:
            if not self.closed:
                fn()

        try:
            dispatch(unless_closed)
        except Exception:  # the page is gone; nothing to update
            pass

    def show(self, message: str, kind: str = "danger") -> None:
        self.param.update(alert=message, alert_kind=kind)

    def clear_alert(self) -> None:
        self.alert = ""


class Batch:
    """Items added from any thread, handed to ``consume`` together on the page's next turn.

    The first item added since the last hand-over posts one flush (through ``post``); items
    that arrive before it runs join it. So a page busy drawing gets one update for everything
    that happened meanwhile, not one each.

    Args:
      post: how to run the flush on the page (:meth:`Session.post`).
      consume: called with the list of items gathered, on the page.
    """

    def __init__(self, post: Callable[[Callable[[], None]], None],
                 consume: Callable[[list[Any]], None]):
        self._post = post
        self._consume = consume
        self._lock = threading.Lock()
        self._items: list[Any] = []

    def add(self, *items: Any) -> None:
        if not items:
            return
        with self._lock:
            first = not self._items
            self._items.extend(items)
        if first:
            self._post(self.flush)

    def flush(self) -> None:
        with self._lock:
            items, self._items = self._items, []
        if items:
            self._consume(items)

    @property
    def pending(self) -> bool:
        with self._lock:
            return bool(self._items)
