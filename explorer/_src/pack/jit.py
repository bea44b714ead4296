"""``explorer.jit``: a drop-in for ``jax.jit`` whose program does not grow with the leaves.

On a call, ``fun`` is traced as ``jax.jit`` traces it (same cache rule: the arguments'
structure, shapes, dtypes and static values), the jaxpr is packed (inline and number,
:mod:`.graph`; group and lay out, :mod:`.plan`; emit, :mod:`.emit`) and compiled, the
arguments are stacked with NumPy outside any trace (one array per argument and per (shape,
dtype) group of its leaves: the boundary of jax-ml/jax#4667 "Slow compilation for functions
acting on PyTrees"), and the outputs are put back in the structure ``fun`` returns. Whatever
does not vectorise is evaluated leaf by leaf and named in :attr:`Jitted.report`: the numbers
are always those of ``jax.jit(fun)``.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex_core

from .emit import Emitter, Moved
from .graph import Graph, Region, Scope, Unpackable
from .plan import ScopePlan, plan_scope
from .step_layout import _natural_key

__all__ = ["JitReport", "Jitted", "RegionReport", "jit"]


@dataclasses.dataclass(frozen=True)
class RegionReport:
    """One ``scan`` / ``while`` / ``cond`` of the program, as packed.

    Attributes:
        kind: ``"scan"``, ``"while"`` or ``"cond"``.
        classes: Per stacked input of its body: ``(role, lanes)``, e.g. ``("carry", 1000)``.
        nodes: Values its bodies compute, leaf by leaf.
        packs: Vector values they became.
        merged: How many loops of the traced program it runs: the sibling loops of a loop
            over names (``for k in names: lax.scan(...)``, none reading another), else 1.
        nested: How many of the regions after it in :attr:`JitReport.regions` are inside it.
    """

    kind: str
    classes: tuple[tuple[str, int], ...]
    nodes: int
    packs: int
    merged: int = 1
    nested: int = 0

    def __str__(self) -> str:
        parts = ", ".join(f"{role} {n}" for role, n in self.classes)
        text = (f"{self.kind}: {parts or 'no inputs'}; {self.nodes} values -> {self.packs} "
                f"pack{'' if self.packs == 1 else 's'}")
        return text + (f" ({self.merged} sibling loops run as one)" if self.merged > 1 else "")


@dataclasses.dataclass(frozen=True)
class JitReport:
    """What :func:`jit` made of one call signature.

    Attributes:
        eqns_before: Equations of ``jax.jit(fun)``'s jaxpr, sub-programs included.
        eqns_after: Equations of the packed program, sub-programs included.
        inputs: Per stacked argument: ``(argument, shape, dtype, leaves)``.
        packs: Vector values of the top-level program.
        regions: The loops and conditionals, in program order.
        leaf_by_leaf: ``(primitive, lanes, why)`` for what was evaluated leaf by leaf.
        fallback: Why the program was not packed at all (it then runs as ``jax.jit(fun)``
            does, leaf by leaf), or ``None``.
        steps_first: Indices into ``inputs`` of the arrays stacked steps first (lane axis 1,
            as ``lax.scan`` stacks what it returns): those whose leaves have axes.
        trace_s: Seconds ``jax.jit(fun).trace`` took (what ``jax.jit`` pays too).
        pack_s: Seconds the packer took beyond that (number, plan, trace the packed program).
    """

    eqns_before: int
    eqns_after: int
    inputs: tuple[tuple[str, tuple[int, ...], str, int], ...]
    packs: int
    regions: tuple[RegionReport, ...]
    leaf_by_leaf: tuple[tuple[str, int, str], ...]
    fallback: str | None = None
    steps_first: tuple[int, ...] = ()
    trace_s: float | None = None
    pack_s: float | None = None

    def __str__(self) -> str:
        first = f"{self.eqns_before} equations before, {self.eqns_after} after"
        if self.fallback:
            first += f" (not packed: {self.fallback})"
        elif self.eqns_after > self.eqns_before:
            leaves = sum(n for *_, n in self.inputs)
            first += (f" (more than jax.jit's: packing did not pay for these {leaves} leaves in "
                      f"{len(self.inputs)} (shape, dtype) groups; jax.jit(fun) compiles the "
                      "smaller program)")
        lines = [first]
        for k, (arg, shape, dtype, n) in enumerate(self.inputs):
            lines.append(f"  input {arg}: {n} {'leaf' if n == 1 else 'leaves'} "
                         f"{dtype}{list(shape)} -> one array"
                         + (", steps first" if k in self.steps_first else ""))
        # Regions alike in a row (a conditional per name, say), each with the regions inside
        # it, are one line with a count: a 40-name step's report had 80 identical lines.
        lines += _region_lines(self.regions, "  ")
        for name, n, why in self.leaf_by_leaf:
            lines.append(f"  leaf by leaf: {n} lanes of {name} ({why})")
        return "\n".join(lines)


def _region_lines(regions: Sequence[RegionReport], indent: str) -> list[str]:
    """One line per region, the regions inside it indented below it; regions alike in a row
    (the same text, the same regions inside) one line with their count."""
    units, k = [], 0
    while k < len(regions):
        end = k + 1 + regions[k].nested
        units.append(tuple(regions[k:end]))
        k = end
    lines = []
    for texts, run in itertools.groupby(units, key=lambda u: tuple(map(str, u))):
        unit = next(run)
        n = 1 + len(list(run))
        lines.append(f"{indent}{texts[0]}" if n == 1 else
                     f"{indent}{texts[0]} (×{n}: {n} such regions in a row, each kept on its own)")
        lines += _region_lines(unit[1:], indent + "  ")
    return lines


def count_eqns(jaxpr) -> int:
    """Equations including every sub-program."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    return len(jaxpr.eqns) + sum(count_eqns(s) for s in jex_core.subjaxprs(jaxpr))


