"""Bring a Bokeh figure already on a page up to date with a new rendering of the same shape.

A new result changes a plot's data, fitted exponents (legend labels), ticks and ranges, but
rarely its shape: the same lines, the same legend entries, the same tools. Replacing the page's
figure with a new one costs the server and, more, the browser (it builds every view of the new
figure again: about 0.2 s of the 0.5 s a result took to appear). :func:`plan` walks the live
figure and the new one side by side and lists the property values that differ (of the
properties either model holds a value of: the rest are both their class's default); when the two
have the same shape (the same model types, wired the same way; a plot's renderers and a
legend's items may gain or lose lines), setting those values makes the live figure equal to
the new one, and Bokeh sends the browser only what changed (a new line's own models, no new figure). When
the shape differs otherwise (log axes for a placeholder's plain ones, a legend moved),
:func:`plan` says so and the caller replaces the figure.

Bokeh only: no Panel, no HoloViews.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

import numpy as np
from bokeh.core.property.descriptors import AliasPropertyDescriptor
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


# The lists of models that may gain or lose items in place: a plot's renderers (its lines)
# and a legend's items. Any other list that changes length (a legend moved beside the plot:
# it leaves ``center`` for ``right``) replaces the figure, as a new layout needs.
_GROWING = frozenset({"renderers", "items"})


def _skipped(model: Model, name: str) -> bool:
    """Properties never compared or set: those the browser sets (inner sizes, readonly) and
    other names for another property (aliases, some deprecated)."""
    descriptor = model.lookup(name)
    return isinstance(descriptor, AliasPropertyDescriptor) or descriptor.readonly


def _held(model: Model) -> set[str] | None:
    """The properties ``model`` holds a value of: set, styled by a theme, or a default made for
    it on first reading (a list, a dict, a model: it may have been changed in place since);
    ``None`` when this Bokeh keeps them otherwise."""
    try:
        held = (set(model._property_values) | set(model._unstable_default_values)
                | set(model._unstable_themed_values))
    except AttributeError:
        return None
    return held | set(model.themed_values() or ())


def _compared(live: Model, new: Model) -> set[str]:
    """The properties of two models of one type that can differ. Any other is, on both, its
    class's default, untouched (about nine in ten of a figure's properties, and reading a
    default is most of the cost of comparing all of them)."""
    held_live, held_new = _held(live), _held(new)
    if held_live is None or held_new is None:
        return set(live.properties())
    return held_live | held_new


def _models_only(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, Model) for v in value)


def _identity(model: Model, name: Callable[[str], str]) -> tuple[str, str]:
    """What tells the items of a list of models apart when lining two lists up: the type and
    the line's name (a renderer's ``name``, a legend item's label), as ``name`` reads it."""
    text = getattr(model, "name", None)
    label = getattr(model, "label", None)
    if text is None and label is not None:
        text = label.get("value") if isinstance(label, dict) else getattr(label, "value", label)
    return type(model).__name__, name(str(text)) if text is not None else ""


