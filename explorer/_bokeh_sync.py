"""Bring a Bokeh figure already on a page up to date with a new rendering of the same shape.

A new result changes a plot's data, fitted exponents (legend labels), ticks and ranges, but
rarely its shape: the same lines, the same legend entries, the same tools. Replacing the page's
figure with a new one costs the server and, more, the browser (it builds every view of the new
figure again: about 0.2 s of the 0.5 s a result took to appear). :func:`plan` walks the live
figure and the new one side by side and lists the property values that differ; when the two
have the same shape (the same model types, wired the same way), setting those values makes the
live figure equal to the new one, and Bokeh sends the browser only what changed. When the shape
differs (a new line, a legend moved), :func:`plan` says so and the caller replaces the figure.

Bokeh only: no Panel, no HoloViews.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from bokeh.model import Model

__all__ = ["apply", "plan"]


class _Mismatch(Exception):
    """The two figures differ in shape: one cannot be made into the other in place."""


def _has_model(value: Any) -> bool:
    if isinstance(value, Model):
        return True
    if isinstance(value, dict):
        return any(_has_model(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_model(v) for v in value)
    return False


def _equal(a: Any, b: Any) -> bool:
    """Equality of property values without models (arrays by content and dtype, NaN equal to
    NaN, containers element by element)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.kind in "fc":
            return bool(np.array_equal(a, b, equal_nan=True))
        return bool(np.array_equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(_equal(x, y) for x, y in zip(a, b)))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    try:
        return bool(type(a) is type(b) and a == b)
    except (TypeError, ValueError):  # values that do not compare plainly: call them different
        return False


class _Planner:
    def __init__(self, keep: dict[int, frozenset[str]]) -> None:
        self.keep = keep  # id(live model) -> its properties left as they are
        self.pairs: dict[int, Model] = {}  # id(new model) -> its live counterpart
        self.changes: list[tuple[Model, str, Any]] = []

    def model(self, live: Model, new: Model) -> None:
        if type(live) is not type(new):
            raise _Mismatch(f"{type(live).__name__} is now {type(new).__name__}")
        known = self.pairs.get(id(new))
        if known is not None:
            if known is not live:  # one new model standing for two live ones
                raise _Mismatch(f"{type(new).__name__} is wired differently")
            return
        self.pairs[id(new)] = live
        keep = self.keep.get(id(live), ())
        for name in sorted(live.properties()):
            if name in keep or live.lookup(name).readonly:  # readonly: set by the browser
                continue
            old_value, new_value = getattr(live, name), getattr(new, name)
            if _has_model(old_value) or _has_model(new_value):
                self.linked(old_value, new_value)
            elif not _equal(old_value, new_value):
                self.changes.append((live, name, new_value))

    def linked(self, old: Any, new: Any) -> None:
        """Values holding models: the same structure, each model matched in turn."""
        if isinstance(old, Model) and isinstance(new, Model):
            self.model(old, new)
        elif isinstance(old, dict) and isinstance(new, dict):
            if old.keys() != new.keys():
                raise _Mismatch("different keys")
            for key in old:
                self.values(old[key], new[key])
        elif (isinstance(old, (list, tuple)) and isinstance(new, (list, tuple))
              and len(old) == len(new)):
            for a, b in zip(old, new):
                self.values(a, b)
        else:
            raise _Mismatch(f"{type(old).__name__} is now {type(new).__name__}")

    def values(self, old: Any, new: Any) -> None:
        if _has_model(old) or _has_model(new):
            self.linked(old, new)
        elif not _equal(old, new):  # a plain value beside models in one container
            raise _Mismatch("a value inside a list of models differs")


def plan(live: Model, new: Model, *, theme: Any = None,
         keep: frozenset[str] = frozenset()) -> list[tuple[Model, str, Any]] | None:
    """The ``(live model, property, new value)`` settings that make ``live`` (a figure on a
    page) equal to ``new`` (one just rendered, in no document), or ``None`` when they differ
    in shape and ``live`` must be replaced. Nothing on the page is changed.

    ``theme`` is the page's (a document's theme styles its models; ``new`` is given it first,
    as a document would); ``keep`` names properties of ``live`` itself left as they are, not
    compared (what the page set on the figure: its size in the layout, its stylesheets)."""
    if theme is not None:
        for model in new.references():
            theme.apply_to_model(model)
    planner = _Planner({id(live): keep})
    try:
        planner.model(live, new)
    except _Mismatch:
        return None
    return planner.changes


def apply(changes: list[tuple[Model, str, Any]]) -> None:
    """Set the values :func:`plan` listed (in a document: the browser is sent only these)."""
    for model, name, value in changes:
        # A shallow copy: containers of the new rendering's models stay theirs (Bokeh refuses
        # one source's data given to another as is).
        if isinstance(value, dict):
            value = dict(value)
        elif isinstance(value, list):
            value = list(value)
        setattr(model, name, value)
