"""Watched runs kept in the results store (``pytree-explorer watch --store PATH``).

The file is checked and made by :class:`explorer.Store` (so a foreign or damaged database is
refused, untouched); the watch adds three tables of its own beside the measurements:
``watch_runs`` (one row per run), ``watch_compiles`` (one per compilation, the record's fields)
and ``watch_findings`` (the top functions' findings, as text). Readers get pandas frames.
"""

from __future__ import annotations

import datetime
import json
import socket
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import jax
import pandas as pd

from ..store.store import Store

_TABLES = (
    ("CREATE TABLE IF NOT EXISTS watch_runs (run_id TEXT PRIMARY KEY, started_at TEXT, "
     "program TEXT, argv TEXT, status INTEGER, wall_s REAL, compile_s REAL, total_s REAL, "
     "n_compiles INTEGER, jax_version TEXT, backend TEXT, host TEXT, notes TEXT)"),
    ("CREATE TABLE IF NOT EXISTS watch_compiles (run_id TEXT, seq INTEGER, name TEXT, "
     "\"where\" TEXT, trace_s REAL, lower_s REAL, compile_s REAL, n_leaves INTEGER, "
     "hlo_pre_bytes INTEGER, eqns INTEGER, cache_hit INTEGER, reason TEXT, called_at TEXT, "
     "thread TEXT, started_s REAL, PRIMARY KEY (run_id, seq))"),
    ("CREATE TABLE IF NOT EXISTS watch_findings (run_id TEXT, name TEXT, \"where\" TEXT, "
     "share REAL, kind TEXT, message TEXT, remedy TEXT, saving TEXT, note TEXT)"),
)
COMPILE_COLUMNS = ("name", "where", "trace_s", "lower_s", "compile_s", "n_leaves",
                   "hlo_pre_bytes", "eqns", "cache_hit", "reason", "called_at", "thread",
                   "started_s")


def check_store_path(path: str) -> None:
    """Refuse, in one line (``ValueError``), a store the rows could not go to, before running."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise ValueError(f"--store {path}: is a directory; give a file such as results.sqlite")
    if not target.parent.is_dir():
        raise ValueError(f"--store {path}: folder {target.parent} does not exist")
    Store(target).check_writable()


def save(w: Any, path: str, *, program: str, argv: list[str], status: int) -> str:
    """Store ``w``'s compilations (and findings, if made) as one run; returns its id."""
    store = Store(Path(path).expanduser())
    store.make()  # makes the store's own tables, or refuses a foreign file
    run_id = f"watch-{datetime.datetime.now(datetime.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    records = w.compiles
    found = w.findings if w.findings_wanted and w._findings is not None else []
    con = sqlite3.connect(store.path, timeout=store.timeout, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        for sql in _TABLES:
            con.execute(sql)
        con.execute(
            "INSERT INTO watch_runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (run_id, datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
             program, json.dumps(argv), int(status), w.wall_s, w.compile_s, w.total_s,
             len(records), jax.__version__, jax.default_backend(), socket.gethostname(),
             json.dumps(w.notes)))
        con.executemany(
            f"INSERT INTO watch_compiles VALUES ({','.join('?' * (len(COMPILE_COLUMNS) + 2))})",
            [(run_id, i, *(getattr(r, c) for c in COMPILE_COLUMNS))
             for i, r in enumerate(records)])
        for fn in found:
            rows = ([(x.kind, x.message, x.remedy, x.saving, None)
                     for x in fn.diagnosis.findings] if fn.diagnosis is not None
                    else [(None, None, None, None, fn.note)])
            if not rows:
                rows = [(None, None, None, None, ("no findings: nothing in it grows with the "
                                                  "number of leaves or steps"))]
            con.executemany("INSERT INTO watch_findings VALUES (?,?,?,?,?,?,?,?,?)",
                            [(run_id, fn.name, fn.where, fn.share, *row) for row in rows])
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise
    finally:
        con.close()
    return run_id


def load(path: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The stored watch runs, their compilations and findings (empty frames if none)."""
    target = Path(path).expanduser()
    empty = (pd.DataFrame(), pd.DataFrame(), pd.DataFrame())
    if not target.exists():
        return empty
    con = sqlite3.connect(f"{target.resolve().as_uri()}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "watch_runs" not in tables:
            return empty
        return (pd.read_sql_query("SELECT * FROM watch_runs ORDER BY started_at", con),
                pd.read_sql_query("SELECT * FROM watch_compiles ORDER BY run_id, seq", con),
                pd.read_sql_query("SELECT * FROM watch_findings", con))
    finally:
        con.close()
