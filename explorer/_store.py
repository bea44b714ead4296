"""Results on disk: one SQLite row per measurement, written the moment it finishes.

SQLite in WAL mode lets many dashboard sessions read while a sweep writes; every row is its
own committed transaction, so rows written before a crash survive it. The store never
rewrites or deletes what it holds: a file that is not a readable database is reported and
left alone. A finished row that cannot be written (the store stays locked by another process,
or refuses the write) is kept in a side file beside it, ``<store>.pending.jsonl``, and added to
the store by its next write.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import socket
import sqlite3
import threading
import time
import uuid
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

try:
    import fcntl
except ImportError:  # not POSIX: appends to the side file are not locked
    fcntl = None


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


# How long a write waits for a lock held by another process before a finished row is kept in
# the side file instead (``Store(timeout=...)``, ``sweep --lock-wait``).
DEFAULT_LOCK_WAIT_S = 60.0
# A lock released within this is not worth a message (another sweep committing its row).
_QUICK_S = 0.2
PENDING_SUFFIX = ".pending.jsonl"


class StoreError(ValueError):
    """The store file cannot be used (not a database, locked, unwritable)."""


class RowPending(StoreError):
    """A finished row (or rollout) was not written to the store but kept in its side file.

    The store stayed locked or refused the write; nothing is lost: the next write to the
    store (a sweep starting or storing a row) adds what the side file holds. ``path`` is
    the side file.
    """

    def __init__(self, message: str, path: Path):
        super().__init__(message)
        self.path = path


class StoreWarning(UserWarning):
    """Something about the store to know now: a lock being waited for, rows kept in the side
    file, another sweep measuring into the same store on this machine."""


class _Unwritable(StoreError):
    """The store refused a write (locked, read-only, full, I/O error); ``busy``: locked."""

    def __init__(self, message: str, busy: bool):
        super().__init__(message)
        self.busy = busy


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
      timeout: seconds a write waits for a lock held by another process (a
        :class:`StoreWarning` says who holds it when the wait starts). A row still locked out
        after it is kept in the side file :attr:`pending_path` (:class:`RowPending` is raised)
        and added to the store by its next write.
    """

    def __init__(self, path: str | os.PathLike | None = None, *,
                 timeout: float = DEFAULT_LOCK_WAIT_S):
        self.path = Path(path).expanduser() if path is not None else default_path()
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
            raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
        self.timeout = float(timeout)
        self._schema_lock = threading.Lock()
        self._write_lock = threading.RLock()  # one write transaction at a time per Store
        self._ready = False
        self._ours = False  # checked: an intact explorer store (rows may be kept beside it)
        self._said_waiting = False  # the lock-wait message of this episode was given
        self._deferring = False  # rows go to the side file without waiting again

    @property
    def pending_path(self) -> Path:
        """The side file of rows kept while the store could not be written."""
        return Path(f"{self.path}{PENDING_SUFFIX}")

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    # -- connections -------------------------------------------------------------------
    def _fail(self, err: Exception) -> StoreError:
        if isinstance(err, StoreError):
            return err
        text = str(err).splitlines()[0] if str(err) else type(err).__name__
        if _is_busy(err):
            return _Unwritable(f"store {self.path} is locked by another process ({text})", True)
        if "not a database" in text or "malformed" in text or "disk image" in text:
            why = f"is not a readable SQLite database ({text}); it was left untouched"
        else:
            why = f"cannot be used ({text})"
        if isinstance(err, (sqlite3.OperationalError, OSError)):  # read-only, full, I/O error
            return _Unwritable(f"store {self.path} {why}", False)
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
                    con.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
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
                        sqlite3.connect(":memory:", check_same_thread=False,
                                        isolation_level=None))
            self._ensure_schema(self._mem)
            return self._mem
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
            con.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
        except (sqlite3.Error, OSError) as err:
            raise self._fail(err) from None
        self._ensure_schema(con)
        return con

    def check_writable(self) -> None:
        """Raise :class:`StoreError` now if rows could not be stored (foreign, corrupt, ...).

        Called before a sweep measures anything, so a bad store costs no measuring time. A
        store locked by another process passes (rows finished while it stays locked are kept
        in the side file); when it is free, rows kept there earlier are added now.
        """
        try:
            with self._transaction(0):
                pass
        except _Unwritable as err:
            if not err.busy:
                raise

    def _ensure_schema(self, con: sqlite3.Connection) -> None:
        if self._ready:
            return
        with self._schema_lock:
            if self._ready:
                return
            try:
                have = self._check_ours(con)  # before anything is written to the file
                check = con.execute("PRAGMA quick_check").fetchall()
                if check != [("ok",)]:
                    raise StoreError(
                        f"store {self.path} failed its integrity check ({check[0][0]}); "
                        "it was left untouched")
                self._ours = not self._memory()
                if not self._schema_complete(con, have):  # a store up to date needs no lock
                    self._make_schema(con)
            except (sqlite3.Error, StoreError) as err:
                con.close()
                raise self._fail(err) from None
            self._ready = True

    def _schema_complete(self, con: sqlite3.Connection, have: set[str]) -> bool:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        indexes = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        return (con.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
                and con.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION
                and (self._memory()
                     or con.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal")
                and set(COLUMNS) <= have and "by_spec" in indexes
                and {"rollouts", "active_sweeps", "merged_pending"} <= tables)

    def _make_schema(self, con: sqlite3.Connection) -> None:
        if not self._memory():
            con.execute("PRAGMA journal_mode=WAL")  # not inside a transaction
        self._begin(con, self.timeout)
        try:
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
            # Sweeps measuring into this store now (one row each while it runs).
            con.execute("CREATE TABLE IF NOT EXISTS active_sweeps (run_id TEXT PRIMARY KEY, "
                        "host TEXT, pid INTEGER, pid_start TEXT, started_at REAL)")
            # Side-file rows already added: a merge cut short and run again stores each once.
            con.execute("CREATE TABLE IF NOT EXISTS merged_pending (key TEXT PRIMARY KEY, "
                        "measurement_id INTEGER)")
            con.execute("COMMIT")
        except BaseException:
            _rollback(con)
            raise

    # -- write transactions, and the side file ------------------------------------------
    def _begin(self, con: sqlite3.Connection, wait: float, then: str | None = "") -> None:
        """``BEGIN IMMEDIATE``: take the write lock, waiting up to ``wait`` seconds for it.

        A wait longer than a moment is announced once (a :class:`StoreWarning` naming who
        holds the lock, ``then`` ending it; ``None``: not announced); the lock still held after
        ``wait`` raises ``sqlite3.OperationalError``.
        """
        con.execute(f"PRAGMA busy_timeout = {int(min(wait, _QUICK_S) * 1000)}")
        try:
            con.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as err:
            if not _is_busy(err) or wait <= _QUICK_S:
                raise
        if not self._said_waiting and then is not None:
            self._said_waiting = True
            warnings.warn(f"store {self.path} is locked by {_lock_holder(self.path)}; waiting up "
                          f"to {wait:g} s for it{then}", StoreWarning, stacklevel=5)
        con.execute(f"PRAGMA busy_timeout = {int((wait - _QUICK_S) * 1000)}")
        con.execute("BEGIN IMMEDIATE")

    @contextlib.contextmanager
    def _transaction(self, wait: float, then: str | None = ""):
        """A connection inside a write transaction, committed when the block ends.

        Rows kept in the side file are added first, in the same transaction: the side file is
        removed only once they are committed, and a merge cut short (``kill -9``) is merged
        again later without storing any row twice (``merged_pending`` holds their keys).
        Raises :class:`StoreError`; an ``_Unwritable`` one when the lock is not got within
        ``wait`` or the file refuses the write.
        """
        with self._write_lock:
            con = self._connect()
            merge = None
            try:
                try:
                    self._begin(con, wait, then)
                    merge = self._merge_pending(con)
                    yield con
                    con.execute("COMMIT")
                except BaseException:
                    _rollback(con)
                    raise
                if merge is not None:
                    merge.finish()  # the side file goes only now, still under its lock
            except sqlite3.Error as err:
                raise self._fail(err) from None
            finally:
                if merge is not None:
                    merge.close()
                con.close()
            # Written: the next lock episode is announced again, rows wait for it again.
            self._said_waiting = self._deferring = False

    def _write_wait(self) -> float:
        # Once a row went to the side file, the next ones do not wait again (only a moment,
        # as for another sweep's commit) until a write succeeds.
        return min(_QUICK_S, self.timeout) if self._deferring else self.timeout

    def _keep_aside(self, record: dict[str, Any], err: _Unwritable, what: str) -> None:
        """Append ``record`` to the side file, then raise :class:`RowPending`."""
        if not self._ours:  # never put a file beside one not known to be an explorer store
            raise err
        pending = self.pending_path
        try:
            _append_line(pending, {"key": uuid.uuid4().hex, **record})
        except OSError as os_err:
            raise StoreError(f"{err}, and the {what} could not be kept in {pending} either "
                             f"({os_err.strerror or os_err})") from None
        if not self._deferring:
            self._deferring = True
            warnings.warn(f"{err}: finished rows are kept in {pending} until it can be written; "
                          "the next write to the store adds them", StoreWarning, stacklevel=3)
        raise RowPending(f"{err}; the {what} is kept in {pending} and will be stored by the "
                         "next write to the store", pending)

    def _merge_pending(self, con: sqlite3.Connection) -> _Merge | None:
        """Add the side file's rows inside the open transaction (see :meth:`_transaction`)."""
        if self._memory():
            return None
        try:
            fd = os.open(self.pending_path, os.O_RDWR)
        except FileNotFoundError:
            return None
        except OSError as err:
            warnings.warn(f"cannot read {self.pending_path} ({err.strerror}); the rows in it "
                          "were left there", StoreWarning, stacklevel=4)
            return None
        merge = _Merge(fd, self.pending_path)
        try:
            _lock_file(fd)
            if os.fstat(fd).st_nlink == 0:  # merged and removed by another process meanwhile
                merge.close()
                return None
            with os.fdopen(os.dup(fd), "rb") as f:
                lines = f.read().splitlines()
            for line in lines:
                try:
                    record = json.loads(line)
                    key, kind = str(record["key"]), record["kind"]
                except (ValueError, KeyError, TypeError):
                    if line.strip():  # a line cut short by a crash while it was appended
                        merge.bad.append(line)
                    continue
                if con.execute("SELECT 1 FROM merged_pending WHERE key = ?", (key,)).fetchone():
                    continue
                con.execute("SAVEPOINT record")  # a record that cannot be added is set aside whole
                try:
                    merge.rows += _merge_record(con, key, kind, record)
                    con.execute("RELEASE record")
                except (ValueError, KeyError, TypeError, IndexError, AttributeError,
                        sqlite3.InterfaceError, sqlite3.IntegrityError, sqlite3.ProgrammingError):
                    con.execute("ROLLBACK TO record")
                    con.execute("RELEASE record")
                    merge.bad.append(line)
        except BaseException:
            merge.close()
            raise
        return merge

    def pending_rows(self) -> int:
        """How many finished rows wait in the side file to be added to the store (reads only)."""
        try:
            with open(self.pending_path, "rb") as f:
                found = 0
                for line in f:
                    with contextlib.suppress(ValueError, TypeError):
                        found += json.loads(line).get("kind") == "row"
                return found
        except OSError:
            return 0

    # -- sweeps running on this store --------------------------------------------------
    @contextlib.contextmanager
    def sweeping(self, run_id: str):
        """Mark a sweep of this process as running in the store while the block runs.

        Yields the other sweeps (dicts: ``run_id``, ``pid``, ``started_at``) measuring into
        this store from this host now; entries of sweeps whose process is gone are removed.
        Best effort: a store locked for a moment runs the sweep unmarked.
        """
        me = {"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid(),
              "pid_start": _process_start(os.getpid()), "started_at": time.time()}
        others, stale = [], []
        with contextlib.suppress(StoreError):
            for run, host, pid, start, at in self._read_table(
                    "SELECT run_id, host, pid, pid_start, started_at FROM active_sweeps"):
                if host != me["host"] or run == run_id:
                    continue
                if _alive(pid, start):
                    others.append({"run_id": run, "pid": pid, "started_at": at})
                else:
                    stale.append(run)
        marked = False
        with contextlib.suppress(_Unwritable):
            with self._transaction(min(self.timeout, 2.0), None) as con:
                con.executemany("DELETE FROM active_sweeps WHERE run_id = ?",
                                [(r,) for r in stale])
                con.execute("INSERT OR REPLACE INTO active_sweeps VALUES (?, ?, ?, ?, ?)",
                            tuple(me.values()))
            marked = True
        try:
            yield others
        finally:
            if marked:  # if this fails, the entry is stale once this process ends
                with contextlib.suppress(StoreError), \
                        self._transaction(min(self.timeout, 2.0), None) as con:
                    con.execute("DELETE FROM active_sweeps WHERE run_id = ?", (run_id,))

    # -- writing -----------------------------------------------------------------------
    def add(self, row: Mapping[str, Any], rollout: tuple[list[str], np.ndarray] | None = None) -> int:
        """Store one row (unknown keys are ignored) and, optionally, its rollout; return its id.

        Raises :class:`RowPending` when the store stayed locked (see ``timeout``) or refused
        the write: the row is then kept in the side file, not lost.
        """
        values = {c: _plain(row.get(c)) for c in COLUMNS if c != "id" and c in row}
        values.setdefault("finished_at", time.time())
        then = f" to store a finished row (then it is kept in {self.pending_path})"
        try:
            with self._transaction(self._write_wait(), then) as con:
                row_id = _insert_row(con, values, rollout)
        except _Unwritable as err:
            self._keep_aside({"kind": "row", "row": values,
                              "rollout": _encode_rollout(rollout)}, err, "row")
        return row_id

    def add_rollout(self, measurement_id: int, rollout: tuple[list[str], np.ndarray]) -> None:
        """Store the rollout of a row already stored (one rollout per row; a second is refused)."""
        try:
            then = f" to store a rollout (then it is kept in {self.pending_path})"
            with self._transaction(self._write_wait(), then) as con:
                found = con.execute("SELECT 1 FROM measurements WHERE id = ?",
                                    (int(measurement_id),)).fetchone()
                if found is None:
                    raise StoreError(f"store {self.path} has no measurement {measurement_id}")
                try:
                    _insert_rollout(con, int(measurement_id), rollout)
                except sqlite3.IntegrityError:
                    raise StoreError(
                        f"measurement {measurement_id} already has a rollout") from None
        except _Unwritable as err:
            self._keep_aside({"kind": "rollout", "measurement_id": int(measurement_id),
                              "rollout": _encode_rollout(rollout)}, err, "rollout")

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


class _Merge:
    """The side file being merged: its descriptor, locked until the merge is committed."""

    def __init__(self, fd: int, path: Path):
        self.fd: int | None = fd
        self.path = path
        self.rows = 0
        self.bad: list[bytes] = []

    def finish(self) -> None:
        """After the commit: remove the side file (lines that could not be read are kept)."""
        try:
            if self.bad:
                _append_bytes(Path(f"{self.path}.unreadable"), b"\n".join(self.bad) + b"\n")
            os.unlink(self.path)
        except OSError as err:  # stored all the same; merged again later, each row once
            warnings.warn(f"the rows of {self.path} are stored, but the file could not be "
                          f"removed ({err.strerror or err})", StoreWarning, stacklevel=5)
            return
        if self.rows:
            warnings.warn(f"{self.rows} row(s) kept in {self.path} while the store could not be "
                          "written are now stored in it", StoreWarning, stacklevel=5)
        if self.bad:
            warnings.warn(f"{len(self.bad)} unreadable line(s) of {self.path} (cut short by a "
                          f"crash) were moved to {self.path}.unreadable", StoreWarning,
                          stacklevel=5)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # releases the lock
            self.fd = None


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


def _insert_row(con: sqlite3.Connection, values: Mapping[str, Any],
                rollout: tuple[list[str], np.ndarray] | None) -> int:
    names = ", ".join(values)
    marks = ", ".join("?" for _ in values)
    cur = con.execute(f"INSERT INTO measurements ({names}) VALUES ({marks})",
                      tuple(values.values()))
    row_id = int(cur.lastrowid)
    if rollout is not None:
        _insert_rollout(con, row_id, rollout)
    return row_id


def _merge_record(con: sqlite3.Connection, key: str, kind: str, record: Mapping[str, Any]) -> int:
    """Add one side-file record (a row, or the rollout of a stored row); 1 for a new row."""
    rollout = _decode_rollout(record.get("rollout"))
    if kind == "row":
        values = {c: v for c, v in record["row"].items() if c in COLUMNS and c != "id"}
        row_id, added = _insert_row(con, values, rollout), 1
    elif kind == "rollout":  # of a row already stored; a second rollout is not added
        row_id, added = int(record["measurement_id"]), 0
        con.execute("INSERT OR IGNORE INTO rollouts SELECT ?, ?, ? WHERE EXISTS "
                    "(SELECT 1 FROM measurements WHERE id = ?)",
                    (row_id, "\n".join(rollout[0]), _to_npy(rollout[1]), row_id))
    else:
        raise ValueError(f"unknown record kind {kind!r}")
    con.execute("INSERT INTO merged_pending VALUES (?, ?)", (key, row_id))
    return added


def _encode_rollout(rollout: tuple[list[str], np.ndarray] | None) -> list | None:
    if rollout is None:
        return None
    return [list(rollout[0]), base64.b64encode(_to_npy(rollout[1])).decode("ascii")]


def _decode_rollout(data: list | None) -> tuple[list[str], np.ndarray] | None:
    if data is None:
        return None
    return list(data[0]), np.load(io.BytesIO(base64.b64decode(data[1])), allow_pickle=False)


def _is_busy(err: BaseException) -> bool:
    text = str(err)
    return isinstance(err, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def _rollback(con: sqlite3.Connection) -> None:
    if con.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            con.execute("ROLLBACK")


def _lock_file(fd: int) -> None:
    """An exclusive lock on the side file: appends and a merge's removal never interleave."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)


def _append_line(path: Path, record: Mapping[str, Any]) -> None:
    """Append one JSON line to the side file, durably (fsync) and whole."""
    _append_bytes(path, json.dumps(record, default=str).encode() + b"\n")


def _append_bytes(path: Path, data: bytes) -> None:
    while True:
        created = not path.exists()
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _lock_file(fd)
            size, links = os.fstat(fd).st_size, os.fstat(fd).st_nlink
            if links == 0:  # merged and removed while we waited for its lock: a new file
                continue
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data  # after a line cut short by a crash, not glued to it
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:  # the new file's name is durable too
            with contextlib.suppress(OSError):
                dfd = os.open(path.parent, os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
        return


def _lock_holder(path: Path) -> str:
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
