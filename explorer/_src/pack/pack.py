"""``explorer.pack``: keep a per-name step, compile it like one array.

A jaxpr-level SLP (superword-level-parallelism) vectoriser. The user's step is traced once on
example pytrees (``jax.make_jaxpr``), nested ``jit`` calls (``jnp.where``, ``jnp.clip``...) are
inlined, and every value gets a structural signature: primitive, params, shape and dtype, and the
signatures of its operands (a leaf read is "argument k", a constant is "a constant of this
shape"). Output leaves with the same signature compute the same formula on different names: each
such group becomes one pack, evaluated once on vectors (leaf reads become a static slice or a
gather of the stacked input, per-name constants one constant vector), and the groups are put back
in order (a concatenation, a stack and reshape when they interleave by stride, else one static
permutation). Groups whose formulas differ only in which leaves they read (a chain's end reads
the constant ``0.0`` where the middle reads a neighbour) are merged when that operand is a few
slices and constants; a group whose formula lacks one added term of a larger group's reads that
term on constants that make it exactly 0 (checked when packing: a chain's last mass has no
right-hand spring) and joins it. A computation the step traced twice is one value (a spring's
force, once per mass it joins), and a pack whose lanes were already computed as lanes of another
vector reads them as a slice of it. A value pack cannot vectorise (several outputs, a sub-program such as
``custom_jvp_call`` or ``scan``, no batching rule) is evaluated leaf by leaf and named in
:attr:`Packed.report`: the numbers are always those of the unwrapped step.

Lanes: an argument's leaves are held either in ``tree_leaves`` order or, when that makes more
of the reads slices instead of gathers, in the natural order of their paths (``x_2`` before
``x_10``; dict keys sort as text). ``Packed.__call__`` keeps the public ``tree_leaves`` order;
``to_layout`` / ``step_in_layout`` / ``from_layout`` (and ``rollout``) let a loop permute once,
outside it.

Data are packed with NumPy, outside any trace, so the compiled program takes one array per
argument (the boundary of jax-ml/jax#4667 "Slow compilation for functions acting on PyTrees").

The passes live in their own modules: :mod:`.step_graph` (inline, number, complete),
:mod:`.step_layout` (group, merge, lay out), :mod:`.step_emit` (emit); what vectorises is
decided by :func:`.prims.vectorises` (a public ``jax.vmap`` probe).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core as jex_core

from ..util.validate import check_int, describe_error
from .general import pack_function
from .step_emit import _Emitter
from .step_graph import Kind, _complete_outputs, _Graph, _Node
from .step_layout import _assemble, _choose_layouts, _merge_groups, _take

__all__ = ["PackReport", "Packed", "pack"]


MAX_STEPS = 10**9  # a rollout's length and unroll: any whole number of steps a device holds


@dataclasses.dataclass(frozen=True)
class PackReport:
    """What :func:`pack` made of a step.

    Attributes:
        eqns_before: Equations of the unwrapped step, nested ``jit`` calls inlined.
        eqns_after: Equations of the packed step (traced on the stacked arrays).
        packs: Groups of output leaves computed by one formula each.
        permuted: Whether the groups are put back in order by a static permutation (or, when
            they interleave with one stride, a stack and a reshape).
        relaid: Whether some argument's lanes are held in another order than
            ``tree_leaves`` order (see :attr:`Packed.layout`); ``eqns_after`` counts the
            step in that layout.
        scalar: Primitives evaluated leaf by leaf (unknown to the vectoriser), sorted.
        n_scalar: Number of such leaf-by-leaf evaluations.
    """

    eqns_before: int
    eqns_after: int
    packs: int
    permuted: bool
    scalar: tuple[str, ...]
    n_scalar: int
    relaid: bool = False

    def __str__(self) -> str:
        text = (f"{self.eqns_before} equations before, {self.eqns_after} vector ops after, "
                f"{self.packs} pack{'' if self.packs == 1 else 's'}" + (", one permutation" if self.permuted else "")
                + (", lanes relaid" if self.relaid else ""))
        if self.scalar:
            text += (f"; left scalar: {self.n_scalar} evaluations of "
                     f"{', '.join(self.scalar)}")
        return text



def _path(path) -> str:
    return jax.tree_util.keystr(path) or "<root>"


def _leaf_specs(tree, what: str):
    """Leaves with paths, their common shape and dtype; one-line ValueError otherwise."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
    if not flat:
        raise ValueError(f"pack: {what} has no leaves to stack")
    arrays = []
    for path, leaf in flat:
        try:
            arrays.append((path, np.asarray(leaf) if not isinstance(leaf, jax.Array) else leaf))
        except Exception as e:  # noqa: BLE001 - any leaf NumPy cannot read
            raise ValueError(f"pack: {what} leaf {_path(path)} is not an array: "
                             f"{type(leaf).__name__}") from e
    shape = np.shape(arrays[0][1])
    dtype = jax.dtypes.canonicalize_dtype(arrays[0][1].dtype)
    for path, leaf in arrays:
        if np.shape(leaf) != shape or jax.dtypes.canonicalize_dtype(leaf.dtype) != dtype:
            raise ValueError(
                f"pack: {what} leaf {_path(path)} has shape {np.shape(leaf)} and dtype "
                f"{leaf.dtype}, the first leaf {_path(arrays[0][0])} has {shape} and {dtype}: "
                "leaves must share a shape and dtype to stack (pack(..., like=0) packs "
                "leaves of several shapes)")
    return treedef, [a for _, a in arrays], shape, dtype


