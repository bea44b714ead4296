"""Watched runs kept in the results store (``pytree-explorer watch --store PATH``).

The file is checked and made by :class:`explorer.Store` (so a foreign or damaged database is
refused, untouched); the watch adds the three tables of :mod:`explorer._src.store.watched`
beside the measurements, where their reader also lives.
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

from ..diagnose.report import no_findings
from ..store.store import Store
from ..store.watched import COMPILE_COLUMNS, TABLES

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
        for sql in TABLES:
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
                rows = [(None, None, None, None, no_findings(fn.diagnosis))]
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
