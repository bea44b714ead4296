"""Functions the ecosystem wraps, made into what ``jax.jit`` takes, without changing the program.

Two shapes of argument a plain ``jax.jit`` cannot take as the user's own call does:

- Leaves that are not arrays: an ``eqx.nn.MLP`` holds its activation (a ``jax.custom_jvp``
  function) as a leaf; ``jax.jit`` refuses it ("Cannot interpret value of type custom_jvp").
  ``eqx.filter_jit`` holds every non-array leaf static; so does :func:`hold_static`, for the
  leaves ``jax.jit`` cannot take (Python numbers and arrays stay traced, as under ``jax.jit``),
  and for such leaves in the output.
- Flax NNX graph nodes (``nnx.Module``, ``nnx.Optimizer``): an ``nnx.jit`` step updates them in
  place, and a fresh ``jax.jit`` of it returns only what the function returns, so XLA drops the
  update (a loss-only program). ``nnx.jit`` compiles the pure function ``nnx.split`` /
  ``nnx.merge`` make of it, which returns the updated state; :func:`hold_static` measures that.

When no argument needs either, the function and arguments are returned as they are: every
figure of a plain program is what it was.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

__all__ = ["hold_static", "is_jit_leaf"]

_SCALARS = (bool, int, float, complex)


def is_jit_leaf(x: Any) -> bool:
    """Whether ``jax.jit`` takes ``x`` as a traced argument (an array or a Python number)."""
    return isinstance(x, (jax.Array, np.ndarray, np.generic, *_SCALARS)) or hasattr(
        x, "__jax_array__")


def _nnx() -> Any:
    """``flax.nnx`` if the user's program imported it (never imported here)."""
    return sys.modules.get("flax.nnx")


def _is_graph_node(nnx: Any, x: Any) -> bool:
    try:
        return bool(nnx.graph.is_graph_node(x))
    except Exception:  # noqa: BLE001 - an unknown flax: treat as a plain pytree
        return False


def hold_static(fn: Callable, args: tuple, static_argnums: Any = ()
                ) -> tuple[Callable, tuple, tuple[int, ...]]:
    """``(fn, args, static)`` as a plain ``jax.jit`` takes them, computing what the user's call
    computes (see the module docstring). ``static`` are the non-negative static positions."""

    static = static_positions(static_argnums, len(args))
    fn, args = _split_graph_nodes(fn, args, static)
    return (*_hold_non_arrays(fn, args, static), static)


def _named_like(wrapper: Callable, fn: Callable) -> Callable:
    """``wrapper`` carrying ``fn``'s name (jit names the program after it) and signature."""
    return functools.wraps(fn)(wrapper)


def _hold_non_arrays(fn: Callable, args: tuple, static: tuple[int, ...]
                     ) -> tuple[Callable, tuple]:
    held: dict[int, tuple[Any, list]] = {}  # position -> (treedef, leaves with None for arrays)
    replaced = list(args)
    for i, arg in enumerate(args):
        if i in static:
            continue
        leaves, treedef = jax.tree_util.tree_flatten(arg)
        if all(is_jit_leaf(leaf) for leaf in leaves):
            continue
        held[i] = (treedef, [None if is_jit_leaf(leaf) else leaf for leaf in leaves])
        replaced[i] = [leaf for leaf in leaves if is_jit_leaf(leaf)]
    if not held:
        return fn, args

    def rebuilt(i: int, arrays: list) -> Any:
        treedef, leaves = held[i]
        it = iter(arrays)
        return jax.tree_util.tree_unflatten(
            treedef, [next(it) if leaf is None else leaf for leaf in leaves])

    def with_static_leaves(*call_args: Any) -> Any:
        full = [rebuilt(i, a) if i in held else a for i, a in enumerate(call_args)]
        out = fn(*full)
        return jax.tree_util.tree_map(lambda x: x if is_jit_leaf(x) else None, out)

    return _named_like(with_static_leaves, fn), tuple(replaced)


def _split_graph_nodes(fn: Callable, args: tuple, static: tuple[int, ...]
                       ) -> tuple[Callable, tuple]:
    nnx = _nnx()
    if nnx is None:
        return fn, args
    nodes = [i for i, a in enumerate(args) if i not in static and _is_graph_node(nnx, a)]
    if not nodes:
        return fn, args
    # One split for all of them: a model an optimizer also refers to stays one object.
    graphdef, state = nnx.split(tuple(args[i] for i in nodes))
    first = nodes[0]
    replaced = [state if i == first else None if i in nodes else a for i, a in enumerate(args)]

    def split_merged(*call_args: Any) -> Any:
        merged = nnx.merge(graphdef, call_args[first])
        it = iter(merged)
        full = [next(it) if i in nodes else a for i, a in enumerate(call_args)]
        out = fn(*full)
        return out, nnx.state(merged)  # the in-place updates, as nnx.jit returns them

    return _named_like(split_merged, fn), tuple(replaced)


def static_positions(static_argnums: Any, n_args: int) -> tuple[int, ...]:
    """``static_argnums`` as non-negative positions; negative ones count from the end, as in
    ``jax.jit``. A position outside the arguments is a one-line ``ValueError``."""
    try:
        given = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    except TypeError:
        given = (static_argnums,)
    out = []
    for i in given:
        if isinstance(i, bool) or not isinstance(i, int) or not -n_args <= i < n_args:
            raise ValueError(f"static_argnums must name positions of the {n_args} arguments "
                             f"(-{n_args}..{n_args - 1}), got {static_argnums!r}")
        out.append(i % n_args)
    return tuple(sorted(set(out)))
