"""Sweeps: every (size, target, representation) of a problem, measured one at a time and
stored the moment each finishes."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import itertools
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pandas as pd

from . import _validate as v
from ._run import run_one, submit
from ._spec import Spec
from ._store import COLUMNS, Store, to_frame
from ._worker import DEFAULT_TIMEOUT_S, WorkerExecutor


@dataclasses.dataclass(frozen=True)
class SweepEvent:
    """Progress of a sweep: ``row`` is ``None`` when ``spec`` starts, the result when it ends."""

    done: int
    total: int
    spec: Spec
    row: dict[str, Any] | None = None
    skipped: bool = False


def sweep_specs(problem: str, representations: Sequence[str] | str | None = None,
                n_states: Iterable[int] | int = (10, 30, 100),
                horizons: Iterable[int] | int = (200,),
                targets: Sequence[str] | str = ("loss", "grad"), *, unroll: int = 1,
                repeats: int = 1, backend: str | None = None, rollouts: bool = False,
                memory: bool = False) -> list[Spec]:
    """The validated specs of a sweep, in measuring order.

    Representations are interleaved for each size (A B A B ...) so machine noise hits them
    alike.
    """
    from ._representations import REPRESENTATIONS  # noqa: PLC0415

    reps = tuple(REPRESENTATIONS) if representations is None else v.check_many(
        "representation", representations, tuple(REPRESENTATIONS))
    sizes = v.check_ints("n_states", n_states, 1, v.MAX_N_STATES)
    hs = v.check_ints("horizon", horizons, 1, v.MAX_HORIZON)
    tgts = v.check_many("target", targets, v.TARGETS)
    return [Spec(problem, r, n, h, t, unroll, backend, repeats, rollout=rollouts,
                 memory=memory).validated()
            for h, n, t, r in itertools.product(hs, sizes, tgts, reps)]


def sweep(
    problem: str,
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
) -> pd.DataFrame:
    """Measure every (state count, horizon, target, representation) of one problem.

    Representations are interleaved for each size (A B A B ...) so machine noise hits them
    alike. Each measurement runs in a worker process (a fresh :class:`WorkerExecutor` unless
    ``executor`` is given) and is stored the moment it finishes. With ``resume`` (default), a
    case already stored as ``ok`` for this JAX version and backend is not measured again; its
    stored row is returned instead.

    Args:
      rollouts: also store each case's trajectories (see :meth:`Store.rollout`).
      memory: also store XLA's memory analysis of each program (see :func:`measure`).
      store: a :class:`Store`, a path, ``None`` for the default store, or ``False`` for none.
      timeout: seconds one measurement may take (``None``: no limit).
      progress: called with a :class:`SweepEvent` as each measurement starts and ends.
      cancel: set it to stop the sweep; the running measurement is killed.

    Returns:
      One row per measurement (see ``explorer.COLUMNS``), failures included with their status.
      An interrupt (Ctrl-C) kills the running measurement, stores nothing for it and
      propagates; rows finished before it are stored.
    """
    specs = sweep_specs(problem, representations, n_states, horizons, targets, unroll=unroll,
                        repeats=repeats, backend=backend, rollouts=rollouts, memory=memory)
    timeout = v.check_timeout(timeout)
    db = None if store is False else store if isinstance(store, Store) else Store(store)
    if db is not None:
        db.check_writable()  # foreign, corrupt or unwritable: refused before measuring
    own_executor = executor is None
    executor = executor or WorkerExecutor(timeout=timeout)
    run_id = run_id or uuid.uuid4().hex[:12]
    try:
        if backend is not None:  # bad input: one error now, not one failed row per case
            from ._jobs import check_backend  # noqa: PLC0415

            submit(executor, check_backend, backend, label="check backend").result()
        done_rows = _finished(db, specs, executor, backend) if (db is not None and resume) else {}
        rows: list[dict[str, Any]] = []
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
    finally:
        if own_executor:
            executor.shutdown(wait=True, cancel_futures=True)
    return to_frame(rows)


def _finished(db: Store, specs: list[Spec], executor: cf.Executor, backend: str | None) -> dict:
    import jax  # noqa: PLC0415 - the version only; no backend is started here

    from ._jobs import default_backend  # noqa: PLC0415

    stored = db.rows(status="ok")
    if stored.empty:
        return {}
    wanted = backend or submit(executor, default_backend, label="default backend").result()
    stored = stored[(stored["jax_version"] == jax.__version__) & (stored["backend"] == wanted)]
    keys = {s.key for s in specs}
    found = {}
    for record in stored.to_dict("records"):
        key = (record["problem"], record["representation"], record["n_states"], record["horizon"],
               record["target"], record["unroll"])
        if key in keys:
            found[key] = {c: record[c] for c in COLUMNS}  # the latest stored row wins
    return found
