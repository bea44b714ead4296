"""Another process holding the store's lock loses nothing: a finished row waits for the lock
(saying who holds it), then goes to a side file that the next write merges, once. A second
sweep on a store that a sweep from this host is measuring into says so."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from _support import ROOT, cli_in_process, digest, one_line

import explorer
from explorer import RowPending, StoreWarning
from explorer.testing import append_line as _append_line

# Holds BEGIN EXCLUSIVE on the store (its own process, its own SQLite connection) until a line
# arrives on stdin.
HOLDER = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
sys.stdin.readline()
con.execute("ROLLBACK")
"""

# Marks a sweep of its own process as running in the store, until a line arrives on stdin.
SWEEPER = """
import sys
from explorer import Store
with Store(sys.argv[1]).sweeping("other-run"):
    print("running", flush=True)
    sys.stdin.readline()
"""


class _Process:
    def __init__(self, code: str, path: Path, ready: str):
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(path)], text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout.readline().strip() == ready

    @property
    def pid(self) -> int:
        return self.proc.pid

    def release(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
        self.proc.wait(timeout=30)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture
def holder():
    started = []

    def hold(path: Path) -> _Process:
        started.append(_Process(HOLDER, path, "held"))
        return started[-1]

    yield hold
    for p in started:
        p.kill()


def _row(n: int) -> dict:
    return {"problem": "decay", "representation": "array", "n_states": n, "horizon": 5,
            "target": "loss", "status": "ok", "compile_s": 0.01 * n}


def _store(path: Path, rows: int = 2) -> explorer.Store:
    store = explorer.Store(path)
    for i in range(rows):
        store.add(_row(i + 1))
    return store


def test_a_row_finished_under_a_held_lock_waits_then_is_kept_and_merged(tmp_path, holder):
    path = tmp_path / "r.sqlite"
    before = _store(path).rows()
    lock = holder(path)
    store = explorer.Store(path, timeout=1.0)
    store.check_writable()  # a locked store may still be swept: rows will be kept
    data = np.arange(10, dtype=np.float32).reshape(5, 2)
    started = time.monotonic()
    with pytest.warns(StoreWarning) as said, pytest.raises(RowPending) as err:
        store.add(_row(7), rollout=(["a", "b"], data))
    assert 0.9 <= time.monotonic() - started < 10  # waited for the lock, then gave up
    waiting = str(said[0].message)
    assert f"locked by pid {lock.pid} " in waiting and "waiting up to 1 s" in waiting
    assert "kept in" in one_line(str(err.value)) and err.value.path == store.pending_path
    assert isinstance(err.value, explorer.StoreError)  # what the dashboard catches
    # Kept durably beside the store, not in it; readers see the store as it was.
    assert store.pending_rows() == 1
    assert store.rows().equals(before)
    # The next row does not wait again while the store stays locked.
    started = time.monotonic()
    with pytest.raises(RowPending):
        store.add(_row(8))
    assert time.monotonic() - started < 1.0
    lock.release()
    # The next write (another process's store object, as the next sweep) adds them, once.
    with pytest.warns(StoreWarning, match="2 row.s. kept in .* are now stored"):
        explorer.Store(path).add(_row(9))
    after = explorer.Store(path).rows()
    assert after.n_states.tolist() == [1, 2, 7, 8, 9]
    assert not store.pending_path.exists()
    names, back = explorer.Store(path).rollout(int(after.id.iloc[2]))
    assert names == ["a", "b"] and np.array_equal(back, data)


@pytest.mark.parametrize("bad", [-1, float("nan"), "10", True])
def test_a_bad_lock_wait_is_refused(tmp_path, bad):
    with pytest.raises(ValueError, match="timeout must be a number of seconds >= 0"):
        explorer.Store(tmp_path / "r.sqlite", timeout=bad)


def test_merging_twice_stores_each_row_once(tmp_path, holder):
    """A merge cut short after its commit (the side file not yet removed) is merged again
    without storing anything twice."""
    path = tmp_path / "r.sqlite"
    _store(path)
    lock = holder(path)
    store = explorer.Store(path, timeout=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoreWarning)
        for n in (11, 12, 13):
            with pytest.raises(RowPending):
                store.add(_row(n))
    lock.release()
    copy = tmp_path / "copy.jsonl"
    shutil.copy(store.pending_path, copy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoreWarning)
        explorer.Store(path).check_writable()
        assert not store.pending_path.exists()
        shutil.copy(copy, store.pending_path)  # as if killed between the commit and the removal
        explorer.Store(path).check_writable()
    assert explorer.Store(path).rows().n_states.tolist() == [1, 2, 11, 12, 13]
    assert not store.pending_path.exists()


# Merges the side file of the store argv[1] (``explorer.Store`` imports no JAX: ready in a
# moment, so a kill lands during the merge).
MERGER = """
import sys, warnings
from explorer import Store
warnings.simplefilter("ignore")
store = Store(sys.argv[1])
print("ready", flush=True)
store.check_writable()
"""


@pytest.mark.slow
def test_kill_9_during_a_merge_loses_nothing(tmp_path):
    path = tmp_path / "r.sqlite"
    _store(path, rows=1)
    pending = Path(f"{path}.pending.jsonl")
    rows = 8000  # about half a second to merge
    pending.write_text("".join(
        json.dumps({"key": f"k{i}", "kind": "row", "row": _row(100 + i), "rollout": None}) + "\n"
        for i in range(rows)))
    cut_short = 0
    for delay in (0.05, 0.2, 0.4):
        proc = subprocess.Popen([sys.executable, "-c", MERGER, str(path),
                                 str(ROOT / "explorer")], stdout=subprocess.PIPE)
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
        if pending.exists():
            # All or nothing: not one row half-merged. A kill between the commit and the
            # removal of the side file leaves every row in; the next merge then adds none twice.
            merged = len(explorer.Store(path))
            assert merged in (1, 1 + rows)
            cut_short += merged == 1
    assert cut_short  # at least one kill landed before the merge was committed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoreWarning)
        explorer.Store(path).check_writable()
    frame = explorer.Store(path).rows()
    assert sorted(frame.n_states.tolist()) == [1, *range(100, 100 + rows)]
    assert not pending.exists()


def test_a_torn_or_odd_line_is_kept_aside_not_merged_or_dropped(tmp_path):
    path = tmp_path / "r.sqlite"
    _store(path, rows=1)
    pending = Path(f"{path}.pending.jsonl")
    _append_line(pending, {"key": "a", "kind": "row", "row": _row(5), "rollout": None})
    with open(pending, "ab") as f:
        f.write(b'{"key": "b", "kind": "ro')  # a crash in the middle of an append
    _append_line(pending, {"key": "c", "kind": "row", "row": _row(6), "rollout": None})
    odd = {"key": "d", "kind": "row", "row": {**_row(7), "problem": {"not": "storable"}},
           "rollout": None}
    _append_line(pending, odd)
    _append_line(pending, {"key": "e", "kind": "row", "row": _row(8), "rollout": None})
    with pytest.warns(StoreWarning) as said:
        explorer.Store(path).check_writable()
    assert any("2 unreadable line(s)" in str(w.message) for w in said)
    assert explorer.Store(path).rows().n_states.tolist() == [1, 5, 6, 8]
    assert Path(f"{pending}.unreadable").read_text().splitlines() == [
        '{"key": "b", "kind": "ro', json.dumps(odd)]
    assert not pending.exists()


def test_read_only_commands_mention_kept_rows_and_write_nothing(tmp_path, capsys):
    path = tmp_path / "r.sqlite"
    _store(path, rows=1)
    pending = Path(f"{path}.pending.jsonl")
    _append_line(pending, {"key": "a", "kind": "row", "row": _row(5), "rollout": None})
    files = {p: digest(p) for p in (path, pending)}
    for argv in (["list"], ["runs"], ["export", str(tmp_path / "x.csv")]):
        code, err = cli_in_process([*argv, "--store", str(path)], capsys)
        assert code == 0
        assert f"1 finished row(s) wait in {pending}" in one_line(err), argv
    assert {p: digest(p) for p in files} == files


@pytest.mark.slow
def test_the_cli_sweep_under_a_held_lock_keeps_its_rows(tmp_path, holder, capsys):
    path = tmp_path / "r.sqlite"
    _store(path, rows=1)
    lock = holder(path)
    argv = ["sweep", "-r", "array", "-n", "2", "--horizons", "3", "--targets", "loss", "-q",
            "--store", str(path)]
    code, err = cli_in_process([*argv, "--lock-wait", "1"], capsys)
    assert code == 0, err
    lines = err.strip().splitlines()
    assert any(f"locked by pid {lock.pid} " in line and "waiting up to 1 s" in line
               for line in lines), err
    assert "1 finished row(s) wait in" in lines[-1]
    assert len(explorer.Store(path)) == 1
    lock.release()
    # The next sweep adds the kept row first, so it resumes from it: nothing measured again.
    code, err = cli_in_process(argv, capsys)
    assert code == 0 and "now stored in it" in err
    frame = explorer.Store(path).rows()
    assert frame.representation.tolist() == ["array", "array"]
    assert frame.status.tolist() == ["ok", "ok"] and frame.horizon.tolist() == [5, 3]
    assert not Path(f"{path}.pending.jsonl").exists()


def test_the_dashboard_keeps_a_row_finished_under_a_held_lock(tmp_path, holder, executor):
    from explorer import ExplorerModel  # noqa: PLC0415

    path = tmp_path / "r.sqlite"
    _store(path, rows=1)
    model = ExplorerModel(store=explorer.Store(path, timeout=0.5), executor=executor)
    try:
        lock = holder(path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", StoreWarning)
            model.results.add_row({**_row(4), "run_id": "page"})
        assert "kept in" in model.session.alert and model.session.alert_kind == "warning"
        assert 4 in model.results.frame.n_states.tolist()  # shown in the page
        lock.release()
    finally:
        model.close()
        model.wait(60)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoreWarning)
        explorer.Store(path).check_writable()
    assert explorer.Store(path).rows().n_states.tolist() == [1, 4]


# -- two sweeps at once ---------------------------------------------------------------------
@pytest.mark.slow
def test_a_second_sweep_on_this_host_warns_that_timings_overlap(tmp_path, executor, capsys):
    path = tmp_path / "r.sqlite"
    _store(path, rows=1)
    other = _Process(SWEEPER, path, "running")
    try:
        with pytest.warns(StoreWarning) as said:
            explorer.sweep("decay", ["array"], [2], 3, "loss", store=path, executor=executor)
        message = one_line(str(said[0].message))
        assert f"pid {other.pid}, run other-run" in message and "overlap" in message
        code, err = cli_in_process(["sweep", "-r", "array", "-n", "2", "--horizons", "3",
                                    "--targets", "loss", "-q", "--store", str(path)], capsys)
        assert code == 0
        assert f"pytree-explorer: warning: another sweep is measuring into {path}" in err
    finally:
        other.kill()  # as with kill -9: its entry is left behind, stale
    with warnings.catch_warnings():
        warnings.simplefilter("error", StoreWarning)  # a dead sweep warns no more
        explorer.sweep("decay", ["array"], [2], 3, "loss", store=path, executor=executor)
    # ... and its entry was cleaned; this process's sweeps removed theirs when they ended.
    assert _active(path) == []


def _active(path: Path) -> list:
    import sqlite3  # noqa: PLC0415

    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT run_id FROM active_sweeps").fetchall()
    finally:
        con.close()


def test_pending_lines_are_json_one_row_each(tmp_path, holder):
    path = tmp_path / "r.sqlite"
    _store(path, rows=1)
    lock = holder(path)
    store = explorer.Store(path, timeout=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoreWarning)
        for n in (3, 4):
            with pytest.raises(RowPending):
                store.add(_row(n))
    lock.release()
    lines = store.pending_path.read_text().splitlines()
    assert [json.loads(line)["row"]["n_states"] for line in lines] == [3, 4]
    assert os.stat(store.pending_path).st_size == sum(len(line) + 1 for line in lines)


@pytest.mark.slow
def test_a_page_measuring_while_another_sweep_runs_here_says_so(tmp_path, executor):
    """The dashboard marks its runs like any sweep: it warns when a sweep of another process
    measures into the same store on this host, and a CLI sweep sees the page's run."""
    from explorer import ExplorerModel  # noqa: PLC0415

    path = tmp_path / "r.sqlite"
    _store(path, rows=1)
    other = _Process(SWEEPER, path, "running")
    model = ExplorerModel(store=explorer.Store(path), executor=executor, problem="decay",
                          n_states=2, horizon=3, representations=["array"])
    try:
        assert model.run() and model.wait(120)
        assert f"pid {other.pid}, run other-run" in model.session.alert
        assert model.session.alert_kind == "warning"
    finally:
        other.release()
        model.close()
    # The page's mark is gone once its run is over.
    assert explorer.Store(path)._read_table("SELECT run_id FROM active_sweeps") == []
