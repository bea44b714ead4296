"""Findings for a watched program's top functions: :func:`explorer.diagnose` on the very call.

Made after the watch closed, so they never count in the program's time. The function and its
arguments are those JAX traced for the slowest compile of each function (held by the watch
until now, then let go). ``diagnose`` runs with ``compile=False``: it traces and lowers again
but does not compile, and the report puts the compile seconds the program itself spent beside
its findings.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import re
import sys
from typing import Any

import jax
import numpy as np

from ..diagnose.diagnose import Diagnosis, diagnose, with_leaf_names
from ..util.validate import describe_error
from .record import is_user_file

MAX_FINDINGS = 5  # findings for at most this many functions (those over the watch's top share)


@dataclasses.dataclass(frozen=True)
class FunctionFindings:
    """The findings of one top function.

    Attributes:
        name, where: the function, as in the summary.
        compiles, compile_s, share: what the program spent on it (recorded, not measured again).
        reason: the most frequent reason it compiled again (``None``: compiled once).
        diagnosis: :func:`explorer.diagnose` of the recorded call (traced, not compiled), or
            ``None`` when it could not be made; ``note`` then says why, in one sentence.
    """

    name: str
    where: str
    compiles: int
    compile_s: float
    share: float
    reason: str | None
    diagnosis: Diagnosis | None
    note: str | None = None
    users: bool = False  # the user's own function (a note about it is always shown)


def _positional(call: Any) -> tuple[tuple, tuple[int, ...]] | str:
    """The recorded call as positional arguments and static positions, or why it cannot be."""
    args, kwargs = tuple(call.args), dict(call.kwargs)
    static = set(call.static_argnums)
    if kwargs:
        try:
            params = list(inspect.signature(call.fun).parameters.values())
            bound = inspect.signature(call.fun).bind(*args, **kwargs)
        except (TypeError, ValueError):
            return "it was called with keyword arguments that could not be matched to positions"
        if bound.kwargs:
            return ("it was called with keyword-only arguments, which diagnose cannot pass; "
                    "diagnose a wrapper that takes them by position")
        args = tuple(bound.args)
        names = [p.name for p in params]
        static |= {names.index(n) for n in call.static_argnames if n in names}
    n = len(args)
    return args, tuple(sorted(i % n for i in static if -n <= i < n))


def _donated(args: tuple) -> bool:
    for leaf in jax.tree_util.tree_leaves(args):
        is_deleted = getattr(leaf, "is_deleted", None)
        if callable(is_deleted) and is_deleted():
            return True
    return False


def _library_wrapper(fun: Any) -> bool:
    """Whether a held call's function is a library's wrapper of the user's (nnx.jit hands
    jax.jit one of its own), not the user's function itself."""
    if isinstance(fun, functools.partial):
        return _library_wrapper(fun.func)
    code = getattr(fun, "__code__", None)
    if code is not None:
        return not is_user_file(code.co_filename)
    module = sys.modules.get(type(fun).__module__)  # a callable object: where its class is
    where = getattr(module, "__file__", None)
    return where is not None and not is_user_file(where)


def _parameters(fn: Any) -> list[str]:
    """The names of ``fn``'s positional parameters, in order (none where it has no signature)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return []
    return [p.name for p in itertools.takewhile(
        lambda p: p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD), params)]


def _named_by_parameters(d: Diagnosis, fn: Any) -> Diagnosis:
    """``d`` of the user's own call of ``fn``, each ``args[i]`` named by ``fn``'s parameter."""
    names = _parameters(fn)

    def named(path: str) -> str:
        m = re.match(r"args\[(\d+)\]", path)
        i = int(m.group(1)) if m else len(names)
        return names[i] + path[m.end():] if i < len(names) else path
    return with_leaf_names(d, [named(p) for p in d.leaf_paths])


def _named_by_the_users_call(d: Diagnosis, args: tuple, static: tuple[int, ...],
                             entry: Any) -> Diagnosis:
    """``d`` of the ``jax.jit`` call a library made (``args[1][0][0].heads['h0'].weight``), its
    leaves named as the user passed them (``model.heads['h0'].weight``): each array is the very
    object of the user's call. Unchanged unless every leaf is found there."""
    positional = _parameters(entry.fn)
    given = [(positional[i] if i < len(positional) else f"args[{i}]", a)
             for i, a in enumerate(entry.args)] + list(entry.kwargs.items())
    names: dict[int, str] = {}
    for label, value in given:
        for path, leaf in jax.tree_util.tree_flatten_with_path(value)[0]:
            if isinstance(leaf, (jax.Array, np.ndarray)):  # a Python number has no identity
                names.setdefault(id(leaf), label + jax.tree_util.keystr(path))
    leaves = {f"args[{i}]{jax.tree_util.keystr(path)}": leaf
              for i, a in enumerate(args) if i not in static
              for path, leaf in jax.tree_util.tree_flatten_with_path(a)[0]}
    mine = [names.get(id(leaves[p])) if p in leaves else None for p in d.leaf_paths]
    return d if None in mine else with_leaf_names(d, mine)


