"""What the results store raises and warns: the ground the store's modules stand on."""

from __future__ import annotations

from pathlib import Path


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
