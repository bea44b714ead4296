"""Who else is at a store on this machine: the sweeps measuring into it (its
``active_sweeps`` table, one entry per running sweep) and the process holding its write lock.

Best effort, from Linux's ``/proc``: where it cannot be read, others go unnamed.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from .errors import StoreError, _Unwritable

# Sweeps measuring into the store now (one row each while it runs).
TABLE = ("CREATE TABLE IF NOT EXISTS active_sweeps (run_id TEXT PRIMARY KEY, "
         "host TEXT, pid INTEGER, pid_start TEXT, started_at REAL)")


@contextlib.contextmanager
def sweeping(read_table: Callable[[str], list[tuple]],
             transaction: Callable[[], AbstractContextManager[sqlite3.Connection]],
             run_id: str) -> Iterator[list[dict[str, Any]]]:
    """Mark the sweep ``run_id`` of this process as running while the block runs.

    ``read_table(sql)`` reads the store; ``transaction()`` is a short write transaction on
    it. Yields the other sweeps of this host (see ``Store.sweeping``); removes the entries
    of sweeps whose process is gone.
    """
    me = {"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid(),
          "pid_start": _process_start(os.getpid()), "started_at": time.time()}
    others, stale = [], []
    with contextlib.suppress(StoreError):
        for run, host, pid, start, at in read_table(
                "SELECT run_id, host, pid, pid_start, started_at FROM active_sweeps"):
            if host != me["host"] or run == run_id:
                continue
            if _alive(pid, start):
                others.append({"run_id": run, "pid": pid, "started_at": at})
            else:
                stale.append(run)
    marked = False
    with contextlib.suppress(_Unwritable):
        with transaction() as con:
            con.executemany("DELETE FROM active_sweeps WHERE run_id = ?",
                            [(r,) for r in stale])
            con.execute("INSERT OR REPLACE INTO active_sweeps VALUES (?, ?, ?, ?, ?)",
                        tuple(me.values()))
        marked = True
    try:
        yield others
    finally:
        if marked:  # if this fails, the entry is stale once this process ends
            with contextlib.suppress(StoreError), transaction() as con:
                con.execute("DELETE FROM active_sweeps WHERE run_id = ?", (run_id,))


def overlap_message(path: Any, others: list[dict[str, Any]]) -> str:
    """One line: other sweeps measure into the store at ``path`` on this host now."""
    which = ", ".join(f"pid {o['pid']}, run {o['run_id']}, started "
                      f"{time.strftime('%H:%M:%S', time.localtime(o['started_at']))}"
                      for o in others)
    return (f"another sweep is measuring into {path} on this host ({which}): cases both "
            "ask for are measured twice, and the timings of both overlap on the same cores")


def lock_holder(path: Path) -> str:
    """Who holds the write lock of an SQLite file, from ``/proc/locks`` (Linux), best effort."""
    pids = set()
    try:
        files = {}
        for name, where in ((f"{path}-shm", 120), (str(path), None)):
            with contextlib.suppress(OSError):
                st = os.stat(name)
                files[(os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)] = where
        with open("/proc/locks") as f:
            for line in f:
                # "1: POSIX  ADVISORY  WRITE 5360 fe:00:2162704 120 120" (waiters have "->")
                parts = line.split()
                if len(parts) < 8 or parts[1] != "POSIX" or parts[3] != "WRITE":
                    continue
                major, minor, inode = parts[5].split(":")
                key = (int(major, 16), int(minor, 16), int(inode))
                if key not in files:
                    continue
                byte, end = files[key], parts[7]
                if byte is None or int(parts[6]) <= byte <= (
                        float("inf") if end == "EOF" else int(end)):
                    pids.add(int(parts[4]))
    except (OSError, ValueError):
        pass
    others = sorted(pids - {os.getpid()})
    if not others:
        return ("another connection of this process" if pids
                else "another process or connection")
    names = []
    for pid in others:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = " ".join(f.read().decode(errors="replace").replace("\0", " ").split())
        except OSError:
            cmd = ""
        cmd = cmd if len(cmd) <= 60 else cmd[:57] + "..."
        names.append(f"pid {pid} ({cmd})" if cmd else f"pid {pid}")
    return ", ".join(names)


def _process_start(pid: int) -> str | None:
    """When a process started (``/proc/PID/stat``), to tell it from a later one with its pid;
    ``None`` where unknown, ``"Z"`` for a zombie (ended, not yet waited for)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return "Z" if fields[0] in ("Z", "X") else fields[19]


def _alive(pid: Any, start: Any) -> bool:
    """Whether the process ``pid`` that started at ``start`` still runs on this host."""
    try:
        os.kill(int(pid), 0)
    except PermissionError:
        pass
    except (OSError, OverflowError, TypeError, ValueError):
        return False
    now = _process_start(int(pid))
    return now != "Z" and (start is None or now is None or now == start)
