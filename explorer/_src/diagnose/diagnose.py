"""``diagnose``: why your own JAX function compiles slowly, and what to write instead.

It traces (and, unless ``compile=False``, compiles cold through :func:`explorer.measure`) the
function once, reads the jaxpr in one linear walk, and turns what it sees into findings: too many
arguments, the same equations repeated once per leaf (jax-ml/jax#4667 "Slow compilation for
functions acting on PyTrees", https://github.com/jax-ml/jax/issues/4667), a Python loop unrolled
into a chain, arrays baked in as constants, too many loop-carried arrays, a huge scan ``unroll``.
Each is charged to the user's own line (an equation made inside diffrax, equinox, optax or flax
goes to the user's line that called it, the library line beside it: see ``core/blame.py``).
The thresholds are keyword arguments; the rewrite trial lives in ``trial.py``, projections in
``projection.py``, the rendering in ``report.py``.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.extend.core as jex_core
import pandas as pd

from ..core.blame import LineKey, blame_frame, caller_of, charged_scopes, definition_of
from ..core.fits import fit_power_law
from ..core.leaves import hold_static, static_positions
from ..core.measure import (
    Measurement,
    _device,
    _fun_name,
    count_eqns,
    measure_traced,
)
from ..pack.prims import Origins, tagging
from ..util import validate as v
from . import findings as _findings
from . import trial as _trial
from .findings import Finding, Limits, LineShape, Program
from .projection import MAX_FACTOR, Projection, project
from .projection import fit as fit_growth
from .trial import PackTrial

__all__ = ["Diagnosis", "Finding", "PackTrial", "Projection", "diagnose"]

DEFAULT_SIZES = (10, 30, 100)
MAX_SIZE = 1_000_000
BUSY_LINES = 16  # per scope; findings report at most three lines per kind anyway
SIZE_METRICS = ("n_leaves", "jaxpr_eqns", "stablehlo_bytes", "trace_s", "lower_s", "compile_s")


@dataclasses.dataclass(frozen=True, eq=False)
class Diagnosis:
    """What :func:`diagnose` found in one function.

    Attributes:
        name: what was diagnosed, as written (``jax.grad(loss)``, ``eqx.filter_jit(step)``).
        n_leaves: array arguments as JAX sees them (leaves of the non-static arguments).
        leaf_paths: each leaf's pytree path, ``args[i]`` + ``jax.tree_util.keystr`` (in a
            watch's findings, the user's parameter name + path: ``model.layers[0].weight``,
            for a function a library jitted too).
        jaxpr_eqns: equations, sub-jaxprs (scan, cond, pjit bodies) included.
        stablehlo_bytes: length of the StableHLO text (``Lowered.as_text()``).
        constant_bytes: bytes of array data baked into the program as constants.
        trace_s, lower_s: seconds for those stages, caches cleared first.
        compile_s: cold XLA compile seconds, ``None`` with ``compile=False``.
        measurement: the full cold :class:`Measurement` when compiled, else ``None``.
        top_lines: the blame table: equations per line of the user's code, most first, with
            the library lines they came through (``via``).
        findings: what to change, most important kind first (see :class:`Finding`).
        limits: the thresholds the findings were judged by.
        sizes: with ``make_args``/``sizes``: one row of figures per size, else ``None``.
        exponents: the fitted ``k`` of each figure against size (``figure ≈ c·size^k``).
        projection: compile time projected to 10× the largest size (not measured): a range
            (see :class:`Projection`); :meth:`project` gives it at another size.
        pack_trial: what trying the explorer's rewrite gave (see :class:`PackTrial`), ``None``
            when it was not tried (no ``"per-leaf-repetition"`` finding, or ``try_pack=False``).
    """

    name: str
    n_leaves: int
    leaf_paths: tuple[str, ...]
    jaxpr_eqns: int
    stablehlo_bytes: int
    constant_bytes: int
    trace_s: float
    lower_s: float
    compile_s: float | None
    measurement: Measurement | None
    top_lines: pd.DataFrame
    findings: tuple[Finding, ...]
    limits: Limits
    sizes: pd.DataFrame | None = None
    exponents: pd.DataFrame | None = None
    projection: Projection | None = None
    pack_trial: PackTrial | None = None

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of the findings, in order."""
        return tuple(f.kind for f in self.findings)

    def project(self, size: int) -> Projection:
        """Compile time at ``size`` from the sizes measured: a range, never one number beyond
        them.

        Raises:
          ValueError: without compiled sizes (``make_args``/``sizes``, ``compile=True``), or
            past ``MAX_FACTOR`` (10) times the largest measured size.
        """
        size = v.check_int("size", size, 1, MAX_SIZE * MAX_FACTOR)
        model = (fit_growth(self.sizes["size"], self.sizes["jaxpr_eqns"], self.sizes["compile_s"])
                 if self.sizes is not None else None)
        if model is None:
            raise ValueError("a projection needs compile times at two sizes or more: "
                             "diagnose with make_args= and sizes= (and compile=True)")
        return model.project(size)

    def __str__(self) -> str:
        from .report import text

        return text(self)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        from .report import html_fragment

        return html_fragment(self)

    def to_html(self, path: str | os.PathLike) -> Path:
        """Write a standalone HTML report (everything inline: it opens offline) to ``path``.

        Refuses to replace a file that is not a report written by this method.
        """
        from .report import write_html

        return write_html(self, path)


