"""The few uses of other projects' private internals the explorer cannot do without.

One function per use, each self-contained: what it does through the private route, the public
fallback it takes when that route is gone, and the upstream issue or gap it waits on. Each has a
test (named in its docstring) that fails when the upstream behaviour it relies on changes, so an
upgrade shows there first instead of as a quietly slower or broken page.
"""

from __future__ import annotations

from typing import Any

__all__ = ["template_without_web_fonts"]


def template_without_web_fonts(template: type) -> type:
    """A subclass of the Panel template class ``template`` that asks no font host for a web
    font (Panel's ``VanillaTemplate`` links Google's Lato stylesheet): a served page then asks
    nothing of any host but its own server, and works offline (a classroom, an air-gapped
    machine).

    Private route: the template's class attribute ``_resources["css"]``, which holds that
    stylesheet's address, emptied. Public fallback: when the attribute is not there (or is not
    a dict with a ``"css"`` entry), ``template`` itself, which works online and shows the
    browser's own font offline. Waits on a public switch for a template's web fonts, which
    Panel does not have (none filed upstream as of Panel 1.9.4). Tested by
    ``tests/test_dashboard.py::test_the_served_page_asks_no_font_host``.
    """
    resources: Any = getattr(template, "_resources", None)
    if not isinstance(resources, dict) or not isinstance(resources.get("css"), dict):
        return template
    return type(template.__name__, (template,), {
        "_resources": {**resources, "css": {}}, "__module__": __name__,
        "__doc__": template.__doc__})
