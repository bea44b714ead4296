"""Sweeps on a Dask cluster: each Dask worker measures through its own isolated worker process.

``distributed`` is imported only here, and only when a scheduler is given. Every task runs in
a :class:`explorer.WorkerExecutor` that lives in the Dask worker's process (so timeouts, crash
and out-of-memory handling are the local ones), under a per-host ``distributed.Semaphore`` so
that at most ``per_host`` measurements run at once on one machine: timings taken side by side
contaminate each other. Rows come back to the client, which stores them as they finish.

Two callers: :func:`explorer.sweep` (:func:`measure_all`) and a dashboard served with a scheduler,
whose jobs take the one job path of :mod:`explorer._src.jobs.run` through :class:`DaskExecutor`.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..core.spec import Spec
from .protocol import JobPlace
from .worker import DEFAULT_TIMEOUT_S, WorkerCrashed, WorkerExecutor

_local: dict[Any, WorkerExecutor] = {}
_local_lock = threading.Lock()
# Dask task key -> (executor, future) of the measurement that task is running in this process.
_running: dict[str, tuple[WorkerExecutor, Any]] = {}
# Tasks told to stop (kept: a cancelled task may register after the order came).
_killed: set[str] = set()


def _executor(python: str | None, timeout: float | None) -> WorkerExecutor:
    """This Dask worker process's own measuring worker (one per interpreter)."""
    with _local_lock:
        ex = _local.get(python)
        if ex is None:
            ex = _local[python] = WorkerExecutor(timeout=timeout, python=python)
        return ex


def _dask_worker_name() -> str | None:
    from distributed import get_worker  # noqa: PLC0415

    try:
        worker = get_worker()
    except ValueError:
        return None
    return str(worker.name if worker.name is not None else worker.address)


def run_in_worker(fn: Callable, args: tuple, python: str | None) -> Any:
    """A Dask task: ``fn(*args)`` through this Dask worker's measuring worker process."""
    return _executor(python, None).submit(fn, *args).result()


def run_task(fn: Callable, args: tuple, timeout: float | None | str, python: str | None,
             per_host: int, label: str | None = None) -> Any:
    """A Dask task: ``fn(*args)`` through this Dask worker's measuring process, under the host's
    semaphore (at most ``per_host`` at once on this machine), killable by :func:`kill_tasks`.

    A ``{"row": ...}`` result (a measurement) gets the Dask worker's name and host; a failure is
    raised as it came from the measuring process (its ``status`` kept), naming them too."""
    from distributed import Semaphore  # noqa: PLC0415

    host = socket.gethostname()
    ex = _executor(python, DEFAULT_TIMEOUT_S if timeout == "default" else timeout)
    # Dask fixes a semaphore's lease count by name, so the count is part of the name: sweeps
    # with the same per_host share the host's limit (sweeps with another one do not).
    with Semaphore(max_leases=per_host, name=f"pytree-explorer-host-{host}-{per_host}"):
        future = ex.submit_with(fn, args, timeout=timeout, label=label)
        key = _task_key()
        _running[key] = (ex, future)  # first register, then look for a kill order
        if key in _killed:
            ex.cancel(future)
        try:
            result = future.result()
        except Exception as err:
            with contextlib.suppress(AttributeError):  # where it failed, for its row
                err.worker, err.host = _dask_worker_name(), host
            raise
        finally:
            _running.pop(key, None)
    if isinstance(result, dict) and isinstance(result.get("row"), dict):
        result["row"]["worker"] = _dask_worker_name()
        result["row"].setdefault("host", host)
    return result


def measure_task(spec: Spec, timeout: float | None, python: str | None,
                 per_host: int) -> dict[str, Any]:
    """A Dask task: measure ``spec`` (see :func:`run_task`); the row, failed or not, and rollout.

    Submitted from the client through :func:`explorer._src.jobs.run.carry`, so a problem defined there
    (``define_problem``) is defined in this Dask worker before the task runs."""
    from .jobs import run_spec  # noqa: PLC0415
    from .run import carry, failed_row  # noqa: PLC0415

    fn, args = carry(run_spec, (spec,))  # the problems defined here go on to the worker
    try:
        return run_task(fn, args, timeout, python, per_host, spec.label)
    except Exception as err:  # noqa: BLE001 - every failure of the job becomes a row
        row = failed_row(spec, err)
        row["worker"] = getattr(err, "worker", None) or _dask_worker_name()
        return {"row": row, "rollout": None}


def _task_key() -> str:
    from distributed import get_worker  # noqa: PLC0415

    try:
        return str(get_worker().get_current_task())
    except ValueError:
        return ""


def kill_tasks(keys: list[str]) -> int:
    """Run on every Dask worker: kill the measurements of these tasks (an interrupted sweep)."""
    killed = 0
    _killed.update(keys)  # first the order, then look for the running job
    for key in keys:
        entry = _running.get(key)
        if entry is not None and entry[0].cancel(entry[1]):
            killed += 1
    return killed


