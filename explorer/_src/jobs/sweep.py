"""Sweeps: every (size, target, representation) of a problem, measured one at a time and
stored the moment each finishes."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import itertools
import threading
import uuid
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pandas as pd

from ..util import validate as v
from .cluster import SchedulerLost, close_lost
from .run import problem_source, run_one, store_row, submit
from ..core.spec import Spec
from ..store.store import COLUMNS, Store, StoreWarning, to_frame
from ..store.sweeps import overlap_message
from .worker import (DEFAULT_TIMEOUT_S, WorkerError, WorkerExecutor, check_python,
                      memory_limit_bytes)


@dataclasses.dataclass(frozen=True)
class SweepEvent:
    """Progress of a sweep: ``row`` is ``None`` when ``spec`` starts, the result when it ends."""

    done: int
    total: int
    spec: Spec
    row: dict[str, Any] | None = None
    skipped: bool = False


def _problem_name(problem: Any) -> str:
    """A problem's name; a problem object made by ``define_problem`` is registered first."""
    from ..core.problems import Problem  # noqa: PLC0415
    from ..core.user_problems import register  # noqa: PLC0415
    from ..core.user_problems import UserProblem  # noqa: PLC0415

    if isinstance(problem, UserProblem):
        return register(problem).name
    if isinstance(problem, Problem):
        return problem.name
    return problem


def sweep_specs(problem: Any, representations: Sequence[str] | str | None = None,
                n_states: Iterable[int] | int = (10, 30, 100),
                horizons: Iterable[int] | int = (200,),
                targets: Sequence[str] | str = ("loss", "grad"), *, unroll: int = 1,
                repeats: int = 1, backend: str | None = None, rollouts: bool = False,
                memory: bool = False) -> list[Spec]:
    """The validated specs of a sweep, in measuring order.

    Representations are interleaved for each size (A B A B ...) so machine noise hits them
    alike.
    """
    from ..core.problems import user_problem  # noqa: PLC0415
    from ..core.representations import REPRESENTATIONS  # noqa: PLC0415

    problem = _problem_name(problem)
    own = user_problem(problem)
    default = tuple(REPRESENTATIONS) if own is None else own.representation_names
    reps = default if representations is None else v.check_many(
        "representation", representations, tuple(REPRESENTATIONS))
    sizes = v.check_ints("n_states", n_states, 1, v.MAX_N_STATES)
    hs = v.check_ints("horizon", horizons, 1, v.MAX_HORIZON)
    tgts = v.check_many("target", targets, v.TARGETS)
    return [Spec(problem, r, n, h, t, unroll, backend, repeats, rollout=rollouts,
                 memory=memory).validated()
            for h, n, t, r in itertools.product(hs, sizes, tgts, reps)]


