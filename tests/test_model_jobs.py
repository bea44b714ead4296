"""A page's jobs without a browser: refusals and cancels as the status line says them, program
requests that ask before compiling and never hold another page's Run, and the executor protocol
the job queue talks to. Sizes are tiny except where a slow compile is the point."""

from __future__ import annotations

import concurrent.futures as cf
import time

import pytest

import explorer
from explorer import ExplorerModel
from explorer.testing import PROGRAM_LABEL, JobExecutor, JobPlace, program_cost, progress_text

TINY = dict(problem="decay", n_states=3, horizon=5, target="loss")
WAIT_S = 300


@pytest.fixture
def model(tmp_path, executor):
    m = ExplorerModel(store=tmp_path / "results.sqlite", executor=executor, **TINY)
    yield m
    m.close()
    m.wait(WAIT_S)


def _wait_until(predicate, timeout: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _row(**fields):
    return {"problem": "decay", "representation": "dict", "horizon": 200, "target": "grad",
            "unroll": 1, "backend": "cpu", **fields}


# -- refusals ---------------------------------------------------------------------------

def test_run_pressed_again_with_the_same_bad_input_says_so_and_a_fix_clears_it(model):
    """The second refusal is a new status line (a page whose browser wrote "queued" over the
    first gets the refusal again), and fixing the input takes the refusal and its alert away."""
    controls, session = model.controls, model.session
    controls.n_states = 0
    assert not model.run()
    first = session.status
    assert first.startswith("Run not started: ") and "n_states" in first
    assert not model.run()
    assert session.status != first and "again" in session.status and "n_states" in session.status
    assert session.alert.startswith("Bad input") and session.alert_kind == "danger"
    controls.n_states = 3
    assert session.alert == "" and "not started" not in session.status, session.status
    # A value only Run checks (no representation ticked): its refusal goes when one is ticked.
    controls.representations = []
    assert not model.run() and "representation" in controls.input_error
    controls.representations = ["array"]
    assert controls.input_error == "" and session.alert == ""
    assert not model.jobs.running


def test_after_cancel_the_status_goes_from_cancelling_to_cancelled(model):
    model.controls.param.update(representations=["dict"], n_states=1000, horizon=200,
                                target="grad")
    seen: list[str] = []
    model.session.param.watch(lambda e: seen.append(e.new), "status")
    assert model.run()
    assert _wait_until(lambda: "stage" in model.session.status, 120), model.session.status
    model.cancel()
    assert model.wait(120)
    after = seen[seen.index("Cancelling…") + 1:]
    assert after and all("stage" not in s and "waiting" not in s for s in after), after
    assert "cancelled" in after[-1]


# -- program requests -------------------------------------------------------------------

def test_program_cost_says_what_was_measured_like_it():
    import pandas as pd

    frame = pd.DataFrame([
        _row(n_states=1000, status="ok", trace_s=1.0, lower_s=2.0, compile_s=14.8,
             source="measured", finished_at=1.0),
        _row(n_states=10000, status="ok", trace_s=10.0, lower_s=20.0, compile_s=300.0,
             source="measured", finished_at=2.0),
        _row(n_states=3000, status="cancelled", source="measured", finished_at=3.0),
        # another machine's (the shipped example) says nothing about this one's cost
        _row(n_states=2000, status="ok", trace_s=1, lower_s=1, compile_s=1, source="example",
             finished_at=0.0),
    ])
    note = program_cost(_row(n_states=3000, status="cancelled"), frame)
    assert "never measured" in note and "compiles it first" in note
    assert "N=1,000 took 17.8 s" in note and "3× as many states: expect longer" in note
    assert "N=10,000 took 330.0 s: expect less" in note and "N=2,000" not in note
    unknown = program_cost(_row(n_states=3000, status="timeout", representation="ravel"), frame)
    assert "cost is unknown" in unknown and "minutes" in unknown


def test_programs_of_a_row_never_measured_wait_for_the_users_go(model):
    store = model.store
    row_id = store.add(_row(n_states=3, horizon=5, target="loss", status="cancelled",
                            error="WorkerCancelled: cancelled"), None)
    assert model.refresh() == 1
    programs = model.programs
    programs.selected = row_id
    assert model.inspect() is False  # nothing compiles yet
    assert programs.confirm["row_id"] == row_id
    assert "never measured" in programs.confirm["message"]
    assert not model.jobs.busy and programs.program == {}
    programs.selected = None  # another row: the go asked for is withdrawn
    assert programs.confirm == {}
    programs.selected = row_id
    assert model.inspect() is False
    assert programs.confirm_inspect() and model.wait(WAIT_S)
    assert "scan" in programs.program.get("jaxpr", ""), (model.session.status, model.session.alert)
    assert programs.confirm == {}
    assert "Programs of" in model.session.status


@pytest.mark.slow
def test_programs_of_a_big_case_never_hold_another_pages_run(tmp_path, executor):
    """Page a asks for the programs of a dict N=1000 case (seconds of compile); page b presses
    Run meanwhile: b's row is measured and shown before a's programs arrive (a's job gives way
    and starts again after), and a still gets them."""
    big = dict(problem="decay", n_states=1000, horizon=200, target="loss")
    a = ExplorerModel(store=tmp_path / "a.sqlite", executor=executor, **big,
                      representations=["dict"])
    b = ExplorerModel(store=tmp_path / "b.sqlite", executor=executor, **TINY,
                      representations=["array"])
    seen: list[str] = []
    a.session.param.watch(lambda e: seen.append(e.new), "status")
    try:
        row_id = a.store.add(_row(**big, representation="dict", status="timeout"), None)
        a.refresh()
        assert not a.inspect(row_id) and a.programs.confirm_inspect()
        assert _wait_until(lambda: (executor.status.running or "").startswith(
            PROGRAM_LABEL + "inspect"), 120), executor.status
        time.sleep(1.0)  # well into its compile
        assert b.run() and b.wait(WAIT_S)
        rows = b.results.frame.query("source == 'measured'")
        assert list(rows["status"]) == ["ok"], rows["error"].tolist()
        assert a.programs.program == {}, "b's Run waited for a's programs"
        assert a.wait(WAIT_S) and a.programs.program["jaxpr"].startswith("let")
        assert any("let another job run first" in s for s in seen), seen
    finally:
        a.close()
        b.close()


# -- the executor protocol --------------------------------------------------------------

class _Cluster(cf.ThreadPoolExecutor):
    """An executor of the caller's that follows the protocol: jobs run in threads here, and it
    says they run on a cluster."""

    parallel = 2

    def __init__(self) -> None:
        super().__init__(2)

    def submit_with(self, fn, args=(), *, timeout="default", label=None):
        return self.submit(fn, *args)

    def cancel(self, future):
        return future.cancel()

    def describe(self):
        return "Measuring on a test cluster of 2 threads."

    def place(self, future):
        return JobPlace(position=None if future.done() else 0, remote=True)


def test_the_job_queue_asks_the_executor_not_its_class(tmp_path):
    worker = explorer.WorkerExecutor()
    try:
        assert isinstance(worker, JobExecutor) and worker.describe() is None
        assert worker.place(cf.Future()) == JobPlace()
    finally:
        worker.shutdown()
    assert not isinstance(cf.ThreadPoolExecutor(1), JobExecutor)
    assert progress_text(None) == "running"
    assert progress_text(JobPlace(position=2, running="dict N=9")) == (
        "waiting in the shared queue, position 2 (running now: dict N=9)")
    cluster = _Cluster()
    m = ExplorerModel(store=tmp_path / "c.sqlite", executor=cluster, **TINY,
                      representations=["array", "struct"])
    seen: list[str] = []
    m.session.param.watch(lambda e: seen.append(e.new), "status")
    try:
        assert m.jobs.where == "Measuring on a test cluster of 2 threads."
        assert m.run() and m.wait(WAIT_S)
        frame = m.results.frame.query("source == 'measured'")
        assert sorted(frame["representation"]) == ["array", "struct"]
        assert set(frame["status"]) == {"ok"}, frame[["status", "error"]]
        assert any("on the cluster" in s for s in seen), seen
    finally:
        m.close()
        m.wait(WAIT_S)
        cluster.shutdown()


# -- what the controls offer ------------------------------------------------------------

def _leak(s, p):
    return {k: s[k] * (1.0 - p["k" + k[1:]]) for k in s}


def test_a_problem_without_grouped_steps_is_offered_only_what_it_can_run(tmp_path, executor):
    """Defined with a per-name step only: module, struct and named are not offered (they were,
    and were refused by the worker seconds after Run), in the sidebar nor in Compare."""
    explorer.define_problem("leak_per_name", _leak,
                            lambda n: {f"x_{i}": 1.0 + i for i in range(n)},
                            lambda n: {f"k_{i}": 0.1 for i in range(n)})
    m = ExplorerModel(store=tmp_path / "r.sqlite", executor=executor, **TINY,
                      representations=["dict", "struct"])
    try:
        controls, programs = m.controls, m.programs
        assert "struct" in controls.param.representations.objects
        controls.problem = "leak_per_name"
        offered = controls.param.representations.objects
        assert not {"module", "struct", "named"} & set(offered), offered
        assert "dict" in offered and controls.representations == ["dict"]
        assert programs.param.compare_b.objects == offered
        assert programs.compare_b in offered and programs.compare_a == "dict"
        with pytest.raises(ValueError):
            controls.representations = ["named"]
        assert m.run() and m.wait(WAIT_S)
        frame = m.results.frame.query("source == 'measured'")
        assert list(frame["status"]) == ["ok"], frame["error"].tolist()
        controls.problem = "decay"
        assert "struct" in controls.param.representations.objects
    finally:
        m.close()
        m.wait(WAIT_S)


def test_an_update_handed_over_before_the_page_closed_is_dropped(tmp_path, executor):
    """A job's update posted just before the session ended runs after it (on the page's loop):
    it is dropped instead of touching the gone page's document."""
    m = ExplorerModel(store=tmp_path / "r.sqlite", executor=executor, **TINY)
    handed: list = []
    m.session.dispatch = handed.append  # the loop's next turn, run by hand below
    ran: list[str] = []
    m.session.post(lambda: ran.append("before close"))
    m.close()
    for fn in handed:
        fn()
    assert ran == [] and m.wait(WAIT_S)


# -- a run of several cases on a page: one redraw of the other plots, at its end --------------

def _measured(m) -> int:
    frame = m.results.frame
    return 0 if frame is None else int((frame["source"] == "measured").sum())


def _draws(m) -> list:
    """(query, measured rows shown) for every redraw of ``m``'s plots, in order."""
    drawn: list = []
    m.view.param.watch(lambda *events: drawn.extend((e.name, _measured(m)) for e in events),
                       ["compile_query", "metrics_query", "rollout_query"])
    return drawn


def test_held_redraws_draw_the_compile_plot_per_result_and_the_rest_once(tmp_path, executor):
    m = ExplorerModel(store=tmp_path / "r.sqlite", executor=executor, **TINY)
    try:
        queue: list = []
        m.session.dispatch = queue.append  # the page's event loop, run by hand

        def turns() -> None:
            while queue:
                fns = list(queue)
                queue.clear()
                for fn in fns:
                    fn()

        drawn = _draws(m)
        row = _row(horizon=5, target="loss", status="ok", compile_s=0.1)
        m.results.add_row(dict(row, n_states=3))
        turns()  # not held: every plot a new result changes
        assert drawn == [("compile_query", 1), ("metrics_query", 1)]
        m.view.hold_redraws()
        for n in (4, 5):
            m.results.add_row(dict(row, n_states=n))
            turns()
        assert drawn[2:] == [("compile_query", 2), ("compile_query", 3)]
        m.view.stage = "trace"  # the user's change: what it asks, and what was held
        turns()
        assert drawn[4:] == [("compile_query", 3), ("metrics_query", 3)]
        m.results.add_row(dict(row, n_states=6))
        turns()
        m.results.show_example = not m.results.show_example  # the user's too: never held
        turns()
        assert drawn[6:] == [("compile_query", 4), ("compile_query", 4), ("metrics_query", 4)]
        m.results.add_row(dict(row, n_states=7))
        turns()
        assert drawn[9:] == [("compile_query", 5)]
        m.view.release_redraws()
        turns()
        assert drawn[10:] == [("metrics_query", 5)]
        assert m.view.metrics_query["frame"] is m.results.frame  # the plots read the newest
        m.results.add_row(dict(row, n_states=8))  # released: every plot again
        turns()
        assert drawn[11:] == [("compile_query", 6), ("metrics_query", 6)]
    finally:
        m.close()


@pytest.mark.slow
def test_a_sweep_on_a_page_draws_the_other_plots_once_before_it_says_finished(tmp_path,
                                                                              executor):
    """On a page (a loop that runs what is posted), a sweep of four cases redraws the
    compile-time plot after each, and the size, runtime and rollout plots once, with every row
    and trajectory in, before the status says the sweep finished."""
    import queue as queue_
    import threading

    m = ExplorerModel(store=tmp_path / "r.sqlite", executor=executor, **TINY)
    posted: queue_.Queue = queue_.Queue()
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                fn = posted.get(timeout=0.05)
            except queue_.Empty:
                continue
            fn()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        m.session.dispatch = posted.put
        drawn = _draws(m)
        m.session.param.watch(
            lambda e: drawn.append(("finished", _measured(m))) if "finished" in e.new else None,
            "status")
        m.controls.representations = ["dict", "array"]
        m.controls.sweep_n_states = [1, 3]
        assert m.sweep()
        assert _wait_until(lambda: drawn and drawn[-1][0] == "finished", 120), drawn
        assert "Sweep finished: 4 of 4" in m.session.status
        assert drawn == [("compile_query", k) for k in (1, 2, 3, 4)] + [
            ("metrics_query", 4), ("rollout_query", 4), ("finished", 4)], drawn
        assert set(m.view.rollout_query["data"]) == {"dict", "array"}
    finally:
        stop.set()
        m.close()
        m.wait(WAIT_S)
        thread.join(5)
