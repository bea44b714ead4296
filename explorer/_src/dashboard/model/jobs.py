"""What a dashboard page runs: its background jobs, their progress, and cancelling them.

Measurements go through the page's executor (by default :func:`explorer.shared_executor`, one
queue for every session, one job at a time; on a server given a Dask scheduler, a
:class:`explorer._src.jobs.cluster.DaskExecutor`, as many at once as the cluster has workers), are stored
the moment they finish, and are waited for on a background thread of the session, never on the
page's event loop.
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
from collections.abc import Callable, Sequence
from typing import Any

import param

from ...jobs import run as _run
from ...jobs.cluster import DaskExecutor
from ...jobs.jobs import rollout_spec
from .controls import CaseControls
from .results import Results
from .session import Batch, Session
from .view import PlotView
from ...core.spec import Spec
from ...store.sweeps import overlap_message
from ...jobs.worker import WorkerExecutor, shared_executor

__all__ = ["POLL_S", "JobQueue", "job_failed"]

POLL_S = 0.25

_STATUS_WORDS = {
    "timeout": "Timed out",
    "crashed": "The worker crashed on",
    "oom": "Out of memory on",
    "cancelled": "Cancelled",
    "error": "Failed",
}


def job_failed(what: str, err: BaseException) -> tuple[str, str]:
    """The alert (message, kind) for a background job that raised ``err``."""
    if isinstance(err, cf.CancelledError) or getattr(err, "status", None) == "cancelled":
        return f"{what}: cancelled.", "info"
    message = str(err).splitlines()[0] if str(err) else type(err).__name__
    return f"{what} failed: {type(err).__name__}: {message}", "danger"


class JobQueue(param.Parameterized):
    """A page's jobs: run and sweep the controls' cases, and any other job (:meth:`start`).

    Args:
      executor: where jobs run (default: :func:`explorer.shared_executor`; a
        :class:`explorer._src.jobs.cluster.DaskExecutor` measures on a Dask cluster).
    """

    running = param.Boolean(default=False, precedence=-1, doc="A run or sweep is in progress.")
    busy = param.Boolean(default=False, precedence=-1, doc="Any background job is in progress.")

    session = param.ClassSelector(class_=Session, precedence=-1)
    controls = param.ClassSelector(class_=CaseControls, precedence=-1)
    results = param.ClassSelector(class_=Results, precedence=-1)
    view = param.ClassSelector(class_=PlotView, precedence=-1)

    def __init__(self, *, executor: cf.Executor | None = None, **params: Any):
        super().__init__(**params)
        self._executor = executor
        # One event per background job, set by ``cancel``; a job that starts after a cancel
        # gets a fresh one, so an old cancel never stops new work.
        self._cancels: set[threading.Event] = set()
        self._futures: set[cf.Future] = set()
        self._threads: list[threading.Thread] = []
        # Only the latest status line of a burst is shown, and only while a job runs.
        self._status = Batch(self.session.post, self._show_status)
        # Once the worker has answered (it is started and idle), and whenever the case changes.
        self.controls.param.watch(self._prepare, ["backends_known", "problem", "representations",
                                                  "n_states", "horizon", "unroll"])

    @property
    def executor(self) -> cf.Executor:
        if self._executor is None:
            self._executor = shared_executor()
        return self._executor

    @property
    def where(self) -> str | None:
        """One line saying the page measures on a Dask cluster (``None`` when it measures here)."""
        executor = self._executor
        return executor.describe() if isinstance(executor, DaskExecutor) else None

    def _prepare(self, *_events: Any) -> None:
        """Have an idle local worker build the case Run would measure now (see
        :func:`explorer._src.jobs.run.prepare`): the first result of a new size is shown sooner."""
        if self.running or self.session.closed or not self.controls.backends_known:
            return
        try:
            specs = self.controls.specs([self.controls.n_states])
        except (ValueError, TypeError):  # not a valid case (yet): nothing to build
            return
        _run.prepare(self.executor, specs)

    # -- any job -----------------------------------------------------------------------
    def start(self, target: Callable, *args: Any) -> None:
        """Run ``target(cancel_event, *args)`` on a background thread of this session."""
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

    def wait(self, timeout: float | None = None) -> bool:
        """Block until this session's background jobs are done (for scripts and tests)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in list(self._threads):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(left)
        return not any(t.is_alive() for t in self._threads)

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
        self.session.status = "Cancelling…"

    def _cancel_all(self) -> None:
        for event in list(self._cancels):
            event.set()
        for future in list(self._futures):
            _run.cancel(self.executor, future)  # withdrawn when queued, killed when running

    def submit(self, fn: Callable, args: tuple, label: str) -> cf.Future:
        """Submit ``fn(*args)`` to the executor as a job of this session (``cancel`` stops it)."""
        future = _run.submit(self.executor, fn, *args, timeout=self.controls.timeout_s,
                             label=label)
        self._futures.add(future)
        future.add_done_callback(self._futures.discard)
        return future

    def _waiting(self, describe: Callable[[str], str]) -> Callable[[cf.Future], None]:
        """An ``on_wait`` for :func:`explorer._src.jobs.run.wait`: posts the job's queue position, stage
        and elapsed time to the status line."""
        executor = self.executor

        def on_wait(future: cf.Future) -> None:
            if isinstance(executor, WorkerExecutor):
                position = executor.queue_position(future)
                state = executor.status
                if position == 0 and state.elapsed_s is not None:
                    text = describe(f"stage {state.stage or '…'}, {state.elapsed_s:.1f} s")
                elif position == 1 and (state.running or "").startswith(_run.PREPARING):
                    # A case being built ahead (most likely this page's own): not a queue.
                    text = describe(f"starting: the worker is {state.running}")
                elif position:
                    text = describe(f"waiting in the shared queue, position {position}"
                                    + (f" (running now: {state.running})" if state.running else ""))
                else:
                    text = describe("finishing")
            elif isinstance(executor, DaskExecutor):
                text = describe("on the cluster" + (", finishing" if future.done() else ""))
            else:
                text = describe("running")
            self._status.add(text)

        return on_wait

    def result(self, future: cf.Future, cancel: threading.Event,
               describe: Callable[[str], str]) -> Any:
        """Wait for ``future``, posting its progress to the status line; ``cancel`` stops it."""
        return _run.wait(self.executor, future, cancel_event=cancel,
                         on_wait=self._waiting(describe), poll_s=POLL_S)

    def _show_status(self, texts: list[str]) -> None:
        if self.busy:
            self.session.status = texts[-1]

    def _jobs_left(self) -> bool:
        return any(not f.done() for f in list(self._futures))

    def finish_job(self, text: str) -> None:
        """A job other than a run or sweep is done: say so unless a run is still going."""
        busy = self.running or self._jobs_left()
        self.param.update(busy=busy)
        if not self.running:
            self.session.status = text

    def failed(self, what: str, err: BaseException, status: str) -> None:
        """Report (from a background thread) a job that raised ``err``."""
        self.session.post(functools.partial(self.session.show, *job_failed(what, err)))
        self.session.post(functools.partial(self.finish_job, status))

    # -- run, sweep --------------------------------------------------------------------
    def run(self) -> bool:
        """Measure the chosen representations at the chosen N; ``False`` if it could not start."""
        return self._launch([self.controls.n_states], "Run")

    def sweep(self) -> bool:
        """Measure the chosen representations at every N of ``controls.sweep_n_states``."""
        if not self.controls.sweep_n_states:
            self.session.show("Bad input: choose at least one state count to sweep over.",
                              "danger")
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
            self.session.show(f"Bad input: {message}", "danger")
            self.controls.input_error = message  # next to the fields, where the eye is
            self.session.status = f"{kind} not started: {message}"
            return False
        self.session.clear_alert()
        # The status first: the page turning busy must not show the last run's "finished".
        self.session.status = f"{kind}: {len(specs)} case(s) queued…"
        self.param.update(running=True, busy=True)
        self.start(self._work, specs, kind)
        return True

    def _work(self, cancel: threading.Event, specs: list[Spec], kind: str) -> None:
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
            row, _ = _run.run_one(dataclasses.replace(spec, rollout=False), self.executor,
                                  timeout=self.controls.timeout_s, run_id=run_id,
                                  cancel_event=cancel,
                                  on_wait=self._waiting(lambda what, p=prefix: f"{p} — {what}"))
            with lock:  # rows that finish together on a cluster are stored one by one
                self.results.add_row(row)
                done[0] += 1
                if row.get("status") != "ok":
                    failures.append(row)
            self._page_caught_up(cancel)
            if row.get("status") != "ok":
                self.session.post(functools.partial(self._report_failure, row))
            elif spec.rollout and not cancel.is_set():
                self._capture(spec, int(row["id"]), cancel, prefix)

        try:
            # Marked in the store like any sweep: a CLI sweep on this host meanwhile warns, and
            # this page says when one is already measuring (this server's own pages share one
            # queue, so they never overlap each other).
            try:
                others = [o for o in marks.enter_context(self.results.store.sweeping(run_id))
                          if o["pid"] != os.getpid()]
            except Exception:  # noqa: BLE001 - best effort: the page measures all the same
                others = []
            if others:
                self.session.post(functools.partial(
                    self.session.show, overlap_message(self.results.store.path, others),
                    "warning"))
            # The local worker measures one case at a time: the cases go one after the other.
            # A cluster runs as many at once as it has workers (its per-host limit holds).
            width = min(len(specs), int(getattr(self.executor, "parallel", 1) or 1))
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
            elapsed = time.monotonic() - started
            cancelled = cancel.is_set()
            failed = sum(1 for row in failures if row.get("status") != "cancelled")
            ok = done[0] - len(failures)
            text = (f"{kind} {'cancelled' if cancelled else 'finished'}: {ok} of {len(specs)} "
                    f"case(s) measured in {elapsed:.1f} s"
                    + (f", {failed} failed (see the table)" if failed else "") + ".")
            self.session.post(functools.partial(self._finish, text))

    def _capture(self, spec: Spec, row_id: int, cancel: threading.Event, prefix: str) -> None:
        """Fetch and store the trajectories of a measured row; a failure costs only them."""
        future = self.submit(rollout_spec, (spec,), f"rollout {spec.label}")
        try:
            rollout = self.result(future, cancel,
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

    def _report_failure(self, row: dict[str, Any]) -> None:
        status = row.get("status", "error")
        word = _STATUS_WORDS.get(status, "Failed")
        label = (f"{row.get('problem')}/{row.get('representation')} N={row.get('n_states')} "
                 f"H={row.get('horizon')} {row.get('target')}")
        if status == "cancelled":
            self.session.show(f"{word}: {label}. Measurements already taken are kept.", "info")
            return
        error = (row.get("error") or "").strip()
        if error and not error.endswith((".", "!", "?")):
            error += "."  # a sentence of its own before the next
        self.session.show(f"{word}: {label}. {error} The server keeps running; "
                          "measurements already taken are kept.", "danger")

    def _finish(self, text: str) -> None:
        self.param.update(running=False, busy=self._jobs_left())
        self.session.status = text
