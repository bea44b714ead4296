"""The pure plotting functions: DataFrame in, HoloViews out; log axes never see values <= 0."""

from __future__ import annotations

import holoviews as hv
import numpy as np
import pandas as pd
import pytest

from explorer import plots as _plots
from explorer.testing import rows_frame as to_frame


def _rows(reps=("dict", "array"), sizes=(1, 10, 100), target="loss", k=None, **extra):
    rows, i = [], 0
    for rep in reps:
        slope = (k or {}).get(rep, 1.0)
        for n in sizes:
            i += 1
            rows.append({"id": i, "problem": "decay", "representation": rep, "n_states": n,
                         "horizon": 200, "target": target, "unroll": 1, "status": "ok",
                         "trace_s": 0.01 * n ** slope, "lower_s": 0.02 * n ** slope,
                         "compile_s": 0.1 * n ** slope, "hlo_pre_bytes": 1000 * n,
                         "hlo_post_bytes": 3000 * n, "run_s": 1e-4 * n, "backend": "cpu",
                         "host": "h", "finished_at": float(i), **extra})
    return to_frame(rows).assign(source="measured")


def _elements(overlay, kind=(hv.Curve, hv.Scatter)):
    return [el for el in overlay if isinstance(el, kind)]


def _labels(overlay) -> set[str]:
    """Legend entries: the curves' labels (the one scatter of points has none)."""
    return {el.label for el in _elements(overlay, hv.Curve)}


def _render(obj):
    return hv.renderer("bokeh").get_plot(obj).state


_DASHES = {(): "solid", (6,): "dashed", (2, 4): "dotted"}


def _drawn_lines(obj) -> list[tuple[str, str]]:
    """(colour, dash) of every line Bokeh draws for ``obj``."""
    fig = _render(obj)
    return [(r.glyph.line_color, _DASHES[tuple(r.glyph.line_dash)]) for r in fig.renderers
            if type(r.glyph).__name__ == "Line"]


def test_compile_plot_has_one_line_per_representation_with_its_exponent():
    df = _rows(k={"dict": 2.0, "array": 0.0})
    plot = _plots.compile_time_plot(df, problem="decay", horizon=200, target="loss")
    assert _labels(plot) == {"dict k=2.00", "array k=0.00"}
    fig = _render(plot)
    assert fig.x_scale.__class__.__name__ == "LogScale"
    assert fig.y_scale.__class__.__name__ == "LogScale"
    assert "compile time (s)" in fig.yaxis[0].axis_label
    assert "state count N" in fig.xaxis[0].axis_label
    # Total = trace + lower + compile, exactly.
    (points,) = _elements(plot, hv.Scatter)  # every point, with its line's label for hover
    dict_points = points.select(line="dict k=2.00")
    ys = dict_points.dimension_values("seconds_compile")
    assert np.allclose(ys, [0.13 * n ** 2 for n in (1, 10, 100)])


def test_stage_breakdown_draws_three_lines_per_representation():
    plot = _plots.compile_time_plot(_rows(reps=("dict",)), stage="all stages")
    curves = _elements(plot, hv.Curve)
    assert len(curves) == 3
    color = _plots.color_of("dict")
    assert sorted(_drawn_lines(plot)) == sorted((color, d) for d in ("dotted", "dashed", "solid"))
    assert curves[0].label.startswith("dict k=1.00/1.00/1.00")
    with pytest.raises(ValueError, match="unknown stage"):
        _plots.compile_time_plot(_rows(), stage="everything")


def test_log_axes_never_see_zero_negative_or_missing_values():
    df = _rows(reps=("dict",), sizes=(1, 10, 100, 1000))
    df.loc[df["n_states"] == 10, "compile_s"] = 0.0
    df.loc[df["n_states"] == 100, "hlo_post_bytes"] = pd.NA
    df.loc[df["n_states"] == 1000, "run_s"] = -1.0
    for plot, dim in ((_plots.compile_time_plot(df, stage="compile"), "seconds_compile"),
                      (_plots.program_size_plot(df), "program_bytes"),
                      (_plots.runtime_plot(df), "runtime_ms")):
        for el in _elements(plot):
            values = el.dimension_values(dim)
            assert len(values) and (values > 0).all() and np.isfinite(values).all()
        _render(plot)
    compile_ns = _elements(_plots.compile_time_plot(df, stage="compile"), hv.Scatter)[0]
    assert list(compile_ns.dimension_values("n_states")) == [1, 100, 1000]


