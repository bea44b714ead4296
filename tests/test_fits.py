"""Power-law fits of measured rows, and how a fitted value is printed."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import explorer


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


def test_a_negative_zero_exponent_is_printed_as_zero():
    """A flat series fits a slope of about ±1e-17, whose sign depends on the processor."""
    assert explorer.format_exponent(-1e-17) == "0.00"
    assert explorer.format_exponent(-0.004) == "0.00"
    assert explorer.format_exponent(-0.006) == "-0.01"
    assert explorer.format_exponent(1.849) == "1.85"
    assert explorer.format_exponent(None) == "n/a" and explorer.format_exponent(float("nan")) == "n/a"


def test_plot_legends_never_show_a_negative_zero(monkeypatch):
    from explorer import plots
    from explorer.testing import rows_frame as to_frame
    from explorer.testing import sweep_plots  # where the sweep plots look the fit up

    rows = to_frame([{"id": i, "status": "ok", "problem": "decay", "representation": "array",
                      "n_states": n, "horizon": 5, "target": "loss", "unroll": 1,
                      "trace_s": 0.1, "lower_s": 0.1, "compile_s": 0.1, "hlo_pre_bytes": 1000,
                      "hlo_post_bytes": 900, "run_s": 1e-4, "finished_at": i}
                     for i, n in enumerate((1, 10, 100))])
    real = explorer.fit_power_law

    def negative_zero(x, y):  # what one processor gives for a constant series
        found = real(x, y)
        return None if found is None else {**found, "k": -1e-17}

    monkeypatch.setattr(sweep_plots, "fit_power_law", negative_zero)
    for plot in (plots.compile_time_plot(rows), plots.program_size_plot(rows),
                 plots.runtime_plot(rows)):
        labels = {el.label for el in plot if el.label}
        assert labels == {"array k=0.00"}, labels


def test_unknown_metric_is_one_line_naming_the_choices():
    from explorer.testing import rows_frame

    frame = rows_frame([])
    with pytest.raises(ValueError, match="unknown metric 'bogus'; choose from: compile_s"):
        explorer.scaling_exponents(frame, metrics=["bogus"])
