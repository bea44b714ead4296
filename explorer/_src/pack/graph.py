"""Passes 1 and 2 of :func:`explorer.jit`'s packer: inline and number.

A jaxpr is walked once, nested calls inlined (``jit``, ``custom_jvp_call``, ``custom_vjp_call``,
``remat``: the packed program is never differentiated again, so their forward programs are
exact), and every value becomes a :class:`Node` with a structural signature ``sig``: the
primitive, its parameters, its shape and dtype and the signatures of its operands, interned to
an int. Values with one signature compute one formula on different names; the next pass
(:mod:`.plan`) packs them. Along the way:

- value numbering: one node per distinct computation (a term traced twice is computed once);
- layout-free shape ops (``squeeze``, size-preserving ``reshape`` / ``broadcast_in_dim``, a
  ``reduce_sum`` over axes of size 1, a full ``slice``, a zero ``pad``, a same-dtype
  ``convert_element_type``) become one :class:`Reshape` of their base value, or the base itself;
- an ``add`` chain of isomorphic terms (a loss summed over names, its cotangent fan-in)
  becomes one :class:`Sum` whose signature counts its terms' signatures, not their order;
- sibling loops (one per name, none reading another) are first merged into one
  (:mod:`.siblings`);
- ``scan``, ``while`` and ``cond`` become a :class:`Region` whose bodies are numbered in scopes
  of their own, their inputs one class per role and (shape, dtype): the carry of N names is one
  stacked array per class.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from jax.extend import core as jex_core

from ..compat import scan_counts
from .nodes import (Const, In, Multi, Node, Op, Out, Region, Reshape, Scope, Sum, Unpackable,
                    fresh_uid)
from .reads import read_key
from .siblings import call_body, fuse_sibling_loops

__all__ = ["Const", "Graph", "In", "Multi", "Node", "Op", "Out", "Region", "Reshape", "Scope",
           "Sum", "Unpackable"]

_REDUCE = frozenset({"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and",
                     "reduce_or", "argmax", "argmin"} - {"argmax", "argmin"})
_ADD = frozenset({"add", "add_any"})
_SMALL_CONST = 64           # constants up to this size are interned by value

def _hashable(value):
    try:
        hash(value)
        return value
    except TypeError:
        return ("repr", repr(value))


class Graph:
    """Numbers a jaxpr into nodes; see the module docstring."""

    def __init__(self):
        self._sigs: dict[Any, int] = {}
        self._values: dict[Any, Node] = {}
        self._params: dict[int, tuple[Any, Any]] = {}     # id(eqn) -> (eqn, key)
        self.n_eqns = 0
        self.regions: list[Region] = []
        self.keys: dict[int, Any] = {}        # node uid -> natural key of its leaf, or None
        # id(equation of an inlined body) -> the call equation holding it (kept alive here,
        # and its body with it): blame charges an inlined equation with no line of the
        # user's own to the user's line of the call that held it, as in the original program.
        self.holders: dict[int, Any] = {}
        self.merged: dict[int, int] = {}      # id of a merged loop equation -> loops it runs
        # Uids of values the same for every name (constants, an input class of one lane and
        # formulas of them): their per-name slices group (see :mod:`.reads`).
        self.shared: set[int] = set()

    # -- signatures ---------------------------------------------------------------------------

    def sig(self, key) -> int:
        return self._sigs.setdefault(key, len(self._sigs))

    def params_key(self, eqn):
        hit = self._params.get(id(eqn))
        if hit is None:
            key = tuple(sorted((k, _hashable(v)) for k, v in eqn.params.items()))
            hit = self._params[id(eqn)] = (eqn, key)
        return hit[1]

    # -- node makers --------------------------------------------------------------------------

    def inputs(self, scope: Scope, shape, dtype, n: int) -> list[In]:
        cls = len(scope.inputs)
        sig = self.sig(("in", id(scope), cls))
        lanes = []
        for lane in range(n):
            node = In(sig, shape, dtype)
            node.cls, node.lane = cls, lane
            lanes.append(node)
        if n == 1:
            self.shared.add(lanes[0].uid)
        scope.inputs.append(lanes)
        return lanes

    def const(self, value, dtype=None) -> Const:
        value = np.asarray(value, dtype)
        key = None
        if value.size <= _SMALL_CONST:
            key = ("const", value.dtype.str, value.shape, value.tobytes())
            hit = self._values.get(key)
            if hit is not None:
                return hit
        node = Const(self.sig(("const", value.shape, value.dtype.str)), value.shape, value.dtype)
        node.value = value
        self.shared.add(node.uid)
        if key is not None:
            self._values[key] = node
        return node

    def reshape(self, node: Node, shape) -> Node:
        shape = tuple(shape)
        if isinstance(node, Reshape):
            node = node.operand
        if node.shape == shape:
            return node
        key = ("reshape", node.uid, shape)
        hit = self._values.get(key)
        if hit is None:
            hit = self._values[key] = Reshape(self.sig(("reshape", shape, node.sig)), shape,
                                              node.dtype)
            hit.operand = node
            if node.uid in self.shared:
                self.shared.add(hit.uid)
        return hit

    def op(self, eqn, operands: tuple[Node, ...]) -> Node:
        pkey = self.params_key(eqn)
        key = (eqn.primitive, pkey, tuple(o.uid for o in operands))
        hit = self._values.get(key)
        if hit is None:
            pkey = read_key(eqn, operands, self.shared) or pkey   # x[:, i] per name: one sig
            aval = eqn.outvars[0].aval
            hit = self._values[key] = Op(
                self.sig(("op", eqn.primitive.name, pkey, aval.shape, aval.dtype,
                          tuple(o.sig for o in operands))), aval.shape, aval.dtype)
            hit.eqn, hit.operands = eqn, operands
            hit.head = self.sig(("head", eqn.primitive.name, pkey, aval.shape, aval.dtype))
        return hit

    def shared_op(self, eqn, operands) -> Node:
        """:meth:`op`, noting a formula of values the same for every name as one too."""
        node = self.op(eqn, operands)
        if all(o.uid in self.shared for o in operands):
            self.shared.add(node.uid)
        return node

    def add(self, eqn, x: Node, y: Node) -> Node:
        """``x + y``: a :class:`Sum` when it extends one or adds two isomorphic terms."""
        aval = eqn.outvars[0].aval
        shape = tuple(aval.shape)
        size = int(math.prod(shape))
        bx, by = _base(x), _base(y)
        same_size = int(math.prod(x.shape)) == size == int(math.prod(y.shape))
        if same_size and not isinstance(bx, Sum) and not isinstance(by, Sum):
            # A chain of adds that meets a formula again sums over names, each name adding
            # terms of several formulas (a loss over angles and positions: angle_0 +
            # position_0 + angle_1 + ...): one Sum of all its terms.
            for chain, term in ((bx, y), (by, x)):
                terms = _add_chain(chain, size)
                if terms is not None and _base(term).sig in {_base(t).sig for t in terms}:
                    node = None
                    for t in terms + [term]:
                        node = self._sum(node, self.reshape(t, shape), shape, aval.dtype)
                        node.eqn = eqn
                    return node
        if (same_size
                and (isinstance(bx, Sum) or isinstance(by, Sum) or bx.sig == by.sig
                     or _zero(bx) or _zero(by))):   # Python's sum() starts at 0
            if isinstance(by, Sum) and by.shape == shape and not (
                    isinstance(bx, Sum) and bx.shape == shape and bx.n_terms >= by.n_terms):
                bx, by, x, y = by, bx, y, x       # extend the longer sum (terms commute)
            node, rest = None, []
            if isinstance(bx, Sum) and bx.shape == shape:
                node = bx
            else:
                rest = bx.terms() if isinstance(bx, Sum) else [x]
            rest += by.terms() if isinstance(by, Sum) else [y]
            for term in rest:
                node = self._sum(node, self.reshape(term, shape), shape, aval.dtype)
                node.eqn = eqn  # the user's add that made it (blame charges the sum there)
            return node
        return self.shared_op(eqn, (x, y))

    def _sum(self, prev: Sum | None, term: Node, shape, dtype) -> Sum:
        counts = dict(prev.counts) if prev is not None else {}
        counts[term.sig] = counts.get(term.sig, 0) + 1
        if prev is None and isinstance(term, Sum):
            raise AssertionError("a Sum's first term is never a Sum")
        node = Sum(self.sig(("sum", shape, np.dtype(dtype).str, tuple(sorted(counts.items())))),
                   shape, dtype)
        node.prev, node.term, node.counts = prev, term, counts
        node.n_terms = 1 if prev is None else prev.n_terms + 1
        return node

    def multi(self, eqn, operands) -> list[Out]:
        pkey = self.params_key(eqn)
        parent = Multi(self.sig(("multi", eqn.primitive.name, pkey,
                                 tuple(o.sig for o in operands))), (), np.float32)
        parent.eqn, parent.operands = eqn, operands
        parent.head = self.sig(("head", "multi", eqn.primitive.name, pkey))
        outs = []
        for i, var in enumerate(eqn.outvars):
            node = Out(self.sig(("out", parent.sig, i)), var.aval.shape, var.aval.dtype)
            node.parent, node.index, node.cls, node.lane = parent, i, None, None
            outs.append(node)
        return outs

    # -- the walk -----------------------------------------------------------------------------

    def inline(self, jaxpr, consts, args, scope: Scope) -> list[Node]:
        """The nodes of ``jaxpr``'s outputs, with ``args`` for its inputs."""
        env: dict = {}

        def read(atom):
            if isinstance(atom, jex_core.Literal):
                return self.const(atom.val, atom.aval.dtype)
            return env[atom]

        eqns, outvars, more_consts, merged, holders = fuse_sibling_loops(jaxpr)
        self.merged.update(merged)
        for held, call in holders.items():
            self.holders.setdefault(held, call)
        for var, value in [*zip(jaxpr.constvars, consts), *more_consts]:
            env[var] = self.const(value)
        for var, node in zip(jaxpr.invars, args):
            env[var] = node
        for eqn in eqns:
            operands = tuple(read(a) for a in eqn.invars)
            outs = self.equation(eqn, operands, scope)
            for var, node in zip(eqn.outvars, outs):
                env[var] = node
        return [read(a) for a in outvars]

    def equation(self, eqn, operands, scope) -> list[Node]:
        name = eqn.primitive.name
        if eqn.effects:
            raise Unpackable(f"primitive {name} has side effects")
        body, consts = call_body(eqn)   # a call (jit, custom_jvp...): its body, inlined
        if body is not None:
            for held in body.eqns:
                self.holders.setdefault(id(held), eqn)
            return self.inline(body, consts, operands, scope)
        self.n_eqns += 1
        if name == "scan":
            return self._scan(eqn, operands)
        if name == "while":
            return self._while(eqn, operands)
        if name == "cond":
            return self._cond(eqn, operands)
        if len(eqn.outvars) != 1:
            return self.multi(eqn, operands)
        (x, *_) = operands or (None,)
        shape = tuple(eqn.outvars[0].aval.shape)
        if x is not None and _layout_free(eqn, x):
            return [self.reshape(x, shape)]
        if name in _ADD and len(operands) == 2:
            return [self.add(eqn, *operands)]
        return [self.shared_op(eqn, operands)]

    # -- regions ------------------------------------------------------------------------------

    def origin(self, node: Node, depth: int = 8):
        """The natural key of the leaf ``node`` derives from (its first operand's, down to an
        argument's leaf), or ``None``: what orders a loop's lanes."""
        if node.uid in self.keys:
            return self.keys[node.uid]
        key = None
        if depth:
            if isinstance(node, (Op, Multi, Region)):
                below = node.operands[:2]
            elif isinstance(node, Reshape):
                below = (node.operand,)
            elif isinstance(node, Sum):
                below = (node.term,)
            elif isinstance(node, Out) and node.cls is not None:   # a loop's: its body's
                below = (_body_output(node),)
            elif isinstance(node, Out):
                below = (node.parent,)
            else:
                below = ()
            for o in below:
                key = self.origin(o, depth - 1)
                if key is not None:
                    break
        self.keys[node.uid] = key
        return key

    def _classes(self, scope, roles, avals, operands=None) -> list[tuple[str, list[int]]]:
        """Input classes of a body: positions grouped by role, shape and dtype; with
        ``operands``, each class's lanes grouped by the formula of the value they hold (a
        transposed scan's cotangents, then the states kept for it), each group in the order
        of the vector it comes from (a loop's output, an input) or else in the natural order
        of the leaves (``x_2`` before ``x_10``): a body reads slices, neighbours included."""
        found: dict[tuple, list[int]] = {}
        for pos, (role, aval) in enumerate(zip(roles, avals)):
            found.setdefault((role, tuple(aval.shape), np.dtype(aval.dtype).str), []).append(pos)
        classes = [(key[0], positions) for key, positions in found.items()]
        if operands is not None:
            for role, positions in classes:
                if role != "index" and len(positions) > 1:
                    keys = self._class_keys([operands[p] for p in positions])
                    if keys is not None:
                        order = sorted(range(len(positions)), key=lambda i: keys[i])
                        positions[:] = [positions[i] for i in order]
        return classes

    def _class_keys(self, nodes) -> list | None:
        """Per node, ``(formula, place)``: formulas in order of first appearance; the place is
        the node's lane when it is a lane of a vector (an input, a loop's output), else the
        natural key of its leaf. ``None`` if some node has neither."""
        rank: dict[int, int] = {}
        keys = []
        for node in nodes:
            lane = node.lane if isinstance(node, (In, Out)) else None
            place = lane if lane is not None else self.origin(node)
            if place is None:
                return None
            keys.append((rank.setdefault(node.sig, len(rank)), place))
        return keys

    def _order_unkeyed_carries(self, scope, classes, offset: int) -> None:
        """Lanes of a carry that starts from constants (a transposed scan's cotangents) in
        the order of what their updates read (``xs``, or carries already ordered), grouped by
        formula: ``[ct_p_0 .. ct_p_n, ct_s_0 .. ct_s_n]``, each in natural order."""
        for cls, (role, positions) in enumerate(classes):
            lanes = scope.inputs[cls]
            if role != "carry" or len(lanes) < 2 or any(
                    self.keys.get(n.uid) is not None for n in lanes):
                continue
            outs = [scope.outputs[p - offset] for p in positions]
            for _ in range(3):              # a carry read by another carry's update: again
                for k in [k for k, v in self.keys.items() if v is None]:
                    del self.keys[k]
                for node, out in zip(lanes, outs):
                    if self.keys.get(node.uid) is None:
                        key = self.origin(out)
                        if key is not None:
                            self.keys[node.uid] = key
            keys = [self.keys.get(n.uid) for n in lanes]
            if any(k is None for k in keys):
                continue
            rank: dict[int, int] = {}
            for out in outs:
                rank.setdefault(out.sig, len(rank))
            order = sorted(range(len(lanes)), key=lambda i: (rank[outs[i].sig], keys[i]))
            if order == list(range(len(lanes))):
                continue
            old = list(positions)
            positions[:] = [old[i] for i in order]
            new = [lanes[i] for i in order]
            for lane, node in enumerate(new):
                node.lane = lane
            scope.inputs[cls] = new

    def _body_inputs(self, scope, classes, avals, operands=None) -> list[Node]:
        args: list[Node | None] = [None] * len(avals)
        for _, positions in classes:
            aval = avals[positions[0]]
            for pos, node in zip(positions, self.inputs(scope, aval.shape, aval.dtype,
                                                       len(positions))):
                args[pos] = node
                if operands is not None:
                    self.keys[node.uid] = self.origin(operands[pos])
        return args

    def _region(self, kind, eqn, operands, scopes, in_classes, out_roles, out_avals,
                carry_offset=None, alias=None) -> list[Out]:
        """``alias``: output position -> an earlier position that is the same value (a scan's
        ``ys`` that its body returns twice: one lane, read twice outside)."""
        alias = alias or {}
        region = Region(self.sig(("region", fresh_uid())), (), np.float32)
        region.kind, region.eqn, region.operands = kind, eqn, operands
        region.scopes, region.in_classes = scopes, in_classes
        region.merged = self.merged.get(id(eqn), 1)
        outputs = scopes[0].outputs if kind in ("scan", "cond") else None
        out_classes = self._classes(None, out_roles, out_avals, outputs)
        out_classes = [(role, [p for p in pos if p not in alias]) for role, pos in out_classes]
        if carry_offset is not None:     # the carry goes out in the lane order it came in
            carried = [("carry", [p - carry_offset for p in pos])
                       for role, pos in in_classes if role == "carry"]
            out_classes = carried + [c for c in out_classes if c[0] != "carry"]
        region.out_classes = out_classes
        order = [p for _, positions in out_classes for p in positions]
        for scope in scopes:
            if len(scope.outputs) == len(order) + len(alias):
                scope.out_order = order
        self.regions.append(region)
        outs: list[Out | None] = [None] * len(eqn.outvars)
        for cls, (_, positions) in enumerate(region.out_classes):
            sig = self.sig(("out", region.sig, cls))
            for lane, pos in enumerate(positions):
                var = eqn.outvars[pos]
                node = Out(sig, var.aval.shape, var.aval.dtype)
                node.parent, node.index, node.cls, node.lane = region, pos, cls, lane
                outs[pos] = node
        for pos, first in alias.items():
            outs[pos] = outs[first]
        return outs

    def _scan(self, eqn, operands):
        p = eqn.params
        counts = scan_counts(p)
        if counts is None:
            raise Unpackable("this JAX's scan does not say which operands are carries")
        nc, nk = counts
        body = p["jaxpr"]
        avals = [v.aval for v in body.jaxpr.invars]
        roles = ["const"] * nc + ["carry"] * nk + ["xs"] * (len(avals) - nc - nk)
        scope = Scope("scan body")
        # A value passed twice as a constant or as ``xs`` (a state the forward scan returned
        # once and its gradient keeps twice) is one lane: the body reads it where it reads
        # the first.
        again, seen = {}, {}
        for pos, role in enumerate(roles):
            if role != "carry":
                first = seen.setdefault((role, operands[pos].uid), pos)
                if first != pos:
                    again[pos] = first
        classes = [(role, [p for p in pos if p not in again])
                   for role, pos in self._classes(scope, roles, avals, operands)]
        args = self._body_inputs(scope, classes, avals, operands)
        for pos, first in again.items():
            args[pos] = args[first]
        scope.outputs = self.inline(body.jaxpr, body.consts, args, scope)
        self._order_unkeyed_carries(scope, classes, nc)
        out_avals = [v.aval for v in body.jaxpr.outvars]
        out_roles = ["carry"] * nk + ["ys"] * (len(out_avals) - nk)
        # A value the body returns twice as ``ys`` (the states it returns, and the same states
        # kept for the gradient) is one lane: the outside reads it where it reads the first.
        alias, seen = {}, {}
        for pos in range(nk, len(out_avals)):
            first = seen.setdefault(scope.outputs[pos].uid, pos)
            if first != pos:
                alias[pos] = first
        return self._region("scan", eqn, operands, [scope], classes, out_roles, out_avals,
                            carry_offset=nc, alias=alias)

    def _while(self, eqn, operands):
        p = eqn.params
        nc, nb = p["cond_nconsts"], p["body_nconsts"]
        cond, body = p["cond_jaxpr"], p["body_jaxpr"]
        carry_avals = [v.aval for v in body.jaxpr.invars[nb:]]
        avals = ([v.aval for v in cond.jaxpr.invars[:nc]] +
                 [v.aval for v in body.jaxpr.invars[:nb]] + carry_avals)
        roles = ["cconst"] * nc + ["bconst"] * nb + ["carry"] * len(carry_avals)
        classes = self._classes(None, roles, avals, operands)
        scopes = []
        for name, jaxpr, picks in (("while cond", cond, ("cconst", "carry")),
                                   ("while body", body, ("bconst", "carry"))):
            scope = Scope(name)
            args = self._body_inputs(scope, classes, avals, operands)
            # Each scope sees every class (same class numbers); it reads its own.
            inner = [a for a, r in zip(args, roles) if r in picks]
            scope.outputs = self.inline(jaxpr.jaxpr, jaxpr.consts, inner, scope)
            scopes.append(scope)
        return self._region("while", eqn, operands, scopes, classes,
                            ["carry"] * len(carry_avals), carry_avals, carry_offset=nc + nb)

    def _cond(self, eqn, operands):
        branches = eqn.params["branches"]
        avals = [v.aval for v in branches[0].jaxpr.invars]
        roles = ["index"] + ["operand"] * len(avals)
        all_avals = [eqn.invars[0].aval] + avals
        classes = self._classes(None, roles, all_avals, operands)
        scopes = []
        for k, branch in enumerate(branches):
            scope = Scope(f"cond branch {k}")
            args = self._body_inputs(scope, classes, all_avals, operands)
            scope.outputs = self.inline(branch.jaxpr, branch.consts, args[1:], scope)
            scopes.append(scope)
        out_avals = [v.aval for v in branches[0].jaxpr.outvars]
        return self._region("cond", eqn, operands, scopes, classes, ["out"] * len(out_avals),
                            out_avals)


