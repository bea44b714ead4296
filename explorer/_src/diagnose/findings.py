"""What ``diagnose`` concludes from one read of a program: the findings, each with a remedy.

Each kind has one function here that turns the facts gathered by ``_diagnose.read_program``
into at most a few :class:`Finding` records. The thresholds are the :class:`Limits`.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..compat import scan_counts
from ..core.blame import LineKey, short_file
from ..core.fits import fit_power_law, format_exponent
from ..core.measure import count_eqns
from . import remedies

KINDS = ("many-arguments", "per-leaf-repetition", "unrolled-loop", "large-constants",
         "many-carry-leaves", "large-unroll")
MAX_LEAVES = 200
MIN_REPEATS = 50
MIN_CHAIN = 100
MAX_CONSTANT_BYTES = 1_000_000
MAX_UNROLL = 16
MAX_PER_KIND = 3  # lines reported per kind; the rest are counted in the last message

JAX_4667 = ('jax-ml/jax#4667 "Slow compilation for functions acting on PyTrees" '
            "(https://github.com/jax-ml/jax/issues/4667)")


@dataclasses.dataclass(frozen=True)
class Finding:
    """One thing to change, where, how, and what it would save.

    Attributes:
        kind: one of ``"many-arguments"``, ``"per-leaf-repetition"``, ``"unrolled-loop"``,
            ``"large-constants"``, ``"many-carry-leaves"``, ``"large-unroll"``.
        message: what was found, with the figures.
        where: ``"file:line"`` of the source line to change, or ``None``.
        remedy: a sentence, a blank line, and a short code sketch.
        saving: what the remedy saves; starts with ``"measured"`` (figures of this program)
            or ``"estimate"`` (a projection, or figures from elsewhere, named).
        via: when the equations were made inside a library your line calls
            (``"equinox/_ad.py:1107"``), that library line; ``None`` for your own code.
    """

    kind: str
    message: str
    where: str | None
    remedy: str
    saving: str
    via: str | None = None


@dataclasses.dataclass(frozen=True)
class Limits:
    """The thresholds the findings are judged by (see ``diagnose``'s arguments)."""

    max_leaves: int = MAX_LEAVES
    min_repeats: int = MIN_REPEATS
    min_chain: int = MIN_CHAIN
    max_constant_bytes: int = MAX_CONSTANT_BYTES
    max_unroll: int = MAX_UNROLL


@dataclasses.dataclass(frozen=True)
class LineShape:
    """How the equations of one source line in one jaxpr scope depend on each other."""

    line: LineKey            # the line that made the equations (a library's, or the user's)
    user: LineKey            # the user's line they are charged to (``line`` for own code)
    eqns: int
    chain: int               # most equations of the line on one dependency path
    steps: int               # fewest distinct depths of a primitive recurring on the line
    width: int               # most equations of one primitive side by side (at one depth)
    width_primitive: str
    width_distinct: int      # distinct operand tuples among those (1: all read the same value)
    fresh_inputs: int        # distinct inputs the line reads that none of its equations made
    transposed: bool         # some come from reverse-mode differentiation
    mix: collections.Counter  # every primitive of this line in this scope
    # The user's line that called this line's function, when one line did for all of its
    # equations (``for block in blocks: x = block(x)`` calling a layer's ``__call__``).
    called_from: LineKey | None = None


@dataclasses.dataclass(frozen=True)
class Loop:
    """A ``scan`` or ``while`` equation: how much it carries and how often its body is copied."""

    line: LineKey
    user: LineKey
    primitive: str
    carry: int
    length: int | None
    unroll: int
    body_eqns: int

    @classmethod
    def of(cls, eqn: Any, line: LineKey, user: LineKey | None = None) -> Loop:
        params = eqn.params
        if eqn.primitive.name == "scan":
            unroll = params.get("unroll", 1)
            length = int(params["length"])
            unroll = length if unroll is True else max(int(unroll), 1)
            counts = scan_counts(params)
            return cls(line, user or line, "scan", 0 if counts is None else counts[1], length,
                       unroll,
                       count_eqns(params["jaxpr"]))
        return cls(line, user or line, "while", len(eqn.outvars), None, 1,
                   count_eqns(params["body_jaxpr"]))


@dataclasses.dataclass(frozen=True)
class Constant:
    """An array baked into the program, and the first line that reads it (``None``: unknown)."""

    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    line: LineKey | None

    @classmethod
    def of(cls, value: Any, line: LineKey | None) -> Constant:
        array = value if hasattr(value, "nbytes") and hasattr(value, "dtype") else np.asarray(value)
        return cls(int(array.nbytes), tuple(np.shape(array)), str(array.dtype), line)


@dataclasses.dataclass(frozen=True)
class Program:
    """The facts one walk over a jaxpr gathers (see ``_diagnose.read_program``)."""

    counts: dict[LineKey, collections.Counter]   # per user line (the blame table)
    shapes: tuple[LineShape, ...]
    loops: tuple[Loop, ...]
    constants: tuple[Constant, ...]
    origins: dict[LineKey, collections.Counter] = dataclasses.field(default_factory=dict)
    via: dict[LineKey, collections.Counter] = dataclasses.field(default_factory=dict)

    @property
    def constant_bytes(self) -> int:
        return sum(c.nbytes for c in self.constants)

    def line_eqns(self, line: LineKey) -> int:
        """Equations the line made itself (its origin count; the user count without origins)."""
        return sum((self.origins or self.counts).get(line, {}).values())


# -- formatting helpers ----------------------------------------------------------------------
def where(line: LineKey | None) -> str | None:
    return f"{line[0]}:{line[1]}" if line and line[1] else None


def _at(line: LineKey) -> str:
    """``file.py:12 (function)`` for messages: the short file name, the full one is ``where``."""
    return f"{os.path.basename(line[0])}:{line[1]} ({line[2]})" if line[1] else line[0]


def _mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:.1f} MB" if nbytes >= 1e5 else f"{nbytes / 1e3:.1f} KB"