def test_failed_rows_and_other_slices_are_left_out():
    df = pd.concat([_rows(reps=("dict",)), _rows(reps=("array",), target="grad")],
                   ignore_index=True)
    df.loc[0, "status"] = "timeout"
    plot = _plots.compile_time_plot(df, target="loss")
    (label,) = _labels(plot)
    assert label.startswith("dict")
    assert list(_elements(plot, hv.Scatter)[0].dimension_values("n_states")) == [10, 100]


def test_repeated_case_keeps_the_latest_row():
    df = pd.concat([_rows(reps=("dict",), sizes=(10,)),
                    _rows(reps=("dict",), sizes=(10,)).assign(compile_s=5.0, finished_at=99.0)],
                   ignore_index=True)
    rows = _plots.select(df)
    assert len(rows) == 1 and rows["compile_s"].iloc[0] == 5.0


def test_lines_are_told_apart_by_what_varies():
    df = pd.concat([_rows(reps=("dict",)), _rows(reps=("dict",), target="grad")],
                   ignore_index=True)
    labels = {label.split(" k=")[0] for label in _labels(_plots.runtime_plot(df))}
    assert labels == {"dict loss", "dict grad"}
    # Beside measured rows, the shipped example stays a line, lighter, in the legend as
    # "dict example".
    example = _rows(reps=("dict",)).assign(source="example")
    both = pd.concat([example, _rows(reps=("dict",))], ignore_index=True)
    plot = _plots.compile_time_plot(both)
    assert {label.split(" k=")[0] for label in _labels(plot)} == {"dict", "dict example"}
    points = _elements(plot, hv.Scatter)[0].dframe()
    faded = points[points["line"].str.startswith("dict example")]
    assert len(faded) == 3 and (faded["alpha"] < 1).all()
    assert (points.loc[~points.index.isin(faded.index), "alpha"] == 1).all()
    fig = _render(plot)
    alphas = sorted(r.glyph.line_alpha for r in fig.renderers if type(r.glyph).__name__ == "Line")
    assert len(alphas) == 2 and alphas[0] < 1 == alphas[1]
    # The example alone is drawn with lines, as anything measured is.
    assert len(_drawn_lines(_plots.compile_time_plot(example))) == 1


def test_program_size_shows_stablehlo_and_optimised_hlo():
    plot = _plots.program_size_plot(_rows(reps=("dict",)))
    curves = _elements(plot, hv.Curve)
    color = _plots.color_of("dict")
    assert sorted(_drawn_lines(plot)) == [(color, "dashed"), (color, "solid")]
    assert {c.label for c in curves} == {"dict k=1.00"}  # one legend entry per representation
    values = sorted(max(c.dimension_values("program_bytes")) for c in curves)
    assert values == [100_000, 300_000]


def test_hover_tooltips_name_exact_values():
    scatter = _elements(_plots.compile_time_plot(_rows()), hv.Scatter)[0]
    opts = scatter.opts.get().kwargs
    assert "hover" in opts["tools"]
    assert any(name == "XLA compile" for name, _ in opts["hover_tooltips"])


def test_plots_draw_on_a_canvas_not_webgl():
    # HoloViews asks for WebGL by default; emulated in software it made the page much slower.
    hv.renderer("bokeh").webgl = True
    for plot in (_plots.compile_time_plot(_rows()), _plots.program_size_plot(_rows()),
                 _plots.runtime_plot(_rows()), _plots.placeholder("t", "m"),
                 _plots.rollout_plot(_plots.rollout_frame(
                     {"dict": (["a", "b"], np.ones((5, 2), np.float32))}))):
        assert _render(plot).output_backend == "canvas"


