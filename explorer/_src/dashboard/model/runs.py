"""Compare runs: two groups of the page's rows (another JAX version, backend, device kind, host
or interpreter) side by side, per representation and N, as ratios (:func:`compare_runs`)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import param

from ...core.runs import GROUP_BY, METRICS, compare_runs
from .results import Results

__all__ = ["RunComparison"]

_METRIC_LABELS = {"compile_s": "compile time", "hlo_pre_bytes": "program size (StableHLO)",
                  "run_s": "runtime per call"}


class RunComparison(param.Parameterized):
    """Which two groups of rows to compare, and the ratio table ``b / a`` per case."""

    runs_by = param.Selector(default="jax_version", objects=list(GROUP_BY),
                             label="Compare runs by")
    runs_a = param.Selector(default=None, objects=[], allow_None=True, label="baseline (a)")
    runs_b = param.Selector(default=None, objects=[], allow_None=True, label="against (b)")
    runs_metric = param.Selector(default="compile_s", objects=list(METRICS), label="Plot")
    runs_table = param.DataFrame(default=None, allow_None=True, precedence=-1,
                                 doc="compare_runs of the rows shown: one row per case in both.")
    runs_message = param.String(default="", precedence=-1)
    results = param.ClassSelector(class_=Results, precedence=-1)

    def __init__(self, **params: Any):
        super().__init__(**params)
        self.results.param.watch(self._choices, "frame")
        self.param.watch(self._choices, "runs_by")
        self.param.watch(self._compare, ["runs_a", "runs_b"])
        self._choices()

    def _groups(self) -> list[str]:
        frame = self.results.frame
        if frame is None or frame.empty or self.runs_by not in frame:
            return []
        ok = frame[(frame["status"] == "ok") & frame[self.runs_by].notna()]
        return sorted(ok[self.runs_by].astype(str).unique())

    def _choices(self, *events: Any) -> None:
        groups = self._groups()
        a = self.runs_a if self.runs_a in groups else (groups[0] if groups else None)
        b = self.runs_b if self.runs_b in groups and self.runs_b != a else next(
            (g for g in groups if g != a), None)
        self.param.runs_a.objects = groups
        self.param.runs_b.objects = groups
        if (a, b) != (self.runs_a, self.runs_b):
            self.param.update(runs_a=a, runs_b=b)  # the watcher compares, once for both
        else:
            self._compare()  # the same groups over other rows

    def _compare(self, *events: Any) -> None:
        groups = self._groups()
        if len(groups) < 2:
            self.param.update(runs_table=None, runs_message=(
                f"The rows shown have {len(groups)} value(s) of {self.runs_by} "
                f"({', '.join(groups) or 'none'}): measure the same cases under another one "
                "(pytree-explorer sweep --python PATH, or on another machine into the same "
                "store) to compare."))
            return
        if self.runs_a is None or self.runs_b is None or self.runs_a == self.runs_b:
            self.param.update(runs_table=None, runs_message="Choose two different groups.")
            return
        try:
            table = compare_runs(self.results.frame, by=self.runs_by, a=self.runs_a,
                                 b=self.runs_b)
        except ValueError as err:
            self.param.update(runs_table=None, runs_message=str(err).splitlines()[0])
            return
        self.param.update(runs_table=table, runs_message=summary(table, self.runs_by))


def summary(table: pd.DataFrame, by: str) -> str:
    """One line per metric: the median ratio b / a over the cases measured in both groups."""
    a, b = table.attrs.get("a"), table.attrs.get("b")
    if table.empty:
        return f"No case was measured under both {by} = {a} and {by} = {b}."
    lines = [f"{len(table)} case(s) measured under both {by} = **{a}** (a) and **{b}** (b); "
             "median ratio b / a:"]
    for metric in METRICS:
        ratios = pd.to_numeric(table[f"{metric}_ratio"], errors="coerce").dropna()
        value = f"{ratios.median():.2f}×" if len(ratios) else "no figure in both"
        lines.append(f"- {_METRIC_LABELS[metric]}: {value}")
    return "\n".join(lines)