class DaskExecutor:
    """Runs jobs on a Dask cluster, each through some Dask worker's measuring process.

    The executor of a dashboard served with a scheduler (and of a sweep's small jobs):
    :meth:`submit_with` is the job path of :func:`explorer._src.jobs.run.submit` (at most ``per_host``
    jobs at once per host, a per-job timeout, a kill on :meth:`cancel`); plain :meth:`submit`
    runs a small job (a backend check) outside the host's limit. Futures are
    ``concurrent.futures.Future``s: a job whose Dask worker died raises :class:`WorkerCrashed`.
    """

    def __init__(self, client: Any, python: str | None = None, per_host: int = 1):
        self.client, self.python, self.per_host = client, python, per_host

    def submit(self, fn: Callable, /, *args: Any) -> Any:
        return self.client.submit(run_in_worker, fn, args, self.python, pure=False)

    def submit_with(self, fn: Callable, args: tuple = (), *, timeout: float | None | str = "default",
                    label: str | None = None) -> cf.Future:
        """``fn(*args)`` as a Dask task (see :func:`run_task`); a future of its result."""
        task = self.client.submit(run_task, fn, tuple(args), timeout, self.python, self.per_host,
                                  label or getattr(fn, "__name__", "job"), pure=False)
        return _follow(task)

    def cancel(self, future: cf.Future) -> bool:
        """Withdraw a queued job, or kill its measurement if it is running (its row then says
        ``cancelled``, as the local worker's does)."""
        task = getattr(future, "dask_task", None)
        if task is None or future.done():
            return False
        if getattr(future, "cancel_sent", False):  # asked on every poll while it winds down
            return True
        future.cancel_sent = True  # type: ignore[attr-defined]
        try:  # running: its measuring process is killed and the task fails with WorkerCancelled
            killed = sum(self.client.run(kill_tasks, [str(task.key)]).values())
        except Exception:  # noqa: BLE001 - a worker gone meanwhile has nothing to kill
            killed = 0
        if not killed:
            self.client.cancel([task])
        return True

    def place(self, future: cf.Future) -> JobPlace:
        """On the cluster (the scheduler's queue is not followed from here)."""
        return JobPlace(position=None if future.done() else 0, remote=True)

    @property
    def parallel(self) -> int:
        """How many jobs the cluster can run at once now (its workers' threads; at least 1)."""
        try:
            return max(1, sum(self.client.nthreads().values()))
        except Exception:  # noqa: BLE001 - scheduler gone: jobs then fail one by one
            return 1

    def describe(self) -> str:
        """One line for the page: where measurements run."""
        try:
            n = len(self.client.nthreads())
        except Exception:  # noqa: BLE001 - scheduler gone
            n = 0
        return (f"Measuring on the Dask cluster {self.client.scheduler.address}: {n} worker(s), "
                f"at most {self.per_host} measurement(s) at once per host.")

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass

    def close(self) -> None:
        """Disconnect from the scheduler (a served dashboard's end); its tasks are released."""
        with _clusters_lock:
            for key in [k for k, v in _clusters.items() if v is self]:
                del _clusters[key]
        self.client.close()


def _follow(task: Any) -> cf.Future:
    """A ``concurrent.futures.Future`` that follows a Dask future (kept alive by it)."""
    future: cf.Future = cf.Future()
    future.dask_task = task  # type: ignore[attr-defined] - for cancel; keeps the task alive

    def done(t: Any) -> None:
        if t.status == "cancelled":
            future.cancel()
            return
        value = None
        try:
            err = t.exception()
        except Exception as failure:  # noqa: BLE001 - the scheduler is gone
            err = failure
        if err is None:
            try:  # fetched through the scheduler: it can be gone since the task finished
                value = t.result()
            except Exception as failure:  # noqa: BLE001 - never leave the job unanswered
                err = WorkerCrashed(f"lost the Dask scheduler before the result came back: "
                                    f"{type(failure).__name__}: {failure}")
        # Dask's own errors for a worker (or the link to it) lost mid-task; a job's own
        # failures come back as the measuring process raised them.
        elif type(err).__name__ in ("KilledWorker", "CommClosedError"):
            err = WorkerCrashed(f"the Dask worker died: {err}")
        with contextlib.suppress(cf.InvalidStateError):  # already cancelled here
            if err is None:
                future.set_result(value)
            else:
                future.set_exception(err)

    task.add_done_callback(done)
    return future


_clusters: dict[tuple[str, int], DaskExecutor] = {}
_clusters_lock = threading.Lock()


def cluster_executor(scheduler: Any, per_host: int = 1) -> DaskExecutor:
    """The executor for a scheduler address (or client), shared by every page of a server:
    connected once; a one-line ``ValueError`` when nothing answers there (within Dask's
    ``distributed.comm.timeouts.connect``)."""
    if not isinstance(per_host, int) or isinstance(per_host, bool) or per_host < 1:
        raise ValueError(f"per_host must be a whole number >= 1, got {per_host!r}")
    if not isinstance(scheduler, str):
        return DaskExecutor(connect(scheduler)[0], per_host=per_host)
    with _clusters_lock:
        ex = _clusters.get((scheduler, per_host))
        if ex is None:
            ex = _clusters[(scheduler, per_host)] = DaskExecutor(
                connect(scheduler)[0], per_host=per_host)
        return ex


