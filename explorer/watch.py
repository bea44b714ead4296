"""``explorer.watch``: every compilation of a whole program, ranked, with its cause.

Two ways in:

- ``with explorer.watch() as w: run_my_program()`` (the function; see
  :func:`explorer._src.watch.session.watch`).
- ``python -m explorer.watch script.py [args...]``: runs the script as ``python script.py``
  would, then prints the ranking (the same as ``pytree-explorer watch``).

``import explorer.watch`` makes Python put this module where the function was
(``explorer.watch``), so the module itself is callable: ``explorer.watch()`` stays the function
either way.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from ._src.watch import CompileRecord, Watch
from ._src.watch import watch as _watch

__all__ = ["CompileRecord", "Watch", "main", "watch"]
watch = _watch


def main(argv: list[str] | None = None) -> int:
    """``python -m explorer.watch``: see :mod:`explorer._src.watch.cli`."""
    from ._src.watch.cli import main as cli_main

    return cli_main(argv, prog="python -m explorer.watch")


class _CallableModule(types.ModuleType):
    """This module, callable as the function it replaces on the package."""

    def __call__(self, *args: Any, **kwargs: Any) -> Watch:
        return _watch(*args, **kwargs)


if __name__ == "__main__":
    sys.exit(main())
else:
    sys.modules[__name__].__class__ = _CallableModule
