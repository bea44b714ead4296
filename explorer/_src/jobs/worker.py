"""A reused worker process that runs measurements one at a time.

XLA can crash, hang or run out of memory on a big program; none of that may take the caller
(a CLI sweep, a notebook, the dashboard server) down. :class:`WorkerExecutor` follows the
``concurrent.futures.Executor`` interface, so a cluster executor can stand in for it later:
jobs queue in order, one runs at a time in a child process (so timings never overlap), a job
over its timeout or cancelled kills the child, and the next job gets a fresh one.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import errno
import itertools
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any

from .protocol import JobPlace

DEFAULT_TIMEOUT_S = 600.0
# A fresh worker's start (Python, JAX import, backend start-up); not part of any job's timeout.
STARTUP_TIMEOUT_S = 300.0


class WorkerError(RuntimeError):
    """A job did not finish in the worker; ``status`` says why (see subclasses)."""

    status = "crashed"


class WorkerCrashed(WorkerError):
    status = "crashed"


class MeasurementTimeout(WorkerError):
    status = "timeout"


class WorkerCancelled(WorkerError):
    status = "cancelled"


class WorkerOutOfMemory(WorkerError):
    status = "oom"


class RemoteError(RuntimeError):
    """An exception raised inside the worker that could not be sent back as itself."""


# -- inside the worker -------------------------------------------------------------------
_conn = None


def report(stage: str) -> None:
    """Tell the parent which stage the current job is in (no-op outside a worker)."""
    if _conn is not None:
        try:
            _conn.send(("stage", stage, time.time()))
        except (OSError, ValueError):
            pass


def serve(jobs: Any, results: Any) -> None:
    """The worker's loop (see :mod:`explorer._src.jobs.worker_main`): run jobs until told to stop."""
    while True:
        try:
            job = jobs.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        fn, args, kwargs = job
        try:
            result = fn(*args, **kwargs)
            message = ("ok", result)
        except BaseException as err:  # noqa: BLE001 - everything goes back to the parent
            message = ("error", err, traceback.format_exc())
        try:
            results.send(message)
        except Exception as err:  # the result or the exception did not pickle
            results.send(("error", RemoteError(f"{type(err).__name__}: {err}"), ""))


# -- in the parent -----------------------------------------------------------------------
@dataclasses.dataclass
class _Job:
    future: cf.Future
    fn: Callable
    args: tuple
    kwargs: dict
    timeout: float | None
    label: str
    seq: int


@dataclasses.dataclass(frozen=True)
class WorkerStatus:
    """What the worker is doing now: the running job's label and stage, and the queue."""

    running: str | None
    stage: str | None
    started_at: float | None
    queued: tuple[str, ...]

    @property
    def elapsed_s(self) -> float | None:
        return None if self.started_at is None else time.time() - self.started_at