def _structure_error(got, want, what: str) -> str:
    got_paths = [_path(p) for p, _ in jax.tree_util.tree_flatten_with_path(got)[0]]
    want_tree = jax.tree_util.tree_unflatten(want, [0] * want.num_leaves)
    want_paths = [_path(p) for p, _ in jax.tree_util.tree_flatten_with_path(want_tree)[0]]
    for g, w in zip(got_paths, want_paths):
        if g != w:
            return (f"pack: {what} has leaf {g} where the state has {w} (pack(..., like=None) "
                    "packs outputs of any structure)")
    if len(got_paths) > len(want_paths):
        return f"pack: {what} has extra leaf {got_paths[len(want_paths)]}"
    if len(got_paths) < len(want_paths):
        return f"pack: {what} lacks leaf {want_paths[len(got_paths)]}"
    return f"pack: {what} has structure {jax.tree_util.tree_structure(got)}, expected {want}"


class Packed:
    """A step packed by :func:`pack`: call it on stacked arrays.

    ``p(x, theta)`` computes ``step(state, params)`` on ``x, theta = p.pack_args(state,
    params)`` and returns the output leaves stacked like ``x``; :meth:`unpack` turns that back
    into the step's output structure. The call is ordinary JAX (``jit``, ``grad``, ``vmap``,
    ``lax.scan``) and its program does not grow with the number of names. In a loop, prefer
    :meth:`rollout` (or :meth:`step_in_layout` on data put in :attr:`layout` once): ``p(x,
    theta)`` permutes on the way in and out when the lanes are relaid.
    """

    def __init__(self, step, graph, outs, treedefs, specs, out_treedef, eqns_before, paths):
        self._step = step
        self._graph = graph
        self._treedefs = treedefs
        self._specs = specs                        # per argument: (n_leaves, shape, dtype)
        self._out_treedef = out_treedef
        self._eqns_before = eqns_before
        # Output leaves grouped by signature (first-appearance order); then the lane layout in
        # which the groups' leaf reads are slices, and the lane order inside each group.
        groups: dict[int, list[int]] = {}
        for i, node in enumerate(outs):
            groups.setdefault(node.sig, []).append(i)
        leaf_groups = [np.asarray(idx) for idx in groups.values()]
        layouts, lane_order = _choose_layouts(
            [[outs[i] for i in idx] for idx in leaf_groups], leaf_groups, specs, paths)
        self._layouts = layouts                    # per argument: None or lane -> leaf index
        self._where = [None if lay is None else np.argsort(lay) for lay in layouts]
        pos0 = self._where[0] if self._where[0] is not None else np.arange(len(outs))
        ordered = [idx[order] for idx, order in zip(leaf_groups, lane_order)]
        ordered = _merge_groups(outs, ordered, pos0, self._where)
        ordered.sort(key=lambda idx: int(pos0[idx[0]]))
        self._groups = [[outs[i] for i in idx] for idx in ordered]
        self._perm, self._interleave = _assemble([pos0[idx] for idx in ordered])
        self._report = None
        # What jit and make_jaxpr name the packed step by (otherwise they ask repr(self), which
        # computes the report by tracing it: a recursion).
        self.__name__ = f"packed_{getattr(step, '__name__', type(step).__name__)}"

    @property
    def layout(self) -> tuple[np.ndarray, ...]:
        """Per argument, the ``tree_leaves`` index of the leaf each lane holds.

        :func:`pack` may hold an argument's leaves in another order than ``tree_leaves``
        order when its step then reads neighbours as slices instead of gathers (a dict orders
        ``x_10`` before ``x_2``; the lanes are then ``x_0, x_1, x_2, ...``). :meth:`__call__`
        hides this (it permutes on the way in and out); a loop that wants no permutation per
        step converts once with :meth:`to_layout`, runs :meth:`step_in_layout`, and converts
        back with :meth:`from_layout` (as :meth:`rollout` does).
        """
        return tuple(np.arange(n) if lay is None else lay.copy()
                     for lay, (n, _, _) in zip(self._layouts, self._specs))

    def to_layout(self, *stacked, axis: int = 0) -> tuple:
        """Stacked arguments (``tree_leaves`` order on ``axis``) in the lane layout.

        NumPy in, NumPy out (nothing traced): do it once, outside the loop.
        """
        if len(stacked) != len(self._specs):
            raise ValueError(f"pack: to_layout takes {len(self._specs)} stacked arrays, "
                             f"got {len(stacked)}")
        return tuple(_take(a, lay, axis) for a, lay in zip(stacked, self._layouts))

    def from_layout(self, stacked, axis: int = 0):
        """Output leaves in the lane layout back in ``tree_leaves`` order (on ``axis``)."""
        return _take(stacked, self._where[0], axis)

    def pack_args(self, *args) -> tuple:
        """One stacked NumPy array per argument, leaves in ``tree_leaves`` order on axis 0.

        Raises:
            ValueError: one line naming the leaf whose structure, shape or dtype differs
                from the example the step was packed with.
        """
        if len(args) != len(self._treedefs):
            raise ValueError(f"pack: pack_args takes {len(self._treedefs)} arguments, "
                             f"got {len(args)}")
        stacked = []
        for k, (arg, treedef) in enumerate(zip(args, self._treedefs)):
            if jax.tree_util.tree_structure(arg) != treedef:
                raise ValueError(_structure_error(arg, treedef, f"argument {k}"))
            _, leaves, shape, dtype = _leaf_specs(arg, f"argument {k}")
            n, want_shape, want_dtype = self._specs[k]
            if shape != want_shape:
                raise ValueError(f"pack: argument {k} leaves have shape {shape}, the step was "
                                 f"packed for {want_shape}")
            stacked.append(np.stack([np.asarray(leaf, want_dtype) for leaf in leaves]))
        return tuple(stacked)

    def unpack(self, stacked) -> Any:
        """The step's output structure from stacked output leaves (axis 0)."""
        if not isinstance(stacked, jax.core.Tracer):
            stacked = np.asarray(stacked)
        n = self._out_treedef.num_leaves
        if stacked.shape[:1] != (n,):
            raise ValueError(f"pack: unpack expects {n} stacked leaves on axis 0, "
                             f"got shape {tuple(stacked.shape)}")
        return jax.tree_util.tree_unflatten(self._out_treedef, [stacked[i] for i in range(n)])

    def __call__(self, *args):
        arrays = self._check_stacked(args)
        return self.from_layout(self.step_in_layout(*self.to_layout(*arrays)))

    def step_in_layout(self, *args):
        """The packed step on arguments in the lane layout (:attr:`layout`), output likewise."""
        arrays = self._check_stacked(args)
        emit = _Emitter(arrays, self._where)
        parts = []
        for lanes in self._groups:
            value, batched = emit(tuple(lanes))
            if not batched:
                value = jnp.broadcast_to(value, (len(lanes), *jnp.shape(value)))
            parts.append(value)
        if self._interleave is not None:         # lanes g, g + k, g + 2k, ... per group
            out = jnp.stack([parts[g] for g in self._interleave], axis=1)
            return out.reshape((-1, *out.shape[2:]))
        out = parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=0)
        if self._perm is not None:
            out = jnp.take(out, self._perm, axis=0, unique_indices=True,
                           indices_are_sorted=False)
        return out

    def rollout(self, x, *rest, length: int, unroll: int = 1):
        """The states before each of ``length`` steps (row 0 is ``x``), stacked like ``x``.

        A ``lax.scan`` of :meth:`step_in_layout`: the lane layout is applied once before the
        loop and undone once after it, never inside.
        """
        check_int("length", length, 1, MAX_STEPS)  # lax.scan's own error, or 2.5 cut to 2
        check_int("unroll", unroll, 1, MAX_STEPS)
        x_in, *rest_in = self.to_layout(x, *rest)

        def body(state, _):
            return self.step_in_layout(state, *rest_in), state

        states = lax.scan(body, x_in, xs=None, length=length, unroll=unroll)[1]
        return self.from_layout(states, axis=1)

    def _check_stacked(self, args) -> list:
        if len(args) != len(self._specs):
            raise ValueError(f"pack: the packed step takes {len(self._specs)} stacked arrays, "
                             f"got {len(args)}")
        arrays = []
        for k, (a, (n, shape, dtype)) in enumerate(zip(args, self._specs)):
            a = jnp.asarray(a)
            if a.shape != (n, *shape):
                raise ValueError(f"pack: argument {k} has shape {a.shape}, expected "
                                 f"{(n, *shape)} (use pack_args)")
            arrays.append(a)
        return arrays

    @property
    def report(self) -> PackReport:
        """Equations before / vector ops after / packs / what was left scalar."""
        if self._report is None:
            structs = [jax.ShapeDtypeStruct((n, *shape), dtype)
                       for n, shape, dtype in self._specs]
            # Traced through a plain function: tracing ``self`` itself would name the trace
            # after ``repr(self)``, which asks for this report again.
            after = _count_eqns(
                jax.make_jaxpr(lambda *a: self.step_in_layout(*a))(*structs).jaxpr)
            self._report = PackReport(
                eqns_before=self._eqns_before, eqns_after=after, packs=len(self._groups),
                permuted=self._perm is not None or self._interleave is not None,
                scalar=tuple(sorted(self._graph.scalar)),
                n_scalar=sum(self._graph.scalar.values()),
                relaid=any(lay is not None for lay in self._layouts))
        return self._report

    def __repr__(self) -> str:
        name = getattr(self._step, "__name__", type(self._step).__name__)
        return f"Packed({name}: {self.report})"


