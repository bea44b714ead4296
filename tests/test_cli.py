"""The pytree-explorer command: a real sweep, listing, export, and one-line errors."""

import os
import subprocess
import sys

import pandas as pd
import pytest

from explorer._cli import main


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "explorer._cli", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


def test_cli_sweep_list_export_fit(tmp_path):
    db = tmp_path / "cli.sqlite"
    out = tmp_path / "sweep.csv"
    done = _cli("sweep", "--problem", "decay", "-r", "dict,array", "-n", "2,5", "--horizons", "6",
                "--targets", "loss", "--store", str(db), "--out", str(out), "-q")
    assert done.returncode == 0, done.stderr
    assert "dict" in done.stdout and "array" in done.stdout and f"stored in {db}" in done.stdout
    frame = pd.read_csv(out)
    assert sorted(frame.representation) == ["array", "array", "dict", "dict"]
    assert set(frame.status) == {"ok"}
    # the store round trip: the environment variable names the same file
    listed = _cli("list", env={"PYTREE_EXPLORER_DB": str(db)})
    assert listed.returncode == 0 and listed.stdout.count("decay") == 4
    exported = _cli("export", str(tmp_path / "all.parquet"), "--store", str(db))
    assert exported.returncode == 0
    assert len(pd.read_parquet(tmp_path / "all.parquet")) == 4
    fit = _cli("fit", "--store", str(db))
    assert fit.returncode == 0 and "hlo_pre_bytes" in fit.stdout
    # the second run resumes: nothing new is measured
    again = _cli("sweep", "--problem", "decay", "-r", "dict,array", "-n", "2,5", "--horizons", "6",
                 "--targets", "loss", "--store", str(db), "-q")
    assert again.returncode == 0
    listed = _cli("list", "--store", str(db))
    assert listed.stdout.count("decay") == 4


@pytest.mark.parametrize("args, message", [
    (["sweep", "-n", "0"], "n_states must be an integer between 1 and 10000, got 0"),
    (["sweep", "-n", "-5"], "n_states must be an integer between 1 and 10000, got -5"),
    (["sweep", "-n", "100000000"], "n_states must be an integer between 1 and 10000"),
    (["sweep", "-n", "ten"], "n_states must be integers between 1 and 10000, got 'ten'"),
    (["sweep", "--horizons", "0"], "horizon must be an integer between 1 and 100000, got 0"),
    (["sweep", "--problem", "pendulum"], "unknown problem 'pendulum'; choose one of: decay, oscillator, lotka_volterra"),
    (["sweep", "-r", "dict,tuple"], "unknown representation 'tuple'; choose one of: dict, array, unflatten, ravel, module, struct, named"),
    (["sweep", "--targets", "hessian"], "unknown target 'hessian'; choose one of: loss, grad"),
    (["sweep", "--timeout", "soon"], "timeout must be a number of seconds, got 'soon'"),
    (["export", "out.xlsx"], "use a .csv or .parquet file name"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_cli_bad_input_is_one_line_and_exit_2(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTREE_EXPLORER_DB", str(tmp_path / "x.sqlite"))
    with pytest.raises(SystemExit) as info:
        code = main(args)
        raise SystemExit(code)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_cli_broken_store_is_one_line(tmp_path):
    db = tmp_path / "broken.sqlite"
    db.write_bytes(b"\x00garbage" * 64)
    done = _cli("list", "--store", str(db))
    assert done.returncode == 2
    assert done.stderr.strip().startswith("pytree-explorer: error: store ")
    assert "not a readable SQLite database" in done.stderr and done.stderr.count("\n") == 1
    assert db.read_bytes() == b"\x00garbage" * 64


def test_cli_lists_problems_and_representations(capsys):
    assert main(["problems"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()] == ["decay", "oscillator", "lotka_volterra"]
    assert main(["representations"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()] == [
        "dict", "array", "unflatten", "ravel", "module", "struct", "named"]


def test_cli_rollouts_are_stored(tmp_path):
    import explorer

    db = tmp_path / "r.sqlite"
    done = _cli("sweep", "--problem", "oscillator", "-r", "struct", "-n", "2", "--horizons", "7",
                "--targets", "loss", "--store", str(db), "--rollouts", "--memory", "-q")
    assert done.returncode == 0, done.stderr
    store = explorer.Store(db)
    row = store.rows().iloc[0]
    names, data = store.rollout(int(row.id))
    assert names == ["position_0", "position_1", "velocity_0", "velocity_1"]
    assert data.shape == (7, 4)
    # --memory stores XLA's memory analysis: the arguments are the state (2 float32 per group,
    # 2 groups) and the problem's parameters, so at least the state's 16 bytes.
    assert row.argument_bytes >= 16 and row.output_bytes >= 4