class WorkerExecutor(cf.Executor):
    """Run picklable top-level functions in one reused child process, one job at a time.

    Args:
      timeout: default seconds a job may run before the worker is killed and replaced (the
        job's future then raises :class:`MeasurementTimeout`); ``None`` for no limit.
      memory_limit_bytes: an address-space limit for the child (``RLIMIT_AS``), so a runaway
        compile fails as :class:`WorkerOutOfMemory` instead of exhausting the machine.
      env: extra environment variables for the child.
      python: the interpreter the child runs under (default: this one), so another
        environment's JAX can measure; it needs JAX and this package importable.
    """

    def __init__(self, timeout: float | None = DEFAULT_TIMEOUT_S, *,
                 memory_limit_bytes: int | None = None, env: dict[str, str] | None = None,
                 python: str | None = None):
        self.timeout = timeout
        self.memory_limit_bytes = memory_limit_bytes
        # A child that uses a GPU must not grab most of its memory up front.
        self.env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", **(env or {})}
        self.python = python or sys.executable
        self.environment: dict[str, Any] | None = None  # what the last worker reported
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._pending: list[_Job] = []
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self._shutdown = False
        self._cancel_current = threading.Event()
        self._current: _Job | None = None
        self._stage: str | None = None
        self._started: float | None = None
        self._process: Any = None
        self._conn: Any = None
        self.jobs_done = 0
        self.workers_started = 0
        self._thread = threading.Thread(target=self._dispatch, name="explorer-worker", daemon=True)
        self._thread.start()

    # -- Executor interface ------------------------------------------------------------
    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> cf.Future:
        return self.submit_with(fn, args, kwargs)

    def submit_with(self, fn: Callable, args: tuple = (), kwargs: dict | None = None, *,
                    timeout: float | None | str = "default", label: str | None = None) -> cf.Future:
        """Like ``submit`` with a per-job ``timeout`` and a ``label`` shown in :attr:`status`."""
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit to a WorkerExecutor after shutdown")
            job = _Job(cf.Future(), fn, tuple(args), dict(kwargs or {}),
                       self.timeout if timeout == "default" else timeout,
                       label or getattr(fn, "__name__", "job"), next(self._seq))
            self._pending.append(job)
        self._queue.put(job)
        return job.future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            pending = list(self._pending)
        if cancel_futures:
            for job in pending:
                job.future.cancel()
            self.cancel_running()  # an interrupted caller must not wait for a long compile
        self._queue.put(None)
        if wait:
            self._thread.join()
        self._stop_process()

    # -- control and status ------------------------------------------------------------
    def cancel_running(self) -> bool:
        """Kill the job that is running now (its future raises :class:`WorkerCancelled`)."""
        with self._lock:
            if self._current is None:
                return False
            self._cancel_current.set()
            return True

    def cancel(self, future: cf.Future) -> bool:
        """Cancel a queued job, or kill it if it is the running one."""
        if future.cancel():
            return True
        with self._lock:
            running = self._current is not None and self._current.future is future
        return self.cancel_running() if running else False

    @property
    def status(self) -> WorkerStatus:
        with self._lock:
            current = self._current
            queued = tuple(j.label for j in self._pending
                           if j is not current and not j.future.done())
            return WorkerStatus(current.label if current else None,
                                self._stage if current else None,
                                self._started if current else None, queued)

    # -- the explorer's executor protocol (``protocol.JobExecutor``) -------------------
    parallel = 1  # one job at a time: timings never overlap

    def describe(self) -> str | None:
        """``None``: jobs run on this machine."""
        return None

    def place(self, future: cf.Future) -> JobPlace:
        """Where the job of ``future`` is: its queue position, and what the worker runs now."""
        state = self.status
        return JobPlace(position=self.queue_position(future), stage=state.stage,
                        elapsed_s=state.elapsed_s, running=state.running, queued=state.queued)

    def queue_position(self, future: cf.Future) -> int | None:
        """0 when running, k when k jobs run or wait ahead of it, ``None`` when done/unknown."""
        with self._lock:
            alive = [j for j in self._pending if not j.future.done() or j is self._current]
            for position, job in enumerate(alive):
                if job.future is future:
                    return position
        return None

    # -- dispatcher thread -------------------------------------------------------------
    def _ensure_process(self) -> None:
        """Start a worker (``python -m explorer._src.jobs.worker_main``) unless one is alive.

        The worker answers ``ready`` once JAX is imported and its backend started; that start-up
        is waited for here, under :data:`STARTUP_TIMEOUT_S`, never under a job's timeout.
        """
        if self._process is not None and self._process.poll() is None:
            return
        self._stop_process()
        job_r, job_w = os.pipe()
        res_r, res_w = os.pipe()
        life_r, life_w = os.pipe()
        env = _package_env({**os.environ, **self.env})
        try:
            process = subprocess.Popen(
                [self.python, "-m", "explorer._src.jobs.worker_main", str(job_r), str(res_w),
                 str(life_r), str(os.getpid())],
                pass_fds=(job_r, res_w, life_r), env=env, stdin=subprocess.DEVNULL,
                close_fds=True)
        except OSError:
            for fd in (job_r, job_w, res_r, res_w, life_r, life_w):
                os.close(fd)
            raise
        for fd in (job_r, res_w, life_r):
            os.close(fd)
        self._process = process
        self._conn = _Pipes(Connection(job_w, readable=False), Connection(res_r, writable=False),
                            life_w)
        self.workers_started += 1
        # Same interpreter: the caller's import path too (tests' helper modules, say); another
        # interpreter keeps its own, with this package in front.
        sys_path = list(sys.path) if self.python == sys.executable else []
        try:
            self._conn.send((sys_path, self.memory_limit_bytes))
        except OSError:  # it died at once (a broken pipe): the wait for "ready" reports how
            pass

    def _stop_process(self) -> None:
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if conn is not None:
            try:
                conn.send(None)
            except (OSError, ValueError):
                pass
            conn.close()
        if process is not None:
            try:
                process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _kill_process(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = None

    def _dispatch(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if not job.future.set_running_or_notify_cancel():
                with self._lock:
                    self._pending.remove(job)
                continue
            with self._lock:
                self._current, self._stage, self._started = job, "starting", time.time()
                self._cancel_current.clear()
            try:
                outcome = self._run(job)
            except BaseException as err:  # noqa: BLE001 - never let the dispatcher die
                outcome = ("exception", WorkerCrashed(f"worker failed: {err}"))
            with self._lock:
                self._current = None
                self._pending.remove(job)
            kind, value = outcome
            if kind == "result":
                job.future.set_result(value)
            else:
                job.future.set_exception(value)
            self.jobs_done += 1

    def _died(self, label: str) -> tuple[str, Any]:
        code = self._process.returncode if self._process is not None else None
        self._kill_process()
        if self.memory_limit_bytes and code == -signal.SIGABRT:
            # Under RLIMIT_AS a failed allocation inside XLA aborts the process (a failed
            # CHECK or an uncaught std::bad_alloc); it never raises MemoryError.
            return "exception", WorkerOutOfMemory(
                f"{label}: the worker aborted (exit code {code}) under its memory limit of "
                f"{self.memory_limit_bytes / 2**30:.3g} GiB, most likely out of memory; "
                "it was replaced")
        return "exception", WorkerCrashed(
            f"{label}: the worker process died (exit code {code}); it was replaced")

    def _receive(self, job: _Job, deadline: float | None) -> tuple[str, Any]:
        """The next message that is not a stage report, or a failure outcome."""
        while True:
            if self._cancel_current.is_set():
                self._kill_process()
                return "exception", WorkerCancelled(f"{job.label}: cancelled")
            if deadline is not None and time.monotonic() > deadline:
                self._kill_process()
                return "exception", MeasurementTimeout(
                    f"{job.label}: no result after {job.timeout:g} s; the worker was replaced")
            try:
                ready = self._conn.poll(0.05)
            except (OSError, EOFError):
                ready = False
            if ready:
                try:
                    message = self._conn.recv()
                except (EOFError, OSError):
                    message = None
                if message is not None:
                    if message[0] == "stage":
                        with self._lock:
                            self._stage = message[1]
                        continue
                    return "message", message
            if self._process.poll() is not None:
                return self._died(job.label)

    def _run(self, job: _Job) -> tuple[str, Any]:
        try:
            payload = ForkingPickler.dumps((job.fn, job.args, job.kwargs))
        except Exception as err:  # the job did not pickle
            return "exception", TypeError(f"cannot send job {job.label!r} to the worker: {err}")
        if self._process is None or self._process.poll() is not None:
            self._ensure_process()
            kind, value = self._receive(job, time.monotonic() + STARTUP_TIMEOUT_S)
            if kind == "exception":
                if isinstance(value, MeasurementTimeout):
                    value = WorkerCrashed(f"{job.label}: the worker did not start within "
                                          f"{STARTUP_TIMEOUT_S:g} s")
                elif isinstance(value, WorkerCrashed):
                    why = str(value).split(": ", 1)[1]
                    if self.memory_limit_bytes:
                        why += (f"; under its memory limit of "
                                f"{self.memory_limit_bytes / 2**30:.3g} GiB, which may be too "
                                "low for JAX to start")
                    value = WorkerCrashed(f"{job.label}: the worker failed to start ({why})")
                return kind, value
            if value[0] != "ready":
                self._kill_process()
                return "exception", WorkerCrashed(f"{job.label}: the worker sent {value[0]!r} "
                                                  "before it was ready")
            self.environment = value[1]
        try:
            self._conn.send_bytes(payload)
        except (OSError, ValueError):
            return self._died(job.label)
        kind, value = self._receive(
            job, None if job.timeout is None else time.monotonic() + job.timeout)
        if kind == "exception":
            return kind, value
        if value[0] == "ok":
            return "result", value[1]
        err = value[1]
        if out_of_memory(err):
            self._kill_process()  # its heap may be in any state
            under = (f" under its memory limit of {self.memory_limit_bytes / 2**30:.3g} GiB"
                     if self.memory_limit_bytes else "")
            said = "" if isinstance(err, MemoryError) else f" ({_first_line(err)})"
            return "exception", WorkerOutOfMemory(
                f"{job.label}: out of memory in the worker{under}{said}; the worker was "
                "replaced")
        return "exception", err


# How an allocation that failed reads when it does not come as MemoryError: XLA's
# "RESOURCE_EXHAUSTED: Out of memory allocating N bytes" (a JaxRuntimeError), a C++
# std::bad_alloc, the system's ENOMEM.
_OUT_OF_MEMORY = ("resource_exhausted", "out of memory", "bad_alloc", "cannot allocate memory")


def out_of_memory(err: BaseException) -> bool:
    """Whether ``err``, raised by a job, says it ran out of memory (in any of its forms)."""
    if isinstance(err, MemoryError):
        return True
    if isinstance(err, OSError) and err.errno == errno.ENOMEM:
        return True
    text = f"{type(err).__name__}: {err}".lower()
    return any(words in text for words in _OUT_OF_MEMORY)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


class _Pipes:
    """The parent's ends: jobs out, results in, and the lifeline the worker watches."""

    def __init__(self, jobs: Connection, results: Connection, lifeline_fd: int):
        self.jobs, self.results, self.lifeline_fd = jobs, results, lifeline_fd

    def send(self, obj: Any) -> None:
        self.jobs.send(obj)

    def send_bytes(self, data: bytes) -> None:
        self.jobs.send_bytes(data)

    def poll(self, timeout: float) -> bool:
        return self.results.poll(timeout)

    def recv(self) -> Any:
        return self.results.recv()

    def close(self) -> None:
        for conn in (self.jobs, self.results):
            conn.close()
        if self.lifeline_fd is not None:
            os.close(self.lifeline_fd)
            self.lifeline_fd = None


def _package_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with this package importable first (a worker under another interpreter too)."""
    # explorer/_src/jobs/worker.py -> the folder that holds explorer/
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)}


def check_python(python: str) -> str:
    """``python`` as an absolute path, after checking it can run the worker (JAX included).

    Raises:
      ValueError: one line saying why not (missing, not runnable, no JAX, package missing).
    """
    found = shutil.which(python)
    if found is None:
        raise ValueError(f"--python {python}: no such interpreter")
    probe = "import jax, jaxlib, numpy, explorer._src.jobs.worker_main; print(jax.__version__)"
    try:
        done = subprocess.run([found, "-c", probe], env=_package_env(dict(os.environ)),
                              capture_output=True, text=True, timeout=180,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ValueError(f"--python {python}: cannot run it ({type(err).__name__})") from None
    if done.returncode != 0 or not done.stdout.strip():
        lines = (done.stderr.strip().splitlines()
                 or [f"exit status {done.returncode} and no JAX version"])
        raise ValueError(f"--python {python}: cannot measure there: {lines[-1]}")
    return os.path.abspath(found)


# The shared worker's memory limit: ``pytree-explorer serve --worker-memory GIB``, or this
# variable for ``panel serve apps/explorer_app.py``.
WORKER_MEMORY_ENV = "PYTREE_EXPLORER_WORKER_MEMORY"
# A worker on the CPU reserves about 1.7 GiB of address space before its first job (JAX and
# XLA's start); under less it cannot start at all.
MIN_WORKER_MEMORY_GIB = 2.0

_shared: WorkerExecutor | None = None
_shared_memory_limit: int | None = None
_shared_lock = threading.Lock()


def memory_limit_bytes(gib: str | float | None, *, what: str = "worker memory") -> int | None:
    """Bytes of a memory limit given in GiB (``None`` or ``""``: no limit); a one-line
    ``ValueError`` for anything but a number of at least :data:`MIN_WORKER_MEMORY_GIB`."""
    if gib is None or (isinstance(gib, str) and not gib.strip()):
        return None
    try:
        value = float(gib)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number of GiB, got {gib!r}") from None
    if not value >= MIN_WORKER_MEMORY_GIB or value == float("inf"):
        raise ValueError(f"{what} must be at least {MIN_WORKER_MEMORY_GIB:g} GiB (a worker "
                         f"needs about 1.7 GiB to start JAX), got {gib!r}")
    return int(value * 2**30)


def limit_shared_worker(limit_bytes: int | None) -> None:
    """Give the process-wide worker an address-space limit (``RLIMIT_AS``): a case that needs
    more fails as out of memory (its row says so) and the worker is replaced, instead of the
    machine running out of memory under a room full of viewers. CPU only: a GPU's driver
    reserves far more address space than it uses. Set it before the first page measures; a
    one-line ``ValueError`` when the worker already runs under another limit."""
    global _shared_memory_limit
    with _shared_lock:
        if _shared is not None and _shared.memory_limit_bytes != limit_bytes:
            raise ValueError("the shared worker already runs with another memory limit; "
                             "set it before the first page measures")
        _shared_memory_limit = limit_bytes


def shared_executor() -> WorkerExecutor:
    """The process-wide worker every dashboard session queues on (created on first use)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = WorkerExecutor(memory_limit_bytes=_shared_memory_limit)
        return _shared
