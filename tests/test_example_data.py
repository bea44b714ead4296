"""The example sweep shipped with the package carries measurements, not the measuring
machine's folders: no row names a local path (the interpreter is named, not located)."""

from __future__ import annotations

import csv
import importlib.util
import re

import pandas as pd
from _support import ROOT

EXAMPLE = ROOT / "explorer" / "data" / "example_sweep.csv"
LOCAL_PATH = re.compile(r"^(/|~|[A-Za-z]:[\\/])")


def test_the_shipped_example_names_no_local_path():
    with open(EXAMPLE, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows
    local = {(c, v) for r in rows for c, v in r.items() if v and LOCAL_PATH.match(v)}
    assert not local, sorted(local)[:3]
    assert {r["python"] for r in rows} == {"python"}


def test_the_example_maker_writes_the_interpreter_by_name():
    spec = importlib.util.spec_from_file_location("make_example_sweep",
                                                  ROOT / "benchmarks" / "make_example_sweep.py")
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    rows = pd.DataFrame({"python": ["/home/dev/.venv/bin/python3.11", None], "compile_s": [1.5, 2]})
    out = maker._portable(rows)
    assert out["python"].tolist()[0] == "python3.11" and pd.isna(out["python"].tolist()[1])
    assert out["compile_s"].tolist() == [1.5, 2]
