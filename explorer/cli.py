"""The command line, ``pytree-explorer``, callable from Python: ``explorer.cli.main(["sweep", ...])``
returns the exit status the command would (0, 1, 2 for bad input, 130 when interrupted).
``python -m explorer`` runs it too, where the script is not on ``PATH``."""

from ._src.cli import main as main

__all__ = ["main"]