def _users_call(w: Any, entry: Any, base: dict) -> FunctionFindings | None:
    """The diagnosis of the user's own call of a library's jit of their function (``value(model,
    x)`` for an ``nnx.jit``'s ``value``), or ``None`` where there is none to make."""
    if entry is None or entry.kwargs or _donated(entry.args):
        return None
    try:
        d = diagnose(entry.fn, *entry.args, compile=False, try_pack=w.pack)
    except Exception:  # noqa: BLE001 - the function is then named with what to run
        return None
    return FunctionFindings(**{**base, "users": True}, diagnosis=d)


def make_findings(w: Any) -> list[FunctionFindings]:
    """``diagnose`` each function over ``w.top`` of the compile time (at most a few)."""

    table = w.summary()
    # The user's functions a library jitted (eqx.filter_jit): named by their definition, not by
    # the line that called them (an eager operation run on a user's line is named by that line).
    library_jitted = {(r.name, r.where) for r in w._raws
                      if not r.user_defined and r.where != r.called_at
                      and is_user_file(str(r.where).rsplit(":", 1)[0])}
    out: list[FunctionFindings] = []
    for row in table.itertuples(index=False):
        if len(out) >= MAX_FINDINGS or not row.share or row.share < w.top:
            break
        base = {"name": row.name, "where": row.where, "compiles": int(row.compiles),
                "compile_s": float(row.compile_s), "share": float(row.share),
                "reason": row.reason if isinstance(row.reason, str) else None}
        held = w._calls.get((row.name, row.where))
        call, entry = (held[1], held[2]) if held is not None else (None, None)
        by_library = (row.name, row.where) in library_jitted or (
            call is not None and _library_wrapper(call.fun))
        # The user's function, jitted by a library: the watch holds the jax.jit call the
        # library made of it, when it finds that call's trace, and replays it; where it cannot
        # (a library whose call needs its own context, as nnx.jit's does), it diagnoses the
        # user's own call of the library's wrapper; failing both, the function is named with
        # what to run, never left out of the findings.
        def replay(base=base, entry=entry, name=row.name) -> FunctionFindings:
            return _users_call(w, entry, base) or FunctionFindings(
                **{**base, "users": True}, diagnosis=None, note=(
                    "not diagnosed: it was compiled through a library's jit (eqx.filter_jit or "
                    "nnx.jit, say), whose call the watch could not replay; run "
                    "explorer.diagnose on the jitted function with the same arguments: "
                    f"explorer.diagnose({name}, *args)"))
        if call is None and by_library:
            out.append(replay())
            continue
        if call is None:
            out.append(FunctionFindings(**base, diagnosis=None, note=(
                "not diagnosed: no jax.jit call of it was captured (an operation JAX or a "
                "library defines, run outside jit, or a derivative compiled without a trace)")))
            continue
        base["users"] = True
        positional = _positional(call)
        if isinstance(positional, str):
            out.append(replay() if by_library else FunctionFindings(
                **base, diagnosis=None, note=f"not diagnosed: {positional}"))
            continue
        args, static = positional
        if _donated(args):
            out.append(FunctionFindings(**base, diagnosis=None, note=(
                "not diagnosed: its arguments were donated to the call and are gone; "
                "run explorer.diagnose on it with fresh arguments")))
            continue
        try:
            d = diagnose(call.fun, *args, static_argnums=static, compile=False,
                         try_pack=w.pack)
        except Exception as err:  # noqa: BLE001 - one function's failure is one sentence
            out.append(replay() if by_library else FunctionFindings(
                **base, diagnosis=None, note=f"not diagnosed: {describe_error(err)}"))
            continue
        if not by_library:  # the user's own jax.jit: the call is theirs
            d = _named_by_parameters(d, call.fun)
        elif entry is not None:
            d = _named_by_the_users_call(d, args, static, entry)
        out.append(FunctionFindings(**base, diagnosis=d))
    return out
