"""The teaching notebooks: committed clean, in step with their source, and runnable headless.

Each notebook is executed top to bottom by nbclient in a kernel that runs *this* interpreter
(``sys.executable``, through a kernelspec written to a temporary folder, so that no other
``python3`` kernel installed on the machine can be picked up), with the notebook folder as working
directory and the results store redirected to a temporary file.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from _offline import chromium, open_offline

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
EXPECTED = ("01_pytree_compile_cost.ipynb", "02_tree_at_is_free.ipynb", "03_remedies.ipynb",
            "04_your_code.ipynb")
KERNEL_NAME = "pytree-explorer-test"
# Each notebook is meant to run in well under a minute at its default sizes (3 minutes at most on
# 2 CPU cores); one cell may not take longer than this.
CELL_TIMEOUT_S = 300


def test_all_notebooks_present():
    assert tuple(p.name for p in NOTEBOOKS) == EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_has_no_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
             and (cell.get("outputs") or cell.get("execution_count") is not None)]
    assert not dirty, (f"{path.name}: cells {dirty} carry outputs or execution counts; "
                       "strip them (jupyter nbconvert --clear-output --inplace, then jupytext --sync)")
    assert "widgets" not in nb.metadata, f"{path.name} carries saved widget state"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_code_cells_compile(path):
    """A syntax error is caught here in milliseconds, not minutes into an execution test."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            compile(cell.source, f"{path.name}[cell {i}]", "exec")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_matches_its_percent_source(path):
    """Each notebook is edited as ``NN_name.py`` (jupytext percent format) and paired with its
    ``.ipynb``; an edit made on one side only fails here. Fix with ``jupytext --sync notebooks/0*.py``.
    """
    import jupytext

    source = path.with_suffix(".py")
    assert source.is_file(), f"{path.name} has no percent source {source.name}"
    from_source = jupytext.read(source)
    committed = nbformat.read(path, as_version=4)
    assert committed.metadata.get("jupytext", {}).get("formats") == "ipynb,py:percent"
    cells = [(c.cell_type, c.source) for c in committed.cells]
    assert cells == [(c.cell_type, c.source) for c in from_source.cells], (
        f"{path.name} and {source.name} differ: run jupytext --sync notebooks/{source.name}")


def test_notebooks_never_point_at_internal_material():
    for source in sorted(NOTEBOOK_DIR.glob("0*.py")):
        text = source.read_text(encoding="utf-8")
        assert "shared/" not in text and "seed" not in text.replace("seed=", ""), source.name


@pytest.fixture(scope="session")
def kernel_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kernels")
    spec = folder / KERNEL_NAME
    spec.mkdir()
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"pytree-explorer tests ({sys.executable})",
        "language": "python",
    }))
    return folder


# Notebook 01 is executed once, by the README's own export command after the README's install
# (``test_the_readme_export_command_works_after_the_readme_install``, with the same checks on
# what it printed and on the page); executing it here too cost two minutes of the suite.
README_EXECUTES = "01_pytree_compile_cost.ipynb"


