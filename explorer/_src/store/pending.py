"""The side file of a store, ``<store>.pending.jsonl``: finished rows kept while the store
could not be written (locked by another process, or refusing the write), one JSON line each,
and their merge into the store by its next write.

Appends and a merge's removal of the file hold an exclusive lock on it, so they never
interleave; each merged line's key goes into the store's ``merged_pending`` table in the
same transaction, so a merge cut short and run again stores each row once.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import uuid
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from .errors import RowPending, StoreError, StoreWarning

try:
    import fcntl
except ImportError:  # not POSIX: appends to the side file are not locked
    fcntl = None


PENDING_SUFFIX = ".pending.jsonl"
# Side-file rows already added: a merge cut short and run again stores each once.
TABLE = ("CREATE TABLE IF NOT EXISTS merged_pending (key TEXT PRIMARY KEY, "
         "measurement_id INTEGER)")

# Adds one side-file record (``kind`` "row" or "rollout") in the open transaction; returns
# the id of its row and 1 if it added a row (0 for a rollout).
AddRecord = Callable[[sqlite3.Connection, str, Mapping[str, Any]], "tuple[int, int]"]


class SideFile:
    """The side file beside the store ``store_path``.

    ``deferring``: a row went to it since the store was last written (the store then lets
    the next rows wait only a moment, and says so once).
    """

    def __init__(self, store_path: str | os.PathLike):
        self.path = Path(f"{store_path}{PENDING_SUFFIX}")
        self.deferring = False

    def keep(self, record: dict[str, Any], err: StoreError, what: str) -> NoReturn:
        """Append ``record`` (the ``what`` that ``err`` kept out of the store), then raise
        :class:`RowPending`."""
        try:
            _append_line(self.path, {"key": uuid.uuid4().hex, **record})
        except OSError as os_err:
            raise StoreError(f"{err}, and the {what} could not be kept in {self.path} either "
                             f"({os_err.strerror or os_err})") from None
        if not self.deferring:
            self.deferring = True
            warnings.warn(f"{err}: finished rows are kept in {self.path} until it can be "
                          "written; the next write to the store adds them", StoreWarning,
                          stacklevel=4)
        raise RowPending(f"{err}; the {what} is kept in {self.path} and will be stored by the "
                         "next write to the store", self.path)

    def merge(self, con: sqlite3.Connection, add: AddRecord) -> _Merge | None:
        """Add the side file's rows inside the transaction open on ``con``.

        The returned merge holds the side file's lock: after the commit its ``finish``
        removes the file, then ``close`` (always) releases it. ``None``: nothing to merge.
        """
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return None
        except OSError as err:
            warnings.warn(f"cannot read {self.path} ({err.strerror}); the rows in it "
                          "were left there", StoreWarning, stacklevel=4)
            return None
        merge = _Merge(fd, self.path)
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
                    row_id, added = add(con, kind, record)
                    con.execute("INSERT INTO merged_pending VALUES (?, ?)", (key, row_id))
                    merge.rows += added
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

    def rows(self) -> int:
        """How many finished rows wait in the side file (reads only)."""
        try:
            with open(self.path, "rb") as f:
                found = 0
                for line in f:
                    with contextlib.suppress(ValueError, TypeError):
                        found += json.loads(line).get("kind") == "row"
                return found
        except OSError:
            return 0


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
