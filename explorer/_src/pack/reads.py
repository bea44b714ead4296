"""Per-name reads of one shared array: ``x[:, i]`` for name ``i`` (``x[i]``, ``x[..., i]``,
``params_array[i]``), which JAX traces as N ``slice`` equations of one operand whose start
indices differ name by name (then a ``squeeze``).

:mod:`.graph` numbers such a slice with :func:`read_key` in place of its parameters: the
operand itself (its uid, so only reads of the very same value group), and per axis either
the exact ``(start, limit, stride)`` or, where one element is read, only that. The N reads then
share a signature and :mod:`.plan` packs them (and what reads them: the squeeze, the products,
their gradients) like any group. :func:`stack_reads` emits such a pack as one read of the
operand: where the per-lane starts step evenly in lane order (``start_0 + lane``) a (strided)
``lax.slice`` of the range, else one static gather (``jnp.take`` with a constant index array),
then a move of that axis to the lanes' position.

Only operands that are the same for every name qualify (constants, an input class of one
lane, formulas of them: ``Graph.shared``); a slice of a per-name value keeps its exact
parameters in its signature, as before (its lanes read one operand each, at one place).

Their transpose, the gradient with respect to the shared array, is N ``pad`` equations that put
each name's cotangent (one element along an axis) at its place, summed by an ``add_any``
chain: a ``pad`` whose padding of an axis of size 1 (no interior padding) is left out of its
signature likewise, so the pads pack, and :func:`stack_pads` emits them as one select of the
cotangents against a constant mask of the places; the chain is a :class:`~.graph.Sum` of them
(one reduction over the lanes).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["emit_read", "read_key"]


def _size(start: int, limit: int, stride: int) -> int:
    return max(0, -(-(limit - start) // stride))


def read_key(eqn, operands, shared) -> tuple | None:
    """The signature key of a ``slice`` of a shared operand that reads one element along some
    axis (those axes' starts left out), of a ``pad`` that places an axis of size 1 (its
    padding there left out), or ``None`` (the equation's parameters key it)."""
    if eqn.primitive.name == "pad" and len(operands) == 2:
        config = eqn.params["padding_config"]
        axes = tuple(("one",) if (d == 1 and int(i) == 0 and int(lo) >= 0 and int(hi) >= 0)
                     else (int(lo), int(hi), int(i))
                     for d, (lo, hi, i) in zip(operands[0].shape, config))
        return ("placed", axes) if ("one",) in axes else None
    if eqn.primitive.name != "slice" or len(operands) != 1 or operands[0].uid not in shared:
        return None
    p = eqn.params
    starts, limits = p["start_indices"], p["limit_indices"]
    strides = p["strides"] or (1,) * len(starts)
    axes = tuple(("one",) if _size(s, lim, st) == 1 else (s, lim, st)
                 for s, lim, st in zip(starts, limits, strides))
    if ("one",) not in axes:
        return None
    return ("shared read", operands[0].uid, axes)


def emit_read(state, members) -> tuple | None:
    """``(value, batched)`` of a pack of :class:`~.graph.Op` nodes this module keys (slices
    of one operand at per-lane places, pads at per-lane places), or ``None`` (an ordinary
    pack: its lanes share their parameters)."""
    first = members[0]
    name = first.eqn.primitive.name
    if (name not in ("slice", "pad") or len(members) < 2
            or all(m.eqn.params == first.eqn.params for m in members[1:])):
        return None
    if name == "slice" and all(m.operands[0] is first.operands[0] for m in members):
        return stack_reads(state.single(first.operands[0]), members), True
    if name == "pad":
        return stack_pads(state, members), True
    return None


def _lanes_first(value):
    return value.lanes_first() if hasattr(value, "lanes_first") else value


def stack_pads(state, members) -> jax.Array:
    """The pads ``members`` (same padding but along axes of size 1, where each lane places
    its operand at its own offset) as one ``(len(members), *shape)`` array: the shared
    padding applied once to the stacked operands, then one select against a constant mask of
    each lane's places (the padding value elsewhere, as ``pad`` puts it)."""
    first, n = members[0], len(members)
    ops, batched = state.lanes(tuple(m.operands[0] for m in members))
    ops = _lanes_first(ops)
    if not batched:
        ops = jnp.broadcast_to(ops, (n, *first.operands[0].shape))
    vals, vals_batched = state.lanes(tuple(m.operands[1] for m in members))
    vals = _lanes_first(vals)
    configs = np.array([[tuple(int(c) for c in axis) for axis in m.eqn.params["padding_config"]]
                        for m in members], np.int64)              # (n, ndim, 3)
    ndim = configs.shape[1]
    varying = [a for a in range(ndim) if np.any(configs[:, a] != configs[0, a])]
    fixed = [(0, 0, 0)] + [(0, 0, 0) if a in varying else tuple(configs[0, a])
                           for a in range(ndim)]
    if any(c != (0, 0, 0) for c in fixed):
        pad = functools.partial(lax.pad, padding_config=fixed[1:])
        ops = (jax.vmap(pad)(ops, vals) if vals_batched else
               lax.pad(ops, vals.astype(ops.dtype), fixed))
    mask = np.ones((n,) + (1,) * ndim, bool)
    for a in varying:                     # lane j's element of axis a sits at its offset
        places = np.arange(first.shape[a]).reshape((1,) * (a + 1) + (-1,) + (1,) * (ndim - a - 1))
        mask = mask & (places == configs[:, a, 0].reshape((n,) + (1,) * ndim))
    if vals_batched:
        vals = jnp.reshape(vals, (n,) + (1,) * ndim)
    out = jnp.where(mask, ops, vals.astype(ops.dtype))
    return jnp.broadcast_to(out, (n, *first.shape))


def _step(idx: np.ndarray) -> int:
    """The even step of ``idx`` (>= 1), else 0."""
    if len(idx) < 2:
        return 1
    steps = np.diff(idx)
    return int(steps[0]) if steps[0] >= 1 and np.all(steps == steps[0]) else 0


def stack_reads(x: jax.Array, members) -> jax.Array:
    """The slices ``members`` (one operand ``x``, per-lane starts) as one
    ``(len(members), *shape)`` array: fixed axes sliced once, the varying axis read by a
    (strided) slice or one static gather, then moved to the front."""
    first, n = members[0], len(members)
    p = first.eqn.params
    ndim = len(p["start_indices"])
    starts = np.array([m.eqn.params["start_indices"] for m in members], np.int64).reshape(n, ndim)
    strides = p["strides"] or (1,) * ndim
    varying = [a for a in range(ndim) if np.any(starts[:, a] != starts[0, a])]
    lo = [0 if a in varying else int(p["start_indices"][a]) for a in range(ndim)]
    hi = [x.shape[a] if a in varying else int(p["limit_indices"][a]) for a in range(ndim)]
    st = [1 if a in varying else int(strides[a]) for a in range(ndim)]
    if lo != [0] * ndim or hi != list(x.shape) or st != [1] * ndim:
        x = lax.slice(x, lo, hi, st)
    if not varying:                       # the same element read N ways: one value
        return jnp.broadcast_to(x, (n, *first.shape))
    if len(varying) == 1:
        (a,) = varying
        idx = starts[:, a]
        step = _step(idx)
        if step == 1 and idx[0] == 0 and len(idx) == x.shape[a]:
            pass                          # every element, in order: x itself
        elif step:
            x = lax.slice_in_dim(x, int(idx[0]), int(idx[-1]) + 1, step, axis=a)
        else:
            x = jnp.take(x, idx, axis=a, unique_indices=len(set(idx.tolist())) == n,
                         indices_are_sorted=bool(np.all(np.diff(idx) > 0)), mode="clip")
        x = jnp.moveaxis(x, a, 0)
    else:                                 # x[i, j] per name: one gather of N points
        x = jnp.moveaxis(x, varying, list(range(len(varying))))
        x = x[tuple(starts[:, a] for a in varying)]
    return jnp.reshape(x, (n, *first.shape))