def _arg_name(path, positions) -> str:
    """The argument a flat leaf comes from: its position among ``fun``'s own arguments (static
    ones counted), or its keyword."""
    (kind, *rest) = path
    if kind.idx == 0:
        return f"argument {positions[rest[0].idx]}" if rest else "arguments"
    return f"argument {rest[0].key!r}" if rest else "keyword arguments"


@dataclasses.dataclass
class _Entry:
    """One call signature: how to stack, the packed program, how to unstack."""

    in_groups: list[list[int]]              # per stacked input: flat leaf indices
    in_structs: list[jax.ShapeDtypeStruct]
    in_axes: list[int]                      # per stacked input: its lane axis (0 or 1)
    out_groups: list[list[int]]             # per packed output: flat output indices
    out_treedef: Any
    traced: Any                             # jax.stages.Traced of the packed program
    report: JitReport
    program: Callable
    compiled: Any = None


def _one_line(err: BaseException, what: str) -> BaseException:
    """``err``'s type with a one-line message (the argument path when JAX names one)."""
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    text = lines[0] if lines else type(err).__name__
    for ln in lines[1:]:
        if "depends on the value of the argument" in ln or "at path" in ln:
            text += " " + ln
            break
    text = f"explorer.jit: {what}: {text}"
    try:
        new = type(err).__new__(type(err))
        Exception.__init__(new, text)
        if str(new) != text:
            raise TypeError
    except Exception:  # noqa: BLE001 - a type that cannot be made bare: say it as a TypeError
        new = TypeError(text)
    new.jax_error = err
    return new


