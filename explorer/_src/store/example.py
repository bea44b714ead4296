"""The example sweep shipped with the package: what a page shows before anything is measured.

Made with ``python benchmarks/make_example_sweep.py``; that script holds the exact calls.
Read once per process and copied for each caller (every dashboard page gets its own frame).
"""

from __future__ import annotations

import functools
import importlib.resources

import numpy as np
import pandas as pd

from .store import to_frame

__all__ = ["describe_example", "load_example"]


def _data_file(name: str):
    return importlib.resources.files("explorer").joinpath("data", name)


def load_example() -> tuple[pd.DataFrame, dict[int, tuple[list[str], np.ndarray]]]:
    """The shipped example sweep (ids made negative so they never clash with stored ids) and
    its rollouts, keyed by those ids."""
    frame, rollouts = _load_example_once()
    # Every page gets its own frame and dict; the (read-only) arrays are shared.
    return frame.copy(), dict(rollouts)


@functools.lru_cache(maxsize=1)
def _load_example_once() -> tuple[pd.DataFrame, dict[int, tuple[list[str], np.ndarray]]]:
    with _data_file("example_sweep.csv").open("rb") as f:
        raw = pd.read_csv(f)
    frame = to_frame(raw.to_dict("records"))
    frame["id"] = -frame["id"].abs()
    frame["source"] = "example"
    rollouts: dict[int, tuple[list[str], np.ndarray]] = {}
    try:
        with _data_file("example_rollouts.csv").open("rb") as f:
            long = pd.read_csv(f)
    except FileNotFoundError:
        return frame, rollouts
    for mid, part in long.groupby("measurement_id"):
        wide = part.pivot(index="step", columns="state", values="value").sort_index()
        names = list(dict.fromkeys(part["state"]))
        rollouts[-abs(int(mid))] = (names, wide[names].to_numpy(np.float32))
    return frame, rollouts


def describe_example(frame: pd.DataFrame) -> str:
    """One sentence saying where and with what the example was measured."""

    def values(column: str) -> str:
        found = sorted({str(x) for x in frame[column].dropna()}) if column in frame else []
        return ", ".join(found) or "unknown"

    return (f"Example sweep shipped with the package, measured on host {values('host')} "
            f"({values('backend')}, {values('device_kind')}), JAX {values('jax_version')}. "
            "Your own measurements are added to it.")

