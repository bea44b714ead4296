"""Results on disk: one SQLite row per measurement, written the moment it finishes.

SQLite in WAL mode lets many dashboard sessions read while a sweep writes; every row is its
own committed transaction, so rows written before a crash survive it. The store never
rewrites or deletes what it holds: a file that is not a readable database is reported and
left alone.
"""

from __future__ import annotations

import contextlib
import io
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


ENV_VAR = "PYTREE_EXPLORER_DB"
DEFAULT_PATH = Path("~/.local/share/pytree-explorer/results.sqlite")

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


class StoreError(ValueError):
    """The store file cannot be used (not a database, locked, unwritable)."""


def default_path() -> Path:
    """``$PYTREE_EXPLORER_DB`` if set, else ``~/.local/share/pytree-explorer/results.sqlite``."""
    return Path(os.environ.get(ENV_VAR) or DEFAULT_PATH).expanduser()


def _sql_type(column: str) -> str:
    if column in _INT:
        return "INTEGER"
    if column in _TEXT:
        return "TEXT"
    return "REAL"


class Store:
    """An SQLite file of measurements (see :data:`COLUMNS`) and captured rollouts.

    Args:
      path: the database file (default: :func:`default_path`). Created on first write, with its
        folder; reading never creates, migrates or writes it. ``":memory:"`` keeps the rows in
        this process only.
      timeout: seconds to wait for a lock held by another process before giving up.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, timeout: float = 10.0):
        self.path = Path(path).expanduser() if path is not None else default_path()
        self.timeout = timeout
        self._schema_lock = threading.Lock()
        self._ready = False

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    # -- connections -------------------------------------------------------------------
    def _fail(self, err: Exception) -> StoreError:
        if isinstance(err, StoreError):
            return err
        text = str(err).splitlines()[0] if str(err) else type(err).__name__
        if "locked" in text or "busy" in text:
            why = f"is locked by another process ({text})"
        elif "not a database" in text or "malformed" in text or "disk image" in text:
            why = f"is not a readable SQLite database ({text}); it was left untouched"
        else:
            why = f"cannot be used ({text})"
        return StoreError(f"store {self.path} {why}")

    def _memory(self) -> bool:
        return str(self.path) == ":memory:"

    def _check_ours(self, con: sqlite3.Connection) -> set[str]:
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
        raise StoreError(f"store {self.path} is not a pytree-explorer results file (another "
                         "program's SQLite database); it was left untouched")

    @contextlib.contextmanager
    def _reading(self):
        """A read-only connection and the columns it has, or ``(None, set())`` if no file.

        Opened with ``mode=ro``: reading never creates, migrates or writes the file, and needs
        no write permission (a read-only folder falls back to ``immutable=1``).
        """
        if self._memory():
            con = self._connect()
            yield con, set(COLUMNS)
            return
        if not self.path.exists():
            yield None, set()
            return
        uri = self.path.resolve().as_uri()
        con = None
        try:
            for query in ("?mode=ro", "?mode=ro&immutable=1"):
                con = sqlite3.connect(uri + query, uri=True, timeout=self.timeout)
                try:
                    con.execute("PRAGMA busy_timeout = %d" % int(self.timeout * 1000))
                    have = self._check_ours(con)
                    break
                except sqlite3.OperationalError as err:
                    con.close()
                    con = None
                    if "unable to open" not in str(err) or "immutable" in query:
                        raise
            yield con, have
        except sqlite3.Error as err:
            raise self._fail(err) from None
        finally:
            if con is not None:
                con.close()

    def _read_table(self, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
        """Rows of a query on the measurements table; none if there is no store yet."""
        with self._reading() as (con, have):
            if con is None or not have:
                return []
            try:
                return con.execute(sql, tuple(params)).fetchall()
            except sqlite3.Error as err:
                raise self._fail(err) from None

    def _connect(self) -> sqlite3.Connection:
        """A connection for writing: the file is checked (ours, intact) and its schema made."""
        if self._memory():
            with self._schema_lock:
                if not hasattr(self, "_mem"):
                    self._mem = _SharedConnection(
                        sqlite3.connect(":memory:", check_same_thread=False))
            self._ensure_schema(self._mem)
            return self._mem
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(self.path, timeout=self.timeout)
            con.execute("PRAGMA busy_timeout = %d" % int(self.timeout * 1000))
        except (sqlite3.Error, OSError) as err:
            raise self._fail(err) from None
        self._ensure_schema(con)
        return con

    def check_writable(self) -> None:
        """Raise :class:`StoreError` now if rows could not be stored (foreign, corrupt, ...).

        Called before a sweep measures anything, so a bad store costs no measuring time.
        """
        self._connect().close()

    def _ensure_schema(self, con: sqlite3.Connection) -> None:
        if self._ready:
            return
        with self._schema_lock:
            if self._ready:
                return
            try:
                self._check_ours(con)  # before anything is written to the file
                check = con.execute("PRAGMA quick_check").fetchall()
                if check != [("ok",)]:
                    raise StoreError(
                        f"store {self.path} failed its integrity check ({check[0][0]}); "
                        "it was left untouched")
                con.execute("PRAGMA journal_mode=WAL")
                con.execute(f"PRAGMA application_id = {APPLICATION_ID}")
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
                con.commit()
            except (sqlite3.Error, StoreError) as err:
                con.close()
                raise self._fail(err) from None
            self._ready = True

    # -- writing -----------------------------------------------------------------------
    def add(self, row: Mapping[str, Any], rollout: tuple[list[str], np.ndarray] | None = None) -> int:
        """Store one row (unknown keys are ignored) and, optionally, its rollout; return its id."""
        values = {c: _plain(row.get(c)) for c in COLUMNS if c != "id" and c in row}
        values.setdefault("finished_at", time.time())
        names = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        con = self._connect()
        try:
            with con:
                cur = con.execute(f"INSERT INTO measurements ({names}) VALUES ({marks})",
                                  tuple(values.values()))
                row_id = int(cur.lastrowid)
                if rollout is not None:
                    _insert_rollout(con, row_id, rollout)
        except sqlite3.Error as err:
            raise self._fail(err) from None
        finally:
            con.close()
        return row_id

    def add_rollout(self, measurement_id: int, rollout: tuple[list[str], np.ndarray]) -> None:
        """Store the rollout of a row already stored (one rollout per row; a second is refused)."""
        con = self._connect()
        try:
            with con:
                found = con.execute("SELECT 1 FROM measurements WHERE id = ?",
                                    (int(measurement_id),)).fetchone()
                if found is None:
                    raise StoreError(f"store {self.path} has no measurement {measurement_id}")
                _insert_rollout(con, int(measurement_id), rollout)
        except sqlite3.IntegrityError:
            raise StoreError(f"measurement {measurement_id} already has a rollout") from None
        except sqlite3.Error as err:
            raise self._fail(err) from None
        finally:
            con.close()

    # -- reading -----------------------------------------------------------------------
    def rows(self, *, run_id: str | None = None, status: str | None = None,
             since_id: int = 0, limit: int | None = None) -> pd.DataFrame:
        """Stored rows, oldest first, as a DataFrame with :data:`COLUMNS`."""
        where, params = ["id > ?"], [since_id]
        if run_id is not None:
            where.append("run_id = ?")
            params.append(run_id)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        with self._reading() as (con, have):
            if con is None or not have:
                return to_frame([])
            # An earlier store may lack newer columns: they read as empty, it is not migrated.
            picked = ", ".join(c if c in have else f"NULL AS {c}" for c in COLUMNS)
            sql = (f"SELECT {picked} FROM measurements WHERE {' AND '.join(where)} "
                   "ORDER BY id")
            if limit is not None:
                sql = (f"SELECT * FROM ({sql.replace('ORDER BY id', 'ORDER BY id DESC')} "
                       f"LIMIT {int(limit)}) ORDER BY id")
            try:
                return to_frame(con.execute(sql, params).fetchall())
            except sqlite3.Error as err:
                raise self._fail(err) from None

    def rollout(self, measurement_id: int) -> tuple[list[str], np.ndarray] | None:
        """The (names, array of shape (horizon, len(names))) rollout stored with a row, if any."""
        with self._reading() as (con, have):
            if con is None or not have:
                return None
            try:
                found = con.execute("SELECT names, data FROM rollouts WHERE measurement_id = ?",
                                    (int(measurement_id),)).fetchall()
            except sqlite3.OperationalError as err:
                if "no such table" in str(err):
                    return None
                raise self._fail(err) from None
        if not found:
            return None
        names, blob = found[0]
        return names.split("\n"), np.load(io.BytesIO(blob), allow_pickle=False)

    def runs(self) -> pd.DataFrame:
        """One line per run id: how many rows, how many ok, first and last finish time."""
        found = self._read_table(
            "SELECT run_id, COUNT(*), SUM(status = 'ok'), MIN(finished_at), MAX(finished_at) "
            "FROM measurements GROUP BY run_id ORDER BY MIN(id)")
        return pd.DataFrame(found, columns=["run_id", "rows", "ok", "first", "last"])

    def __len__(self) -> int:
        found = self._read_table("SELECT COUNT(*) FROM measurements")
        return int(found[0][0]) if found else 0

    def export(self, path: str | os.PathLike, **filters: Any) -> Path:
        """Write rows to ``.csv`` or ``.parquet`` (chosen by the suffix); return the path."""
        check_export_path(path, self.path)
        return export_frame(self.rows(**filters), path)


def check_export_path(path: str | os.PathLike, store: str | os.PathLike | None = None) -> Path:
    """``path`` if rows can be exported there, else a one-line ValueError.

    Checked before anything is read or measured, so a bad name costs nothing: the suffix
    (``.csv`` or ``.parquet``), an existing writable folder, not a folder itself, and never the
    store file (``store``) under another name or through a link.
    """
    path = Path(path).expanduser()
    if path.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise ValueError(f"cannot export to {path.name!r}: use a .csv or .parquet file name")
    if store is not None and str(store) != ":memory:" and _same_file(path, Path(store)):
        raise ValueError(f"cannot export to {path}: it is the results store itself")
    if path.is_dir():
        raise ValueError(f"cannot export to {path}: it is a folder")
    folder = path.parent
    if not folder.is_dir():
        raise ValueError(f"cannot export to {path}: folder {folder} does not exist")
    if not os.access(folder if not path.exists() else path, os.W_OK):
        raise ValueError(f"cannot export to {path}: no permission to write there")
    return path


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
        return a.expanduser().resolve() == b.expanduser().resolve()
    except OSError:
        return False


def export_frame(frame: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write a results DataFrame to ``.csv`` or ``.parquet`` by suffix."""
    path = check_export_path(path)
    try:
        _write_frame(frame, path)
    except OSError as err:
        raise ValueError(f"cannot export to {path}: {err.strerror or err}") from None
    return path


