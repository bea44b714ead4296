"""What a results store file holds: its columns and tables, and how one is told from another
program's SQLite database (``PRAGMA application_id``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from .errors import StoreError, _Unwritable
from .pending import TABLE as PENDING_TABLE
from .sweeps import TABLE as SWEEPS_TABLE

SPEC_COLUMNS = ("problem", "representation", "n_states", "horizon", "target", "unroll",
                "backend_requested",
                "problem_source")  # "built-in", or where a define_problem problem's code is
META_COLUMNS = ("id", "run_id", "status", "error", "started_at", "finished_at", "host")
# The fields of ``explorer.Measurement``, in its order (a test checks they stay in step; the
# store imports no JAX, so it does not read them from the dataclass).
MEASUREMENT_COLUMNS = (
    "name", "trace_s", "lower_s", "compile_s", "first_run_s", "run_s", "repeats",
    "trace_s_spread", "lower_s_spread", "compile_s_spread", "run_s_spread", "xla_compile_s",
    "jaxpr_eqns", "jaxpr_eqns_top", "n_leaves", "hlo_pre_bytes", "hlo_post_bytes", "flops",
    "bytes_accessed", "temp_bytes", "argument_bytes", "output_bytes", "generated_code_bytes",
    "backend", "device_kind", "jax_version", "jaxlib_version", "backend_compiles", "cache_hits",
    "cold",
)
# Where a row was measured: the interpreter, the machine's cores and its load (1-minute
# average) as the job started, and the Dask worker's name on a cluster (``None`` locally).
ENVIRONMENT_COLUMNS = ("python", "cpu_count", "load_avg", "worker")
# Column order of a stored row (and of every results DataFrame).
COLUMNS: tuple[str, ...] = (META_COLUMNS + SPEC_COLUMNS + MEASUREMENT_COLUMNS
                            + ENVIRONMENT_COLUMNS)
# The columns a results table shows, the figures people read first leading (the dashboard's
# table and ``pytree-explorer list``; the CLI leaves out the wide text columns at the end).
# What people read first (what, N, the three figures), then where it came from, then the rest.
TABLE_COLUMNS: tuple[str, ...] = (
    "representation", "n_states", "target", "compile_s", "hlo_pre_bytes", "run_s", "status",
    "source", "id", "problem", "horizon", "unroll", "trace_s", "lower_s",
    "hlo_post_bytes", "jaxpr_eqns", "n_leaves", "backend", "device_kind", "jax_version", "host",
    "error",
)
STATUSES = ("ok", "error", "timeout", "crashed", "oom", "cancelled")

_INT = {"id", "n_states", "horizon", "unroll", "repeats", "jaxpr_eqns", "jaxpr_eqns_top",
        "n_leaves", "hlo_pre_bytes", "hlo_post_bytes", "temp_bytes", "argument_bytes",
        "output_bytes", "generated_code_bytes", "backend_compiles", "cache_hits", "cold",
        "cpu_count"}
_TEXT = {"run_id", "status", "error", "host", "problem", "representation", "target",
         "backend_requested", "name", "backend", "device_kind", "jax_version", "jaxlib_version",
         "python", "worker", "problem_source"}


# Written at creation (``PRAGMA application_id``, "PTEX"): a file without it is another
# program's database, unless it holds the measurements table of an earlier explorer.
APPLICATION_ID = 0x50544558
SCHEMA_VERSION = 1
# Columns every explorer store has had since its first version: how an earlier store (made
# before the application id) is told from another program's ``measurements`` table.
_EARLIER_COLUMNS = frozenset({"id", "run_id", "status", "problem", "representation",
                              "n_states", "horizon", "target", "compile_s"})


def check_ours(con: sqlite3.Connection, path: Path) -> set[str]:
    """The measurements table's columns, after checking the file is an explorer store.

    Reads only. An empty database (no tables) is ours to fill; a foreign one raises.
    """
    app = con.execute("PRAGMA application_id").fetchone()[0]
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    have = ({r[1] for r in con.execute("PRAGMA table_info(measurements)")}
            if "measurements" in tables else set())
    if app == APPLICATION_ID or (app == 0 and not tables):
        return have
    if app == 0 and _EARLIER_COLUMNS <= have:  # made by an earlier explorer
        return have
    raise StoreError(f"store {path} is not a pytree-explorer results file (another "
                     "program's SQLite database); it was left untouched")


def check_version(con: sqlite3.Connection, path: Path) -> None:
    """Refuse, before anything is written, a store made by a newer explorer (a higher
    ``PRAGMA user_version``): its columns may be renamed or required, so adding a column back
    or a row without them would alter it or lose the row. It is still read."""
    version = con.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise _Unwritable(f"store {path} was written by a newer pytree-explorer (store version "
                          f"{version}; this one writes version {SCHEMA_VERSION}): it can be "
                          "read but not written; upgrade pytree-explorer, or use another "
                          "--store", False)


def is_current(con: sqlite3.Connection, have: set[str], memory: bool) -> bool:
    """Whether the store on ``con`` (its measurements table has the columns ``have``) has
    every column, table and index of this version, in WAL mode unless in ``memory``."""
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    indexes = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    return (con.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
            and con.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION
            and (memory or con.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal")
            and set(COLUMNS) <= have and "by_spec" in indexes
            and {"rollouts", "active_sweeps", "merged_pending"} <= tables)


def create(con: sqlite3.Connection) -> None:
    """Make what the store on ``con`` lacks, inside the caller's write transaction; an older
    store gains the new columns and keeps every row."""
    con.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    if con.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
        con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    cols = ", ".join(
        f"{c} INTEGER PRIMARY KEY AUTOINCREMENT" if c == "id" else f"{c} {_sql_type(c)}"
        for c in COLUMNS)
    con.execute(f"CREATE TABLE IF NOT EXISTS measurements ({cols})")
    have = {r[1] for r in con.execute("PRAGMA table_info(measurements)")}
    for c in COLUMNS:
        if c not in have:  # an older store: add the new column, keep every row
            con.execute(f"ALTER TABLE measurements ADD COLUMN {c} {_sql_type(c)}")
    con.execute(
        "CREATE TABLE IF NOT EXISTS rollouts (measurement_id INTEGER PRIMARY KEY, "
        "names TEXT, data BLOB)")
    con.execute("CREATE INDEX IF NOT EXISTS by_spec ON measurements "
                "(problem, representation, n_states, horizon, target)")
    con.execute(SWEEPS_TABLE)
    con.execute(PENDING_TABLE)


def _sql_type(column: str) -> str:
    if column in _INT:
        return "INTEGER"
    if column in _TEXT:
        return "TEXT"
    return "REAL"