def diagnose(
    fn: Callable,
    *args: Any,
    static_argnums: int | Sequence[int] = (),
    compile: bool = True,
    make_args: Callable[[int], tuple] | None = None,
    sizes: Sequence[int] | None = None,
    backend: str | None = None,
    max_leaves: int = _findings.MAX_LEAVES,
    min_repeats: int = _findings.MIN_REPEATS,
    min_chain: int = _findings.MIN_CHAIN,
    max_constant_bytes: int = _findings.MAX_CONSTANT_BYTES,
    max_unroll: int = _findings.MAX_UNROLL,
    try_pack: bool = True,
) -> Diagnosis:
    """Trace (and compile cold) ``fn(*args)``, find what makes it slow, and say what to write.

    Args:
      fn: the function as you would pass it to ``jax.jit``.
      *args: example arguments, static ones included.
      static_argnums: as for ``jax.jit``.
      compile: compile cold through :func:`explorer.measure` (timings, program sizes);
        ``False`` traces and lowers only.
      make_args: instead of ``args``: ``make_args(n)`` returns the argument tuple at size ``n``;
        the function is diagnosed at every size of ``sizes`` and each figure's growth fitted.
      sizes: the sizes for ``make_args`` (default ``(10, 30, 100)``), at least two.
      backend: ``"cpu"``, ``"gpu"``... (default: JAX's default backend).
      max_leaves: ``"many-arguments"`` (and ``"many-carry-leaves"``) from this many leaves.
      min_repeats: ``"per-leaf-repetition"`` from this many independent repeats on one line.
      min_chain: ``"unrolled-loop"`` from a chain this long on one line.
      max_constant_bytes: ``"large-constants"`` from this many bytes of baked-in arrays.
      max_unroll: ``"large-unroll"`` from a scan ``unroll`` this large.
      try_pack: when there is a ``"per-leaf-repetition"`` finding, try the explorer's rewrite
        (:func:`explorer.jit` on ``fn`` itself; see ``trial.py``) with the same arguments.
        Its outputs are checked equal (``allclose``) to those of the original, compiled once
        more (never run op by op), its equations counted (exact), and, with ``compile=True``,
        3 cold compiles of each interleaved; a compile-time gain is claimed only where their
        ranges do not overlap. The figures go into that finding's ``saving`` (and
        ``Diagnosis.pack_trial``), or one sentence on why there are none: skipped past the
        trial's budget (60 s, 20,000 equations; judged before each step), no 10% fewer
        equations, refused, or a changed result. Default ``True``; with ``make_args`` it is
        tried at the largest size only.

    Returns:
      A :class:`Diagnosis`; ``print`` it, show it in a notebook, or ``.to_html(path)`` it.

    Raises:
      ValueError: one line naming the bad input, or what failed while tracing ``fn``.
    """
    if not callable(fn):
        raise ValueError(f"diagnose needs a function, got {type(fn).__name__}")
    if not isinstance(compile, bool):
        raise ValueError(f"compile must be True or False, got {compile!r}")
    if not isinstance(try_pack, bool):
        raise ValueError(f"try_pack must be True or False, got {try_pack!r}")
    limits = Limits(
        max_leaves=v.check_int("max_leaves", max_leaves, 1, 10**9),
        min_repeats=v.check_int("min_repeats", min_repeats, 2, 10**9),
        min_chain=v.check_int("min_chain", min_chain, 2, 10**9),
        max_constant_bytes=v.check_int("max_constant_bytes", max_constant_bytes, 1, 10**15),
        max_unroll=v.check_int("max_unroll", max_unroll, 2, 10**9),
    )
    if backend is not None:
        _device(backend)  # one-line ValueError now, not after the factory ran
    if make_args is None:
        if sizes is not None:
            raise ValueError("sizes needs make_args (a function of the size that returns "
                             "the arguments)")
        return _diagnose_one(fn, args, _static(static_argnums, len(args)), compile, backend, limits,
                             try_pack)
    if args:
        raise ValueError("pass either example arguments or make_args, not both")
    if not callable(make_args):
        raise ValueError(f"make_args must be a function of the size, "
                         f"got {type(make_args).__name__}")
    sizes = _check_sizes(DEFAULT_SIZES if sizes is None else sizes)
    return _diagnose_sizes(fn, make_args, sizes, static_argnums, compile, backend, limits,
                           try_pack)


