"""The house's floors: every import inside the package goes down a floor (or stays in its folder).

The README's "How the code is laid out" draws these floors; this test is what keeps them true.
It is also the one test module that names private modules: every other test reaches the explorer
through its public API and the documented hooks of ``explorer.testing`` (and the compat module,
whose tests fail when an upstream project changes what it leans on).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "explorer" / "_src"
FLOORS = {
    "util": 1, "store": 1, "pack": 2, "compat": 1, "core": 3, "export": 3, "diagnose": 4, "jobs": 4,
    "plots": 4, "offline": 4,
    "watch": 5, "dashboard": 5, "cli": 6,
}
MODULES = sorted(p for p in SRC.rglob("*.py"))


def _room(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def _imported_rooms(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    here = path.relative_to(SRC).parent.parts  # folders below _src
    rooms = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(here)[: len(here) - (node.level - 1)] if node.level > 1 else list(here)
                if node.level - 1 > len(here):
                    continue  # explorer/__init__-level import: not a room of _src
                target = base + (node.module.split(".") if node.module else [])
                if not target:  # "from .. import x" at _src level: x is the room
                    rooms.update(alias.name for alias in node.names)
                else:
                    rooms.add(target[0])
            elif node.module and node.module.startswith("explorer._src."):
                rooms.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("explorer._src."):
                    rooms.add(alias.name.split(".")[2])
    return rooms


def test_every_room_has_a_floor():
    rooms = {_room(p) for p in MODULES if p.name != "__init__.py" or p.parent != SRC}
    assert rooms <= set(FLOORS), f"rooms without a floor in this test and the README: {rooms - set(FLOORS)}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_only_go_down(path):
    if path.parent == SRC and path.name == "__init__.py":
        return
    room = _room(path)
    up = sorted(r for r in _imported_rooms(path) & set(FLOORS)
                if r != room and FLOORS[r] >= FLOORS[room])
    assert not up, f"{path.relative_to(SRC)} (floor {FLOORS[room]}) imports {up} on its floor or above"


def test_the_core_imports_no_panel():
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    code = ("import sys, explorer; explorer.measure; "
            "bad = [m for m in ('panel', 'bokeh', 'holoviews') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.slow
def test_importing_the_model_and_plots_does_not_import_panel():
    code = ("import sys, explorer._src.dashboard.model.model, explorer._src.plots; "
            "print('panel' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


TESTS = Path(__file__).resolve().parent
# A private module named in a test, as an import or inside code a test runs (compat excepted).
PRIVATE = re.compile(r"explorer\._src\.(?!compat\b)[a-z_]+|from explorer\._src import (?!compat\b)|"
                     r"from explorer import _src\b")


@pytest.mark.parametrize("path", sorted(p for p in TESTS.glob("*.py") if p.name != "test_layers.py"),
                         ids=lambda p: p.name)
def test_tests_use_the_public_api_and_the_testing_hooks(path):
    found = [f"line {i}: {line.strip()}" for i, line in
             enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if PRIVATE.search(line)]
    assert not found, ("use explorer's public API or a hook of explorer.testing (add one there, "
                       f"documented, if a test needs it): {found}")


def test_every_testing_hook_resolves():
    """The hooks are imported on first use, by name: one whose target moved fails here, not in
    the test that needs it."""
    import explorer.testing as testing  # noqa: PLC0415

    missing = []
    for name in testing.__all__:
        try:
            getattr(testing, name)
        except (AttributeError, ImportError) as err:
            missing.append(f"{name}: {err}")
    assert not missing
    documented = testing.__doc__
    assert all(f"``{name}``" in documented for name in testing.__all__), (
        [n for n in testing.__all__ if f"``{n}``" not in documented])


def test_the_library_never_imports_its_test_hooks():
    users = [str(p.relative_to(SRC)) for p in MODULES if "testing" in
             {alias.name for node in ast.walk(ast.parse(p.read_text())) if isinstance(node, ast.ImportFrom)
              and node.level and not node.module for alias in node.names}
             or re.search(r"explorer\.testing|from \.+testing import", p.read_text())]
    assert not users