class Jitted:
    """``fun`` compiled by :func:`jit`; call it like ``jax.jit(fun)``."""

    # Whether an argument group may be stacked steps first (lane axis 1); explorer.pack's
    # contract is lanes first.
    _steps_first = True

    def __init__(self, fun: Callable, static_argnums=(), static_argnames=()):
        if not callable(fun):
            raise TypeError(f"explorer.jit: fun must be callable, got {type(fun).__name__}")
        self.__name__ = getattr(fun, "__name__", type(fun).__name__)
        nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        names = ((static_argnames,) if isinstance(static_argnames, str)
                 else tuple(static_argnames))
        self._jax = jax.jit(fun, static_argnums=nums, static_argnames=names)
        # The same resolution as jax.jit's: a name of a positional parameter is static by
        # position too, and a position by its name.
        try:
            params = [p.name for p in inspect.signature(fun).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            params = []
        nums = set(nums) | {params.index(n) for n in names if n in params}
        names = set(names) | {params[i] for i in nums if 0 <= i < len(params)}
        self._fun, self._nums, self._names = fun, frozenset(nums), frozenset(names)
        self._cache: dict[Any, _Entry] = {}
        self._last: _Entry | None = None
        self.__name__ = getattr(fun, "__name__", type(fun).__name__)
        self.__doc__ = getattr(fun, "__doc__", None)
        self.__wrapped__ = fun

    # -- the public surface -------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        entry, leaves = self._entry(args, kwargs)
        if any(isinstance(x, jax.core.Tracer) for x in leaves):
            # Called inside another trace (a jax.jit, grad or vmap around it, explorer.blame):
            # the packed program is traced into that one, stacking and unstacking with JAX.
            return self._traced_call(entry, leaves)
        if entry.compiled is None:
            entry.compiled = entry.traced.lower().compile()
        outs = entry.compiled(*self._stack(entry, leaves))
        return self._unstack(entry, outs)

    def lower(self, *args, **kwargs):
        """The packed program's ``jax.stages.Lowered`` (``.compile()``, ``.as_text()``)."""
        return self._entry(args, kwargs)[0].traced.lower()

    def trace(self, *args, **kwargs):
        """The packed program's ``jax.stages.Traced`` (``.jaxpr``, ``.lower()``)."""
        return self._entry(args, kwargs)[0].traced

    def pack_args(self, *args, **kwargs) -> tuple[np.ndarray, ...]:
        """The stacked NumPy arrays the packed program takes for these arguments."""
        entry, leaves = self._entry(args, kwargs)
        return self._stack(entry, leaves)

    def packed_function(self, *args, **kwargs) -> tuple[Callable, tuple[np.ndarray, ...]]:
        """``(f, stacked)``: the packed program as a plain JAX function of stacked arrays and
        those arrays, e.g. for ``explorer.measure(f, *stacked)``."""
        entry, leaves = self._entry(args, kwargs)
        return entry.program, self._stack(entry, leaves)

    @property
    def report(self) -> JitReport | None:
        """The report of the last call signature traced (``None`` before any call)."""
        return None if self._last is None else self._last.report

    def report_for(self, *args, **kwargs) -> JitReport:
        """The report for these arguments (traced and packed if not yet)."""
        return self._entry(args, kwargs)[0].report

    def __repr__(self) -> str:
        return f"explorer.jit({self.__name__})"

    # -- the work -----------------------------------------------------------------------------

    def _split(self, args, kwargs):
        n = len(args)
        nums = {i + n if i < 0 else i for i in self._nums}
        dyn_args = tuple(a for i, a in enumerate(args) if i not in nums)
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self._names}
        static = (tuple((i, args[i]) for i in sorted(nums) if i < n),
                  tuple(sorted((k, v) for k, v in kwargs.items() if k in self._names)))
        return (dyn_args, dyn_kwargs), static

    def _entry(self, args, kwargs) -> tuple[_Entry, list]:
        dynamic, static = self._split(args, kwargs)
        leaves, treedef = jax.tree_util.tree_flatten(dynamic)
        key = (treedef, tuple(_leaf_key(x) for x in leaves), static)
        try:
            entry = self._cache.get(key)
        except TypeError as e:  # an unhashable static argument
            raise _one_line(e, "a static argument must be hashable") from None
        if entry is None:
            entry = self._build(args, kwargs, dynamic)
            self._cache[key] = entry       # only a complete entry is ever cached
        self._last = entry
        return entry, leaves

    def _build(self, args, kwargs, dynamic) -> _Entry:
        start = time.perf_counter()
        try:
            traced = self._jax.trace(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the user's error, one line, its own type
            err = _one_line(e, f"{self.__name__} could not be traced")
            if "as an abstract array" in str(e):  # a function or other object among the leaves
                err.args = (str(err).rstrip(".") + ". explorer.jit takes arrays, as jax.jit "
                            "does: split an eqx.Module with eqx.partition(model, eqx.is_array) "
                            "and pass the arrays (eqx.combine(arrays, rest) inside), or make "
                            "the argument static (static_argnums)",)
            raise err from None
        closed = traced.jaxpr
        traced_at = time.perf_counter()
        paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(dynamic)[0]]
        invars = closed.jaxpr.invars
        if len(invars) != len(paths):
            raise AssertionError("jax.jit's jaxpr takes another number of leaves than given")
        nums = {i + len(args) if i < 0 else i for i in self._nums}
        positions = [i for i in range(len(args)) if i not in nums]
        groups: dict[tuple, list[int]] = {}
        for i, (path, var) in enumerate(zip(paths, invars)):
            groups.setdefault((_arg_name(path, positions), tuple(var.aval.shape),
                               np.dtype(var.aval.dtype).str), []).append(i)
        # Lanes in the natural order of the leaf paths (x_2 before x_10; dict keys sort as
        # text): a per-name program reads neighbours as slices. The host permutes, for free.
        keys = [_natural_key(p) for p in paths]
        in_groups = [sorted(g, key=lambda i: keys[i]) for g in groups.values()]
        in_structs = [jax.ShapeDtypeStruct((len(g), *invars[g[0]].aval.shape),
                                           invars[g[0]].aval.dtype) for g in in_groups]
        outvars = closed.jaxpr.outvars
        by_out: dict[tuple, list[int]] = {}
        for i, var in enumerate(outvars):
            by_out.setdefault((tuple(var.aval.shape), np.dtype(var.aval.dtype).str), []).append(i)
        out_paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(traced.out_info)[0]]
        out_keys = ([_natural_key(p) for p in out_paths] if len(out_paths) == len(outvars)
                    else list(range(len(outvars))))
        out_groups = [sorted(g, key=lambda i: out_keys[i]) for g in by_out.values()]
        out_treedef = jax.tree_util.tree_structure(traced.out_info)
        inputs = tuple((arg, shape, np.dtype(dt).name, len(g))
                       for (arg, shape, dt), g in groups.items())
        before = count_eqns(closed)
        # Leaves with axes (a time series per name) are stacked steps first, as lax.scan stacks
        # what it returns: the observations minus a scan's predictions move nothing. The rule
        # reads only the arguments, so two functions of the same arguments (a loss and its
        # rollout) take the same stacked arrays.
        in_axes = [int(self._steps_first and len(s.shape) > 1) for s in in_structs]
        try:
            program, notes = _packed_program(closed, in_groups, out_groups, keys,
                                             {c for c, a in enumerate(in_axes) if a})
            program.__name__ = _program_name(self.__name__, "packed")
            packed = jax.jit(program).trace(*_moved_structs(in_structs, in_axes))
            fallback = None
        except Exception as e:  # noqa: BLE001 - never a wrong number: run it leaf by leaf
            why = (str(e) if isinstance(e, Unpackable)
                   else f"packer error {type(e).__name__}: {str(e).strip()[:200]}")
            program, notes = _plain_program(closed, in_groups, out_groups), None
            program.__name__ = _program_name(self.__name__, "unpacked")
            in_axes = [0] * len(in_groups)
            packed = jax.jit(program).trace(*in_structs)
            fallback = why
        report = JitReport(
            eqns_before=before, eqns_after=count_eqns(packed.jaxpr), inputs=inputs,
            packs=0 if notes is None else notes["packs"],
            regions=() if notes is None else tuple(notes["regions"]),
            leaf_by_leaf=() if notes is None else _leaf_by_leaf(
                notes["emitter"], max(len(g) for g in in_groups) if in_groups else 0),
            fallback=fallback, steps_first=tuple(c for c, a in enumerate(in_axes) if a),
            trace_s=traced_at - start,
            pack_s=time.perf_counter() - traced_at)
        return _Entry(in_groups, _moved_structs(in_structs, in_axes), in_axes, out_groups,
                      out_treedef, packed, report, program)

    @staticmethod
    def _traced_call(entry: _Entry, leaves):
        stacked = [jnp.stack([jnp.asarray(leaves[i], struct.dtype) for i in idx], axis=axis)
                   for idx, struct, axis in zip(entry.in_groups, entry.in_structs,
                                                entry.in_axes)]
        outs = entry.program(*stacked)
        flat = [None] * sum(len(g) for g in entry.out_groups)
        for idx, value in zip(entry.out_groups, outs):
            if len(idx) == 1:
                flat[idx[0]] = value
            else:
                for j, i in enumerate(idx):
                    flat[i] = value[j]
        return jax.tree_util.tree_unflatten(entry.out_treedef, flat)

    @staticmethod
    def _stack(entry: _Entry, leaves) -> tuple[np.ndarray, ...]:
        out = []
        for idx, struct, axis in zip(entry.in_groups, entry.in_structs, entry.in_axes):
            # One np.array over the group's leaves (Python numbers, NumPy or JAX arrays of one
            # shape): 45x faster than np.asarray per leaf then np.stack for 1,000 numbers.
            stacked = np.array([leaves[i] for i in idx], dtype=struct.dtype)
            if axis:
                stacked = np.ascontiguousarray(np.moveaxis(stacked, 0, axis))
            out.append(stacked)
        return tuple(out)

    @staticmethod
    def _unstack(entry: _Entry, outs):
        flat = [None] * sum(len(g) for g in entry.out_groups)
        for idx, value in zip(entry.out_groups, outs):
            if len(idx) == 1:
                flat[idx[0]] = value
            else:
                # One host copy, then views: reading N leaves of a device array one by one
                # costs a dispatch each (0.2 ms per leaf on the CPU, measured).
                host = np.asarray(value)
                host.flags.writeable = False
                for j, i in enumerate(idx):
                    flat[i] = host[j]
        return jax.tree_util.tree_unflatten(entry.out_treedef, flat)


