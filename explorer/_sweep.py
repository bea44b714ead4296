"""Sweeps over state counts, and the scaling laws fitted to them."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import itertools
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from . import _validate as v
from ._store import COLUMNS, Store, to_frame
from ._worker import DEFAULT_TIMEOUT_S, WorkerError, WorkerExecutor, report

# Enough to read a trajectory by eye; a stored rollout keeps at most this many state variables.
MAX_ROLLOUT_VARS = 64


@dataclasses.dataclass(frozen=True)
class Spec:
    """One measurement to take: a case (problem, representation, sizes) and a target."""

    problem: str
    representation: str
    n_states: int
    horizon: int
    target: str
    unroll: int = 1
    backend_requested: str | None = None
    repeats: int = 1
    runs: int = 5
    rollout: bool = False
    memory: bool = False

    @property
    def label(self) -> str:
        return (f"{self.problem}/{self.representation} N={self.n_states} H={self.horizon} "
                f"{self.target}")

    def validated(self) -> "Spec":
        from ._problems import get_problem  # noqa: PLC0415
        from ._representations import REPRESENTATIONS  # noqa: PLC0415

        get_problem(self.problem)
        v.check_choice("representation", self.representation, tuple(REPRESENTATIONS))
        v.check_n_states(self.n_states)
        v.check_horizon(self.horizon)
        v.check_target(self.target)
        v.check_unroll(self.unroll)
        v.check_int("repeats", self.repeats, 1, v.MAX_REPEATS)
        return self


@dataclasses.dataclass(frozen=True)
class SweepEvent:
    """Progress of a sweep: ``row`` is ``None`` when ``spec`` starts, the result when it ends."""

    done: int
    total: int
    spec: Spec
    row: dict[str, Any] | None = None
    skipped: bool = False


def _rollout_columns(n_vars: int) -> np.ndarray:
    if n_vars <= MAX_ROLLOUT_VARS:
        return np.arange(n_vars)
    return np.unique(np.linspace(0, n_vars - 1, MAX_ROLLOUT_VARS).round().astype(int))


def run_spec(spec: Spec) -> dict[str, Any]:
    """Build and measure one spec (this runs inside the worker process).

    Returns ``{"row": dict, "rollout": (names, array) | None}``.
    """
    from ._measure import measure_case  # noqa: PLC0415 - imports jax; worker side

    case = _build(spec)
    started = time.time()
    measurement = measure_case(case, spec.target, repeats=spec.repeats, runs=spec.runs,
                               backend=spec.backend_requested, on_stage=report,
                               memory=spec.memory)
    finished = time.time()
    row = {**dataclasses.asdict(spec), **measurement.to_dict(), "status": "ok", "error": None,
           "started_at": started, "finished_at": finished, "host": socket.gethostname()}
    rollout = None
    if spec.rollout:
        report("rollout")
        rollout = _capture_rollout(case)
    return {"row": row, "rollout": rollout}


def _build(spec: Spec) -> Any:
    from ._representations import build_case  # noqa: PLC0415 - imports jax; worker side

    report("build")
    return build_case(spec.problem, spec.representation, spec.n_states, spec.horizon,
                      unroll=spec.unroll)


def _capture_rollout(case: Any) -> tuple[list[str], np.ndarray]:
    trajectory = np.asarray(case.rollout())
    cols = _rollout_columns(trajectory.shape[1])
    return [case.state_names[i] for i in cols], trajectory[:, cols].astype(np.float32)


def rollout_spec(spec: Spec) -> tuple[list[str], np.ndarray]:
    """The trajectories of one spec's case, as :func:`run_spec` captures them (in the worker).

    The dashboard asks for these in a job of their own, after the measurement: its result is
    shown the moment it is measured, and the trajectories follow.
    """
    case = _build(spec)
    report("rollout")
    return _capture_rollout(case)


def default_backend() -> str:
    """JAX's default backend as the worker sees it."""
    import jax  # noqa: PLC0415

    return jax.default_backend()


def available_backends() -> list[str]:
    """Platforms JAX can use here (``cpu`` first, accelerators after), as the worker sees them."""
    import jax  # noqa: PLC0415

    found = []
    for name in ("cpu", "gpu", "tpu"):
        try:
            if jax.devices(name):
                found.append(name)
        except RuntimeError:
            pass
    return found


def check_backend(backend: Any) -> str:
    """``backend`` if JAX can use it where this runs (the worker); else a one-line ValueError."""
    import jax  # noqa: PLC0415

    try:
        if not isinstance(backend, str):
            raise TypeError
        jax.devices(backend)
    except (RuntimeError, TypeError):
        raise ValueError(f"backend {backend!r} is not available here; choose one of: "
                         f"{', '.join(available_backends())}") from None
    return backend


