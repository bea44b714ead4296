"""A memory limit for the worker a dashboard's pages share (``serve --worker-memory``,
``$PYTREE_EXPLORER_WORKER_MEMORY``) and for a sweep's own worker (``sweep --worker-memory``): a
case over it is stored as out of memory, said so, and the next case is measured; bad values are
one-line errors (exit status 2)."""

from __future__ import annotations

import sys

import pytest
from _support import cli_in_process, one_line

import explorer
from explorer import testing
from explorer.testing import settings_from_environment

GIB = 2**30


@pytest.fixture
def fresh_shared_worker():
    """The process-wide worker as a new server process has it: not started, no limit."""
    with testing.fresh_shared_worker():
        yield


@pytest.mark.parametrize("text, expected", [(None, None), ("", None), (" ", None), ("2", 2 * GIB),
                                            ("4.5", int(4.5 * GIB)), (16, 16 * GIB)])
def test_a_limit_in_gib(text, expected):
    assert testing.memory_limit_bytes(text) == expected


@pytest.mark.parametrize("text", ["1.5", "0", "-4", "lots", "nan", "inf", "4GiB"])
def test_a_bad_limit_is_one_line(text):
    with pytest.raises(ValueError) as err:
        testing.memory_limit_bytes(text, what="worker-memory")
    assert one_line(str(err.value)).startswith("worker-memory must be")
    assert repr(text) in str(err.value)


def test_the_shared_worker_takes_the_limit_set_before_it_starts(fresh_shared_worker):
    testing.limit_shared_worker(3 * GIB)
    testing.limit_shared_worker(3 * GIB)  # every page of an app sets it again: the same
    executor = testing.shared_executor()
    assert executor.memory_limit_bytes == 3 * GIB
    assert testing.shared_executor() is executor
    with pytest.raises(ValueError, match="already runs with another memory limit"):
        testing.limit_shared_worker(5 * GIB)
    with pytest.raises(ValueError, match="already runs with another memory limit"):
        testing.limit_shared_worker(None)
    assert executor.memory_limit_bytes == 3 * GIB


def test_the_environment_names_the_limit(monkeypatch):
    monkeypatch.delenv("PYTREE_EXPLORER_SCHEDULER", raising=False)
    monkeypatch.setenv("PYTREE_EXPLORER_WORKER_MEMORY", "6")
    assert settings_from_environment()["worker_memory_gib"] == 6
    monkeypatch.setenv("PYTREE_EXPLORER_WORKER_MEMORY", "1")
    with pytest.raises(ValueError) as err:
        settings_from_environment()
    assert one_line(str(err.value)).startswith("PYTREE_EXPLORER_WORKER_MEMORY must be at least 2")


@pytest.mark.parametrize("argv, words", [
    (["serve", "--worker-memory", "1"], "at least 2 GiB"),
    (["serve", "--worker-memory", "much"], "a number of GiB"),
    (["serve", "--worker-memory", "4", "--scheduler", "tcp://127.0.0.1:1"], "dask-worker"),
])
def test_serve_refuses_a_bad_limit_in_one_line(argv, words, capsys, fresh_shared_worker):
    code, err = cli_in_process(argv, capsys)
    assert code == 2
    assert words in one_line(err)
    assert testing.started_shared_worker() is None  # nothing started


def test_a_limit_is_only_for_the_shared_worker(fresh_shared_worker, tmp_path):
    own = explorer.WorkerExecutor()
    try:
        with pytest.raises(ValueError, match="pages share"):
            explorer.dashboard(worker_memory_gib=4, executor=own, store=tmp_path / "s.sqlite")
    finally:
        own.shutdown()
    assert testing.started_shared_worker() is None  # nothing started


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is Linux")
@pytest.mark.slow
def test_a_case_over_the_limit_is_out_of_memory_and_the_next_is_measured(fresh_shared_worker,
                                                                         tmp_path):
    """What a served page does under ``--worker-memory 4``: 4 GB of observations (N=10,000,
    horizon 100,000) do not fit beside the worker's own 1.7 GiB."""
    view = explorer.dashboard(worker_memory_gib=4, store=tmp_path / "s.sqlite",
                              representations=["array"], n_states=10_000, horizon=100_000,
                              target="loss")
    m = view.model
    try:
        assert m.jobs.executor is testing.shared_executor()
        assert m.jobs.executor.memory_limit_bytes == 4 * GIB
        assert m.run() and m.wait(300)
        assert m.session.alert_kind == "danger"
        alert = one_line(m.session.alert)
        assert alert.startswith("Out of memory on: decay/array N=10000 H=100000 loss.")
        assert "memory limit of 4 GiB" in alert and "replaced. The server keeps running" in alert
        m.controls.param.update(n_states=10, horizon=20)
        assert m.run() and m.wait(300)
        rows = m.store.rows().sort_values("id")
        assert rows["status"].tolist() == ["oom", "ok"]
        assert rows["n_states"].tolist() == [10_000, 10]
    finally:
        m.close()
        m.wait(60)


