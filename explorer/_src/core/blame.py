"""Equation blame: which line of *your* code multiplies into N jaxpr equations.

An equation is charged to the user's own line: the innermost frame of its traceback that is
outside JAX, the Python standard library, this package and installed libraries
(site-packages: diffrax, equinox, optax, flax...). JAX keeps a traceback only up to the
innermost ``jit`` being traced, so an equation inside a library's own ``jit`` (diffrax's
``diffeqsolve`` is an ``eqx.filter_jit``) shows no user frame of its own; it inherits the line
of the equation that holds its body, which is the user's call into the library. The library
frame that made it (its *origin*, what JAX's own ``summarize`` names) is kept beside it, so a
report can say "your line, through equinox/_ad.py:1107". Where no frame is the user's (the
explorer's built-in problems, a library function diagnosed on its own), the origin is the
charge, as before.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import linecache
import os
import sys
import sysconfig
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.extend.core as jex_core
import pandas as pd

from ..pack.prims import Origins, tagging

BLAME_COLUMNS = ("file", "line", "function", "code", "eqns", "primitives", "via")
VIA_SHOWN = 3  # library lines named per user line in the ``via`` column

LineKey = tuple[str, int, str]  # (file, line, function)
UNKNOWN: LineKey = ("<unknown>", 0, "")


def scopes(jaxpr: Any) -> Iterator[Any]:
    """``jaxpr`` and every jaxpr nested in it (scan, cond, pjit bodies...), outermost first."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    yield jaxpr
    for sub in jex_core.subjaxprs(jaxpr):
        yield from scopes(sub)


# -- whose frame is it ------------------------------------------------------------------------
def _package_dir(module: Any) -> str:
    return os.path.dirname(os.path.abspath(module.__file__)) + os.sep


def _not_user_prefixes() -> tuple[str, ...]:
    import jaxlib

    here = os.path.dirname(os.path.abspath(__file__))
    explorer_root = os.path.dirname(os.path.dirname(here)) + os.sep  # explorer/
    paths = {_package_dir(jax), _package_dir(jaxlib), explorer_root}
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(name)
        if path:
            paths.add(os.path.abspath(path) + os.sep)
    for path in sys.path:  # a virtual environment's or the user's site folder
        if path.rstrip(os.sep).endswith(("site-packages", "dist-packages")):
            paths.add(os.path.abspath(path) + os.sep)
    return tuple(sorted(paths))


_NOT_USER = _not_user_prefixes()
_JAX = (_package_dir(jax),)


@functools.lru_cache(maxsize=4096)
def is_user_file(file: str) -> bool:
    """Whether ``file`` is the user's code: not JAX, the standard library, this package or an
    installed library (anything under site-packages or dist-packages)."""
    if file.startswith("<"):  # <stdin>, <string>, a notebook cell's <ipython-input-...>
        return not file.startswith("<frozen")
    path = os.path.abspath(file)
    return not (path.startswith(_NOT_USER) or f"{os.sep}site-packages{os.sep}" in path
                or f"{os.sep}dist-packages{os.sep}" in path)


@functools.lru_cache(maxsize=4096)
def _is_jax_file(file: str) -> bool:
    return os.path.abspath(file).startswith(_JAX) or file.startswith("<frozen")


def short_file(file: str) -> str:
    """A library file as its import path shows it (``equinox/_ad.py``); others unchanged."""
    for marker in (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}"):
        if marker in file:
            return file.rsplit(marker, 1)[1]
    return file


def _frames(eqn: Any) -> list:
    traceback = getattr(eqn.source_info, "traceback", None)
    return list(traceback.frames) if traceback is not None else []


@dataclasses.dataclass(frozen=True)
class Charge:
    """Where one equation is charged (``user``) and the frame that made it (``origin``, the
    innermost frame outside JAX; the same as ``user`` for the user's own code)."""

    user: LineKey
    origin: LineKey

    @property
    def through_library(self) -> bool:
        return self.origin != self.user


def charge_of(eqn: Any, inherited: LineKey | None = None, origins: Origins | None = None
              ) -> Charge:
    """The user line and the origin of ``eqn``; ``inherited`` is the charge of the equation
    whose body holds it (``None`` at the top). ``origins``: an equation a packed program
    (``explorer.jit``) emitted is charged as the user's equation it computes."""
    source = origins.origin_of(eqn) if origins is not None else None
    holders = ()
    if source is not None:
        eqn, holders = source, origins.holders_of(eqn)
    user = origin = None
    for frame in _frames(eqn):  # innermost first
        file = frame.file_name
        if origin is None and not _is_jax_file(file):
            origin = (file, frame.line_num, frame.function_name)
        if is_user_file(file):
            user = (file, frame.line_num, frame.function_name)
            break
    if user is None:  # inlined by the packer: the user's line of the call that held it
        user = next(((f.file_name, f.line_num, f.function_name) for held in holders
                     for f in _frames(held) if is_user_file(f.file_name)), None)
    origin = origin or user or inherited or UNKNOWN
    return Charge(user=user or inherited or origin, origin=origin)


