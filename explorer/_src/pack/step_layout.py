"""Pass 4 of :func:`explorer.pack`: group, merge and lay out the output leaves' packs.

Groups of output leaves are put back in order (a concatenation, a stack and reshape when they
interleave by stride, else one static permutation), merged when their formulas differ only in
which leaves they read, and each argument's lanes are held in the order (``tree_leaves`` or the
natural order of the leaf paths) that makes the most reads slices instead of gathers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from .step_graph import Kind


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
        return (n.kind, n.arg) if n.kind in (Kind.IN, Kind.CONST) else None

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
        if first.kind is Kind.OP:
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
            if run[0].kind is Kind.IN:
                pos = np.fromiter((n.pos for n in run), np.int64, len(run))
                if not _stride(pos if where[run[0].arg] is None else where[run[0].arg][pos]):
                    return False
            elif run[0].kind is not Kind.CONST:
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


def natural_order(keys: Sequence[str]) -> list[str]:
    """``keys`` in the order explorer.jit stacks the leaves of a dict keyed by them
    (:func:`_natural_key`: ``x_2`` before ``x_10``), not in ``tree_leaves``' text order; keys
    that tie (``x1``, ``x01``) stay in that text order, as the stable sort of the leaves does."""
    return sorted(sorted(keys), key=lambda k: _natural_key((k,)))


def _read_packs(groups) -> list[tuple[int, int, np.ndarray]]:
    """Every pack of leaf reads the groups' formulas reach: (group, argument, leaf indices in
    the group's lane order). Packs that read one leaf in every lane are left out (no index)."""
    reads, seen = [], set()
    for g, outs in enumerate(groups):
        for lanes in _leaf_packs(outs, seen):
            if lanes[0].kind is Kind.IN:
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