@pytest.mark.parametrize("argv, words", [
    (["--worker-memory", "1"], "at least 2 GiB"),
    (["--worker-memory", "much"], "a number of GiB"),
    (["--worker-memory", "4", "--scheduler", "tcp://127.0.0.1:1"], "dask-worker --memory-limit"),
])
def test_sweep_refuses_a_bad_limit_in_one_line(argv, words, capsys, tmp_path):
    store = tmp_path / "s.sqlite"
    code, err = cli_in_process(["sweep", "--problem", "decay", "-r", "array", "-n", "10",
                                "--targets", "loss", "--store", str(store), *argv], capsys)
    assert code == 2
    assert words in one_line(err) and len(err.strip().splitlines()) == 1
    assert not store.exists()  # nothing measured, no store made


def test_a_sweeps_limit_is_for_its_own_worker(tmp_path):
    own = explorer.WorkerExecutor()
    try:
        with pytest.raises(ValueError, match="memory_limit_bytes"):
            explorer.sweep("decay", ["array"], [10], targets="loss", executor=own,
                           worker_memory_gib=4, store=False)
    finally:
        own.shutdown()
    with pytest.raises(ValueError, match="--memory-limit"):
        explorer.sweep("decay", ["array"], [10], targets="loss", scheduler="tcp://127.0.0.1:1",
                       worker_memory_gib=4, store=False)
    with pytest.raises(ValueError, match="at least 2 GiB"):
        explorer.sweep("decay", ["array"], [10], targets="loss", worker_memory_gib=1,
                       store=False)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is Linux")
@pytest.mark.slow
def test_a_sweep_under_a_limit_stores_out_of_memory_and_goes_on(capsys, tmp_path):
    """``pytree-explorer sweep --worker-memory 3``: N=10,000 at horizons 50,000 and 100,000 (2
    and 4 GB of observations beside the worker's own 1.7 GiB) are stored as out of memory,
    naming the limit, and the case measured after the first of them (N=10 at the next
    horizon; a sweep goes horizon by horizon) is measured in the replaced worker."""
    store = tmp_path / "s.sqlite"
    code, out = cli_in_process(["sweep", "--problem", "decay", "-r", "array", "-n", "10,10000",
                                "--horizons", "50000,100000", "--targets", "loss", "--quiet",
                                "--worker-memory", "3", "--store", str(store)], capsys)
    assert code == 0, out
    rows = explorer.Store(store).rows().sort_values("id")
    assert list(zip(rows["horizon"], rows["n_states"], rows["status"])) == [
        (50_000, 10, "ok"), (50_000, 10_000, "oom"), (100_000, 10, "ok"),
        (100_000, 10_000, "oom")]
    assert all("memory limit of 3 GiB" in e for e in rows[rows["status"] == "oom"]["error"])


def test_every_out_of_memory_form_is_oom():
    """XLA's ``RESOURCE_EXHAUSTED: Out of memory allocating ...``, ENOMEM and a C++ bad_alloc
    say out of memory as ``MemoryError`` does; other failures do not."""
    import _memory_jobs  # noqa: PLC0415

    for kind in ("xla", "enomem", "bad_alloc"):
        with pytest.raises(Exception) as err:
            _memory_jobs.raise_like(kind)
        assert testing.out_of_memory(err.value), kind
    assert testing.out_of_memory(MemoryError())
    with pytest.raises(ValueError) as err:
        _memory_jobs.raise_like("other")
    assert not testing.out_of_memory(err.value)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is Linux")
def test_xla_out_of_memory_under_the_cap_is_oom_naming_the_cap():
    """A 3 GiB XLA buffer under a 3 GiB cap: XLA raises RESOURCE_EXHAUSTED (not MemoryError);
    the job fails as out of memory naming the cap and the next job runs in a new worker."""
    import _memory_jobs  # noqa: PLC0415

    ex = explorer.WorkerExecutor(memory_limit_bytes=3 * GIB, env={"JAX_PLATFORMS": "cpu"})
    try:
        with pytest.raises(explorer.WorkerOutOfMemory) as err:
            ex.submit(_memory_jobs.allocate_with_jax, 3).result(timeout=300)
        text = one_line(str(err.value))
        assert "RESOURCE_EXHAUSTED" in text and "memory limit of 3 GiB" in text
        assert ex.submit(_memory_jobs.allocate_with_jax, 0.01).result(timeout=300) == 2.0
    finally:
        ex.shutdown()
