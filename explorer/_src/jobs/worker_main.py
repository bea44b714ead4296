"""The measuring worker as a program of its own: ``python -m explorer._src.jobs.worker_main R W L PPID``.

:class:`explorer.WorkerExecutor` starts this module with :mod:`subprocess` rather than
multiprocessing's ``spawn``, so the worker never imports the caller's ``__main__`` (a user's
script would otherwise run again in the worker). Jobs arrive pickled on file descriptor ``R``,
results go back on ``W``; ``L`` is a lifeline pipe the parent never writes: its end of file
means the parent is gone, and the worker exits at once (``PR_SET_PDEATHSIG`` on Linux too).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any


def _die_with_parent(parent_pid: int, lifeline_fd: int) -> None:
    if sys.platform.startswith("linux"):
        try:
            import ctypes  # noqa: PLC0415

            pr_set_pdeathsig = 1
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before the line above took effect
        os._exit(1)

    def watch() -> None:
        try:
            while os.read(lifeline_fd, 1):
                pass
        except OSError:
            pass
        os._exit(1)  # no cleanup: a compile may be running and nobody waits for its result

    threading.Thread(target=watch, name="explorer-lifeline", daemon=True).start()


def environment() -> dict[str, Any]:
    """Where this worker measures: interpreter, JAX versions, host, cores, load at start."""
    info: dict[str, Any] = {"python": sys.executable,
                            "python_version": sys.version.split()[0],
                            "host": socket.gethostname(), "cpu_count": os.cpu_count(),
                            "load_avg": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
                            "jax_version": None, "jaxlib_version": None}
    try:
        import jax  # noqa: PLC0415
        import jaxlib  # noqa: PLC0415

        info["jax_version"] = jax.__version__
        info["jaxlib_version"] = getattr(jaxlib, "__version__", None)
        jax.numpy.zeros(1).block_until_ready()  # start the backend before the clock does
    except ImportError as err:
        info["jax_error"] = f"{type(err).__name__}: {err}"
    return info


def main(argv: list[str]) -> None:
    read_fd, write_fd, lifeline_fd, parent_pid = (int(a) for a in argv[:4])
    _die_with_parent(parent_pid, lifeline_fd)
    # Ctrl-C in a terminal reaches the whole process group; the parent decides what it means
    # (it kills this worker), so the job in here must not turn it into a false result.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    jobs = Connection(read_fd, writable=False)
    results = Connection(write_fd, readable=False)
    sys_path, memory_limit_bytes = jobs.recv()
    for entry in sys_path:
        if entry not in sys.path:
            sys.path.append(entry)
    if memory_limit_bytes:
        import resource  # noqa: PLC0415 - POSIX only

        resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
    from . import worker as _worker  # noqa: PLC0415

    _worker._conn = results
    results.send(("ready", environment(), time.time()))
    _worker.serve(jobs, results)


if __name__ == "__main__":
    main(sys.argv[1:])
