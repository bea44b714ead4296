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
    <tmp store>.export("explorer/data/example_sweep.csv")

and then copies a few stored rollout trajectories (N=10, loss rows: the first, middle and last
state of each representation) into ``explorer/data/example_rollouts.csv``, so the rollout plot
has something to show on first load too.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "explorer" / "data"
ROLLOUT_N = 10


def main() -> None:
    from explorer import Store, sweep  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "example.sqlite")
        sweep("decay", None, [1, 3, 10, 30, 100, 300], 200, ("loss", "grad"),
              rollouts=True, resume=False, store=store)
        sweep("decay", None, [1000], 200, ("loss", "grad"), resume=False, store=store)
        out = store.export(DATA / "example_sweep.csv")

        rows = store.rows(status="ok")
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
        rollouts = pd.concat(parts, ignore_index=True)
        rollouts.to_csv(DATA / "example_rollouts.csv", index=False, float_format="%.6g")
    print(f"wrote {out} ({out.stat().st_size // 1024} KB) and example_rollouts.csv "
          f"({(DATA / 'example_rollouts.csv').stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
