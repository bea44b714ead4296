"""Helpers shared by several test modules (plain functions; fixtures live in conftest.py)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
# Worker jobs in tests run on the CPU backend.
CPU_ENV = {"JAX_PLATFORMS": "cpu"}


def digest(path: Path) -> str:
    """sha256 of a file: equal before and after means nothing touched it."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def one_line(text: str) -> str:
    """``text`` stripped, after checking it is one line and no traceback."""
    text = text.strip()
    assert text and "\n" not in text, f"expected one line, got {text!r}"
    assert "Traceback" not in text
    return text


def cli_in_process(argv: list[str], capsys) -> tuple[int, str]:
    """Run ``pytree-explorer ARGV`` in this process; its exit status and stderr."""
    from explorer.cli import main  # noqa: PLC0415

    try:
        code = main(argv)
    except SystemExit as stop:  # argparse errors
        code = stop.code
    return code, capsys.readouterr().err


def page_error_text(err) -> str:
    """A page's uncaught JavaScript error with the first frames of its stack (a minified
    "n is not iterable" alone says nowhere)."""
    frames = (getattr(err, "stack", None) or "").splitlines()[1:9]
    return " | ".join([str(err), *(f.strip() for f in frames)])


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Jobs for the worker in tests: top-level functions of an importable module, so they pickle.
def sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def pid() -> int:
    return os.getpid()


def stderr_when_done(proc: subprocess.Popen, timeout: float, what: str) -> str:
    """``proc``'s stderr once it has exited; if it is still running after ``timeout`` seconds,
    its session (started with ``start_new_session=True``) is killed and the test fails with
    ``what`` and the end of that stderr."""
    import pytest  # noqa: PLC0415

    try:
        return proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        err = proc.communicate()[1]
        pytest.fail(f"{what}: {err[-2000:]}")


def close_trees(got, want, rtol=1e-5, atol=1e-5):
    """Same structure, shapes and values (to float32 tolerance) leaf by leaf."""
    import jax
    import numpy as np

    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


def same_as_jax_jit(fun, *args, static_argnums=(), **tolerance):
    """``explorer.jit(fun)(*args)`` checked against ``jax.jit(fun)``'s; the explorer.jit."""
    import jax

    import explorer

    j = explorer.jit(fun, static_argnums=static_argnums)
    got = j(*args)
    close_trees(got, jax.jit(fun, static_argnums=static_argnums)(*args), **tolerance)
    return j


@contextlib.contextmanager
def installed_library(root: Path, name: str, source: str) -> Iterator[ModuleType]:
    """Package ``name`` with ``source`` as its ``__init__.py``, under ``root/site-packages`` (an
    installed library to the explorer, not the user's code), imported; forgotten after."""
    lib = root / "site-packages" / name
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text(source)
    spec = importlib.util.spec_from_file_location(name, lib / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
