"""The yardstick for the dashboard's speed: the explorer's page written the plain way.

    panel serve benchmarks/plain_page.py --address 127.0.0.1 --allow-websocket-origin 127.0.0.1:5006

The same content as the explorer's served page (``apps/explorer_app.py``) when it opens on an
empty store: the four plots of the shipped example sweep (compile time, program size, rollouts,
runtime, drawn by ``explorer.plots``), a Tabulator of its rows, the same sidebar widgets, the same
template (Panel's ``VanillaTemplate``), the same tabs. Written the way Panel's and HoloViews'
guides write a page, with their public APIs only and no tuning: everything built while the page
is built, the plots in ``pn.pane.HoloViews``; a new result is ``pane.object = new_plot`` (and
``table.value = new_frame``), here when "Load rows stored by others" reads the rows stored in
``$PYTREE_EXPLORER_DB`` since the page opened. ``benchmarks/bench_dashboard.py --ratios`` times
this page and the explorer's, interleaved, and reports the ratios.
"""

from __future__ import annotations

import os

import holoviews as hv
import pandas as pd
import panel as pn

import explorer
import explorer.plots as plots
from explorer._src.store.example import load_example  # the shipped data, as the explorer reads it

pn.extension("tabulator")
hv.extension("bokeh")

N_PRESETS = (1, 3, 10, 30, 100, 300, 1000, 3000, 10000)
CHOSEN = dict(problem="decay", horizon=200, unroll=1, target="loss",
              representations=("dict", "array"))
COLUMNS = ["representation", "n_states", "target", "compile_s", "hlo_pre_bytes", "run_s",
           "status", "source", "id", "problem", "horizon", "unroll", "trace_s", "lower_s",
           "hlo_post_bytes", "jaxpr_eqns", "n_leaves", "backend", "device_kind", "jax_version",
           "host", "error"]

example, example_rollouts = load_example()
example = example.assign(source="example")
store = explorer.Store(os.environ.get("PYTREE_EXPLORER_DB") or explorer.default_path())


def rollouts(frame: pd.DataFrame) -> pd.DataFrame:
    """The example's trajectories at N=100 for the chosen representations, three states each."""
    rows = frame[(frame["problem"] == "decay") & (frame["horizon"] == 200)
                 & (frame["n_states"] == 100) & frame["representation"].isin(
                     CHOSEN["representations"])]
    data = {}
    for record in rows.to_dict("records"):
        found = example_rollouts.get(int(record["id"]))
        if found is not None and record["representation"] not in data:
            data[record["representation"]] = found
    states = None
    if data:
        names = list(next(iter(data.values()))[0])
        states = [names[i] for i in sorted({0, len(names) // 2, len(names) - 1})]
    return plots.rollout_frame(data, states)


def draw(frame: pd.DataFrame) -> list:
    return [plots.compile_time_plot(frame, **CHOSEN), plots.program_size_plot(frame, **CHOSEN),
            plots.rollout_plot(rollouts(frame), title="Rollouts at N=100 (decay, H=200)"),
            plots.runtime_plot(frame, **CHOSEN)]


def table_of(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values("finished_at", ascending=False)[COLUMNS].reset_index(drop=True)


frame = example
panes = [pn.pane.HoloViews(p, sizing_mode="stretch_width", min_height=340) for p in draw(frame)]
table = pn.widgets.Tabulator(table_of(frame), pagination="local", page_size=12, disabled=True,
                             show_index=False, sizing_mode="stretch_width", height=440)
status = pn.pane.Markdown("**Status:** idle", sizing_mode="stretch_width")
seen = {"id": 0}


def load_rows(event) -> None:
    """A new result the plain way: read the new rows, draw the plots again, set each pane."""
    global frame
    new = store.rows(since_id=seen["id"])
    if new.empty:
        return
    seen["id"] = int(new["id"].max())
    frame = pd.concat([frame, new.assign(source="measured")], ignore_index=True)
    for pane, plot in zip(panes, draw(frame)):
        pane.object = plot
    table.value = table_of(frame)
    status.object = f"**Status:** {len(new)} new rows"


w = pn.widgets
run = w.Button(name="Run", button_type="primary", sizing_mode="stretch_width")
cancel = w.Button(name="Cancel", button_type="danger", disabled=True,
                  sizing_mode="stretch_width")
sweep = w.Button(name="Sweep", button_type="primary", button_style="outline",
                 sizing_mode="stretch_width")
sidebar = pn.Column(
    w.Select(name="Problem", options=list(explorer.problems())),
    w.Select(name="State count N (presets)",
             options={"other": 0, **{f"{n:,}": n for n in N_PRESETS}}, value=100),
    w.IntInput(name="…or any N (1 to 10,000)", value=100),
    w.IntInput(name="Horizon (scan steps)", value=200),
    pn.pane.Markdown("**Representations**"),
    w.CheckBoxGroup(options=list(explorer.representations()), value=["dict", "array"],
                    inline=False),
    pn.pane.Markdown("**Target**"),
    w.RadioButtonGroup(options=["loss", "grad", "both"], value="loss"),
    w.IntInput(name="Scan unroll", value=1),
    w.Select(name="Backend (devices JAX sees)", options=["cpu"]),
    w.FloatInput(name="Timeout per case (s)", value=300.0),
    pn.Row(run, cancel),
    w.MultiChoice(name="Sweep over N", options=list(N_PRESETS), value=[1, 3, 10, 30, 100]),
    sweep,
    pn.pane.Markdown("Trajectories are captured when N ≤ 300."),
    w.Checkbox(name="Presenter mode (large fonts)"),
)
view_controls = pn.FlexBox(
    w.Select(name="Compile time: stage", options=list(plots.STAGES), width=170),
    pn.Column(pn.pane.Markdown("Plot target"), w.RadioButtonGroup(options=["loss", "grad"])),
    w.MultiChoice(name="Rollout states", options=[], width=320),
    w.Checkbox(name="Show the shipped example sweep", value=True),
    sizing_mode="stretch_width")
refresh = w.Button(name="Load rows stored by others", width=240)
refresh.on_click(load_rows)
results = pn.Column(
    pn.Row(w.FileDownload(filename="pytree-explorer-results.csv", label="Download results (CSV)",
                          callback=lambda: None, width=240),
           w.FileDownload(filename="pytree-explorer-plots.html",
                          label="Export plots (standalone HTML)", callback=lambda: None,
                          width=260),
           refresh),
    pn.pane.Markdown("Select a row, then open **Programs** to see its jaxpr, StableHLO, "
                     "optimised HLO and equation blame."),
    table, sizing_mode="stretch_width")
main = pn.Column(
    pn.pane.Markdown("How much does the **shape of your JAX state** cost? Pick a problem, a "
                     "state count *N* and the representations to compare, then **Run**."),
    status,
    pn.pane.Markdown("*Example sweep shipped with the package.*"),
    view_controls,
    pn.pane.Markdown("**k**: fitted exponent of size or time ≈ c·N^k."),
    pn.Row(*panes[:2], sizing_mode="stretch_width"),
    pn.Row(*panes[2:], sizing_mode="stretch_width"),
    pn.Tabs(("Results", results), ("Programs", pn.Column()), ("Compare runs", pn.Column()),
            sizing_mode="stretch_width"),
    sizing_mode="stretch_width")
pn.template.VanillaTemplate(title="PyTree Compile Explorer", sidebar=[sidebar], main=[main],
                            sidebar_width=320, header_background="#1f4e79").servable()
