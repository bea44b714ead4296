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
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core as jex_core
from jax._src.interpreters import batching  # which primitives have a vmap rule

from ..util.validate import describe_error

__all__ = ["PackReport", "Packed", "pack"]

_INLINE = ("pjit", "jit", "closed_call", "core_call")


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
                f"{self.packs} packs" + (", one permutation" if self.permuted else "")
                + (", lanes relaid" if self.relaid else ""))
        if self.scalar:
            text += (f"; left scalar: {self.n_scalar} evaluations of "
                     f"{', '.join(self.scalar)}")
        return text


class _Node:
    """One value of the inlined step: a leaf read, a constant, or an equation's output.

    ``sig`` is its exact structural signature; ``shape_sig`` the same with every leaf (a read
    of any argument, a constant) reduced to its shape and dtype: values that share it compute
    one formula up to which leaves they read (``x[i-1]`` in one lane, the constant ``0.0`` at
    the chain's end).
    """

    __slots__ = ("kind", "sig", "shape_sig", "arg", "pos", "value", "eqn", "operands", "index")

    def __init__(self, kind, sig, *, shape_sig=None, arg=None, pos=None, value=None, eqn=None,
                 operands=(), index=0):
        self.kind, self.sig, self.arg, self.pos, self.value = kind, sig, arg, pos, value
        self.shape_sig = sig if shape_sig is None else shape_sig
        self.eqn, self.operands, self.index = eqn, operands, index


def _params_key(params: dict) -> Any:
    items = tuple(sorted(params.items()))
    try:
        hash(items)
        return items
    except TypeError:
        return repr(items)


def _packable(eqn) -> bool:
    if len(eqn.outvars) != 1 or eqn.effects:
        return False
    for value in eqn.params.values():
        if isinstance(value, (jex_core.Jaxpr, jex_core.ClosedJaxpr)):
            return False
        if isinstance(value, tuple) and any(
                isinstance(v, (jex_core.Jaxpr, jex_core.ClosedJaxpr)) for v in value):
            return False
    return eqn.primitive in batching.fancy_primitive_batchers


class _Graph:
    """The step's values as nodes with interned structural signatures."""

    def __init__(self):
        self._sigs: dict[Any, int] = {}
        self.n_eqns = 0
        self.scalar: dict[str, int] = {}
        # Value numbering: one node per distinct computation (an equation of the same
        # primitive and parameters on the same operand nodes), as the step traced it twice
        # (a spring's force in both masses it joins); packs can then reuse each other's lanes.
        self._values: dict[Any, _Node] = {}

    def sig(self, key) -> int:
        return self._sigs.setdefault(key, len(self._sigs))

    def const(self, value) -> _Node:
        value = np.asarray(value)
        return _Node("const", self.sig(("const", value.shape, value.dtype.str)), value=value,
                     shape_sig=self.sig(("leaf", value.shape, value.dtype.str)))

    def op(self, eqn, operands: tuple[_Node, ...]) -> _Node:
        """The node of ``eqn`` on ``operands``: signed, and the same node for the same
        computation (value numbering)."""
        params = _params_key(eqn.params)
        value_key = (eqn.primitive, params, tuple(id(o) for o in operands))
        node = self._values.get(value_key)
        if node is None:
            aval = eqn.outvars[0].aval
            key = (eqn.primitive.name, params, aval.shape, aval.dtype,
                   tuple(o.sig for o in operands))
            shape_key = (*key[:4], tuple(o.shape_sig for o in operands))
            node = self._values[value_key] = _Node(
                "op", self.sig(key), shape_sig=self.sig(("shape", shape_key)), eqn=eqn,
                operands=operands)
        return node

    def inline(self, jaxpr, consts, args) -> list[_Node]:
        env: dict = {}

        def read(atom):
            if isinstance(atom, jex_core.Literal):
                return self.const(atom.val)
            return env[atom]

        for var, value in zip(jaxpr.constvars, consts):
            env[var] = self.const(value)
        for var, node in zip(jaxpr.invars, args):
            env[var] = node
        for eqn in jaxpr.eqns:
            operands = tuple(read(a) for a in eqn.invars)
            inner = eqn.params.get("jaxpr")
            if eqn.primitive.name in _INLINE and isinstance(inner, jex_core.ClosedJaxpr):
                outs = self.inline(inner.jaxpr, inner.consts, operands)
            elif _packable(eqn):
                self.n_eqns += 1
                outs = [self.op(eqn, operands)]
            else:
                self.n_eqns += 1
                self.scalar[eqn.primitive.name] = self.scalar.get(eqn.primitive.name, 0) + 1
                call = _Node("opaque", self.sig(("opaque", id(eqn), len(self._sigs))),
                             eqn=eqn, operands=operands)
                outs = [_Node("out", self.sig(("out", call.sig, i)), operands=(call,), index=i)
                        for i in range(len(eqn.outvars))]
            for var, node in zip(eqn.outvars, outs):
                env[var] = node
        return [read(a) for a in jaxpr.outvars]


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
                "leaves must share a shape and dtype to stack")
    return treedef, [a for _, a in arrays], shape, dtype