def sweep(
    problem: Any,
    representations: Sequence[str] | str | None = None,
    n_states: Iterable[int] | int = (10, 30, 100),
    horizons: Iterable[int] | int = (200,),
    targets: Sequence[str] | str = ("loss", "grad"),
    *,
    unroll: int = 1,
    repeats: int = 1,
    backend: str | None = None,
    rollouts: bool = False,
    memory: bool = False,
    store: Store | str | None | bool = None,
    executor: cf.Executor | None = None,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    progress: Callable[[SweepEvent], None] | None = None,
    resume: bool = True,
    run_id: str | None = None,
    cancel: threading.Event | None = None,
    python: str | None = None,
    scheduler: Any = None,
    per_host: int = 1,
    worker_memory_gib: float | None = None,
) -> pd.DataFrame:
    """Measure every (state count, horizon, target, representation) of one problem.

    Representations are interleaved for each size (A B A B ...) so machine noise hits them
    alike. Each measurement runs in a worker process (a fresh :class:`WorkerExecutor` unless
    ``executor`` is given) and is stored the moment it finishes. With ``resume`` (default), a
    case already stored as ``ok`` for this JAX version and backend is not measured again; its
    stored row is returned instead.

    Args:
      problem: a problem name, or a problem made by :func:`explorer.define_problem` (also
        when defined in the script that calls this: it is sent to the worker by value). Its
        code is checked at every size before anything is measured; rows name it and store
        where it came from (``problem_source``); by default it is measured in every
        representation it supports.
      rollouts: also store each case's trajectories (see :meth:`Store.rollout`).
      memory: also store XLA's memory analysis of each program (see :func:`measure`).
      store: a :class:`Store`, a path, ``None`` for the default store, or ``False`` for none.
      timeout: seconds one measurement may take (``None``: no limit).
      progress: called with a :class:`SweepEvent` as each measurement starts and ends.
      cancel: set it to stop the sweep; the running measurement is killed.
      python: the interpreter that measures (another environment's JAX); checked before
        anything runs (``ValueError`` if it cannot). Ignored when ``executor`` is given.
        On a cluster it is a path on the Dask workers' machines, not checked here.
      scheduler: a Dask scheduler address (``tcp://host:8786``) or a ``distributed.Client``:
        each case runs as a Dask task, measured in its Dask worker's own worker process;
        rows are stored here as they finish, naming the Dask ``worker`` and ``host``. A
        scheduler lost mid-sweep raises a one-line ``RuntimeError`` (``SchedulerLost``) and
        stores no row for the cases that never ran: the same sweep run again measures them.
      per_host: on a cluster, at most this many measurements at once on one host (a
        per-host ``distributed.Semaphore``): side-by-side timings contaminate each other.
      worker_memory_gib: cap the sweep's own worker at this many GiB of address space (at
        least 2; CPU only, as for ``pytree-explorer serve --worker-memory``): a case that
        needs more is stored as ``oom`` and the worker replaced; the sweep goes on. Not with
        ``executor`` (give that executor its ``memory_limit_bytes``) nor ``scheduler`` (Dask
        workers take ``--memory-limit``).

    Returns:
      One row per measurement (see ``explorer.COLUMNS``), failures included with their status.
      An interrupt (Ctrl-C) kills the running measurement, stores nothing for it and
      propagates; rows finished before it are stored. A row finished while the store stays
      locked by another process is kept in the store's side file (its ``id`` is empty here)
      and added to the store by its next write; a :class:`explorer.StoreWarning` says so.
      Another sweep measuring into the same store from this machine is warned about too
      (both measure the cases they share, and their timings overlap on the same cores).
    """
    specs = sweep_specs(problem, representations, n_states, horizons, targets, unroll=unroll,
                        repeats=repeats, backend=backend, rollouts=rollouts, memory=memory)
    from ..core.problems import user_problem  # noqa: PLC0415

    timeout = v.check_timeout(timeout)
    limit = memory_limit_bytes(worker_memory_gib, what="worker_memory_gib")
    if limit is not None and (executor is not None or scheduler is not None):
        raise ValueError("worker_memory_gib caps the sweep's own worker; "
                         + ("give your executor its memory_limit_bytes" if executor is not None
                            else "on a cluster, start Dask workers with --memory-limit"))
    db = None if store is False else store if isinstance(store, Store) else Store(store)
    if db is not None:
        db.check_writable()  # foreign, corrupt or unwritable: refused before measuring
    if not isinstance(per_host, int) or per_host < 1:
        raise ValueError(f"per_host must be a whole number >= 1, got {per_host!r}")
    client = own_client = None
    if scheduler is not None:  # a Dask cluster: each Dask worker measures in its own process
        from .cluster import DaskExecutor, connect  # noqa: PLC0415

        client, own_client = connect(scheduler)
        executor, own_executor = DaskExecutor(client, python), False
    else:
        own_executor = executor is None
        if executor is None:
            executor = WorkerExecutor(timeout=timeout, memory_limit_bytes=limit,
                                      python=None if python is None else check_python(python))
    run_id = run_id or uuid.uuid4().hex[:12]
    marks = contextlib.ExitStack()
    lost = False  # the Dask scheduler went away: its client is closed without waiting
    try:
        if db is not None and client is None:  # a local sweep: say if another one measures here
            others = marks.enter_context(db.sweeping(run_id))
            if others:
                warnings.warn(overlap_message(db.path, others), StoreWarning, stacklevel=2)
        if backend is not None:  # bad input: one error now, not one failed row per case
            from .jobs import check_backend  # noqa: PLC0415

            submit(executor, check_backend, backend, label="check backend").result()
        if user_problem(specs[0].problem) is not None:  # the user's code, checked up front
            from .jobs import check_specs  # noqa: PLC0415

            try:
                submit(executor, check_specs, specs, label=f"check problem {specs[0].problem}",
                       timeout=timeout).result()
            except WorkerError as err:  # it hung or crashed the worker: nothing measured
                raise ValueError(f"problem {specs[0].problem!r} could not be checked: "
                                 f"{str(err).splitlines()[0]}") from None
        done_rows = _finished(db, specs, executor, backend) if (db is not None and resume) else {}
        rows: list[dict[str, Any]] = []
        if client is not None:
            return to_frame(_on_cluster(client, specs, done_rows, db, run_id, timeout=timeout,
                                        python=python, per_host=per_host, progress=progress,
                                        cancel=cancel))
        for i, spec in enumerate(specs):
            if cancel is not None and cancel.is_set():
                break
            if spec.key in done_rows:
                rows.append(done_rows[spec.key])
                if progress:
                    progress(SweepEvent(i + 1, len(specs), spec, done_rows[spec.key],
                                        skipped=True))
                continue
            if progress:
                progress(SweepEvent(i, len(specs), spec))
            row, _ = run_one(spec, executor, timeout=timeout, store=db, run_id=run_id,
                             cancel_event=cancel)
            rows.append(row)
            if progress:
                progress(SweepEvent(i + 1, len(specs), spec, row))
    except SchedulerLost:
        lost = True
        raise
    finally:
        if own_executor:
            executor.shutdown(wait=True, cancel_futures=True)
        if own_client:
            close_lost(client) if lost else client.close()
        marks.close()
    return to_frame(rows)


