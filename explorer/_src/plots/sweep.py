"""Plots of a sweep's results: pure functions from a results DataFrame to HoloViews objects.

Notebooks, the dashboard and exported HTML share exactly these figures. Importing this module
imports no Panel (HoloViews' Bokeh plotting module, which does, is loaded on the first plot).
Every function takes the whole results frame and optional filters; rows that are not ``ok``, and
values a log axis cannot show (``<= 0``, missing), are dropped. When rows of several problems,
horizons, backends... are left after filtering, the legend labels say which line is which.
"""

from __future__ import annotations

import re
import textwrap
import zlib
from collections.abc import Sequence
from typing import Any

import holoviews as hv
import numpy as np
import pandas as pd

from ..core.fits import fit_power_law, format_exponent
from ..export import export_html  # noqa: F401 - re-exported: the plots as a standalone page
from .ticks import log_ticks

# One colour per representation, the same in every plot (Bokeh's Category10).
REPRESENTATION_COLORS = {
    "dict": "#d62728",
    "array": "#1f77b4",
    "unflatten": "#ff7f0e",
    "ravel": "#9467bd",
    "module": "#2ca02c",
    "struct": "#8c564b",
    "named": "#e377c2",
    "packed": "#17becf",
}
_OTHER_COLORS = ("#7f7f7f", "#bcbd22", "#000000")


STAGES = ("total", "trace", "lower", "compile", "all stages")
_STAGE_COLUMN = {"total": "total_compile_s", "trace": "trace_s", "lower": "lower_s",
                 "compile": "compile_s"}
_STAGE_DASH = {"trace": "dotted", "lower": "dashed", "compile": "solid"}

# The columns that tell two measured lines apart, besides the representation.
_SERIES_KEYS = ("problem", "horizon", "unroll", "target", "backend", "source")
# Latest row wins for one case measured several times.
_CASE_KEYS = ("problem", "representation", "n_states", "horizon", "target", "unroll", "backend",
              "source")

PLOT_HEIGHT = 330
PLACEHOLDER_LINE = 56  # characters of a placeholder's message a line

# HoloViews asks Bokeh for WebGL by default. These plots are small, and where the browser has no
# GPU (a headless server, a VM) WebGL is emulated in software: drawing the four plots took about
# 0.9 s longer than on a plain canvas. Set per plot, so a user's other HoloViews plots keep theirs.
_CANVAS = {"plot.output_backend": "canvas"}

N_DIM = hv.Dimension("n_states", label="state count N")

# A hovered point gets a dark outline. Given always, this also keeps a plot's figure the same
# shape whether its points have one colour or several: Bokeh gives a point glyph a hover glyph
# only when a hover style is given, and HoloViews gives one for a colour column with more than
# one value. One figure shape for both: a hovered point looks the same with one line or two.
_HOVERED = dict(hover_line_color="#222222", hover_line_width=2)


def _bokeh() -> None:
    """Register HoloViews' Bokeh options (done on first plot, not on import: the Bokeh plotting
    module imports Panel, and importing this module must stay light)."""
    import holoviews.plotting.bokeh  # noqa: F401, PLC0415


def _opts(**extra: Any) -> dict[str, Any]:
    # Legend inside, top left: the frame keeps the plot's whole width, and rising log-log
    # lines leave that corner empty. Half-transparent, so a point under it still shows.
    base = dict(responsive=True, height=PLOT_HEIGHT, show_grid=True, legend_position="top_left",
                padding=0.08, legend_limit=100,
                fontsize={"title": "11pt", "labels": "10pt", "xticks": "9pt", "yticks": "9pt",
                          "legend": "8pt"},
                legend_opts={"click_policy": "hide", "background_fill_alpha": 0.6,
                             "label_height": 12, "glyph_height": 12, "spacing": 0,
                             "padding": 4},
                toolbar="above", backend_opts=dict(_CANVAS))
    base.update(extra)
    return base


