"""Passes 3 and 4 of :func:`explorer.jit`'s packer: group and lay out.

Group: the nodes a scope's outputs need are grouped by signature; each group is a
:class:`Pack`, one vector value whose lanes are its members. Operands of isomorphic nodes are
isomorphic, so a pack reads each operand from one other pack (or from constants): a slice,
a gather, or the whole vector. Packs are ordered by their first member's creation, which is a
topological order (a node's operands are created before it, and a pack's first member has
operands in every pack its other members read).

Lay out: each pack's lane order is chosen so that reads are whole vectors where possible:
packs that feed a scope's outputs take the outputs' order, then each pack passes its order on
to the packs it reads (in reverse topological order); a pack read by several takes their
orders one after the other (two formulas reading its halves read a slice each). Where every
claim on a pack is a run of consecutive lanes in the order of the leaves its lanes derive from
(mass 0, 1, ...), that order is taken instead: a chain's ends then sit at the ends, and a read
of a shifted neighbour is a slice and a pad, not a rotation. A scan's carry classes are
renumbered by the formula their body returns (merged ends included), then by leaf, before
its body is laid out. Input packs and region outputs keep their lane order.
"""

from __future__ import annotations

import dataclasses

from .graph import Const, In, Multi, Node, Op, Out, Region, Reshape, Scope, Sum
from .merge import Merge, merge_ends
from .merge import operands as _operands

__all__ = ["Pack", "ScopePlan", "plan_scope"]


@dataclasses.dataclass
class Pack:
    """One vector value: ``members[j]`` is lane ``j``."""

    members: list[Node]
    first: int                      # creation index of its first member (topological key)


@dataclasses.dataclass
class ScopePlan:
    """A scope's packs in emission order and where each node lives (pack index, lane)."""

    scope: Scope
    packs: list[Pack]
    where: dict[int, tuple[int, int]]   # node uid -> (pack index, lane)
    subplans: dict[int, list[ScopePlan]]   # region uid -> plans of its scopes


def _demanded(outputs: list[Node]) -> list[Node]:
    seen: dict[int, Node] = {}
    stack = list(outputs)
    while stack:
        node = stack.pop()
        if node.uid in seen:
            continue
        seen[node.uid] = node
        stack.extend(_operands(node))
    return sorted(seen.values(), key=lambda n: n.uid)


def plan_scope(scope: Scope, origin=None, region: Region | None = None) -> ScopePlan:
    """Group and lay out one scope (and, recursively, the scopes of its regions).
    ``origin``: node -> the natural key of the leaf it derives from, or ``None`` (what
    :func:`_lay_out` orders a chain's lanes by); ``region``: the scan whose body ``scope`` is
    (its carry classes are returned as vectors, and laid out by formula and leaf)."""
    nodes = [n for n in _demanded(scope.outputs) if not isinstance(n, Const)]
    vectors = []
    if region is not None:
        vectors = [[(p, scope.outputs[p]) for p in positions]
                   for role, positions in region.out_classes if role == "carry"]
    merge = merge_ends(nodes, vectors, origin)
    packs = _group(nodes, merge, _cost(_parts(nodes, None)[0])) if merge else None
    if packs is None:
        packs = _group(nodes, None)
    elif merge.outputs:
        for p, node in merge.outputs.items():
            scope.outputs[p] = node
    if region is not None:
        _carry_in_order(region, scope, origin)
    # Bodies first: a scan body may renumber its constants' lanes, which the lay-out of this
    # scope then follows when it gathers them (once, outside the loop).
    subplans = {}
    for pack in packs:
        for node in pack.members:
            if isinstance(node, Region):
                scan = node if node.kind == "scan" else None
                subplans[node.uid] = [plan_scope(s, origin, scan) for s in node.scopes]
                if scan is not None:
                    _read_in_order(node, subplans[node.uid][0])
                    for out in nodes:          # its carry renumbered: so are its outputs
                        if isinstance(out, Out) and out.parent is node:
                            out.lane = node.out_classes[out.cls][1].index(out.index)
    outputs = scope.outputs
    if scope.out_order is not None:           # lay out in the order the outputs are read
        outputs = [outputs[i] for i in scope.out_order]
    _lay_out(packs, outputs, origin)
    return ScopePlan(scope, packs, _where(packs), subplans)


