"""Are two programs the same to XLA? One call answers the question of the equinox
discussion "Computational performance of eqx.tree_at"
(https://github.com/patrick-kidger/equinox/issues/572)."""

from __future__ import annotations

import collections
import dataclasses
import difflib
import re
from collections.abc import Callable, Sequence
from typing import Any

import jax

from .blame import scopes
from .measure import count_eqns
from ..util.validate import check_int

# Names that say nothing about the computation: the function a jaxpr equation calls
# (``name=time_stepping``), module and private function names in StableHLO, and the
# attributes that spell each argument's and result's pytree path (``result[0].x``).
_JAXPR_NAME = re.compile(r"\bname=[^\s\]]+")
_HLO_ATTRS = re.compile(r"\s*(jax\.result_info|jax\.arg_info|mhlo\.frontend_attributes)\s*=\s*(\"[^\"]*\"|\{[^}]*\})")
_HLO_SYMBOL = re.compile(r"@([\w.$-]+)")
_EMPTY_ATTRS = re.compile(r"\s*\{\s*,?\s*\}")


def normalise_jaxpr(text: str) -> str:
    """Jaxpr text with the names of called functions removed.

    Variable names are already canonical: JAX names them in order of first appearance when it
    prints, so structurally equal jaxprs print alike.
    """
    return _JAXPR_NAME.sub("name=_", text)


