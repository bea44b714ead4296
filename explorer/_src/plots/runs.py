"""Plots of whole runs rather than of one sweep: two stored runs as ratios (the dashboard's
Compare runs tab, :func:`explorer.compare_runs`) and a watched program's compile ranking
(``explorer.watch``'s ``summary()``, the Your program tab). The same conventions as
:mod:`.sweep` (pure functions, a frame in, a HoloViews object out)."""

from __future__ import annotations

import holoviews as hv
import pandas as pd

from .sweep import (_CANVAS, _HOVERED, N_DIM, PLOT_HEIGHT, REPRESENTATION_COLORS, _bokeh,
                    _log_axis, _opts, color_of, placeholder)

_RATIO_LABELS = {"compile_s": "compile time", "hlo_pre_bytes": "program size",
                 "run_s": "runtime per call"}


def run_ratio_plot(table: pd.DataFrame | None, metric: str = "compile_s") -> hv.Overlay:
    """Ratio ``b / a`` of ``metric`` vs N, one line per representation (from
    :func:`explorer.compare_runs`), on log axes with a line at 1 (no change)."""
    _bokeh()
    label = _RATIO_LABELS.get(metric, metric)
    title = "Compare runs: " + label
    if table is None or table.empty:
        return placeholder(title, "Nothing to compare yet.")
    by, a, b = (table.attrs.get(k) for k in ("by", "a", "b"))
    title = f"{label}: {by} {b} / {a}"
    y = hv.Dimension("ratio", label=f"{label} ratio (b / a)")
    curves, points = [], []
    for rep in dict.fromkeys([*REPRESENTATION_COLORS, *table["representation"].unique()]):
        part = table[table["representation"] == rep]
        data = pd.DataFrame({"n_states": pd.to_numeric(part["n_states"], errors="coerce"),
                             "ratio": pd.to_numeric(part[f"{metric}_ratio"], errors="coerce")})
        data = data[(data["n_states"] > 0) & (data["ratio"] > 0)].sort_values("n_states")
        if data.empty:
            continue
        curves.append(hv.Curve(data, N_DIM, y, label=rep).opts(
            backend="bokeh", color=color_of(rep), line_width=2, tools=[]))
        points.append(data.assign(representation=rep, color=color_of(rep)))
    if not curves:
        return placeholder(title, "No positive ratios to show on log axes.")
    every = pd.concat(points, ignore_index=True)
    scatter = hv.Scatter(every, N_DIM, [y, "representation", "color"]).opts(
        backend="bokeh", color="color", size=7, tools=["hover"], show_legend=False, **_HOVERED)
    same = hv.HLine(1.0).opts(backend="bokeh", color="#888888", line_dash="dashed",
                              line_width=1)
    ratios = pd.concat([every["ratio"], pd.Series([1.0])])
    return hv.Overlay([*curves, scatter, same]).opts(
        backend="bokeh", **_opts(title=title, logx=True, logy=True,
                                 **_log_axis(every["n_states"], "x"),
                                 **_log_axis(ratios, "y")))


_RANKING_STAGES = (("trace_s", "trace", "#a6bddb"), ("lower_s", "lower", "#74a9cf"),
                   ("compile_s", "XLA compile", "#0570b0"))


def compile_ranking_plot(summary: pd.DataFrame | None, *, top: int = 15,
                         title: str = "Compile time per function") -> hv.Overlay | hv.Bars:
    """A watched program's functions (the ranking of ``explorer.watch``'s ``summary()``, or of
    a stored run), slowest on top: trace, lower and XLA-compile seconds as stacked bars, each
    function labelled ``name (file:line)``."""
    _bokeh()
    if summary is None or summary.empty:
        return placeholder(title, "No compilation recorded.")
    rows = summary.head(top).reset_index(drop=True)
    labels = [_ranking_label(i, r) for i, r in rows.iterrows()]
    long = pd.DataFrame([
        {"function": label, "stage": stage, "seconds": float(value),
         "compiles": int(r["compiles"]), "where": str(r["where"])}
        for label, (_, r) in zip(labels, rows.iterrows())
        for column, stage, _colour in _RANKING_STAGES
        for value in [pd.to_numeric(r[column], errors="coerce")]
        if pd.notna(value) and value > 0])
    if long.empty:
        return placeholder(title, "No compile seconds were reported for these functions.")
    order = list(reversed(labels))  # Bokeh draws a categorical y axis bottom up
    stages = [stage for _, stage, _ in _RANKING_STAGES]
    long["function"] = pd.Categorical(long["function"], categories=order, ordered=True)
    long["stage"] = pd.Categorical(long["stage"], categories=stages, ordered=True)
    long = long.sort_values(["function", "stage"])
    bars = hv.Bars(long, ["function", "stage"], ["seconds", "compiles", "where"])
    colours = [colour for _, _, colour in _RANKING_STAGES]
    return bars.opts(
        backend="bokeh", stacked=True, invert_axes=True, title=title, cmap=colours,
        color=hv.dim("stage"), tools=["hover"], responsive=True, legend_position="bottom_right",
        height=max(PLOT_HEIGHT, 60 + 26 * len(rows)), show_grid=True, ylabel="seconds",
        xlabel="", toolbar="above", backend_opts=dict(_CANVAS),
        fontsize={"title": "11pt", "labels": "10pt", "xticks": "9pt", "yticks": "9pt",
                  "legend": "8pt"})


def _ranking_label(position: int, row: pd.Series) -> str:
    where = str(row["where"])
    short = where.rsplit("/", 1)[-1] if where else "?"
    label = f"{position + 1}. {row['name']} ({short})"
    return label if len(label) <= 46 else label[:45] + "…"
