"""``explorer.pack(..., like=None | k)``: any function of pytrees, packed by explorer.jit's passes.

The step contract of :func:`explorer.pack` (every argument's leaves of one shape, the output
shaped like the first argument) is the default; ``like`` lifts it: leaves of several shapes
and dtypes (one stacked array per (shape, dtype) group of an argument), the state in any
argument (``like=1`` for a diffrax vector field ``f(t, y, args)``) or outputs of any structure
(``like=None``). The packed function is plain JAX on stacked arrays, so it can be handed to
``jax.jit``, ``jax.grad``, ``lax.scan`` or ``diffrax.diffeqsolve`` directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from ..util.validate import describe_error
from .jit import JitReport, Jitted

__all__ = ["PackedFunction", "pack_function"]


class PackedFunction:
    """A function packed by ``explorer.pack(fun, *example_args, like=...)``.

    ``f(*f.pack_args(*args))`` computes ``fun(*args)`` on stacked arrays. Each argument is
    packed to one array (its leaves share a shape and dtype), a tuple of arrays (one per
    (shape, dtype) group, in order of first appearance), or itself when it is a single array
    (``t`` of ``f(t, y, args)``). The output is packed like argument ``like``, or, with
    ``like=None``, as the tuple of its (shape, dtype) groups (one array if it has one group);
    :meth:`unpack` gives back ``fun``'s own structure.
    """

    def __init__(self, fun, example_args, like):
        self._fun, self._like = fun, like
        jitted = Jitted(fun)
        jitted._steps_first = False        # packed arrays are lanes first, as documented
        entry = jitted._entry(tuple(example_args), {})[0]
        self._entry = entry
        self._program = entry.program
        # Per argument: its flat leaf range and the indices of its groups among in_groups.
        sizes = [len(jax.tree_util.tree_leaves(a)) for a in example_args]
        starts = np.cumsum([0, *sizes])
        self._args = []
        for k, arg in enumerate(example_args):
            groups = [g for g, idx in enumerate(entry.in_groups)
                      if starts[k] <= idx[0] < starts[k + 1]]
            bare = jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(arg))
            self._args.append((groups, bare, jax.tree_util.tree_structure(arg)))
        self._starts = starts
        if like is not None:
            self._check_like(example_args)
        self.__name__ = f"packed_{getattr(fun, '__name__', type(fun).__name__)}"

    def _check_like(self, example_args) -> None:
        like = self._like
        if not isinstance(like, int) or not 0 <= like < len(example_args):
            raise ValueError(f"pack: like must be None or an argument index below "
                             f"{len(example_args)}, got {like!r}")
        want = jax.tree_util.tree_structure(example_args[like])
        if self._entry.out_treedef != want:
            raise ValueError(f"pack: the output has structure {self._entry.out_treedef}, "
                             f"argument {like} has {want} (use like=None for any output)")
        groups = self._args[like][0]
        lanes = [self._entry.in_structs[g] for g in groups]
        outs = [len(idx) for idx in self._entry.out_groups]
        if outs != [s.shape[0] for s in lanes]:
            raise ValueError(f"pack: the output's leaves group by shape and dtype otherwise "
                             f"than argument {like}'s")

    @property
    def report(self) -> JitReport:
        """What the packer made of ``fun`` (see :class:`explorer.JitReport`)."""
        return self._entry.report

    def pack_args(self, *args) -> tuple:
        """Each argument packed (NumPy, outside any trace), in the layout of the examples."""
        if len(args) != len(self._args):
            raise ValueError(f"pack: takes {len(self._args)} arguments, got {len(args)}")
        flat = []
        for k, (arg, (_, _, treedef)) in enumerate(zip(args, self._args)):
            leaves, got = jax.tree_util.tree_flatten(arg)
            if got != treedef:
                raise ValueError(f"pack: argument {k} has structure {got}, the example had "
                                 f"{treedef}")
            flat += leaves
        stacked = Jitted._stack(self._entry, flat)
        out = []
        for groups, bare, _ in self._args:
            if bare:
                out.append(np.asarray(flat[self._entry.in_groups[groups[0]][0]]))
            else:
                arrays = tuple(stacked[g] for g in groups)
                out.append(arrays[0] if len(arrays) == 1 else arrays)
        return tuple(out)

    def __call__(self, *packed):
        if len(packed) != len(self._args):
            raise ValueError(f"pack: the packed function takes {len(self._args)} arguments, "
                             f"got {len(packed)}")
        arrays = []
        for value, (groups, bare, _) in zip(packed, self._args):
            if bare:
                arrays.append(jax.numpy.asarray(value)[None])
            else:
                arrays += list(value) if len(groups) != 1 else [value]
        outs = list(self._program(*arrays))
        if self._like is None:
            return outs[0] if len(outs) == 1 else tuple(outs)
        if self._args[self._like][1]:                # a bare array: its one leaf
            return outs[0]
        # Packed like the argument: a group of one leaf keeps its lane axis.
        outs = [o if len(idx) > 1 else o[None] for o, idx in zip(outs, self._entry.out_groups)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def unpack(self, packed_out) -> Any:
        """``fun``'s output structure from the packed output."""
        groups = self._entry.out_groups
        outs = [packed_out] if len(groups) == 1 else list(packed_out)
        if self._like is not None and not self._args[self._like][1]:
            outs = [o if len(idx) > 1 else o[0] for o, idx in zip(outs, groups)]
        return Jitted._unstack(self._entry, outs)

    def __repr__(self) -> str:
        return f"PackedFunction({self.__name__}: {self.report.eqns_before} equations before, " \
               f"{self.report.eqns_after} after)"


def pack_function(fun: Callable, example_args: tuple, like: int | None) -> PackedFunction:
    """:class:`PackedFunction` of ``fun``; one-line ``ValueError`` when it cannot be traced."""
    try:
        return PackedFunction(fun, example_args, like)
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - a failure to trace is the user's to see, in a line
        raise ValueError(f"pack: the function could not be traced on the example arguments: "
                         f"{describe_error(e)}") from e
