"""Hardening of the core: bad input, broken or locked stores, worker faults, kill -9, cold compiles.

Every test here uses small sizes (the suite runs on 2 shared CPU cores). Worker jobs run on the
CPU backend. Timing goals live in ``benchmarks/``; these tests assert behaviour.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import tomllib
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
from packaging.requirements import Requirement

import explorer
from explorer._cli import main as cli_main
from explorer._sweep import Spec, run_one

ROOT = Path(__file__).resolve().parent.parent
CPU_ENV = {"JAX_PLATFORMS": "cpu"}
# A measurement small enough to be quick, big enough to have real figures.
SMALL = Spec("decay", "named", 3, 8, "grad")
# Compiles for about a second here (the first seed's third program), so a fault can land in it.
SLOW = Spec("decay", "unflatten", 100, 200, "loss")


@pytest.fixture(autouse=True)
def _private_default_store(tmp_path, monkeypatch):
    """Nothing here may touch the user's default store."""
    monkeypatch.setenv(explorer._store.ENV_VAR, str(tmp_path / "default.sqlite"))


@pytest.fixture(scope="module")
def executor():
    ex = explorer.WorkerExecutor(timeout=300, env=CPU_ENV)
    yield ex
    ex.shutdown()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_line(text: str) -> str:
    text = text.strip()
    assert text and "\n" not in text, f"expected one line, got {text!r}"
    assert "Traceback" not in text
    return text


def _loss_and_grad(spec: Spec) -> tuple[float, np.ndarray]:
    """Evaluate a spec's case (submitted to the worker; top level so it pickles)."""
    case = explorer.build_case(spec.problem, spec.representation, spec.n_states, spec.horizon)
    return case.evaluate()


@functools.lru_cache(maxsize=None)
def _reference(spec: Spec) -> tuple[explorer.Measurement, float, np.ndarray]:
    """A fresh in-process measurement and evaluation of ``spec``: what the worker must match."""
    case = explorer.build_case(spec.problem, spec.representation, spec.n_states, spec.horizon)
    loss, grad = case.evaluate()
    return explorer.measure_case(case, spec.target, runs=1), loss, grad


def _assert_next_result_correct(ex: explorer.WorkerExecutor, store: explorer.Store | None = None):
    """After a fault, the next job through ``ex`` gives the numbers an in-process run gives."""
    row, _ = run_one(SMALL, ex, store=store)
    assert row["status"] == "ok", row.get("error")
    ref, loss, grad = _reference(SMALL)
    assert row["hlo_pre_bytes"] == ref.hlo_pre_bytes
    assert row["jaxpr_eqns"] == ref.jaxpr_eqns
    assert row["n_leaves"] == ref.n_leaves
    assert row["cold"] and row["cache_hits"] == 0
    got_loss, got_grad = ex.submit(_loss_and_grad, SMALL).result()
    np.testing.assert_allclose(got_loss, loss, rtol=1e-6)
    np.testing.assert_allclose(got_grad, grad, rtol=1e-6)
    return row


# -- bad input: library ----------------------------------------------------------------------
BAD_SIZES = [0, -1, -(10**9), 10**9, 10**30, "10", "ten", 2.5, float("nan"), float("inf"), None, True]


@pytest.mark.parametrize("value", BAD_SIZES, ids=repr)
def test_library_refuses_bad_sizes_with_one_line(value):
    for call in (
        lambda: explorer.build_case("decay", "array", value, 5),
        lambda: explorer.build_case("decay", "array", 3, value),
        lambda: explorer.Spec("decay", "array", value, 5, "loss").validated(),
        lambda: explorer.sweep("decay", "array", n_states=value, store=False),
        lambda: explorer.sweep("decay", "array", n_states=3, horizons=value, store=False),
    ):
        with pytest.raises(ValueError) as err:
            call()
        message = _one_line(str(err.value))
        assert "between 1 and" in message, message


@pytest.mark.parametrize("kind, call, choices", [
    ("problem", lambda: explorer.build_case("nope", "array", 3, 5), "decay, oscillator, lotka_volterra"),
    ("representation", lambda: explorer.build_case("decay", "nope", 3, 5), "dict, array, unflatten"),
    ("problem", lambda: explorer.sweep("nope", store=False), "decay"),
    ("representation", lambda: explorer.sweep("decay", ["array", "nope"], store=False), "named"),
    ("target", lambda: explorer.sweep("decay", "array", targets="hess", store=False), "loss, grad"),
    ("representation", lambda: explorer.sweep("decay", [], store=False), "dict"),
])
def test_library_refuses_unknown_names_with_the_choices(kind, call, choices):
    with pytest.raises(ValueError) as err:
        call()
    message = _one_line(str(err.value))
    assert kind in message and choices in message


