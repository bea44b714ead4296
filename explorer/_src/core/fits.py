"""Scaling laws: ``metric ≈ c · N^k`` fitted to measured rows, and how a fitted value is shown.

Pure NumPy/pandas: the plots, the CLI and the notebooks import these without the measuring
machinery.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

SCALING_METRICS = ("compile_s", "trace_s", "lower_s", "hlo_pre_bytes", "hlo_post_bytes",
                   "jaxpr_eqns", "run_s")
FIT_COLUMNS = ("metric", "k", "c", "r2", "points", "n_min", "n_max")


def format_exponent(k: float | None, digits: int = 2) -> str:
    """A fitted value as text, with a negative zero shown as ``0.00``.

    The fitted slope of a constant series can come out as ``-1e-17`` on one processor and
    ``+1e-17`` on another; ``f"{k:.2f}"`` would then print ``-0.00``.
    """
    if k is None or not np.isfinite(k):
        return "n/a"
    text = f"{k:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def fit_power_law(x: Any, y: Any) -> dict[str, Any] | None:
    """Least-squares fit of ``y ≈ c · x^k`` in log-log space over the pairs where both are
    positive numbers; ``None`` below two distinct ``x``. Returns ``k``, ``c``, ``r2`` (fit
    quality in log space), ``points``, ``n_min``, ``n_max``."""
    xs = pd.to_numeric(pd.Series(x), errors="coerce").to_numpy(float)
    ys = pd.to_numeric(pd.Series(y), errors="coerce").to_numpy(float)
    keep = np.isfinite(xs) & np.isfinite(ys) & (xs > 0) & (ys > 0)
    xs, ys = xs[keep], ys[keep]
    if len(np.unique(xs)) < 2:
        return None
    lx, ly = np.log(xs), np.log(ys)
    k, logc = np.polyfit(lx, ly, 1)
    fitted = k * lx + logc
    ss_res = float(np.sum((ly - fitted) ** 2))
    ss_tot = float(np.sum((ly - ly.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return {"k": float(k), "c": float(np.exp(logc)), "r2": r2, "points": int(len(xs)),
            "n_min": int(xs.min()), "n_max": int(xs.max())}


def scaling_exponents(df: pd.DataFrame, metrics: Sequence[str] = SCALING_METRICS,
                      by: Sequence[str] = ("problem", "representation", "target", "horizon"),
                      x: str = "n_states") -> pd.DataFrame:
    """Fit ``metric ≈ c · N^k`` per group by least squares in log-log space.

    Only rows with status ``ok`` and positive values count; a group needs two distinct N.
    Returns one row per group and metric: ``k``, ``c``, ``r2`` (fit quality in log space),
    ``points``, ``n_min``, ``n_max``.

    Raises:
      ValueError: for a metric that is not a column of ``df`` (one line, naming the choices).
    """
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    valid = [*SCALING_METRICS, *(c for c in df.columns if c not in SCALING_METRICS
                                 and c != x and pd.api.types.is_numeric_dtype(df[c]))]
    unknown = [m for m in metrics if m not in valid]
    if unknown:
        raise ValueError(f"unknown metric {unknown[0]!r}; choose from: {', '.join(valid)}")
    keys = [b for b in by if b in df.columns] if not df.empty else list(by)
    columns = [*keys, *FIT_COLUMNS]
    if df.empty:
        return pd.DataFrame(columns=columns)
    ok = df[df["status"] == "ok"] if "status" in df else df
    out = []
    for group, part in ok.groupby(keys, dropna=False, sort=True):
        group = group if isinstance(group, tuple) else (group,)
        for metric in metrics:
            if metric not in part:
                continue
            found = fit_power_law(part[x], part[metric])
            if found is not None:
                out.append({**dict(zip(keys, group)), "metric": metric, **found})
    return pd.DataFrame(out, columns=columns)
