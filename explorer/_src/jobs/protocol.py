"""What the explorer asks of an executor, beyond ``concurrent.futures``' ``submit``.

The local :class:`explorer.WorkerExecutor` and a Dask cluster's ``DaskExecutor`` both follow
:class:`JobExecutor`, so a caller (the dashboard's job queue) asks the executor what it can
tell instead of checking which class it is. Any other ``concurrent.futures.Executor`` still
runs jobs; it just tells nothing of where one is.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

__all__ = ["JobExecutor", "JobPlace"]


@dataclasses.dataclass(frozen=True)
class JobPlace:
    """Where one job is now, as far as its executor can tell (``None``: it cannot).

    Attributes:
      position: 0 when the job runs, k when k jobs run or wait ahead of it in a shared queue.
      stage: the running job's stage (``build``, ``trace``, ``compile``...).
      elapsed_s: seconds since the running job started.
      running: the label of the job the executor runs now (maybe another caller's).
      queued: the labels of the jobs waiting behind the running one.
      remote: the job runs on a cluster (no queue position is known here).
    """

    position: int | None = None
    stage: str | None = None
    elapsed_s: float | None = None
    running: str | None = None
    queued: tuple[str, ...] = ()
    remote: bool = False


@runtime_checkable
class JobExecutor(Protocol):
    """An executor the explorer's job path can time out, label, kill and ask about.

    Attributes:
      parallel: how many jobs it runs at once now (1 for the local worker).
    """

    parallel: int

    def submit_with(self, fn: Callable, args: tuple = (), *, timeout: Any = "default",
                    label: str | None = None) -> cf.Future:
        """``fn(*args)`` with a per-job timeout and a label its status shows."""

    def cancel(self, future: cf.Future) -> bool:
        """Withdraw a queued job, or kill it if it is running."""

    def describe(self) -> str | None:
        """One line for a page saying where jobs run; ``None`` when they run on this machine."""

    def place(self, future: cf.Future) -> JobPlace:
        """Where the job of ``future`` is now."""
