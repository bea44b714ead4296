"""Interrupts that are never dropped: what the commands (``sweep``, ``watch``) run under.

Python's signal handler raises ``KeyboardInterrupt`` wherever the main thread is; inside a
garbage-collector callback (JAX registers one), a ``__del__`` or a weakref callback, Python prints
it and drops it ("Exception ignored in ..."), and the command goes on as if Ctrl-C had never been
pressed (a watched script went on to a 215 s compile). :func:`interrupts_never_dropped` delivers
such an interrupt again a moment later, outside that callback.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["interrupt", "interrupts_never_dropped"]

_received: list[int] = []  # the signals :func:`interrupt` turned into an interrupt


def interrupt(signum: int, frame: object) -> None:
    """A signal handler that stops like Ctrl-C (``KeyboardInterrupt``) and remembers which
    signal it was, so a dropped one is delivered again as itself (SIGTERM stays SIGTERM)."""
    _received.append(signum)
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_never_dropped() -> Iterator[None]:
    """Within: an interrupt Python dropped inside a callback is delivered again 10 ms later."""
    previous = sys.unraisablehook
    _received.clear()  # this command's signals only
    timers: list[threading.Timer] = []

    def hook(unraisable: Any) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            signum = _received[-1] if _received else signal.SIGINT
            timer = threading.Timer(0.01, os.kill, (os.getpid(), signum))
            timer.daemon = True
            timers.append(timer)
            timer.start()
            return
        previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous
        for timer in timers:  # what ran within has ended: it is not interrupted after that
            timer.cancel()
