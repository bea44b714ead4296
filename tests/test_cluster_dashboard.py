"""The dashboard's jobs on a Dask cluster (a LocalCluster of two process workers on loopback),
driven through the model as tests/test_model.py does; and ``serve --scheduler``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from explorer import Store
from explorer import ExplorerModel

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")

from explorer.testing import DaskExecutor, dask_running  # noqa: E402

WAIT_S = 180


@pytest.fixture(scope="module")
def client():
    # A worker that dies fails its task at once (no retry elsewhere), and its semaphore lease
    # expires in seconds, not the default 30 s.
    config = {"distributed.scheduler.locks.lease-timeout": "3s",
              "distributed.scheduler.allowed-failures": 0}
    with dask.config.set(config):
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      host="127.0.0.1", dashboard_address=None,
                                      env={"JAX_PLATFORMS": "cpu"}) as cluster:
            with distributed.Client(cluster) as c:
                yield c


@pytest.fixture
def model(tmp_path, client):
    m = ExplorerModel(store=tmp_path / "results.sqlite",
                      executor=DaskExecutor(client, per_host=2), problem="decay", n_states=3,
                      horizon=20, target="loss", representations=["dict", "array"])
    yield m
    m.close()
    m.wait(WAIT_S)


def _running(client) -> dict[str, int]:
    return client.run(lambda: len(dask_running()))


def _wait_until(predicate, timeout: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_the_page_measures_on_the_cluster_one_case_per_host_and_stores_each_row(tmp_path,
                                                                                client):
    names = {str(w["name"]) for w in client.scheduler_info()["workers"].values()}
    m = ExplorerModel(store=tmp_path / "results.sqlite", executor=DaskExecutor(client, per_host=1),
                      problem="decay", horizon=20, target="loss",
                      representations=["dict", "array"], sweep_n_states=[1, 3])
    try:
        assert client.scheduler.address in m.jobs.where and "2 worker(s)" in m.jobs.where
        assert m.sweep() and m.wait(WAIT_S)
        frame = m.results.frame
        measured = frame[frame["source"] == "measured"]
        assert sorted(zip(measured["representation"], measured["n_states"])) == [
            ("array", 1), ("array", 3), ("dict", 1), ("dict", 3)]
        assert list(measured["status"]) == ["ok"] * 4, list(measured["error"])
        assert set(measured["worker"]) <= names and measured["host"].notna().all()
        stored = Store(m.store.path).rows()
        assert len(stored) == 4 and set(stored["worker"]) <= names
        # stored the moment each finished (id order is finishing order), one at a time per host
        assert list(stored.sort_values("finished_at")["id"]) == sorted(stored["id"])
        spans = sorted(zip(stored["started_at"], stored["finished_at"]))
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
        assert m.session.status.startswith("Sweep finished: 4 of 4")
        # the page's other jobs take the same path: a row's programs, a comparison
        m.programs.selected = int(measured["id"].iloc[0])
        assert m.inspect() and m.wait(WAIT_S)
        assert "scan" in m.programs.program["jaxpr"] and m.session.alert == ""
        m.programs.param.update(compare_a="dict", compare_b="array")
        assert m.compare() and m.wait(WAIT_S)
        assert m.programs.comparison["labels"] == ("dict", "array")
    finally:
        m.close()
        m.wait(WAIT_S)


def test_cancel_kills_the_measurement_on_the_worker(model, client):
    # a compile of well over 15 s on this machine class: only a kill ends it sooner
    model.controls.param.update(n_states=2000, horizon=200, target="grad",
                                representations=["dict"])
    assert model.run()
    assert _wait_until(lambda: any(_running(client).values()), 120)
    time.sleep(1.0)  # the compile is under way
    began = time.monotonic()
    model.cancel()
    assert model.wait(15) and time.monotonic() - began < 15
    rows = Store(model.store.path).rows()
    assert list(rows["status"]) == ["cancelled"]  # stored as cancelled, no false measurement
    assert "before it started" not in rows["error"][0]  # it was running: killed
    assert rows["worker"].notna().all()
    assert _wait_until(lambda: not any(_running(client).values()), 10)
    assert "cancelled" in model.session.status


@pytest.mark.slow
def test_a_dask_worker_that_dies_marks_its_row_and_the_page_goes_on(model, client):
    model.controls.param.update(n_states=1200, horizon=100, target="grad",
                                representations=["dict", "array"])
    assert model.run()
    # per_host=2: both cases run at once, one on each worker; kill the one measuring dict

    def measuring_dict() -> list[str]:
        labels = client.run(lambda: [ex.status.running or ""
                                     for ex, _ in dask_running().values()])
        return [addr for addr, running in labels.items() if any("dict" in r for r in running)]

    assert _wait_until(lambda: bool(measuring_dict()), 120)
    victim = measuring_dict()[0]
    pid = client.run(os.getpid, workers=[victim])[victim]
    os.kill(pid, 9)
    assert model.wait(WAIT_S)
    rows = Store(model.store.path).rows().set_index("representation")
    assert rows.loc["dict", "status"] == "crashed"
    assert rows.loc["array", "status"] == "ok"
    assert "1 failed" in model.session.status


@pytest.mark.slow
def test_serve_with_an_unreachable_scheduler_is_a_one_line_error():
    # Tried for as long as Dask's own setting says (30 s unless set), here 2 s.
    env = dict(os.environ, DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="2s")
    out = subprocess.run([sys.executable, "-m", "explorer", "serve", "--scheduler",
                          "tcp://127.0.0.1:1"], capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the Dask scheduler tcp://127.0.0.1:1" in lines[0]


@pytest.mark.browser
def test_served_page_says_it_measures_on_the_cluster_and_runs_there(page, client, panel_server,
                                                                    free_port, monkeypatch):
    from playwright.sync_api import expect  # noqa: PLC0415

    from conftest import serve_command  # noqa: PLC0415

    address = client.scheduler.address
    monkeypatch.setenv("PYTREE_EXPLORER_SCHEDULER", address)  # what apps/explorer_app.py reads
    monkeypatch.setenv("PYTREE_EXPLORER_PER_HOST", "2")
    with panel_server(free_port, serve_command(free_port), "panel-serve-cluster.log") as server:
        page.goto(server.url)
        expect(page.get_by_text(f"Measuring on the Dask cluster {address}: 2 worker(s)")
               ).to_be_visible(timeout=60_000)
        expect(page.locator(".bk-Figure")).to_have_count(4, timeout=60_000)
        for label, value in (("or any N", 3), ("Horizon", 6)):
            box = page.locator(".bk-input-group", has_text=label).locator("input").first
            box.fill(str(value))
            box.press("Enter")
        page.get_by_role("button", name="Run", exact=True).click()
        expect(page.get_by_text(re.compile(r"Run finished: 2 of 2"))).to_be_visible(
            timeout=120_000)
        rows = Store(server.db).rows()
    names = {str(w["name"]) for w in client.scheduler_info()["workers"].values()}
    assert list(rows["status"]) == ["ok", "ok"] and set(rows["worker"]) <= names


@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5"])
def test_a_bad_per_host_in_the_environment_is_one_line(monkeypatch, value):
    from explorer.testing import settings_from_environment  # noqa: PLC0415

    monkeypatch.setenv("PYTREE_EXPLORER_SCHEDULER", "tcp://127.0.0.1:1")
    monkeypatch.setenv("PYTREE_EXPLORER_PER_HOST", value)
    with pytest.raises(ValueError, match=r"^PYTREE_EXPLORER_PER_HOST must be a whole number") \
            as err:
        settings_from_environment()
    assert "\n" not in str(err.value) and repr(value) in str(err.value)
    monkeypatch.setenv("PYTREE_EXPLORER_PER_HOST", " 3 ")
    monkeypatch.delenv("PYTREE_EXPLORER_WORKER_MEMORY", raising=False)
    assert settings_from_environment() == {"scheduler": "tcp://127.0.0.1:1", "per_host": 3,
                                           "worker_memory_gib": None}