def failed_row(spec: Spec, err: BaseException) -> dict[str, Any]:
    """The row stored for a spec that produced no measurement."""
    status = err.status if isinstance(err, WorkerError) else "error"
    message = str(err).splitlines()[0] if str(err) else type(err).__name__
    return {**dataclasses.asdict(spec), "status": status,
            "error": f"{type(err).__name__}: {message}", "finished_at": time.time(),
            "host": socket.gethostname()}


def run_one(spec: Spec, executor: cf.Executor, *, timeout: float | None | str = "default",
            store: Store | None = None, run_id: str | None = None,
            cancel: threading.Event | None = None) -> tuple[dict[str, Any], cf.Future]:
    """Measure one spec through ``executor``; store the row (ok or not) and return it.

    Setting ``cancel`` while it runs cancels this job only (on a shared executor, other
    callers' jobs are left alone).
    """
    if isinstance(executor, WorkerExecutor):
        future = executor.submit_with(run_spec, (spec,), timeout=timeout, label=spec.label)
    else:
        future = executor.submit(run_spec, spec)
    if cancel is not None:
        while not cf.wait([future], timeout=0.05).done:
            if cancel.is_set():
                if isinstance(executor, WorkerExecutor):
                    executor.cancel(future)
                else:
                    future.cancel()
                break
    rollout = None
    try:
        result = future.result()
        row, rollout = result["row"], result["rollout"]
    except cf.CancelledError:
        row = failed_row(spec, RuntimeError("cancelled before it started"))
        row["status"] = "cancelled"
    except BaseException as err:  # noqa: BLE001 - every failure becomes a stored row
        row = failed_row(spec, err)
    row["run_id"] = run_id
    if store is not None:
        row["id"] = store.add(row, rollout)
    return row, future


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
      progress: called with a :class:`SweepEvent` as each measurement starts and ends.
      cancel: set it to stop the sweep; the running measurement is killed.

    Returns:
      One row per measurement (see ``explorer.COLUMNS``), failures included with their status.
    """
    from ._representations import REPRESENTATIONS  # noqa: PLC0415

    reps = tuple(REPRESENTATIONS) if representations is None else v.check_many(
        "representation", representations, tuple(REPRESENTATIONS))
    sizes = v.check_ints("n_states", n_states, 1, v.MAX_N_STATES)
    hs = v.check_ints("horizon", horizons, 1, v.MAX_HORIZON)
    tgts = v.check_many("target", targets, v.TARGETS)
    specs = [Spec(problem, r, n, h, t, unroll, backend, repeats, rollout=rollouts,
                  memory=memory).validated()
             for h, n, t, r in itertools.product(hs, sizes, tgts, reps)]
    if store is False:
        db = None
    else:
        db = store if isinstance(store, Store) else Store(store)
    own_executor = executor is None
    executor = executor or WorkerExecutor(timeout=timeout)
    run_id = run_id or uuid.uuid4().hex[:12]
    try:
        if backend is not None:  # bad input: one error now, not one failed row per case
            executor.submit(check_backend, backend).result()
        done_rows = _finished(db, specs, executor, backend) if (db is not None and resume) else {}
        rows: list[dict[str, Any]] = []
        for i, spec in enumerate(specs):
            if cancel is not None and cancel.is_set():
                break
            key = _key(spec)
            if key in done_rows:
                rows.append(done_rows[key])
                if progress:
                    progress(SweepEvent(i + 1, len(specs), spec, done_rows[key], skipped=True))
                continue
            if progress:
                progress(SweepEvent(i, len(specs), spec))
            row, _ = run_one(spec, executor, timeout=timeout, store=db, run_id=run_id,
                             cancel=cancel)
            rows.append(row)
            if progress:
                progress(SweepEvent(i + 1, len(specs), spec, row))
    finally:
        if own_executor:
            executor.shutdown(wait=True, cancel_futures=True)
    return to_frame(rows)


def _key(spec: Spec) -> tuple:
    return (spec.problem, spec.representation, spec.n_states, spec.horizon, spec.target,
            spec.unroll)


def _finished(db: Store, specs: list[Spec], executor: cf.Executor, backend: str | None) -> dict:
    import jax  # noqa: PLC0415 - the version only; no backend is started here

    stored = db.rows(status="ok")
    if stored.empty:
        return {}
    wanted = backend or executor.submit(default_backend).result()
    stored = stored[(stored["jax_version"] == jax.__version__) & (stored["backend"] == wanted)]
    keys = {_key(s) for s in specs}
    found = {}
    for record in stored.to_dict("records"):
        key = (record["problem"], record["representation"], record["n_states"], record["horizon"],
               record["target"], record["unroll"])
        if key in keys:
            found[key] = {c: record[c] for c in COLUMNS}  # the latest stored row wins
    return found


# -- scaling laws ------------------------------------------------------------------------
SCALING_METRICS = ("compile_s", "trace_s", "lower_s", "hlo_pre_bytes", "hlo_post_bytes",
                   "jaxpr_eqns", "run_s")


def scaling_exponents(df: pd.DataFrame, metrics: Sequence[str] = SCALING_METRICS,
                      by: Sequence[str] = ("problem", "representation", "target", "horizon"),
                      x: str = "n_states") -> pd.DataFrame:
    """Fit ``metric ≈ c · N^k`` per group by least squares in log-log space.

    Only rows with status ``ok`` and positive values count; a group needs two distinct N.
    Returns one row per group and metric: ``k``, ``c``, ``r2`` (fit quality in log space),
    ``points``, ``n_min``, ``n_max``.
    """
    columns = [*by, "metric", "k", "c", "r2", "points", "n_min", "n_max"]
    if df.empty:
        return pd.DataFrame(columns=columns)
    ok = df[df["status"] == "ok"] if "status" in df else df
    out = []
    keys = [b for b in by if b in ok.columns]
    for group, part in ok.groupby(keys, dropna=False, sort=True):
        group = group if isinstance(group, tuple) else (group,)
        for metric in metrics:
            if metric not in part:
                continue
            found = fit_power_law(part[x], part[metric])
            if found is not None:
                out.append({**dict(zip(keys, group)), "metric": metric, **found})
    return pd.DataFrame(out, columns=[*keys, "metric", "k", "c", "r2", "points", "n_min", "n_max"])


def fit_power_law(x: Any, y: Any) -> dict[str, Any] | None:
    """Least-squares fit of ``y ≈ c · x^k`` in log-log space over the pairs where both are
    positive numbers; ``None`` below two distinct ``x``. Returns ``k``, ``c``, ``r2`` (fit
    quality in log space), ``points``, ``n_min``, ``n_max``."""
    xs = pd.to_numeric(pd.Series(x), errors="coerce").to_numpy(float)
    ys = pd.to_numeric(pd.Series(y), errors="coerce").to_numpy(float)
    keep = np.isfinite(xs) & np.isfinite(ys) & (xs > 0) & (ys > 0)
    xs, ys = xs[keep], ys[keep]
    if len(np.unique(xs)) < 2:
        return None
    lx, ly = np.log(xs), np.log(ys)
    k, logc = np.polyfit(lx, ly, 1)
    fitted = k * lx + logc
    ss_res = float(np.sum((ly - fitted) ** 2))
    ss_tot = float(np.sum((ly - ly.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return {"k": float(k), "c": float(np.exp(logc)), "r2": r2, "points": int(len(xs)),
            "n_min": int(xs.min()), "n_max": int(xs.max())}


# -- program inspection jobs (run in the worker, like measurements) ------------------------
def inspect_spec(spec: Spec) -> dict[str, Any]:
    """The programs behind a spec: jaxpr, StableHLO and optimised HLO text, and equation blame.

    Returns ``{"jaxpr", "stablehlo", "hlo", "blame"}`` where ``hlo`` is ``None`` when the
    backend gives no text and ``blame`` is a list of records (see :func:`explorer.blame`).
    """
    from ._blame import blame  # noqa: PLC0415
    from ._measure import program_texts  # noqa: PLC0415
    from ._representations import build_case  # noqa: PLC0415

    case = build_case(spec.problem, spec.representation, spec.n_states, spec.horizon,
                      unroll=spec.unroll)
    fn = case.function(spec.target)
    texts = program_texts(fn, *case.args)
    texts["blame"] = blame(fn, *case.args).to_dict("records")
    return texts


def compare_specs(spec_a: Spec, spec_b: Spec) -> Any:
    """:func:`explorer.compare` of the programs behind two specs (a ``Comparison``)."""
    from ._compare import compare  # noqa: PLC0415
    from ._representations import build_case  # noqa: PLC0415

    cases = [build_case(s.problem, s.representation, s.n_states, s.horizon, unroll=s.unroll)
             for s in (spec_a, spec_b)]
    return compare(cases[0].function(spec_a.target), cases[0].args,
                   cases[1].function(spec_b.target), cases[1].args,
                   labels=(spec_a.label, spec_b.label))
