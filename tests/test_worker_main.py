"""The worker as a program of its own: a user's script runs once, and the worker's life follows
its parent's (Ctrl-C, SIGTERM, kill -9)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from _support import CPU_ENV, ROOT, stderr_when_done
from _support import sleep as _sleep

import explorer

SCRIPT = textwrap.dedent("""
    import explorer
    print("TOP-LEVEL RAN", flush=True)
    df = explorer.sweep("decay", ["dict", "array"], n_states=[3, 5], horizons=[10],
                        targets=["loss"])
    print(df[["representation", "n_states", "status"]].to_string())
""")


def _env(store) -> dict[str, str]:
    return {**os.environ, **CPU_ENV, "PYTREE_EXPLORER_DB": str(store)}


def _stored(store):
    return explorer.Store(store).rows()


@pytest.mark.slow
def test_a_users_script_runs_once_and_its_rerun_resumes(tmp_path):
    script, store = tmp_path / "sweep_script.py", tmp_path / "results.sqlite"
    script.write_text(SCRIPT)
    first = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_env(store),
                           capture_output=True, text=True, timeout=180)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("TOP-LEVEL RAN") == 1
    rows = _stored(store)
    assert len(rows) == 4 and set(rows["status"]) == {"ok"}
    second = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_env(store),
                            capture_output=True, text=True, timeout=180)
    assert second.returncode == 0, second.stderr
    assert second.stdout.count("TOP-LEVEL RAN") == 1
    again = _stored(store)
    assert sorted(again["id"]) == sorted(rows["id"])  # nothing measured again


def _sweep_cli(store, *extra: str) -> subprocess.Popen:
    # Big enough that a case is still compiling when the signal comes.
    return subprocess.Popen(
        [sys.executable, "-m", "explorer", "sweep", "-r", "dict", "-n", "2,1500,1600",
         "--horizons", "200", "--targets", "grad", "--quiet", *extra],
        cwd=ROOT, env=_env(store), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)


def _worker_of(proc: subprocess.Popen, store, timeout: float = 120) -> psutil.Process:
    """The CLI's worker, once the first (small) case is stored and the big one is running."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        children = psutil.Process(proc.pid).children()
        if children and store.exists() and len(_stored(store)) >= 1:
            time.sleep(1.0)  # into the big compile
            return children[0]
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"no worker busy in time: {proc.communicate()}")


def _gone(worker: psutil.Process, within: float) -> bool:
    try:
        worker.wait(timeout=within)
    except psutil.TimeoutExpired:
        return False
    return True


@pytest.mark.parametrize("how", ["group SIGINT", "parent SIGINT", "SIGTERM"])
@pytest.mark.slow
def test_interrupt_stops_the_sweep_kills_the_job_and_stores_no_false_row(tmp_path, how):
    store = tmp_path / "results.sqlite"
    proc = _sweep_cli(store)
    worker = _worker_of(proc, store)
    sent = time.monotonic()
    if how == "group SIGINT":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGINT if how == "parent SIGINT" else signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 10
    assert proc.returncode == 130, err
    assert _gone(worker, 5)
    rows = _stored(store)
    assert set(rows["status"]) == {"ok"} and list(rows["n_states"]) == [2], rows


# Run as a script: a sweep whose main thread, once armed (SIGUSR1 from the test), takes the
# interrupt inside a garbage-collector callback (JAX registers one), where Python prints and
# drops it.
_INTERRUPT_IN_GC = """
import gc, os, signal, sys, threading, time
from explorer.cli import main

armed = []

def arm(signum, frame):  # on the main thread, wherever it waits for the worker
    armed.append(int(sys.argv[1]))
    gc.collect()

signal.signal(signal.SIGUSR1, arm)

def in_gc(phase, info):
    if (phase == "start" and len(armed) == 1
            and threading.current_thread() is threading.main_thread()):
        armed.append(True)
        print("interrupting inside a gc callback", file=sys.stderr, flush=True)
        os.kill(os.getpid(), armed[0])
        time.sleep(0.2)  # Python's handler runs here, inside this callback

gc.callbacks.append(in_gc)
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.slow
def test_an_interrupt_taken_inside_a_gc_callback_still_stops_the_sweep(tmp_path, signum):
    store = tmp_path / "results.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-c", _INTERRUPT_IN_GC, str(int(signum)), "sweep", "-r", "dict",
         "-n", "2,1500,1600", "--horizons", "200", "--targets", "grad", "--quiet"],
        cwd=ROOT, env=_env(store), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    worker = _worker_of(proc, store)
    proc.send_signal(signal.SIGUSR1)
    err = stderr_when_done(proc, 30, "the sweep went on 30 s after the interrupt")
    assert "interrupting inside a gc callback" in err  # the case this test is about happened
    assert proc.returncode == 130, err
    assert _gone(worker, 5)
    rows = _stored(store)
    assert set(rows["status"]) == {"ok"} and list(rows["n_states"]) == [2], rows


@pytest.mark.slow
def test_the_worker_dies_with_a_killed_parent(tmp_path):
    store = tmp_path / "results.sqlite"
    proc = _sweep_cli(store)
    worker = _worker_of(proc, store)
    proc.kill()
    proc.wait()
    assert _gone(worker, 5)


@pytest.mark.slow
def test_start_up_is_not_part_of_the_timeout_and_a_dead_start_is_a_crash():
    ex = explorer.WorkerExecutor(timeout=0.5, env=CPU_ENV)
    try:
        # A fresh worker imports JAX and starts its backend (seconds) before the clock starts.
        assert ex.submit(_sleep, 0.05).result(timeout=120) == 0.05
        assert ex.environment["jax_version"] and ex.environment["cpu_count"]
    finally:
        ex.shutdown()
    # A worker that dies before its first job fails that job as a crash, not a TypeError.
    broken = explorer.WorkerExecutor(timeout=5, python="/bin/false")
    try:
        with pytest.raises(explorer.WorkerCrashed, match="failed to start.*exit code 1"):
            broken.submit(_sleep, 0).result(timeout=60)
    finally:
        broken.shutdown()
