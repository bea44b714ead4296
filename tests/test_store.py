"""The SQLite store: rows and rollouts round-trip; broken, locked and foreign files are
reported in one line and never modified."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _support import ROOT, cli_in_process, digest, one_line

import explorer
from explorer import COLUMNS


def test_export_csv_and_parquet_round_trip(tmp_path, executor):
    store = explorer.Store(tmp_path / "r.sqlite")
    explorer.sweep("lotka_volterra", ["struct"], [2], 5, "loss", store=store, executor=executor)
    csv = pd.read_csv(store.export(tmp_path / "out.csv"))
    parquet = pd.read_parquet(store.export(tmp_path / "out.parquet"))
    for frame in (csv, parquet):
        assert list(frame.columns) == list(COLUMNS)
        assert frame.problem.tolist() == ["lotka_volterra"]
        assert frame.hlo_pre_bytes.tolist() == store.rows().hlo_pre_bytes.tolist()
    with pytest.raises(ValueError, match=r"\.csv or \.parquet"):
        store.export(tmp_path / "out.xlsx")


def test_broken_store_file_is_reported_and_left_alone(tmp_path):
    path = tmp_path / "broken.sqlite"
    junk = b"this is not sqlite" * 100
    path.write_bytes(junk)
    with pytest.raises(explorer.StoreError, match="is not a readable SQLite database") as info:
        explorer.Store(path).rows()
    assert "\n" not in str(info.value)
    assert path.read_bytes() == junk


def test_a_rollout_can_follow_its_row(tmp_path):
    store = explorer.Store(tmp_path / "r.sqlite")
    row_id = store.add({"problem": "decay", "representation": "dict", "n_states": 2,
                        "horizon": 3, "target": "loss", "status": "ok"})
    assert store.rollout(row_id) is None
    data = np.arange(6, dtype=np.float32).reshape(3, 2)
    store.add_rollout(row_id, (["a", "b"], data))
    names, back = store.rollout(row_id)
    assert names == ["a", "b"] and np.array_equal(back, data)
    with pytest.raises(explorer.StoreError, match="already has a rollout"):
        store.add_rollout(row_id, (["a", "b"], data))
    with pytest.raises(explorer.StoreError, match="no measurement 999"):
        store.add_rollout(999, (["a", "b"], data))
    assert len(store) == 1


# -- broken and locked stores ----------------------------------------------------------------
def _filled_store(path: Path, rows: int = 5) -> explorer.Store:
    store = explorer.Store(path)
    for i in range(rows):
        store.add({"problem": "decay", "representation": "array", "n_states": i + 1, "horizon": 5,
                   "target": "loss", "status": "ok", "compile_s": 0.1 * (i + 1)},
                  rollout=(["a", "b"], np.full((5, 2), i, np.float32)))
    return store


def _corrupt_files(tmp_path: Path) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    noise = tmp_path / "noise.sqlite"
    noise.write_bytes(rng.integers(0, 256, 64 * 1024, dtype=np.uint8).tobytes())
    whole = tmp_path / "whole.sqlite"
    _filled_store(whole, rows=40)
    data = whole.read_bytes()
    files = {"random bytes": noise}
    for name, cut in (("truncated header", 60), ("truncated half", len(data) // 2),
                      ("missing last page", len(data) - 4096)):
        path = tmp_path / f"{name.replace(' ', '_')}.sqlite"
        path.write_bytes(data[:cut])
        files[name] = path
    return files


def test_corrupted_store_is_one_line_error_and_left_untouched(tmp_path, capsys):
    for name, path in _corrupt_files(tmp_path).items():
        before = digest(path)
        store = explorer.Store(path, timeout=0.2)
        for call in (store.rows, len, store.runs, lambda s=store: s.export(tmp_path / "x.csv"),
                     lambda s=store: s.add({"problem": "decay", "status": "ok"})):
            with pytest.raises(explorer.StoreError) as err:
                call(store) if call is len else call()
            assert "not a readable SQLite database" in one_line(str(err.value)), name
        for argv in (["list", "--store", str(path)], ["runs", "--store", str(path)],
                     ["sweep", "-r", "array", "-n", "2", "--horizons", "3", "--targets", "loss",
                      "-q", "--store", str(path)]):
            code, err = cli_in_process(argv, capsys)
            assert code == 2, (name, argv)
            assert str(path) in one_line(err)
        assert digest(path) == before, f"{name}: the store file was modified"
        assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0


def test_locked_store_is_one_line_error_and_rows_stay_readable(tmp_path):
    """A write gives up after its timeout with one line, keeping the row beside the store
    (tests/test_store_locks.py follows it into the store)."""
    path = tmp_path / "locked.sqlite"
    _filled_store(path, rows=5)
    expected = explorer.Store(path).rows()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        store = explorer.Store(path, timeout=0.5)
        started = time.monotonic()
        with pytest.warns(explorer.StoreWarning), pytest.raises(explorer.StoreError) as err:
            store.add({"problem": "decay", "status": "ok"})
        assert "locked" in one_line(str(err.value)) and "kept in" in str(err.value)
        assert time.monotonic() - started < 5  # gives up after its timeout, no hang
        # Readers are not blocked (WAL): everything stored is still there to read.
        assert store.rows().equals(expected)
    finally:
        holder.rollback()
        holder.close()
    after = explorer.Store(path)
    assert after.rows().equals(expected)
    assert after.rollout(int(expected["id"].iloc[-1]))[1].tolist() == np.full((5, 2), 4.0).tolist()
    assert after.pending_rows() == 1


def test_the_store_imports_no_jax():
    """Reading results (the CLI's list/export, a dashboard server) needs no JAX: the store's
    module imports neither JAX nor the measuring code, and keeps its column list itself."""
    import ast
    import dataclasses

    from explorer import COLUMNS, Measurement
    from explorer.testing import MEASUREMENT_COLUMNS

    imported = set()
    modules = sorted((ROOT / "explorer" / "_src" / "store").glob("*.py"))
    assert {p.stem for p in modules} >= {"store", "schema", "pending", "errors", "sweeps"}
    for path in modules:  # the store and the modules it imports
        tree = ast.parse(path.read_text())
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                     for alias in node.names}
        imported |= {node.module or "" for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom)}
    assert not {m for m in imported if m.startswith("jax") or "_measure" in m}, imported
    assert MEASUREMENT_COLUMNS == tuple(f.name for f in dataclasses.fields(Measurement))
    assert set(MEASUREMENT_COLUMNS) <= set(COLUMNS)


# -- what is not ours is never altered (issue "The store and the CLI never lose or alter ...") --
def test_a_foreign_database_is_reported_and_never_modified(tmp_path, capsys):
    path = tmp_path / "foreign.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE measurements (id INTEGER PRIMARY KEY, sensor TEXT, value REAL)")
    con.execute("INSERT INTO measurements VALUES (1, 't1', 20.5)")
    con.commit()
    con.close()
    before = digest(path)
    store = explorer.Store(path)
    for call in (store.rows, store.runs, lambda: len(store),
                 lambda: store.add({"problem": "decay", "status": "ok"})):
        with pytest.raises(explorer.StoreError, match="not a pytree-explorer results file"):
            call()
    for argv in (["list"], ["runs"], ["fit"], ["export", str(tmp_path / "x.csv")]):
        code, err = cli_in_process([*argv, "--store", str(path)], capsys)
        assert code == 2 and "not a pytree-explorer results file" in one_line(err), argv
    assert digest(path) == before
    assert not Path(f"{path}-wal").exists()


def test_reading_opens_read_only_and_never_migrates_an_earlier_store(tmp_path, capsys):
    """A store of the earlier version (no application id, fewer columns) is read as it is;
    only a write adds the new columns."""
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    old_cols = [c for c in COLUMNS if c not in ("memory", "cold", "cache_hits", "xla_compile_s")]
    con.execute("CREATE TABLE measurements (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                f"{', '.join(old_cols[1:])})")
    con.execute("INSERT INTO measurements (id, run_id, status, problem, representation, n_states,"
                " horizon, target, compile_s) VALUES (1, 'r', 'ok', 'decay', 'dict', 3, 5, 'loss',"
                " 0.5)")
    con.commit()
    con.close()
    before = digest(path)
    store = explorer.Store(path)
    frame = store.rows()
    assert frame.compile_s.tolist() == [0.5] and frame.cold.isna().all()
    assert len(store) == 1 and store.runs().rows.tolist() == [1]
    assert store.rollout(1) is None
    for argv in (["list"], ["runs"], ["fit"], ["export", str(tmp_path / "x.csv")]):
        code, _ = cli_in_process([*argv, "--store", str(path)], capsys)
        assert code == 0, argv
    assert digest(path) == before
    store.add({"problem": "decay", "status": "ok", "cold": 1})  # a write migrates
    assert store.rows().cold.tolist()[-1] == 1 and len(store) == 2


def _make_read_only(*paths: Path) -> None:
    """chmod a-w; as root (who may write anything) also ``chattr +i`` (or skip the test)."""
    for p in paths:
        p.chmod(0o555 if p.is_dir() else 0o444)
    if os.geteuid() == 0:
        for p in paths:
            if subprocess.run(["chattr", "+i", str(p)], capture_output=True).returncode != 0:
                pytest.skip("root, and chattr +i is not available to make a file read-only")


def _make_writable(*paths: Path) -> None:
    for p in paths:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(p)], capture_output=True)
        p.chmod(0o755 if p.is_dir() else 0o644)


def test_a_read_only_store_can_be_read(tmp_path, capsys):
    """A shared results file the user cannot write (file 444 in a 555 folder): list, runs and
    export read it, and nothing is created beside it."""
    folder = tmp_path / "shared"
    folder.mkdir()
    path = folder / "class.sqlite"
    _filled_store(path, rows=3)
    before = digest(path)
    try:
        _make_read_only(path, folder)
        for argv in (["list"], ["runs"], ["export", str(tmp_path / "x.csv")]):
            code, err = cli_in_process([*argv, "--store", str(path)], capsys)
            assert code == 0, (argv, err)
        assert len(pd.read_csv(tmp_path / "x.csv")) == 3
        assert len(explorer.Store(path).rows()) == 3
        assert sorted(p.name for p in folder.iterdir()) == ["class.sqlite"]
    finally:
        _make_writable(path, folder)
    assert digest(path) == before


def test_a_corrupt_store_is_never_written_even_by_redo(tmp_path):
    whole = tmp_path / "whole.sqlite"
    _filled_store(whole, rows=40)
    data = whole.read_bytes()
    path = tmp_path / "bad.sqlite"
    path.write_bytes(data[:len(data) - 4096])
    before = digest(path)
    store = explorer.Store(path)
    with pytest.raises(explorer.StoreError):
        store.check_writable()
    with pytest.raises(explorer.StoreError):
        explorer.sweep("decay", ["array"], [2], 3, "loss", store=store, resume=False)
    assert digest(path) == before


def test_export_onto_the_store_is_refused(tmp_path):
    path = tmp_path / "results.csv"
    _filled_store(path, rows=3)
    link = tmp_path / "link.csv"
    link.symlink_to(path)
    before = digest(path)
    for target in (path, link, tmp_path / "." / "results.csv"):
        with pytest.raises(ValueError, match="is the results store itself"):
            explorer.Store(path).export(target)
    assert digest(path) == before


@pytest.mark.parametrize("target, message", [
    ("nodir/x.csv", "does not exist"), ("d.csv", "is a folder"),
    ("/proc/x.csv", "cannot export to /proc/x.csv")])
def test_export_path_errors_are_one_line(tmp_path, target, message):
    (tmp_path / "d.csv").mkdir()
    store = _filled_store(tmp_path / "r.sqlite", rows=1)
    with pytest.raises(ValueError, match=message) as err:
        store.export(tmp_path / target)
    one_line(str(err.value))


def test_memory_store_works():
    store = explorer.Store(":memory:")
    row = store.add({"problem": "decay", "status": "ok"},
                    rollout=(["a"], np.zeros((2, 1), np.float32)))
    assert len(store) == 1 and store.rows().problem.tolist() == ["decay"]
    assert store.rollout(row)[0] == ["a"]


def test_a_new_store_is_marked_as_ours(tmp_path):
    path = tmp_path / "new.sqlite"
    explorer.Store(path).add({"problem": "decay", "status": "ok"})
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA application_id").fetchone()[0] == 0x50544558
    con.close()