def charged_scopes(jaxpr: Any, inherited: LineKey | None = None,
                   origins: Origins | None = None) -> Iterator[tuple[Any, list]]:
    """Each scope of ``jaxpr`` (outermost first, as :func:`scopes`) with the :class:`Charge` of
    each of its equations, a nested body inheriting the user line of the equation holding it."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    charges = [charge_of(eqn, inherited, origins) for eqn in jaxpr.eqns]
    yield jaxpr, charges
    for eqn, charge in zip(jaxpr.eqns, charges):
        for sub in jex_core.jaxprs_in_params(eqn.params):
            yield from charged_scopes(sub, charge.user, origins)


def caller_of(eqn: Any) -> LineKey | None:
    """The user's line that called the function holding ``eqn``'s own user line (the next
    user frame outward), ``None`` when there is none (the user's line is the outermost)."""
    seen_user = False
    for frame in _frames(eqn):  # innermost first
        if is_user_file(frame.file_name):
            if seen_user:
                return (frame.file_name, frame.line_num, frame.function_name)
            seen_user = True
    return None


def line_of(eqn: Any) -> LineKey:
    """The source line an equation comes from (its origin), ``(file, line, function)``."""
    return charge_of(eqn).origin


# -- the table --------------------------------------------------------------------------------
def blame_frame(counts: Mapping[LineKey, collections.Counter],
                via: Mapping[LineKey, collections.Counter] | None = None) -> pd.DataFrame:
    """The blame table from primitive counts per user line, most equations first.

    ``via``: per user line, how many of its equations each library line (the origin) made;
    the ``via`` column names the ``VIA_SHOWN`` biggest (``equinox/_ad.py:1107 ×4502; ...``).
    """
    rows = []
    via = via or {}
    merged: dict[tuple[str, int], tuple[list, collections.Counter, collections.Counter]] = {}
    for key, prims in counts.items():  # one row per file:line (a lambda and its caller share)
        functions, total, origins = merged.setdefault(
            key[:2], ([], collections.Counter(), collections.Counter()))
        if key[2] not in functions:
            functions.append(key[2])
        total.update(prims)
        origins.update(via.get(key, {}))
    for (file, line), (functions, prims, origins) in merged.items():
        function = ", ".join(functions)
        shown = [f"{short_file(o[0])}:{o[1]} ×{n}" for o, n in origins.most_common(VIA_SHOWN)]
        if len(origins) > VIA_SHOWN:
            shown.append(f"{len(origins) - VIA_SHOWN} more")
        rows.append({
            "file": file,
            "line": line,
            "function": function,
            "code": linecache.getline(file, line).strip() if line else "",
            "eqns": sum(prims.values()),
            "primitives": ", ".join(f"{p}×{c}" for p, c in prims.most_common(4)),
            "via": "; ".join(shown),
        })
    frame = pd.DataFrame(rows, columns=list(BLAME_COLUMNS))
    return frame.sort_values(["eqns", "file", "line"], ascending=[False, True, True],
                             ignore_index=True)


def definition_of(fn: Callable) -> LineKey | None:
    """The line defining the user's function under any wrappers (``jax.grad``, ``partial``,
    ``eqx.filter_jit``...): where equations no frame of the user's made (a library's glue
    around the function) are charged. ``None`` when that function is not the user's code."""
    for _ in range(16):
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif getattr(fn, "__wrapped__", None) is not None and fn.__wrapped__ is not fn:
            fn = fn.__wrapped__
        else:
            break
    code = getattr(fn, "__code__", None)
    if code is None or not is_user_file(code.co_filename):
        return None
    return (code.co_filename, code.co_firstlineno, code.co_name)


def count_by_line(jaxpr: Any, default: LineKey | None = None,
                  origins: Origins | None = None) -> tuple[dict, dict]:
    """Primitive counts per user line and, per user line, equations per library origin."""
    counts: dict[LineKey, collections.Counter] = collections.defaultdict(collections.Counter)
    via: dict[LineKey, collections.Counter] = collections.defaultdict(collections.Counter)
    for scope, charges in charged_scopes(jaxpr, default, origins):
        for eqn, charge in zip(scope.eqns, charges):
            counts[charge.user][eqn.primitive.name] += 1
            if charge.through_library:
                via[charge.user][charge.origin] += 1
    return dict(counts), dict(via)


def blame(fn: Callable, *args: Any, static_argnums: int | Sequence[int] = ()) -> pd.DataFrame:
    """Count the jaxpr equations of ``fn(*args)`` per line of your code, sub-jaxprs included.

    Returns a DataFrame sorted by ``eqns`` (most first) with columns ``file``, ``line``,
    ``function``, ``code`` (the source line), ``eqns``, ``primitives`` (the most common
    primitives on that line) and ``via`` (the library lines that made them, when your line
    calls into a library: ``diffrax/_integrate.py:1158 ×2000; ...``). A line whose count grows
    with your state count is the one to rewrite: a Python loop over state names inside a
    ``scan`` step shows up here at once. Leaves ``jax.jit`` cannot take (an ``eqx.nn.MLP``'s
    activation function) are held static, as ``eqx.filter_jit`` holds them.
    """
    from .leaves import hold_static

    call, args, static = hold_static(fn, args, static_argnums)
    # Traced as a new function object: JAX caches a trace per function, and one traced before
    # outside ``tagging`` (the page's Programs tab traces a case for its texts first) came back
    # with its packed equations charged to explorer's packer instead of the user's lines.
    fresh = functools.wraps(call)(lambda *a, **k: call(*a, **k))
    with tagging() as origins:  # a packed program's equations: charged to the user's lines
        traced = jax.jit(fresh, static_argnums=static).trace(*args)
    return blame_frame(*count_by_line(traced.jaxpr, definition_of(fn), origins))
