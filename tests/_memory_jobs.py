"""Jobs for the measuring worker in the out-of-memory tests (importable, so they pickle)."""

from __future__ import annotations

import errno
import os


def allocate_with_jax(gib: float) -> float:
    """An XLA buffer of ``gib`` GiB: over the worker's cap, XLA says RESOURCE_EXHAUSTED."""
    import jax.numpy as jnp  # noqa: PLC0415

    return float((jnp.ones((int(gib * 2**30) // 4,), jnp.float32) + 1)[0])


def raise_like(kind: str) -> None:
    """Fail as the out-of-memory errors that do not come as ``MemoryError`` do."""
    if kind == "xla":
        raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 3221225472 bytes.")
    if kind == "enomem":
        raise OSError(errno.ENOMEM, os.strerror(errno.ENOMEM))
    if kind == "bad_alloc":
        raise RuntimeError("std::bad_alloc")
    raise ValueError("a plain failure")
