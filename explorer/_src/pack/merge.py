"""Pass 3a of :func:`explorer.jit`'s packer: merge the packs of a chain's ends into its middle.

Grouping by signature (:mod:`.plan`) keeps apart values whose formulas differ only where a
chain ends: the first mass of an oscillator hangs from a wall (``x_0 - 0.0`` where the others
compute ``x_i - x_{i-1}``) and the last has no spring to its right (``-t_{n-1} - c v`` where
the others compute ``(-t_i + t_{i+1}) - c v``). Each end was then a chain of one-lane packs of
its own: a scan body three times the array program's. :func:`merge_ends`, run on the nodes a
scope needs before they are grouped, finds which signatures may share a pack, by congruence
(two nodes of one form on operands of merged classes are merged) and two rules, to a fixpoint:

- *a constant stands in for a lane*: an equation with a constant operand joins the equations of
  its primitive, parameters and shape whose operand there is a value of the constant's shape
  and dtype, their other operands of the same classes; the lane reads its constant where the
  others read a neighbour (one concatenation, as the array program pads with a zero);
- *an absent addend*: where an operand of class ``S`` stands and the equations of the same form
  read ``S + T`` (or ``T + S``, ``S - T``) there, the operand becomes the added node
  ``S + (-0.0)`` (``S - 0.0``) of that sum's class. It is exact: ``x + (-0.0)`` and
  ``x - 0.0`` are ``x`` for every ``x``, signed zeros, infinities and NaNs included.

- *an absent last addend*: the lanes of one vector a scope returns (a loop's carry class)
  whose value is ``S`` where the others of their family (the leaves named alike: the
  stiffness cotangents) return ``S + T`` (the first mass has no left neighbour to add) return
  ``S + (-0.0)`` in the class of those sums, so the vector is one pack, not a join of two.

A group joins another only if it has at most half as many nodes (the ends join the middle). A pack computes
each lane's own formula on that lane's own operands, so no number changes; only where operands
are read from does (a constant piece joins a slice). The pass returns a plain :class:`Merge`;
:func:`.plan.plan_scope` applies it if it removes packs and joins no read of pieces of several
packs (a constant piece is a pad, as the array program's; pieces of two packs are a permutation
at every step), and its packs do not read one another in a cycle; otherwise it groups by
signature alone.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np

from .nodes import Const, In, Multi, Node, Op, Out, Region, Reshape, Sum

__all__ = ["Merge", "merge_ends", "operands"]

_ROUNDS = 12       # fixpoint rounds at most (each merge is one union; a chain needs a few)
_ADD = frozenset({"add", "add_any"})


@dataclasses.dataclass(frozen=True)
class Merge:
    """What :func:`merge_ends` found.

    Attributes:
        sigs: node uid -> the signature to group it by (only nodes whose signature changes).
        operands: node uid -> its operands with an added node in place of an absent addend.
        added: The added nodes (``S + (-0.0)``, ``S - 0.0``), each in the class of a sum.
        outputs: scope output position -> the added node that returns it (``S + (-0.0)``).
    """

    sigs: dict[int, int]
    operands: dict[int, tuple[Node, ...]]
    added: list[Op]
    outputs: dict[int, Op] = dataclasses.field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.sigs or self.operands or self.outputs)


def operands(node: Node) -> tuple[Node, ...]:
    """The nodes ``node`` reads."""
    if isinstance(node, (Op, Multi, Region)):
        return node.operands
    if isinstance(node, Reshape):
        return (node.operand,)
    if isinstance(node, Sum):
        return tuple(node.terms())
    if isinstance(node, Out):
        return (node.parent,)
    return ()


class _Classes:
    """Union-find over signatures; the root of a class is its smallest signature."""

    def __init__(self):
        self.parent: dict[int, int] = {}
        self.aval: dict[int, tuple] = {}

    def find(self, s: int) -> int:
        root = s
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while s != root:
            self.parent[s], s = root, self.parent[s]
        return root

    def union(self, a: int, b: int) -> bool:
        a, b = self.find(a), self.find(b)
        if a == b:
            return False
        a, b = min(a, b), max(a, b)
        self.parent[b] = a
        return True


def merge_ends(nodes: list[Node], vectors=(), origin=None) -> Merge:
    """The classes of ``nodes`` (a scope's demanded nodes, constants left out) that may share
    a pack though their signatures differ; see the module docstring. ``vectors``: per vector
    the scope returns, its ``(output position, node)`` pairs; ``origin``: node -> the natural
    key of its leaf (what names a lane's family)."""
    classes = _Classes()
    for node in nodes:
        classes.aval.setdefault(node.sig, (node.shape, node.dtype.str))
    over: dict[int, tuple[Node, ...]] = {}
    added: list[Op] = []
    work = list(nodes)
    for _ in range(_ROUNDS):
        groups: dict[tuple, list[Node]] = {}
        for node in work:
            key = _key(node, over.get(node.uid), classes)
            if key is not None:
                groups.setdefault(key, []).append(node)
        changed = False
        for members in groups.values():
            for m in members[1:]:
                changed |= classes.union(members[0].sig, m.sig)
        changed |= _constants(groups, classes)
        fills = _absent_addends(groups, classes)
        for node, k, sum_node, side in fills:
            ops = list(over.get(node.uid, node.operands))
            ops[k] = _plus_identity(ops[k], sum_node, side)
            over[node.uid] = tuple(ops)
            added.append(ops[k])
            work.append(ops[k])
            changed = True
        if not changed:
            break
    outputs = _absent_at_outputs(vectors, classes, over, origin) if origin else {}
    added += outputs.values()
    work += outputs.values()
    sigs = {}
    for node in work:
        root = classes.find(node.sig)
        if root != node.sig:
            sigs[node.uid] = root
    return Merge(sigs, over, added, outputs)


def _family(key) -> tuple:
    """A natural key's text runs (``stiffness_`` of ``stiffness_3``): the leaves named alike."""
    return tuple(part for part in key if part[0] == 0)


def _absent_at_outputs(vectors, classes: _Classes, over, origin) -> dict[int, Op]:
    """Output position -> ``S + (-0.0)`` for each output ``S`` of a vector whose family's
    other outputs (at least twice as many) are sums ``S' + T`` with ``S'`` of ``S``'s class."""
    fills: dict[int, Op] = {}
    for pairs in vectors:
        families: dict[tuple, dict[int, list]] = {}
        for pos, node in pairs:
            if isinstance(node, Const):
                continue
            key = origin(node)
            if key is not None:
                by_class = families.setdefault(_family(key), {})
                by_class.setdefault(classes.find(node.sig), []).append((pos, node))
        for by_class in families.values():
            for members in by_class.values():
                first = members[0][1]
                if not (isinstance(first, Op) and first.eqn.primitive.name in _ADD | {"sub"}
                        and len(first.operands) == 2
                        and np.issubdtype(first.dtype, np.number)):
                    continue
                ops = [over.get(m.uid, m.operands) for _, m in members]
                sides = (0,) if first.eqn.primitive.name == "sub" else (0, 1)
                for side in sides:
                    inner = {classes.find(o[side].sig) for o in ops
                             if not isinstance(o[side], Const)}
                    if len(inner) != 1 or any(isinstance(o[side], Const) for o in ops):
                        continue
                    short = by_class.get(inner.pop(), [])
                    if not short or 2 * len(short) > len(members) or any(
                            n.shape != first.shape or n.dtype != first.dtype
                            for _, n in short):
                        continue
                    for pos, node in short:
                        fills[pos] = _plus_identity(node, first, side)
                    break
    return fills


def _operand_key(node: Node, classes: _Classes):
    if isinstance(node, Const):
        if node.sig < 0:        # the zero of an added ``S + (-0.0)``: its class is decided
            return (2, node.shape, node.dtype.str)
        return (1, node.shape, node.dtype.str)
    return (0, classes.find(node.sig))


def _key(node: Node, ops, classes: _Classes) -> tuple | None:
    """What makes two nodes one formula, their operands read through ``classes``; ``None``
    for nodes that are their own (inputs, regions and their outputs)."""
    if isinstance(node, (Op, Multi)):
        ops = node.operands if ops is None else ops
        return ("op", node.head, tuple(_operand_key(o, classes) for o in ops))
    if isinstance(node, Reshape):
        return ("reshape", node.shape, _operand_key(node.operand, classes))
    if isinstance(node, Sum):
        counts = Counter(_operand_key(t, classes) for t in node.terms())
        return ("sum", node.shape, node.dtype.str, tuple(sorted(counts.items())))
    if isinstance(node, Out) and node.cls is None:
        return ("out", classes.find(node.parent.sig), node.index)
    return None


def _constants(groups: dict[tuple, list[Node]], classes: _Classes) -> bool:
    """A constant stands in for a lane: each group of equations with constant operands joins
    the largest group of one form, reading values where it reads constants."""
    by_head: dict[tuple, list[tuple]] = {}
    for key in groups:
        if key[0] == "op":
            by_head.setdefault((key[1], len(key[2])), []).append(key)
    changed = False
    for key, members in groups.items():
        if key[0] != "op" or not any(o[0] == 1 for o in key[2]):
            continue
        best = None
        for other in by_head[(key[1], len(key[2]))]:
            if other is key or not _joins(members, groups[other]):
                continue
            if _fills(key[2], other[2], classes) and (
                    best is None or len(groups[other]) > len(groups[best])):
                best = other
        if best is not None:
            changed |= classes.union(members[0].sig, groups[best][0].sig)
    return changed


def _joins(small: list[Node], large: list[Node]) -> bool:
    """Whether a group of ``small`` nodes may join one of ``large``: at most half its size,
    as a chain's ends join its middle (two groups of one size are two formulas, say the
    damping and the spring terms of every mass, and stay apart)."""
    return 2 * len(small) <= len(large)


def _fills(holes, full, classes: _Classes) -> bool:
    """Whether operands ``full`` read a value wherever ``holes`` read a constant of its shape
    and dtype (at least once), and the same as ``holes`` elsewhere."""
    filled = False
    for h, f in zip(holes, full):
        if h == f:
            continue
        if h[0] != 1 or f[0] != 0 or classes.aval.get(f[1]) != h[1:]:
            return False
        filled = True
    return filled


def _absent_addends(groups: dict[tuple, list[Node]], classes: _Classes) -> list:
    """``(node, position, sum node, side)`` per operand that is the ``side`` term of the sums
    that the larger group of its form reads there."""
    sums: dict[int, list[tuple[list[Node], int]]] = {}
    for key, members in groups.items():
        first = members[0]
        if (key[0] != "op" or not isinstance(first, Op) or len(key[2]) != 2
                or not np.issubdtype(first.dtype, np.number)
                or any(o.shape != first.shape or o.dtype != first.dtype
                       for o in first.operands)):
            continue
        name = first.eqn.primitive.name
        sides = (0, 1) if name in _ADD else (0,) if name == "sub" else ()
        for side in sides:
            if key[2][side][0] == 0:
                sums.setdefault(key[2][side][1], []).append((members, side))
    if not sums:
        return []
    fills, taken = [], set()
    for key, members in groups.items():
        if key[0] != "op" or not isinstance(members[0], Op):
            continue
        for k, o in enumerate(key[2]):
            if o[0] != 0 or o[1] not in sums:
                continue
            best = None
            for sum_members, side in sums[o[1]]:
                if key[2][k] == (0, classes.find(sum_members[0].sig)):
                    continue
                wanted = key[2][:k] + ((0, classes.find(sum_members[0].sig)),) + key[2][k + 1:]
                target = groups.get(("op", key[1], wanted))
                if (target is not None and target is not members and _joins(members, target)
                        and (best is None or len(target) > len(best[0]))):
                    best = (target, sum_members[0], side)
            if best is not None and id(members) not in taken:
                taken.add(id(members))
                fills += [(m, k, best[1], best[2]) for m in members]
                break
    return fills


def _plus_identity(term: Node, sum_node: Op, side: int) -> Op:
    """``term + (-0.0)`` (``term - 0.0``, or ``-0.0 + term``): ``term`` itself, in the class
    of ``sum_node``, whose equation it borrows."""
    name = sum_node.eqn.primitive.name
    zero = Const(-1, term.shape, term.dtype)
    zero.sig = -1 - zero.uid                # a signature of its own, never a node's
    zero.value = np.full(term.shape, -0.0 if name in _ADD else 0.0, term.dtype)
    node = Op(sum_node.sig, term.shape, term.dtype)
    node.eqn, node.head = sum_node.eqn, sum_node.head
    node.operands = (term, zero) if side == 0 else (zero, term)
    return node