def _write_frame(frame: pd.DataFrame, path: Path) -> None:
    if path.suffix.lower() == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)


def to_frame(records: Iterable[tuple] | Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """A results DataFrame with :data:`COLUMNS`, from tuples in column order or dicts."""
    records = list(records)
    if records and isinstance(records[0], Mapping):
        frame = pd.DataFrame([{c: r.get(c) for c in COLUMNS} for r in records], columns=list(COLUMNS))
    else:
        frame = pd.DataFrame(records, columns=list(COLUMNS))
    for c in COLUMNS:
        if c in _TEXT:
            frame[c] = frame[c].astype(object)
        elif c in _INT:
            frame[c] = pd.to_numeric(frame[c], errors="coerce").astype("Int64")
        else:
            frame[c] = pd.to_numeric(frame[c], errors="coerce").astype(float)
    return frame


class _SharedConnection:
    """The one connection of a ``":memory:"`` store: closing it is a no-op."""

    def __init__(self, con: sqlite3.Connection):
        self._con = con

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)

    def __enter__(self) -> sqlite3.Connection:
        return self._con.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self._con.__exit__(*exc)

    def close(self) -> None:
        pass


def _plain(value: Any) -> Any:
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def _insert_rollout(con: sqlite3.Connection, measurement_id: int,
                    rollout: tuple[list[str], np.ndarray]) -> None:
    con.execute("INSERT INTO rollouts VALUES (?, ?, ?)",
                (measurement_id, "\n".join(rollout[0]), _to_npy(rollout[1])))


def _to_npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(array), allow_pickle=False)
    return buf.getvalue()
