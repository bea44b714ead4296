"""``NamedArray``: read a state by name, compile it as one array."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["NamedArray"]

Layout = tuple[tuple[str, int], ...]


class _Index:
    """Static lookup tables for one layout; built once per layout and cached."""

    __slots__ = ("groups", "names", "offsets", "size", "slices")

    def __init__(self, layout: Layout):
        self.groups = tuple(g for g, _ in layout)
        self.slices: dict[str, tuple[int, int]] = {}
        start = 0
        for group, size in layout:
            self.slices[group] = (start, start + size)
            start += size
        self.size = start
        self.names = tuple(f"{g}_{i}" for g, size in layout for i in range(size))

    def element(self, key: str) -> int | None:
        """Position of the element ``f"{group}_{i}"`` on the named axis, or ``None``."""
        group, sep, index = key.rpartition("_")
        if not sep or group not in self.slices or not index.isdigit() or str(int(index)) != index:
            return None
        start, stop = self.slices[group]
        i = int(index)
        return start + i if i < stop - start else None


# 2**32 float32 elements = 16 GiB: larger than any single accelerator's memory budget we meet.
MAX_ELEMENTS = 2**32


@functools.lru_cache(maxsize=None)
def _index(layout: Layout) -> _Index:
    return _Index(layout)


def _normalize_layout(layout: Mapping[str, int] | Iterable[tuple[str, int]]) -> Layout:
    items = layout.items() if isinstance(layout, Mapping) else layout
    out = []
    for item in items:
        group, size = item
        if not isinstance(group, str) or not group:
            raise ValueError(f"group names must be non-empty strings, got {group!r}")
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"group {group!r} must have a positive integer size, got {size!r}")
        out.append((group, int(size)))
    layout = tuple(out)
    if not layout:
        raise ValueError("a NamedArray needs at least one group")
    groups = [g for g, _ in layout]
    if len(set(groups)) != len(groups):
        raise ValueError(f"group names must be unique, got {groups}")
    total = sum(size for _, size in layout)
    if total > MAX_ELEMENTS:  # checked before the per-name index is built
        raise ValueError(f"a NamedArray of {total:,} names is more than {MAX_ELEMENTS:,} "
                         f"(16 GiB of float32) and fits no device")
    index = _index(layout)
    for group in groups:
        if index.element(group) is not None:
            raise ValueError(f"group name {group!r} is also the name of an element of "
                             f"group {group.rpartition('_')[0]!r}; rename one of them")
    return layout


@jax.tree_util.register_pytree_node_class
class NamedArray:
    """An array whose last axis is split into named groups: one pytree leaf.

    A ``dict`` of scalars reads well (``state["position_3"]``) but gives JAX one
    array per name, so programs and compile times grow with the number of names.
    ``NamedArray`` keeps the readable lookups and hands JAX a single array: the
    names live in static metadata (the pytree's aux data), and every lookup is a
    static slice resolved in Python while tracing.

    The last axis is the named one; any leading axes (batch, time) are left
    alone, so the ``ys`` of a ``lax.scan`` come back as a ``NamedArray`` with a
    time axis in front.

    Example:
        Write the step function against names, and pass ``NamedArray``s
        through ``lax.scan``, ``jax.jit`` and ``jax.grad`` like any pytree::

            import jax
            import jax.numpy as jnp
            from explorer import NamedArray

            state = NamedArray.from_groups({"position": jnp.zeros(3),
                                            "velocity": jnp.ones(3)})
            params = NamedArray.from_groups({"damping": jnp.full(3, 0.1)})

            def step(state, _):
                v = state["velocity"] * (1 - params["damping"])  # shape (3,)
                new = state.replace(position=state["position"] + 0.1 * v,
                                    velocity=v)
                return new, state

            final, trajectory = jax.lax.scan(step, state, None, length=100)
            trajectory["position_0"]    # shape (100,): one element over time
            trajectory[0]               # a NamedArray: the initial state

    Keys:
        * ``x["position"]``: the group's entries, ``data[..., a:b]``.
        * ``x["position_3"]``: one entry (``f"{group}_{i}"``), ``data[..., k]``.
        * ``x[0]``, ``x[2:5]``, ``x[i, j]``: index the leading axes and return a
          ``NamedArray`` with the same layout.

    Attributes:
        data: The array; its last axis has length ``sum of group sizes``.
        layout: Static ``((group, size), ...)`` pairs, in order along the last axis.
    """

    __slots__ = ("data", "layout")

    def __init__(self, data: Any, layout: Mapping[str, int] | Iterable[tuple[str, int]]):
        """Wrap ``data`` whose last axis is laid out as ``layout``.

        Args:
            data: An array (JAX or NumPy); its last axis holds the groups in order.
            layout: ``{group: size}`` or ``((group, size), ...)``.

        Raises:
            ValueError: if the layout is malformed or does not match ``data``'s last axis.
        """
        layout = _normalize_layout(layout)
        if not hasattr(data, "shape"):
            data = jnp.asarray(data)
        size = _index(layout).size
        if data.ndim == 0 or data.shape[-1] != size:
            raise ValueError(f"the last axis of data must have length {size} for layout "
                             f"{_layout_str(layout)}, got shape {tuple(data.shape)}")
        self.data = data
        self.layout = layout

    # -- construction ------------------------------------------------------
    @classmethod
    def from_groups(cls, groups: Mapping[str, Any]) -> NamedArray:
        """Concatenate per-group arrays along their last axis.

        The layout is inferred from the last-axis sizes, in the mapping's order.
        Leading axes must agree.

        Example:
            >>> x = NamedArray.from_groups({"position": jnp.zeros(3), "velocity": jnp.ones(3)})
            >>> x.layout
            (('position', 3), ('velocity', 3))
        """
        if not isinstance(groups, Mapping) or not groups:
            raise ValueError(f"a NamedArray needs at least one group: give a dict of group "
                             f"name to array, got {groups!r}")
        arrays = {}
        for g, a in groups.items():
            try:
                arrays[g] = a if isinstance(a, jax.Array) else jnp.asarray(a)
            except (TypeError, ValueError):
                raise ValueError(f"group {g!r} is not an array of numbers, got "
                                 f"{type(a).__name__}") from None
            if arrays[g].ndim == 0:
                raise ValueError(f"group {g!r} must be at least 1-D (its last axis is named), "
                                 f"got a scalar; use jnp.reshape(value, (1,))")
        leading = {g: tuple(a.shape[:-1]) for g, a in arrays.items()}
        if len(set(leading.values())) > 1:
            shapes = ", ".join(f"{g!r} {tuple(a.shape)}" for g, a in arrays.items())
            raise ValueError(f"groups must have the same leading axes (only the last one is "
                             f"named), got {shapes}")
        layout = tuple((g, a.shape[-1]) for g, a in arrays.items())
        return cls(jnp.concatenate(list(arrays.values()), axis=-1), layout)

    @classmethod
    def zeros(cls, layout, shape: tuple[int, ...] = (), dtype=jnp.float32) -> NamedArray:
        """A zero-filled ``NamedArray`` with leading axes ``shape``."""
        layout = _normalize_layout(layout)
        full = (*shape, sum(size for _, size in layout))  # before any per-name index
        elements = int(np.prod(full, dtype=object))
        if elements > MAX_ELEMENTS:
            raise ValueError(f"NamedArray.zeros of shape {full} has {elements:,} elements; more "
                             f"than {MAX_ELEMENTS:,} (16 GiB of float32) fits no device")
        return cls(jnp.zeros(full, dtype), layout)

    # -- pytree protocol -----------------------------------------------------
    def tree_flatten(self):
        return (self.data,), self.layout

    @classmethod
    def tree_unflatten(cls, layout, children):
        # JAX may rebuild with placeholders instead of arrays: do not validate.
        obj = object.__new__(cls)
        obj.data, = children
        obj.layout = layout
        return obj

    # -- names ---------------------------------------------------------------
    @property
    def groups(self) -> tuple[str, ...]:
        """Group names, in order along the last axis."""
        return _index(self.layout).groups

    @property
    def names(self) -> tuple[str, ...]:
        """All element names, ``f"{group}_{i}"``, in order along the last axis."""
        return _index(self.layout).names

    def to_dict(self) -> dict[str, Any]:
        """``{group: data[..., a:b]}`` for every group."""
        return {g: self[g] for g in self.groups}

    # -- indexing ------------------------------------------------------------
    def __getitem__(self, key):
        if isinstance(key, str):
            return self.data[(Ellipsis, self._position(key))]
        return NamedArray.tree_unflatten(self.layout, (self.data[self._leading(key)],))

    def _position(self, key: str) -> slice | int:
        index = _index(self.layout)
        if key in index.slices:
            return slice(*index.slices[key])
        k = index.element(key)
        if k is None:
            raise KeyError(f"no group or element named {key!r}; groups: "
                           f"{_layout_str(self.layout)} (elements are named like "
                           f"{index.names[0]!r})")
        return k

    def _leading(self, key) -> tuple:
        key = key if isinstance(key, tuple) else (key,)
        if any(k is Ellipsis for k in key):
            raise IndexError("NamedArray positional indexing covers the leading axes only; "
                             "drop the Ellipsis and select groups by name")
        # JAX clamps an out-of-range integer index (x[5] of two rows is the last row): a
        # silent wrong row. Refuse it for concrete integers, as NumPy does.
        for axis, k in enumerate(k for k in key if k is not None):
            if (isinstance(k, (int, np.integer)) and not isinstance(k, bool)
                    and axis < self.data.ndim - 1):
                size = self.data.shape[axis]
                if not -size <= k < size:
                    raise IndexError(f"index {k} is out of range for axis {axis} of size {size}")
        consumed = sum(k is not None for k in key)
        if consumed > self.data.ndim - 1:
            raise IndexError(f"NamedArray of shape {tuple(self.data.shape)} has "
                             f"{self.data.ndim - 1} leading axes, cannot index {consumed}; "
                             f"select along the named axis by name, e.g. x[{self.groups[0]!r}]")
        return (*key, Ellipsis)

    # -- functional updates --------------------------------------------------
    def set(self, name: str, value) -> NamedArray:
        """A copy with group or element ``name`` set to ``value`` (broadcast)."""
        data = self.data if hasattr(self.data, "at") else jnp.asarray(self.data)
        data = data.at[(Ellipsis, self._position(name))].set(value)
        return NamedArray.tree_unflatten(self.layout, (data,))

    def replace(self, **values) -> NamedArray:
        """A copy with several groups or elements replaced: ``x.replace(position=p)``."""
        out = self
        for name, value in values.items():
            out = out.set(name, value)
        return out

    # -- array conveniences --------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def dtype(self):
        return self.data.dtype

    def __len__(self) -> int:
        return self.data.shape[0]

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.data, dtype=dtype)

    def __repr__(self) -> str:
        return (f"NamedArray({_layout_str(self.layout)}; shape={self.shape}, "
                f"dtype={self.dtype})")


def _layout_str(layout: Layout, limit: int = 8) -> str:
    parts = [f"{g} ({size})" for g, size in layout[:limit]]
    if len(layout) > limit:
        parts.append(f"... {len(layout) - limit} more")
    return ", ".join(parts)