# -- one function, one size ------------------------------------------------------------------
def with_leaf_names(d: Diagnosis, names: Sequence[str]) -> Diagnosis:
    """``d`` with its leaves named ``names`` (one per leaf, in order), its many-arguments
    finding counting them by those names: how a watch names the arguments a library's jit
    (``eqx.filter_jit``) handed JAX by the user's own parameters and paths into them."""
    names = tuple(names)
    if len(names) != d.n_leaves:
        raise ValueError(f"{len(names)} names for {d.n_leaves} leaves")
    many = _findings._many_arguments(d.n_leaves, names, d.limits)
    findings = tuple(many[0] if many and f.kind == "many-arguments" else f for f in d.findings)
    return dataclasses.replace(d, leaf_paths=names, findings=findings)


def _static(static_argnums: Any, n_args: int) -> tuple[int, ...]:
    return static_positions(static_argnums, n_args)  # negative count from the end, as in jit


def _leaf_paths(args: tuple, static: tuple[int, ...]) -> tuple[str, ...]:
    paths = []
    for i, arg in enumerate(args):
        if i in static:
            continue
        leaves, _ = jax.tree_util.tree_flatten_with_path(arg)
        paths.extend(f"args[{i}]{jax.tree_util.keystr(path)}" for path, _leaf in leaves)
    return tuple(paths)


def describe(fn: Callable) -> str:
    """What was diagnosed, as the user wrote it: ``jax.grad(loss)``, ``eqx.filter_jit(step)``.

    JAX's transforms keep the wrapped function's name (``jax.grad(loss).__name__`` is
    ``"loss"``); the transform is read from the first words of the docstring each gives its
    result, and from the type of a jit wrapper. Anything else is named as before.
    """
    if isinstance(fn, functools.partial):
        return f"partial({describe(fn.func)})"
    inner = getattr(fn, "__wrapped__", None)
    if inner is None or inner is fn or not callable(inner):
        return _fun_name(fn)
    wrapper = _WRAPPER_TYPES.get(type(fn).__name__)
    if wrapper is None:
        doc = getattr(fn, "__doc__", None) or ""
        wrapper = next((t for prefix, t in _TRANSFORM_DOCS if doc.startswith(prefix)), None)
    return f"{wrapper}({describe(inner)})" if wrapper else _fun_name(fn)


_TRANSFORM_DOCS = (("Gradient of ", "jax.grad"), ("Value and gradient of ", "jax.value_and_grad"),
                   ("Vectorized version of ", "jax.vmap"), ("Jacobian of ", "jax.jacobian"))
_WRAPPER_TYPES = {"PjitFunction": "jax.jit", "_JitWrapper": "eqx.filter_jit",
                  "_GradWrapper": "eqx.filter_grad",
                  "_ValueAndGradWrapper": "eqx.filter_value_and_grad", "JitWrapped": "nnx.jit"}


