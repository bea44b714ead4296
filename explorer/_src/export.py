"""The plots as one standalone HTML file: a class handout that shows its plots offline."""

from __future__ import annotations

import re
from collections.abc import Sequence

import holoviews as hv

__all__ = ["export_html"]

# With Panel imported, Bokeh also lists a script of Panel's server (a module shim the plots do
# not use) by a path relative to a server, and the stylesheets of the models of Panel's
# extensions (Tabulator's: by a relative path, or on cdn.holoviz.org from a served page).
_SERVER_SCRIPT = re.compile(r'<script[^>]*\bsrc="static/[^"]*"[^>]*>\s*</script>\s*')
_STYLESHEET_LINK = re.compile(r'<link\b[^>]*\brel="stylesheet"[^>]*>\s*')


def export_html(plots: Sequence[hv.core.Dimensioned],
                title: str = "PyTree Compile Explorer") -> bytes:
    """The plots as one standalone HTML file (Bokeh's JavaScript inlined: works offline, and
    asks no other host for anything).

    Rendered straight to Bokeh and embedded with :func:`bokeh.embed.file_html`, not through
    ``hv.save``: that path goes through Panel and, called from a live page, switches that
    page's stylesheets to the CDN for a moment.
    """
    import holoviews.plotting.bokeh  # noqa: F401, PLC0415 - HoloViews' Bokeh options
    from bokeh.embed import file_html  # noqa: PLC0415
    from bokeh.resources import INLINE  # noqa: PLC0415

    fixed = [p.opts(backend="bokeh", responsive=False, width=720, clone=True) for p in plots]
    layout = hv.Layout(fixed).cols(2).opts(backend="bokeh", shared_axes=False)
    html = file_html(hv.render(layout, backend="bokeh"), INLINE, title)
    # A standalone file offline cannot load those, and must ask no other host for anything.
    return _STYLESHEET_LINK.sub("", _SERVER_SCRIPT.sub("", html)).encode()