def _body_output(out: Out) -> Node:
    """The body's value behind output ``out`` of a region (a while loop's body is its second
    scope; a cond's first branch stands for the others)."""
    region = out.parent
    return region.scopes[1 if region.kind == "while" else 0].outputs[out.index]


_CHAIN = 16


def _add_chain(node: Node, size: int) -> list[Node] | None:
    """The terms of ``node`` if it is a short chain of plain adds of values of ``size``
    elements (at most ``_CHAIN`` terms), else ``None``."""
    if not (isinstance(node, Op) and node.eqn.primitive.name in _ADD
            and len(node.operands) == 2):
        return None
    terms: list[Node] = []
    stack = [node]
    while stack:
        n = _base(stack.pop())
        if (isinstance(n, Op) and n.eqn.primitive.name in _ADD and len(n.operands) == 2
                and all(int(math.prod(o.shape)) == size for o in n.operands)):
            stack += [n.operands[1], n.operands[0]]
        elif isinstance(n, Sum):
            return None
        else:
            terms.append(n)
        if len(terms) + len(stack) > _CHAIN:
            return None
    return terms


def _zero(node: Node) -> bool:
    return isinstance(node, Const) and node.value.size == 1 and not node.value.any()


def _base(node: Node) -> Node:
    return node.operand if isinstance(node, Reshape) else node


