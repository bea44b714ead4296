"""The house's floors: every import inside the package goes down a floor (or stays in its folder).

The README's "How the code is laid out" draws these floors; this test is what keeps them true.
"""

from __future__ import annotations

import ast
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