class _Planner:
    def __init__(self, keep: dict[int, frozenset[str]], name: Callable[[str], str]) -> None:
        self.keep = keep  # id(live model) -> its properties left as they are
        self.name = name
        self.pairs: dict[int, Model] = {}  # id(new model) -> its live counterpart
        self.paired: dict[int, Model] = {}  # id(live model) -> its new counterpart
        self.changes: list[tuple[Model, str, Any]] = []
        self.lists: list[tuple[Model, str, list[tuple[bool, Model]]]] = []

    def model(self, live: Model, new: Model) -> None:
        if type(live) is not type(new):
            raise _Mismatch(f"{type(live).__name__} is now {type(new).__name__}")
        known = self.pairs.get(id(new))
        if known is not None:
            if known is not live:  # one new model standing for two live ones
                raise _Mismatch(f"{type(new).__name__} is wired differently")
            return
        if self.paired.get(id(live), new) is not new:  # one live model for two new ones
            raise _Mismatch(f"{type(live).__name__} is wired differently")
        self.pairs[id(new)], self.paired[id(live)] = live, new
        keep = self.keep.get(id(live), ())
        for name in sorted(_compared(live, new)):
            if name in keep or _skipped(live, name):
                continue
            old_value, new_value = getattr(live, name), getattr(new, name)
            if (name in _GROWING and _models_only(old_value) and _models_only(new_value)
                    and len(old_value) != len(new_value)):
                self.lined_up(live, name, old_value, new_value)
            elif _has_model(old_value) or _has_model(new_value):
                self.linked(old_value, new_value)
            elif not _equal(old_value, new_value):
                self.changes.append((live, name, new_value))

    def lined_up(self, live: Model, name: str, old: list[Model], new: list[Model]) -> None:
        """A list of models that gained or lost items (a line more in the plot): line the two
        up by :func:`_identity`, match the items found in both, and note the list to set,
        with the items only the new one has (they join the page: :meth:`finish`)."""
        matcher = difflib.SequenceMatcher(
            None, [_identity(m, self.name) for m in old], [_identity(m, self.name) for m in new],
            autojunk=False)
        items: list[tuple[bool, Model]] = []  # (from the new rendering?, model)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            common = min(i2 - i1, j2 - j1) if tag == "replace" else (
                i2 - i1 if tag == "equal" else 0)
            for a, b in zip(old[i1:i1 + common], new[j1:j1 + common]):
                self.model(a, b)
                items.append((False, a))
            items.extend((True, b) for b in new[j1 + common:j2])
        self.lists.append((live, name, items))

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

    def finish(self) -> list[tuple[Model, str, Any]]:
        """The changes, with the lists that gained items: their new items join the page, each
        reference in them to a model that has a live counterpart pointing at that one."""
        adopted: set[int] = set()

        def remap(value: Any) -> Any:
            if isinstance(value, Model):
                if id(value) in self.pairs:
                    return self.pairs[id(value)]
                adopt(value)
                return value
            if isinstance(value, dict):
                return {k: remap(v) for k, v in value.items()}
            if isinstance(value, tuple):
                return tuple(remap(v) for v in value)
            if isinstance(value, list):
                return [remap(v) for v in value]
            return value

        def adopt(model: Model) -> None:
            if id(model) in adopted:
                return
            adopted.add(id(model))
            for name in sorted(model.properties()):
                if _skipped(model, name):
                    continue
                value = getattr(model, name)
                if _has_model(value):
                    setattr(model, name, remap(value))

        changes = list(self.changes)
        for live, name, items in self.lists:
            changes.append((live, name, [remap(m) if new else m for new, m in items]))
        return changes


def plan(live: Model, new: Model, *, theme: Any = None, keep: frozenset[str] = frozenset(),
         name: Callable[[str], str] = str) -> list[tuple[Model, str, Any]] | None:
    """The ``(live model, property, new value)`` settings that make ``live`` (a figure on a
    page) equal to ``new`` (one just rendered, in no document), or ``None`` when they differ
    in shape and ``live`` must be replaced. Nothing on the page is changed (the new rendering
    may be: models only it has move into the settings).

    ``theme`` is the page's (a document's theme styles its models; ``new`` is given it first,
    as a document would); ``keep`` names properties of ``live`` itself left as they are, not
    compared (what the page set on the figure: its size in the layout, its stylesheets).
    A list of models that gained or lost items (renderers, legend items: a line more) is lined
    up by type and by line name as ``name`` reads it (a name without what changes with the
    data, such as a fitted exponent)."""
    if theme is not None:
        for model in new.references():
            theme.apply_to_model(model)
    planner = _Planner({id(live): keep}, name)
    try:
        planner.model(live, new)
    except _Mismatch:
        return None
    return planner.finish()


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