def _structure_error(got, want, what: str) -> str:
    got_paths = [_path(p) for p, _ in jax.tree_util.tree_flatten_with_path(got)[0]]
    want_tree = jax.tree_util.tree_unflatten(want, [0] * want.num_leaves)
    want_paths = [_path(p) for p, _ in jax.tree_util.tree_flatten_with_path(want_tree)[0]]
    for g, w in zip(got_paths, want_paths):
        if g != w:
            return f"pack: {what} has leaf {g} where the state has {w}"
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


def _stride(idx: np.ndarray) -> int:
    """The step of a read that is a (strided) slice, else 0 (it needs a gather)."""
    if len(idx) < 2:
        return 1
    steps = np.diff(idx)
    return int(steps[0]) if steps[0] >= 1 and np.all(steps == steps[0]) else 0


def _take(a, lanes, axis):
    """``a`` reordered along ``axis`` (NumPy stays NumPy); ``lanes`` None means as it is."""
    if lanes is None:
        return a
    if isinstance(a, (np.ndarray, np.generic)):
        return np.take(a, lanes, axis=axis)
    return jnp.take(a, lanes, axis=axis, unique_indices=True, indices_are_sorted=False)


def _assemble(lanes: list[np.ndarray]):
    """How the groups' values, emitted in this order, fill the output lanes: ``(None, None)``
    when concatenating them is already lane order, ``(None, order)`` when the groups interleave
    with one stride (group ``order[r]`` holds lanes ``r, r + k, r + 2k, ...``: a stack and a
    reshape), else ``(perm, None)``: one static permutation of the concatenation."""
    concat = np.concatenate(lanes)
    n, k = len(concat), len(lanes)
    if np.array_equal(concat, np.arange(n)):
        return None, None
    if k > 1 and all(len(g) == n // k for g in lanes) and n % k == 0:
        firsts = [int(g[0]) for g in lanes]
        if sorted(firsts) == list(range(k)) and all(
                np.array_equal(g, np.arange(g[0], n, k)) for g in lanes):
            return None, tuple(int(i) for i in np.argsort(firsts))
    return np.argsort(concat), None


def _leaf_runs(lanes) -> list[tuple]:
    """A pack of leaves cut where it changes between constants and reads of one argument."""
    def kind(n):
        return (n.kind, n.arg) if n.kind in ("in", "const") else None

    runs, start = [], 0
    for i in range(1, len(lanes) + 1):
        if i == len(lanes) or kind(lanes[i]) != kind(lanes[start]) or kind(lanes[i]) is None:
            runs.append(tuple(lanes[start:i]))
            start = i
    return runs


_MAX_RUNS = 3   # pieces one merged pack of leaves may be cut into (a chain: 2)


def _merge_groups(outs, ordered, pos0, where) -> list[np.ndarray]:
    """Merge groups whose formulas differ only in which leaves they read.

    Groups of output leaves that share a ``shape_sig`` are merged (lanes in layout order)
    when every pack of leaves in the merged formula is a constant vector or at most
    ``_MAX_RUNS`` pieces, each a constant or a (strided) slice: a chain's ends then join its
    middle, reading ``concatenate([0.0], x[:-1])`` as the array program does.
    """
    buckets: dict[int, list[int]] = {}
    for g, idx in enumerate(ordered):
        buckets.setdefault(outs[idx[0]].shape_sig, []).append(g)
    merged, used = [], set()
    for gs in buckets.values():
        if len(gs) > 1:
            idx = np.concatenate([ordered[g] for g in gs])
            idx = idx[np.argsort(pos0[idx], kind="stable")]
            if _slices_only(tuple(outs[i] for i in idx), where):
                merged.append(idx)
                used.update(gs)
    return merged + [idx for g, idx in enumerate(ordered) if g not in used]


def _leaf_packs(lanes, seen: set):
    """Every pack of leaves (reads, constants, opaque values) under the formula of ``lanes``,
    once each (``seen`` holds the lane tuples already visited, by node ids); a pack whose
    lanes are all one node is left out."""
    stack = [tuple(lanes)]
    while stack:
        lanes = stack.pop()
        key = tuple(id(n) for n in lanes)
        first = lanes[0]
        if key in seen or all(n is first for n in lanes[1:]):
            continue
        seen.add(key)
        if first.kind == "op":
            stack.extend(tuple(n.operands[j] for n in lanes) for j in range(len(first.operands)))
        else:
            yield lanes


def _slices_only(lanes, where) -> bool:
    """Whether every pack of leaves under ``lanes`` is a constant, a slice, or a few of them."""
    for leaves in _leaf_packs(lanes, set()):
        runs = _leaf_runs(leaves)
        if len(runs) > _MAX_RUNS:
            return False
        for run in runs:
            if run[0].kind == "in":
                pos = np.fromiter((n.pos for n in run), np.int64, len(run))
                if not _stride(pos if where[run[0].arg] is None else where[run[0].arg][pos]):
                    return False
            elif run[0].kind != "const":
                return False
    return True


def _natural_key(path) -> tuple:
    """A leaf path as text and number runs: ``x_2`` before ``x_10``, ``a`` before ``b``."""
    parts = []
    for entry in path:
        for name in ("key", "idx", "name"):
            if hasattr(entry, name):
                entry = getattr(entry, name)
                break
        for run in re.findall(r"\d+|\D+", str(entry)):
            parts.append((1, int(run), "") if run.isdigit() else (0, 0, run))
    return tuple(parts)


def _read_packs(groups) -> list[tuple[int, int, np.ndarray]]:
    """Every pack of leaf reads the groups' formulas reach: (group, argument, leaf indices in
    the group's lane order). Packs that read one leaf in every lane are left out (no index)."""
    reads, seen = [], set()
    for g, outs in enumerate(groups):
        for lanes in _leaf_packs(outs, seen):
            if lanes[0].kind == "in":
                reads.append((g, lanes[0].arg,
                              np.fromiter((n.pos for n in lanes), np.int64, len(lanes))))
    return reads


def _choose_layouts(groups, leaf_groups, specs, paths):
    """The lane layout per argument and the lane order per group, fewest gathered indices.

    Candidates per argument are ``tree_leaves`` order and the natural order of the leaf paths
    (numbers compared as numbers). The state's layout fixes the lane order of every group
    (its output leaves in layout order) and whether the groups need a permutation back; each
    other argument then takes the candidate whose reads are most often slices. Ties keep
    ``tree_leaves`` order. Cost: the length of each gathered index vector, plus the state's
    leaf count for a permutation.
    """
    reads = _read_packs(groups)
    cands = []
    for (n, _, _), arg_paths in zip(specs, paths):
        natural = np.array(sorted(range(n), key=lambda i: _natural_key(arg_paths[i])))
        cands.append([None] if np.array_equal(natural, np.arange(n)) else [None, natural])

    def gathered(idx):
        return 0 if _stride(idx) else len(idx)

    best = None
    for lay0 in cands[0]:
        where0 = None if lay0 is None else np.argsort(lay0)
        pos0 = np.arange(specs[0][0]) if where0 is None else where0
        orders = [np.argsort(pos0[idx], kind="stable") for idx in leaf_groups]
        starts = sorted((int(pos0[idx[o][0]]), g) for g, (idx, o) in
                        enumerate(zip(leaf_groups, orders)))
        perm, _ = _assemble([pos0[leaf_groups[g][orders[g]]] for _, g in starts])
        cost = 0 if perm is None else len(perm)
        layouts = [lay0]
        for k in range(len(specs)):
            options = [lay0] if k == 0 else cands[k]
            costs = []
            for lay in options:
                where = None if lay is None else np.argsort(lay)
                costs.append(sum(gathered(idx[orders[g]] if where is None else
                                          where[idx[orders[g]]])
                                 for g, arg, idx in reads if arg == k))
            pick = int(np.argmin(costs))   # first minimum: tree_leaves order on a tie
            cost += costs[pick]
            if k:
                layouts.append(options[pick])
        if best is None or cost < best[0]:
            best = (cost, layouts, orders)
    return best[1], best[2]


class _Emitter:
    """Emits one vector value per tuple of isomorphic nodes (one node per lane), memoised."""

    def __init__(self, arrays, where):
        self.arrays = arrays
        self.where = where          # per argument: None or leaf index -> lane
        self.memo: dict[tuple[int, ...], tuple[Any, bool]] = {}
        self.opaque: dict[int, list] = {}
        # node id -> (vector, lane) of the first vector op that computed it as one of its lanes
        self.lane_of: dict[int, tuple[Any, int]] = {}

    def __call__(self, lanes: tuple[_Node, ...]):
        key = tuple(id(n) for n in lanes)
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = self._emit(lanes)
        return hit

    def _emit(self, lanes):
        first = lanes[0]
        # One lane of its own formula (a chain's end, say) stays a vector of length 1: no
        # squeeze per read and no broadcast at the end.
        if all(n is first for n in lanes[1:]) and (len(lanes) > 1 or
                                                   first.kind not in ("in", "op")):
            return self._single(first), False
        runs = _leaf_runs(lanes) if first.kind in ("in", "const") else ()
        if len(runs) > 1:       # reads and constants mixed: one piece per run, concatenated
            parts = []
            for run in runs:
                value, batched = self(run)
                parts.append(value if batched else
                             jnp.broadcast_to(value, (len(run), *jnp.shape(value))))
            return jnp.concatenate(parts, axis=0), True
        if first.kind == "in":
            idx = self._lanes(first.arg, np.fromiter((n.pos for n in lanes), np.int64,
                                                     len(lanes)))
            x = self.arrays[first.arg]
            step = _stride(idx)
            if step:
                return lax.slice_in_dim(x, int(idx[0]), int(idx[-1]) + 1, step, axis=0), True
            return jnp.take(x, idx, axis=0, indices_are_sorted=bool(np.all(np.diff(idx) > 0))), \
                True
        if first.kind == "const":
            if all(np.array_equal(n.value, first.value) for n in lanes[1:]):
                return jnp.asarray(first.value), False
            return jnp.asarray(np.stack([n.value for n in lanes])), True
        if first.kind == "op":
            reused = self._reuse(lanes)
            if reused is not None:
                return reused, True
            ops = [self(tuple(n.operands[j] for n in lanes)) for j in range(len(first.operands))]
            values = [v for v, _ in ops]
            axes = [0 if b else None for _, b in ops]
            if not any(b for _, b in ops):
                return first.eqn.primitive.bind(*values, **first.eqn.params), False
            bind = functools.partial(_bind, first.eqn)
            vector = jax.vmap(bind, in_axes=axes)(*values)
            for j, node in enumerate(lanes):
                self.lane_of.setdefault(id(node), (vector, j))
            return vector, True
        # Leaf by leaf: opaque outputs never share a signature, so only one lane is here.
        raise AssertionError("unreachable: an opaque value in a pack of several lanes")

    def _reuse(self, lanes):
        """``lanes`` cut out of vectors already emitted, where they were lanes of another pack
        (lane i's right-hand spring is lane i+1's left-hand one): a slice of that vector per
        run of consecutive lanes, what is left computed as a pack of its own, concatenated.
        ``None`` when nothing is reused or it would take more than ``_MAX_RUNS`` pieces."""
        found = [self.lane_of.get(id(n)) for n in lanes]
        if all(f is None for f in found):
            return None
        runs, i = [], 0
        while i < len(lanes):
            j = i + 1
            if found[i] is None:
                while j < len(lanes) and found[j] is None:
                    j += 1
            else:
                vector, start = found[i]
                while (j < len(lanes) and found[j] is not None and found[j][0] is vector
                       and found[j][1] == start + (j - i)):
                    j += 1
            runs.append((i, j))
            i = j
        if len(runs) > _MAX_RUNS:
            return None
        parts = []
        for i, j in runs:
            if found[i] is not None:
                vector, start = found[i]
                parts.append(lax.slice_in_dim(vector, start, start + (j - i), axis=0))
            else:
                value, batched = self(tuple(lanes[i:j]))
                parts.append(value if batched else
                             jnp.broadcast_to(value, (j - i, *jnp.shape(value))))
        return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=0)

    def _lanes(self, arg, leaves):
        where = self.where[arg]
        return leaves if where is None else where[leaves]

    def _single(self, node):
        """The value of one node on its own (unbatched)."""
        hit = self.memo.get((id(node),))
        if hit is not None:
            value, batched = hit
            return value[0] if batched else value
        if node.kind == "in":
            value = self.arrays[node.arg][int(self._lanes(node.arg, node.pos))]
        elif node.kind == "const":
            value = jnp.asarray(node.value)
        elif node.kind == "op":
            value = node.eqn.primitive.bind(*(self._single(o) for o in node.operands),
                                            **node.eqn.params)
        else:  # "out" of an opaque equation, evaluated once for all its outputs
            call = node.operands[0]
            outs = self.opaque.get(id(call))
            if outs is None:
                outs = self.opaque[id(call)] = _eval_eqn(
                    call.eqn, [self._single(o) for o in call.operands])
            value = outs[node.index]
        self.memo[(id(node),)] = (value, False)
        return value


