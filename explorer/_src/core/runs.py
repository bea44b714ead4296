"""Two groups of stored rows side by side: another JAX version, backend, device kind or host.

The same sweep measured under jax 0.10 and 0.12 (``sweep(..., python=...)``), or on a CPU and
a GPU, lands in one store; :func:`compare_runs` puts them side by side, per representation and
state count, as ratios. A pure function of a results DataFrame, so the CLI
(``pytree-explorer compare-runs``) and a dashboard view can both call it.
"""

from __future__ import annotations

import pandas as pd

GROUP_BY = ("jax_version", "backend", "device_kind", "host", "python")
# What is compared: compile time, program size, run time.
METRICS = ("compile_s", "hlo_pre_bytes", "run_s")
CASE = ("problem", "representation", "n_states", "horizon", "target", "unroll")


def compare_runs(rows: pd.DataFrame, by: str = "jax_version", a: str | None = None,
                 b: str | None = None) -> pd.DataFrame:
    """Per case (representation, N, ...), the median of each metric in groups ``a`` and ``b``
    of column ``by``, and the ratio ``b / a``.

    Args:
      rows: stored rows (``Store.rows()``); only ``ok`` rows count.
      by: one of :data:`GROUP_BY`.
      a, b: the two values of ``by`` to compare; when omitted, the column must hold exactly
        two values (sorted: ``a`` the first).

    Returns:
      One row per case measured in both groups: the case columns, then ``<metric>_a``,
      ``<metric>_b`` and ``<metric>_ratio`` for each of :data:`METRICS` (``None`` where a group
      has no value, as a backend that gives no figure).

    Raises:
      ValueError: an unknown ``by``, or groups that are not two known values.
    """
    if by not in GROUP_BY:
        raise ValueError(f"cannot group by {by!r}; choose one of {', '.join(GROUP_BY)}")
    ok = rows[(rows["status"] == "ok") & rows[by].notna()]
    values = sorted(ok[by].astype(str).unique())
    if a is None and b is None:
        if len(values) != 2:
            raise ValueError(f"{by} has {len(values)} values among ok rows "
                             f"({', '.join(values) or 'none'}); name the two to compare")
        a, b = values
    for name, value in (("a", a), ("b", b)):
        if value not in values:
            raise ValueError(f"no ok rows with {by} = {value!r} (stored: "
                             f"{', '.join(values) or 'none'}) for group {name}")
    case = [c for c in CASE if c in ok.columns]
    sides = []
    for suffix, value in (("a", a), ("b", b)):
        group = ok[ok[by].astype(str) == value]
        medians = group.groupby(case, dropna=False)[list(METRICS)].median()
        sides.append(medians.add_suffix(f"_{suffix}"))
    both = sides[0].join(sides[1], how="inner")
    for metric in METRICS:
        ratio = both[f"{metric}_b"] / both[f"{metric}_a"]
        both[f"{metric}_ratio"] = ratio.where(both[f"{metric}_a"] > 0)
    both = both.reset_index().sort_values(["representation", "n_states"], kind="stable")
    both = both.astype(object).where(both.notna(), None)
    both.attrs.update(by=by, a=a, b=b)
    return both.reset_index(drop=True)
