"""The dashboard's model without a browser: set params, run through a real worker, look at the
results and at the plot objects. Sizes are tiny so a case takes well under a second."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import holoviews as hv
import pandas as pd
import pytest

import explorer
from explorer import Store
from explorer import ExplorerModel
from explorer.testing import ROLLOUT_MAX_N

TINY = dict(problem="decay", n_states=3, horizon=5, target="loss")
WAIT_S = 180


@pytest.fixture
def model(tmp_path, executor):
    m = ExplorerModel(store=tmp_path / "results.sqlite", executor=executor, **TINY)
    yield m
    m.close()
    m.wait(WAIT_S)


def _labels(overlay) -> list[str]:
    return [el.label for el in overlay if isinstance(el, hv.Curve)]


def _measured(m: ExplorerModel):
    frame = m.results.frame
    return frame[frame["source"] == "measured"]


def _wait_until(predicate, timeout: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_first_view_is_the_shipped_example_labelled_with_its_machine(model):
    frame = model.results.frame
    assert not frame.empty and set(frame["source"]) == {"example"}
    assert model.results.show_example
    assert (frame["id"] < 0).all()  # never clashes with stored ids
    # The table shows no negative id: the example's rows have a blank one (their source says
    # "example"); its hidden key still tells every row apart.
    table = model.results.table()
    assert set(table.loc[table["source"] == "example", "id"]) == {""}
    assert table["key"].is_unique and (table["key"] < 0).all()
    first = frame.iloc[0]
    assert first["host"] in model.results.example_label
    assert first["jax_version"] in model.results.example_label
    model.controls.param.update(n_states=100, horizon=200)  # the example's horizon
    labels = _labels(model.view.compile_plot())
    assert any(label.startswith("dict k=") for label in labels)
    # The example ships rollouts at N=10: the rollout plot shows them at once.
    assert _labels(model.view.rollout_plot())
    assert model.view.rollout_states


def test_stored_rows_replace_the_example_on_load(tmp_path, executor):
    store = Store(tmp_path / "results.sqlite")
    store.add({"problem": "decay", "representation": "array", "n_states": 3, "horizon": 5,
               "target": "loss", "unroll": 1, "status": "ok", "compile_s": 0.1, "trace_s": 0.01,
               "lower_s": 0.01, "backend": "cpu"})
    m = ExplorerModel(store=store, executor=executor)
    try:
        assert not m.results.show_example
        assert list(m.results.frame["source"]) == ["measured"]
        # The page opens on the slice of the latest stored row, so its plots are not empty.
        assert (m.controls.horizon, m.controls.n_states, m.view.show_target) == (5, 3, "loss")
        assert [label.split(" ")[0] for label in _labels(m.view.compile_plot())] == ["array"]
        m.results.show_example = True
        assert {"example", "measured"} == set(m.results.frame["source"])
    finally:
        m.close()


def _stored_loss_rows(store: Store, sizes=(10, 30, 100)) -> None:
    for n in sizes:
        store.add({"problem": "decay", "representation": "dict", "n_states": n, "horizon": 200,
                   "target": "loss", "unroll": 1, "status": "ok", "compile_s": 0.01 * n,
                   "trace_s": 0.01, "lower_s": 0.01, "backend": "cpu", "hlo_pre_bytes": 100 * n,
                   "run_s": 1e-4, "finished_at": float(n)})


def test_a_row_without_text_where_others_have_it_reads_blank_not_nan(tmp_path, executor):
    """A cancelled row has no host, JAX version or device kind; beside measured rows that do,
    its cells read blank (the browser's table wrote "NaN" for them)."""
    store = Store(tmp_path / "r.sqlite")
    store.add({"problem": "decay", "representation": "array", "n_states": 3, "horizon": 5,
               "target": "loss", "unroll": 1, "status": "ok", "compile_s": 0.1,
               "host": "lab-7", "jax_version": "0.10.2", "finished_at": 1.0}, None)
    store.add({"problem": "decay", "representation": "array", "n_states": 1, "horizon": 4,
               "target": "loss", "unroll": 1, "backend": "cpu", "status": "cancelled",
               "error": "WorkerCancelled: cancelled", "finished_at": 2.0}, None)
    m = ExplorerModel(store=store, executor=executor)
    try:
        table = m.results.table()
        cancelled = table[table["status"] == "cancelled"].iloc[0]
        assert cancelled["host"] == "" and cancelled["jax_version"] == ""
        assert table[table["status"] == "ok"].iloc[0]["host"] == "lab-7"
        assert pd.isna(cancelled["compile_s"])  # a missing figure stays missing (shown as "-")
    finally:
        m.close()


def test_example_lines_stay_lighter_and_labelled_once_anything_is_measured(tmp_path, executor):
    """Loss rows measured, target switched to grad (only the example has grad rows): its lines
    are still the lighter ones labelled "example", as beside the measured lines."""
    store = Store(tmp_path / "results.sqlite")
    _stored_loss_rows(store)
    m = ExplorerModel(store=store, executor=executor, representations=["dict"])
    try:
        m.results.show_example = True
        for target in ("loss", "grad"):
            m.view.show_target = target
            plot = m.view.compile_plot()
            labels = _labels(plot)
            assert any(label.startswith("dict example") for label in labels), (target, labels)
            (points,) = [el.dframe() for el in plot if isinstance(el, hv.Scatter)]
            example = points[points["line"].str.startswith("dict example")]
            assert len(example) and (example["alpha"] < 1).all(), target
    finally:
        m.close()


def test_the_example_can_be_asked_for_whatever_the_store_holds(tmp_path, executor):
    """``show_example=True`` (the page's ``?example=true``) opens on the example's case, ticked,
    even on a store with rows of another case: the teaching demo's first step shows it."""
    store = Store(tmp_path / "results.sqlite")
    store.add({"problem": "lotka_volterra", "representation": "array", "n_states": 3,
               "horizon": 7, "target": "grad", "unroll": 1, "status": "ok", "compile_s": 0.1,
               "trace_s": 0.01, "lower_s": 0.01, "backend": "cpu"})
    m = ExplorerModel(store=store, executor=executor, show_example=True)
    try:
        example = m.results.frame.query("source == 'example'").iloc[0]
        assert m.results.show_example
        assert (m.controls.problem, m.controls.horizon, m.view.show_target) == (
            example["problem"], example["horizon"], example["target"])
        labels = _labels(m.view.compile_plot())
        assert any(label.startswith("dict example") for label in labels), labels
        assert any(label.startswith("array example") for label in labels), labels
    finally:
        m.close()


def test_a_store_without_a_measurement_opens_on_the_example_and_says_so_in_lines(tmp_path,
                                                                               executor):
    """Only a cancelled row stored: nothing was measured, so the example is shown (the page was
    empty); a plot with nothing to show says why in lines that fit it."""
    store = Store(tmp_path / "results.sqlite")
    store.add({"problem": "decay", "representation": "dict", "n_states": 3000, "horizon": 200,
               "target": "grad", "unroll": 1, "status": "cancelled", "backend": "cpu"})
    m = ExplorerModel(store=store, executor=executor)
    try:
        assert m.results.show_example
        m.controls.representations = ["ravel"]
        m.controls.horizon = 7  # nothing there: every plot says so
        for plot in m.view.plots():
            (text,) = [el for el in plot if isinstance(el, hv.Text)]
            assert all(len(line) <= 56 for line in text.text.splitlines()), text.text
    finally:
        m.close()


def test_run_measures_stores_and_plots(model):
    model.controls.representations = ["dict", "array"]
    assert model.run()
    assert model.jobs.running
    assert model.wait(WAIT_S)
    rows = _measured(model)
    assert sorted(rows["representation"]) == ["array", "dict"]
    assert set(rows["status"]) == {"ok"}, rows[["status", "error"]]
    assert (rows["compile_s"] > 0).all() and (rows["hlo_pre_bytes"] > 0).all()
    assert not model.jobs.running and "finished" in model.session.status
    assert model.session.alert == ""
    stored = model.store.rows()
    assert sorted(stored["id"]) == sorted(rows["id"])

    model.results.show_example = False
    for plot in (model.view.compile_plot(), model.view.size_plot(), model.view.runtime_plot()):
        labels = _labels(plot)
        assert any(label.startswith("dict") for label in labels), labels
        assert any(label.startswith("array") for label in labels), labels
    # Rollouts are captured below the cap and drawn one curve set per representation.
    assert model.controls.n_states <= ROLLOUT_MAX_N
    rollout_labels = set(_labels(model.view.rollout_plot()))
    assert rollout_labels == {"dict", "array"}
    assert model.view.rollout_states == ["state_0", "state_1", "state_2"]
    # Only ticked representations are drawn; a ticked one without a trajectory is named.
    model.controls.representations = ["dict"]
    assert set(_labels(model.view.rollout_plot())) == {"dict"}
    for plot in (model.view.compile_plot(), model.view.size_plot(), model.view.runtime_plot()):
        assert all(label.startswith("dict") for label in _labels(plot)), _labels(plot)
    model.controls.representations = ["dict", "struct"]
    assert "No trajectory at N=3 for: struct" in model.view.rollout_note
    model.controls.representations = ["dict", "array"]
    # The trajectories came in a job of their own, after the row, and are stored with it.
    for row_id in rows["id"]:
        names, data = model.store.rollout(int(row_id))
        assert names == ["state_0", "state_1", "state_2"] and data.shape == (5, 3)
    assert b"compile_s" in model.results.csv_bytes().splitlines()[0]


def test_a_case_measured_again_keeps_its_trajectories_until_the_new_ones_arrive(tmp_path,
                                                                               executor):
    """A Run of a case measured before: its new row comes first, its trajectories a moment
    later. Meanwhile the rollout plot keeps the case's earlier trajectories (the same numbers)
    instead of dropping its line and saying it has none; then it shows the new row's."""
    import numpy as np

    from explorer.testing import load_example

    frame, rollouts = load_example()
    case = frame[frame["id"].isin(list(rollouts))].iloc[0]
    names, values = rollouts[int(case["id"])]
    m = ExplorerModel(store=tmp_path / "results.sqlite", executor=executor,
                      problem=case["problem"], n_states=int(case["n_states"]),
                      horizon=int(case["horizon"]), target=case["target"],
                      representations=[case["representation"]])
    m.results.show_example = False
    rep = case["representation"]
    row = {k: (None if isinstance(v, float) and v != v else v)
           for k, v in case.drop(["id", "source"]).to_dict().items()}
    try:
        for run, scale in ((1, 1.0), (2, 2.0)):
            m.results.add_row(dict(row, finished_at=time.time() + run))  # the row comes...
            assert len(_measured(m)) == run
            if run == 2:  # ...the case's earlier trajectories stay meanwhile
                assert rep in m.view._rollout_data, m.view.rollout_note
                assert "No trajectory" not in m.view.rollout_note
                assert np.array_equal(m.view._rollout_data[rep][1], values)
            new_id = int(_measured(m)["id"].max())  # ...then its trajectories
            m.results.add_rollout(new_id, (list(names), np.asarray(values) * scale))
            m.view.refresh_rollouts()
            assert np.array_equal(m.view._rollout_data[rep][1], np.asarray(values) * scale)
            assert _labels(m.view.rollout_plot()) == [rep]
    finally:
        m.close()


def test_bad_input_shows_an_alert_and_never_raises(model):
    for change, word in ((dict(n_states=20_000), "n_states"), (dict(n_states=0), "n_states"),
                         (dict(horizon=0), "horizon"), (dict(representations=[]), "representation"),
                         (dict(unroll=0), "unroll"), (dict(n_states=None), "n_states"),
                         (dict(timeout_s=0.0), "timeout")):
        with model.controls.param.update(**change):
            assert model.run() is False
            assert word in model.session.alert and model.session.alert_kind == "danger"
            assert not model.jobs.running
    model.controls.sweep_n_states = []
    assert model.sweep() is False and "state count" in model.session.alert
    assert model.inspect(row_id=123456) is False and model.session.alert
    assert _measured(model).empty


@pytest.mark.slow
def test_cancel_stops_a_long_run_and_the_worker_serves_the_next(model):
    model.controls.param.update(representations=["dict"], n_states=1000, horizon=200,
                                target="grad")
    assert model.run()
    assert _wait_until(lambda: "stage" in model.session.status, 60), model.session.status
    model.cancel()
    assert model.wait(60)
    rows = _measured(model)
    assert list(rows["status"]) == ["cancelled"]
    assert model.session.alert_kind == "info" and "Cancelled" in model.session.alert
    assert "cancelled" in model.session.status
    assert not model.jobs.running and not model.jobs.busy
    # The worker was replaced; the next run works.
    model.controls.param.update(**TINY, representations=["array"])
    assert model.run() and model.wait(WAIT_S)
    assert list(_measured(model)["status"]) == ["cancelled", "ok"]
    # An earlier cancel never stops later work.
    assert model.inspect(int(_measured(model)["id"].iloc[-1])) and model.wait(WAIT_S)
    assert model.programs.program.get("jaxpr") and model.session.alert == ""


@pytest.mark.slow
def test_a_timeout_is_an_alert_and_the_row_is_kept(model):
    model.controls.param.update(representations=["dict"], n_states=1000, horizon=200,
                                target="grad", timeout_s=1.0)
    assert model.run() and model.wait(WAIT_S)
    rows = _measured(model)
    assert list(rows["status"]) == ["timeout"]
    assert model.session.alert_kind == "danger" and "Timed out" in model.session.alert
    assert model.store.rows()["status"].tolist() == ["timeout"]


@pytest.mark.slow
def test_two_models_share_one_queue_and_both_get_their_results(tmp_path, executor):
    a = ExplorerModel(store=tmp_path / "a.sqlite", executor=executor, **TINY,
                      representations=["array"])
    b = ExplorerModel(store=tmp_path / "b.sqlite", executor=executor, **TINY,
                      representations=["struct", "named"])
    try:
        assert a.run() and b.run()
        assert a.wait(WAIT_S) and b.wait(WAIT_S)
        assert list(_measured(a)["representation"]) == ["array"]
        assert sorted(_measured(b)["representation"]) == ["named", "struct"]
        assert set(_measured(a)["status"]) == set(_measured(b)["status"]) == {"ok"}
    finally:
        a.close()
        b.close()


def test_a_session_sees_rows_other_sessions_stored(tmp_path, executor):
    path = tmp_path / "shared.sqlite"
    a = ExplorerModel(store=path, executor=executor, **TINY, representations=["array"])
    b = ExplorerModel(store=path, executor=executor)
    try:
        assert a.run() and a.wait(WAIT_S)
        assert b.refresh() == 1
        assert list(_measured(b)["representation"]) == ["array"]
        assert b.refresh() == 0
    finally:
        a.close()
        b.close()


@pytest.mark.slow
def test_inspect_and_compare_programs(model):
    model.controls.representations = ["dict"]
    assert model.run() and model.wait(WAIT_S)
    programs = model.programs
    programs.selected = int(_measured(model)["id"].iloc[0])
    assert model.inspect() and model.wait(WAIT_S)
    assert "scan" in programs.program["jaxpr"]
    assert ("stablehlo" in programs.program["stablehlo"]
            or "func.func" in programs.program["stablehlo"])
    assert programs.blame_table is not None and int(programs.blame_table["eqns"].sum()) > 0
    programs.param.update(compare_a="module", compare_b="struct")
    assert model.compare() and model.wait(WAIT_S)
    assert programs.comparison["verdict"]
    assert "jaxpr_diff" in programs.comparison and model.session.alert == ""
    assert programs.comparison["same_hlo"]  # module and struct: the same program to XLA
    assert programs.comparison["op_summary"] == "" and programs.comparison["distinct"] == ()
    programs.param.update(compare_a="dict", compare_b="array")
    assert model.compare() and model.wait(WAIT_S)
    dict_line, array_line = programs.comparison["op_summary"].splitlines()
    assert dict_line.startswith("dict: ") and array_line.startswith("array: ")
    assert programs.comparison["distinct"] and programs.comparison["labels"] == ("dict", "array")


def test_backends_come_from_the_worker(model):
    controls = model.controls
    assert _wait_until(lambda: controls.backends_known, 60)
    assert "cpu" in controls.param.backend.objects
    assert controls.backend in controls.param.backend.objects


@pytest.mark.slow
def test_export_html_is_standalone(model):
    html = model.html_bytes()
    assert html.startswith(b"<!DOCTYPE html>") or b"<html" in html[:500]
    assert b"Bokeh" in html and b"cdn.bokeh.org" not in html


def test_export_html_names_no_stylesheet_or_script_to_fetch(tmp_path):
    """In a process with Panel's Tabulator loaded (as a served page), Bokeh lists Tabulator's
    stylesheet (on cdn.holoviz.org from a served page): the plots' export leaves it out."""
    out = tmp_path / "plots.html"
    code = ("import panel as pn, sys; pn.extension('tabulator'); "
            "from explorer.testing import load_example; import explorer.plots as p; "
            "frame = load_example()[0]; "
            "open(sys.argv[1], 'wb').write(p.export_html([p.compile_time_plot(frame, "
            "problem='decay', horizon=200, target='loss')]))")
    subprocess.run([sys.executable, "-c", code, str(out)], check=True, timeout=300)
    html = out.read_text(encoding="utf-8")
    assert "Bokeh.embed" in html
    fetched = re.findall(r'<(?:link|script)\b[^>]*\b(?:href|src)="([^"]+)"', html)
    assert fetched == [], fetched


def test_default_backend_is_the_accelerator_once_the_worker_answers(tmp_path, executor,
                                                                   monkeypatch):
    import concurrent.futures as cf

    from explorer.testing import backend_jobs

    answer = cf.Future()
    monkeypatch.setitem(backend_jobs, executor, answer)
    m = ExplorerModel(store=tmp_path / "a.sqlite", executor=executor)
    other = ExplorerModel(store=tmp_path / "b.sqlite", executor=executor)
    try:
        c = m.controls
        assert c.backend == "cpu" and not c.backends_known  # shown before the worker answers
        answer.set_result(["cpu", "gpu"])
        assert c.backend == "gpu" and c.param.backend.objects == ["cpu", "gpu"]
        assert other.controls.backend == "gpu"  # every session gets the one answer
        c.backend = "cpu"
        assert c.backend == "cpu"
    finally:
        m.close()
        other.close()


def test_pages_showing_the_same_results_share_their_plots(tmp_path, executor):
    db = tmp_path / "r.sqlite"
    a = ExplorerModel(store=db, executor=executor, n_states=100, horizon=200)
    b = ExplorerModel(store=db, executor=executor, n_states=100, horizon=200)
    try:
        for name in ("compile_plot", "size_plot", "runtime_plot", "rollout_plot"):
            # built once, drawn twice
            assert getattr(a.view, name)() is getattr(b.view, name)(), name
        b.view.stage = "all stages"
        assert a.view.compile_plot() is not b.view.compile_plot()
        assert len(_labels(b.view.compile_plot())) == 3 * len(_labels(a.view.compile_plot()))
        b.results.show_example = False  # other results: other plots, never a stale one
        assert a.view.size_plot() is not b.view.size_plot()
        assert any(isinstance(el, hv.Text) for el in b.view.size_plot())  # "no measurements here"
    finally:
        a.close()
        b.close()


def test_redraws_wait_for_the_page_and_changes_that_come_together_draw_once(tmp_path, executor):
    m = ExplorerModel(store=tmp_path / "r.sqlite", executor=executor)
    try:
        queue: list = []
        m.session.dispatch = queue.append  # the page's event loop, run by hand

        def turn() -> None:
            fns = list(queue)
            queue.clear()
            for fn in fns:
                fn()

        drawn: list[str] = []  # every query set is one redraw of the plots that read it
        m.view.param.watch(lambda e: drawn.append(e.name), ["compile_query", "metrics_query"])
        m.view.stage = "trace"
        m.view.stage = "lower"
        m.controls.horizon = 100
        assert drawn == []  # nothing redrawn yet: the widget's own answer goes first
        assert m.view.compile_query["stage"] == "total"
        turn()
        # The compile-time plot first, on its own turn, once for the three changes...
        assert drawn == ["compile_query"]
        assert m.view.compile_query["stage"] == "lower"
        assert m.view.compile_query["filters"]["horizon"] == 100
        assert m.view.metrics_query["filters"]["horizon"] == 200
        turn()
        # ...the other plots on the next one.
        assert drawn == ["compile_query", "metrics_query"]
        assert m.view.metrics_query["filters"]["horizon"] == 100
        assert "(decay, H=100, loss)" in m.view.compile_plot().opts.get().kwargs["title"]
    finally:
        m.close()


def test_an_invalid_horizon_keeps_the_plots_and_says_why(model):
    def drawn():
        return model.view.compile_query["filters"]["horizon"]

    assert drawn() == 5
    model.controls.horizon = 0
    assert drawn() == 5  # nothing redrawn for a value no row can have
    assert "horizon" in model.session.alert and model.session.alert.startswith("Bad input")
    assert "horizon" in model.session.status
    # (the page draws only when a query changes: the plots on it stay as they were)
    model.controls.horizon = None
    assert drawn() == 5 and "horizon" in model.session.status
    model.controls.horizon = 200
    assert drawn() == 200 and model.session.alert == ""


def test_parameters_given_by_name_go_to_their_part(tmp_path, executor):
    m = ExplorerModel(store=tmp_path / "r.sqlite", executor=executor, n_states=7, stage="trace",
                      compare_a="struct")
    try:
        assert (m.controls.n_states, m.view.stage, m.programs.compare_a) == (7, "trace", "struct")
    finally:
        m.close()
    with pytest.raises(ValueError, match="unknown parameter.*n_state"):
        ExplorerModel(store=tmp_path / "r.sqlite", executor=executor, n_state=7)


def test_rows_that_arrive_while_the_page_is_busy_are_added_in_one_update(tmp_path, executor):
    m = ExplorerModel(store=tmp_path / "r.sqlite", executor=executor)
    try:
        queue: list = []
        m.session.dispatch = queue.append  # the page's event loop, run by hand
        updates: list[int] = []
        m.results.param.watch(lambda e: updates.append(len(e.new)), "frame")
        shown = len(m.results.frame)
        row = {"problem": "decay", "representation": "array", "n_states": 3, "horizon": 5,
               "target": "loss", "unroll": 1, "status": "ok", "compile_s": 0.1}
        m.results.add_row(dict(row))
        m.results.add_row(dict(row, representation="dict"))
        assert updates == [] and len(m.store.rows()) == 2  # stored at once, shown on the page
        while queue:
            queue.pop(0)()
        assert updates == [shown + 2]  # both rows, one redraw
    finally:
        m.close()


def test_before_inspecting_a_row_the_page_says_what_it_is_and_how_big():
    from explorer.testing import LARGE_EQNS
    from explorer.testing import before_inspecting as _before_inspecting

    small = {"status": "ok", "jaxpr_eqns": 120, "n_states": 10}
    assert _before_inspecting(1, small) == ""
    cancelled = _before_inspecting(7, {"status": "cancelled", "jaxpr_eqns": None,
                                       "n_states": 3000})
    assert "Row 7 is cancelled" in cancelled and "unknown" in cancelled
    assert "Cancel stops it" in cancelled
    huge = _before_inspecting(2, {"status": "ok", "jaxpr_eqns": LARGE_EQNS + 1, "n_states": 5})
    assert f"{LARGE_EQNS + 1:,} jaxpr equations" in huge and "Row" not in huge


def test_bad_input_is_said_next_to_the_fields_and_in_the_status(model):
    controls = model.controls
    assert controls.input_error == ""
    controls.horizon = 0
    assert "horizon" in controls.input_error
    controls.horizon = 5
    assert controls.input_error == ""
    controls.n_states = 20000
    assert "n_states" in controls.input_error
    assert not model.run()
    assert "n_states" in controls.input_error and model.session.status.startswith(
        "Run not started: ")
    controls.n_states = 3
    assert controls.input_error == ""


def test_compare_runs_puts_two_jax_versions_side_by_side(tmp_path, executor):
    """Rows of the same cases under two JAX versions: the Compare runs part finds both groups
    and gives the ratios b / a (rows written as another interpreter's worker would)."""
    import explorer.plots as plots  # noqa: PLC0415
    from explorer import ExplorerModel  # noqa: PLC0415

    store = explorer.Store(tmp_path / "r.sqlite")
    for version, compile_s in (("0.10.2", 1.0), ("0.12.0", 3.0)):
        for rep, n in (("dict", 10), ("dict", 30), ("array", 10)):
            store.add({"problem": "decay", "representation": rep, "n_states": n, "horizon": 50,
                       "target": "loss", "unroll": 1, "status": "ok", "jax_version": version,
                       "trace_s": 0.1, "lower_s": 0.1, "compile_s": compile_s * n / 10,
                       "hlo_pre_bytes": 1000 * n, "run_s": 1e-4, "finished_at": 1.0})
    m = ExplorerModel(store=store, executor=executor)
    try:
        runs = m.runs
        assert runs.param.runs_a.objects == ["0.10.2", "0.12.0"]
        assert (runs.runs_a, runs.runs_b) == ("0.10.2", "0.12.0")
        table = runs.runs_table
        assert len(table) == 3 and set(table["compile_s_ratio"]) == {3.0}
        assert set(table["hlo_pre_bytes_ratio"]) == {1.0}
        assert "3 case(s)" in runs.runs_message and "compile time: 3.00×" in runs.runs_message
        runs.runs_b = "0.10.2"  # the same group twice
        assert runs.runs_table is None and "two different" in runs.runs_message
        runs.runs_by = "host"  # one value only: said, not a traceback
        assert runs.runs_table is None and "value(s) of host" in runs.runs_message
        runs.runs_by = "jax_version"
        plot = plots.run_ratio_plot(runs.runs_table, "compile_s")
        assert {el.label for el in plot if isinstance(el, hv.Curve)} == {"dict", "array"}
    finally:
        m.close()


def test_a_page_has_its_case_built_ahead_while_the_worker_is_idle(tmp_path, executor):
    """Once the worker has answered, and again when N changes, the page's case is built in the
    idle worker (explorer.testing.prepare): asking again finds nothing left to do."""
    from explorer import testing as _run

    executor.submit(int, 0).result()  # idle, as a page usually finds it (else it builds nothing)
    m = ExplorerModel(store=tmp_path / "p.sqlite", executor=executor, problem="lotka_volterra",
                      n_states=17, horizon=11)
    try:
        controls = m.controls
        assert _wait_until(lambda: controls.backends_known, 60)

        def built(n: int) -> bool:
            executor.submit(int, 0).result()  # after anything queued before it
            return _run.prepare(executor, controls.specs([n])) is None

        assert built(17)
        controls.n_states = 19
        assert built(19)
        assert _run.prepare(executor, controls.specs([23])) is not None  # a case not yet built
    finally:
        m.close()


@pytest.mark.slow
def test_a_run_behind_a_case_being_built_ahead_says_so(tmp_path, executor):
    """A Run pressed while the worker builds a case ahead waits for it: the status says the
    worker is preparing, not that the page waits in a shared queue."""
    from _support import sleep

    from explorer import testing as _run

    m = ExplorerModel(store=tmp_path / "q.sqlite", executor=executor, **TINY,
                      representations=["array"])
    seen: list[str] = []
    m.session.param.watch(lambda e: seen.append(e.new), "status")
    try:
        executor.submit(int, 0).result()  # after the page's own build ahead, if it asked for one
        building = executor.submit_with(sleep, (2.0,), label=f"{_run.PREPARING} decay N=3")
        deadline = time.time() + 60
        while executor.status.running is None and time.time() < deadline:
            time.sleep(0.01)
        assert m.run() and m.wait(WAIT_S)
        assert building.done()
        assert any(f"starting: the worker is {_run.PREPARING} decay N=3" in s for s in seen), seen
        assert not any("shared queue" in s for s in seen), seen
        assert "Run finished" in m.session.status
    finally:
        m.close()
