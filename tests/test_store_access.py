"""Who may do what with a store: a store another user owns is read (listed, fitted, exported)
without write access; a store a newer explorer wrote is read, never written or altered, and
refused before anything is measured; a sweep refused for any reason leaves no file behind;
a store path that is a folder, or not a path, is one line."""

from __future__ import annotations

import concurrent.futures as cf
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
from _support import ROOT, cli_in_process, digest, one_line

import explorer
from explorer.testing import SCHEMA_VERSION

NOBODY = 65534
# What lets root read and write any file: without these a process is held to file modes.
NO_OVERRIDE = ["--bounding-set", "-dac_override,-dac_read_search,-fowner"]


def _row(n: int) -> dict:
    return {"run_id": "r1", "status": "ok", "problem": "decay", "representation": "dict",
            "n_states": n, "horizon": 5, "target": "loss", "unroll": 1, "compile_s": 0.1 * n,
            "hlo_pre_bytes": 1000 * n, "backend": "cpu", "jax_version": "0"}


def _filled(path: Path, rows: int = 3) -> explorer.Store:
    store = explorer.Store(path)
    for n in range(1, rows + 1):
        store.add(_row(n))
    sqlite3.connect(path).close()  # the last connection to close folds the WAL into the file
    return store


def _unavailable(why: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"under CI=true this test may not be skipped: {why}")
    pytest.skip(why)


@pytest.fixture
def shared_folder():
    """A folder every user can reach (pytest's own temporary folders are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="explorer-shared-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _another_users_store(tmp_path: Path) -> tuple[Path, list[str], Path]:
    """A filled store (file 644 in a folder 755) and the command prefix of a reader who is not
    its owner and has no override rights; and a folder that reader may write to.

    The reader is ``nobody`` when this interpreter is reachable to it; otherwise (it lives in
    root's home, say) the store is given to ``nobody`` and read by root without the rights that
    override file modes. Either way the reader cannot make the WAL's ``-shm`` beside it."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        _unavailable("setpriv (util-linux) is not installed")
    if os.geteuid() != 0:
        _unavailable("only root can play another user here")
    folder = tmp_path / "class"
    folder.mkdir()
    path = folder / "results.sqlite"
    _filled(path)
    out = tmp_path / "out"
    out.mkdir()
    for p, mode in ((folder, 0o755), (path, 0o644), (out, 0o777)):
        p.chmod(mode)
    as_nobody = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                 *NO_OVERRIDE]
    # What the commands import (``import explorer`` alone imports little: a venv in a folder
    # only root may enter passed it and then failed at ``import numpy``).
    probe = subprocess.run([*as_nobody, sys.executable, "-c", "import explorer, numpy, pandas"],
                           cwd=tmp_path, env=_env(), capture_output=True)
    if probe.returncode == 0:
        return path, as_nobody, out
    for p in (folder, path):
        os.chown(p, NOBODY, NOBODY)
    return path, [setpriv, *NO_OVERRIDE], out


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}


def _cli(prefix: list[str], *argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "explorer", *argv],
                          capture_output=True, text=True, timeout=300, cwd=cwd, env=_env())


def test_a_store_another_user_owns_is_listed_fitted_and_exported(shared_folder):
    tmp_path = shared_folder
    path, reader, out = _another_users_store(tmp_path)
    before = digest(path)
    for argv in (["list"], ["runs"], ["fit"], ["export", str(out / "x.csv")]):
        done = _cli(reader, *argv, "--store", str(path), cwd=tmp_path)
        assert done.returncode == 0, (argv, done.stderr)
        assert "Traceback" not in done.stderr
    assert pd.read_csv(out / "x.csv")["n_states"].tolist() == [1, 2, 3]
    listed = _cli(reader, "list", "--store", str(path), cwd=tmp_path).stdout
    assert len(listed.strip().splitlines()) == 4  # a header and three rows
    # A sweep there is refused in one line before measuring (it could store nothing).
    done = _cli(reader, "sweep", "--problem", "decay", "-r", "array", "-n", "2", "--horizons",
                "3", "--targets", "loss", "-q", "--store", str(path), cwd=tmp_path)
    assert done.returncode == 2 and "pytree-explorer: error: store" in one_line(done.stderr)
    assert digest(path) == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["results.sqlite"]


