"""Regenerate the example sweep the dashboard shows before anything is measured.

The rows come from the real library sweep on the machine that runs this script (the page labels them with
the host, backend and JAX version stored in each row); nothing is edited by hand. Run from the
repository root:

    python benchmarks/make_example_sweep.py

which runs, through the library:

    explorer.sweep("decay", None, [1, 3, 10, 30, 100, 300], 200, ("loss", "grad"),
                   rollouts=True, resume=False, store=<tmp store>)
    explorer.sweep("decay", None, [1000], 200, ("loss", "grad"), resume=False,
                   store=<tmp store>)
    <tmp store>.export("explorer/data/example_sweep.csv")   # the interpreter by name only

and then copies a few stored rollout trajectories (N=10, loss rows: the first, middle and last
state of each representation) into ``explorer/data/example_rollouts.csv``, so the rollout plot
has something to show on first load too.

    python benchmarks/make_example_sweep.py --only packed

measures only the named representations (the same calls with ``representations=[...]``) and
puts their rows in place of any earlier rows of theirs, keeping every other row and rollout of
the shipped files as measured; new rows get ids after the largest one there.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "explorer" / "data"
ROLLOUT_N = 10


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", metavar="REPRESENTATION", default=None,
                    help="measure only these representations and merge their rows into the "
                         "shipped files")
    only = ap.parse_args().only
    from explorer import Store, sweep  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "example.sqlite")
        sweep("decay", only, [1, 3, 10, 30, 100, 300], 200, ("loss", "grad"),
              rollouts=True, resume=False, store=store)
        sweep("decay", only, [1000], 200, ("loss", "grad"), resume=False, store=store)
        out = DATA / "example_sweep.csv"
        rollouts = _rollouts(store, store.rows(status="ok"))
        rows = _portable(store.rows())
        if only:
            rows, rollouts = _merge(rows, rollouts, set(only))
        rows.to_csv(out, index=False)     # as Store.export writes a .csv
    rollouts.to_csv(DATA / "example_rollouts.csv", index=False, float_format="%.6g")
    print(f"wrote {out} ({out.stat().st_size // 1024} KB) and example_rollouts.csv "
          f"({(DATA / 'example_rollouts.csv').stat().st_size // 1024} KB)")


def _portable(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows as shipped to every user: the interpreter by its name, not by where it lies on
    the machine that measured (a developer's folders are no one else's business)."""
    return rows.assign(python=rows["python"].map(
        lambda p: Path(p).name if isinstance(p, str) and p else p))


def _rollouts(store, rows: pd.DataFrame) -> pd.DataFrame:
    picked = rows[(rows["n_states"] == ROLLOUT_N) & (rows["target"] == "loss")]
    parts = []
    for record in picked.to_dict("records"):
        found = store.rollout(int(record["id"]))
        if found is None:
            continue
        names, data = found
        keep = sorted({0, len(names) // 2, len(names) - 1})
        frame = pd.DataFrame(data[:, keep], columns=[names[i] for i in keep])
        frame.insert(0, "step", range(len(frame)))
        frame.insert(0, "measurement_id", int(record["id"]))
        parts.append(frame.melt(["measurement_id", "step"], var_name="state",
                                value_name="value"))
    return pd.concat(parts, ignore_index=True)


def _merge(rows: pd.DataFrame, rollouts: pd.DataFrame, only: set[str]):
    """The shipped rows and rollouts without ``only``'s, plus the new ones (ids shifted past
    the shipped ones)."""
    old = pd.read_csv(DATA / "example_sweep.csv")
    old_rollouts = pd.read_csv(DATA / "example_rollouts.csv")
    dropped = set(old.loc[old["representation"].isin(only), "id"])
    old = old[~old["id"].isin(dropped)]
    old_rollouts = old_rollouts[~old_rollouts["measurement_id"].isin(dropped)]
    shift = int(old["id"].max())
    rows = rows.assign(id=rows["id"] + shift)
    rollouts = rollouts.assign(measurement_id=rollouts["measurement_id"] + shift)
    # Columns the store gained since the shipped rows were measured stay empty for those rows.
    columns = list(rows.columns) + [c for c in old.columns if c not in rows.columns]
    merged = pd.concat([old, rows], ignore_index=True)[columns]
    for c in old.columns:      # whole numbers stay whole where the new rows leave gaps
        if pd.api.types.is_integer_dtype(old[c]):
            merged[c] = merged[c].astype("Int64")
    return (merged,
            pd.concat([old_rollouts, rollouts], ignore_index=True))


if __name__ == "__main__":
    main()
