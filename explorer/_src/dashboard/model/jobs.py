"""What a dashboard page runs: its background jobs, whether they run, and cancelling them.

:class:`JobQueue` is the page's one handle on its work, made of parts with one job each:

- :class:`SessionThreads` (``threads``): background threads, each with its cancel event;
- :class:`Submission` (``submission``): the executor (by default :func:`explorer.shared_executor`,
  one queue for every session; on a server given a Dask scheduler, a cluster), the page's
  futures, and program jobs that go after every measurement;
- :class:`StatusLine` (``status``): what the status line and the alert say about the jobs;
- :class:`Measuring` (``measuring``): a Run or Sweep, its rows stored as they finish, their
  trajectories after;
- :class:`PrepareAhead` (``prepare``): the case Run would measure, built while the worker idles.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Callable, Sequence
from typing import Any

import param

from .controls import CaseControls
from .measuring import Measuring
from .prepare import PrepareAhead
from .results import Results
from .session import Session
from .status import StatusLine, job_failed
from .submission import POLL_S, Submission
from .threads import SessionThreads
from .view import PlotView

__all__ = ["POLL_S", "JobQueue", "job_failed"]

# The controls whose values Run checks: once a refused input is fixed, its refusal goes.
_CHECKED = ("n_states", "horizon", "unroll", "timeout_s", "representations", "sweep_n_states")


class JobQueue(param.Parameterized):
    """A page's jobs: run and sweep the controls' cases, and any other job (:meth:`start`).

    Args:
      executor: where jobs run (default: :func:`explorer.shared_executor`; a Dask cluster's
        executor measures there).
    """

    running = param.Boolean(default=False, precedence=-1, doc="A run or sweep is in progress.")
    busy = param.Boolean(default=False, precedence=-1, doc="Any background job is in progress.")

    session = param.ClassSelector(class_=Session, precedence=-1)
    controls = param.ClassSelector(class_=CaseControls, precedence=-1)
    results = param.ClassSelector(class_=Results, precedence=-1)
    view = param.ClassSelector(class_=PlotView, precedence=-1)

    def __init__(self, *, executor: cf.Executor | None = None, **params: Any):
        super().__init__(**params)
        self.threads = SessionThreads()
        self.status = StatusLine(self.session, lambda: self.busy)
        self.submission = Submission(executor, self.status, lambda: self.controls.timeout_s)
        self.measuring = Measuring(session=self.session, results=self.results, view=self.view,
                                   jobs=self.submission, status=self.status,
                                   timeout=lambda: self.controls.timeout_s)
        self.prepare = PrepareAhead(self.controls, self.session, lambda: self.executor,
                                    lambda: self.running)
        self.controls.param.watch(self._inputs_changed, list(_CHECKED))

    @property
    def executor(self) -> cf.Executor:
        return self.submission.executor

    @property
    def where(self) -> str | None:
        """One line saying the page measures on a Dask cluster (``None`` when it measures here)."""
        return self.submission.where

    # -- any job -----------------------------------------------------------------------
    def start(self, target: Callable, *args: Any) -> None:
        """Run ``target(cancel_event, *args)`` on a background thread of this session."""
        self.threads.start(target, *args)

    def begin(self, text: str) -> None:
        """A job other than a run or sweep starts: the page turns busy and says ``text``."""
        self.status.started(text)
        self.busy = True

    def submit(self, fn: Callable, args: tuple, label: str) -> cf.Future:
        """Submit ``fn(*args)`` to the executor as a job of this session (``cancel`` stops it)."""
        return self.submission.submit(fn, args, label)

    def result(self, future: cf.Future, cancel: threading.Event,
               describe: Callable[[str], str]) -> Any:
        """Wait for ``future``, posting its progress to the status line; ``cancel`` stops it."""
        return self.submission.result(future, cancel, describe)

    def program(self, fn: Callable, args: tuple, label: str, cancel: threading.Event,
                describe: Callable[[str], str]) -> Any:
        """Run a program job after every measurement (:meth:`Submission.program`)."""
        return self.submission.program(fn, args, label, cancel, describe)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until this session's background jobs are done (for scripts and tests)."""
        return self.threads.wait(timeout)

    def close(self) -> None:
        """Stop this session's work (its queued and running jobs are cancelled)."""
        self.session.closed = True
        self._cancel_all()

    def cancel(self) -> None:
        """Stop this session's run or sweep (and any inspection it is waiting for).

        A queued job is withdrawn; a running one is killed in the worker (which is replaced).
        Other sessions' jobs are never touched; rows already measured stay stored.
        """
        if not self.busy:
            return
        self._cancel_all()
        self.status.cancelling()

    def _cancel_all(self) -> None:
        self.threads.cancel()
        self.submission.cancel()

    def finish_job(self, text: str) -> None:
        """A job other than a run or sweep is done: say so unless a run is still going."""
        self.param.update(busy=self.running or self.submission.pending())
        if not self.running:
            self.status.ended(text)

    def failed(self, what: str, err: BaseException, status: str) -> None:
        """Report (from a background thread) a job that raised ``err``; ``status`` is the
        status line's last word on it (unless it was cancelled: then it says so)."""
        self.status.failed(what, err)
        if job_failed(what, err)[1] == "info":
            status = f"{what}: cancelled."
        self.session.post(lambda: self.finish_job(status))

    # -- run, sweep --------------------------------------------------------------------
    def run(self) -> bool:
        """Measure the chosen representations at the chosen N; ``False`` if it could not start."""
        return self._launch([self.controls.n_states], "Run")

    def sweep(self) -> bool:
        """Measure the chosen representations at every N of ``controls.sweep_n_states``."""
        if not self.controls.sweep_n_states:
            self.status.refused("Sweep", "choose at least one state count to sweep over.")
            return False
        return self._launch(list(self.controls.sweep_n_states), "Sweep")

    def _launch(self, sizes: Sequence[int], kind: str) -> bool:
        if self.session.closed:
            return False
        if self.running:
            self.session.show("A run is already in progress: wait for it or press Cancel.",
                              "warning")
            return False
        try:
            specs = self.controls.specs(sizes)
        except (ValueError, TypeError) as err:
            message = str(err).splitlines()[0]
            self.controls.input_error = message  # next to the fields, where the eye is
            self.status.refused(kind, message)
            return False
        self.session.clear_alert()
        # The status first: the page turning busy must not show the last run's "finished".
        self.status.started(f"{kind}: {len(specs)} case(s) queued…")
        self.param.update(running=True, busy=True)
        self.start(self.measuring.work, specs, kind, self._finish)
        return True

    def _inputs_changed(self, *_events: Any) -> None:
        try:
            self.controls.specs([self.controls.n_states])
        except (ValueError, TypeError):
            return
        if self.controls.input_error:  # one Run refused for a value only it checks
            self.controls.input_error = ""
        self.status.input_fixed()

    def _finish(self, text: str) -> None:
        self.param.update(running=False, busy=self.submission.pending())
        self.status.ended(text)