def _layout_free(eqn, x: Node) -> bool:
    """Whether ``eqn`` only reshapes ``x`` (same elements, same order)."""
    name, p = eqn.primitive.name, eqn.params
    out = eqn.outvars[0].aval
    if np.dtype(out.dtype) != x.dtype:
        return False
    same_size = int(math.prod(out.shape)) == int(math.prod(x.shape))
    if name == "squeeze":
        return True
    if name == "unstack":  # jax >= 0.12's sum() of arrays: one piece of an axis of length 1
        return same_size
    if name == "stack":  # its transpose: one operand given an axis of length 1
        return len(eqn.invars) == 1 and same_size
    if name == "reshape":
        return p.get("dimensions") is None and same_size
    if name == "broadcast_in_dim":
        return same_size and p.get("sharding") is None
    if name in _REDUCE:
        return all(x.shape[a] == 1 for a in p["axes"])
    if name == "slice":
        return (all(s == 0 for s in p["start_indices"]) and
                tuple(p["limit_indices"]) == x.shape and
                (p["strides"] is None or all(s == 1 for s in p["strides"])))
    if name == "pad":
        return all(tuple(c) == (0, 0, 0) for c in p["padding_config"])
    if name == "convert_element_type":
        return p.get("sharding") is None
    if name in ("copy", "copy_p"):
        return True
    if name == "transpose":
        return tuple(p["permutation"]) == tuple(range(len(x.shape)))
    return False
