"""Passes 1-3 of :func:`explorer.pack`: inline, number and sign a step's values, then complete
formulas that lack one term of a larger group's.

Every value of the inlined step becomes a :class:`_Node` of one :class:`Kind` with an interned
structural signature; value numbering makes a computation the step traced twice one node.
"""

from __future__ import annotations

import enum
from typing import Any

import jax
import numpy as np
from jax.extend import core as jex_core

from .prims import vectorises_eqn

_INLINE = ("pjit", "jit", "closed_call", "core_call")


class Kind(enum.Enum):
    """What a node is: a leaf read, a constant, a packable equation, an equation evaluated
    leaf by leaf, or one output of such an equation."""

    IN = "in"
    CONST = "const"
    OP = "op"
    OPAQUE = "opaque"
    OUT = "out"


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
    return vectorises_eqn(eqn) is None


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
        return _Node(Kind.CONST, self.sig(("const", value.shape, value.dtype.str)), value=value,
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
                Kind.OP, self.sig(key), shape_sig=self.sig(("shape", shape_key)), eqn=eqn,
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
                call = _Node(Kind.OPAQUE, self.sig(("opaque", id(eqn), len(self._sigs))),
                             eqn=eqn, operands=operands)
                outs = [_Node(Kind.OUT, self.sig(("out", call.sig, i)), operands=(call,), index=i)
                        for i in range(len(eqn.outvars))]
            for var, node in zip(eqn.outvars, outs):
                env[var] = node
        return [read(a) for a in jaxpr.outvars]



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
    if (b.kind == a.kind is Kind.OP and b.eqn.primitive is a.eqn.primitive
            and len(b.operands) == len(a.operands)
            and _params_key(b.eqn.params) == _params_key(a.eqn.params)):
        operands = [_complete(graph, bo, ao, memo) for bo, ao in zip(b.operands, a.operands)]
        if all(o is not None for o in operands):
            found = graph.op(b.eqn, tuple(operands))
    if found is None and a.kind is Kind.OP and a.eqn.primitive.name in ("add", "sub"):
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
            if node.kind is Kind.IN:
                made[id(node)] = graph.const(node.value)   # a zero of the leaf's shape
            elif node.kind is Kind.CONST:
                made[id(node)] = node
            elif node.kind is Kind.OP:
                ops = [zeroed(o) for o in node.operands]
                made[id(node)] = (None if any(o is None for o in ops)
                                  else graph.op(node.eqn, tuple(ops)))
            else:                                           # an opaque equation's output
                made[id(node)] = None
        return made[id(node)]

    values: dict[int, Any] = {}

    def value(node: _Node):
        if id(node) not in values:
            values[id(node)] = (node.value if node.kind is Kind.CONST else node.eqn.primitive.bind(
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