def test_sweep_refuses_an_unknown_backend_before_measuring(tmp_path):
    """A backend JAX lacks is bad input (one ValueError), not one failed row per case."""
    store = explorer.Store(tmp_path / "s.sqlite")
    with pytest.raises(ValueError) as err:
        explorer.sweep("decay", "array", 2, 3, "loss", backend="nope", store=store)
    assert "'nope'" in _one_line(str(err.value)) and "cpu" in str(err.value)
    assert len(store) == 0


# -- bad input: CLI --------------------------------------------------------------------------
def _cli(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = cli_main(argv)
    except SystemExit as stop:  # argparse errors
        code = stop.code
    captured = capsys.readouterr()
    return code, captured.err


@pytest.mark.parametrize("argv, needle", [
    (["sweep", "-n", "0"], "between 1 and 10000"),
    (["sweep", "--n-states=-5"], "between 1 and 10000"),
    (["sweep", "-n", "99999999999999999999"], "between 1 and 10000"),
    (["sweep", "-n", "abc"], "'abc'"),
    (["sweep", "-n", "1e3"], "'1e3'"),
    (["sweep", "-n", ""], "at least one value"),
    (["sweep", "--horizons", "0"], "between 1 and 100000"),
    (["sweep", "--horizons", "many"], "'many'"),
    (["sweep", "--problem", "nope"], "decay, oscillator, lotka_volterra"),
    (["sweep", "-r", "array,nope"], "dict, array, unflatten"),
    (["sweep", "--targets", "hess"], "loss, grad"),
    (["sweep", "--timeout", "soon"], "'soon'"),
    (["sweep", "--repeats", "0"], "between 1 and 100"),
    (["list", "--last", "-1"], "between 1 and"),
])
def test_cli_bad_input_one_line_exit_2(argv, needle, capsys, tmp_path):
    code, err = _cli([*argv, *(["--store", str(tmp_path / "s.sqlite")] if argv[0] != "list" else [])],
                     capsys)
    assert code == 2
    assert needle in _one_line(err)
    assert not (tmp_path / "s.sqlite").exists()  # refused before anything was stored


def test_cli_exit_status_is_really_2_in_a_subprocess(tmp_path):
    env = {**os.environ, **CPU_ENV, explorer._store.ENV_VAR: str(tmp_path / "d.sqlite")}
    done = subprocess.run([sys.executable, "-m", "explorer._cli", "sweep", "-n", "-3"],
                          capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert done.returncode == 2
    assert "n_states" in _one_line(done.stderr)
    assert done.stdout == ""


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
        before = _digest(path)
        store = explorer.Store(path, timeout=0.2)
        for call in (store.rows, len, store.runs, lambda s=store: s.export(tmp_path / "x.csv"),
                     lambda s=store: s.add({"problem": "decay", "status": "ok"})):
            with pytest.raises(explorer.StoreError) as err:
                call(store) if call is len else call()
            assert "not a readable SQLite database" in _one_line(str(err.value)), name
        for argv in (["list", "--store", str(path)], ["runs", "--store", str(path)],
                     ["sweep", "-r", "array", "-n", "2", "--horizons", "3", "--targets", "loss",
                      "-q", "--store", str(path)]):
            code, err = _cli(argv, capsys)
            assert code == 2, (name, argv)
            assert str(path) in _one_line(err)
        assert _digest(path) == before, f"{name}: the store file was modified"
        assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0


def test_locked_store_is_one_line_error_and_rows_stay_readable(tmp_path, capsys):
    path = tmp_path / "locked.sqlite"
    _filled_store(path, rows=5)
    expected = explorer.Store(path).rows()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        store = explorer.Store(path, timeout=0.2)
        started = time.monotonic()
        with pytest.raises(explorer.StoreError) as err:
            store.add({"problem": "decay", "status": "ok"})
        assert "locked" in _one_line(str(err.value))
        assert time.monotonic() - started < 5  # gives up after its timeout, no hang
        # Readers are not blocked (WAL): everything stored is still there to read.
        assert store.rows().equals(expected)
        # The CLI measures, then cannot store: one line, status 2, nothing half-written.
        code, err = _cli(["sweep", "-r", "array", "-n", "2", "--horizons", "3", "--targets", "loss",
                          "-q", "--redo", "--store", str(path)], capsys)
        assert code == 2
        assert "locked" in _one_line(err)
    finally:
        holder.rollback()
        holder.close()
    after = explorer.Store(path)
    assert after.rows().equals(expected)
    assert after.rollout(int(expected["id"].iloc[-1]))[1].tolist() == np.full((5, 2), 4.0).tolist()


# -- faults in the worker --------------------------------------------------------------------
def _wait_for_stage(ex: explorer.WorkerExecutor, stage: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while ex.status.stage != stage:
        assert time.monotonic() < deadline, f"the job never reached {stage!r}: {ex.status}"
        time.sleep(0.005)


def _run_one_in_thread(spec: Spec, ex: explorer.WorkerExecutor, store: explorer.Store,
                      out: dict) -> threading.Thread:
    def target() -> None:
        out["row"], _ = run_one(spec, ex, store=store)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_worker_killed_mid_compile_marks_row_crashed_and_is_replaced(executor, tmp_path):
    store = explorer.Store(tmp_path / "s.sqlite")
    executor.submit(os.getpid).result()  # a live worker to kill
    started = executor.workers_started
    done: dict = {}
    thread = _run_one_in_thread(SLOW, executor, store, done)
    _wait_for_stage(executor, "compile")
    pid = executor._process.pid
    os.kill(pid, signal.SIGKILL)
    thread.join(60)
    assert done["row"]["status"] == "crashed"
    assert "died" in done["row"]["error"]
    assert store.rows()["status"].tolist() == ["crashed"]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped
    _assert_next_result_correct(executor, store)
    assert executor.workers_started == started + 1
    assert store.rows()["status"].tolist() == ["crashed", "ok"]


def test_timeout_marks_row_and_replaces_worker(executor, tmp_path):
    store = explorer.Store(tmp_path / "s.sqlite")
    executor.submit(os.getpid).result()
    pid = executor._process.pid
    started = executor.workers_started
    row, _ = run_one(SLOW, executor, timeout=0.5, store=store)
    assert row["status"] == "timeout"
    assert "no result after 0.5 s" in row["error"]
    stored = store.rows()
    assert stored["status"].tolist() == ["timeout"] and stored["compile_s"].isna().all()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the stuck worker is gone
    _assert_next_result_correct(executor, store)
    assert executor.workers_started == started + 1


def _vm_peak_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmPeak:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmPeak")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux")
def test_out_of_memory_marks_row_oom_and_replaces_worker(executor, tmp_path):
    store = explorer.Store(tmp_path / "s.sqlite")
    # Room for what a worker normally needs (seen in the warm shared worker), and 2 GiB more.
    run_one(SMALL, executor)
    limit = _vm_peak_bytes(executor._process.pid) + (2 << 30)
    ex = explorer.WorkerExecutor(timeout=300, memory_limit_bytes=limit, env=CPU_ENV)
    try:
        assert run_one(SMALL, ex)[0]["status"] == "ok"  # the limit leaves normal work alone
        # Python-level: an allocation over the limit raises MemoryError in the worker.
        with pytest.raises(explorer.WorkerOutOfMemory):
            ex.submit(bytearray, limit + (1 << 30)).result()
        # XLA-level: 4 GB of observations (N=10000, horizon 100000) abort inside XLA.
        big = Spec("decay", "array", 10_000, 100_000, "loss")
        row, _ = run_one(big, ex, store=store)
        assert row["status"] == "oom", row["error"]
        assert store.rows()["status"].tolist() == ["oom"]
        _assert_next_result_correct(ex, store)
        assert ex.workers_started == 3
    finally:
        ex.shutdown()


# -- durability: kill -9 of a CLI sweep --------------------------------------------------------
SWEEP_ARGS = ["sweep", "--problem", "decay", "-r", "array,named", "-n", "1,2,3,4,5",
              "--horizons", "6", "--targets", "loss", "-q"]
SWEEP_CASES = 10


def _cli_process(args: list[str], env: dict[str, str], **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "explorer._cli", *args], cwd=ROOT, env=env,
                            start_new_session=True, **kw)


def _stored(path: Path):
    try:
        return explorer.Store(path, timeout=1).rows()
    except explorer.StoreError:
        return None


def _keys(frame) -> list[tuple]:
    return list(zip(frame["representation"], frame["n_states"], frame["horizon"], frame["target"]))


def test_kill_9_mid_sweep_keeps_finished_rows_and_the_sweep_resumes(tmp_path):
    db = tmp_path / "sweep.sqlite"
    env = {**os.environ, **CPU_ENV, explorer._store.ENV_VAR: str(tmp_path / "default.sqlite")}
    log = (tmp_path / "killed.log").open("w")
    proc = _cli_process([*SWEEP_ARGS, "--store", str(db)], env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 240
        seen = None
        while time.monotonic() < deadline and proc.poll() is None:
            frame = _stored(db) if db.exists() else None
            if frame is not None and len(frame) >= 2:
                seen = frame
                break
            time.sleep(0.02)
        assert seen is not None, (tmp_path / "killed.log").read_text()
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
    finally:
        try:  # its orphaned worker, in the session the sweep started
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        log.close()
    after = explorer.Store(db).rows()
    assert len(after) < SWEEP_CASES, "the sweep finished before it was killed"
    assert len(after) >= len(seen)
    assert after["id"].tolist()[:len(seen)] == seen["id"].tolist()
    assert (after["status"] == "ok").all()
    assert after["hlo_pre_bytes"].notna().all() and (after["compile_s"] > 0).all()
    assert len(set(_keys(after))) == len(after)
    killed_run = set(after["run_id"])

    # The same sweep again: measures only what is missing.
    done = subprocess.run([sys.executable, "-m", "explorer._cli", *SWEEP_ARGS, "--store", str(db)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    resumed = explorer.Store(db).rows()
    assert len(resumed) == SWEEP_CASES and len(set(_keys(resumed))) == SWEEP_CASES
    assert resumed.iloc[:len(after)].equals(after)
    new = resumed[~resumed["run_id"].isin(killed_run)]
    assert len(new) == SWEEP_CASES - len(after) and new["run_id"].nunique() == 1
    assert (resumed["status"] == "ok").all()

    # --redo measures every case again.
    done = subprocess.run([sys.executable, "-m", "explorer._cli", *SWEEP_ARGS, "--redo",
                           "--store", str(db)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    redone = explorer.Store(db).rows()
    assert len(redone) == 2 * SWEEP_CASES
    assert sorted(_keys(redone.iloc[SWEEP_CASES:])) == sorted(_keys(resumed))


# -- cold compiles under a persistent compilation cache ------------------------------------------
COLD_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import jax
    cache = sys.argv[1]
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    import jax.numpy as jnp
    import explorer

    hits = []
    jax.monitoring.register_event_listener(
        lambda event, **kw: hits.append(1) if event == "/jax/compilation_cache/cache_hits" else None)

    def f(x):
        return jnp.sin(x) @ x.T + 1.0

    x = jnp.ones((32, 32))
    # Control: without explorer, the second cold compile of f is served by the cache.
    jax.jit(f).lower(x).compile()
    jax.clear_caches()
    jax.jit(f).lower(x).compile()
    control = len(hits)
    found = [explorer.measure(f, x, repeats=2) for _ in range(3)]
    after = len(hits)
    jax.clear_caches()
    jax.jit(f).lower(x).compile()  # the user's cache works again afterwards
    print(json.dumps({
        "control_hits": control,
        "measures": [[m.cache_hits, m.backend_compiles, m.cold] for m in found],
        "hits_during_measures": after - control,
        "hits_after": len(hits) - after,
        "cache_flag_after": jax.config.jax_enable_compilation_cache,
        "cache_files": len(os.listdir(cache)),
    }))
""")


def test_measure_is_cold_even_with_a_persistent_cache_configured(tmp_path):
    cache = tmp_path / "jax-cache"
    cache.mkdir()
    done = subprocess.run([sys.executable, "-c", COLD_SCRIPT, str(cache)], capture_output=True,
                          text=True, timeout=180, env={**os.environ, **CPU_ENV}, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["control_hits"] >= 1, "the cache was not active: this test would prove nothing"
    assert result["cache_files"] >= 1
    for cache_hits, backend_compiles, cold in result["measures"]:
        assert cache_hits == 0
        assert backend_compiles >= 2  # one real XLA compile per repeat
        assert cold is True
    assert result["hits_during_measures"] == 0
    assert result["cache_flag_after"] is True
    assert result["hits_after"] >= 1


# -- dependency pins -------------------------------------------------------------------------
PINNED = ("jax", "jaxlib", "panel", "bokeh", "holoviews")


def test_pyproject_pins_the_stack_to_compatible_ranges():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = {Requirement(r).name.lower(): Requirement(r) for r in project["dependencies"]}
    for name in PINNED:
        assert name in requirements, f"{name} is not a dependency"
        spec = requirements[name].specifier
        operators = {s.operator for s in spec}
        assert operators & {"<", "<=", "~=", "=="}, f"{name} has no upper bound: {spec}"
        assert operators & {">=", ">", "~=", "=="}, f"{name} has no lower bound: {spec}"
        installed = metadata.version(name)
        assert spec.contains(installed, prereleases=True), f"{name} {installed} is outside {spec}"
    # Panel 1.9 needs bokeh < 3.10: the pins must agree with that.
    assert not requirements["bokeh"].specifier.contains("3.10.0")