@pytest.mark.notebook
@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.name != README_EXECUTES],
                         ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path, kernel_dir, tmp_path, monkeypatch, record_property):
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    # The kernel inherits this environment: keep its measurements out of the user's store.
    monkeypatch.setenv("PYTREE_EXPLORER_DB", str(tmp_path / "results.sqlite"))
    nb = nbformat.read(path, as_version=4)
    km = KernelManager(kernel_name=KERNEL_NAME,
                       kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernel_dir)]))
    client = NotebookClient(nb, km=km, timeout=CELL_TIMEOUT_S, allow_errors=False,
                            resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    started = time.perf_counter()
    try:
        client.execute()
        elapsed = time.perf_counter() - started
    finally:
        # The client shuts down only a kernel it started itself: this one (and the measuring
        # worker it started) would otherwise stay until the test process ends, three at once.
        km.shutdown_kernel(now=True)
    record_property("seconds", round(elapsed, 1))
    print(f"{path.name}: {elapsed:.1f} s")

    errors = [out for cell in nb.cells if cell.cell_type == "code"
              for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    assert not errors
    # Every notebook prints the results store it uses: it must be the redirected one.
    printed = "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                      for out in cell.get("outputs", []) if out.get("output_type") == "stream")
    assert str(tmp_path / "results.sqlite") in printed

    # Exported as the README says (the offline template), the page loads no script or
    # stylesheet from another host: its plots show without a network.
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(extra_template_basedirs=[str(NOTEBOOK_DIR)], template_name="offline")
    page, _ = exporter.from_notebook_node(nb)
    external = re.findall(r'<(?:script|link)\b[^>]*(?:src|href)="(?:https?:)?//[^"]*"', page)
    assert not external, external
    # Panel's stylesheets too (its widgets' look). A script address may stay as text: the
    # loader of a widget whose JavaScript is inlined (the dashboard's Tabulator) lists where it
    # would come from, to skip it; opened offline below, the page asks for none of it.
    assert not re.findall(r"cdn\.holoviz\.org/[^\"'\s]*\.css", page)
    if "hv.extension" in "".join(c.source for c in nb.cells):
        assert "Bokeh.embed" in page  # the plots' JavaScript is in the page itself
    if chromium() is not None:  # opened with the network cut off, it asks nothing of it
        saved = tmp_path / path.with_suffix(".html").name
        saved.write_text(page, encoding="utf-8")
        asked, _, _ = open_offline(saved)
        assert asked == [], asked


@pytest.mark.notebook
@pytest.mark.timeout(600)
def test_a_notebook_that_used_the_worker_shuts_down_without_a_traceback(tmp_path):
    """``jupyter nbconvert --execute`` of a notebook whose measurements ran in the worker (its
    own and the dashboard's shared one, alive until the kernel stops) prints no traceback when
    the kernel shuts down: a ``KeyboardInterrupt`` from the worker once did."""
    kernels = tmp_path / "jupyter" / "kernels" / KERNEL_NAME
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "pytree-explorer tests", "language": "python"}))
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import explorer\n"
            "rows = explorer.sweep('decay', ['array'], n_states=[2], horizons=[5],\n"
            "                      targets=['loss'])\n"
            "print('measured', len(rows))"),
        nbformat.v4.new_code_cell(
            "from explorer.testing import shared_executor\n"
            "print('shared worker', shared_executor().submit(abs, -3).result(timeout=300))"),
    ]
    source = tmp_path / "uses_worker.ipynb"
    nbformat.write(nb, source)
    env = {**os.environ, "JUPYTER_PATH": str(tmp_path / "jupyter"),
           "PYTREE_EXPLORER_DB": str(tmp_path / "results.sqlite")}
    done = subprocess.run(
        [sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute",
         f"--ExecutePreprocessor.kernel_name={KERNEL_NAME}", "--output", "executed",
         str(source)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr
    executed = nbformat.read(tmp_path / "executed.ipynb", as_version=4)
    printed = "".join(out.get("text", "") for cell in executed.cells
                      for out in cell.get("outputs", []))
    assert "measured 1" in printed and "shared worker 3" in printed, printed
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr


def test_the_offline_template_carries_panels_stylesheets_in_the_page():
    """A Panel output names its stylesheets on Panel's CDN (as the notebooks' did, four of
    them): exported with ``notebooks/offline``, each is the stylesheet itself."""
    import panel as pn
    from nbconvert import HTMLExporter

    cdn = f"https://cdn.holoviz.org/panel/{pn.__version__}/dist/css/loading.css"
    doc = json.dumps({"roots": [{"type": "object", "name": "ImportedStyleSheet",
                                 "attributes": {"url": f"{cdn}?v={pn.__version__}"}}]})
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("pn.pane.Markdown('hi')")
    cell.outputs = [nbformat.v4.new_output(
        "display_data", data={"text/html": f'<script type="application/json">{doc}</script>',
                              "text/plain": "Markdown(str)"})]
    nb.cells = [cell]
    exporter = HTMLExporter(extra_template_basedirs=[str(NOTEBOOK_DIR)], template_name="offline")
    page, _ = exporter.from_notebook_node(nb)
    assert "cdn.holoviz.org" not in page
    assert "data:text/css;base64," in page


def _readme_blocks(heading: str, needle: str) -> list[str]:
    """The commands of the README's bash block under ``heading`` that mentions ``needle``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}", 1)[1].split("\n## ", 1)[0]
    blocks = [b for b in re.findall(r"```bash\n(.*?)```", section, re.S) if needle in b]
    assert len(blocks) == 1, f"expected one bash block with {needle!r} under {heading!r}"
    return [line for line in blocks[0].splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.notebook
@pytest.mark.timeout(1800)
def test_the_readme_export_command_works_after_the_readme_install(tmp_path):
    """The README's install (the dashboard's command, up to ``panel serve``), then its handout
    export, as written, in a copy of the repository: the page is written and, opened offline,
    asks nothing of the network. After the install alone nbconvert once failed with "No such
    kernel named python3"."""
    import shutil

    (install,) = _readme_blocks("Run it", "panel serve")
    install = install.split("&& panel serve", 1)[0].strip()
    export = _readme_blocks("Notebooks", "nbconvert")
    repo = tmp_path / "repo"
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    for name in tracked:
        if name.startswith(("explorer/", "notebooks/")) or name in (
                "pyproject.toml", "constraints.txt", "README.md", "LICENSE"):
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    # As a user's shell would be: no test environment active, the store a fresh file.
    outer = Path(sys.prefix) / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if Path(p) != outer)
    env["PYTREE_EXPLORER_DB"] = str(tmp_path / "results.sqlite")
    python = shutil.which("python3", path=env["PATH"]) or sys.executable
    script = " && ".join([install.replace("python3 ", f"{python} ", 1), *export])
    done = subprocess.run(["bash", "-c", script], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=1700)
    assert done.returncode == 0, done.stderr[-3000:]
    page = repo / "notebooks" / README_EXECUTES.replace(".ipynb", ".html")
    text = page.read_text(encoding="utf-8")
    assert "Bokeh.embed" in text  # the plots' JavaScript is in the page itself
    # The checks of ``test_notebook_runs_top_to_bottom``, which leaves this notebook to this
    # test: ``--execute`` stops at a cell's error (the return code above); the store the
    # notebook printed is the one this test named; no script or Panel stylesheet from a CDN.
    assert str(env["PYTREE_EXPLORER_DB"]) in html.unescape(text)
    assert not re.findall(r'<(?:script|link)\b[^>]*(?:src|href)="(?:https?:)?//[^"]*"', text)
    assert not re.findall(r"cdn\.holoviz\.org/[^\"'\s]*\.css", text)
    if chromium() is not None:
        asked, figures, _ = open_offline(page)
        assert asked == [] and figures >= 4, (asked, figures)
