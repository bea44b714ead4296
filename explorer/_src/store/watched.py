"""Watched programs in the results store: the tables ``pytree-explorer watch --store PATH``
writes beside the measurements, and their reader (no JAX: the dashboard's "Your program" tab
and the CLI read them without it).

``watch_runs`` has one row per run, ``watch_compiles`` one per compilation (a watch record's
fields) and ``watch_findings`` the top functions' findings, as text.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd

__all__ = ["COMPILE_COLUMNS", "TABLES", "WatchedRuns", "load"]

TABLES = (
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

WatchedRuns = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]


def load(path: str | Path) -> WatchedRuns:
    """The stored watch runs (oldest first), their compilations and their findings: empty
    frames when the file is not there or holds no watched run. Read-only: the file is never
    made or changed here."""
    target = Path(path).expanduser()
    empty = (pd.DataFrame(), pd.DataFrame(), pd.DataFrame())
    if not target.is_file():
        return empty
    con = sqlite3.connect(f"{target.resolve().as_uri()}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"watch_runs", "watch_compiles", "watch_findings"} <= tables:
            return empty
        return (pd.read_sql_query("SELECT * FROM watch_runs ORDER BY started_at", con),
                pd.read_sql_query("SELECT * FROM watch_compiles ORDER BY run_id, seq", con),
                pd.read_sql_query("SELECT * FROM watch_findings", con))
    finally:
        con.close()