def _diagnose_one(fn: Callable, args: tuple, static: tuple[int, ...], compile: bool,
                  backend: str | None, limits: Limits, try_pack: bool = False) -> Diagnosis:
    name = describe(fn)
    measurement = None
    original = fn
    packed = callable(getattr(fn, "packed_function", None))
    if packed:
        # An explorer.jit function: what its call compiles is its packed program of stacked
        # arrays (stacked by NumPy before the call), as explorer.measure measures it; traced
        # whole, its stacking of every leaf read as a per-leaf finding of the explorer's own
        # line, and the trial packed explorer.jit's program again.
        try:
            fn, args = fn.packed_function(*args)
        except Exception as err:  # noqa: BLE001 - the user's code failed to trace or pack
            raise ValueError(f"diagnosing {name} failed: {v.describe_error(err)}") from err
        static, try_pack, name = (), False, f"explorer.jit({name})"
    try:
        call, args, static = hold_static(fn, args, static)
        if compile:
            measurement, traced = measure_traced(call, *args, static_argnums=static, runs=1,
                                                 backend=backend, name=name)
            trace_s, lower_s = measurement.trace_s, measurement.lower_s
            hlo_bytes, eqns = measurement.hlo_pre_bytes, measurement.jaxpr_eqns
        else:
            with jax.default_device(_device(backend)):
                jax.clear_caches()  # as measure does: the times below are not from a cache
                jitted = jax.jit(call, static_argnums=static)
                t0 = time.perf_counter()
                traced = jitted.trace(*args)
                t1 = time.perf_counter()
                lowered = traced.lower()
                t2 = time.perf_counter()
                hlo_bytes = len(lowered.as_text())
            trace_s, lower_s = t1 - t0, t2 - t1
            eqns = count_eqns(traced.jaxpr)
    except Exception as err:  # the user's code failed to trace, lower or compile
        raise ValueError(f"diagnosing {name} failed: {v.describe_error(err)}") from err
    paths = _leaf_paths(args, static)
    reading, tags = traced.jaxpr, None
    if packed:
        # Its equations charged to the user's lines, as explorer.blame charges them: traced
        # once more with the packer tagging what it emits (tags the measured program has not:
        # they would add names to its HLO), as a new function object (JAX caches traces).
        fresh = functools.wraps(call)(lambda *a: call(*a))
        with tagging() as tags:
            reading = jax.jit(fresh, static_argnums=static).trace(*args).jaxpr
    program = read_program(reading, limits, definition_of(original), tags)
    findings = _findings.find(program, limits, n_leaves=len(paths), leaf_paths=paths,
                              total_eqns=eqns, hlo_bytes=hlo_bytes)
    trial = None
    per_leaf = [i for i, f in enumerate(findings) if f.kind == "per-leaf-repetition"]
    if try_pack and per_leaf:
        own = [i for i in per_leaf if findings[i].via is None]
        library = None if own else _library(findings[per_leaf[0]].via)
        trial = _trial.try_rewrite(call, args, static, traced, eqns,
                                   measurement.compile_s if measurement else None, compile,
                                   backend, name, library=library, trace_s=trace_s,
                                   original_s=(measurement.total_compile_s if measurement
                                               else None))
        first = (own or per_leaf)[0]
        findings[first] = _findings.with_pack(findings[first], trial)
    return Diagnosis(
        name=name, n_leaves=len(paths), leaf_paths=paths, jaxpr_eqns=eqns,
        stablehlo_bytes=hlo_bytes, constant_bytes=program.constant_bytes,
        trace_s=trace_s, lower_s=lower_s,
        compile_s=measurement.compile_s if measurement else None, measurement=measurement,
        top_lines=blame_frame(program.counts, program.via), findings=tuple(findings),
        limits=limits, pack_trial=trial)


def _library(via: str | None) -> str:
    """``equinox`` from ``equinox/_ad.py:1107``: the package a finding's equations came from."""
    return (via or "a library").split("/", 1)[0].split(":", 1)[0]