def normalise_hlo(text: str) -> str:
    """StableHLO text with module/function names and pytree-path attributes normalised."""
    text = _HLO_ATTRS.sub("", text)
    text = _EMPTY_ATTRS.sub("", text)
    names: dict[str, str] = {}

    def rename(match: re.Match) -> str:
        symbol = match.group(1)
        if symbol not in names:
            names[symbol] = "main" if symbol == "main" else f"f{len(names)}"
        return "@" + names[symbol]

    text = _HLO_SYMBOL.sub(rename, text)
    return re.sub(r"^module @\S+", "module @m", text, flags=re.M)


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Verdict of :func:`compare`.

    ``same_jaxpr``: the jaxprs are equal up to variable and function names. ``same_hlo``: the
    StableHLO modules are equal once module/function names and pytree-path attributes are
    normalised. ``jaxpr_diff``/``hlo_diff`` are unified diffs of the normalised texts (empty
    when equal). ``ops_a``/``ops_b`` count each program's jaxpr equations by primitive (every
    sub-jaxpr included), and :attr:`op_summary` leads with the primitives whose counts differ;
    ``distinct`` pairs the jaxpr lines found in only one program, side by side.
    """

    same_jaxpr: bool
    same_hlo: bool
    eqns_a: int
    eqns_b: int
    hlo_bytes_a: int
    hlo_bytes_b: int
    jaxpr_diff: str
    hlo_diff: str
    labels: tuple[str, str] = ("a", "b")
    ops_a: dict[str, int] = dataclasses.field(default_factory=dict)
    ops_b: dict[str, int] = dataclasses.field(default_factory=dict)
    distinct: tuple[tuple[str, str], ...] = ()

    @property
    def op_summary(self) -> str:
        """The primitives whose counts differ, most different first, one line per program:
        ``"dict: 600 × mul, 300 × add"`` / ``"array: 2 × mul, 1 × add"``; empty when every
        count agrees."""
        differ = sorted((p for p in {*self.ops_a, *self.ops_b}
                         if self.ops_a.get(p, 0) != self.ops_b.get(p, 0)),
                        key=lambda p: (-abs(self.ops_a.get(p, 0) - self.ops_b.get(p, 0)), p))
        if not differ:
            return ""
        shown, rest = differ[:8], len(differ) - 8
        more = f", and {rest} more primitives" if rest > 0 else ""
        return "\n".join(
            f"{label}: " + ", ".join(f"{ops.get(p, 0)} × {p}" for p in shown) + more
            for label, ops in zip(self.labels, (self.ops_a, self.ops_b)))

    def __str__(self) -> str:
        verdict = ("identical to XLA" if self.same_hlo else "different programs")
        return (f"{verdict}: same_jaxpr={self.same_jaxpr}, same_hlo={self.same_hlo}, "
                f"eqns {self.eqns_a} vs {self.eqns_b}, StableHLO {self.hlo_bytes_a} vs "
                f"{self.hlo_bytes_b} bytes")


def _ops(jaxpr: Any) -> dict[str, int]:
    counts = collections.Counter(e.primitive.name for scope in scopes(jaxpr) for e in scope.eqns)
    return dict(counts.most_common())


def _distinct(a: str, b: str, max_lines: int) -> tuple[tuple[str, str], ...]:
    """Pairs ``(line only in a, line only in b)`` of every changed block, blank where one side
    has fewer lines; at most ``max_lines`` pairs, the last one saying how many were left out."""
    lines_a, lines_b = a.splitlines(), b.splitlines()
    pairs: list[tuple[str, str]] = []
    matcher = difflib.SequenceMatcher(None, lines_a, lines_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        left, right = lines_a[i1:i2], lines_b[j1:j2]
        width = max(len(left), len(right))
        pairs.extend(zip(left + [""] * (width - len(left)), right + [""] * (width - len(right))))
    if len(pairs) > max_lines:
        left_out = len(pairs) - max_lines
        pairs = pairs[:max_lines] + [(f"... ({left_out} more lines)", f"... ({left_out} more lines)")]
    return tuple((x.strip(), y.strip()) for x, y in pairs)


def _diff(a: str, b: str, label_a: str, label_b: str, max_lines: int) -> str:
    lines = list(difflib.unified_diff(a.splitlines(), b.splitlines(), label_a, label_b, lineterm=""))
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"... ({len(lines) - max_lines} more diff lines)"]
    return "\n".join(lines)


def compare(
    fn_a: Callable,
    args_a: Sequence[Any],
    fn_b: Callable,
    args_b: Sequence[Any],
    *,
    labels: tuple[str, str] = ("a", "b"),
    max_diff_lines: int = 200,
) -> Comparison:
    """Say whether ``fn_a(*args_a)`` and ``fn_b(*args_b)`` are the same program to XLA.

    Example (that discussion's programs): an ``eqx.Module`` step updated with ``eqx.tree_at`` against the
    same step on a tuple gives ``same_jaxpr=True`` and ``same_hlo=True``.
    """
    for name, args in (("args_a", args_a), ("args_b", args_b)):
        if not isinstance(args, (tuple, list)):
            raise ValueError(f"{name} must be a tuple of the function's arguments (for one "
                             f"argument x: (x,)), got {type(args).__name__}")
    if (not isinstance(labels, (tuple, list)) or len(labels) != 2
            or not all(isinstance(s, str) for s in labels)):
        raise ValueError(f"labels must be two strings, one per program, got {labels!r}")
    check_int("max_diff_lines", max_diff_lines, 0, 10**7)
    traced_a = jax.jit(fn_a).trace(*args_a)
    traced_b = jax.jit(fn_b).trace(*args_b)
    jaxpr_a = normalise_jaxpr(str(traced_a.jaxpr))
    jaxpr_b = normalise_jaxpr(str(traced_b.jaxpr))
    hlo_a_raw = traced_a.lower().as_text()
    hlo_b_raw = traced_b.lower().as_text()
    hlo_a, hlo_b = normalise_hlo(hlo_a_raw), normalise_hlo(hlo_b_raw)
    return Comparison(
        same_jaxpr=jaxpr_a == jaxpr_b,
        same_hlo=hlo_a == hlo_b,
        eqns_a=count_eqns(traced_a.jaxpr),
        eqns_b=count_eqns(traced_b.jaxpr),
        hlo_bytes_a=len(hlo_a_raw),
        hlo_bytes_b=len(hlo_b_raw),
        jaxpr_diff=_diff(jaxpr_a, jaxpr_b, *labels, max_diff_lines),
        hlo_diff=_diff(hlo_a, hlo_b, *labels, max_diff_lines),
        labels=tuple(labels),
        ops_a=_ops(traced_a.jaxpr),
        ops_b=_ops(traced_b.jaxpr),
        distinct=_distinct(jaxpr_a, jaxpr_b, max_diff_lines),
    )
