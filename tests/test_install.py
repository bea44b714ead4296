"""The install: pinned exactly where we install (constraints.txt), wide where users install."""

from __future__ import annotations

import tomllib
from importlib import metadata

from _support import ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _pins(path):
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            req = Requirement(line)
            (version,) = [s.version for s in req.specifier if s.operator == "=="]
            pins.setdefault(canonicalize_name(req.name), set()).add(version)
    return pins


def _requirements() -> dict[str, Requirement]:
    extras = [r for reqs in PROJECT["optional-dependencies"].values() for r in reqs]
    return {canonicalize_name(Requirement(r).name): Requirement(r)
            for r in [*PROJECT["dependencies"], *extras]}


def test_every_dependency_is_pinned_and_the_pins_are_what_is_installed():
    pins = _pins(ROOT / "constraints.txt")
    for name in _requirements():
        assert name in pins, f"{name} is not pinned in constraints.txt (refresh it: see README)"
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    for name in ("jax", "jaxlib", "panel", "bokeh", "holoviews", "equinox", "numpy", "pandas"):
        assert installed.get(name) in pins[name], (name, installed.get(name), pins[name])


def test_pins_lie_inside_the_ranges_users_install_with():
    for path in ("constraints.txt", "constraints-py312.txt"):
        pins = _pins(ROOT / path)
        for name, req in _requirements().items():
            for version in pins.get(name, ()):
                assert req.specifier.contains(version, prereleases=True), (path, name, version)


def test_ranges_admit_the_jax_a_user_already_has():
    """A tool that measures *your* JAX must install beside it, not move it (0.10 to 0.12)."""
    requirements = _requirements()
    for name in ("jax", "jaxlib"):
        for version in ("0.10.2", "0.11.2", "0.12.0.1"):
            assert requirements[name].specifier.contains(version), (name, version)
    assert canonicalize_name("distributed") in {canonicalize_name(Requirement(r).name)
                                                 for r in PROJECT["optional-dependencies"]["cluster"]}
    assert not any(canonicalize_name(Requirement(r).name) == "distributed"
                   for r in PROJECT["dependencies"]), "Dask stays an optional extra"
