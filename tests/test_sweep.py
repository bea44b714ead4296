"""sweep(): every case measured once, stored as it finishes, resumed, refused when bad."""

from __future__ import annotations

import threading
import time

import numpy as np
import pandas as pd
import pytest
from _support import one_line
from _support import pid as _pid
from _support import sleep as _sleep

import explorer
from explorer import COLUMNS


@pytest.mark.slow
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


@pytest.mark.slow
def test_cancelling_a_sweep_leaves_other_callers_jobs_alone():

    ex = explorer.WorkerExecutor(timeout=120)
    try:
        ex.submit(_pid).result()  # warm
        other = ex.submit_with(_sleep, (60,), label="another session's job")
        deadline = time.time() + 60  # running (not still queued) before the sweep queues its own
        while ex.status.running != "another session's job" and time.time() < deadline:
            time.sleep(0.02)
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


@pytest.mark.slow
def test_sweep_refuses_an_unknown_backend_before_measuring(tmp_path):
    """A backend JAX lacks is bad input (one ValueError), not one failed row per case."""
    store = explorer.Store(tmp_path / "s.sqlite")
    with pytest.raises(ValueError) as err:
        explorer.sweep("decay", "array", 2, 3, "loss", backend="nope", store=store)
    assert "'nope'" in one_line(str(err.value)) and "cpu" in str(err.value)
    assert len(store) == 0
