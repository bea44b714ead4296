"""How a page's jobs reach its executor: submitted, waited for, cancelled.

Measurements go first. A program job (the programs of a row, a comparison) is not a
measurement: it waits until no other job is running or queued, and while it runs it gives way
(it is stopped, then started again once the queue is empty) the moment someone else's job
queues behind it. A viewer asking for the programs of a case that takes minutes to compile
never holds another viewer's Run behind it, and measurements still run one at a time.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from collections.abc import Callable
from typing import Any

from ...jobs import run as _run
from ...jobs.protocol import JobExecutor
from ...jobs.worker import shared_executor
from .status import StatusLine

__all__ = ["POLL_S", "PROGRAM_LABEL", "Submission"]

POLL_S = 0.25
# How a program job's label starts: other pages' program jobs do not make one give way.
PROGRAM_LABEL = "programs: "


class Submission:
    """One page's jobs on its executor (default :func:`explorer.shared_executor`).

    Args:
      executor: where jobs run; ``None`` for the process-wide shared worker.
      status: the page's status line (progress of the jobs waited for).
      timeout: seconds a job may run (read when it is submitted).
    """

    def __init__(self, executor: cf.Executor | None, status: StatusLine,
                 timeout: Callable[[], float | None]):
        self._executor = executor
        self._status = status
        self._timeout = timeout
        self._futures: set[cf.Future] = set()

    @property
    def executor(self) -> cf.Executor:
        if self._executor is None:
            self._executor = shared_executor()
        return self._executor

    @property
    def where(self) -> str | None:
        """Where jobs run, in one line, when not on this machine (a Dask cluster)."""
        executor = self._executor
        return executor.describe() if isinstance(executor, JobExecutor) else None

    @property
    def parallel(self) -> int:
        return int(getattr(self.executor, "parallel", 1) or 1)

    def submit(self, fn: Callable, args: tuple, label: str) -> cf.Future:
        """Submit ``fn(*args)`` as a job of this page (:meth:`cancel` stops it)."""
        future = _run.submit(self.executor, fn, *args, timeout=self._timeout(), label=label)
        self._futures.add(future)
        future.add_done_callback(self._futures.discard)
        return future

    def result(self, future: cf.Future, cancel: threading.Event,
               describe: Callable[[str], str],
               on_poll: Callable[[cf.Future], None] | None = None) -> Any:
        """Wait for ``future``, posting its progress to the status line; ``cancel`` stops it."""
        show = self._status.on_wait(self.executor, describe)

        def on_wait(f: cf.Future) -> None:
            show(f)
            if on_poll is not None:
                on_poll(f)

        return _run.wait(self.executor, future, cancel_event=cancel, on_wait=on_wait,
                         poll_s=POLL_S)

    def cancel(self) -> None:
        """Withdraw this page's queued jobs and kill its running one (nobody else's)."""
        for future in list(self._futures):
            _run.cancel(self.executor, future)

    def pending(self) -> bool:
        return any(not f.done() for f in list(self._futures))

    # -- program jobs: after every measurement ----------------------------------------
    def _others(self, future: cf.Future | None = None) -> tuple[bool, bool]:
        """(another job runs, another job waits), program jobs aside; where the executor
        tells (a cluster does not: it runs jobs side by side)."""
        executor = self.executor
        if not isinstance(executor, JobExecutor):
            return False, False
        place = executor.place(future if future is not None else cf.Future())
        if place.remote:
            return False, False
        measuring = place.running is not None and not place.running.startswith(PROGRAM_LABEL)
        waiting = any(not label.startswith(PROGRAM_LABEL) for label in place.queued)
        return measuring, waiting

    def program(self, fn: Callable, args: tuple, label: str, cancel: threading.Event,
                describe: Callable[[str], str]) -> Any:
        """Run the program job ``fn(*args)`` behind every other job (see the module's text);
        ``cancel`` stops it."""
        while True:
            while any(self._others()):
                if cancel.is_set():
                    raise cf.CancelledError
                self._status.progress(describe(
                    "waiting: measurements go first, the programs after"))
                time.sleep(POLL_S)
            gave_way = threading.Event()

            def give_way(future: cf.Future, gave_way: threading.Event = gave_way) -> None:
                if gave_way.is_set() or future.done():
                    return
                if self._others(future)[1]:  # someone's job waits behind this one
                    gave_way.set()
                    _run.cancel(self.executor, future)

            future = self.submit(fn, args, PROGRAM_LABEL + label)
            try:
                return self.result(future, cancel, describe, on_poll=give_way)
            except BaseException:
                if not gave_way.is_set() or cancel.is_set():
                    raise
            self._status.progress(describe(
                "stopped to let another job run first; it starts again after"))
