"""compare_runs and ``pytree-explorer compare-runs``: two JAX versions' rows side by side;
``--python``: a bad interpreter is one line before anything runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _support import cli_in_process, one_line

import explorer


def _row(version, rep, n, compile_s, size, run_s, status="ok"):
    return {"problem": "decay", "representation": rep, "n_states": n, "horizon": 200,
            "target": "loss", "unroll": 1, "backend_requested": None, "status": status,
            "compile_s": compile_s, "hlo_pre_bytes": size, "run_s": run_s, "backend": "cpu",
            "jax_version": version, "jaxlib_version": version, "host": "h", "python": "/p",
            "cpu_count": 2, "load_avg": 0.5}


def _store(tmp_path):
    store = explorer.Store(tmp_path / "runs.sqlite")
    for row in [_row("0.10.2", "dict", 300, 1.6, 1000, 0.01),
                _row("0.10.2", "dict", 300, 1.8, 1000, 0.01),  # median 1.7
                _row("0.12.0", "dict", 300, 4.9, 900, 0.01),
                _row("0.10.2", "array", 300, 0.2, 50, 0.002),
                _row("0.12.0", "array", 300, 0.2, 50, None),  # a value the backend did not give
                _row("0.12.0", "array", 300, 99.0, 1, 1.0, status="timeout"),
                _row("0.12.0", "dict", 30, 0.3, 100, 0.001)]:  # only in one group
        store.add(row)
    return store


def test_compare_runs_ratios_per_representation_and_n(tmp_path):
    table = explorer.compare_runs(_store(tmp_path).rows(), by="jax_version")
    assert table.attrs["a"] == "0.10.2" and table.attrs["b"] == "0.12.0"
    assert list(zip(table["representation"], table["n_states"])) == [("array", 300),
                                                                      ("dict", 300)]
    d = table[table["representation"] == "dict"].iloc[0]
    assert d["compile_s_a"] == pytest.approx(1.7)
    assert d["compile_s_ratio"] == pytest.approx(4.9 / 1.7)
    assert d["hlo_pre_bytes_ratio"] == pytest.approx(0.9)
    arr = table[table["representation"] == "array"].iloc[0]
    assert arr["compile_s_ratio"] == pytest.approx(1.0)  # the timeout row does not count
    assert arr["run_s_ratio"] is None
    with pytest.raises(ValueError, match="cannot group by"):
        explorer.compare_runs(_store(tmp_path).rows(), by="colour")
    with pytest.raises(ValueError, match="no ok rows with jax_version = '9'"):
        explorer.compare_runs(_store(tmp_path).rows(), a="0.10.2", b="9")


def test_cli_compare_runs(tmp_path, capsys):
    store = _store(tmp_path)
    code, _ = cli_in_process(["compare-runs", "--store", str(store.path)], capsys)
    assert code == 0
    code, err = cli_in_process(["compare-runs", "--store", str(store.path), "--by", "host"],
                               capsys)
    assert code == 2 and "host has 1 values" in one_line(err)


# A missing file, a program that is no Python, and this Python's base interpreter (no JAX).
@pytest.mark.parametrize("python", ["/no/such/python", "/bin/true",
                                    str(Path(sys.base_prefix) / "bin" / "python3")])
def test_sweep_with_a_python_that_cannot_measure_is_one_line(tmp_path, capsys, python):
    code, err = cli_in_process(["sweep", "-r", "dict", "-n", "2", "--python", python,
                                "--store", str(tmp_path / "s.sqlite")], capsys)
    assert code == 2 and "--python" in one_line(err)
    assert explorer.Store(tmp_path / "s.sqlite").rows().empty
