"""Pass 5 of :func:`explorer.jit`'s packer: emit the packed program.

Each :class:`~.plan.Pack` becomes one vector value (lane axis 0), or one plain value when all
its lanes hold the same thing. Reads of other packs are whole vectors, static slices or one
gather; constants become one constant vector. A region (``scan``, ``while``, ``cond``) is
emitted with its public ``lax`` function on one stacked array per class, its bodies emitted
the same way inside. Two exceptions to "lane axis 0": a scan's stacked outputs, the arguments
stacked steps first and their elementwise formulas are :class:`Moved` (lane axis 1, steps
first, as ``lax.scan`` stacks and reads them), and a loop's carry class that its body updates
in separate packs is carried as :class:`Pieces`, one array per pack.

What vectorises is decided in one place, :func:`.prims.vectorises`; a pack of a primitive it
refuses is evaluated lane by lane (the numbers are the same, the program just grows) and named
in the report.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .graph import Const, In, Multi, Node, Op, Out, Region, Reshape, Sum
from .merge import operands
from .plan import ScopePlan
from .prims import bind, eval_eqn, scope_of, vectorises
from .reads import emit_read

__all__ = ["Emitter", "Moved", "Pieces"]


def _zero(node: Node) -> bool:
    return isinstance(node, Const) and node.value.size == 1 and not node.value.any()


def _cut(full, nodes, cuts):
    """``full(nodes)``, or with ``cuts`` the list of ``full`` of each piece."""
    shape, dtype = nodes[0].shape, nodes[0].dtype
    if not cuts:
        return full(nodes, shape, dtype)
    bounds = [0, *cuts, len(nodes)]
    return [full(nodes[a:b], shape, dtype) for a, b in zip(bounds, bounds[1:])]


_MAX_RUNS = 6  # lanes read in at most this many runs of consecutive lanes: slices, not a gather


def _stride(idx: np.ndarray) -> int:
    if len(idx) < 2:
        return 1
    steps = np.diff(idx)
    return int(steps[0]) if steps[0] >= 1 and np.all(steps == steps[0]) else 0


class Pieces:
    """A vector held as consecutive pieces along axis 0: a loop's carry split where its body
    computes it in separate packs, so that no step concatenates it. Read with :func:`take`
    and :func:`index`, which concatenate only what a read spans across pieces."""

    def __init__(self, parts):
        self.parts = list(parts)
        self.starts = np.cumsum([0] + [p.shape[0] for p in self.parts])

    @property
    def shape(self):
        return (int(self.starts[-1]), *self.parts[0].shape[1:])


class Moved:
    """A vector whose lane axis is 1, not 0: a scan's stacked ``ys`` as ``lax.scan`` stacks
    them (steps first), and what elementwise formulas compute from them. A scan reads it as
    its ``xs`` as it is; a reader that needs lanes first moves it (one transpose, made once)."""

    def __init__(self, value):
        self.value = value
        self._lanes_first = None

    @property
    def shape(self):
        s = self.value.shape
        return (s[1], s[0], *s[2:])

    def lanes_first(self) -> jax.Array:
        if self._lanes_first is None:
            self._lanes_first = jnp.moveaxis(self.value, 1, 0)
        return self._lanes_first


def _lanes_first(v):
    return v.lanes_first() if isinstance(v, Moved) else v


def index(v, lane: int) -> jax.Array:
    """Lane ``lane`` of ``v`` (axis 0, dropped)."""
    if isinstance(v, Moved):
        return lax.index_in_dim(v.value, lane, 1, keepdims=False)
    if isinstance(v, Pieces):
        k = int(np.searchsorted(v.starts, lane, side="right")) - 1
        v, lane = v.parts[k], lane - int(v.starts[k])
    return lax.index_in_dim(v, lane, 0, keepdims=False)


def take(v, lanes, axis: int = 0) -> jax.Array:
    """Lanes ``lanes`` of ``v`` (axis 0): ``v`` itself, a static slice, or one gather. Of a
    :class:`Moved` vector, a :class:`Moved` vector."""
    idx = np.asarray(lanes, np.int64)
    if isinstance(v, Moved):
        if len(idx) == v.shape[0] and np.array_equal(idx, np.arange(len(idx))):
            return v
        return Moved(take(v.value, idx, axis=1))
    if isinstance(v, Pieces):
        piece = np.searchsorted(v.starts, idx, side="right") - 1
        breaks = np.flatnonzero(np.diff(piece)) + 1
        parts = [take(v.parts[int(piece[run[0]])], idx[run] - v.starts[piece[run[0]]])
                 for run in np.split(np.arange(len(idx)), breaks)]
        return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=0)
    if len(idx) == v.shape[axis] and np.array_equal(idx, np.arange(len(idx))):
        return v
    step = _stride(idx)
    if step:
        return lax.slice_in_dim(v, int(idx[0]), int(idx[-1]) + 1, step, axis=axis)
    # A few runs of consecutive lanes (a neighbour read: lanes 1..N-1, then lane 0): their
    # slices concatenated, instead of a gather whose index array of N lanes is a constant.
    breaks = np.flatnonzero(np.diff(idx) != 1) + 1
    if len(breaks) < _MAX_RUNS:
        return jnp.concatenate([lax.slice_in_dim(v, int(run[0]), int(run[-1]) + 1, 1,
                                                 axis=axis)
                                for run in np.split(idx, breaks)], axis=axis)
    return jnp.take(v, idx, axis=axis, unique_indices=len(set(idx.tolist())) == len(idx),
                    indices_are_sorted=bool(np.all(np.diff(idx) > 0)), mode="clip")


def _take_pack(v, lanes):
    """A pack of inputs or loop outputs: from a vector held in pieces, its lanes of each
    piece, kept apart (its readers take their lanes from the pieces)."""
    if not isinstance(v, Pieces):
        return take(v, lanes)
    idx = np.asarray(lanes, np.int64)
    piece = np.searchsorted(v.starts, idx, side="right") - 1
    breaks = np.flatnonzero(np.diff(piece)) + 1
    parts = [take(v, idx[run]) for run in np.split(np.arange(len(idx)), breaks)]
    return parts[0] if len(parts) == 1 else Pieces(parts)


_MAX_PIECES = 4


def _reads(plan: ScopePlan):
    """Per pack of ``plan``, the node lists it reads together (one per operand position)."""
    for pack in plan.packs:
        first, members = pack.members[0], pack.members
        if isinstance(first, (Op, Multi)):
            for k in range(len(first.operands)):
                yield [m.operands[k] for m in members]
        elif isinstance(first, Reshape):
            yield [m.operand for m in members]
        elif isinstance(first, Sum):
            yield [t for m in members for t in m.terms()]
        elif isinstance(first, Region):
            for m in members:
                for _, positions in m.in_classes:
                    yield [m.operands[q] for q in positions]


def _carry_pieces(region: Region, plans, body: ScopePlan, cls: int,
                  positions) -> list[int] | None:
    """Where to cut carry class ``cls`` of ``region``: the lanes at which its body's update
    passes from one pack to another (``[ct_params | ct_states]`` of a transposed scan), so that
    each piece is one pack and the step writes no concatenation. A cut is kept only where no
    read of the body spans it (a read across two pieces would concatenate them instead).
    ``None``: one piece."""
    outs = [body.scope.outputs[q] for q in positions]
    if len(outs) < 2:
        return None
    cuts, prev = [], body.where.get(outs[0].uid, (None,))[0]
    for j in range(1, len(outs)):
        here = body.where.get(outs[j].uid, (None,))[0]
        if here != prev:
            cuts.append(j)
        prev = here
    if not cuts or len(cuts) >= _MAX_PIECES:
        return None
    # Pieces one of which is computed from another (an oscillator's positions from its new
    # velocities) are one kernel of XLA's when the step returns them concatenated, as the
    # array program's; held apart they are two, and the step a third slower (measured).
    packs = {body.where[outs[j].uid][0] for j in [0, *cuts] if outs[j].uid in body.where}
    packs = {p for p in packs if not isinstance(body.packs[p].members[0], In)}
    for p in packs:
        if _upstream(body, p) & (packs - {p}):
            return None
    for plan in plans:
        mine = {n.uid: n.lane for n in plan.scope.inputs[cls]} if cls < len(
            plan.scope.inputs) else {}
        for nodes in _reads(plan):
            lanes = [mine[n.uid] for n in nodes if n.uid in mine]
            if len(lanes) > 1:
                lo, hi = min(lanes), max(lanes)
                cuts = [c for c in cuts if not lo < c <= hi]
    return cuts or None


def _upstream(plan: ScopePlan, start: int) -> set[int]:
    """The packs of ``plan`` that pack ``start`` is computed from."""
    seen: set[int] = set()
    stack = [start]
    while stack:
        for node in plan.packs[stack.pop()].members:
            for o in operands(node):
                loc = plan.where.get(o.uid)
                if loc is not None and loc[0] not in seen:
                    seen.add(loc[0])
                    stack.append(loc[0])
    return seen


class Emitter:
    """Emits plans; collects what stayed lane by lane: ``scalar`` ((primitive, why) -> lanes)
    for packs ``jax.vmap`` refused, ``singles`` (primitive -> count) for values computed on
    their own."""

    def __init__(self, holders: dict[int, Any] | None = None):
        self.holders = holders or {}          # see Graph.holders
        self.scalar: dict[tuple[str, str], int] = {}
        self.singles: dict[str, int] = {}     # primitive -> packs of one lane

    def run(self, plan: ScopePlan, inputs) -> State:
        state = State(self, plan, inputs)
        state.emit_all()
        return state

    def note(self, name: str, lanes: int, why: str) -> None:
        self.scalar[name, why] = self.scalar.get((name, why), 0) + lanes


class State:
    """The values of one scope's packs during one trace of it."""

    def __init__(self, emitter: Emitter, plan: ScopePlan, inputs):
        self.em, self.plan, self.inputs = emitter, plan, inputs
        self.values: dict[int, tuple] = {}
        self._single: dict[int, jax.Array] = {}

    def emit_all(self) -> None:
        for p, pack in enumerate(self.plan.packs):
            self.values[p] = self._emit(pack.members)

    # -- reading lanes ------------------------------------------------------------------------

    def single(self, node: Node):
        """The plain value of one node."""
        hit = self._single.get(node.uid)
        if hit is None:
            if isinstance(node, Const):
                hit = jnp.asarray(node.value)
            else:
                p, lane = self.plan.where[node.uid]
                value, batched = self.values[p]
                hit = index(value, lane) if batched else value
            self._single[node.uid] = hit
        return hit

    def lanes(self, nodes) -> tuple:
        """``(value, batched)`` holding ``nodes`` as lanes (or once, if they are one value)."""
        first = nodes[0]
        if all(n is first for n in nodes):
            return self.single(first), False
        if all(isinstance(n, Const) for n in nodes):
            if all(np.array_equal(n.value, first.value) for n in nodes):
                return jnp.asarray(first.value), False
            return jnp.asarray(np.stack([n.value for n in nodes])), True
        where = self.plan.where
        locs = [where.get(n.uid) for n in nodes]
        if all(loc is not None and loc[0] == locs[0][0] for loc in locs):
            value, batched = self.values[locs[0][0]]
            if not batched:
                return value, False
            return take(value, [loc[1] for loc in locs]), True
        # From several packs (or packs and constants): one piece each, then one permutation.
        parts: dict = {}
        for i, loc in enumerate(locs):
            parts.setdefault("const" if loc is None else loc[0], []).append(i)
        got, order = [], []
        for positions in parts.values():
            got.append((*self.lanes(tuple(nodes[i] for i in positions)), len(positions)))
            order.extend(positions)
        shape = first.shape
        if shape and any(isinstance(v, Moved) for v, _, _ in got):
            # Some pieces are steps first (a scan's outputs): joined steps first, so that a
            # transposed scan reads them as its xs without moving any of them.
            pieces = []
            for value, batched, n in got:
                if isinstance(value, Moved):
                    pieces.append(value.value)
                elif batched:
                    pieces.append(jnp.moveaxis(value, 0, 1))
                else:
                    pieces.append(jnp.broadcast_to(jnp.expand_dims(value, 1),
                                                   (shape[0], n, *shape[1:])))
            return Moved(take(jnp.concatenate(pieces, axis=1), np.argsort(order), axis=1)), True
        pieces = []
        for value, batched, n in got:
            value = _lanes_first(value)
            if not batched:
                value = jnp.broadcast_to(value, (n, *jnp.shape(value)))
            pieces.append(value)
        return take(jnp.concatenate(pieces, axis=0), np.argsort(order)), True

    def full(self, nodes, shape, dtype, moved: bool = False) -> jax.Array:
        """``nodes`` as one ``(len(nodes), *shape)`` array of ``dtype``; with ``moved``, a
        :class:`Moved` vector stays one."""
        value, batched = self.lanes(tuple(nodes))
        if isinstance(value, Moved):
            if moved:
                return Moved(lax.convert_element_type(value.value, dtype))
            value = value.lanes_first()
        if not batched:
            value = jnp.broadcast_to(value, (len(nodes), *shape))
        return lax.convert_element_type(value, dtype)

    def _location(self, node: Node) -> tuple[int, int]:
        return self.plan.where.get(node.uid, (-1, node.uid))

    # -- one pack -----------------------------------------------------------------------------

    def _emit(self, members: list[Node]) -> tuple:
        first, n = members[0], len(members)
        if isinstance(first, In):
            value = self.inputs[first.cls]
            if n == 1:
                return index(value, first.lane), False
            return _take_pack(value, [m.lane for m in members]), True
        if isinstance(first, Reshape):
            value, batched = self.lanes(tuple(m.operand for m in members))
            value = _lanes_first(value)
            return jnp.reshape(value, ((n,) if batched else ()) + first.shape), batched
        if isinstance(first, Op):
            with scope_of(first.eqn, self.em.holders):
                read = emit_read(self, members)    # x[:, i] per name: one read of x
                if read is not None:
                    return read
                return self._op(first.eqn, members, [m.operands for m in members])
        if isinstance(first, Multi):
            with scope_of(first.eqn, self.em.holders):
                return self._op(first.eqn, members, [m.operands for m in members], multi=True)
        if isinstance(first, Sum):
            with scope_of(first.eqn, self.em.holders):
                return self._sum(members)
        if isinstance(first, Out):
            if first.cls is None:                      # an output of a Multi pack
                p, _ = self.plan.where[first.parent.uid]
                outs, batched = self.values[p]
                value = outs[first.index]
                if not batched:
                    return value, False
                lanes = [self.plan.where[m.parent.uid][1] for m in members]
                return take(value, lanes), True
            outs, _ = self.values[self.plan.where[first.parent.uid][0]]
            value = outs[first.cls]
            if n == 1:
                return index(value, first.lane), False
            return _take_pack(value, [m.lane for m in members]), True
        if isinstance(first, Region):
            with scope_of(first.eqn, self.em.holders):
                return self._region(first), False
        raise AssertionError(f"unexpected node {type(first).__name__}")

    def _op(self, eqn, members, operand_lists, multi: bool = False) -> tuple:
        n = len(members)
        if n == 1:
            name = eqn.primitive.name
            self.em.singles[name] = self.em.singles.get(name, 0) + 1
        ops = [self.lanes(tuple(ol[k] for ol in operand_lists))
               for k in range(len(operand_lists[0]))]
        moved = [isinstance(v, Moved) for v, _ in ops]
        values = [v.value if m else v for (v, _), m in zip(ops, moved)]
        axes = tuple((1 if m else 0) if b else None for (_, b), m in zip(ops, moved))
        # A formula of a moved vector whose operands are per lane shaped like its result (or
        # scalars) computes moved: the observations minus a scan's predictions, handed to the
        # transposed scan as its xs, are moved once, not there and back.
        out_axis = 0
        if any(moved) and not multi and not eqn.primitive.multiple_results:
            shape = tuple(eqn.outvars[0].aval.shape)
            if shape and all(tuple(v.aval.shape) in (shape, ()) for v in eqn.invars):
                out_axis = 1
                # Every operand but a plain scalar as the result is laid out (steps, lanes,
                # ...): JAX's batching rule then keeps the lane axis where it is.
                full = (shape[0], n, *shape[1:])
                for k, ((v, b), var) in enumerate(zip(ops, eqn.invars)):
                    mine = tuple(var.aval.shape)
                    if moved[k]:
                        continue
                    if b and mine == shape:
                        values[k] = jnp.moveaxis(v, 0, 1)
                    elif b:
                        values[k] = lax.broadcast_in_dim(v, full, (1,))
                    elif mine == shape:
                        values[k] = lax.broadcast_in_dim(
                            v, full, (0, *range(2, len(full))))
                    else:
                        continue
                    axes = axes[:k] + (1,) + axes[k + 1:]
        if multi:
            def call(*a):
                return eval_eqn(eqn, a)
        elif eqn.primitive.multiple_results:       # one output, returned in a list
            def call(*a):
                return bind(eqn.primitive, eqn.params, a)[0]
        else:
            def call(*a):
                return bind(eqn.primitive, eqn.params, a)
        if not any(b for _, b in ops):
            return call(*values), False
        why = vectorises(eqn, axes, values) if not multi else None
        if why is None:
            try:
                out = jax.vmap(call, in_axes=axes, out_axes=out_axis)(*values)
                return (Moved(out) if out_axis else out), True
            except Exception as e:  # noqa: BLE001 - a sub-program vmap refuses: lane by lane
                why = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e) else ''}"
        self.em.note(eqn.primitive.name, n, why)
        values = [_lanes_first(v) for v, _ in ops]
        lanes = [call(*[v[j] if b else v for v, (_, b) in zip(values, ops)]) for j in range(n)]
        if multi:
            return tuple(jnp.stack(outs) for outs in zip(*lanes)), True
        return jnp.stack(lanes), True

    def _sum(self, members: list[Sum]) -> tuple:
        n, first = len(members), members[0]
        per_lane = [[t for t in m.terms() if not _zero(t)] or m.terms() for m in members]
        if len({tuple(sorted(t.sig for t in terms)) for terms in per_lane}) > 1:
            per_lane = [m.terms() for m in members]   # a zero in some lanes only: c + 0 vs c + 3
        sigs = list(dict.fromkeys(t.sig for t in per_lane[0]))
        total, total_batched = None, False
        for sig in sigs:
            # A sum's terms commute: read them in lane order (a slice, not a gather).
            mat = [sorted((t for t in terms if t.sig == sig), key=self._location)
                   for terms in per_lane]
            c = len(mat[0])
            value, batched = self.lanes(tuple(t for row in mat for t in row))
            value = _lanes_first(value)
            if batched:
                if n == 1:
                    part, part_batched = jnp.sum(value, axis=0), False
                else:
                    part = jnp.sum(jnp.reshape(value, (n, c, *first.shape)), axis=1)
                    part_batched = True
            else:
                part, part_batched = value * c if c > 1 else value, False
            if total is None:
                total, total_batched = part, part_batched
            else:
                total, total_batched = total + part, total_batched or part_batched
        return lax.convert_element_type(total, first.dtype), total_batched

    # -- regions ------------------------------------------------------------------------------

    def _class_inputs(self, region: Region, cuts=None):
        out = []
        for cls, (role, positions) in enumerate(region.in_classes):
            nodes = [region.operands[p] for p in positions]
            if role == "xs" and region.kind == "scan":
                out.append(self.full(nodes, nodes[0].shape, nodes[0].dtype, moved=True))
            else:
                out.append(_cut(self.full, nodes, (cuts or {}).get(cls)))
        return out

    def _class_outputs(self, state: State, region: Region, outputs, roles=None, cuts=None):
        """Per class of ``roles``, its stacked vector; a carry class cut by ``cuts`` (class
        index -> cut lanes) as the list of its pieces."""
        out = []
        for cls, (role, positions) in enumerate(region.out_classes):
            if roles is None or role in roles:
                nodes = [outputs[p] for p in positions]
                out.append(_cut(state.full, nodes, (cuts or {}).get(cls)))
        return out

    def _region(self, region: Region) -> dict:
        plans = self.plan.subplans[region.uid]
        roles = [role for role, _ in region.in_classes]
        p = region.eqn.params
        carry_ids = [i for i, r in enumerate(roles) if r == "carry"]
        # A carry class is cut where its body's update changes pack (out class k of a loop is
        # its carry class carry_ids[k]: the carry goes out in the lane order it came in).
        cuts = {}
        if region.kind in ("scan", "while"):
            body_plan = plans[-1]
            for k, i in enumerate(carry_ids):
                c = _carry_pieces(region, plans, body_plan, i, region.out_classes[k][1])
                if c is not None:
                    cuts[k] = c
        vecs = self._class_inputs(region, {carry_ids[k]: c for k, c in cuts.items()})

        def with_carry(inputs, carry):
            inputs = list(inputs)
            for i, v in zip(carry_ids, carry):
                inputs[i] = Pieces(v) if isinstance(v, list) else v
            return inputs

        if region.kind == "scan":
            xs_ids = [i for i, r in enumerate(roles) if r == "xs"]

            def body(carry, xs):
                inputs = with_carry(vecs, carry)
                for i, v in zip(xs_ids, xs or ()):
                    inputs[i] = v
                state = self.em.run(plans[0], inputs)
                outs = plans[0].scope.outputs
                return (self._class_outputs(state, region, outs, ("carry",), cuts),
                        self._class_outputs(state, region, outs, ("ys",)))

            xs = [vecs[i].value if isinstance(vecs[i], Moved) else jnp.moveaxis(vecs[i], 1, 0)
                  for i in xs_ids]
            carry, ys = lax.scan(body, [vecs[i] for i in carry_ids], xs or None,
                                 length=p["length"], reverse=p["reverse"], unroll=p["unroll"])
            result = ([Pieces(v) if isinstance(v, list) else v for v in carry]
                      + [Moved(y) for y in ys])
        elif region.kind == "while":

            def cond_fun(carry):
                state = self.em.run(plans[0], with_carry(vecs, carry))
                return state.single(plans[0].scope.outputs[0])

            def body_fun(carry):
                state = self.em.run(plans[1], with_carry(vecs, carry))
                return self._class_outputs(state, region, plans[1].scope.outputs, cuts=cuts)

            carry = lax.while_loop(cond_fun, body_fun, [vecs[i] for i in carry_ids])
            result = [Pieces(v) if isinstance(v, list) else v for v in carry]
        else:  # cond
            index = self.single(region.operands[0])

            def branch(plan, *args):
                state = self.em.run(plan, list(args))
                return self._class_outputs(state, region, plan.scope.outputs)

            fns = [functools.partial(branch, plan) for plan in plans]
            result = list(lax.switch(index, fns, *vecs))
        # Region outputs by class (in the order of ``out_classes``).
        return dict(enumerate(result))
