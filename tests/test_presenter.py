"""Presenter mode without a browser: the URL flag is read strictly, and the plots are drawn again
with larger fonts (the page's fonts are checked in ``test_dashboard_browser.py``)."""

from __future__ import annotations

import holoviews as hv
import pytest

from explorer._model import ExplorerModel
from explorer._model_view import query_flag


@pytest.mark.parametrize(("raw", "expected"), [
    ("true", True), (b"True", True), ("1", True), ("yes", True), ("on", True),
    ("false", False), ("0", False), (b"no", False), ("", False),
    (None, None), ("__import__('os').system('true')", None), ("[1]", None), ("2", None),
])
def test_query_flag_reads_only_yes_and_no(raw, expected):
    assert query_flag(raw) is expected


def _font_sizes(plot) -> tuple[float, float]:
    figure = hv.render(plot, backend="bokeh")
    return (float(figure.title.text_font_size.rstrip("pt")),
            float(figure.xaxis[0].major_label_text_font_size.rstrip("pt")))


def test_presenter_mode_redraws_every_plot_with_larger_fonts():
    model = ExplorerModel()
    try:
        view = model.view
        normal = [_font_sizes(plot) for plot in view.plots()]
        view.presenter = True
        larger = [_font_sizes(plot) for plot in view.plots()]
        for (title, ticks), (big_title, big_ticks) in zip(normal, larger):
            assert big_title > title and big_ticks >= 1.5 * ticks
        view.presenter = False  # the plain plots again, not the presenter copies
        assert [_font_sizes(plot) for plot in view.plots()] == normal
    finally:
        model.close()