def _leaf_by_leaf(emitter: Emitter, lanes: int) -> tuple[tuple[str, int, str], ...]:
    """What vmap refused, and primitives computed on their own about once per name (at least
    half as often as the largest input has leaves): a few one-lane values, such as a chain's
    two ends, are part of a packed program and not listed."""
    rows = [(name, n, why) for (name, why), n in emitter.scalar.items()]
    refused = {name for name, _ in emitter.scalar}
    why = "computed name by name: its parameters or operands differ between names"
    rows += [(name, n, why) for name, n in emitter.singles.items()
             if n >= max(3, lanes // 2) and name not in refused]
    return tuple(sorted(rows))


def _program_name(name: str, kind: str) -> str:
    """The compiled program's name: the user's function's, so that JAX's module name and
    ``explorer.watch``'s rows say whose program it is (``loss_packed``)."""
    name = re.sub(r"\W+", "_", name).strip("_")
    return f"{name}_{kind}" if name else kind


def _leaf_key(x):
    """What a call's cache entry depends on for one leaf: its shape, dtype, weak type and kind
    (read as the objects themselves: ``str(dtype)`` for 2,000 leaves took most of a call)."""
    try:
        shape, dtype = tuple(x.shape), x.dtype
    except AttributeError:
        return type(x)
    kind = type(x)
    scalar = _SCALAR_KINDS.get(kind)
    if scalar is None:  # a NumPy scalar (np.float32(1.0)) rather than an array
        scalar = _SCALAR_KINDS.setdefault(kind, kind is not np.ndarray
                                          and not issubclass(kind, jax.Array))
    return (shape, dtype, getattr(x, "weak_type", False), scalar)


_SCALAR_KINDS: dict[type, bool] = {}


def _moved_structs(structs, axes):
    return [jax.ShapeDtypeStruct((s.shape[1], s.shape[0], *s.shape[2:]), s.dtype) if a else s
            for s, a in zip(structs, axes)]


def _packed_program(closed, in_groups, out_groups, keys, moved=frozenset()):
    """The packed program as a function of the stacked inputs, and what the packer noted.
    ``keys``: per flat leaf, the natural key of its path (what orders a loop's lanes);
    ``moved``: the stacked inputs that come steps first (lane axis 1)."""
    graph = Graph()
    top = Scope("program")
    invars = closed.jaxpr.invars
    args: list = [None] * len(invars)
    for idx in in_groups:
        aval = invars[idx[0]].aval
        if jax.dtypes.issubdtype(aval.dtype, jax.dtypes.extended):
            raise Unpackable(f"leaves of dtype {aval.dtype} cannot be stacked with NumPy")
        for i, node in zip(idx, graph.inputs(top, aval.shape, aval.dtype, len(idx))):
            args[i] = node
            graph.keys[node.uid] = keys[i]
    top.outputs = graph.inline(closed.jaxpr, closed.consts, args, top)
    top.out_order = [i for idx in out_groups for i in idx]
    plan = plan_scope(top, graph.origin)
    holders = graph.holders
    notes: dict[str, Any] = {"packs": len(plan.packs), "emitter": Emitter(holders),
                             "regions": _region_reports(plan)}
    outs = top.outputs

    def program(*stacked):
        emitter = Emitter(holders)
        notes["emitter"] = emitter
        state = emitter.run(plan, [Moved(v) if c in moved else v
                                   for c, v in enumerate(stacked)])
        result = []
        for idx in out_groups:
            nodes = [outs[i] for i in idx]
            if len(idx) == 1:
                result.append(state.single(nodes[0]))
            else:
                result.append(state.full(nodes, nodes[0].shape, nodes[0].dtype))
        return tuple(result)

    return program, notes


def _region_reports(plan: ScopePlan) -> list[RegionReport]:
    """One report per region reached from ``plan``, in program order, nested ones after."""
    out = []
    for pack in plan.packs:
        for node in pack.members:
            if isinstance(node, Region):
                subs = plan.subplans[node.uid]
                inside = [r for sub in subs for r in _region_reports(sub)]
                out.append(RegionReport(
                    node.kind, tuple((role, len(pos)) for role, pos in node.in_classes),
                    nodes=sum(len(pk.members) for sub in subs for pk in sub.packs),
                    packs=sum(len(sub.packs) for sub in subs), merged=node.merged,
                    nested=len(inside)))
                out += inside
    return out


def _plain_program(closed, in_groups, out_groups):
    """``closed`` as a function of the stacked inputs: unstacked inside, run leaf by leaf."""
    n_in = len(closed.jaxpr.invars)
    run = jex_core.jaxpr_as_fun(closed)

    def program(*stacked):
        leaves = [None] * n_in
        for idx, value in zip(in_groups, stacked):
            for j, i in enumerate(idx):
                leaves[i] = value[j]
        outs = run(*leaves)
        result = []
        for idx in out_groups:
            result.append(outs[idx[0]] if len(idx) == 1 else
                          jax.numpy.stack([outs[i] for i in idx]))
        return tuple(result)

    return program


def jit(fun: Callable, static_argnums: int | Sequence[int] = (),
        static_argnames: str | Sequence[str] = ()) -> Jitted:
    """Compile ``fun`` like ``jax.jit``, with a program that does not grow with its leaves.

    Args:
        fun: A function of pytrees (dicts of per-name scalars, say), with ``lax.scan`` /
            ``fori_loop`` / ``while_loop`` / ``cond``, ``jax.grad`` and nested ``jit`` inside.
        static_argnums: As for ``jax.jit``.
        static_argnames: As for ``jax.jit``.

    Returns:
        A :class:`Jitted`: call it like ``jax.jit(fun)``; ``.lower``, ``.trace``, ``.report``.

    Raises:
        TypeError: ``fun`` is not callable. Tracing errors are raised on the first call with
            the type ``jax.jit`` raises and a one-line message.
    """
    return Jitted(fun, static_argnums, static_argnames)