def _group(nodes: list[Node], merge: Merge | None,
           unmerged_cost: tuple[int, int] | None = None) -> list[Pack] | None:
    """The packs of ``nodes`` by signature, in an order that emits a pack after those it reads;
    with ``merge`` applied, or ``None`` (and nothing applied) if its packs would read one
    another in a cycle or if it gains too little against ``unmerged_cost``."""
    parts, reads, sig = _parts(nodes, merge)
    if merge is not None and unmerged_cost is not None:
        # A merge pays if it removes packs and joins no reads of several packs: a chain's
        # ends then read a constant where the middle reads a neighbour (one kernel with its
        # consumer, as the array program's zero padding). One that joins pieces of two packs
        # (the oscillator's transposed step: 25 packs -> 21, one read of two packs and a
        # constant) reorders lanes at every step: 1.2x slower than without it (measured).
        packs, joined = _cost(parts, reads)
        if packs >= unmerged_cost[0] or joined > unmerged_cost[1]:
            return None
    order = _topological(parts, reads)
    if order is None:
        if merge is None:
            raise AssertionError("packs by signature read one another in a cycle")
        return None
    if merge is not None:                     # apply it: the emitter reads sigs and operands
        for node in nodes + merge.added:
            node.sig = sig[node.uid]
            if node.uid in merge.operands:
                node.operands = merge.operands[node.uid]
    return [Pack(parts[i], parts[i][0].uid) for i in order]


def _cost(parts: list[list[Node]], reads=_operands) -> tuple[int, int]:
    """``(packs, joined)``: the number of packs, and of reads that join pieces of several
    packs (constants left out: a constant piece is a pad)."""
    index = {n.uid: i for i, part in enumerate(parts) for n in part}
    joined = 0
    for part in parts:
        first = part[0]
        if isinstance(first, Sum):
            lists = [[t for m in part for t in m.terms()]]
        elif isinstance(first, (Op, Multi)):
            lists = [[reads(m)[k] for m in part] for k in range(len(reads(first)))]
        else:
            continue
        for nodes in lists:
            joined += len({index.get(o.uid, -1) for o in nodes
                           if not isinstance(o, Const)}) > 1
    return len(parts), joined


def _parts(nodes: list[Node], merge: Merge | None):
    """``(parts, reads, sig)``: the packs of ``nodes`` by signature (``merge``'s, if given),
    split as :func:`_split` does, in order of their first members; what each node reads; the
    signature of each node."""
    if merge is not None:
        nodes = nodes + merge.added
        sig = {n.uid: merge.sigs.get(n.uid, n.sig) for n in nodes}
    else:
        sig = {n.uid: n.sig for n in nodes}
    by_sig: dict[int, list[Node]] = {}
    for node in nodes:
        by_sig.setdefault(sig[node.uid], []).append(node)
    groups = []
    for members in by_sig.values():
        members.sort(key=lambda n: n.uid)
        groups.append(members)
    groups.sort(key=lambda g: g[0].uid)
    over = merge.operands if merge is not None else {}

    def reads(node):
        return over.get(node.uid) or _operands(node)

    parts = [part for members in groups for part in _split(members, reads)]
    return parts, reads, sig


def _topological(parts: list[list[Node]], reads) -> list[int] | None:
    """Indices of ``parts`` with each after every part it reads, otherwise in their order;
    ``None`` if they read one another in a cycle."""
    index = {n.uid: i for i, part in enumerate(parts) for n in part}
    deps = []
    for i, part in enumerate(parts):
        mine = {index[o.uid] for n in part for o in reads(n) if o.uid in index}
        if i in mine:                         # a pack that reads itself
            return None
        deps.append(sorted(mine))
    state = [0] * len(parts)                  # 0 new, 1 on the path, 2 done
    order = []
    for root in range(len(parts)):
        if state[root]:
            continue
        stack = [(root, 0)]
        state[root] = 1
        while stack:
            i, k = stack.pop()
            if k < len(deps[i]):
                stack.append((i, k + 1))
                j = deps[i][k]
                if state[j] == 1:
                    return None
                if state[j] == 0:
                    state[j] = 1
                    stack.append((j, 0))
            else:
                state[i] = 2
                order.append(i)
    return order


_MAX_SPLIT = 4


