"""The one path a job takes: submit it to an executor, wait (or cancel), turn the outcome into
a row.

``sweep``, the CLI and the dashboard all go through these functions, whatever the executor:
the local :class:`explorer.WorkerExecutor` (per-job timeout, a label for its status, a kill on
cancel), a Dask cluster's :class:`explorer._src.jobs.cluster.DaskExecutor` (the same, each job in some
Dask worker's measuring process), or any ``concurrent.futures.Executor``-like object.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import socket
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from ..core.spec import Spec
from .worker import WorkerError, WorkerExecutor


def _killing(executor: Any) -> bool:
    """Whether ``executor`` takes a per-job timeout and label (``submit_with``) and kills a
    running job on ``cancel(future)``: :class:`WorkerExecutor` and a Dask cluster's
    ``DaskExecutor`` do (checked by that method, so this module never imports Dask's)."""
    return callable(getattr(executor, "submit_with", None))

POLL_S = 0.05

CANCELLED_BEFORE_START = "cancelled before it started"


def submit(executor: cf.Executor, fn: Callable, *args: Any, timeout: float | None | str = "default",
           label: str | None = None) -> cf.Future:
    """Submit ``fn(*args)``; a :class:`WorkerExecutor` also gets the job's timeout and label.

    A job whose specs name a problem defined in this process (:func:`explorer.define_problem`)
    carries that problem with it (see :func:`carry`): the worker never imports the caller's
    script.
    """
    fn, args = carry(fn, args)
    if _killing(executor):
        return executor.submit_with(fn, args, timeout=timeout, label=label)
    return executor.submit(fn, *args)


def carry(fn: Callable, args: tuple) -> tuple[Callable, tuple]:
    """``fn(*args)`` as a job that first defines, in the worker, the user problems its specs
    name: each is pickled by value with cloudpickle (code written in ``__main__`` included),
    since a worker cannot import the caller's script. Other jobs are returned unchanged."""
    from ..core.problems import user_problem  # noqa: PLC0415

    specs = [a for arg in args for a in (arg if isinstance(arg, (list, tuple)) else (arg,))
             if isinstance(a, Spec)]
    found = {s.problem: user_problem(s.problem) for s in specs}
    problems = tuple(p for p in found.values() if p is not None)
    if not problems:
        return fn, args
    from .jobs import with_problems  # noqa: PLC0415

    return with_problems, (_pickled(problems), fn, args)


def _pickled(problems: tuple) -> bytes:
    import cloudpickle  # noqa: PLC0415

    try:
        return cloudpickle.dumps(problems)
    except Exception as err:  # noqa: BLE001 - something in the user's code does not pickle
        names = ", ".join(repr(p.name) for p in problems)
        raise ValueError(f"problem {names} cannot be sent to the measuring worker: "
                         f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
                         ) from None


def cancel(executor: cf.Executor, future: cf.Future) -> bool:
    """Withdraw a queued job, or kill it if it is running (where the executor can)."""
    if _killing(executor):
        return executor.cancel(future)
    return future.cancel()


def failed_row(spec: Spec, err: BaseException) -> dict[str, Any]:
    """The row stored for a spec that produced no measurement."""
    if isinstance(err, cf.CancelledError):
        status, err = "cancelled", RuntimeError(CANCELLED_BEFORE_START)
    else:
        status = err.status if isinstance(err, WorkerError) else "error"
    message = str(err).splitlines()[0] if str(err) else type(err).__name__
    return {**dataclasses.asdict(spec), "status": status,
            "error": f"{type(err).__name__}: {message}", "finished_at": time.time(),
            "host": socket.gethostname()}


def wait(executor: cf.Executor, future: cf.Future, *, cancel_event: threading.Event | None = None,
         on_wait: Callable[[cf.Future], None] | None = None, poll_s: float = POLL_S) -> Any:
    """The result of ``future``; ``cancel_event`` set meanwhile cancels the job (only this one:
    other callers' jobs on a shared executor are left alone); ``on_wait`` is called on every poll.

    An interrupt (Ctrl-C) while waiting cancels the job, then propagates.
    """
    try:
        while True:
            try:
                return future.result(timeout=poll_s)
            except cf.TimeoutError:
                pass
            if cancel_event is not None and cancel_event.is_set():
                cancel(executor, future)
            if on_wait is not None:
                on_wait(future)
    except BaseException as err:
        if not isinstance(err, Exception):  # KeyboardInterrupt, SystemExit: stop the job too
            cancel(executor, future)
        raise


def run_one(spec: Spec, executor: cf.Executor, *, timeout: float | None | str = "default",
            store: Any = None, run_id: str | None = None,
            cancel_event: threading.Event | None = None,
            on_wait: Callable[[cf.Future], None] | None = None) -> tuple[dict[str, Any], cf.Future]:
    """Measure one spec through ``executor``; store the row (ok or not) and return it.

    Every failure of the job becomes a row with its status (``timeout``, ``crashed``, ``oom``,
    ``cancelled``, ``error``). An interrupt is not a failure of the job: nothing is stored, the
    job is cancelled and the interrupt propagates.
    """
    from .jobs import run_spec  # noqa: PLC0415

    future = submit(executor, run_spec, spec, timeout=timeout, label=spec.label)
    rollout = None
    try:
        result = wait(executor, future, cancel_event=cancel_event, on_wait=on_wait)
        row, rollout = dict(result["row"]), result["rollout"]
    except Exception as err:  # noqa: BLE001 - every failure of the job becomes a stored row
        row = failed_row(spec, err)
        # Where it failed, as far as the worker said when it started (a failed row names its
        # interpreter and JAX as an ok row does).
        env = getattr(executor, "environment", None) or {}
        for key in ("python", "jax_version", "jaxlib_version", "cpu_count", "load_avg", "host"):
            if env.get(key) is not None:
                row[key] = env[key]
        for key in ("worker", "host"):  # a cluster's job says which Dask worker ran it
            if getattr(err, key, None) is not None:
                row[key] = getattr(err, key)
    row["run_id"] = run_id
    row["problem_source"] = problem_source(spec.problem)
    if store is not None:
        row["id"] = store_row(store, row, rollout)
    return row, future


def problem_source(name: str) -> str | None:
    """Where the problem called ``name`` comes from, as stored with its rows."""
    from ..core.problems import get_problem  # noqa: PLC0415

    try:
        return get_problem(name).source
    except ValueError:
        return None


def store_row(store: Any, row: dict[str, Any], rollout: Any) -> int | None:
    """Store a finished row; its id, or ``None`` when the store stayed locked (or refused the
    write) and the row was kept in the store's side file, to be added by its next write."""
    from ..store.store import RowPending  # noqa: PLC0415

    try:
        return store.add(row, rollout)
    except RowPending:  # kept, not lost; the store has warned (StoreWarning)
        return None


_backend_jobs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_backend_lock = threading.Lock()


def backends(executor: cf.Executor) -> cf.Future:
    """The platforms JAX sees where ``executor`` runs its jobs (a future of a list).

    A fact about the machine, not about a caller: asked once per executor and shared (every
    dashboard page of a server asks the same worker); asked again only after a failure.
    """
    from .jobs import available_backends  # noqa: PLC0415

    with _backend_lock:
        job = _backend_jobs.get(executor)
        failed = job is not None and job.done() and (job.cancelled() or job.exception() is not None)
        if job is None or failed:
            job = submit(executor, available_backends, timeout=120, label="list JAX backends")
            _backend_jobs[executor] = job
        return job


# A case is built ahead only while its observations stay small (a state group of N units over H
# steps is N * H numbers; 100 * 200 by default): typing a huge N must not fill the worker.
PREPARE_MAX_VALUES = 4_000_000
PREPARING = "preparing"  # how a preparation's label starts (a page waiting behind it says so)
_prepared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def prepare(executor: cf.Executor, specs: list[Spec]) -> cf.Future | None:
    """Build ``specs``' cases ahead in an idle local worker (:func:`explorer._src.jobs.jobs.prepare_specs`),
    so a Run measures at once instead of first importing and simulating; its future, or ``None``
    when there is nothing to do.

    Only for a :class:`WorkerExecutor` that has nothing running or queued (a job that arrives
    meanwhile waits for one case's build at most), for built-in problems (a
    user's code runs only when its user runs it), at sizes up to :data:`PREPARE_MAX_VALUES`, and
    once per case and worker process. Changes no measured figure.
    """
    from .jobs import prepare_specs  # noqa: PLC0415
    from ..core.problems import user_problem  # noqa: PLC0415

    if not isinstance(executor, WorkerExecutor):
        return None
    with _backend_lock:
        # Built in the worker process now running (a replaced worker has built nothing).
        done = _prepared.setdefault(executor, set())
        todo, cases = [], []
        for spec in specs:
            case = (spec.problem, spec.representation, spec.n_states, spec.horizon, spec.unroll)
            if ((executor.workers_started, *case) in done or case in cases
                    or user_problem(spec.problem) is not None
                    or spec.n_states * spec.horizon > PREPARE_MAX_VALUES):
                continue
            todo.append(spec)
            cases.append(case)
        state = executor.status
        if not todo or state.running is not None or state.queued:
            return None
        try:  # under the lock: two pages asking at once submit one build
            future = executor.submit_with(prepare_specs, (todo,), timeout=60,
                                          label=f"{PREPARING} {todo[0].problem} "
                                                f"N={todo[0].n_states}")
        except RuntimeError:  # shut down
            return None

    def built(f: cf.Future) -> None:  # by the worker counted now (this job may have started it)
        if not f.cancelled() and f.exception() is None:
            with _backend_lock:
                done.update((executor.workers_started, *case) for case in cases)

    future.add_done_callback(built)
    return future
