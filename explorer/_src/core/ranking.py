"""A watched program's compilations ranked per function: one home for the ranking that
``explorer.watch``'s summary, its report and the dashboard's "Your program" tab all show.

Pure pandas over a frame with one row per compilation (the columns of a watch record:
``name``, ``where``, ``trace_s``, ``lower_s``, ``compile_s``, ``n_leaves``, ``hlo_pre_bytes``,
``eqns``, ``cache_hit``, ``reason``), whether it comes from a live watch or from the store.
"""

from __future__ import annotations

import collections

import pandas as pd

__all__ = ["SUMMARY_COLUMNS", "most_common_reason", "rank_compiles"]

SUMMARY_COLUMNS = ("name", "where", "compiles", "compile_s", "share", "trace_s", "lower_s",
                   "total_s", "eqns", "hlo_pre_bytes", "n_leaves", "cache_hits", "recompiles",
                   "reason")


def most_common_reason(values: pd.Series) -> str | None:
    """The most frequent kind of reason (``shape changed``...), as its latest example."""
    reasons = [v for v in values if isinstance(v, str)]
    if not reasons:
        return None
    kinds = collections.Counter(r.split(":", 1)[0] for r in reasons)
    kind, n = kinds.most_common(1)[0]
    latest = next(r for r in reversed(reasons) if r.split(":", 1)[0] == kind)
    return latest if n == 1 else f"{latest} (×{n})"


def rank_compiles(df: pd.DataFrame) -> pd.DataFrame:
    """One row per function (``name`` and ``where``), most XLA compile seconds first, with the
    columns :data:`SUMMARY_COLUMNS` (see ``explorer.watch``'s ``Watch.summary``)."""
    if df.empty:
        return pd.DataFrame(columns=list(SUMMARY_COLUMNS))
    df = df.assign(cache_hit=df["cache_hit"].astype(bool))
    g = df.groupby(["name", "where"], sort=False, dropna=False)
    out = g.agg(
        compiles=("name", "size"),
        compile_s=("compile_s", lambda s: s.sum(min_count=1)),
        trace_s=("trace_s", lambda s: s.sum(min_count=1)),
        lower_s=("lower_s", lambda s: s.sum(min_count=1)),
        eqns=("eqns", "max"), hlo_pre_bytes=("hlo_pre_bytes", "max"),
        n_leaves=("n_leaves", "max"), cache_hits=("cache_hit", "sum"),
        recompiles=("reason", lambda s: int(s.notna().sum())),
        reason=("reason", most_common_reason),
    ).reset_index()
    out["total_s"] = out[["trace_s", "lower_s", "compile_s"]].fillna(0.0).sum(axis=1)
    total = out["compile_s"].sum()
    out["share"] = out["compile_s"] / total if total > 0 else float("nan")
    for col in ("eqns", "hlo_pre_bytes", "n_leaves", "cache_hits", "compiles"):
        out[col] = out[col].astype("Int64")
    out = out.sort_values(["compile_s", "total_s"], ascending=False, na_position="last",
                          kind="stable").reset_index(drop=True)
    return out[list(SUMMARY_COLUMNS)]
