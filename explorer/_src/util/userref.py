"""User code named at the terminal: ``MODULE:ATTR``, imported, never typed into a page.

``MODULE`` is a dotted module importable from the current folder (as with ``python -m``) or a
path to a ``.py`` file; ``ATTR`` may be dotted (``mymodel:Sim.step``).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from .validate import describe_error


def load(ref: str, what: str = "object") -> Any:
    """Import ``MODULE:ATTR`` and return the attribute.

    Raises:
      ValueError: one line naming what is wrong (the reference's form, a module that cannot be
        imported and why, an attribute that does not exist).
    """
    if not isinstance(ref, str) or ref.count(":") != 1 or not all(ref.split(":")):
        raise ValueError(f"{what} must be given as MODULE:ATTR (for example mymodel:step), "
                         f"got {ref!r}")
    module_name, attr = ref.split(":")
    module = _import(module_name, what)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"{what} {ref}: module {module_name!r} has no attribute "
                             f"{attr!r}") from None
    return obj


def _import(name: str, what: str) -> Any:
    try:
        if name.endswith(".py"):
            path = Path(name).expanduser().resolve()
            if not path.is_file():
                raise ValueError(f"{what}: no such file {name!r}")
            spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[path.stem] = module
            spec.loader.exec_module(module)
            return module
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))  # as `python -m` does: the folder you are in
        return importlib.import_module(name)
    except ValueError:
        raise
    except ModuleNotFoundError as err:
        raise ValueError(f"{what}: cannot import {name!r}: {err}") from None
    except Exception as err:  # the user's module raised while importing: say what and where
        raise ValueError(f"{what}: importing {name!r} failed: {describe_error(err)}") from None