# -- the one walk over the program ----------------------------------------------------------
def read_program(closed_jaxpr: Any, limits: Limits, default: LineKey | None = None,
                 tags: Origins | None = None) -> Program:
    """Everything the findings need from a jaxpr, in one pass over its equations.

    Each equation is charged to the user's line (see :mod:`explorer._src.core.blame`; an
    equation no frame of the user's made goes to ``default``, the user's function). Per scope
    (the top jaxpr and each nested body) equations are grouped by the line that made them (its
    origin, a library's line when the user's line called into one); the ``BUSY_LINES`` lines
    with the most equations (and enough to matter) get a second, dependency pass over their
    scope (:func:`_shape`), so the cost stays linear in the number of equations.
    ``tags``: what a packed program traced under ``tagging`` says of its equations.
    """
    counts: dict[LineKey, collections.Counter] = collections.defaultdict(collections.Counter)
    origins: dict[LineKey, collections.Counter] = collections.defaultdict(collections.Counter)
    via: dict[LineKey, collections.Counter] = collections.defaultdict(collections.Counter)
    shapes: list[LineShape] = []
    loops: list[_findings.Loop] = []
    constants: list[_findings.Constant] = []
    top_consts = {var: c for var, c in zip(closed_jaxpr.jaxpr.constvars, closed_jaxpr.consts)}
    floor = min(limits.min_repeats, limits.min_chain)
    seen: set[int] = set()
    canon: dict[tuple[str, int], LineKey] = {}
    for scope, charges in charged_scopes(closed_jaxpr, default, tags):
        lines: dict[LineKey, list] = collections.defaultdict(list)
        owners: dict[LineKey, collections.Counter] = collections.defaultdict(
            collections.Counter)
        for eqn, charge in zip(scope.eqns, charges):
            # One key per file:line: a genexpr and the sum() around it are one line of code.
            line = canon.setdefault(charge.origin[:2], charge.origin)
            user = canon.setdefault(charge.user[:2], charge.user)
            counts[user][eqn.primitive.name] += 1
            origins[line][eqn.primitive.name] += 1
            if line != user:
                via[user][line] += 1
            lines[line].append(eqn)
            owners[line][user] += 1
            if top_consts:
                for var in eqn.invars:
                    if not isinstance(var, jex_core.Literal) and var in top_consts:
                        constants.append(_findings.Constant.of(top_consts.pop(var), user))
            for param in eqn.params.values():
                for closed in (param if isinstance(param, (tuple, list)) else (param,)):
                    if isinstance(closed, jex_core.ClosedJaxpr) and id(closed) not in seen:
                        seen.add(id(closed))  # a body shared by several equations counts once
                        constants.extend(_findings.Constant.of(c, user) for c in closed.consts)
            if eqn.primitive.name in ("scan", "while"):
                loops.append(_findings.Loop.of(eqn, line, user))
        busy = sorted(((line, e) for line, e in lines.items() if len(e) >= floor),
                      key=lambda item: len(item[1]), reverse=True)
        for line, eqns in busy[:BUSY_LINES]:
            shape = _shape(scope, line, eqns, owners[line].most_common(1)[0][0])
            if shape.chain >= limits.min_chain and shape.user == line:
                # Only a chain long enough to be an unrolled loop names its caller: the
                # tracebacks are walked again for those equations alone.
                shape = dataclasses.replace(shape, called_from=_called_from(eqns))
            shapes.append(shape)
    constants.extend(_findings.Constant.of(c, None) for c in top_consts.values())  # unused ones
    return Program(counts=dict(counts), shapes=tuple(shapes), loops=tuple(loops),
                   constants=tuple(constants), origins=dict(origins),
                   via={k: collections.Counter(c) for k, c in via.items()})


def _operands(eqn: Any) -> tuple:
    return tuple(var for var in eqn.invars if not isinstance(var, jex_core.Literal))


def _reads(eqn: Any, operands: tuple) -> tuple:
    """What one equation reads: its operands and its parameters. ``x[i]`` for each name
    reads one array through a ``slice`` whose start differs: distinct repeats, not one value
    read again (counted as one, the per-name loss ``sum(p[k] * x[i] ...)`` went unflagged)."""
    return operands, tuple(sorted((k, _param_key(v)) for k, v in eqn.params.items()))