def _on_cluster(client: Any, specs: list[Spec], done_rows: dict, db: Store | None, run_id: str,
                *, timeout: float | None, python: str | None, per_host: int,
                progress: Callable[[SweepEvent], None] | None,
                cancel: threading.Event | None) -> list[dict[str, Any]]:
    """The cluster half of :func:`sweep`: rows stored on the client as each task finishes."""
    from .cluster import measure_all  # noqa: PLC0415

    found: dict[tuple, dict[str, Any]] = {}
    todo = []
    for i, spec in enumerate(specs):
        if spec.key in done_rows:
            found[spec.key] = done_rows[spec.key]
            if progress:
                progress(SweepEvent(i + 1, len(specs), spec, done_rows[spec.key], skipped=True))
        else:
            todo.append(spec)
    results = measure_all(client, todo, timeout=timeout, python=python, per_host=per_host,
                          cancel=cancel)
    try:
        for spec, result in results:
            row = dict(result["row"])
            row["run_id"] = run_id
            row["problem_source"] = problem_source(spec.problem)
            if db is not None:
                row["id"] = store_row(db, row, result["rollout"])
            found[spec.key] = row
            if progress:
                progress(SweepEvent(len(found), len(specs), spec, row))
    finally:
        results.close()
    return [found[s.key] for s in specs if s.key in found]


def _finished(db: Store, specs: list[Spec], executor: cf.Executor, backend: str | None) -> dict:
    from .jobs import default_backend, jax_version  # noqa: PLC0415

    stored = db.rows(status="ok")
    if stored.empty:
        return {}
    wanted = backend or submit(executor, default_backend, label="default backend").result()
    version = submit(executor, jax_version, label="JAX version").result()
    stored = stored[(stored["jax_version"] == version) & (stored["backend"] == wanted)]
    keys = {s.key for s in specs}
    sources = {s.problem: problem_source(s.problem) for s in specs}
    found = {}
    for record in stored.to_dict("records"):
        # A problem defined by the user is the same only if its code comes from the same place.
        if sources.get(record["problem"]) not in ("built-in", record["problem_source"]):
            continue
        key = (record["problem"], record["representation"], record["n_states"], record["horizon"],
               record["target"], record["unroll"])
        if key in keys:
            found[key] = {c: record[c] for c in COLUMNS}  # the latest stored row wins
    return found
