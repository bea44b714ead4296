"""Equation blame: which line of your code multiplies into N jaxpr equations."""

from __future__ import annotations

import collections
import linecache
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.extend.core as jex_core
import jax.extend.source_info_util as jex_source_info
import pandas as pd

_SUMMARY = re.compile(r"^(?P<file>.+?):(?P<line>\d+)(?::\d+)? \((?P<function>.*)\)$")

BLAME_COLUMNS = ("file", "line", "function", "code", "eqns", "primitives")

LineKey = tuple[str, int, str]  # (file, line, function)


def scopes(jaxpr: Any) -> Iterator[Any]:
    """``jaxpr`` and every jaxpr nested in it (scan, cond, pjit bodies...), outermost first."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    yield jaxpr
    for sub in jex_core.subjaxprs(jaxpr):
        yield from scopes(sub)


def _walk(jaxpr: Any):
    for scope in scopes(jaxpr):
        yield from scope.eqns


def line_of(eqn: Any) -> LineKey:
    """The user source line an equation comes from: ``(file, line, function)``."""
    summary = jex_source_info.summarize(eqn.source_info)
    match = _SUMMARY.match(summary)
    return ((match["file"], int(match["line"]), match["function"]) if match
            else (summary or "<unknown>", 0, ""))


def blame_frame(counts: Mapping[LineKey, collections.Counter]) -> pd.DataFrame:
    """The blame table from primitive counts per source line, most equations first."""
    rows = []
    for (file, line, function), prims in counts.items():
        rows.append({
            "file": file,
            "line": line,
            "function": function,
            "code": linecache.getline(file, line).strip() if line else "",
            "eqns": sum(prims.values()),
            "primitives": ", ".join(f"{p}×{c}" for p, c in prims.most_common(4)),
        })
    frame = pd.DataFrame(rows, columns=list(BLAME_COLUMNS))
    return frame.sort_values(["eqns", "file", "line"], ascending=[False, True, True], ignore_index=True)


def blame(fn: Callable, *args: Any, static_argnums: int | Sequence[int] = ()) -> pd.DataFrame:
    """Count the jaxpr equations of ``fn(*args)`` per user source line, sub-jaxprs included.

    Returns a DataFrame sorted by ``eqns`` (most first) with columns ``file``, ``line``,
    ``function``, ``code`` (the source line), ``eqns`` and ``primitives`` (the most common
    primitives on that line). A line whose count grows with your state count is the one to
    rewrite: a Python loop over state names inside a ``scan`` step shows up here at once.
    """
    traced = jax.jit(fn, static_argnums=static_argnums).trace(*args)
    counts: dict[LineKey, collections.Counter] = collections.defaultdict(collections.Counter)
    for eqn in _walk(traced.jaxpr):
        counts[line_of(eqn)][eqn.primitive.name] += 1
    return blame_frame(counts)