def _param_key(value: Any) -> Any:
    """A parameter as a key: numbers, strings and tuples of them by value; anything else
    (a jaxpr, a function) by identity, never printed (a jaxpr's text can be large)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple) and all(isinstance(x, (bool, int, float, str, type(None)))
                                        for x in value):
        return value
    return id(value)


def _shape(scope: Any, line: LineKey, members: list, user: LineKey | None = None) -> LineShape:
    """How one line's equations connect, from one pass over the scope in program order.

    The depth of an equation of the line is how many equations of the line lie on the longest
    path that ends in it (through any others). Repeats of a Python loop over names share a depth
    (side by side); the steps of a Python loop over time each add depth (a chain).
    """
    ids = {id(e) for e in members}
    depth: dict[Any, int] = {}
    layers: dict[tuple[str, int], list] = collections.defaultdict(list)
    fresh: set = set()
    eqns = scope.eqns
    start = next(i for i, e in enumerate(eqns) if id(e) in ids)  # nothing before has depth
    for eqn in itertools.islice(eqns, start, None):
        operands = _operands(eqn)
        d = max([depth.get(var, 0) for var in operands], default=0) if depth else 0
        if id(eqn) in ids:
            fresh.update(var for var in operands if depth.get(var, 0) == 0)
            d += 1
            layers[(eqn.primitive.name, d)].append(_reads(eqn, operands))
        if d:
            for out in eqn.outvars:
                depth[out] = d
    (prim, _), widest = max(layers.items(), key=lambda item: len(item[1]))
    # Every primitive of a loop body recurs once per step; one recurring several times per step
    # (as under grad) would overcount, so the step count is the smallest recurrence.
    recurrences = [n for n in collections.Counter(p for p, _ in layers).values() if n > 1]
    return LineShape(
        line=line, user=user or line, eqns=len(members), chain=max(d for _, d in layers),
        steps=min(recurrences, default=1), width=len(widest), width_primitive=prim,
        width_distinct=len(set(widest)), fresh_inputs=len(fresh),
        transposed=any("transpose" in str(e.source_info.name_stack) for e in members),
        mix=collections.Counter(e.primitive.name for e in members))


def _called_from(members: list) -> LineKey | None:
    """The one user line that called the function of the user's line making ``members``, for
    every one of them, else ``None``."""
    callers = {caller_of(e) for e in members}
    (caller,) = callers if len(callers) == 1 else (None,)
    return caller


# -- several sizes ----------------------------------------------------------------------------
def _check_sizes(sizes: Any) -> tuple[int, ...]:
    checked = v.check_ints("sizes", sizes, 1, MAX_SIZE)
    if len(checked) < 2:
        raise ValueError(f"sizes needs at least two different sizes to fit a growth rate, "
                         f"got {sizes!r}")
    return checked


def _call_factory(make_args: Callable, n: int) -> tuple:
    label = getattr(make_args, "__qualname__", None) or type(make_args).__name__
    try:
        produced = make_args(n)
    except Exception as err:
        raise ValueError(f"make_args {label}({n}) raised {v.describe_error(err)}") from err
    if not isinstance(produced, tuple):
        raise ValueError(f"make_args {label}({n}) must return the tuple of arguments, "
                         f"got {type(produced).__name__}")
    return produced


def _diagnose_sizes(fn: Callable, make_args: Callable, sizes: tuple[int, ...],
                    static_argnums: Any, compile: bool, backend: str | None,
                    limits: Limits, try_pack: bool) -> Diagnosis:
    found: list[tuple[int, Diagnosis]] = []
    for i, n in enumerate(sizes):
        args = _call_factory(make_args, n)
        last = i == len(sizes) - 1  # the diagnosis returned is the largest size's
        found.append((n, _diagnose_one(fn, args, _static(static_argnums, len(args)), compile,
                                        backend, limits, try_pack and last)))
    table = pd.DataFrame([{"size": n, **{m: getattr(d, m) for m in SIZE_METRICS}}
                          for n, d in found])
    exponents = pd.DataFrame(
        [{"metric": m, **fit} for m in SIZE_METRICS
         if (fit := fit_power_law(table["size"], table[m])) is not None],
        columns=["metric", "k", "c", "r2", "points", "n_min", "n_max"])
    projection = None
    if compile:
        projection = project(table["size"], table["jaxpr_eqns"], table["compile_s"],
                             MAX_FACTOR * max(sizes))
    last = found[-1][1]
    findings = tuple(_findings.with_growth(f, [(n, d.top_lines) for n, d in found])
                     for f in last.findings)
    return dataclasses.replace(last, findings=findings, sizes=table, exponents=exponents,
                               projection=projection)