def _split(members: list[Node], reads=None) -> list[list[Node]]:
    """A pack whose lanes read one value twice at one operand position (``0.999 * c`` and
    ``1e-3 * c`` of a gradient: one formula up to its constants) is split by those constants
    into a few packs, each reading its operand once per lane (a slice, not a gather)."""
    first = members[0]
    if not isinstance(first, Op) or len(members) < 2:
        return [members]
    ops = [reads(m) if reads is not None else m.operands for m in members]
    consts = [k for k in range(len(ops[0])) if all(isinstance(o[k], Const) for o in ops)]
    if not consts:
        return [members]
    repeats = False
    for k in range(len(ops[0])):
        if k not in consts:
            uids = [o[k].uid for o in ops]
            if len(set(uids)) not in (1, len(uids)):
                repeats = True
    if not repeats:
        return [members]
    parts: dict[tuple, list[Node]] = {}
    for m, o in zip(members, ops):
        key = tuple(o[k].value.tobytes() for k in consts)
        parts.setdefault(key, []).append(m)
    return list(parts.values()) if len(parts) <= _MAX_SPLIT else [members]


def _where(packs: list[Pack]) -> dict[int, tuple[int, int]]:
    return {node.uid: (p, lane) for p, pack in enumerate(packs)
            for lane, node in enumerate(pack.members)}


def _read_in_order(region: Region, body: ScopePlan) -> None:
    """Renumber the lanes of a scan's constant and ``xs`` classes in the order its body reads
    them.

    They arrive in the order JAX closed over them (first use), or in ``tree_leaves`` order,
    while the body reads them in the carry's order: the permutation is then applied once, to
    the outer vector, instead of a gather in every step. The reader is the pack that reads
    the most lanes of the class at one operand position.
    """
    scope = region.scopes[0]
    for cls, (role, positions) in enumerate(region.in_classes):
        if role not in ("const", "xs") or len(positions) < 2:
            continue
        lanes = scope.inputs[cls]
        mine = {n.uid for n in lanes}
        best: list[Node] = []
        for pack in body.packs:
            first = pack.members[0]
            if not isinstance(first, Op) or len(pack.members) <= len(best):
                continue
            for k in range(len(first.operands)):
                read = [m.operands[k] for m in pack.members]
                if (all(o.uid in mine for o in read)
                        and len({o.uid for o in read}) == len(read)):
                    best = read
                    break
        if not best:
            continue
        chosen = {n.uid for n in best}
        new = best + sorted((n for n in lanes if n.uid not in chosen), key=lambda n: n.lane)
        if [n.lane for n in new] == list(range(len(new))):
            continue
        old = list(positions)
        positions[:] = [old[n.lane] for n in new]
        for lane, node in enumerate(new):
            node.lane = lane
        scope.inputs[cls] = new
    for pack in body.packs:
        if isinstance(pack.members[0], In):
            pack.members.sort(key=lambda n: n.lane)
    body.where.update(_where(body.packs))


def _carry_in_order(region: Region, scope: Scope, origin) -> None:
    """Renumber the lanes of a scan's carry classes by the formula their body returns (in
    order of first appearance), then by the leaf each derives from.

    The graph ordered them by signature, before the ends merged: the first stiffness's
    cotangent (no left neighbour) went with the dampings', whose formula it then had. By
    merged formula, each of the body's packs updates a run of the carry, in the order of its
    leaves (:func:`_key_order` lays the body out so), and the step reads and writes slices.
    Only the lane order changes: the loop's initial values and the outside's reads follow it.
    """
    if origin is None:
        return
    carry_ids = [c for c, (role, _) in enumerate(region.in_classes) if role == "carry"]
    for k, cls in enumerate(carry_ids):
        positions = region.in_classes[cls][1]
        outs = [scope.outputs[p] for p in region.out_classes[k][1]]
        keys = [origin(n) for n in outs]
        if len(outs) < 2 or any(key is None for key in keys):
            continue
        rank: dict[int, int] = {}
        for node in outs:
            rank.setdefault(node.sig, len(rank))
        order = sorted(range(len(outs)), key=lambda i: (rank[outs[i].sig], keys[i]))
        if order == list(range(len(outs))):
            continue
        lanes = scope.inputs[cls]
        offset = positions[0] - region.out_classes[k][1][0]
        positions[:] = [positions[i] for i in order]
        region.out_classes[k][1][:] = [p - offset for p in positions]
        new = [lanes[i] for i in order]
        for lane, node in enumerate(new):
            node.lane = lane
        scope.inputs[cls] = new
    if scope.out_order is not None:
        scope.out_order = [p for _, positions in region.out_classes for p in positions]


def _fixed(pack: Pack) -> bool:
    """Inputs and region outputs keep lane order (their vector comes whole from outside)."""
    first = pack.members[0]
    return isinstance(first, In) or (isinstance(first, Out) and first.cls is not None)


