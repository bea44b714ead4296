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
import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

# Names imported from here by other modules and tests are kept importable from here.
from .errors import RowPending, StoreError, StoreWarning, _Unwritable  # noqa: F401
from .export import check_export_path, export_frame  # noqa: F401
from .pending import PENDING_SUFFIX, SideFile, _append_line  # noqa: F401
from .schema import (  # noqa: F401
    _INT,
    _TEXT,
    COLUMNS,
    MEASUREMENT_COLUMNS,
    STATUSES,
    TABLE_COLUMNS,
    check_ours,
    check_version,
    create,
    is_current,
)
from .sweeps import lock_holder, sweeping

ENV_VAR = "PYTREE_EXPLORER_DB"
DEFAULT_PATH = Path("~/.local/share/pytree-explorer/results.sqlite")

# How long a write waits for a lock held by another process before a finished row is kept in
# the side file instead (``Store(timeout=...)``, ``sweep --lock-wait``).
DEFAULT_LOCK_WAIT_S = 60.0
# A lock released within this is not worth a message (another sweep committing its row).
_QUICK_S = 0.2


def default_path() -> Path:
    """``$PYTREE_EXPLORER_DB`` if set, else ``~/.local/share/pytree-explorer/results.sqlite``."""
    return Path(os.environ.get(ENV_VAR) or DEFAULT_PATH).expanduser()


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
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise ValueError(f"store must be a file path (str or os.PathLike), got "
                             f"{type(path).__name__} {path!r}")
        self.path = Path(path).expanduser() if path is not None else default_path()
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
            raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
        self.timeout = float(timeout)
        self._schema_lock = threading.Lock()
        self._write_lock = threading.RLock()  # one write transaction at a time per Store
        self._ready = False
        self._ours = False  # checked: an intact explorer store (rows may be kept beside it)
        self._said_waiting = False  # the lock-wait message of this episode was given
        self._side = SideFile(self.path)  # rows go there without waiting again once deferring

    @property
    def pending_path(self) -> Path:
        """The side file of rows kept while the store could not be written."""
        return self._side.path

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

    @contextlib.contextmanager
    def _reading(self):
        """A read-only connection and the columns it has, or ``(None, set())`` if no file.

        Opened with ``mode=ro``: reading never creates, migrates or writes the file, and needs
        no write permission. A store in a folder the reader cannot write (another user's, a
        read-only mount) has no ``-shm`` file SQLite's WAL mode could make: it is then opened
        ``immutable=1``, which reads the file alone (a warning says so if a log beside it
        holds rows not yet in the file).
        """
        if self._memory():
            con = self._connect()
            yield con, set(COLUMNS)
            return
        if not self.path.exists():
            yield None, set()
            return
        self._check_not_folder()
        uri = self.path.resolve().as_uri()
        con = None
        try:
            for query in ("?mode=ro", "?mode=ro&immutable=1"):
                con = sqlite3.connect(uri + query, uri=True, timeout=self.timeout)
                try:
                    con.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
                    have = check_ours(con, self.path)
                    break
                except sqlite3.OperationalError as err:
                    con.close()
                    con = None
                    if not _needs_write_access(err) or "immutable" in query:
                        raise
                    self._warn_unread_log()
            yield con, have
        except sqlite3.Error as err:
            raise self._fail(err) from None
        finally:
            if con is not None:
                con.close()

    def _check_not_folder(self) -> None:
        if self.path.is_dir():
            raise StoreError(f"store {self.path} is a folder, not a results file (give the "
                             "path of a .sqlite file in it)")

    def _warn_unread_log(self) -> None:
        log = Path(f"{self.path}-wal")
        with contextlib.suppress(OSError):
            if log.stat().st_size > 0:
                warnings.warn(f"store {self.path} is read without write access to its folder: "
                              f"rows still in {log.name} (a sweep running or cut short there) "
                              "are not shown", StoreWarning, stacklevel=5)

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
        self._check_not_folder()
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
        in the side file); when it is free, rows kept there earlier are added now. A store not
        made yet is not made here (nor its folder): only that it could be is checked, so a
        sweep refused later leaves nothing behind.
        """
        if not self._memory() and not self.path.exists():
            self._check_creatable()
            return
        self.make()

    def make(self) -> None:
        """Make the store (its folder, file and tables) if it is not there yet, and check it
        can be written, as :meth:`check_writable` does: for a caller about to write now."""
        try:
            with self._transaction(0):
                pass
        except _Unwritable as err:
            if not err.busy:
                raise

    def _check_creatable(self) -> None:
        """One-line :class:`StoreError` if the store file could not be made where it is named."""
        self._check_not_folder()
        folder = self.path.parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir():
            raise StoreError(f"store {self.path} cannot be made: {folder} is a file, not a folder")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise StoreError(f"store {self.path} cannot be made: no permission to write in "
                             f"{folder}")

    def _ensure_schema(self, con: sqlite3.Connection) -> None:
        if self._ready:
            return
        with self._schema_lock:
            if self._ready:
                return
            try:
                have = check_ours(con, self.path)  # before anything is written to the file
                check = con.execute("PRAGMA quick_check").fetchall()
                if check != [("ok",)]:
                    raise StoreError(
                        f"store {self.path} failed its integrity check ({check[0][0]}); "
                        "it was left untouched")
                self._ours = not self._memory()
                check_version(con, self.path)  # a newer explorer's store is never written
                if not is_current(con, have, self._memory()):  # a store up to date needs no lock
                    self._make_schema(con)
            except (sqlite3.Error, StoreError) as err:
                con.close()
                raise self._fail(err) from None
            self._ready = True

    def _make_schema(self, con: sqlite3.Connection) -> None:
        if not self._memory():
            con.execute("PRAGMA journal_mode=WAL")  # not inside a transaction
        self._begin(con, self.timeout)
        try:
            create(con)
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
            warnings.warn(f"store {self.path} is locked by {lock_holder(self.path)}; waiting up "
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
                    merge = None if self._memory() else self._side.merge(con, _add_record)
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
            self._said_waiting = self._side.deferring = False

    def _write_wait(self) -> float:
        # Once a row went to the side file, the next ones do not wait again (only a moment,
        # as for another sweep's commit) until a write succeeds.
        return min(_QUICK_S, self.timeout) if self._side.deferring else self.timeout

    def _keep_aside(self, record: dict[str, Any], err: _Unwritable, what: str) -> None:
        """Keep ``record`` in the side file, then raise :class:`RowPending`."""
        if not self._ours:  # never put a file beside one not known to be an explorer store
            raise err
        self._side.keep(record, err, what)

    def pending_rows(self) -> int:
        """How many finished rows wait in the side file to be added to the store (reads only)."""
        return self._side.rows()

    # -- sweeps running on this store --------------------------------------------------
    def sweeping(self, run_id: str):
        """Mark a sweep of this process as running in the store while the block runs.

        Yields the other sweeps (dicts: ``run_id``, ``pid``, ``started_at``) measuring into
        this store from this host now; entries of sweeps whose process is gone are removed.
        Best effort: a store locked for a moment runs the sweep unmarked, and so does a store
        not made yet (nothing is created before a row is stored).
        """
        if not self._memory() and not self.path.exists():
            return contextlib.nullcontext([])
        wait = min(self.timeout, 2.0)
        return sweeping(self._read_table, lambda: self._transaction(wait, None), run_id)

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


def _add_record(con: sqlite3.Connection, kind: str,
                record: Mapping[str, Any]) -> tuple[int, int]:
    """Add one side-file record (a row, or the rollout of a stored row): its row's id, and 1
    for a new row."""
    rollout = _decode_rollout(record.get("rollout"))
    if kind == "row":
        values = {c: v for c, v in record["row"].items() if c in COLUMNS and c != "id"}
        return _insert_row(con, values, rollout), 1
    if kind == "rollout":  # of a row already stored; a second rollout is not added
        row_id = int(record["measurement_id"])
        con.execute("INSERT OR IGNORE INTO rollouts SELECT ?, ?, ? WHERE EXISTS "
                    "(SELECT 1 FROM measurements WHERE id = ?)",
                    (row_id, "\n".join(rollout[0]), _to_npy(rollout[1]), row_id))
        return row_id, 0
    raise ValueError(f"unknown record kind {kind!r}")


def _encode_rollout(rollout: tuple[list[str], np.ndarray] | None) -> list | None:
    if rollout is None:
        return None
    return [list(rollout[0]), base64.b64encode(_to_npy(rollout[1])).decode("ascii")]


def _decode_rollout(data: list | None) -> tuple[list[str], np.ndarray] | None:
    if data is None:
        return None
    return list(data[0]), np.load(io.BytesIO(base64.b64decode(data[1])), allow_pickle=False)


def _needs_write_access(err: BaseException) -> bool:
    """Whether a read-only open failed only because SQLite could not make the WAL's ``-shm``."""
    text = str(err)
    return "unable to open" in text or "readonly database" in text


def _is_busy(err: BaseException) -> bool:
    text = str(err)
    return isinstance(err, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def _rollback(con: sqlite3.Connection) -> None:
    if con.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            con.execute("ROLLBACK")
