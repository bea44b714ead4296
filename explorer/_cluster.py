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
from collections.abc import Callable, Iterator
from typing import Any

from ._spec import Spec
from ._worker import WorkerExecutor

_local: dict[Any, WorkerExecutor] = {}
_local_lock = threading.Lock()


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
    """A Dask task: measure ``spec`` under the host's semaphore; the row and rollout."""
    from distributed import Semaphore  # noqa: PLC0415

    from ._jobs import run_spec  # noqa: PLC0415
    from ._run import failed_row  # noqa: PLC0415

    host = socket.gethostname()
    ex = _executor(python, timeout)
    with Semaphore(max_leases=per_host, name=f"pytree-explorer-host-{host}"):
        future = ex.submit_with(run_spec, (spec,), timeout=timeout, label=spec.label)
        try:
            result = future.result()
            row, rollout = dict(result["row"]), result["rollout"]
        except Exception as err:  # noqa: BLE001 - every failure of the job becomes a row
            row, rollout = failed_row(spec, err), None
    row["worker"] = _dask_worker_name()
    row.setdefault("host", host)
    return {"row": row, "rollout": rollout}


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
                per_host: int) -> Iterator[tuple[Spec, dict[str, Any]]]:
    """Submit every spec; yield ``(spec, {"row", "rollout"})`` as each finishes.

    A task whose Dask worker died (Dask retries it elsewhere first) comes back as a ``crashed``
    row naming the error; the others go on. Closing the iterator cancels what is left.
    """
    from distributed import as_completed  # noqa: PLC0415

    from ._run import failed_row  # noqa: PLC0415

    futures = {client.submit(measure_task, spec, timeout, python, per_host, pure=False): spec
               for spec in specs}
    try:
        for future in as_completed(futures):
            spec = futures[future]
            try:
                yield spec, future.result()
            except Exception as err:  # noqa: BLE001 - KilledWorker and the like
                row = failed_row(spec, err)
                row["status"] = "crashed"
                yield spec, {"row": row, "rollout": None}
    finally:
        client.cancel([f for f in futures if not f.done()])