def _newer_store(path: Path) -> None:
    """A store as a later explorer might write it: a higher version, a column renamed, one
    added that every row must have."""
    _filled(path, rows=2)
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE measurements RENAME COLUMN hlo_pre_bytes TO stablehlo_bytes")
    con.execute("ALTER TABLE measurements ADD COLUMN machine TEXT NOT NULL DEFAULT 'm1'")
    con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    con.commit()
    con.close()


class _Counting(cf.ThreadPoolExecutor):
    """An executor that records what it was asked to run (nothing may reach it)."""

    def __init__(self):
        super().__init__(1)
        self.asked = []

    def submit(self, fn, /, *args, **kwargs):
        self.asked.append(fn)
        return super().submit(fn, *args, **kwargs)


def test_a_store_a_newer_explorer_wrote_is_read_never_written(tmp_path, capsys):
    path = tmp_path / "newer.sqlite"
    _newer_store(path)
    before = digest(path)
    store = explorer.Store(path)
    frame = store.rows()  # what this version knows, read; the renamed column reads as empty
    assert frame["n_states"].tolist() == [1, 2] and frame["hlo_pre_bytes"].isna().all()
    for argv in (["list"], ["runs"], ["fit"], ["export", str(tmp_path / "x.csv")]):
        code, err = cli_in_process([*argv, "--store", str(path)], capsys)
        assert code == 0, (argv, err)
    with pytest.raises(explorer.StoreError) as err:
        store.check_writable()
    assert f"store version {SCHEMA_VERSION + 1}" in one_line(str(err.value))
    executor = _Counting()
    try:
        with pytest.raises(explorer.StoreError, match="newer pytree-explorer"):
            explorer.sweep("decay", ["array"], [2], [3], "loss", store=path, executor=executor)
    finally:
        executor.shutdown()
    assert executor.asked == []  # refused before anything was measured
    code, err = cli_in_process(["sweep", "--problem", "decay", "-r", "array", "-n", "2",
                                "--horizons", "3", "--targets", "loss", "-q", "--store",
                                str(path)], capsys)
    assert code == 2 and f"store version {SCHEMA_VERSION + 1}" in one_line(err)
    assert digest(path) == before  # never altered: no column added back, no row
    with sqlite3.connect(path) as con:
        cols = {r[1] for r in con.execute("PRAGMA table_info(measurements)")}
    assert "hlo_pre_bytes" not in cols and "stablehlo_bytes" in cols


@pytest.mark.parametrize("extra, words", [
    (["--python", "/no/such/python"], "no such interpreter"),
    (["--scheduler", "tcp://127.0.0.1:1"], "cannot reach the Dask scheduler"),
    (["--backend", "nope"], "nope"),
])
def test_a_refused_sweep_leaves_no_store_behind(tmp_path, capsys, extra, words):
    path = tmp_path / "new" / "results.sqlite"
    argv = ["sweep", "--problem", "decay", "-r", "array", "-n", "2", "--horizons", "3",
            "--targets", "loss", "-q", "--store", str(path), *extra]
    if "--scheduler" in extra:
        # How long an address that does not answer is tried is Dask's own setting.
        dask = pytest.importorskip("dask")
        pytest.importorskip("distributed")
        started = time.monotonic()
        with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
            code, err = cli_in_process(argv, capsys)
        assert time.monotonic() - started < 15  # not the 30 s Dask would wait by default
    else:
        code, err = cli_in_process(argv, capsys)
    assert code == 2 and words in one_line(err)
    assert not path.parent.exists()  # neither the store nor its folder was made
    code, err = cli_in_process(["list", "--store", str(path)], capsys)
    assert code == 2 and "no results store" in one_line(err)


def test_a_store_that_is_a_folder_or_not_a_path_is_one_line(tmp_path, capsys):
    for argv in (["list"], ["export", str(tmp_path / "x.csv")]):
        code, err = cli_in_process([*argv, "--store", str(tmp_path)], capsys)
        assert code == 2 and "is a folder, not a results file" in one_line(err), argv
    with pytest.raises(explorer.StoreError, match="is a folder, not a results file"):
        explorer.Store(tmp_path).add(_row(1))
    with pytest.raises(explorer.StoreError, match="is a folder, not a results file"):
        explorer.sweep("decay", ["array"], [2], [3], "loss", store=tmp_path)
    with pytest.raises(ValueError) as err:
        explorer.sweep("decay", ["array"], [2], [3], "loss", store=123)
    assert one_line(str(err.value)) == ("store must be a file path (str or os.PathLike), got "
                                        "int 123")
    assert list(tmp_path.iterdir()) == []
