"""The dashboard's "Your program" tab: runs kept by ``pytree-explorer watch --store``, ranked.

The model part is driven without a browser from a real watched program stored the way the CLI
stores it; the page is clicked through in ``test_dashboard_browser``-style at the end.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest
from _support import CPU_ENV, ROOT

import explorer
from explorer import ExplorerModel
from explorer import Store
from explorer.testing import WatchedPrograms
from explorer.testing import load_watched as load
from explorer.testing import save_watched as save

N = 60


def _program():
    """Three jitted functions: one per-name (slow), one clean, one compiled again each call."""

    @jax.jit
    def per_name(params, x):
        return sum(jnp.sum((params[f"w{i}"] * x - 1.0) ** 2) for i in range(N))

    @jax.jit
    def clean(w, x):
        return w - 0.1 * jnp.mean(w * x)

    @jax.jit
    def reshaped(batch):
        return batch / jnp.sum(batch)

    params = {f"w{i}": jnp.float32(i) for i in range(N)}
    for k in range(3):
        per_name(params, jnp.ones(4))
        clean(jnp.ones(8), jnp.ones(8))
        reshaped(jnp.ones(k + 2))


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A store holding one watched run of :func:`_program`, and that run's watch."""
    path = tmp_path_factory.mktemp("watched") / "results.sqlite"
    with explorer.watch(top=0.05) as w:
        _program()
    assert w.findings  # made (as the CLI makes them, to print) before they are stored
    save(w, str(path), program="train.py", argv=["train.py", "--epochs", "3"], status=0)
    return path, w


def test_the_tab_ranks_the_stored_run_as_the_watch_did(stored):
    path, w = stored
    model = ExplorerModel(store=str(path))
    assert model.watched.watch_ranking is None  # nothing read until the tab opens
    assert model.watched.load() == 1
    ranking = model.watched.watch_ranking
    summary = w.summary()
    assert list(ranking["name"]) == list(summary["name"])
    assert list(ranking["compiles"]) == list(summary["compiles"])
    assert ranking["compile_s"].is_monotonic_decreasing
    assert list(ranking["where"]) == list(summary["where"])
    assert f"{len(w.compiles)} compilation(s)" in model.watched.watch_headline
    label, = model.watched.param.watch_run.names
    assert "train.py --epochs 3" in label


def test_selecting_a_function_shows_its_findings_and_why_it_compiled_again(stored):
    path, w = stored
    model = ExplorerModel(store=str(path))
    model.watched.load()
    ranking = model.watched.watch_ranking
    assert model.watched.watch_selected == 0  # the slowest, selected when the run is shown
    top = ranking.iloc[0]["name"].replace("_", "\\_")
    assert model.watched.watch_findings.startswith(f"**{top}**")
    model.watched.watch_selected = int(ranking.index[ranking["name"] == "per_name"][0])
    assert "per\\_name" in model.watched.watch_findings
    assert "per-leaf-repetition" in model.watched.watch_findings
    again = int(ranking.index[ranking["name"] == "reshaped"][0])
    model.watched.watch_selected = again
    text = model.watched.watch_findings
    assert "3 compile(s)" in text and "Compiled again" in text and "shape changed" in text


def test_an_empty_or_foreign_store_says_so_and_is_left_alone(tmp_path):
    model = ExplorerModel(store=str(tmp_path / "results.sqlite"))
    assert model.watched.load() == 0
    assert "No watched program in" in model.watched.watch_headline
    assert "pytree-explorer watch --store" in model.watched.watch_headline
    assert not (tmp_path / "results.sqlite").exists()  # reading never makes the file

    foreign = tmp_path / "notes.sqlite"
    foreign.write_bytes(b"not a database at all, and not ours" * 50)
    before = foreign.read_bytes()
    part = WatchedPrograms(store=Store(foreign))
    assert part.load() == 0 and part.watch_run is None and part.watch_ranking is None
    assert part.watch_headline.startswith(f"Could not read watched runs from {foreign}")
    assert foreign.read_bytes() == before


def test_names_and_messages_from_the_program_are_text_not_markup(stored, tmp_path):
    path, _ = stored
    copy = tmp_path / "results.sqlite"
    copy.write_bytes(path.read_bytes())
    con = sqlite3.connect(copy)
    con.execute("UPDATE watch_compiles SET name = '<img src=x onerror=alert(1)>' "
                "WHERE name = 'clean'")
    con.execute("UPDATE watch_findings SET name = '<img src=x onerror=alert(1)>' "
                "WHERE name = 'clean'")
    con.commit()
    con.close()
    model = ExplorerModel(store=str(copy))
    model.watched.load()
    ranking = model.watched.watch_ranking
    model.watched.watch_selected = int(ranking.index[ranking["name"].str.startswith("<img")][0])
    assert "<img" not in model.watched.watch_findings
    assert "&lt;img" in model.watched.watch_findings


@pytest.mark.browser
def test_the_your_program_tab_shows_a_run_the_cli_stored(page, served_explorer, tmp_path):
    """``pytree-explorer watch --store`` into the served page's store, then the tab: the plot,
    the table, and a selected row's findings, clicked through twice."""
    from playwright.sync_api import expect  # noqa: PLC0415
    from test_dashboard_browser import LOAD_S, _console_errors, _open, _shot  # noqa: PLC0415

    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""\
        import jax, jax.numpy as jnp

        @jax.jit
        def per_name(params, x):
            return sum(jnp.sum((params[f"w{{i}}"] * x - 1.0) ** 2) for i in range({N}))

        @jax.jit
        def reshaped(batch):
            return batch / jnp.sum(batch)

        params = {{f"w{{i}}": jnp.float32(i) for i in range({N})}}
        for k in range(3):
            per_name(params, jnp.ones(4))
            reshaped(jnp.ones(k + 2))
        """))
    done = subprocess.run(
        [sys.executable, "-m", "explorer.watch", "--store", str(served_explorer.db),
         str(script)], cwd=tmp_path, env={**os.environ, **CPU_ENV, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    errors = _console_errors(page)
    _open(page, served_explorer.url)
    page.locator(".bk-tab", has_text="Your program").click()
    expect(page.locator(".bk-Figure")).to_have_count(5, timeout=LOAD_S)  # the ranking's
    # The slowest function's findings (which of the two is slowest depends on the machine).
    findings = page.get_by_text(re.compile(r"\d+ compile\(s\), XLA compile")).first
    expect(findings).to_be_visible(timeout=LOAD_S)
    rows = page.locator(".tabulator-row", has_text="reshaped")
    expect(rows).to_have_count(1, timeout=LOAD_S)
    rows.first.click()
    expect(page.get_by_text("Compiled again", exact=True)).to_be_visible(timeout=LOAD_S)
    page.locator(".tabulator-row", has_text="per_name").first.click()
    expect(page.get_by_text("per-leaf-repetition").first).to_be_visible(timeout=LOAD_S)
    page.get_by_role("button", name="Reload").click()
    expect(findings).to_be_visible(timeout=LOAD_S)
    _shot(page, "your-program-tab.png")
    assert errors == []
