"""sweep -> store -> read back, resume, export, scaling fits; the worker's fault handling."""

import math
import time

import numpy as np
import pandas as pd
import pytest

import explorer
from explorer._store import COLUMNS


@pytest.fixture(scope="module")
def executor():
    ex = explorer.WorkerExecutor(timeout=120)
    yield ex
    ex.shutdown()


def test_sweep_stores_every_row_and_reads_back(tmp_path, executor):
    store = explorer.Store(tmp_path / "r.sqlite")
    events = []
    df = explorer.sweep("decay", ["dict", "named"], [2, 6], 12, ["loss", "grad"], store=store,
                        executor=executor, progress=events.append, rollouts=True, run_id="run-a")
    assert list(df.columns) == list(COLUMNS)
    assert len(df) == 8 and set(df.status) == {"ok"}
    # interleaved: representations alternate within each size and target
    assert list(df.representation[:4]) == ["dict", "named", "dict", "named"]
    assert list(df.n_states) == [2, 2, 2, 2, 6, 6, 6, 6]
    stored = store.rows(run_id="run-a")
    assert len(stored) == 8 and list(stored.id) == list(df.id)
    pd.testing.assert_series_equal(stored.hlo_pre_bytes, df.hlo_pre_bytes, check_names=False)
    # the dict program grows with N, the named one barely does
    dict_rows = df[(df.representation == "dict") & (df.target == "loss")]
    named_rows = df[(df.representation == "named") & (df.target == "loss")]
    assert dict_rows.hlo_pre_bytes.iloc[1] > 2 * dict_rows.hlo_pre_bytes.iloc[0]
    assert named_rows.hlo_pre_bytes.iloc[1] < 1.1 * named_rows.hlo_pre_bytes.iloc[0]
    assert all(df.cold == 1) and all(df.cache_hits == 0)
    # progress: a start and an end event per measurement
    assert len(events) == 16 and events[-1].done == events[-1].total == 8
    # rollouts coincide across representations
    names_a, a = store.rollout(int(dict_rows.id.iloc[0]))
    names_b, b = store.rollout(int(named_rows.id.iloc[0]))
    assert names_a == names_b == ["state_0", "state_1"] and a.shape == (12, 2)
    np.testing.assert_allclose(a, b, rtol=1e-5)
    # no two measurements overlapped in time
    spans = df.sort_values("started_at")[["started_at", "finished_at"]].to_numpy()
    assert all(spans[i, 1] <= spans[i + 1, 0] for i in range(len(spans) - 1))


def test_sweep_resumes_and_redo_measures_again(tmp_path, executor):
    store = explorer.Store(tmp_path / "r.sqlite")
    first = explorer.sweep("oscillator", ["array"], [3], 8, "loss", store=store, executor=executor)
    seen = []
    again = explorer.sweep("oscillator", ["array", "struct"], [3], 8, "loss", store=store,
                           executor=executor, progress=seen.append)
    assert [e.skipped for e in seen if e.row is not None] == [True, False]
    assert int(again.id.iloc[0]) == int(first.id.iloc[0])  # the stored row, not a new one
    assert len(store) == 2
    explorer.sweep("oscillator", ["array"], [3], 8, "loss", store=store, executor=executor,
                   resume=False)
    assert len(store) == 3


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


def test_sweep_rejects_bad_input_before_measuring(tmp_path):
    store = explorer.Store(tmp_path / "r.sqlite")
    cases = [
        (dict(problem="nope"), "unknown problem 'nope'; choose one of: decay, oscillator, lotka_volterra"),
        (dict(representations=["dict", "tuple"]), "unknown representation 'tuple'"),
        (dict(n_states=[0]), "n_states must be an integer between 1 and 10000, got 0"),
        (dict(n_states=["7"]), "n_states must be an integer between 1 and 10000, got '7'"),
        (dict(n_states=[10**6]), "between 1 and 10000"),
        (dict(horizons=[-1]), "horizon must be an integer between 1 and 100000, got -1"),
        (dict(targets=["hessian"]), "unknown target 'hessian'; choose one of: loss, grad"),
        (dict(unroll=0), "unroll must be an integer"),
    ]
    for override, message in cases:
        kwargs = dict(problem="decay", representations=["dict"], n_states=[2], horizons=[4],
                      targets=["loss"], store=store)
        kwargs.update(override)
        with pytest.raises(ValueError) as info:
            explorer.sweep(kwargs.pop("problem"), **kwargs)
        assert message in str(info.value) and "\n" not in str(info.value)
    assert len(store) == 0


