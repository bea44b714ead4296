"""The bodies of the jobs that run inside a measuring worker.

Each is a top-level function of picklable arguments, so any executor can run it: the local
:class:`explorer.WorkerExecutor`, or a Dask worker. They import JAX only when they run, so
the process that submits them (a dashboard server, a CLI) never starts a JAX backend.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import time
from typing import Any

import numpy as np

from ..core.spec import Spec
from .worker import report

# Enough to read a trajectory by eye; a stored rollout keeps at most this many state variables.
MAX_ROLLOUT_VARS = 64


def run_spec(spec: Spec) -> dict[str, Any]:
    """Build and measure one spec.

    Returns ``{"row": dict, "rollout": (names, array) | None}``.
    """
    from ..core.measure import measure_case  # noqa: PLC0415 - imports jax; worker side

    case = _build(spec)
    where = machine()
    started = time.time()
    measurement = measure_case(case, spec.target, repeats=spec.repeats, runs=spec.runs,
                               backend=spec.backend_requested, on_stage=report,
                               memory=spec.memory)
    finished = time.time()
    row = {**dataclasses.asdict(spec), **measurement.to_dict(), "status": "ok", "error": None,
           "started_at": started, "finished_at": finished, **where}
    rollout = None
    if spec.rollout:
        report("rollout")
        rollout = _capture_rollout(case)
    return {"row": row, "rollout": rollout}


def machine() -> dict[str, Any]:
    """Where a job runs: host, interpreter, cores and the 1-minute load average now."""
    return {"host": socket.gethostname(), "python": sys.executable, "cpu_count": os.cpu_count(),
            "load_avg": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}


def prepare_specs(specs: list[Spec]) -> int:
    """Build the cases of ``specs`` and measure nothing; how many were built.

    What a first job at a new size pays once per worker before its clock starts (importing the
    measuring code, simulating the problem's observations at that N and horizon) is paid here
    instead, while a page waits for its user to press Run. No program is traced or compiled, and
    :func:`explorer.measure` clears JAX's caches and checks every compile it times is cold, so no
    figure of a later measurement changes.
    """
    from ..core import measure as _measure  # noqa: F401, PLC0415 - imports what run_spec uses; worker side
    from ..core.representations import build_case  # noqa: PLC0415

    for spec in specs:
        build_case(spec.problem, spec.representation, spec.n_states, spec.horizon,
                   unroll=spec.unroll)
    return len(specs)


def rollout_spec(spec: Spec) -> tuple[list[str], np.ndarray]:
    """The trajectories of one spec's case, as :func:`run_spec` captures them.

    The dashboard asks for these in a job of their own, after the measurement: its result is
    shown the moment it is measured, and the trajectories follow.
    """
    case = _build(spec)
    report("rollout")
    return _capture_rollout(case)


def inspect_spec(spec: Spec) -> dict[str, Any]:
    """The programs behind a spec: jaxpr, StableHLO and optimised HLO text, and equation blame.

    Returns ``{"jaxpr", "stablehlo", "hlo", "blame"}`` where ``hlo`` is ``None`` when the
    backend gives no text and ``blame`` is a list of records (see :func:`explorer.blame`).
    """
    from ..core.blame import blame  # noqa: PLC0415
    from ..core.measure import program_texts  # noqa: PLC0415

    case = _build(spec)
    fn = case.function(spec.target)
    texts = program_texts(fn, *case.args, on_stage=report)
    report("blame")
    texts["blame"] = blame(fn, *case.args).to_dict("records")
    return texts


def compare_specs(spec_a: Spec, spec_b: Spec) -> Any:
    """:func:`explorer.compare` of the programs behind two specs (a ``Comparison``)."""
    from ..core.compare import compare  # noqa: PLC0415

    a, b = _build(spec_a), _build(spec_b)
    # Short labels (the representations) where they tell the two apart: they lead each line
    # of the operation-count summary.
    labels = ((spec_a.representation, spec_b.representation)
              if spec_a.representation != spec_b.representation else (spec_a.label, spec_b.label))
    return compare(a.function(spec_a.target), a.args, b.function(spec_b.target), b.args,
                   labels=labels)


def with_problems(pickled: bytes, fn: Any, args: tuple) -> Any:
    """``fn(*args)`` after defining, in this worker, the problems the caller sent by value."""
    import cloudpickle  # noqa: PLC0415

    from ..core.user_problems import register  # noqa: PLC0415

    for problem in cloudpickle.loads(pickled):
        register(problem)
    return fn(*args)


def check_specs(specs: list[Spec]) -> None:
    """Check, before anything is measured, that every spec of a user problem can be built:
    its factories run at every size and its steps traced abstractly; at the smallest size each
    representation's loss is traced too. One-line ``ValueError`` naming what is wrong."""
    import jax  # noqa: PLC0415

    from ..core.problems import get_problem  # noqa: PLC0415
    from ..core.representations import build_case  # noqa: PLC0415

    smallest: dict[str, Spec] = {}
    for spec in specs:
        get_problem(spec.problem).check_size(spec.n_states, spec.representation)
        first = smallest.get(spec.representation)
        if first is None or (spec.n_states, spec.horizon) < (first.n_states, first.horizon):
            smallest[spec.representation] = spec
    for spec in smallest.values():
        case = build_case(spec.problem, spec.representation, spec.n_states, spec.horizon,
                          unroll=spec.unroll)
        try:
            jax.eval_shape(case.function("loss"), *case.args)
        except Exception as err:  # noqa: BLE001 - the user's code failed in this layout
            from ..util.validate import describe_error  # noqa: PLC0415

            raise ValueError(f"problem {spec.problem!r} in representation "
                             f"{spec.representation!r} raised {describe_error(err)}") from None


def default_backend() -> str:
    """JAX's default backend as the worker sees it."""
    import jax  # noqa: PLC0415

    return jax.default_backend()


def jax_version() -> str:
    """The JAX version the worker measures with (its interpreter may not be the caller's)."""
    import jax  # noqa: PLC0415

    return jax.__version__


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


def _build(spec: Spec) -> Any:
    from ..core.representations import build_case  # noqa: PLC0415 - imports jax; worker side

    report("build")
    return build_case(spec.problem, spec.representation, spec.n_states, spec.horizon,
                      unroll=spec.unroll)


def _rollout_columns(n_vars: int) -> np.ndarray:
    if n_vars <= MAX_ROLLOUT_VARS:
        return np.arange(n_vars)
    return np.unique(np.linspace(0, n_vars - 1, MAX_ROLLOUT_VARS).round().astype(int))


def _capture_rollout(case: Any) -> tuple[list[str], np.ndarray]:
    trajectory = np.asarray(case.rollout())
    cols = _rollout_columns(trajectory.shape[1])
    return [case.state_names[i] for i in cols], trajectory[:, cols].astype(np.float32)
