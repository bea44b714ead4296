"""Presenter mode without a browser: the URL flag is read strictly, and the plots are drawn again
with larger fonts (the page's fonts are checked in ``test_dashboard_browser.py``)."""

from __future__ import annotations

import holoviews as hv
import pytest

from explorer import ExplorerModel
from explorer.testing import projector_title, query_flag


@pytest.mark.parametrize(("raw", "expected"), [
    ("true", True), (b"True", True), ("1", True), ("yes", True), ("on", True),
    ("false", False), ("0", False), (b"no", False), ("", False),
    (None, None), ("__import__('os').system('true')", None), ("[1]", None), ("2", None),
])
def test_query_flag_reads_only_yes_and_no(raw, expected):
    assert query_flag(raw) is expected


def test_a_projector_title_is_in_lines():
    assert projector_title("Compile time vs N (decay, H=200, loss): stages at N=100") == \
        "Compile time vs N\n(decay, H=200, loss)\nstages at N=100"
    assert projector_title("Rollouts at N=100 (decay, H=200)") == "Rollouts at N=100\n(decay, H=200)"
    assert projector_title("Rollout trajectories") == "Rollout trajectories"


def _font_sizes(plot) -> tuple[float, float]:
    figure = hv.render(plot, backend="bokeh")
    return (float(figure.title.text_font_size.rstrip("pt")),
            float(figure.xaxis[0].major_label_text_font_size.rstrip("pt")))


@pytest.mark.slow
def test_presenter_mode_redraws_every_plot_with_larger_fonts():
    model = ExplorerModel()
    try:
        view = model.view
        normal = [_font_sizes(plot) for plot in view.plots()]
        view.presenter = True
        larger = [_font_sizes(plot) for plot in view.plots()]
        for (title, ticks), (big_title, big_ticks) in zip(normal, larger):
            assert big_title > title and big_ticks >= 1.5 * ticks
        # The titles say the same, in lines a half-width plot holds (on one line at these
        # sizes the case ran off the plot's edge).
        titles = [hv.render(plot, backend="bokeh").title.text for plot in view.plots()]
        view.presenter = False  # the plain plots again, not the presenter copies
        plain = [hv.render(plot, backend="bokeh").title.text for plot in view.plots()]
        assert [title.replace("\n", " ") for title in titles] == plain
        assert all("\n(" in title for title in titles), titles
        assert max(len(line) for title in titles for line in title.splitlines()) <= 24
        assert [_font_sizes(plot) for plot in view.plots()] == normal
    finally:
        model.close()


def test_presenter_mode_shows_the_plots_one_a_row(tmp_path):
    """At a projector's font sizes a half-width plot's frame was a third of it beside its
    legend (the x ticks ran into each other): presenter mode gives each plot the page's
    width, and the plain page has them two a row again."""
    import explorer  # noqa: PLC0415 - Panel only for this test

    page = explorer.dashboard(store=tmp_path / "s.sqlite")
    try:
        grid, panes = page.plots.grid, page.plots.panes

        def rows():
            return [list(row.objects) for row in grid.objects]

        assert rows() == [panes[:2], panes[2:]]
        page.model.view.presenter = True
        assert rows() == [[pane] for pane in panes]
        page.model.view.presenter = False
        assert rows() == [panes[:2], panes[2:]]
    finally:
        page.model.close()
