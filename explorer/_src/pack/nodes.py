"""The packer's nodes: what :mod:`.graph` numbers a jaxpr into and :mod:`.plan` and :mod:`.emit`
read. Every value of the program is a :class:`Node` with an interned structural signature
``sig``; the kinds are types (an input lane, a constant, an equation, a layout-free reshape, a
sum of isomorphic terms, a several-output equation and its outputs, a loop or branch region),
and a :class:`Scope` holds one (sub-)program's input classes and outputs.
"""

from __future__ import annotations

import itertools

import numpy as np

__all__ = ["Const", "In", "Multi", "Node", "Op", "Out", "Region", "Reshape", "Scope", "Sum",
           "Unpackable",
           "fresh_uid"]

_uids = itertools.count()


def fresh_uid() -> int:
    """A number no node has had: node uids, and a signature that must match nothing else."""
    return next(_uids)


class Unpackable(Exception):
    """The program has something the packer must not touch (effects, extended dtypes)."""


class Node:
    """One value of the program: ``sig`` is its interned structural signature."""

    __slots__ = ("dtype", "shape", "sig", "uid")

    def __init__(self, sig, shape, dtype):
        self.uid = next(_uids)
        self.sig, self.shape, self.dtype = sig, tuple(shape), np.dtype(dtype)


class In(Node):
    """Lane ``lane`` of input class ``cls`` of a scope (an argument group, a loop's carry)."""

    __slots__ = ("cls", "lane")


class Const(Node):
    """A literal or a closed-over constant (NumPy value)."""

    __slots__ = ("value",)


class Op(Node):
    """A single-output equation on operand nodes; ``head``: the signature of its primitive,
    parameters, shape and dtype (its operands left out)."""

    __slots__ = ("eqn", "head", "operands")


class Reshape(Node):
    """A layout-free reshape of ``operand`` (never itself a :class:`Reshape`)."""

    __slots__ = ("operand",)


class Sum(Node):
    """A sum of terms of this node's shape, held as a chain: ``prev``'s terms, then ``term``."""

    __slots__ = ("counts", "eqn", "n_terms", "prev", "term")

    def terms(self) -> list[Node]:
        out, node = [], self
        while node is not None:
            out.append(node.term)
            node = node.prev
        return out[::-1]


class Multi(Node):
    """A several-output equation (its outputs are :class:`Out` nodes); ``head`` as an
    :class:`Op`'s."""

    __slots__ = ("eqn", "head", "operands")


class Out(Node):
    """Output ``index`` of a :class:`Multi`, or lane ``lane`` of output class ``cls`` of a
    :class:`Region`."""

    __slots__ = ("cls", "index", "lane", "parent")


class Region(Node):
    """A ``scan``, ``while`` or ``cond`` whose bodies are numbered in scopes of their own.

    ``in_classes``: per input class, ``(role, positions)`` into ``operands``; ``scopes``:
    the body (scan), cond and body (while), or the branches (cond); ``out_classes``: per
    output class, ``(role, positions)`` into the equation's outputs; ``merged``: how many
    sibling loops of the traced program it runs (:mod:`.siblings`), else 1.
    """

    __slots__ = ("eqn", "in_classes", "kind", "merged", "operands", "out_classes", "scopes")


class Scope:
    """The nodes of one (sub-)program: its input classes and its output nodes."""

    def __init__(self, name: str):
        self.name = name
        self.inputs: list[list[In]] = []       # per class, lanes in order
        self.outputs: list[Node] = []
        self.out_order: list[int] | None = None   # outputs by class and lane, if not in order