def test_each_line_keeps_its_representation_colour():
    df = _rows(reps=("dict", "array", "named"))
    for plot in (_plots.compile_time_plot(df), _plots.runtime_plot(df)):
        fig = _render(plot)
        by_label = {item.label.value.split(" k=")[0]: item.renderers[0].glyph.line_color
                    for item in fig.legend[0].items}
        assert by_label == {rep: _plots.color_of(rep) for rep in ("dict", "array", "named")}


def test_empty_or_unmatched_frames_give_a_message_not_an_error():
    for frame in (to_frame([]), _rows()):
        plot = _plots.compile_time_plot(frame, problem="oscillator")
        texts = [el for el in plot if isinstance(el, hv.Text)]
        assert texts and "No measurements" in texts[0].text
        _render(plot)
    assert isinstance(_plots.rollout_plot(pd.DataFrame()), hv.Overlay)


def test_rollout_frame_and_plot_overlay_representations():
    names = [f"state_{i}" for i in range(10)]
    data = (np.linspace(1, 0.5, 20)[:, None] * np.arange(1, 11)).astype(np.float32)
    frame = _plots.rollout_frame({"dict": (names, data), "array": (names, data)})
    assert set(frame["state"]) == {"state_0", "state_5", "state_9"}
    assert len(frame) == 2 * 3 * 20
    picked = _plots.rollout_frame({"dict": (names, data)}, ["state_2", "nope"])
    assert set(picked["state"]) == {"state_2"}
    plot = _plots.rollout_plot(frame)
    assert _labels(plot) == {"dict", "array"}
    (marks,) = _elements(plot, hv.Scatter)
    assert set(marks.dimension_values("representation")) == {"dict", "array"}
    # Markers of the two representations fall on different steps, so both stay visible.
    steps = {rep: set(marks.select(representation=rep).dimension_values("step"))
             for rep in ("dict", "array")}
    assert steps["dict"] and steps["array"] and not steps["dict"] & steps["array"]
    fig = _render(plot)
    assert fig.xaxis[0].axis_label == "time step"
    # Each trajectory is named by its state at its end (the legend names representations).
    (names_at_end,) = _elements(plot, hv.Labels)
    assert sorted(names_at_end.dimension_values("state")) == ["state_0", "state_5", "state_9"]
    assert set(names_at_end.dimension_values("step")) == {19}


def test_states_that_end_together_share_one_label_instead_of_two_drawn_over_each_other():
    """Two chosen states whose trajectories end at nearly the same value (a decay page at
    N = 100: state_0 and state_50) had their names drawn one over the other, unreadable; they
    are one label now, at their ends, and a state that ends apart keeps its own."""
    names = ["state_0", "state_50", "state_99"]
    steps = np.linspace(0, 1, 20)[:, None]
    data = (1.1 - 0.02 * steps + np.array([[0.0, 0.001, -0.1]]) * steps).astype(np.float32)
    plot = _plots.rollout_plot(_plots.rollout_frame({"dict": (names, data), "array": (names, data)},
                                                    names))
    (labels,) = _elements(plot, hv.Labels)
    ends = dict(zip(labels.dimension_values("state"), labels.dimension_values("state_value")))
    assert set(ends) == {"state_0, state_50", "state_99"}
    assert ends["state_0, state_50"] == pytest.approx(np.mean(data[-1, :2]), rel=1e-6)
    assert ends["state_99"] == pytest.approx(data[-1, 2], rel=1e-6)
    # States whose trajectories all coincide are one label, not three in one place.
    same = np.tile(np.linspace(1, 0, 20)[:, None], (1, 3))
    (labels,) = _elements(_plots.rollout_plot(_plots.rollout_frame({"dict": (names, same)},
                                                                   names)), hv.Labels)
    assert list(labels.dimension_values("state")) == ["state_0, state_50, state_99"]


def test_export_html_is_one_standalone_file():
    html = _plots.export_html([_plots.compile_time_plot(_rows()), _plots.runtime_plot(_rows())])
    assert b"<html" in html[:1000].lower() and b"cdn.bokeh.org" not in html


@pytest.mark.parametrize("lo, hi", [(10, 20), (0.05, 0.9), (0.211, 0.399), (2.9e3, 3.5e5),
                                    (1e-4, 10), (1, 1e9), (3, 3000),
                                    # one N, compile times a few per cent apart
                                    (0.141, 0.148), (0.1412, 0.1486), (123456, 123999),
                                    (2, 4), (2, 3), (350000, 400000)])