def _count(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"


def _leaves(n: int) -> str:
    return _count(n, "leaf", "leaves")


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "n/a"


# -- the kinds ---------------------------------------------------------------------------------
def find(program: Program, limits: Limits, *, n_leaves: int, leaf_paths: Sequence[str],
         total_eqns: int, hlo_bytes: int) -> list[Finding]:
    """Every finding of ``program``, most important kind first."""
    per_leaf = _per_leaf_repetition(program, limits, n_leaves, total_eqns)
    return [
        *_many_arguments(n_leaves, leaf_paths, limits),
        *per_leaf,
        *_unrolled_loop(program, limits, total_eqns, {f.where for f in per_leaf}),
        *_large_constants(program, limits, hlo_bytes),
        *_many_carry_leaves(program, limits),
        *_large_unroll(program, limits),
    ]


def _argument(path: str) -> str:
    """The argument a leaf's path starts in: ``args[1]`` of ``args[1]['x']``, ``model`` of
    ``model.layers[0].weight`` (a watch names a library-jitted function's leaves so)."""
    return re.match(r"args\[\d+\]|[^.\[]*", path).group(0) or path


def _many_arguments(n_leaves: int, leaf_paths: Sequence[str], limits: Limits) -> list[Finding]:
    if n_leaves < limits.max_leaves:
        return []
    per_arg = collections.Counter(_argument(path) for path in leaf_paths)
    spread = ", ".join(f"{arg}: {n}" for arg, n in per_arg.most_common(3))
    return [Finding(
        kind="many-arguments",
        message=(f"{n_leaves} array leaves cross the jit boundary ({spread}; threshold "
                 f"{limits.max_leaves}). XLA's work grows with the number of arguments, "
                 "whatever the body computes."),
        where=None,
        remedy=("Pack the leaves into one array once, outside the jitted function, and write the "
                "body on that array: explorer.NamedArray keeps named access on one array, "
                "jax.flatten_util.ravel_pytree flattens any pytree, explorer.pack rewrites a "
                "per-name step for you.\n\n"
                "state = explorer.NamedArray.from_groups({\"position\": x, \"velocity\": v})\n"
                "flat, unravel = jax.flatten_util.ravel_pytree(params)  # once, outside jit\n"
                "loss = jax.jit(loss_on_arrays)  # two array arguments instead of hundreds"),
        saving=("estimate (not measured on this program): with jax 0.10.2 on CPU, a loss taking "
                "1000 scalar arguments and stacking them inside compiled in 6.7 s, against about "
                "0.1 s with one array argument."),
    )]


def _per_leaf_repetition(program: Program, limits: Limits, n_leaves: int,
                         total_eqns: int) -> list[Finding]:
    best: dict[LineKey, LineShape] = {}
    for r in program.shapes:
        if r.width >= limits.min_repeats and r.width_distinct >= limits.min_repeats:
            if r.line not in best or r.width > best[r.line].width:
                best[r.line] = r
    # A library line's repetition is charged to the user's line that called it: one finding
    # per user line. Where that line repeats equations of its own (a Python loop whose body
    # goes through a library: flax's ``nnx.Param.__mul__``, ``optax.l2_loss(w) for w in ws``),
    # the library's repeats are that loop's and fold into its finding; otherwise the finding is
    # the library's biggest line.
    own = {r.user for r in best.values() if r.user == r.line}

    def calls(r: LineShape) -> bool:  # library calls side by side, the library's work in them
        return (r.user != r.line and set(r.mix) <= _CALLS
                and program.line_eqns(r.user) < sum(program.counts.get(r.user, {}).values()))

    def weight(r: LineShape) -> int:  # calls: every equation in them; else the line's own
        return (sum(program.counts.get(r.user, {}).values()) if calls(r)
                else program.line_eqns(r.line))

    library: dict[LineKey, LineShape] = {}
    folded: dict[LineKey, list[LineShape]] = collections.defaultdict(list)
    for r in best.values():
        if r.user == r.line:
            continue
        if r.user in own:
            folded[r.user].append(r)
        elif r.user not in library or weight(r) > weight(library[r.user]):
            library[r.user] = r
    kept = [r for r in best.values() if r.user == r.line] + list(library.values())
    found = []
    for r in sorted(kept, key=lambda r: -weight(r)):
        line_eqns = program.line_eqns(r.line)
        repeats, what = _repeats(r, limits)
        after = math.ceil(line_eqns / repeats)
        if r.user != r.line:
            if calls(r):
                found.append(_call_per_name(r, repeats, program, total_eqns, n_leaves))
            else:
                found.append(_library_repetition(r, what, line_eqns, total_eqns, n_leaves,
                                                 after))
            continue
        for lib in sorted(folded.get(r.user, ()), key=lambda s: -program.line_eqns(s.line)):
            lib_eqns = program.line_eqns(lib.line)
            lib_repeats, _ = _repeats(lib, limits)
            if lib_repeats == repeats and what.endswith(" each)"):  # one loop: one repeat
                mix = ", ".join(f"{p}×{c // repeats}" for p, c in lib.mix.most_common(4))
                what = what[:-len(" each)")] + f", {mix} through {library_line(lib.line)} each)"
            else:
                what += f", and {lib_eqns} equations through {library_line(lib.line)}"
            line_eqns += lib_eqns
            after += math.ceil(lib_eqns / lib_repeats)
        summed = _sums(r, repeats)
        found.append(Finding(
            kind="per-leaf-repetition",
            message=(f"{_at(r.line)} repeats {what}, each reading other values"
                     + (", and adds them up one at a time" if summed else "")
                     + f": {line_eqns} of the program's {total_eqns} equations "
                     f"({_leaves(n_leaves)} cross the boundary). A Python "
                     f"{'sum' if summed else 'loop'} over names or leaves inside the traced "
                     f"function, the pattern of {JAX_4667}."),
            where=where(r.line),
            remedy=(remedies.COND if r.mix.get("cond", 0) >= repeats
                    else remedies.SUM if summed else remedies.PACK),
            saving=(f"estimate: vectorised, this line's {line_eqns} equations become about "
                    f"{after}, {_percent(line_eqns - after, total_eqns)} of the program's "
                    "equations."),
        ))
    return _capped(found)


def _repeats(r: LineShape, limits: Limits) -> tuple[int, str]:
    """How many times a line's equations repeat, and the words for them."""
    repeats = math.gcd(*r.mix.values())
    if repeats >= limits.min_repeats and r.width % repeats == 0:
        return repeats, (f"the same equations {repeats} times side by side ("
                         + ", ".join(f"{p}×{c // repeats}" for p, c in r.mix.most_common(4))
                         + " each)")
    # the line's primitives are not whole multiples of one repeat
    return r.width, f"{r.width} `{r.width_primitive}` equations side by side"


def _sums(r: LineShape, repeats: int) -> bool:
    """Whether a per-leaf line also folds its repeats into one value (``sum(... for k in s)``):
    about one ``add`` per repeat, chained."""
    return r.mix.get("add", 0) >= repeats - 1 and r.chain >= max(2, repeats // 2)


def _library_repetition(r: LineShape, what: str, line_eqns: int, total_eqns: int,
                        n_leaves: int, after: int) -> Finding:
    via = library_line(r.line)
    return Finding(
        kind="per-leaf-repetition",
        message=(f"{_at(r.user)} calls library code that repeats {what} once per leaf of the "
                 f"pytree it is given, at {via}: {line_eqns} of the program's {total_eqns} "
                 f"equations ({_leaves(n_leaves)} cross the boundary). The library handles "
                 f"each leaf of your state on its own; its code is not yours to change, what "
                 "you pass it is."),
        where=where(r.user),
        remedy=remedies.LIBRARY,
        saving=(f"estimate: with one array, these {line_eqns} equations become about {after}, "
                f"{_percent(line_eqns - after, total_eqns)} of the program's equations."),
        via=via,
    )


# Equations that hold a library's whole program: repeated side by side, they are that many
# calls of the library (a loop over names around ``diffrax.diffeqsolve``), each its own copy.
_CALLS = frozenset({"jit", "pjit", "closed_call", "core_call", "custom_jvp_call",
                    "custom_vjp_call", "custom_vjp_call_jaxpr", "remat", "checkpoint", "while",
                    "scan", "cond"})


def _call_per_name(r: LineShape, repeats: int, program: Program, total_eqns: int,
                   n_leaves: int) -> Finding:
    """A user line that calls a library once per name: the calls repeat side by side, and the
    library's equations are inside them (charged to the user's line, not counted as its own)."""
    via = library_line(r.line)
    inside = sum(program.counts.get(r.user, {}).values())
    one = math.ceil(inside / repeats)
    mix = ", ".join(f"{p}×{c // repeats}" for p, c in r.mix.most_common(4))
    return Finding(
        kind="per-leaf-repetition",
        message=(f"{_at(r.user)} makes the same library call {repeats} times side by side, one "
                 f"per name or leaf ({mix} each, at {via}): the {inside} equations in those "
                 f"calls are {_percent(inside, total_eqns)} of the program's {total_eqns} "
                 f"({_leaves(n_leaves)} cross the boundary). Each call is a copy of the "
                 f"library's program: a loop over names around a library call, the pattern of "
                 f"{JAX_4667}."),
        where=where(r.user),
        remedy=remedies.CALL_PER_NAME,
        saving=(f"estimate: one call for all names makes about {one} equations instead of "
                f"{inside}, {_percent(inside - one, total_eqns)} of the program's equations."),
        via=via,
    )


def library_line(line: LineKey) -> str:
    """``equinox/_ad.py:1107``: a library's line as its import path shows it."""
    return f"{short_file(line[0])}:{line[1]}"


def with_pack(finding: Finding, trial: Any) -> Finding:
    """``finding`` with what trying the explorer's rewrite gave (a ``trial.PackTrial``): the
    measured figures as its saving, or, after the estimate, one sentence on why there are none.
    A compile-time gain is only claimed beyond the spread of interleaved repeats."""
    name = getattr(trial, "rewrite", "explorer.pack")
    if trial.status == "measured":
        before, after = trial.eqns_before, trial.eqns_after
        saving = (f"measured: {name} on the whole function (outputs checked equal to the "
                  f"original's) gives {before:,} → {after:,} equations "
                  f"({_ratio(before, after, 'fewer')})")
        if trial.verdict in ("faster", "slower"):
            n = min(len(trial.compile_before), len(trial.compile_after))
            saving += (f", compile {_seconds(trial.compile_s_before)} → "
                       f"{_seconds(trial.compile_s_after)} cold (medians of {n} interleaved "
                       f"repeats each; {_ratio(trial.compile_s_before, trial.compile_s_after, 'faster')}"
                       ", beyond their spread)")
        elif trial.verdict is not None:
            saving += (f"; its cold compile time ({_span(trial.compile_after)}) differs from "
                       f"the original's ({_span(trial.compile_before)}) by no more than the "
                       "spread of their interleaved repeats")
        elif trial.reason:
            saving += f"; {trial.reason}"
        return dataclasses.replace(finding, saving=saving + ".")
    if trial.status == "no gain":
        note = f" {name} was tried but does not help here: {trial.reason}."
    elif trial.status == "changed the result":
        note = (f" {name} changed the result ({trial.reason}), so no measured ratio is "
                "reported.")
    else:
        note = f" {name} could not be tried: {trial.reason}."
    return dataclasses.replace(finding, saving=finding.saving + note)


def _span(values: Sequence[float]) -> str:
    return f"{_seconds(min(values))} to {_seconds(max(values))}" if values else "n/a"


def _ratio(before: float, after: float, better: str) -> str:
    """``26× fewer``, ``1.4× faster``, ``about the same``, ``2.7× more``..."""
    worse = {"fewer": "more", "faster": "slower"}[better]
    if before <= 0 or after <= 0:
        return "n/a"
    ratio = before / after
    if 1 / 1.1 < ratio < 1.1:
        return "about the same"
    word, ratio = (better, ratio) if ratio > 1 else (worse, 1 / ratio)
    return f"{ratio:.0f}× {word}" if ratio >= 10 else f"{ratio:.1f}× {word}"


def _seconds(s: float) -> str:
    return f"{s:.2g} s" if s < 1 else f"{s:.1f} s"


def _called_from(r: LineShape) -> str:
    """``, called from file.py:16 (Net.__call__),`` when the line's function was called from one
    line of the user's (where a loop calling a layer step by step is); else nothing."""
    return f", called from {_at(r.called_from)}," if r.called_from else ""


def _unrolled_loop(program: Program, limits: Limits, total_eqns: int,
                   per_leaf: set[str | None]) -> list[Finding]:
    best: dict[LineKey, LineShape] = {}
    for r in program.shapes:
        if r.user != r.line:
            continue  # a loop in a library's own code (diffrax's fixed stages): not the user's
        if r.chain < limits.min_chain or (where(r.line) in per_leaf and _accumulates(r)):
            continue  # a per-leaf line summing its own repeats (as its backward pass does)
        if r.line not in best or r.chain > best[r.line].chain:
            best[r.line] = r
    found = []
    for r in sorted(best.values(), key=lambda r: -r.chain):
        line_eqns = program.line_eqns(r.line)
        notes = ""
        if r.transposed:
            notes += (" It is differentiated: the backward pass replays the chain and keeps every "
                      "step's values alive.")
        if _accumulates(r):
            notes += (f" Each step folds in a new value ({r.fresh_inputs} in all): if they are the "
                      "leaves of a pytree, stack them and reduce once (jnp.sum) instead.")
        after = math.ceil(line_eqns / r.steps)
        found.append(Finding(
            kind="unrolled-loop",
            message=(f"{_at(r.line)}{_called_from(r)} produces a chain of {r.chain} equations, "
                     "each step feeding "
                     f"the next (about {r.steps} steps, {line_eqns} equations on this line): a "
                     "Python loop unrolled into the program (the pattern of jax-ml/jax#2777 and "
                     f"patrick-kidger/diffrax#94).{notes}"),
            where=where(r.line),
            remedy=("Trace the step once and let XLA run the loop: jax.lax.scan (or "
                    "jax.lax.fori_loop when only the final value is needed).\n\n"
                    "# before\n"
                    "for t in range(T):\n"
                    "    x = x + dt * f(x)\n"
                    "# after\n"
                    "x, _ = jax.lax.scan(lambda x, _: (x + dt * f(x), None), x, None, length=T)"),
            saving=(f"estimate: traced once, this line gives about {_count(after, 'equation')} "
                    f"instead of {line_eqns}, {_percent(line_eqns - after, total_eqns)} of the "
                    "program's equations."),
        ))
    return _capped(found)


def _accumulates(r: LineShape) -> bool:
    """Whether each step of a chain folds in a value of its own (a sum over many values)."""
    return r.fresh_inputs >= r.steps // 2


def _large_constants(program: Program, limits: Limits, hlo_bytes: int) -> list[Finding]:
    total = program.constant_bytes
    if total < limits.max_constant_bytes:
        return []
    biggest = max(program.constants, key=lambda c: c.nbytes)
    used_at = f", read at {_at(biggest.line)}" if biggest.line and biggest.line[1] else ""
    return [Finding(
        kind="large-constants",
        message=(f"{_mb(total)} of arrays are baked into the program as constants "
                 f"({_count(len(program.constants), 'array')}, the largest {biggest.dtype}"
                 f"{list(biggest.shape)}{used_at}; threshold {_mb(limits.max_constant_bytes)}): "
                 "arrays captured by closure instead of passed as arguments (the pattern of "
                 "patrick-kidger/equinox#770). Their values are copied into the program XLA "
                 "compiles, and changing them means tracing and compiling again."),
        where=where(biggest.line),
        remedy=("Pass the arrays as arguments (or inside a model pytree argument) so they are "
                "data, not program.\n\n"
                "# before: weights closed over\n"
                "loss = jax.jit(lambda x: apply(weights, x))\n"
                "# after: weights passed in\n"
                "loss = jax.jit(apply)\n"
                "loss(weights, x)"),
        saving=(f"measured: {_mb(total)} of constant data inside a StableHLO program of "
                f"{_mb(hlo_bytes)}; as arguments they leave the program."),
    )]


def _many_carry_leaves(program: Program, limits: Limits) -> list[Finding]:
    found, lines = [], set()
    for loop in sorted(program.loops, key=lambda lp: -lp.carry):
        if loop.carry < limits.max_leaves or loop.user in lines:
            continue  # one finding per line: a scan and its transpose share it under grad
        lines.add(loop.user)
        inside = (f" (inside the library, at {library_line(loop.line)})"
                  if loop.user != loop.line else "")
        found.append(Finding(
            kind="many-carry-leaves",
            message=(f"a `{loop.primitive}` at {_at(loop.user)}{inside} carries {loop.carry} separate "
                     f"arrays from one iteration to the next (threshold {limits.max_leaves}); "
                     "compile time grows with the number of loop-carried arrays "
                     "(jax-ml/jax#3596)."),
            where=where(loop.user),
            via=library_line(loop.line) if inside else None,
            remedy=("Carry one stacked array instead of a pytree of many: explorer.NamedArray "
                    "keeps the names, or ravel_pytree once before the loop.\n\n"
                    "init = explorer.NamedArray.from_groups({\"x\": x0, \"v\": v0})\n"
                    "final, ys = jax.lax.scan(step, init, None, length=T)"),
            saving=("estimate (jax-ml/jax#3596, not measured on this program): a 60-step scan "
                    "carrying a list of 75, 150 and 300 arrays compiled in 0.6, 1.6 and 4.4 s."),
        ))
    return _capped(found)


def _large_unroll(program: Program, limits: Limits) -> list[Finding]:
    found = []
    for loop in program.loops:
        copies = min(loop.unroll, loop.length or 1)
        if loop.unroll < limits.max_unroll or copies < 2 or loop.user != loop.line:
            continue  # (an unroll inside a library is the library's choice)
        found.append(Finding(
            kind="large-unroll",
            message=(f"a `scan` at {_at(loop.line)} has unroll={loop.unroll} over length "
                     f"{loop.length} (threshold {limits.max_unroll}): its body of "
                     f"{loop.body_eqns} equations is copied {copies} times into the program "
                     "XLA compiles."),
            where=where(loop.line),
            remedy=("Unroll little (the default unroll=1, or a small factor chosen by measuring "
                    "runtime): unrolling trades compile time and program size for fewer loop "
                    "iterations.\n\n"
                    "final, ys = jax.lax.scan(step, init, xs, unroll=1)"),
            saving=(f"estimate: about {loop.body_eqns * (copies - 1)} fewer equations for XLA "
                    f"to compile (one copy of the body instead of {copies})."),
        ))
    return _capped(found)


def _capped(found: list[Finding]) -> list[Finding]:
    if len(found) <= MAX_PER_KIND:
        return found
    kept = found[:MAX_PER_KIND]
    last = kept[-1]
    more = len(found) - MAX_PER_KIND
    kept[-1] = dataclasses.replace(
        last, message=f"{last.message} ({_count(more, 'more line')} like this: see top_lines.)")
    return kept


# -- growth across sizes --------------------------------------------------------------------
def with_growth(finding: Finding, tables: Sequence[tuple[int, pd.DataFrame]]) -> Finding:
    """``finding`` with how its line's equations grow across the sizes (line findings only)."""
    if finding.where is None or finding.kind not in ("per-leaf-repetition", "unrolled-loop"):
        return finding
    file, _, line = finding.where.rpartition(":")
    sizes, eqns = [], []
    for n, table in tables:
        rows = table[(table["file"] == file) & (table["line"] == int(line))]
        sizes.append(n)
        eqns.append(int(rows["eqns"].sum()))
    fit = fit_power_law(sizes, eqns)
    if fit is None:
        return finding
    growth = (f" Across sizes {min(sizes)} to {max(sizes)} this line's equations grow as "
              f"size^{format_exponent(fit['k'])} ({' → '.join(map(str, eqns))}).")
    return dataclasses.replace(finding, message=finding.message + growth)