def _key_order(members: list[Node], claims: list[list[Node]], origin) -> list[Node] | None:
    """``members`` in the natural order of the leaves they derive from (mass 0, 1, ...), if
    each claim is a run of consecutive lanes in that order: every reader then reads a slice,
    and a chain's ends sit at the ends (a read of a shifted neighbour is one slice and a pad,
    not a rotation). ``None`` if some member has no key, two share one, or a claim would be
    read out of order."""
    if origin is None:
        return None
    keys = [origin(n) for n in members]
    if any(k is None for k in keys) or len(set(keys)) < len(keys):
        return None
    order = sorted(range(len(members)), key=lambda i: keys[i])
    rank = {members[i].uid: r for r, i in enumerate(order)}
    for wanted in claims:
        seen, ranks = set(), []
        for node in wanted:
            if node.uid in rank and node.uid not in seen:
                seen.add(node.uid)
                ranks.append(rank[node.uid])
        if any(b != a + 1 for a, b in zip(ranks, ranks[1:])):
            return None
    return [members[i] for i in order]


def _lay_out(packs: list[Pack], outputs: list[Node], origin=None) -> None:
    index = {}
    for p, pack in enumerate(packs):
        if _fixed(pack):
            pack.members.sort(key=lambda n: n.lane)
        for node in pack.members:
            index[node.uid] = p
    done = [_fixed(pack) for pack in packs]
    # Per pack, the lanes its readers want, in the order they want them. Every reader of a
    # pack comes after it, so when the walk below reaches a pack all its claims are in: its
    # order is their concatenation (a pack read in halves by two formulas serves each a
    # slice), then the lanes no one claimed; a longer claim first (a chain's end reads its
    # neighbours shifted, a constant at one end: the whole read orders them, the shifted read
    # is then a slice).
    claims: dict[int, list[list[Node]]] = {}

    def adopt(p: int, wanted: list[Node]) -> None:
        claims.setdefault(p, []).append(wanted)

    def settle(p: int) -> None:
        members = packs[p].members
        mine = claims.pop(p)
        by_key = _key_order(members, mine, origin)
        if by_key is not None:
            packs[p].members = by_key
            done[p] = True
            return
        seen, front = set(), []
        ordered = sorted(mine, key=len, reverse=True)
        for node in (n for wanted in ordered for n in wanted):
            if node.uid not in seen and index.get(node.uid) == p:
                seen.add(node.uid)
                front.append(node)
        packs[p].members = front + [n for n in members if n.uid not in seen]
        done[p] = True

    by_pack: dict[int, list[Node]] = {}
    for node in outputs:
        p = index.get(node.uid)
        if p is not None:
            by_pack.setdefault(p, []).append(node)
    for p, wanted in by_pack.items():
        if not done[p]:
            adopt(p, wanted)
    for p in range(len(packs) - 1, -1, -1):
        if p in claims and not done[p]:
            settle(p)
        members = packs[p].members
        first = members[0]
        if isinstance(first, Region):       # each input class is read whole, in lane order
            for _, positions in first.in_classes:
                wanted = [first.operands[i] for i in positions]
                q = index.get(wanted[0].uid)
                if q is not None and not done[q] and all(index.get(w.uid) == q for w in wanted):
                    adopt(q, wanted)
            continue
        if not isinstance(first, (Op, Reshape, Multi)) or len(members) < 2 or not done[p]:
            continue                        # only a decided order is passed on
        for k in range(len(_operands(first))):
            # A lane that reads a constant (a chain's end) leaves the others' order.
            wanted = [o for n in members if not isinstance(o := _operands(n)[k], Const)]
            if not wanted:
                continue
            q = index.get(wanted[0].uid)
            if q is None or done[q] or q == p:
                continue
            if all(index.get(w.uid) == q for w in wanted):
                adopt(q, wanted)
    # Packs no output and no loop decided (a sum's terms, say): in the order of what they read.
    position = {}
    for p, pack in enumerate(packs):
        members = pack.members
        first = members[0]
        if not done[p] and isinstance(first, (Op, Reshape)) and len(members) > 1:
            for k in range(len(_operands(first))):
                lanes = [position.get(_operands(n)[k].uid) for n in members]
                qs = {index.get(_operands(n)[k].uid) for n in members}
                if None not in lanes and len(qs) == 1 and len(set(lanes)) == len(lanes):
                    pack.members = [n for _, n in sorted(zip(lanes, members),
                                                         key=lambda t: t[0])]
                    break
            done[p] = True
        for lane, node in enumerate(pack.members):
            position[node.uid] = lane
