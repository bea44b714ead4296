"""The job path (run_one): a fault in the worker becomes a row with its status, the worker is
replaced, and the next result is right."""

from __future__ import annotations

import dataclasses
import functools
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from _support import CPU_ENV

import explorer
from explorer import Spec
from explorer.testing import run_one

# A measurement small enough to be quick, big enough to have real figures.
SMALL = Spec("decay", "named", 3, 8, "grad")


# Compiles for about a second here (jax#4667's third program), so a fault can land in it.
SLOW = Spec("decay", "unflatten", 100, 200, "loss")


def _loss_and_grad(spec: Spec) -> tuple[float, np.ndarray]:
    """Evaluate a spec's case (submitted to the worker; top level so it pickles)."""
    case = explorer.build_case(spec.problem, spec.representation, spec.n_states, spec.horizon)
    return case.evaluate()


@functools.lru_cache(maxsize=None)
def _reference(spec: Spec) -> tuple[explorer.Measurement, float, np.ndarray]:
    """A fresh in-process measurement and evaluation of ``spec``: what the worker must match."""
    case = explorer.build_case(spec.problem, spec.representation, spec.n_states, spec.horizon)
    loss, grad = case.evaluate()
    return explorer.measure_case(case, spec.target, runs=1), loss, grad


def _assert_next_result_correct(ex: explorer.WorkerExecutor, store: explorer.Store | None = None):
    """After a fault, the next job through ``ex`` gives the numbers an in-process run gives."""
    row, _ = run_one(SMALL, ex, store=store)
    assert row["status"] == "ok", row.get("error")
    ref, loss, grad = _reference(SMALL)
    assert row["hlo_pre_bytes"] == ref.hlo_pre_bytes
    assert row["jaxpr_eqns"] == ref.jaxpr_eqns
    assert row["n_leaves"] == ref.n_leaves
    assert row["cold"] and row["cache_hits"] == 0
    got_loss, got_grad = ex.submit(_loss_and_grad, SMALL).result()
    np.testing.assert_allclose(got_loss, loss, rtol=1e-6)
    np.testing.assert_allclose(got_grad, grad, rtol=1e-6)
    return row


# -- faults in the worker --------------------------------------------------------------------
def _wait_for_stage(ex: explorer.WorkerExecutor, stage: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while ex.status.stage != stage:
        assert time.monotonic() < deadline, f"the job never reached {stage!r}: {ex.status}"
        time.sleep(0.005)


def _run_one_in_thread(spec: Spec, ex: explorer.WorkerExecutor, store: explorer.Store,
                      out: dict) -> threading.Thread:
    def target() -> None:
        out["row"], _ = run_one(spec, ex, store=store)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_worker_killed_mid_compile_marks_row_crashed_and_is_replaced(executor, tmp_path):
    store = explorer.Store(tmp_path / "s.sqlite")
    executor.submit(os.getpid).result()  # a live worker to kill
    started = executor.workers_started
    done: dict = {}
    thread = _run_one_in_thread(SLOW, executor, store, done)
    _wait_for_stage(executor, "compile")
    pid = executor._process.pid
    os.kill(pid, signal.SIGKILL)
    thread.join(60)
    assert done["row"]["status"] == "crashed"
    assert "died" in done["row"]["error"]
    assert store.rows()["status"].tolist() == ["crashed"]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped
    _assert_next_result_correct(executor, store)
    assert executor.workers_started == started + 1
    assert store.rows()["status"].tolist() == ["crashed", "ok"]


@pytest.mark.slow
def test_timeout_marks_row_and_replaces_worker(executor, tmp_path):
    store = explorer.Store(tmp_path / "s.sqlite")
    executor.submit(os.getpid).result()
    pid = executor._process.pid
    started = executor.workers_started
    row, _ = run_one(SLOW, executor, timeout=0.5, store=store)
    assert row["status"] == "timeout"
    assert "no result after 0.5 s" in row["error"]
    stored = store.rows()
    assert stored["status"].tolist() == ["timeout"] and stored["compile_s"].isna().all()
    # A failed row names where it ran, as an ok row does.
    failed = stored.iloc[0]
    assert failed["python"] == executor.environment["python"]
    assert failed["jax_version"] == executor.environment["jax_version"]
    assert failed["cpu_count"] == executor.environment["cpu_count"]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the stuck worker is gone
    _assert_next_result_correct(executor, store)
    assert executor.workers_started == started + 1


def _vm_peak_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmPeak:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmPeak")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux")
@pytest.mark.slow
def test_out_of_memory_marks_row_oom_and_replaces_worker(executor, tmp_path):
    store = explorer.Store(tmp_path / "s.sqlite")
    # Room for what a worker normally needs (seen in the warm shared worker), and 2 GiB more.
    run_one(SMALL, executor)
    limit = _vm_peak_bytes(executor._process.pid) + (2 << 30)
    ex = explorer.WorkerExecutor(timeout=300, memory_limit_bytes=limit, env=CPU_ENV)
    try:
        assert run_one(SMALL, ex)[0]["status"] == "ok"  # the limit leaves normal work alone
        # Python-level: an allocation over the limit raises MemoryError in the worker.
        with pytest.raises(explorer.WorkerOutOfMemory, match=r"under its memory limit of"):
            ex.submit(bytearray, limit + (1 << 30)).result()
        # XLA-level: 4 GB of observations (N=10000, horizon 100000) abort inside XLA.
        big = Spec("decay", "array", 10_000, 100_000, "loss")
        row, _ = run_one(big, ex, store=store)
        assert row["status"] == "oom", row["error"]
        assert store.rows()["status"].tolist() == ["oom"]
        _assert_next_result_correct(ex, store)
        assert ex.workers_started == 3
    finally:
        ex.shutdown()


