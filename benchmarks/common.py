"""What every benchmark script here shares, without JAX: summaries of repeated figures, a
time-stamped log line, and a description of the host.

``measure.py`` adds the JAX side (the device, the bare-JAX reference); ``report.py`` turns a
results file into markdown. Scripts in this folder import these as top-level modules (the
folder is the script's own directory, so it is first on ``sys.path``).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import statistics
import sys
import time
from typing import Any


def median(values: list[float | None]) -> float | None:
    """Median of the values that are not ``None`` (``None`` when there are none)."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def spread(values: list[float | None]) -> list[float] | None:
    """``[min, max]`` of the values that are not ``None`` (``None`` when there are none)."""
    values = [v for v in values if v is not None]
    return [min(values), max(values)] if values else None


def summary(values: list[float | None]) -> dict[str, Any]:
    """``{"median", "spread", "n"}``: how a repeated figure is stored in every results file."""
    return {"median": median(values), "spread": spread(values), "n": len(values)}


def log(message: str) -> None:
    """A progress line on stderr, with the wall-clock time (stdout stays for results)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def loadavg() -> list[float] | None:
    """The 1, 5 and 15 minute load averages now (``None`` where the OS gives none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def cpu_reference_s(repeats: int = 5) -> float:
    """Seconds one core takes for a fixed piece of plain Python (10 million additions), the
    median of ``repeats``: how fast this host is now. Shared machines vary from day to day (the
    same measurement took 0.47 s one day and 0.79 s the next on this project's 2-core host), so
    a wall-clock figure is read against this one."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        total = 0
        for i in range(10_000_000):
            total += i
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def host_info() -> dict[str, Any]:
    """The machine a benchmark runs on: date, host, CPU, cores, memory, load, Python."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_usable": usable,
        "memory_gib": _memory_gib(),
        "loadavg_start": loadavg(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