def _count_eqns(jaxpr) -> int:
    total = 0
    for eqn in jaxpr.eqns:
        total += 1
        for value in eqn.params.values():
            for sub in value if isinstance(value, tuple) else (value,):
                if isinstance(sub, jex_core.ClosedJaxpr):
                    total += _count_eqns(sub.jaxpr)
                elif isinstance(sub, jex_core.Jaxpr):
                    total += _count_eqns(sub)
    return total



def pack(step: Callable, *example_args, like: int | str | None = "step"):
    """Vectorise a per-name ``step(state, params)`` so its program does not grow with names.

    Args:
        step: A function of pytrees (dicts of scalars, say) returning a pytree shaped like
            its first argument. Any Python loop over names is fine: it runs once, here.
        *example_args: Example pytrees (``state, params``). Within each argument all leaves
            must share one shape and dtype; scalars stack to a vector, ``(d,)`` leaves to an
            ``(n, d)`` matrix. Their values are not kept, only their structure.
        like: ``"step"`` (the default) for the contract above. An argument index ``k`` packs
            any function whose output is shaped like argument ``k`` (``like=1`` for a diffrax
            vector field ``f(t, y, args)``), ``None`` any function at all; either way leaves
            of several shapes and dtypes each get their stacked array: a
            :class:`~explorer._src.pack.general.PackedFunction`, packed by
            :func:`explorer.jit`'s passes (scans and loops inside included).

    Returns:
        A :class:`Packed` step: ``x, theta = p.pack_args(state, params)``; ``p(x, theta)``;
        ``p.unpack(...)``; ``p.report``.

    Raises:
        ValueError: one line, naming the leaf path where there is one, if an argument's leaves
            cannot stack, the step cannot be traced, or it returns another structure, shape
            or dtype than its first argument.
    """
    if not callable(step):
        raise ValueError(f"pack: step must be callable, got {type(step).__name__}")
    if not example_args:
        raise ValueError("pack: give example arguments, e.g. pack(step, state, params)")
    if like != "step":
        return pack_function(step, example_args, like)
    treedefs, specs, paths = [], [], []
    for k, arg in enumerate(example_args):
        treedef, leaves, shape, dtype = _leaf_specs(arg, f"argument {k}")
        treedefs.append(treedef)
        specs.append((len(leaves), shape, dtype))
        paths.append([p for p, _ in jax.tree_util.tree_flatten_with_path(arg)[0]])
    structs = [jax.tree_util.tree_unflatten(t, [jax.ShapeDtypeStruct(s, d)] * n)
               for t, (n, s, d) in zip(treedefs, specs)]
    try:
        closed, out_shape = jax.make_jaxpr(step, return_shape=True)(*structs)
    except Exception as e:  # noqa: BLE001 - any failure to trace is the user's to see
        raise ValueError(f"pack: step could not be traced on the example arguments: "
                         f"{describe_error(e)}") from e
    out_treedef = jax.tree_util.tree_structure(out_shape)
    if out_treedef != treedefs[0]:
        raise ValueError(_structure_error(out_shape, treedefs[0], "step's output"))
    n, shape, dtype = specs[0]
    for path, leaf in jax.tree_util.tree_flatten_with_path(out_shape)[0]:
        if leaf.shape != shape or leaf.dtype != dtype:
            raise ValueError(f"pack: step's output leaf {_path(path)} has shape {leaf.shape} "
                             f"and dtype {leaf.dtype}, the state's leaves {shape} and {dtype}")
    graph = _Graph()
    inputs = []
    for k, (n_k, s, d) in enumerate(specs):
        leaf = graph.sig(("leaf", s, np.dtype(d).str))
        zero = np.zeros(s, d)   # what a completed formula reads in a lane without this term
        inputs += [_Node(Kind.IN, graph.sig(("in", k, s, str(d))), shape_sig=leaf, arg=k, pos=i,
                         value=zero) for i in range(n_k)]
    outs = graph.inline(closed.jaxpr, closed.consts, inputs)
    outs = _complete_outputs(graph, outs)
    return Packed(step, graph, outs, treedefs, specs, out_treedef, graph.n_eqns, paths)