def _legend(entries: int) -> dict[str, Any]:
    """A legend beside the plot while it fits its height, else in columns below it."""
    if entries <= 9:
        return {}
    cols = 3
    rows = -(-entries // cols)
    return dict(legend_position="bottom", legend_cols=cols, height=PLOT_HEIGHT + 24 * rows)


def _positive_range(values: pd.Series) -> tuple[float, float] | None:
    """The smallest and largest of the positive, finite ``values`` (what a log axis can show)."""
    values = pd.to_numeric(values, errors="coerce").to_numpy(float)
    values = values[np.isfinite(values) & (values > 0)]
    return (float(values.min()), float(values.max())) if len(values) else None


def _log_axis(values: pd.Series, axis: str) -> dict[str, Any]:
    """The options of a log ``axis`` (``"x"`` or ``"y"``) over ``values`` (its positive ones):
    readable ticks and, when every value is the same, limits a factor of two either side of it.
    Left to HoloViews, a range of one value was padded to or below zero, and the axis drawn from
    0.01 with a warning in the server's log (one row measured, or a sweep of one N: its point
    sat at the axis's edge)."""
    span = _positive_range(values)
    if span is None:
        return {}
    lo, hi = span
    if hi > lo * (1 + 1e-9):
        return {f"{axis}ticks": log_ticks(lo, hi) or None}
    return {f"{axis}ticks": log_ticks(lo / 2, hi * 2) or None, f"{axis}lim": (lo / 2, hi * 2)}


def placeholder(title: str, message: str) -> hv.Overlay:
    """A placeholder with a message, on plain axes (never log ones, which need data); the
    message in lines a half-width plot holds (on one line it ran off both edges)."""
    _bokeh()
    text = hv.Text(0.5, 0.5, textwrap.fill(message, PLACEHOLDER_LINE), fontsize=11).opts(
        backend="bokeh", color="#555555")
    frame = hv.Curve([(0, 0), (1, 1)]).opts(backend="bokeh", alpha=0)  # fixes the axes' range
    return (frame * text).opts(backend="bokeh", title=title, xaxis=None, yaxis=None, toolbar=None,
                               responsive=True, height=PLOT_HEIGHT, show_grid=False,
                               backend_opts=dict(_CANVAS))


def color_of(representation: str) -> str:
    if representation in REPRESENTATION_COLORS:
        return REPRESENTATION_COLORS[representation]
    # crc32, not hash(): the same name gets the same colour in every process.
    return _OTHER_COLORS[zlib.crc32(str(representation).encode()) % len(_OTHER_COLORS)]


def select(df: pd.DataFrame, *, problem: str | None = None, horizon: int | None = None,
           unroll: int | None = None, target: str | None = None,
           representations: Sequence[str] | None = None, latest: bool = True) -> pd.DataFrame:
    """The ``ok`` rows matching the filters (``None`` keeps all), oldest first: the latest row
    per case, or every one when not ``latest``."""
    if df is None or df.empty:
        return pd.DataFrame(columns=list(df.columns) if df is not None else [])
    out = df[df["status"] == "ok"] if "status" in df else df
    # Rows the user measured anywhere in the frame: the shipped example's rows are then
    # "example" lines (lighter, labelled so) even where a filter leaves only them.
    mixed = "source" in out and out["source"].astype(str).nunique() > 1
    for column, value in (("problem", problem), ("horizon", horizon), ("unroll", unroll),
                          ("target", target)):
        if value is not None and column in out:
            out = out[out[column] == value]
    if representations is not None:
        out = out[out["representation"].isin(list(representations))]
    if not out.empty and "finished_at" in out:
        out = out.sort_values("finished_at", kind="stable", na_position="first")
    if latest and not out.empty:
        out = out.drop_duplicates([k for k in _CASE_KEYS if k in out], keep="last")
    out = out.copy()
    out.attrs["mixed_sources"] = bool(mixed)
    return out


def _varying(df: pd.DataFrame) -> list[str]:
    """The columns that tell lines apart: those with several values, and ``source`` when the
    frame ``df`` was selected from held measured rows beside the example (:func:`select`)."""
    return [k for k in _SERIES_KEYS if k in df and (
        df[k].astype(str).nunique() > 1 or (k == "source" and df.attrs.get("mixed_sources")))]


def _series(df: pd.DataFrame):
    """Yield (representation, label, frame) per line: one per representation, split further
    by whatever else varies (target, backend, source...)."""
    extra = _varying(df)
    reps = list(dict.fromkeys([*REPRESENTATION_COLORS, *df["representation"].unique()]))
    for rep in reps:
        part = df[df["representation"] == rep]
        if part.empty:
            continue
        if not extra:
            yield rep, rep, part
            continue
        for key, sub in part.groupby(extra, sort=True, dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            words = []
            for name, value in zip(extra, key):
                if name == "source" and value == "measured":
                    continue
                words.append(f"H={value}" if name == "horizon" else
                             f"unroll={value}" if name == "unroll" else str(value))
            yield rep, " ".join([rep, *words]), sub


# A slope through two points is mostly noise at small N; the legend waits for a third.
MIN_FIT_POINTS = 3


def _fit(part: pd.DataFrame, column: str) -> float | None:
    """Exponent k of ``column ≈ c·N^k`` over ``part`` (``None`` below three points)."""
    found = fit_power_law(part["n_states"], part[column])
    if found is None or found["points"] < MIN_FIT_POINTS:
        return None
    return found["k"]


_FIT_SUFFIX = re.compile(r" k=\S+$")


def line_name(label: str) -> str:
    """The line a legend label names, without its fitted exponent, which changes with every
    new point (``"dict example k=0.66"`` -> ``"dict example"``)."""
    return _FIT_SUFFIX.sub("", label)


def _fit_label(part: pd.DataFrame, column: str) -> str:
    k = _fit(part, column)
    return "" if k is None else f" k={format_exponent(k)}"


def _alpha(part: pd.DataFrame, rows: pd.DataFrame) -> float:
    """Lines of the shipped example are lighter when measured lines are shown with them (and
    still lines, in the legend as "... example": the story the page opened with stays)."""
    if "source" not in rows or "source" not in _varying(rows):
        return 1.0
    return 0.4 if (part["source"] == "example").all() else 1.0


def _positive(part: pd.DataFrame, column: str) -> pd.DataFrame:
    values = pd.to_numeric(part[column], errors="coerce")
    keep = np.isfinite(values.to_numpy(float)) & (values.to_numpy(float) > 0)
    keep &= pd.to_numeric(part["n_states"], errors="coerce").to_numpy(float) > 0
    return part[keep].sort_values("n_states")


class _Figure:
    """Lines of one log-log plot: a ``Curve`` per line (its legend entry) and one ``Scatter``
    holding every measured point with its hover fields. One scatter instead of one per line
    keeps the number of Bokeh renderers, and so the render time, low. The lines' styles
    (colour, dash, and a lighter alpha for the shipped example beside measured rows) are given
    once, as cycles in the order the lines were added, not by one ``.opts`` call each."""

    def __init__(self, y: hv.Dimension, hover: list[str], tooltips: list[tuple[str, str]]):
        self.y, self.hover, self.tooltips = y, hover, tooltips
        self.curves: list[hv.Curve] = []
        self.styles: list[tuple[str, str, float]] = []
        self.points: list[pd.DataFrame] = []

    def add(self, part: pd.DataFrame, column: str, label: str, color: str, dash: str = "solid",
            scale: float = 1.0, alpha: float = 1.0) -> None:
        data = pd.DataFrame({"n_states": part["n_states"].astype(float).to_numpy(),
                             self.y.name: part[column].astype(float).to_numpy() * scale})
        self.curves.append(hv.Curve(data, N_DIM, [self.y], label=label))
        self.styles.append((color, dash, alpha))
        for h in self.hover:
            data[h] = part[h].to_numpy() if h in part else ""
        data["line"] = label
        data["color"] = color
        data["alpha"] = alpha
        self.points.append(data)

    def overlay(self, title: str) -> hv.Overlay:
        points = pd.concat(self.points, ignore_index=True)
        vdims = [self.y, "line", *self.hover, "color", "alpha"]
        scatter = hv.Scatter(points, N_DIM, vdims)
        entries = len({c.label for c in self.curves})
        options = {
            "Scatter": dict(color="color", alpha="alpha", size=7, tools=["hover"],
                            hover_tooltips=self.tooltips, show_legend=False, **_HOVERED),
            "Overlay": _opts(title=title, logx=True, logy=True, **_legend(entries),
                             **_log_axis(points["n_states"], "x"),
                             **_log_axis(points[self.y.name], "y")),
        }
        if self.curves:
            colors, dashes, alphas = zip(*self.styles)
            options["Curve"] = dict(color=hv.Cycle(list(colors)), line_dash=hv.Cycle(list(dashes)),
                                    line_alpha=hv.Cycle(list(alphas)), line_width=2, tools=[])
        return hv.Overlay([*self.curves, scatter]).opts(options, backend="bokeh")


def _title(base: str, filters: dict[str, Any]) -> str:
    bits = []
    if filters.get("problem"):
        bits.append(str(filters["problem"]))
    if filters.get("horizon") is not None:
        bits.append(f"H={filters['horizon']}")
    if filters.get("target"):
        bits.append(str(filters["target"]))
    return f"{base} ({', '.join(bits)})" if bits else base


def compile_time_plot(df: pd.DataFrame, *, stage: str = "total", problem: str | None = None,
                      horizon: int | None = None, unroll: int | None = None,
                      target: str | None = None,
                      representations: Sequence[str] | None = None) -> hv.Overlay:
    """Compile time vs state count, log-log, one line per representation.

    ``stage`` is ``"total"`` (trace + lower + compile: what a user waits for), one stage, or
    ``"all stages"`` (three lines per representation). The legend gives the fitted exponent
    ``k`` of ``time ≈ c·N^k``.
    """
    _bokeh()
    filters = dict(problem=problem, horizon=horizon, target=target)
    title = _title("Compile time vs N", filters)
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; choose one of: {', '.join(STAGES)}")
    rows = select(df, problem=problem, horizon=horizon, unroll=unroll, target=target,
                  representations=representations)
    if rows.empty:
        return placeholder(title, "No measurements here yet: press Run or Sweep.")
    stage_times = rows[["trace_s", "lower_s", "compile_s"]].astype(float)
    rows["total_compile_s"] = stage_times.sum(axis=1, min_count=3)  # missing if any is
    y = hv.Dimension("seconds_compile", label="compile time (s)")
    tooltips = [("line", "@{line}"), ("N", "@{n_states}{0,0}"),
                ("time", "@{seconds_compile}{0.0000} s"), ("trace", "@{trace_s}{0.0000} s"),
                ("lower", "@{lower_s}{0.0000} s"), ("XLA compile", "@{compile_s}{0.0000} s"),
                ("target", "@{target}"), ("backend", "@{backend}"), ("host", "@{host}")]
    hover = ["trace_s", "lower_s", "compile_s", "target", "backend", "host"]
    if stage == "all stages" and rows["n_states"].nunique() == 1:
        return _stage_bars(rows, title)  # one N: lines over N would be single points
    stages = ("trace", "lower", "compile") if stage == "all stages" else (stage,)
    fig = _Figure(y, hover, tooltips)
    for rep, label, part in _series(rows):
        drawn, fits = [], []
        for st in stages:
            column = _STAGE_COLUMN[st]
            points = _positive(part, column)
            if points.empty:
                continue
            drawn.append((st, column, points))
            fits.append(_fit(points, column))
        if not drawn:
            continue
        # One legend entry per line of representations (Bokeh merges equal labels), so a
        # click hides all its stages at once; k of each stage in the order drawn.
        known = [k for k in fits if k is not None]
        name = label + (f" k={'/'.join(format_exponent(k) for k in known)}" if len(known) == len(fits)
                        else "")
        for st, column, points in drawn:
            dash = _STAGE_DASH[st] if stage == "all stages" else "solid"
            fig.add(points, column, name, color_of(rep), dash, alpha=_alpha(points, rows))
    if not fig.curves:
        return placeholder(title, "No positive compile times to show on log axes.")
    return fig.overlay(title)


_STAGE_COLORS = {"trace": "#9ecae1", "lower": "#4292c6", "compile": "#08306b"}


def _stage_bars(rows: pd.DataFrame, title: str) -> hv.Overlay:
    """Trace, lower and compile stacked, one bar per line of the plot, at the one N there is."""
    n = int(rows["n_states"].iloc[0])
    parts = []
    for _rep, label, part in _series(rows):
        latest = part.iloc[-1]
        for st in ("trace", "lower", "compile"):
            seconds = pd.to_numeric(latest[_STAGE_COLUMN[st]], errors="coerce")
            if pd.notna(seconds):
                parts.append({"line": label, "stage": st, "seconds": float(seconds)})
    if not parts:
        return placeholder(title, "No stage times to show.")
    bars = hv.Bars(pd.DataFrame(parts), [hv.Dimension("line", label="representation"), "stage"],
                   hv.Dimension("seconds", label="compile time (s)")).opts(
        backend="bokeh", stacked=True, cmap=_STAGE_COLORS,
        tools=["hover"],
        **{k: v for k, v in _opts(title=f"{title}: stages at N={n}",
                                  legend_position="right").items()
           if k not in ("legend_limit", "padding")})
    return hv.Overlay([bars])


def program_size_plot(df: pd.DataFrame, *, problem: str | None = None,
                      horizon: int | None = None, unroll: int | None = None,
                      target: str | None = None,
                      representations: Sequence[str] | None = None) -> hv.Overlay:
    """Program size vs state count: StableHLO before optimisation (solid), HLO after (dashed)."""
    _bokeh()
    filters = dict(problem=problem, horizon=horizon, target=target)
    title = _title("Program size vs N", filters)
    rows = select(df, problem=problem, horizon=horizon, unroll=unroll, target=target,
                  representations=representations)
    if rows.empty:
        return placeholder(title, "No measurements here yet: press Run or Sweep.")
    y = hv.Dimension("program_bytes", label="program size (bytes)")
    tooltips = [("line", "@{line}"), ("N", "@{n_states}{0,0}"),
                ("size", "@{program_bytes}{0,0} bytes"),
                ("jaxpr equations", "@{jaxpr_eqns}{0,0}"), ("target", "@{target}"),
                ("backend", "@{backend}")]
    hover = ["jaxpr_eqns", "target", "backend"]
    fig = _Figure(y, hover, tooltips)
    for rep, label, part in _series(rows):
        pre = _positive(part, "hlo_pre_bytes")
        k = _fit(pre, "hlo_pre_bytes") if not pre.empty else None
        name = label + ("" if k is None else f" k={format_exponent(k)}")
        for column, dash in (("hlo_pre_bytes", "solid"), ("hlo_post_bytes", "dashed")):
            points = _positive(part, column)
            if not points.empty:
                fig.add(points, column, name, color_of(rep), dash, alpha=_alpha(points, rows))
    if not fig.curves:
        return placeholder(title, "No program sizes to show.")
    return fig.overlay(title)


def runtime_plot(df: pd.DataFrame, *, problem: str | None = None, horizon: int | None = None,
                 unroll: int | None = None, target: str | None = None,
                 representations: Sequence[str] | None = None) -> hv.Overlay:
    """Runtime of one call of the compiled program (median) vs state count, log-log."""
    _bokeh()
    filters = dict(problem=problem, horizon=horizon, target=target)
    title = _title("Runtime per call vs N", filters)
    rows = select(df, problem=problem, horizon=horizon, unroll=unroll, target=target,
                  representations=representations)
    if rows.empty:
        return placeholder(title, "No measurements here yet: press Run or Sweep.")
    y = hv.Dimension("runtime_ms", label="runtime per call (ms)")
    tooltips = [("line", "@{line}"), ("N", "@{n_states}{0,0}"),
                ("runtime", "@{runtime_ms}{0.000} ms"),
                ("first call", "@{first_run_s}{0.0000} s"), ("target", "@{target}"),
                ("backend", "@{backend}"), ("device", "@{device_kind}")]
    hover = ["first_run_s", "target", "backend", "device_kind"]
    fig = _Figure(y, hover, tooltips)
    for rep, label, part in _series(rows):
        points = _positive(part, "run_s")
        if not points.empty:
            fig.add(points, "run_s", label + _fit_label(points, "run_s"), color_of(rep),
                    scale=1e3, alpha=_alpha(points, rows))
    if not fig.curves:
        return placeholder(title, "No runtimes to show.")
    return fig.overlay(title)


ROLLOUT_COLUMNS = ("representation", "state", "step", "value")


def rollout_frame(rollouts: dict[str, tuple[Sequence[str], np.ndarray]],
                  states: Sequence[str] | None = None, max_states: int = 3) -> pd.DataFrame:
    """Long frame (representation, state, step, value) from ``{representation: (names, array)}``
    as :meth:`explorer.Store.rollout` returns them; ``states`` picks the state names (default:
    the first, middle and last of the first rollout, at most ``max_states``)."""
    frames = []
    for rep, (names, array) in rollouts.items():
        names = list(names)
        array = np.asarray(array)
        if states is None:
            wanted = [names[i] for i in sorted({0, len(names) // 2, len(names) - 1})][:max_states]
        else:
            wanted = [s for s in states if s in names]
        for name in wanted:
            column = array[:, names.index(name)]
            frames.append(pd.DataFrame({"representation": rep, "state": name,
                                        "step": np.arange(len(column)), "value": column}))
    if not frames:
        return pd.DataFrame(columns=list(ROLLOUT_COLUMNS))
    return pd.concat(frames, ignore_index=True)


_MARKERS = ("circle", "square", "triangle", "diamond", "inverted_triangle", "hex", "star")

# Two state names whose trajectories end closer than this share of the plotted values' range
# apart are one label: a 9-point label is about this share of a plot's height, so two would be
# drawn over each other.
_LABEL_GAP = 0.05


def _end_labels(frame: pd.DataFrame) -> pd.DataFrame:
    """Where each trajectory ends (step, state_value) and its state's name; states that end
    within :data:`_LABEL_GAP` of each other share one label ("state_0, state_50")."""
    values = frame["value"].to_numpy(float)
    finite = values[np.isfinite(values)]
    gap = _LABEL_GAP * float(finite.max() - finite.min()) if finite.size else 0.0
    last = frame[frame["step"] == frame["step"].max()].drop_duplicates("state")
    order = {state: i for i, state in enumerate(last["state"].astype(str))}
    groups: list[list[tuple[str, float]]] = []
    for state, value in sorted(zip(last["state"].astype(str), last["value"].to_numpy(float)),
                               key=lambda item: (np.isnan(item[1]), item[1])):
        if groups and value - groups[-1][-1][1] <= gap:  # False for NaN: a label of its own
            groups[-1].append((state, value))
        else:
            groups.append([(state, value)])
    step = float(last["step"].max()) if len(last) else np.nan
    return pd.DataFrame({
        "step": [step] * len(groups),
        "state_value": [float(np.mean([v for _, v in g])) for g in groups],
        "state": [", ".join(sorted((n for n, _ in g), key=order.get)) for g in groups]})


def rollout_plot(frame: pd.DataFrame, *, title: str = "Rollout trajectories",
                 message: str = "No rollouts captured for this selection.") -> hv.Overlay:
    """Trajectories of a few states over the horizon, one curve per representation, overlaid.

    The representations compute the same numbers, so their curves coincide. To keep that
    visible, each representation also marks every few steps (its own colour and marker shape),
    shifted from the others' marks: marks of every colour strung along one curve mean they agree.
    """
    _bokeh()
    if frame is None or frame.empty:
        return placeholder(title, message)
    present = set(frame["representation"])
    reps = list(dict.fromkeys([r for r in REPRESENTATION_COLORS if r in present]
                              + list(frame["representation"].unique())))
    steps = int(frame["step"].nunique())
    stride = max(len(reps), steps // 12, 1)  # about a dozen markers per curve
    x = hv.Dimension("step", label="time step")
    y = hv.Dimension("state_value", label="state value")
    tooltips = [("representation", "@{representation}"), ("state", "@{state}"),
                ("step", "@{step}"), ("value", "@{state_value}{0.000000}")]
    curves, marks = [], []
    for i, rep in enumerate(reps):
        part = frame[frame["representation"] == rep]
        pieces = []
        for _, sub in part.groupby("state", sort=False):
            pieces.append(pd.DataFrame({"step": sub["step"].to_numpy(float),
                                        "state_value": sub["value"].to_numpy(float)}))
            pieces.append(pd.DataFrame({"step": [np.nan], "state_value": [np.nan]}))  # a gap
        curves.append(hv.Curve(pd.concat(pieces, ignore_index=True), x, [y], label=rep).opts(
            backend="bokeh", color=color_of(rep), line_width=1.5, alpha=0.8, tools=[]))
        offset = (i * stride) // len(reps)
        picked = part[(part["step"] - offset) % stride == 0]
        marks.append(pd.DataFrame({
            "step": picked["step"].to_numpy(float),
            "state_value": picked["value"].to_numpy(float),
            "representation": rep, "state": picked["state"].to_numpy(),
            "color": color_of(rep), "marker": _MARKERS[i % len(_MARKERS)]}))
    scatter = hv.Scatter(pd.concat(marks, ignore_index=True), x,
                         [y, "representation", "state", "color", "marker"]).opts(
        backend="bokeh", color="color", marker="marker", size=8, tools=["hover"],
        hover_tooltips=tooltips, show_legend=False, **_HOVERED)
    # Each trajectory named at its end: the legend says which representation, this which state.
    names = hv.Labels(_end_labels(frame), [x, y], "state").opts(
        backend="bokeh", text_align="right", text_baseline="bottom", text_font_size="9pt",
        text_color="#333")
    # Trajectories fill the frame, so their legend goes beside it.
    return hv.Overlay([*curves, scatter, names]).opts(
        backend="bokeh", **_opts(title=title, padding=0.05, legend_position="right"))