def test_log_ticks_label_every_range_readably(lo, hi):
    ticks = _plots.log_ticks(lo, hi)
    assert 3 <= len(ticks) <= 8
    values = [v for v, _ in ticks]
    assert values == sorted(values) and all(lo * 0.99 <= v <= hi * 1.01 for v in values)
    labels = [label for _, label in ticks]
    assert len(set(labels)) == len(labels)
    assert not any("e+" in label or len(label) > 6 for label in labels), labels


def test_log_ticks_of_a_few_small_n_label_each():
    # N = 2, 3, 4 measured: each labelled (the finest log steps gave 2 and 3 only).
    assert _plots.log_ticks(2, 4) == [(2.0, "2"), (3.0, "3"), (4.0, "4")]


def test_log_ticks_of_one_value_label_that_value():
    assert _plots.log_ticks(0.145, 0.145) == [(0.145, "0.145")]


@pytest.mark.parametrize("draw", [_plots.compile_time_plot, _plots.runtime_plot])
@pytest.mark.parametrize("reps, n", [(("dict",), 2), (("dict", "array"), 1)])
def test_one_measured_value_sits_inside_a_log_axis_with_ticks_around_it(draw, reps, n, caplog):
    # One row measured (a first Run's first case): a y range of one value; a Run or Sweep of
    # one N (N = 1, five sessions' sweeps in the load test): an x range of one value. HoloViews
    # padded each to or below zero, warned in the server's log and drew the axis from 0.01.
    one = _rows(reps=reps, sizes=(n,))
    fig = _render(draw(one, problem="decay", horizon=200, target="loss"))
    assert not [r for r in caplog.records if "less than or equal to zero" in r.getMessage()]
    source = fig.renderers[-1].data_source.data
    shown = {"x": {float(v) for v in source[fig.renderers[-1].glyph.x]},
             "y": {float(v) for v in source[fig.renderers[-1].glyph.y]}}
    assert shown["x"] == {float(n)}
    for axis, rng, ticks in (("x", fig.x_range, fig.xaxis[0]), ("y", fig.y_range, fig.yaxis[0])):
        if len(shown[axis]) != 1:
            continue  # two representations: two compile times
        (value,) = shown[axis]
        assert 0 < rng.start < value < rng.end, (axis, rng.start, rng.end)
        labels = ticks.major_label_overrides
        assert len(labels) >= 3 and all(rng.start <= float(v) <= rng.end for v in labels), axis


def test_metric_plots_carry_labelled_ticks_under_a_decade():
    df = _rows(k={"array": 0.1})
    df = df[df.n_states <= 10].copy()
    df.loc[df.n_states == 1, "n_states"] = 20  # N = 10 and 20: less than a decade
    fig = _render(_plots.compile_time_plot(df, problem="decay", horizon=200, target="loss"))
    assert {"10", "20"} <= set(fig.xaxis[0].major_label_overrides.values())
    assert fig.yaxis[0].major_label_overrides  # the y range (under a decade) is labelled too


def test_all_stages_at_one_n_is_a_stage_breakdown():
    one_n = _rows(reps=("dict", "array"), sizes=(30,))
    plot = _plots.compile_time_plot(one_n, stage="all stages")
    (bars,) = [el for el in plot if isinstance(el, hv.Bars)]
    table = bars.dframe()
    assert set(table["line"]) == {"dict", "array"}
    assert list(table[table["line"] == "dict"]["stage"]) == ["trace", "lower", "compile"]
    dict_row = one_n[one_n["representation"] == "dict"].iloc[0]
    assert np.isclose(table[table["line"] == "dict"]["seconds"].sum(),
                      dict_row[["trace_s", "lower_s", "compile_s"]].astype(float).sum())
    assert "N=30" in _render(plot).title.text
    # Several N: lines over N, as before.
    assert not [el for el in _plots.compile_time_plot(_rows(), stage="all stages")
                if isinstance(el, hv.Bars)]
