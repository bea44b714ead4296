"""The measuring worker: timeouts, crashes, errors and cancels never take the caller down."""

from __future__ import annotations

import time

import pytest
from _support import pid as _pid
from _support import sleep as _sleep

import explorer


def _die():
    import os

    os._exit(3)


def _raise():
    raise ValueError("bad thing")


@pytest.mark.slow
def test_worker_timeout_crash_and_errors_leave_the_caller_alive():
    ex = explorer.WorkerExecutor(timeout=30)
    try:
        pid = ex.submit(_pid).result()
        assert ex.submit(_pid).result() == pid  # the worker is reused
        with pytest.raises(explorer.MeasurementTimeout):
            ex.submit_with(_sleep, (30,), timeout=0.5).result()
        pid2 = ex.submit(_pid).result()
        assert pid2 != pid  # replaced after the timeout
        with pytest.raises(explorer.WorkerCrashed, match="exit code 3"):
            ex.submit(_die).result()
        with pytest.raises(ValueError, match="bad thing"):
            ex.submit(_raise).result()
        assert ex.submit(_sleep, 0).result() == 0
    finally:
        ex.shutdown()


@pytest.mark.slow
def test_worker_cancel_running_and_queue_status():
    ex = explorer.WorkerExecutor(timeout=60)
    try:
        ex.submit(_pid).result()  # warm
        long = ex.submit_with(_sleep, (30,), label="long")
        queued = ex.submit_with(_sleep, (0,), label="queued")
        deadline = time.time() + 60
        while ex.status.running != "long" and time.time() < deadline:
            time.sleep(0.02)
        status = ex.status
        assert status.running == "long" and status.queued == ("queued",)
        assert ex.queue_position(long) == 0 and ex.queue_position(queued) == 1
        assert ex.cancel(long)
        with pytest.raises(explorer.WorkerCancelled):
            long.result(timeout=10)
        assert queued.result(timeout=30) == 0
        assert ex.status.running is None
    finally:
        ex.shutdown()