def _bind(eqn, *values):
    return eqn.primitive.bind(*values, **eqn.params)


def _eval_eqn(eqn, values):
    """Evaluate one (opaque) equation through ``jax.core.eval_jaxpr``, which knows how to bind
    sub-programs."""
    invars = [jex_core.Var(v.aval) if isinstance(v, jex_core.Literal) else v
              for v in eqn.invars]
    new_eqn = eqn.replace(invars=invars)
    seen, unique_vars, unique_vals = set(), [], []
    for var, val in zip(invars, values):
        if var not in seen:
            seen.add(var)
            unique_vars.append(var)
            unique_vals.append(val)
    jaxpr = jex_core.Jaxpr([], unique_vars, list(eqn.outvars), [new_eqn], eqn.effects)
    return jax.core.eval_jaxpr(jaxpr, [], *unique_vals)


def pack(step: Callable, *example_args) -> Packed:
    """Vectorise a per-name ``step(state, params)`` so its program does not grow with names.

    Args:
        step: A function of pytrees (dicts of scalars, say) returning a pytree shaped like
            its first argument. Any Python loop over names is fine: it runs once, here.
        *example_args: Example pytrees (``state, params``). Within each argument all leaves
            must share one shape and dtype; scalars stack to a vector, ``(d,)`` leaves to an
            ``(n, d)`` matrix. Their values are not kept, only their structure.

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
        inputs += [_Node("in", graph.sig(("in", k, s, str(d))), shape_sig=leaf, arg=k, pos=i,
                         value=zero) for i in range(n_k)]
    outs = graph.inline(closed.jaxpr, closed.consts, inputs)
    outs = _complete_outputs(graph, outs)
    return Packed(step, graph, outs, treedefs, specs, out_treedef, graph.n_eqns, paths)


# -- formulas that lack one term of the others -----------------------------------------------

def _complete_outputs(graph: _Graph, outs: list[_Node]) -> list[_Node]:
    """Outputs whose formula is another, larger group's with one added term missing (a chain's
    last mass has no right-hand spring) are rewritten as that formula with the term read on
    constants that make it exactly zero: ``p + z`` with ``z`` a constant 0, so they join the
    larger group's pack (as the array program pads with zeros) and the numbers are unchanged.
    """
    by_shape: dict[int, list[int]] = {}
    for i, node in enumerate(outs):
        by_shape.setdefault(node.shape_sig, []).append(i)
    if len(by_shape) < 2:
        return outs
    ranked = sorted(by_shape.values(), key=len, reverse=True)
    memo: dict[tuple[int, int], _Node | None] = {}
    outs = list(outs)
    for small in ranked[1:]:
        for big in ranked:
            if len(big) <= len(small) or outs[big[0]].shape_sig == outs[small[0]].shape_sig:
                continue
            done = [_complete(graph, outs[i], outs[big[0]], memo) for i in small]
            if all(d is not None for d in done):
                for i, d in zip(small, done):
                    outs[i] = d
                break
    return outs


def _complete(graph: _Graph, b: _Node, a: _Node, memo: dict) -> _Node | None:
    """``b`` rewritten to ``a``'s shape signature, or ``None``: equal where they match, an
    equation with completed operands where both are the same equation, and ``b + 0`` (``0 + b``,
    ``b - 0``) where ``a`` adds a term to what matches ``b``."""
    if b.shape_sig == a.shape_sig:
        return b
    key = (id(b), id(a))
    if key in memo:
        return memo[key]
    memo[key] = None  # a cycle cannot occur in a DAG, but a failed try is remembered
    found = None
    if (b.kind == a.kind == "op" and b.eqn.primitive is a.eqn.primitive
            and len(b.operands) == len(a.operands)
            and _params_key(b.eqn.params) == _params_key(a.eqn.params)):
        operands = [_complete(graph, bo, ao, memo) for bo, ao in zip(b.operands, a.operands)]
        if all(o is not None for o in operands):
            found = graph.op(b.eqn, tuple(operands))
    if found is None and a.kind == "op" and a.eqn.primitive.name in ("add", "sub"):
        sides = (0, 1) if a.eqn.primitive.name == "add" else (0,)
        for side in sides:
            inner = _complete(graph, b, a.operands[side], memo)
            zero = _zero_term(graph, a.operands[1 - side]) if inner is not None else None
            if zero is not None:
                operands = (inner, zero) if side == 0 else (zero, inner)
                found = graph.op(a.eqn, operands)
                break
    if found is not None and found.shape_sig != a.shape_sig:
        found = None
    memo[key] = found
    return found


def _zero_term(graph: _Graph, x: _Node) -> _Node | None:
    """``x``'s formula with every leaf read replaced by a constant 0 of its shape (its own
    constants kept), if that is exactly zero (evaluated now: it reads constants only); else
    ``None``."""
    made: dict[int, _Node | None] = {}

    def zeroed(node: _Node) -> _Node | None:
        if id(node) not in made:
            if node.kind == "in":
                made[id(node)] = graph.const(node.value)   # a zero of the leaf's shape
            elif node.kind == "const":
                made[id(node)] = node
            elif node.kind == "op":
                ops = [zeroed(o) for o in node.operands]
                made[id(node)] = (None if any(o is None for o in ops)
                                  else graph.op(node.eqn, tuple(ops)))
            else:                                           # an opaque equation's output
                made[id(node)] = None
        return made[id(node)]

    values: dict[int, Any] = {}

    def value(node: _Node):
        if id(node) not in values:
            values[id(node)] = (node.value if node.kind == "const" else node.eqn.primitive.bind(
                *(value(o) for o in node.operands), **node.eqn.params))
        return values[id(node)]

    z = zeroed(x)
    if z is None:
        return None
    try:
        with jax.ensure_compile_time_eval():
            is_zero = bool(np.all(np.asarray(value(z)) == 0))
    except Exception:  # noqa: BLE001 - a formula that cannot run on constants is not merged
        return None
    return z if is_zero else None