# -- a case built ahead (explorer.testing.prepare) ------------------------------------------------
def _observed_cache() -> tuple[int, int]:
    """In the worker: hits and size of the cache of simulated observations."""
    from explorer.testing import observed_cache_info

    return observed_cache_info()


_FIGURES = ("jaxpr_eqns", "jaxpr_eqns_top", "n_leaves", "hlo_pre_bytes", "hlo_post_bytes",
            "flops", "bytes_accessed", "backend", "jax_version")


@pytest.mark.slow
def test_a_prepared_case_is_built_once_and_measures_the_same_figures():
    """A case built ahead in an idle worker: the Run's build takes the prepared observations, its
    compiles are cold, and every figure is the one a worker that prepared nothing gives."""
    from explorer import testing as _run

    spec = Spec("oscillator", "dict", 12, 9, "grad")  # a size no other test builds
    prepared = explorer.WorkerExecutor(timeout=120, env=dict(CPU_ENV))
    plain = explorer.WorkerExecutor(timeout=120, env=dict(CPU_ENV))
    try:
        for ex in (prepared, plain):
            ex.submit(os.getpid).result()  # started and idle, as a page finds it
        future = _run.prepare(prepared, [spec])
        assert future is not None and future.result(timeout=120) == 1
        hits, size = prepared.submit(_observed_cache).result()
        assert size >= 1
        assert _run.prepare(prepared, [spec]) is None  # once per case and worker process
        row_p, _ = run_one(spec, prepared)
        assert prepared.submit(_observed_cache).result()[0] > hits  # its build took them
        row_u, _ = run_one(spec, plain)
        for row in (row_p, row_u):
            assert row["status"] == "ok", row["error"]
            assert row["cold"] and row["cache_hits"] == 0 and row["backend_compiles"] >= 1
        assert {k: row_p[k] for k in _FIGURES} == {k: row_u[k] for k in _FIGURES}
    finally:
        prepared.shutdown()
        plain.shutdown()


def test_prepare_builds_only_in_an_idle_local_worker(executor):
    import concurrent.futures as cf

    from _support import sleep

    from explorer import testing as _run

    small = Spec("decay", "array", 13, 7, "loss")
    with cf.ThreadPoolExecutor(1) as pool:  # a Dask cluster or any other executor: never
        assert _run.prepare(pool, [small]) is None
    executor.submit(os.getpid).result()
    huge = Spec("decay", "array", 10_000, 1_000, "loss")  # observations too big to build unasked
    assert _run.prepare(executor, [huge]) is None
    busy = executor.submit_with(sleep, (1.0,), label="another session's job")
    deadline = time.time() + 60
    while executor.status.running != "another session's job" and time.time() < deadline:
        time.sleep(0.01)
    assert _run.prepare(executor, [small]) is None  # never ahead of anybody's job
    busy.result(timeout=60)
    both = [small, dataclasses.replace(small, target="grad")]  # one case, two targets
    future = _run.prepare(executor, both)
    assert future is not None and future.result(timeout=60) == 1  # built once


def test_prepare_leaves_a_users_problem_alone(executor):
    from explorer import testing as _run

    problem = explorer.define_problem(
        "prepare_test", lambda s, p: {k: 0.9 * v + p["k" + k[1:]] for k, v in s.items()},
        lambda n: {f"x{i}": 1.0 for i in range(n)}, lambda n: {f"k{i}": 0.0 for i in range(n)})
    executor.submit(os.getpid).result()
    assert _run.prepare(executor, [Spec(problem.name, "dict", 3, 4, "loss")]) is None