def connect(scheduler: Any) -> tuple[Any, bool]:
    """A ``distributed.Client`` for an address or a client; whether we own (must close) it.

    How long an address that does not answer is tried is Dask's own setting,
    ``distributed.comm.timeouts.connect`` (30 s unless set, e.g. by
    ``DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=5s``): a refused connection is retried
    until then, as Dask does, since a scheduler started alongside may not listen yet."""
    try:
        from distributed import Client  # noqa: PLC0415
    except ImportError:
        raise ValueError("a scheduler needs Dask distributed: pip install "
                         "'pytree-compile-explorer[cluster]'") from None
    if isinstance(scheduler, str):
        try:
            return Client(scheduler), True
        except (OSError, ValueError, TypeError) as err:  # refused, timed out, a bad address
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ValueError(f"cannot reach the Dask scheduler {scheduler}: {first}") from None
    return scheduler, False


class SchedulerLost(RuntimeError):
    """The Dask scheduler went away during a sweep (killed, its machine down, the network)."""


def _lost_message(client: Any, left: int, total: int) -> str:
    try:
        where = f" {client.scheduler.address}"
    except AttributeError:
        where = ""
    return (f"lost the Dask scheduler{where} during the sweep: {left} of {total} case(s) not "
            "measured; the rows finished before are stored, and the same sweep run again "
            "measures only the rest")


@contextlib.contextmanager
def quiet_reconnect() -> Iterator[None]:
    """Keep ``distributed``'s own traceback of a failed reconnect out of the terminal while a
    client whose scheduler is gone is closed (the caller says it in one line)."""
    import logging  # noqa: PLC0415

    names = ["distributed", *(n for n in logging.root.manager.loggerDict
                              if n.startswith("distributed."))]
    loggers = [logging.getLogger(n) for n in names]  # each logger has its own switch
    previous = [lg.disabled for lg in loggers]
    for lg in loggers:
        lg.disabled = True
    try:
        yield
    finally:
        for lg, was in zip(loggers, previous):
            lg.disabled = was


def close_lost(client: Any) -> None:
    """Close a client whose scheduler is gone without waiting for it to come back."""
    with quiet_reconnect(), contextlib.suppress(Exception):
        client.close(timeout=2)


def measure_all(client: Any, specs: list[Spec], *, timeout: float | None, python: str | None,
                per_host: int, cancel: threading.Event | None = None,
                poll_s: float = 0.1) -> Iterator[tuple[Spec, dict[str, Any]]]:
    """Submit every spec; yield ``(spec, {"row", "rollout"})`` as each finishes.

    A task whose Dask worker died (Dask retries it elsewhere first) comes back as a ``crashed``
    row naming the error; the others go on. ``cancel`` set, an interrupt, or closing the
    iterator cancels what is left and kills the measurements already running. Losing the
    scheduler (its tasks cancelled under us, or a finished task's result no longer fetchable)
    raises :class:`SchedulerLost`: no row is made for a case whose result never came back, so
    a rerun measures exactly those.
    """
    from .run import carry, failed_row  # noqa: PLC0415

    futures = {}
    for spec in specs:  # a problem defined here travels with its task (see carry)
        fn, args = carry(measure_task, (spec, timeout, python, per_host))
        futures[client.submit(fn, *args, pure=False)] = spec
    waiting = dict(futures)
    lost = False
    try:
        while waiting and not (cancel is not None and cancel.is_set()):
            done = [f for f in waiting if f.done()]
            if not done:
                time.sleep(poll_s)
                continue
            for future in done:
                status = future.status
                if status in ("cancelled", "lost"):  # not by us: the scheduler is gone
                    lost = True
                    raise SchedulerLost(_lost_message(client, len(waiting), len(futures)))
                try:
                    out = future.result()
                except Exception as err:  # noqa: BLE001 - KilledWorker and the like
                    if status == "finished" and isinstance(err, OSError):  # it ran, and its
                        # result comes through the scheduler: a broken link (CommClosedError
                        # is an OSError) there is the scheduler gone before the client noticed
                        lost = True
                        raise SchedulerLost(_lost_message(client, len(waiting),
                                                          len(futures))) from None
                    row = failed_row(waiting[future], err)
                    row["status"] = "crashed"
                    out = {"row": row, "rollout": None}
                yield waiting.pop(future), out
    finally:
        left = [f for f in futures if not f.done()]
        if left and not lost:  # a lost scheduler has nothing left to cancel or kill
            client.cancel(left)
            try:  # a cancelled Dask task's thread runs on: kill its measurement too
                client.run(kill_tasks, [str(f.key) for f in left])
            except Exception:  # noqa: BLE001 - a worker gone meanwhile has nothing to kill
                pass
