"""The benchmarks' two halves: the report renders the committed results without measuring, and
the bare-JAX reference the fidelity benchmark compares ``explorer.measure`` with is cold."""

from __future__ import annotations

import pytest

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from _support import CPU_ENV

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results.json"


def _report_module():
    # By path, under a name of its own: the scripts import each other as top-level modules.
    spec = importlib.util.spec_from_file_location("benchmarks_report", BENCH / "report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / "report.py"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_report_renders_every_goal_of_the_committed_results(tmp_path):
    doc = tmp_path / "benchmarks.md"
    done = _report(str(RESULTS), "--doc", str(doc))
    assert done.returncode == 0, done.stderr
    text = doc.read_text(encoding="utf-8")
    assert "| bench | figure | measured | goal | verdict | note |" in text
    goals = json.loads(RESULTS.read_text(encoding="utf-8"))["goals"]
    rows = [line for line in text.split("## Goals", 1)[1].split("\n## ", 1)[0].splitlines()
            if line.startswith("| ") and not line.startswith("| bench |")]
    assert len(rows) == len(goals)
    for goal in goals:
        assert any(row.startswith(f"| {goal['benchmark']} | {goal['what']} | ") for row in rows), goal
    assert f"of {len(goals)} goals met." in text
    for section in ("## a. Fidelity", "## b. Worker", "## c. `named`", "## d. Dashboard"):
        assert section in text


def test_committed_doc_is_what_the_report_writes_from_the_committed_results(tmp_path):
    # What docs/benchmarks-run.md says above its keep-mark is exactly what report.py renders from
    # benchmarks/results.json, so the doc can always be written again without measuring.
    mark = _report_module().KEEP_MARK
    doc = tmp_path / "benchmarks.md"
    assert _report(str(RESULTS), "--doc", str(doc)).returncode == 0
    committed = (ROOT / "docs" / "benchmarks-run.md").read_text(encoding="utf-8")
    assert mark in committed
    assert doc.read_text(encoding="utf-8").split(mark)[0] == committed.split(mark)[0]


def test_report_keeps_what_follows_the_mark_and_replaces_the_rest(tmp_path):
    mark = _report_module().KEEP_MARK
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# stale figures\n\n{mark}\n\n## by hand\n\nkept.\n", encoding="utf-8")
    assert _report(str(RESULTS), "--doc", str(doc)).returncode == 0
    text = doc.read_text(encoding="utf-8")
    assert "stale figures" not in text
    assert text.startswith("# Benchmarks\n")
    assert text.endswith(f"{mark}\n\n## by hand\n\nkept.\n")


def test_report_of_a_file_that_is_not_results_is_one_line_and_writes_nothing(tmp_path):
    other = tmp_path / "other.json"
    other.write_text('{"rows": []}', encoding="utf-8")
    doc = tmp_path / "benchmarks.md"
    done = _report(str(other), "--doc", str(doc))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "cannot read" in done.stderr
    assert not doc.exists()


@pytest.mark.slow
def test_bare_reference_is_cold_with_the_persistent_cache_full_and_leaves_it_usable(tmp_path):
    # A fresh process whose persistent compilation cache is on: the bare compile is a real
    # one (one XLA compile, no cache hit) even once the cache holds the program, which needs
    # the cache turned off *and reset* as explorer.measure does; and the user's own compiles
    # find the cache working afterwards.
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(BENCH)!r})
        import jax, jax.numpy as jnp
        import measure
        jax.config.update("jax_compilation_cache_dir", {str(tmp_path)!r})
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
        jax.config.update("jax_enable_compilation_cache", True)

        def f(x):
            return jnp.sin(x) * 3 + jnp.cos(x)

        x = jnp.ones(7)
        first = measure.bare_jit(f, (x,))
        measure.bare_jit(f, (x,))
        jax.jit(f).lower(x).compile()  # the user's own compile fills the cache ...
        jax.clear_caches()
        before = measure._EVENTS.snapshot()[1]
        jax.jit(f).lower(x).compile()  # ... and the next one is served from it
        user_hits = measure._EVENTS.snapshot()[1] - before
        jax.clear_caches()
        after = measure.bare_jit(f, (x,))  # the cache holds f now: still a real compile
        print(first["backend_compiles"], first["cache_hits"], first["cold"], user_hits,
              after["backend_compiles"], after["cache_hits"], after["cold"],
              jax.config.jax_enable_compilation_cache)
    """)
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, **CPU_ENV}, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    (c1, h1, cold1, user_hits, c2, h2, cold2, flag) = done.stdout.split()
    assert (int(c1), int(h1), cold1) == (1, 0, "True")
    assert int(user_hits) == 1
    assert int(c2) >= 1 and int(h2) == 0 and cold2 == "True"
    assert flag == "True"


@pytest.mark.slow
def test_measuring_an_unknown_section_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "results.json"
    done = subprocess.run([sys.executable, str(BENCH / "measure.py"), "--only", "a,z",
                           "--out", str(out)], cwd=ROOT, env={**os.environ, **CPU_ENV}, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "measure: --only takes a comma-separated list from a,b,c,d, got 'a,z'"]
    assert not out.exists()
