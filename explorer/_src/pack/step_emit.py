"""Pass 5 of :func:`explorer.pack`: emit one vector value per tuple of isomorphic nodes."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .prims import eval_eqn
from .step_graph import Kind, _Node
from .step_layout import _MAX_RUNS, _leaf_runs, _stride


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
                                                   first.kind not in (Kind.IN, Kind.OP)):
            return self._single(first), False
        runs = _leaf_runs(lanes) if first.kind in (Kind.IN, Kind.CONST) else ()
        if len(runs) > 1:       # reads and constants mixed: one piece per run, concatenated
            parts = []
            for run in runs:
                value, batched = self(run)
                parts.append(value if batched else
                             jnp.broadcast_to(value, (len(run), *jnp.shape(value))))
            return jnp.concatenate(parts, axis=0), True
        if first.kind is Kind.IN:
            idx = self._lanes(first.arg, np.fromiter((n.pos for n in lanes), np.int64,
                                                     len(lanes)))
            x = self.arrays[first.arg]
            step = _stride(idx)
            if step:
                return lax.slice_in_dim(x, int(idx[0]), int(idx[-1]) + 1, step, axis=0), True
            return jnp.take(x, idx, axis=0, indices_are_sorted=bool(np.all(np.diff(idx) > 0))), \
                True
        if first.kind is Kind.CONST:
            if all(np.array_equal(n.value, first.value) for n in lanes[1:]):
                return jnp.asarray(first.value), False
            return jnp.asarray(np.stack([n.value for n in lanes])), True
        if first.kind is Kind.OP:
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
        if node.kind is Kind.IN:
            value = self.arrays[node.arg][int(self._lanes(node.arg, node.pos))]
        elif node.kind is Kind.CONST:
            value = jnp.asarray(node.value)
        elif node.kind is Kind.OP:
            value = node.eqn.primitive.bind(*(self._single(o) for o in node.operands),
                                            **node.eqn.params)
        else:  # "out" of an opaque equation, evaluated once for all its outputs
            call = node.operands[0]
            outs = self.opaque.get(id(call))
            if outs is None:
                outs = self.opaque[id(call)] = eval_eqn(
                    call.eqn, [self._single(o) for o in call.operands])
            value = outs[node.index]
        self.memo[(id(node),)] = (value, False)
        return value


def _bind(eqn, *values):
    return eqn.primitive.bind(*values, **eqn.params)

