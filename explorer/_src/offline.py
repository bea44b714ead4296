"""A notebook exported as a class handout that asks nothing of the network.

``notebooks/offline`` (an nbconvert template) runs :class:`OfflineStylesheets` on the executed
notebook. The notebooks load Bokeh's and Panel's JavaScript inline (``inline=True``), but the
Panel components in their outputs still name stylesheets by their address on Panel's CDN
(``https://cdn.holoviz.org/panel/<version>/dist/css/loading.css`` and a theme's): offline the
page's widgets are then unstyled, and online it asks that host. Each such address whose file is
in the installed Panel is replaced by the file itself, as a ``data:`` address.
"""

from __future__ import annotations

import base64
import functools
import re
from importlib import resources
from typing import Any

from nbconvert.preprocessors import Preprocessor

__all__ = ["OfflineStylesheets", "inline_stylesheets"]

# Panel's CDN: https://cdn.holoviz.org/panel/<version>/dist/<path>[?v=<version>]
_CDN = re.compile(r"https://cdn\.holoviz\.org/panel/[^/\"'\s]+/dist/([^\"'\s?]+\.css)"
                  r"(?:\?v=[^\"'\s]*)?")


@functools.cache
def _data_url(path: str) -> str | None:
    """The installed Panel's ``dist/<path>`` as a ``data:`` address (``None`` if absent)."""
    found = resources.files("panel").joinpath("dist", *path.split("/"))
    if not found.is_file():
        return None
    return "data:text/css;base64," + base64.b64encode(found.read_bytes()).decode("ascii")


def inline_stylesheets(text: str) -> str:
    """``text`` with every Panel CDN stylesheet address the installed Panel has replaced by
    the stylesheet itself."""
    return _CDN.sub(lambda m: _data_url(m.group(1)) or m.group(0), text)


def _inline(value: Any) -> Any:
    if isinstance(value, str):
        return inline_stylesheets(value)
    if isinstance(value, list):
        return [_inline(v) for v in value]
    if isinstance(value, dict):
        return {k: _inline(v) for k, v in value.items()}
    return value


class OfflineStylesheets(Preprocessor):
    """nbconvert preprocessor: the outputs' Panel stylesheets carried in the page."""

    def preprocess_cell(self, cell: Any, resources: Any, index: int) -> tuple[Any, Any]:
        for output in cell.get("outputs", []):
            if "data" in output:
                output["data"] = _inline(output["data"])
        return cell, resources
