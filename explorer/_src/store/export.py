"""Rows out of the store: to a ``.csv`` or ``.parquet`` file, checked before anything is read
or measured, never onto the store itself."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd


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
