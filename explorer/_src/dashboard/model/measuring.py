"""A page's Run or Sweep: its cases measured, stored and shown, their trajectories after.

Runs on a background thread of the page (:class:`SessionThreads`); talks to the page only
through :meth:`Session.post`.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import functools
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from ...core.spec import Spec
from ...jobs import run as _run
from ...jobs.jobs import rollout_spec
from ...store.sweeps import overlap_message
from .results import Results
from .session import Session
from .status import StatusLine, job_failed
from .submission import Submission
from .view import PlotView

__all__ = ["Measuring"]


class Measuring:
    """Measures a list of specs for one page (:meth:`work`), then calls ``finished(text)``.

    Args:
      session, results, view: the page's parts.
      jobs: how its jobs reach the executor.
      status: its status line.
      timeout: seconds a case may take (read for each case).
    """

    def __init__(self, *, session: Session, results: Results, view: PlotView,
                 jobs: Submission, status: StatusLine, timeout: Callable[[], float | None]):
        self.session, self.results, self.view = session, results, view
        self.jobs, self.status, self._timeout = jobs, status, timeout

    def work(self, cancel: threading.Event, specs: list[Spec], kind: str,
             finished: Callable[[str], None]) -> None:
        run_id = uuid.uuid4().hex[:12]
        started = time.monotonic()
        failures: list[dict[str, Any]] = []
        done = [0]
        lock = threading.Lock()
        marks = contextlib.ExitStack()

        def one(i: int, spec: Spec) -> None:
            if cancel.is_set():
                return
            prefix = f"{kind} {i + 1}/{len(specs)}: {spec.label}"
            # Measured first and shown at once; the trajectories follow in a job of their own.
            row, _ = _run.run_one(
                dataclasses.replace(spec, rollout=False), self.jobs.executor,
                timeout=self._timeout(), run_id=run_id, cancel_event=cancel,
                on_wait=self.status.on_wait(self.jobs.executor,
                                            lambda what, p=prefix: f"{p} — {what}"))
            with lock:  # rows that finish together on a cluster are stored one by one
                self.results.add_row(row)
                done[0] += 1
                if row.get("status") != "ok":
                    failures.append(row)
            self._page_caught_up(cancel)
            if row.get("status") != "ok":
                self.session.post(functools.partial(self.status.row_failed, row))
            elif spec.rollout and not cancel.is_set():
                self._capture(spec, int(row["id"]), cancel, prefix)

        # On a page, a run of several cases redraws only the compile-time plot after each case;
        # the other plots once, at its end (see PlotView.hold_redraws).
        hold = len(specs) > 1 and self.session.dispatch is not None
        if hold:
            self.session.post(self.view.hold_redraws)
        try:
            self._mark(marks, run_id)
            # The local worker measures one case at a time: the cases go one after the other.
            # A cluster runs as many at once as it has workers (its per-host limit holds).
            width = min(len(specs), self.jobs.parallel)
            if width <= 1:
                for i, spec in enumerate(specs):
                    one(i, spec)
            else:
                with cf.ThreadPoolExecutor(width, thread_name_prefix="explorer-case") as pool:
                    for job in [pool.submit(one, i, spec) for i, spec in enumerate(specs)]:
                        job.result()  # the first unexpected error is reported below
        except BaseException as err:  # noqa: BLE001 - never let a session thread die silently
            cancel.set()  # the cases still running on a cluster stop too
            self.session.post(functools.partial(self.session.show, f"Unexpected error: {err}",
                                                "danger"))
        finally:
            marks.close()
            if hold:
                self.session.post(self.view.release_redraws)
                self._page_caught_up(cancel)  # the run ends with every plot drawn
            elapsed = time.monotonic() - started
            failed = sum(1 for row in failures if row.get("status") != "cancelled")
            ok = done[0] - len(failures)
            text = (f"{kind} {'cancelled' if cancel.is_set() else 'finished'}: {ok} of "
                    f"{len(specs)} case(s) measured in {elapsed:.1f} s"
                    + (f", {failed} failed (see the table)" if failed else "") + ".")
            self.session.post(functools.partial(finished, text))

    def _mark(self, marks: contextlib.ExitStack, run_id: str) -> None:
        """Mark the store as being swept, like any sweep: a CLI sweep on this host meanwhile
        warns, and this page says when one is already measuring (this server's own pages share
        one queue, so they never overlap each other)."""
        try:
            others = [o for o in marks.enter_context(self.results.store.sweeping(run_id))
                      if o["pid"] != os.getpid()]
        except Exception:  # noqa: BLE001 - best effort: the page measures all the same
            others = []
        if others:
            self.session.post(functools.partial(
                self.session.show, overlap_message(self.results.store.path, others),
                "warning"))

    def _capture(self, spec: Spec, row_id: int, cancel: threading.Event, prefix: str) -> None:
        """Fetch and store the trajectories of a measured row; a failure costs only them."""
        future = self.jobs.submit(rollout_spec, (spec,), f"rollout {spec.label}")
        try:
            rollout = self.jobs.result(future, cancel,
                                       lambda what: f"{prefix} — measured; trajectories: {what}")
        except BaseException as err:  # noqa: BLE001 - the measurement itself is kept
            if not cancel.is_set():
                what, _ = job_failed(f"Capturing the trajectories of {spec.label}", err)
                self.session.post(functools.partial(
                    self.session.show, f"{what} The measurement is kept.", "warning"))
            return
        self.results.add_rollout(row_id, rollout)
        self.session.post(self.view.refresh_rollouts)
        self._page_caught_up(cancel)

    def _page_caught_up(self, cancel: threading.Event, timeout: float = 10.0) -> None:
        """Wait until the page has drawn what was handed to it (a new row, new trajectories).

        The next job starts only then: the drawing would otherwise share the machine's cores
        with that job's compile (and slow both: the timing, and the result reaching the page).
        The check runs after the update posted before it, and waits behind every redraw that
        update asked for.
        """
        if self.session.dispatch is None or self.session.closed:
            return
        done = threading.Event()
        self.session.post(lambda: self.view.after_redraws(done.set))
        deadline = time.monotonic() + timeout
        while not done.wait(0.05):
            if cancel.is_set() or self.session.closed or time.monotonic() > deadline:
                return
