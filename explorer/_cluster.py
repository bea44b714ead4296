"""Sweeps on a Dask cluster: each Dask worker measures through its own isolated worker process.

``distributed`` is imported only here, and only when a scheduler is given. Every task runs in
a :class:`explorer.WorkerExecutor` that lives in the Dask worker's process (so timeouts, crash
and out-of-memory handling are the local ones), under a per-host ``distributed.Semaphore`` so
that at most ``per_host`` measurements run at once on one machine: timings taken side by side
contaminate each other. Rows come back to the client, which stores them as they finish.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ._spec import Spec
from ._worker import WorkerExecutor

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


def measure_task(spec: Spec, timeout: float | None, python: str | None,
                 per_host: int) -> dict[str, Any]:
    """A Dask task: measure ``spec`` under the host's semaphore; the row and rollout.

    Submitted from the client through :func:`explorer._run.carry`, so a problem defined there
    (``define_problem``) is defined in this Dask worker before the task runs."""
    from distributed import Semaphore  # noqa: PLC0415

    from ._jobs import run_spec  # noqa: PLC0415
    from ._run import carry, failed_row  # noqa: PLC0415

    host = socket.gethostname()
    ex = _executor(python, timeout)
    # Dask fixes a semaphore's lease count by name, so the count is part of the name: sweeps
    # with the same per_host share the host's limit (sweeps with another one do not).
    with Semaphore(max_leases=per_host, name=f"pytree-explorer-host-{host}-{per_host}"):
        fn, args = carry(run_spec, (spec,))  # the problems defined here go on to the worker
        future = ex.submit_with(fn, args, timeout=timeout, label=spec.label)
        key = _task_key()
        _running[key] = (ex, future)  # first register, then look for a kill order
        if key in _killed:
            ex.cancel(future)
        try:
            result = future.result()
            row, rollout = dict(result["row"]), result["rollout"]
        except Exception as err:  # noqa: BLE001 - every failure of the job becomes a row
            row, rollout = failed_row(spec, err), None
        finally:
            _running.pop(key, None)
    row["worker"] = _dask_worker_name()
    row.setdefault("host", host)
    return {"row": row, "rollout": rollout}


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
    """Runs small jobs (backend checks, versions) on some Dask worker's measuring process."""

    def __init__(self, client: Any, python: str | None):
        self.client, self.python = client, python

    def submit(self, fn: Callable, /, *args: Any) -> Any:
        return self.client.submit(run_in_worker, fn, args, self.python, pure=False)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


def connect(scheduler: Any) -> tuple[Any, bool]:
    """A ``distributed.Client`` for an address or a client; whether we own (must close) it."""
    try:
        from distributed import Client  # noqa: PLC0415
    except ImportError:
        raise ValueError("a scheduler needs Dask distributed: pip install "
                         "'pytree-compile-explorer[cluster]'") from None
    if isinstance(scheduler, str):
        try:
            return Client(scheduler, timeout="20s"), True
        except OSError as err:
            raise ValueError(f"cannot reach the Dask scheduler {scheduler}: {err}") from None
    return scheduler, False


def measure_all(client: Any, specs: list[Spec], *, timeout: float | None, python: str | None,
                per_host: int, cancel: threading.Event | None = None,
                poll_s: float = 0.1) -> Iterator[tuple[Spec, dict[str, Any]]]:
    """Submit every spec; yield ``(spec, {"row", "rollout"})`` as each finishes.

    A task whose Dask worker died (Dask retries it elsewhere first) comes back as a ``crashed``
    row naming the error; the others go on. ``cancel`` set, an interrupt, or closing the
    iterator cancels what is left and kills the measurements already running.
    """
    from ._run import carry, failed_row  # noqa: PLC0415

    futures = {}
    for spec in specs:  # a problem defined here travels with its task (see carry)
        fn, args = carry(measure_task, (spec, timeout, python, per_host))
        futures[client.submit(fn, *args, pure=False)] = spec
    waiting = dict(futures)
    try:
        while waiting and not (cancel is not None and cancel.is_set()):
            done = [f for f in waiting if f.done()]
            if not done:
                time.sleep(poll_s)
                continue
            for future in done:
                spec = waiting.pop(future)
                try:
                    yield spec, future.result()
                except Exception as err:  # noqa: BLE001 - KilledWorker and the like
                    row = failed_row(spec, err)
                    row["status"] = "crashed"
                    yield spec, {"row": row, "rollout": None}
    finally:
        left = [f for f in futures if not f.done()]
        if left:
            client.cancel(left)
            try:  # a cancelled Dask task's thread runs on: kill its measurement too
                client.run(kill_tasks, [str(f.key) for f in left])
            except Exception:  # noqa: BLE001 - a worker gone meanwhile has nothing to kill
                pass