def test_scaling_exponents_recovers_known_laws():
    n = np.array([10, 30, 100, 300])
    rows = []
    for rep, k in (("dict", 1.8), ("array", 0.0)):
        for ni in n:
            rows.append({"problem": "decay", "representation": rep, "target": "loss",
                         "horizon": 200, "n_states": ni, "status": "ok",
                         "compile_s": 0.01 * ni**k, "hlo_pre_bytes": 3000.0 * ni**(k / 2)})
    rows.append({**rows[0], "status": "timeout", "compile_s": 1e9})  # ignored
    fits = explorer.scaling_exponents(pd.DataFrame(rows), metrics=["compile_s", "hlo_pre_bytes"])
    got = {(r.representation, r.metric): r for r in fits.itertuples()}
    assert math.isclose(got["dict", "compile_s"].k, 1.8, abs_tol=1e-9)
    assert math.isclose(got["dict", "compile_s"].c, 0.01, rel_tol=1e-9)
    assert math.isclose(got["dict", "hlo_pre_bytes"].k, 0.9, abs_tol=1e-9)
    assert abs(got["array", "compile_s"].k) < 1e-9
    assert got["dict", "compile_s"].r2 > 0.999 and got["dict", "compile_s"].points == 4
    assert explorer.scaling_exponents(pd.DataFrame(rows[:1]), metrics=["compile_s"]).empty


# -- the worker --------------------------------------------------------------------------
def _sleep(seconds):
    time.sleep(seconds)
    return seconds


def _pid():
    import os

    return os.getpid()


def _die():
    import os

    os._exit(3)


def _raise():
    raise ValueError("bad thing")


def test_worker_timeout_crash_and_errors_leave_the_caller_alive():
    ex = explorer.WorkerExecutor(timeout=30)
    try:
        pid = ex.submit(_pid).result()
        assert ex.submit(_pid).result() == pid  # the worker is reused
        with pytest.raises(explorer.MeasurementTimeout):
            ex.submit_with(_sleep, (30,), timeout=0.5).result()
        pid2 = ex.submit(_pid).result()
        assert pid2 != pid  # replaced after the timeout
        with pytest.raises(explorer.WorkerCrashed, match="exit code 3"):
            ex.submit(_die).result()
        with pytest.raises(ValueError, match="bad thing"):
            ex.submit(_raise).result()
        assert ex.submit(_sleep, 0).result() == 0
    finally:
        ex.shutdown()


def test_worker_cancel_running_and_queue_status():
    ex = explorer.WorkerExecutor(timeout=60)
    try:
        ex.submit(_pid).result()  # warm
        long = ex.submit_with(_sleep, (30,), label="long")
        queued = ex.submit_with(_sleep, (0,), label="queued")
        deadline = time.time() + 60
        while ex.status.running != "long" and time.time() < deadline:
            time.sleep(0.02)
        status = ex.status
        assert status.running == "long" and status.queued == ("queued",)
        assert ex.queue_position(long) == 0 and ex.queue_position(queued) == 1
        assert ex.cancel(long)
        with pytest.raises(explorer.WorkerCancelled):
            long.result(timeout=10)
        assert queued.result(timeout=30) == 0
        assert ex.status.running is None
    finally:
        ex.shutdown()


def test_broken_store_file_is_reported_and_left_alone(tmp_path):
    path = tmp_path / "broken.sqlite"
    junk = b"this is not sqlite" * 100
    path.write_bytes(junk)
    with pytest.raises(explorer.StoreError, match="is not a readable SQLite database") as info:
        explorer.Store(path).rows()
    assert "\n" not in str(info.value)
    assert path.read_bytes() == junk


def test_cancelling_a_sweep_leaves_other_callers_jobs_alone():
    import threading

    ex = explorer.WorkerExecutor(timeout=120)
    try:
        ex.submit(_pid).result()  # warm
        other = ex.submit_with(_sleep, (60,), label="another session's job")
        cancel = threading.Event()
        out = {}
        thread = threading.Thread(target=lambda: out.setdefault("df", explorer.sweep(
            "decay", ["array"], [2], 4, "loss", store=False, executor=ex, cancel=cancel)))
        thread.start()
        deadline = time.time() + 60
        while not ex.status.queued and time.time() < deadline:
            time.sleep(0.02)
        assert ex.status.queued and ex.status.running == "another session's job"
        cancel.set()
        thread.join(30)
        assert out["df"].status.tolist() == ["cancelled"]
        # the other caller's job is still running: the sweep's cancel did not kill the worker
        assert not other.done() and ex.status.running == "another session's job"
        assert ex.cancel(other)
        with pytest.raises(explorer.WorkerCancelled):
            other.result(timeout=30)
    finally:
        ex.shutdown()


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
